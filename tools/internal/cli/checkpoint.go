package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dranode/dranode/checkpoint"
	"github.com/dranode/dranode/checkpoint/durable"
	"github.com/dranode/dranode/checkpoint/kubeletcompat"
	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/tools/internal/ckptfmt"
	"github.com/dranode/dranode/tools/internal/regularfile"
)

// Formats checkpoint inspect recognises.
const (
	fmtDranodeFile    = "dranode-file"
	fmtDranodeJournal = "dranode-journal"
	fmtDRAManager     = "kubelet-dra-manager-state"
	fmtDeviceManager  = "kubelet-device-manager-checkpoint"
)

// maxMigrateFileBytes bounds one journal file migrate copies for its
// backup; claimcache.Open reads each of them whole afterwards anyway.
const maxMigrateFileBytes = 1 << 30

// ErrNotMigratable: migrate was given something it has no migrations for.
var ErrNotMigratable = errors.New("not a dranode file dranodectl can migrate")

// checkpointReport is what inspect and verify print.
type checkpointReport struct {
	Path    string `json:"path"`
	Format  string `json:"format"`
	Kind    string `json:"kind,omitempty"`
	Version string `json:"version,omitempty"`
	// Supported is the newest version of Kind this dranodectl reads, when it
	// knows the kind.
	Supported int    `json:"supportedVersion,omitempty"`
	Checksum  string `json:"checksum"`
	Note      string `json:"note,omitempty"`
	// Recovery is a claim record's recovery state (damage now, copies of
	// damaged data, uncertain entries); nil when there is none.
	Recovery *recoveryReport `json:"recovery,omitempty"`

	// Dranode is the shape inspect prints a dranode file in; the records
	// are streamed from the file (see dranodeBody), never all held, so it is
	// only set by whoever reads that output back.
	Dranode       *ckptfmt.Parsed                        `json:"dranode,omitempty"`
	Journal       *ckptfmt.Journal                       `json:"journal,omitempty"`
	DRAManager    *kubeletcompat.DRAManagerState         `json:"draManagerState,omitempty"`
	DeviceManager *kubeletcompat.DeviceManagerCheckpoint `json:"deviceManagerCheckpoint,omitempty"`

	contents bool // inspect prints the contents, verify only the summary
}

func checkpointCommand() *cobra.Command {
	inspect := leaf(&cobra.Command{
		Use:   "inspect PATH",
		Short: "recognise a state file by its content, verify its checksums and print it",
		Long: `PATH is one of:
  - a dranode state file (checkpoint File, journal snapshot or log);
  - a dranode journal directory, such as the agent's claim record;
  - the kubelet's dra_manager_state;
  - the kubelet's kubelet_internal_checkpoint (current or pre-1.20 format).
The format is told by the content, not the name. A corrupt file or one written
by a newer format version makes the command fail. Anything but a regular file
or a directory (a device, a FIFO) is refused without being opened.`,
		Args: exactArgs("PATH"),
	}, func(c *cobra.Command, args []string, format outputFormat) error {
		return runCheckpointRead(c.Context(), c.OutOrStdout(), args[0], format, true)
	})

	verify := leaf(&cobra.Command{
		Use:   "verify PATH",
		Short: "check a state file's checksums and version without printing its contents",
		Args:  exactArgs("PATH"),
	}, func(c *cobra.Command, args []string, format outputFormat) error {
		return runCheckpointRead(c.Context(), c.OutOrStdout(), args[0], format, false)
	})

	migrate := leaf(&cobra.Command{
		Use:   "migrate PATH",
		Short: "upgrade a dranode claim record to the current format version, keeping a backup",
		Long: `PATH is a claim record journal directory (or a file in it). The directory is
first copied, durably, to PATH.bak-<UTC timestamp>; then the record is opened
with the current code, which rewrites older versions. A corrupt record or one of
a newer version is refused and left untouched.`,
		Args: exactArgs("PATH"),
	}, func(c *cobra.Command, args []string, format outputFormat) error {
		return runCheckpointMigrate(c.Context(), c.OutOrStdout(), args[0], format)
	})

	return group(&cobra.Command{
		Use:   "checkpoint",
		Short: "inspect, verify and migrate state files (dranode's, the kubelet's)",
	}, inspect, verify, migrate)
}

func runCheckpointRead(ctx context.Context, stdout io.Writer, path string, format outputFormat, contents bool) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	rep := &checkpointReport{Path: path, Checksum: "ok", contents: contents}
	var body *dranodeBody
	if st.IsDir() {
		if err := notAJournal(path); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		err = readJournalReport(ctx, rep, path)
		rec, rerr := claimRecordRecovery(ctx, rep, path, err)
		rep.Recovery = rec
		if err == nil {
			err = rerr
		}
	} else {
		f, oerr := openCheckpointFile(path)
		if oerr != nil {
			return fmt.Errorf("checkpoint: %w", oerr)
		}
		defer f.Close()
		body, err = recognise(ctx, rep, path, f, f.Size())
	}
	if rep.Format == "" {
		return err // not recognised: nothing to print
	}
	if err != nil {
		rep.Checksum = "FAILED"
	}
	if !contents {
		body, rep.Journal, rep.DRAManager, rep.DeviceManager = nil, nil, nil, nil
	}
	if perr := renderCheckpoint(ctx, stdout, format, rep, body); perr != nil && err == nil {
		err = perr
	}
	return err
}

// notAJournal refuses a directory without a journal's files, such as the
// agent's stateDir, naming what in it to point at instead: read as a
// journal it would only be reported corrupt, which sends the operator
// looking for damage that is not there.
func notAJournal(dir string) error {
	if ckptfmt.IsJournalDir(dir) {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var journals, files []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		switch {
		case e.IsDir():
			if ckptfmt.IsJournalDir(p) {
				journals = append(journals, p)
			}
		case e.Type().IsRegular() && e.Name() != "handover.lock":
			files = append(files, p)
		}
	}
	msg := fmt.Sprintf("%s is a directory but not a journal (no snapshot, no log.N files)", dir)
	switch {
	case len(journals) > 0:
		return fmt.Errorf("%s; it holds the journal %s: point at that (the agent's claim record is stateDir/claims.record)", msg, strings.Join(journals, ", "))
	case len(files) > 0:
		return fmt.Errorf("%s; point at one of its files: %s", msg, strings.Join(files, ", "))
	}
	return fmt.Errorf("%s and holds no state file; the agent's claim record is stateDir/claims.record", msg)
}

// openCheckpointFile opens a state file that is not a directory, refusing
// before opening it anything but a regular file: a device such as /dev/zero
// would never end, a FIFO without a writer would block.
func openCheckpointFile(path string) (*regularfile.File, error) {
	f, err := regularfile.Open(path)
	var nr *regularfile.NotRegularError
	if errors.As(err, &nr) {
		nr.Want = "a regular file or a directory"
	}
	return f, err
}

// recognise tells the format of the file of size bytes in r and verifies it,
// filling rep (whose Format stays empty when the format is not one
// dranodectl knows). A dranode file is read as a stream and comes back as
// the body inspect prints its records from; kubelet checkpoints, which
// cannot be streamed, are read whole up to kubeletcompat.MaxCheckpointSize. path
// names the file in the report and errors.
func recognise(ctx context.Context, rep *checkpointReport, path string, r io.ReaderAt, size int64) (*dranodeBody, error) {
	body := &dranodeBody{r: r, size: size}
	sum, err := ckptfmt.Scan(ctx, r, size, body.measure)
	switch {
	case errors.Is(err, ckptfmt.ErrNotDranode):
		return nil, readKubelet(rep, path, r, size)
	case sum == nil:
		return nil, err
	}
	body.sum = sum
	rep.Format = fmtDranodeFile
	if sum.Header.Kind != "" {
		rep.Kind, rep.Version = sum.Header.Kind, fmt.Sprint(sum.Header.Version)
	}
	if err != nil {
		return body, corruptError(path, err)
	}
	if sum.TornTail != nil {
		rep.Note = fmt.Sprintf("torn last append at byte %d (a crash cut it short; readers ignore it)", sum.TornTail.Offset)
	}
	return body, checkVersion(rep, path, []int{sum.Header.Version})
}

// corruptError turns what ckptfmt found wrong in path into the
// *checkpoint.CorruptError every dranode reader reports, naming the file
// (the journal's file, for a directory) and the offset. Other errors (I/O,
// the context ending) are only given the path.
func corruptError(path string, err error) error {
	var ce *ckptfmt.CorruptError
	if !errors.As(err, &ce) {
		if strings.Contains(err.Error(), path) {
			return err
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	var fe *ckptfmt.FileError
	if errors.As(err, &fe) {
		path = filepath.Join(path, fe.File)
	}
	return &checkpoint.CorruptError{Path: path, Offset: ce.Offset, Reason: ce.Reason}
}

func readJournalReport(ctx context.Context, rep *checkpointReport, dir string) error {
	j, err := ckptfmt.ReadJournal(ctx, dir)
	rep.Format, rep.Journal = fmtDranodeJournal, j
	if j != nil && j.Kind != "" {
		rep.Kind = j.Kind
		rep.Version = joinInts(j.Versions)
	}
	if err != nil {
		return corruptError(dir, err)
	}
	if n := len(j.Files); n > 0 {
		if tt := j.Files[n-1].TornTail; tt != nil {
			rep.Note = fmt.Sprintf("%s: torn last append at byte %d (a crash cut it short; readers ignore it)", j.Files[n-1].Name, tt.Offset)
		}
	}
	return checkVersion(rep, dir, j.Versions)
}

// checkVersion refuses versions newer than what this build's modules write,
// for the kinds it knows.
func checkVersion(rep *checkpointReport, path string, versions []int) error {
	supported, known := supportedVersion(rep.Kind)
	if !known {
		if rep.Note == "" {
			rep.Note = fmt.Sprintf("kind %q is not one dranodectl knows: frames and checksums verified, versions not judged", rep.Kind)
		}
		return nil
	}
	rep.Supported = supported
	for _, v := range versions {
		if v > supported {
			return &checkpoint.NewerVersionError{Path: path, Kind: rep.Kind, Version: v, Supported: supported}
		}
	}
	return nil
}

// supportedVersion returns the newest format version dranodectl reads for a
// kind: for the claim record, the one the claimcache module it is built with
// writes, so that the tool never disagrees with the agent.
func supportedVersion(kind string) (int, bool) {
	if kind != claimcache.Kind {
		return 0, false
	}
	return claimcache.FormatVersion, true
}

// readKubelet reads a kubelet checkpoint whole (the kubelet's formats are
// single JSON documents) and tells the DRA manager's from the device
// manager's.
func readKubelet(rep *checkpointReport, path string, r io.ReaderAt, size int64) error {
	if size > kubeletcompat.MaxCheckpointSize {
		return fmt.Errorf("%s: %w: neither a dranode file (no DRN magic) nor a kubelet checkpoint: %w", path, kubeletcompat.ErrUnknownFormat,
			&regularfile.TooLargeError{Path: path, Size: size, Limit: kubeletcompat.MaxCheckpointSize, What: "kubelet checkpoint"})
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(io.NewSectionReader(r, 0, size), data); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	var probe struct {
		Data json.RawMessage
	}
	err := json.Unmarshal(data, &probe)
	if err != nil && bytes.HasPrefix(bytes.TrimSpace(data), []byte(`{"Data":`)) {
		// A kubelet checkpoint cut short or garbled: let the reader of
		// the layout it starts like say what is wrong with it.
		probe.Data = json.RawMessage(`{}`)
		if bytes.HasPrefix(bytes.TrimSpace(data), []byte(`{"Data":"`)) {
			probe.Data = json.RawMessage(`""`)
		}
	} else if err != nil || len(probe.Data) == 0 {
		return fmt.Errorf("%s: %w: neither a dranode file (no DRN magic) nor a kubelet checkpoint (no JSON object with Data)", path, kubeletcompat.ErrUnknownFormat)
	}
	// The DRA manager stores its data as a JSON string, the device manager
	// as an object: that tells the two apart before any checksum is checked.
	if probe.Data[0] == '"' {
		rep.Format = fmtDRAManager
		st, err := kubeletcompat.DecodeDRAManagerState(data)
		if err != nil {
			return namePath(err, path)
		}
		rep.Kind, rep.Version = kubeletcompat.DRACheckpointKind, kubeletcompat.DRACheckpointAPIVersion
		rep.DRAManager = &st
		return nil
	}
	rep.Format = fmtDeviceManager
	cp, err := kubeletcompat.DecodeDeviceManagerCheckpoint(data)
	if err != nil {
		return namePath(err, path)
	}
	rep.Version = cp.Format.String()
	rep.DeviceManager = &cp
	return nil
}

// namePath puts path into the errors kubeletcompat's Decode functions
// return for bytes, which name no file ("corrupt data at offset 0").
func namePath(err error, path string) error {
	var ce *checkpoint.CorruptError
	var ue *kubeletcompat.UnknownFormatError
	switch {
	case errors.As(err, &ce) && ce.Path == "":
		ce.Path = path
	case errors.As(err, &ue) && ue.Path == "":
		ue.Path = path
	default:
		return fmt.Errorf("%s: %w", path, err)
	}
	return err
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

func (r *checkpointReport) table(w *tabwriter.Writer) {
	fmt.Fprintf(w, "PATH\t%s\n", r.Path)
	fmt.Fprintf(w, "FORMAT\t%s\n", r.Format)
	if r.Kind != "" {
		fmt.Fprintf(w, "KIND\t%s\n", r.Kind)
	}
	if r.Version != "" {
		fmt.Fprintf(w, "VERSION\t%s\n", r.Version)
	}
	if r.Supported > 0 {
		fmt.Fprintf(w, "SUPPORTED VERSION\t%d\n", r.Supported)
	}
	fmt.Fprintf(w, "CHECKSUM\t%s\n", r.Checksum)
	if r.Note != "" {
		fmt.Fprintf(w, "NOTE\t%s\n", r.Note)
	}
	if r.Recovery != nil {
		r.Recovery.table(w)
	}
	if !r.contents {
		return
	}
	switch {
	case r.Journal != nil:
		fmt.Fprintln(w)
		fmt.Fprintln(w, "FILE\tGENERATION\tVERSION\tRECORDS")
		for _, f := range r.Journal.Files {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\n", f.Name, f.Generation, f.Header.Version, f.RecordCount)
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "KEY\tVALUE")
		keys := make([]string, 0, len(r.Journal.State))
		for k := range r.Journal.State {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "%s\t%s\n", k, r.Journal.State[k])
		}
	case r.DRAManager != nil:
		fmt.Fprintln(w)
		fmt.Fprintln(w, "CLAIM\tUID\tPODS\tDRIVER\tPOOL/DEVICE\tCDI DEVICE IDS")
		for _, c := range r.DRAManager.Claims {
			drivers := make([]string, 0, len(c.Drivers))
			for d := range c.Drivers {
				drivers = append(drivers, d)
			}
			sort.Strings(drivers)
			if len(drivers) == 0 {
				fmt.Fprintf(w, "%s/%s\t%s\t%d\t-\t-\t-\n", c.Namespace, c.Name, c.UID, len(c.PodUIDs))
			}
			for _, d := range drivers {
				for _, dev := range c.Drivers[d].Devices {
					fmt.Fprintf(w, "%s/%s\t%s\t%d\t%s\t%s/%s\t%s\n", c.Namespace, c.Name, c.UID, len(c.PodUIDs), d, dev.PoolName, dev.DeviceName, strings.Join(dev.CDIDeviceIDs, ","))
				}
			}
		}
	case r.DeviceManager != nil:
		fmt.Fprintln(w)
		fmt.Fprintln(w, "POD\tCONTAINER\tRESOURCE\tDEVICES (NUMA:IDS)")
		for _, en := range r.DeviceManager.Entries {
			nodes := make([]int64, 0, len(en.DevicesPerNUMA))
			for n := range en.DevicesPerNUMA {
				nodes = append(nodes, n)
			}
			sort.Slice(nodes, func(i, j int) bool { return nodes[i] < nodes[j] })
			var parts []string
			for _, n := range nodes {
				parts = append(parts, fmt.Sprintf("%d:%s", n, strings.Join(en.DevicesPerNUMA[n], ",")))
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", en.PodUID, en.ContainerName, en.ResourceName, strings.Join(parts, " "))
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "REGISTERED RESOURCE\tDEVICES")
		res := make([]string, 0, len(r.DeviceManager.RegisteredDevices))
		for k := range r.DeviceManager.RegisteredDevices {
			res = append(res, k)
		}
		sort.Strings(res)
		for _, k := range res {
			fmt.Fprintf(w, "%s\t%s\n", k, strings.Join(r.DeviceManager.RegisteredDevices[k], ","))
		}
	}
}

// migrateReport is what migrate prints.
type migrateReport struct {
	Path        string `json:"path"`
	Kind        string `json:"kind"`
	FromVersion string `json:"fromVersion"`
	ToVersion   int    `json:"toVersion"`
	Backup      string `json:"backup,omitempty"`
	Changed     bool   `json:"changed"`
	Claims      int    `json:"claims"`
}

func (r *migrateReport) table(w *tabwriter.Writer) {
	fmt.Fprintln(w, "PATH\tKIND\tFROM\tTO\tCHANGED\tCLAIMS\tBACKUP")
	backup := r.Backup
	if backup == "" {
		backup = "-"
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%t\t%d\t%s\n", r.Path, r.Kind, r.FromVersion, r.ToVersion, r.Changed, r.Claims, backup)
}

func runCheckpointMigrate(ctx context.Context, stdout io.Writer, path string, format outputFormat) error {
	dir := path
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("checkpoint migrate: %w", err)
	}
	if !st.IsDir() {
		dir = filepath.Dir(dir)
	}
	if !ckptfmt.IsJournalDir(dir) {
		return fmt.Errorf("checkpoint migrate %s: %w: only dranode claim records (journal directories) have migrations", path, ErrNotMigratable)
	}
	rep := &checkpointReport{Path: dir}
	if err := readJournalReport(ctx, rep, dir); err != nil {
		return fmt.Errorf("checkpoint migrate refused, nothing changed: %w", err)
	}
	if rep.Kind != claimcache.Kind {
		return fmt.Errorf("checkpoint migrate %s: kind %q: %w", dir, rep.Kind, ErrNotMigratable)
	}
	out := &migrateReport{Path: dir, Kind: rep.Kind, FromVersion: rep.Version, ToVersion: rep.Supported, Claims: len(rep.Journal.State)}
	if len(rep.Journal.Versions) == 1 && rep.Journal.Versions[0] == rep.Supported {
		return render(stdout, format, out) // already current: no backup, nothing written
	}
	release, err := holdJournalLock(filepath.Join(dir, "lock"))
	if err != nil {
		return fmt.Errorf("checkpoint migrate refused, nothing changed: %w", err)
	}
	backup := fmt.Sprintf("%s.bak-%s", filepath.Clean(dir), time.Now().UTC().Format("20060102T150405.000000000Z"))
	err = copyDirDurably(ctx, dir, backup)
	// claimcache.Open takes the lock itself; a writer that starts in
	// between makes it fail with ErrLocked, and the record stays as it was.
	release()
	if err != nil {
		return fmt.Errorf("checkpoint migrate: backup (the record is untouched): %w", err)
	}
	out.Backup = backup
	// From here on the migration runs to its end: claimcache.Open is one
	// crash-safe rewrite, and stopping halfway would gain nothing.
	bootID, err := claimcache.ReadBootID()
	if err != nil {
		// The boot only decides staleness at runtime; migration rewrites
		// every entry as stored, whatever boot this is.
		bootID = "dranodectl-migrate"
	}
	c, _, err := claimcache.Open(dir, bootID)
	if err != nil {
		return fmt.Errorf("checkpoint migrate: open with the current format (backup kept at %s): %w", backup, err)
	}
	n := c.Len()
	if err := c.Close(); err != nil {
		return fmt.Errorf("checkpoint migrate: close (backup kept at %s): %w", backup, err)
	}
	after := &checkpointReport{Path: dir}
	if err := readJournalReport(context.WithoutCancel(ctx), after, dir); err != nil {
		return fmt.Errorf("checkpoint migrate: re-reading the migrated record (backup kept at %s): %w", backup, err)
	}
	if len(after.Journal.Versions) != 1 || after.Journal.Versions[0] != rep.Supported {
		return fmt.Errorf("checkpoint migrate: record still holds versions %v after migration (backup kept at %s)", after.Journal.Versions, backup)
	}
	out.Changed, out.Claims = true, n
	return render(stdout, format, out)
}

// copyDirDurably copies the regular files of src (not the lock file) into the
// new directory dst, each written durably, and syncs dst's parent, so that
// the backup exists on disk before the original is touched. It stops, the
// original untouched, when ctx ends.
func copyDirDurably(ctx context.Context, src, dst string) error {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, en := range entries {
		if !en.Type().IsRegular() || en.Name() == "lock" {
			continue
		}
		if err := context.Cause(ctx); err != nil {
			return err
		}
		data, err := regularfile.ReadAll(filepath.Join(src, en.Name()), maxMigrateFileBytes, "journal file")
		if err != nil {
			return err
		}
		if err := durable.WriteFile(filepath.Join(dst, en.Name()), data, 0o600); err != nil {
			return err
		}
	}
	return durable.SyncDir(filepath.Dir(dst))
}
