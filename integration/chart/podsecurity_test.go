package chart

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/dranode/dranode/tools/envtest"
)

const chartDir = "../../examples/deploy/chart/dranode"

// warnings collects the API server's Warning headers (client-go's
// WarningHandler), in arrival order.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// TestPodSecurity renders the chart and creates its DaemonSet, server-side
// dry run, in namespaces whose pod-security.kubernetes.io/warn label is
// baseline and restricted: kube-apiserver's own PodSecurity admission
// judges the pod template, and every warning must be one the chart's
// documentation justifies (SECURITY.md, "The agent's privileges").
func TestPodSecurity(t *testing.T) {
	hostPaths := `hostPath volumes (volumes "kubelet-root", "plugins-registry", "plugins", "cdi", "state")`
	restrictedVolumes := `restricted volume types (volumes "kubelet-root", "plugins-registry", "plugins", "cdi", "state" use restricted volume type "hostPath")`
	root := `runAsNonRoot != true (pod or container "agent" must set securityContext.runAsNonRoot=true)`
	uid0 := `runAsUser=0 (container "agent" must not set runAsUser=0)`
	tests := []struct {
		name   string
		values string // a values file on top of the chart's own; empty: as shipped
		want   map[string][]string
	}{
		{
			name: "as shipped",
			want: map[string][]string{
				"baseline": {hostPaths},
				// At restricted the volume-type check replaces the
				// hostPath one (OverrideCheckIDs in pod-security-admission).
				"restricted": {restrictedVolumes, root, uid0},
			},
		},
		{
			// What the loop-device example driver asks for: one more
			// capability and a host device, reported as such.
			name: "vendor opt-in: a capability and a device",
			values: `extraCapabilities: [SYS_ADMIN]
extraHostPathMounts:
  - name: loop-control
    path: /dev/loop-control
    type: CharDevice
`,
			want: map[string][]string{
				"baseline": {
					`non-default capabilities (container "agent" must not include "SYS_ADMIN" in securityContext.capabilities.add)`,
					`hostPath volumes (volumes "kubelet-root", "plugins-registry", "plugins", "cdi", "state", "loop-control")`,
				},
			},
		},
		{
			name:   "vendor opt-in: privileged",
			values: "privileged: true\n",
			want: map[string][]string{
				"baseline": {`privileged (container "agent" must not set securityContext.privileged=true)`, hostPaths},
			},
		},
	}

	env := &envtest.Environment{APIServerFlags: []string{"--allow-privileged=true"}}
	cfg := envtest.StartT(t, env)
	var w warnings
	cfg.WarningHandler = &w
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, level := range []string{"baseline", "restricted"} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: level, Labels: map[string]string{"pod-security.kubernetes.io/warn": level}}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w.take()

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := renderDaemonSet(t, tt.values)
			for _, level := range []string{"baseline", "restricted"} {
				want, ok := tt.want[level]
				if !ok {
					continue
				}
				d := ds.DeepCopy()
				d.Namespace = level
				if _, err := client.AppsV1().DaemonSets(level).Create(ctx, d, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
					t.Fatalf("%s: dry-run create of the chart's DaemonSet: %v", level, err)
				}
				got := podSecurityWarnings(t, level, w.take())
				t.Logf("%s: %q", level, got)
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("PodSecurity %s reports\n\t%s\nwant\n\t%s", level, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
				}
			}
		})
	}
}

// podSecurityWarnings splits the PodSecurity warning for level ("would
// violate PodSecurity "<level>:latest": a, b, c") into its checks; any other
// warning is an error of the test.
func podSecurityWarnings(t *testing.T, level string, ws []string) []string {
	t.Helper()
	prefix := `would violate PodSecurity "` + level + `:latest": `
	var out []string
	for _, w := range ws {
		rest, ok := strings.CutPrefix(w, prefix)
		if !ok {
			t.Errorf("unexpected warning: %s", w)
			continue
		}
		// Checks are joined by ", " but their own text holds commas inside
		// parentheses: split at depth 0 only.
		depth, start := 0, 0
		for i, r := range rest {
			switch r {
			case '(':
				depth++
			case ')':
				depth--
			case ',':
				if depth == 0 {
					out = append(out, strings.TrimSpace(rest[start:i]))
					start = i + 1
				}
			}
		}
		out = append(out, strings.TrimSpace(rest[start:]))
	}
	return out
}

// renderDaemonSet runs helm template (scripts/build-helm.sh builds the
// pinned helm once) with the chart's values plus values, and returns the
// DaemonSet, decoded strictly.
func renderDaemonSet(t *testing.T, values string) *appsv1.DaemonSet {
	t.Helper()
	out, err := helmTemplate(t, "1.37.2", values, "--show-only", "templates/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(out, &ds); err != nil {
		t.Fatalf("the rendered DaemonSet does not decode strictly: %v\n%s", err, out)
	}
	return &ds
}

// helmTemplate renders the chart for a cluster of kubeVersion with its
// values plus values (YAML; "" for none) and more arguments.
func helmTemplate(t *testing.T, kubeVersion, values string, more ...string) ([]byte, error) {
	t.Helper()
	helm, err := exec.Command("../../scripts/build-helm.sh").Output()
	if err != nil {
		t.Fatalf("scripts/build-helm.sh: %v", err)
	}
	home := t.TempDir()
	args := []string{"template", "rel", chartDir, "--namespace", "dranode", "--kube-version", kubeVersion}
	if values != "" {
		f := filepath.Join(home, "values.yaml")
		if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--values", f)
	}
	cmd := exec.Command(strings.TrimSpace(string(helm)), append(args, more...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template --kube-version %s: %w\n%s", kubeVersion, err, stderr.String())
	}
	return out, nil
}
