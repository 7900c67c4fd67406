package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/dranode/dranode/checkpoint"
	"github.com/dranode/dranode/checkpoint/kubeletcompat"
	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/tools/internal/ckptfmt"
)

// Formats checkpoint inspect recognises.
const (
	fmtDranodeFile    = "dranode-file"
	fmtDranodeJournal = "dranode-journal"
	fmtDRAManager     = "kubelet-dra-manager-state"
	fmtDeviceManager  = "kubelet-device-manager-checkpoint"
)

// claimcacheKind is the kind claimcache stores its journal under.
const claimcacheKind = "dranode.io/claimcache"

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

	Dranode       *ckptfmt.Parsed                        `json:"dranode,omitempty"`
	Journal       *ckptfmt.Journal                       `json:"journal,omitempty"`
	DRAManager    *kubeletcompat.DRAManagerState         `json:"draManagerState,omitempty"`
	DeviceManager *kubeletcompat.DeviceManagerCheckpoint `json:"deviceManagerCheckpoint,omitempty"`

	contents bool // inspect prints the contents, verify only the summary
}

func checkpointCommand() *command {
	return &command{
		name:  "checkpoint",
		short: "inspect, verify and migrate state files (dranode's, the kubelet's)",
		children: []*command{
			{
				name: "inspect", usage: "PATH",
				short: "recognise a state file by its content, verify its checksums and print it",
				long: `PATH is one of:
  - a dranode state file (checkpoint File, journal snapshot or log);
  - a dranode journal directory, such as the agent's claim record;
  - the kubelet's dra_manager_state;
  - the kubelet's kubelet_internal_checkpoint (current or pre-1.20 format).
The format is told by the content, not the name. A corrupt file or one written
by a newer format version makes the command fail.`,
				flags: func(fs *flag.FlagSet) func(*env, []string) error {
					out := outputFlag(fs)
					return func(e *env, args []string) error { return runCheckpointRead(e, args, *out, true) }
				},
			},
			{
				name: "verify", usage: "PATH",
				short: "check a state file's checksums and version without printing its contents",
				flags: func(fs *flag.FlagSet) func(*env, []string) error {
					out := outputFlag(fs)
					return func(e *env, args []string) error { return runCheckpointRead(e, args, *out, false) }
				},
			},
			{
				name: "migrate", usage: "PATH",
				short: "upgrade a dranode claim record to the current format version, keeping a backup",
				long: `PATH is a claim record journal directory (or a file in it). The directory is
first copied, durably, to PATH.bak-<UTC timestamp>; then the record is opened
with the current code, which rewrites older versions. A corrupt record or one of
a newer version is refused and left untouched.`,
				flags: func(fs *flag.FlagSet) func(*env, []string) error {
					out := outputFlag(fs)
					return func(e *env, args []string) error { return runCheckpointMigrate(e, args, *out) }
				},
			},
		},
	}
}

func runCheckpointRead(e *env, args []string, format string, contents bool) error {
	if err := exactArgs(args, "PATH"); err != nil {
		return err
	}
	if err := checkFormat(format); err != nil {
		return err
	}
	rep, err := readCheckpoint(args[0])
	if rep != nil {
		rep.contents = contents
		if !contents {
			rep.Dranode, rep.Journal, rep.DRAManager, rep.DeviceManager = nil, nil, nil, nil
		}
		if err != nil {
			rep.Checksum = "FAILED"
		}
		if perr := render(e.stdout, format, rep); perr != nil && err == nil {
			err = perr
		}
	}
	return err
}

// readCheckpoint recognises and verifies path. It returns a report whenever it
// recognised the format, together with the error that makes the file unusable.
func readCheckpoint(path string) (*checkpointReport, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	rep := &checkpointReport{Path: path, Checksum: "ok"}
	if st.IsDir() {
		return rep, readJournalReport(rep, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return recognise(rep, path, data)
}

// recognise tells the format of one file's bytes and verifies them; path only
// names the file in the report and errors.
func recognise(rep *checkpointReport, path string, data []byte) (*checkpointReport, error) {
	p, perr := ckptfmt.Parse(data)
	switch {
	case errors.Is(perr, ckptfmt.ErrNotDranode):
		return readKubelet(rep, path, data)
	case perr != nil:
		rep.Format = fmtDranodeFile
		rep.Dranode = p
		if p != nil && p.Header.Kind != "" {
			rep.Kind, rep.Version = p.Header.Kind, fmt.Sprint(p.Header.Version)
		}
		return rep, fmt.Errorf("%s: %w", path, &checkpoint.CorruptError{Path: path, Reason: "dranode file", Err: perr})
	}
	rep.Format, rep.Dranode = fmtDranodeFile, p
	rep.Kind, rep.Version = p.Header.Kind, fmt.Sprint(p.Header.Version)
	if p.TornTail != nil {
		rep.Note = fmt.Sprintf("torn last append at byte %d (a crash cut it short; readers ignore it)", p.TornTail.Offset)
	}
	return rep, checkVersion(rep, path, []int{p.Header.Version})
}

func readJournalReport(rep *checkpointReport, dir string) error {
	j, err := ckptfmt.ReadJournal(dir)
	rep.Format, rep.Journal = fmtDranodeJournal, j
	if j != nil && j.Kind != "" {
		rep.Kind = j.Kind
		rep.Version = joinInts(j.Versions)
	}
	if err != nil {
		if errors.Is(err, ckptfmt.ErrCorrupt) {
			return fmt.Errorf("%s: %w", dir, &checkpoint.CorruptError{Path: dir, Reason: "journal", Err: err})
		}
		return fmt.Errorf("%s: %w", dir, err)
	}
	if n := len(j.Files); n > 0 {
		if tt := j.Files[n-1].Parsed.TornTail; tt != nil {
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
			return fmt.Errorf("%s: %w", path, &checkpoint.NewerVersionError{Path: path, Kind: rep.Kind, Version: v, Supported: supported})
		}
	}
	return nil
}

var claimcacheVersion = sync.OnceValues(probeClaimcacheVersion)

// supportedVersion returns the newest format version dranodectl reads for a
// kind. For the claim record it asks claimcache itself, so the tool can never
// disagree with the agent it is built with.
func supportedVersion(kind string) (int, bool) {
	if kind != claimcacheKind {
		return 0, false
	}
	v, err := claimcacheVersion()
	return v, err == nil
}

// probeClaimcacheVersion records one claim in a scratch directory and reads
// the version claimcache wrote.
func probeClaimcacheVersion() (int, error) {
	dir, err := os.MkdirTemp("", "dranodectl-probe-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	c, _, err := claimcache.Open(filepath.Join(dir, "record"), "probe")
	if err != nil {
		return 0, err
	}
	_, err = c.StartPrepare(claimcache.ClaimRef{Namespace: "probe", Name: "probe", UID: "probe"}, "")
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	j, err := ckptfmt.ReadJournal(filepath.Join(dir, "record"))
	if err != nil {
		return 0, err
	}
	if len(j.Versions) != 1 {
		return 0, fmt.Errorf("claimcache wrote versions %v", j.Versions)
	}
	return j.Versions[0], nil
}

func readKubelet(rep *checkpointReport, path string, data []byte) (*checkpointReport, error) {
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
		return nil, fmt.Errorf("%s: %w: neither a dranode file (no DRN magic) nor a kubelet checkpoint (no JSON object with Data)", path, kubeletcompat.ErrUnknownFormat)
	}
	// The DRA manager stores its data as a JSON string, the device manager
	// as an object: that tells the two apart before any checksum is checked.
	if probe.Data[0] == '"' {
		rep.Format = fmtDRAManager
		st, err := kubeletcompat.DecodeDRAManagerState(data)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", path, err)
		}
		rep.Kind, rep.Version = kubeletcompat.DRACheckpointKind, kubeletcompat.DRACheckpointAPIVersion
		rep.DRAManager = &st
		return rep, nil
	}
	rep.Format = fmtDeviceManager
	cp, err := kubeletcompat.DecodeDeviceManagerCheckpoint(data)
	if err != nil {
		return rep, fmt.Errorf("%s: %w", path, err)
	}
	rep.Version = cp.Format.String()
	rep.DeviceManager = &cp
	return rep, nil
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
	if !r.contents {
		return
	}
	switch {
	case r.Dranode != nil:
		fmt.Fprintln(w)
		tableParsed(w, "", r.Dranode)
	case r.Journal != nil:
		fmt.Fprintln(w)
		fmt.Fprintln(w, "FILE\tGENERATION\tVERSION\tRECORDS")
		for _, f := range r.Journal.Files {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\n", f.Name, f.Generation, f.Parsed.Header.Version, len(f.Parsed.Records))
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

func tableParsed(w io.Writer, prefix string, p *ckptfmt.Parsed) {
	fmt.Fprintf(w, "%sTYPE\t%s\n", prefix, p.Type)
	for _, r := range p.Records {
		if r.Document != nil {
			fmt.Fprintf(w, "DOCUMENT\t%s\n", r.Document)
		}
		for _, c := range r.Changes {
			fmt.Fprintf(w, "@%d %s\t%s %s\n", r.Offset, c.Op, c.Key, c.Value)
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

func runCheckpointMigrate(e *env, args []string, format string) error {
	if err := exactArgs(args, "PATH"); err != nil {
		return err
	}
	if err := checkFormat(format); err != nil {
		return err
	}
	dir := args[0]
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("checkpoint migrate: %w", err)
	}
	if !st.IsDir() {
		dir = filepath.Dir(dir)
	}
	if !ckptfmt.IsJournalDir(dir) {
		return fmt.Errorf("checkpoint migrate %s: %w: only dranode claim records (journal directories) have migrations", args[0], ErrNotMigratable)
	}
	rep := &checkpointReport{Path: dir}
	if err := readJournalReport(rep, dir); err != nil {
		return fmt.Errorf("checkpoint migrate refused, nothing changed: %w", err)
	}
	if rep.Kind != claimcacheKind {
		return fmt.Errorf("checkpoint migrate %s: kind %q: %w", dir, rep.Kind, ErrNotMigratable)
	}
	out := &migrateReport{Path: dir, Kind: rep.Kind, FromVersion: rep.Version, ToVersion: rep.Supported, Claims: len(rep.Journal.State)}
	if len(rep.Journal.Versions) == 1 && rep.Journal.Versions[0] == rep.Supported {
		return render(e.stdout, format, out) // already current: no backup, nothing written
	}
	release, err := holdJournalLock(filepath.Join(dir, "lock"))
	if err != nil {
		return fmt.Errorf("checkpoint migrate refused, nothing changed: %w", err)
	}
	backup := fmt.Sprintf("%s.bak-%s", filepath.Clean(dir), time.Now().UTC().Format("20060102T150405.000000000Z"))
	err = copyDirDurably(dir, backup)
	// claimcache.Open takes the lock itself; a writer that starts in
	// between makes it fail with ErrLocked, and the record stays as it was.
	release()
	if err != nil {
		return fmt.Errorf("checkpoint migrate: backup: %w", err)
	}
	out.Backup = backup
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
	if err := readJournalReport(after, dir); err != nil {
		return fmt.Errorf("checkpoint migrate: re-reading the migrated record (backup kept at %s): %w", backup, err)
	}
	if len(after.Journal.Versions) != 1 || after.Journal.Versions[0] != rep.Supported {
		return fmt.Errorf("checkpoint migrate: record still holds versions %v after migration (backup kept at %s)", after.Journal.Versions, backup)
	}
	out.Changed, out.Claims = true, n
	return render(e.stdout, format, out)
}

// copyDirDurably copies the regular files of src (not the lock file) into the
// new directory dst, syncing every file and dst itself, so that the backup
// exists on disk before the original is touched.
func copyDirDurably(src, dst string) error {
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
		if err := copyFileSynced(filepath.Join(src, en.Name()), filepath.Join(dst, en.Name())); err != nil {
			return err
		}
	}
	for _, d := range []string{dst, filepath.Dir(dst)} {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

func copyFileSynced(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
