package envtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// Defaults for the knobs of Environment.
const (
	// DefaultStartTimeout bounds each component's wait for readiness. The
	// apiserver is ready in about 5 s on an idle 2-core machine; the margin
	// is for a loaded one.
	DefaultStartTimeout = 2 * time.Minute
	// DefaultStopGrace is how long Stop waits after SIGTERM before SIGKILL.
	DefaultStopGrace = 10 * time.Second
)

// DefaultAuditPolicy records every write (not reads or watches) to any
// resource at the Metadata level: who changed what, with the response code.
const DefaultAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// ErrAlreadyStarted is returned by Start on an environment that is running
// or has been stopped; an Environment is used once.
var ErrAlreadyStarted = errors.New("envtest: environment already started")

// StartError reports a component that did not come up, with the end of its
// log. Start has stopped everything it had started when it returns one.
type StartError struct {
	Component string // "etcd", "kube-apiserver", "kube-scheduler" or "kube-controller-manager"
	Err       error
	LogPath   string // the component's log file (removed by the rollback unless KeepDir)
	LogTail   string // last lines of that log
}

func (e *StartError) Error() string {
	return fmt.Sprintf("envtest: starting %s: %v\n--- last lines of %s ---\n%s", e.Component, e.Err, e.LogPath, e.LogTail)
}

func (e *StartError) Unwrap() error { return e.Err }

// Environment is a real etcd + kube-apiserver (+ optional kube-scheduler and
// kube-controller-manager) on loopback. Set the fields, then call Start once and Stop when done. The
// zero value starts etcd and kube-apiserver from the default binary
// directory.
type Environment struct {
	// Scheduler also starts kube-scheduler, connected as admin.
	Scheduler bool
	// ControllerManager also starts kube-controller-manager with
	// Controllers, each controller under its own service account.
	ControllerManager bool
	// Controllers is kube-controller-manager's --controllers list; empty
	// means DefaultControllers().
	Controllers []string
	// BinaryDir holds etcd, kube-apiserver, kube-scheduler and
	// kube-controller-manager (only those started are needed). Empty means
	// DefaultBinaryDir: $DRANODE_CONTROLPLANE_BIN, else the build cache.
	BinaryDir string

	// ServingIPs are more addresses the serving certificate is valid for,
	// besides loopback: for clients that reach the apiserver another way,
	// such as pods of a real node on a bridge (the apiserver must then
	// also listen there: --bind-address in APIServerFlags).
	ServingIPs []net.IP

	// APIServerFlags are appended to the apiserver's command line (a later
	// flag overrides an earlier one), e.g. "--feature-gates=...".
	APIServerFlags []string
	// SchedulerFlags are appended to kube-scheduler's command line.
	SchedulerFlags []string
	// ControllerManagerFlags are appended to kube-controller-manager's
	// command line.
	ControllerManagerFlags []string
	// EtcdFlags are appended to etcd's command line.
	EtcdFlags []string

	// Audit makes the apiserver write an audit log (JSON lines) at
	// AuditLogPath, with AuditPolicy or, when that is empty,
	// DefaultAuditPolicy. Writes are logged synchronously (blocking mode),
	// so an event is in the file when the client sees the response.
	Audit       bool
	AuditPolicy string

	// StartTimeout bounds each component's wait for readiness
	// (DefaultStartTimeout when zero).
	StartTimeout time.Duration
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL
	// (DefaultStopGrace when zero).
	StopGrace time.Duration

	// Stdout and Stderr, when set, also receive the processes' output, each
	// line prefixed by the component name; writes to them are serialised,
	// until Stop returns. The output always goes to a log file per
	// component in Dir.
	Stdout, Stderr io.Writer

	// KeepDir leaves the temporary directory (logs, etcd data, keys) in
	// place after Stop, for debugging.
	KeepDir bool

	mu         sync.Mutex
	outMu      sync.Mutex // serialises writes to Stdout and Stderr
	started    bool
	stopped    bool
	dir        string
	procs      []*process // in start order
	config     *rest.Config
	kubeconfig string
	auditLog   string
	etcdURL    string
	stopErr    error
}

// Start runs etcd, kube-apiserver and, if set, kube-scheduler and
// kube-controller-manager, waits until each is ready and returns an admin config for the apiserver.
// On failure it stops whatever it had started, removes the temporary
// directory and returns the reason: a *BinaryError (errors.Is
// ErrBinariesNotFound) when binaries are missing, a *StartError when a
// component did not come up.
func (e *Environment) Start() (*rest.Config, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return nil, ErrAlreadyStarted
	}
	e.started = true

	names := []string{EtcdBinary, APIServerBinary}
	if e.Scheduler {
		names = append(names, SchedulerBinary)
	}
	if e.ControllerManager {
		names = append(names, ControllerManagerBinary)
	}
	bins, err := e.resolveBinaries(names...)
	if err != nil {
		e.stopped = true
		return nil, err
	}

	dir, err := os.MkdirTemp("", "dranode-envtest-")
	if err != nil {
		e.stopped = true
		return nil, fmt.Errorf("envtest: creating temporary directory: %w", err)
	}
	e.dir = dir
	cfg, err := e.start(bins)
	if err != nil {
		// Roll back: the caller gets nothing to stop.
		if stopErr := e.stopLocked(); stopErr != nil {
			err = fmt.Errorf("%w (and rolling back: %v)", err, stopErr)
		}
		return nil, err
	}
	e.config = cfg
	return rest.CopyConfig(cfg), nil
}

func (e *Environment) start(bins map[string]string) (*rest.Config, error) {
	creds, err := newCredentials(e.dir, e.ServingIPs)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(creds.caPEM)
	timeout := e.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}

	if err := e.startEtcd(bins[EtcdBinary], timeout); err != nil {
		return nil, err
	}
	host, err := e.startAPIServer(bins[APIServerBinary], creds, pool, timeout)
	if err != nil {
		return nil, err
	}
	cfg := &rest.Config{
		Host:            host,
		BearerToken:     creds.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: creds.caPEM},
	}
	e.kubeconfig = filepath.Join(e.dir, "admin.kubeconfig")
	if err := writeKubeconfig(e.kubeconfig, host, creds); err != nil {
		return nil, err
	}
	if e.Scheduler {
		if err := e.startScheduler(bins[SchedulerBinary], creds, pool, timeout); err != nil {
			return nil, err
		}
	}
	if e.ControllerManager {
		if err := e.startControllerManager(bins[ControllerManagerBinary], creds, pool, timeout); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// portAttempts is how often a component is started again when a port picked
// as free was taken before the component could bind it.
const portAttempts = 3

const addrInUse = "address already in use"

func (e *Environment) startEtcd(bin string, timeout time.Duration) error {
	var lastErr error
	for attempt := 0; attempt < portAttempts; attempt++ {
		ports, err := pickPorts(2)
		if err != nil {
			return err
		}
		client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		dataDir := filepath.Join(e.dir, "etcd-data")
		if err := os.RemoveAll(dataDir); err != nil {
			return fmt.Errorf("envtest: clearing %s: %w", dataDir, err)
		}
		args := append([]string{
			"--name=envtest",
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + client,
			"--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer,
			"--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=envtest=" + peer,
			// Test data is thrown away with the directory; waiting for the
			// disk on a shared machine only slows every write down.
			"--unsafe-no-fsync",
			"--log-level=warn",
		}, e.EtcdFlags...)
		p, err := startProcess("etcd", bin, args, e.dir, e.Stdout, e.Stderr, &e.outMu)
		if err != nil {
			return err
		}
		e.procs = append(e.procs, p)
		err = waitReady(p, timeout, func(ctx context.Context) error {
			return checkEtcdHealth(ctx, client+"/health")
		})
		if err == nil {
			e.etcdURL = client
			return nil
		}
		lastErr = e.startError(p, err)
		if !p.Exited() || !p.logContains(addrInUse) {
			return lastErr
		}
		e.dropLast(p)
	}
	return lastErr
}

func (e *Environment) startAPIServer(bin string, creds *credentials, pool *x509.CertPool, timeout time.Duration) (string, error) {
	certDir := filepath.Join(e.dir, "apiserver-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return "", fmt.Errorf("envtest: creating %s: %w", certDir, err)
	}
	var auditArgs []string
	if e.Audit {
		policy := e.AuditPolicy
		if policy == "" {
			policy = DefaultAuditPolicy
		}
		policyPath := filepath.Join(e.dir, "audit-policy.yaml")
		if err := os.WriteFile(policyPath, []byte(policy), 0o600); err != nil {
			return "", fmt.Errorf("envtest: writing audit policy: %w", err)
		}
		e.auditLog = filepath.Join(e.dir, "audit.log")
		auditArgs = []string{
			"--audit-policy-file=" + policyPath,
			"--audit-log-path=" + e.auditLog,
			"--audit-log-format=json",
			"--audit-log-mode=blocking",
		}
	}
	var lastErr error
	for attempt := 0; attempt < portAttempts; attempt++ {
		ports, err := pickPorts(1)
		if err != nil {
			return "", err
		}
		host := "https://127.0.0.1:" + strconv.Itoa(ports[0])
		args := []string{
			"--etcd-servers=" + e.etcdURL,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(ports[0]),
			"--cert-dir=" + certDir,
			"--tls-cert-file=" + creds.certFile,
			"--tls-private-key-file=" + creds.keyFile,
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-account-key-file=" + creds.saPubFile,
			"--service-account-signing-key-file=" + creds.saKeyFile,
			"--token-auth-file=" + creds.tokenFile,
			"--authorization-mode=RBAC",
			"--runtime-config=resource.k8s.io/v1=true",
			"--service-cluster-ip-range=10.0.0.0/24",
		}
		args = append(append(args, auditArgs...), e.APIServerFlags...)
		p, err := startProcess("kube-apiserver", bin, args, e.dir, e.Stdout, e.Stderr, &e.outMu)
		if err != nil {
			return "", err
		}
		e.procs = append(e.procs, p)
		client := httpsClient(pool)
		err = waitReady(p, timeout, func(ctx context.Context) error {
			return checkHTTPOK(ctx, client, host+"/readyz", creds.adminToken)
		})
		if err == nil {
			return host, nil
		}
		lastErr = e.startError(p, err)
		if !p.Exited() || !p.logContains(addrInUse) {
			return "", lastErr
		}
		e.dropLast(p)
	}
	return "", lastErr
}

func (e *Environment) startScheduler(bin string, creds *credentials, pool *x509.CertPool, timeout time.Duration) error {
	// /readyz includes the check that the scheduler's informers have
	// synced, so it is ready to schedule, not merely serving.
	return e.startServing(SchedulerBinary, bin, "/readyz", creds, pool, timeout, e.SchedulerFlags)
}

func (e *Environment) startControllerManager(bin string, creds *credentials, pool *x509.CertPool, timeout time.Duration) error {
	controllers := e.Controllers
	if len(controllers) == 0 {
		controllers = DefaultControllers()
	}
	args := append([]string{
		"--controllers=" + strings.Join(controllers, ","),
		// Each controller gets a service account of its own (tokens from
		// the apiserver's TokenRequest, permissions from RBAC's bootstrap
		// roles), as in a real cluster: audit events name the controller
		// that wrote, not "admin", so a test can tell its own writes and
		// the agent's from the controllers'.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + creds.saKeyFile,
		"--root-ca-file=" + creds.caFile,
	}, e.ControllerManagerFlags...)
	// kube-controller-manager has no /readyz; /healthz answers once it
	// serves, and each controller catches up from its informers.
	return e.startServing(ControllerManagerBinary, bin, "/healthz", creds, pool, timeout, args)
}

// startServing starts a component that connects to the apiserver as admin
// and serves HTTPS on a free loopback port, with args after the flags they
// share, and waits until path answers 200, retrying on new ports when the
// one picked was taken meanwhile.
func (e *Environment) startServing(name, bin, path string, creds *credentials, pool *x509.CertPool, timeout time.Duration, args []string) error {
	var lastErr error
	for attempt := 0; attempt < portAttempts; attempt++ {
		ports, err := pickPorts(1)
		if err != nil {
			return err
		}
		port := strconv.Itoa(ports[0])
		p, err := startProcess(name, bin, append([]string{
			"--kubeconfig=" + e.kubeconfig,
			// One of each per environment: nothing to elect, and no lease
			// round trips before it starts working.
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=" + port,
			"--tls-cert-file=" + creds.certFile,
			"--tls-private-key-file=" + creds.keyFile,
		}, args...), e.dir, e.Stdout, e.Stderr, &e.outMu)
		if err != nil {
			return err
		}
		e.procs = append(e.procs, p)
		client := httpsClient(pool)
		err = waitReady(p, timeout, func(ctx context.Context) error {
			return checkHTTPOK(ctx, client, "https://127.0.0.1:"+port+path, "")
		})
		if err == nil {
			return nil
		}
		lastErr = e.startError(p, err)
		if !p.Exited() || !p.logContains(addrInUse) {
			return lastErr
		}
		e.dropLast(p)
	}
	return lastErr
}

func (e *Environment) startError(p *process, err error) *StartError {
	return &StartError{Component: p.name, Err: err, LogPath: p.logPath, LogTail: p.tail(30)}
}

// dropLast forgets p, which has exited, before a retry on new ports; its log
// is kept under another name.
func (e *Environment) dropLast(p *process) {
	e.procs = e.procs[:len(e.procs)-1]
	_ = os.Rename(p.logPath, p.logPath+".port-collision")
}

// waitReady polls check until it succeeds, the process exits or timeout
// passes.
func waitReady(p *process, timeout time.Duration, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		last = check(ctx)
		cancel()
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", timeout, last)
		}
		select {
		case <-p.Done():
			return fmt.Errorf("exited before it was ready (%v); last readiness check: %v", p.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func httpsClient(pool *x509.CertPool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
	}}
}

func checkHTTPOK(ctx context.Context, c *http.Client, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return nil
}

func checkEtcdHealth(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var h struct {
		Health string `json:"health"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&h); err != nil {
		return fmt.Errorf("GET %s: %s: decoding: %w", url, resp.Status, err)
	}
	if h.Health != "true" {
		return fmt.Errorf("GET %s: health %q", url, h.Health)
	}
	return nil
}

// pickPorts is freePorts; tests replace it to hand out a port that is taken.
var pickPorts = freePorts

// freePorts picks n distinct loopback ports that are free now. Another
// process can take one before the component binds it; the start loops
// recognise that and retry.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("envtest: finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func writeKubeconfig(path, host string, creds *credentials) error {
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: envtest
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: envtest
  context:
    cluster: envtest
    user: admin
current-context: envtest
`, host, base64.StdEncoding.EncodeToString(creds.caPEM), creds.adminToken)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		return fmt.Errorf("envtest: writing kubeconfig: %w", err)
	}
	return nil
}

// Stop ends every process (SIGTERM to its process group, SIGKILL after
// StopGrace), waits for them and removes the temporary directory unless
// KeepDir is set. It is safe to call more than once and on an environment
// that never started; later calls return the first call's result.
func (e *Environment) Stop() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return e.stopErr
	}
	return e.stopLocked()
}

func (e *Environment) stopLocked() error {
	e.stopped = true
	grace := e.StopGrace
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	var errs []error
	// Reverse order: clients before the servers they talk to.
	for i := len(e.procs) - 1; i >= 0; i-- {
		if err := e.procs[i].Stop(grace); err != nil {
			errs = append(errs, err)
		}
	}
	if e.dir != "" && !e.KeepDir {
		if err := os.RemoveAll(e.dir); err != nil {
			errs = append(errs, fmt.Errorf("envtest: removing %s: %w", e.dir, err))
		}
	}
	e.stopErr = errors.Join(errs...)
	return e.stopErr
}

// Config returns a copy of the admin config, or nil before a successful
// Start.
func (e *Environment) Config() *rest.Config {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.config == nil {
		return nil
	}
	return rest.CopyConfig(e.config)
}

// Dir is the environment's temporary directory: component logs
// (<component>.log), etcd data, keys and the admin kubeconfig.
func (e *Environment) Dir() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dir
}

// KubeconfigPath is an admin kubeconfig file for the apiserver (for tools
// and processes that take one), valid after Start.
func (e *Environment) KubeconfigPath() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.kubeconfig
}

// AuditLogPath is the apiserver's audit log when Audit is set, else "".
func (e *Environment) AuditLogPath() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.auditLog
}

// PIDs returns the process id of each component Start launched, by name —
// also after Stop or a failed Start, so a test can check that they are gone.
func (e *Environment) PIDs() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	pids := make(map[string]int, len(e.procs))
	for _, p := range e.procs {
		pids[p.name] = p.PID()
	}
	return pids
}

// LogTails returns the last n lines of each component's log, by name; for
// reporting why a test against the environment failed.
func (e *Environment) LogTails(n int) map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	tails := make(map[string]string, len(e.procs))
	for _, p := range e.procs {
		tails[p.name] = p.tail(n)
	}
	return tails
}
