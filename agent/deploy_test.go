package agent

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/dranode/dranode/agent/config"
)

const chartDir = "../examples/deploy/chart/dranode"

// helmBinary is the helm the chart is tested with, built once into the
// user's cache by scripts/build-helm.sh (which pins its version).
func helmBinary(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("../scripts/build-helm.sh").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("scripts/build-helm.sh: %v\n%s", err, stderr)
	}
	return strings.TrimSpace(string(out))
}

func runHelm(t *testing.T, args ...string) []byte {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

func TestHelmLint(t *testing.T) {
	out := runHelm(t, "lint", "--strict", chartDir)
	if !strings.Contains(string(out), "0 chart(s) failed") {
		t.Errorf("helm lint:\n%s", out)
	}
}

// TestHelmTemplate renders the chart and checks that every object decodes
// strictly as its Kubernetes type and that the pieces agree: the agent
// configuration in the ConfigMap loads, and the DaemonSet mounts the host
// paths it names.
func TestHelmTemplate(t *testing.T) {
	out := runHelm(t, "template", "rel", chartDir, "--namespace", "dranode", "--kube-version", "1.37.2")
	kinds := map[string]int{}
	var ds appsv1.DaemonSet
	var cm corev1.ConfigMap
	var role rbacv1.ClusterRole
	for i, doc := range strings.Split(string(out), "\n---") {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		var obj any
		switch meta.Kind {
		case "DaemonSet":
			obj = &ds
		case "ConfigMap":
			obj = &cm
		case "ClusterRole":
			obj = &role
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "ClusterRoleBinding":
			obj = &rbacv1.ClusterRoleBinding{}
		case "DeviceClass":
			obj = &resourcev1.DeviceClass{}
		default:
			t.Fatalf("document %d: unexpected kind %q", i, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s does not decode strictly: %v\n%s", meta.Kind, err, doc)
		}
		kinds[meta.Kind]++
	}
	for _, k := range []string{"DaemonSet", "ConfigMap", "ClusterRole", "ServiceAccount", "ClusterRoleBinding", "DeviceClass"} {
		if kinds[k] != 1 {
			t.Errorf("%d objects of kind %s, want 1", kinds[k], k)
		}
	}

	// The configuration the DaemonSet hands the agent must load.
	cfg := loadChartConfig(t, cm.Data["agent.yaml"])
	mounts := map[string]string{}
	hostPaths := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		if hp, ok := hostPaths[m.Name]; ok {
			if hp != m.MountPath {
				t.Errorf("volume %s: host path %s mounted at %s (socket paths the kubelet sees would differ)", m.Name, hp, m.MountPath)
			}
			mounts[m.MountPath] = m.Name
		}
	}
	for key, path := range map[string]string{"kubelet.registryDir": cfg.Kubelet.RegistryDir, "kubelet.pluginsDir": cfg.Kubelet.PluginsDir, "cdi.dir": cfg.CDI.Dir, "stateDir": cfg.StateDir} {
		if _, ok := mounts[path]; !ok {
			t.Errorf("%s = %s is not a host path mount of the DaemonSet", key, path)
		}
	}
	// The kubelet replaces its checkpoint by rename, so the file is read
	// through a mount of its directory, never of the file itself.
	if dir := filepath.Dir(cfg.Kubelet.DRAManagerState); mounts[dir] == "" {
		t.Errorf("kubelet.draManagerState = %s: its directory %s is not a host path mount of the DaemonSet", cfg.Kubelet.DRAManagerState, dir)
	}

	// Least privilege: claims are only read.
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "resourceclaims") && !slices.Equal(r.Verbs, []string{"get", "list", "watch"}) {
			t.Errorf("resourceclaims verbs %v, want get/list/watch", r.Verbs)
		}
		if slices.Contains(r.Resources, "nodes") && !slices.Equal(r.Verbs, []string{"get"}) {
			t.Errorf("nodes verbs %v, want get", r.Verbs)
		}
		if slices.Contains(r.Resources, "*") || slices.Contains(r.Verbs, "*") {
			t.Errorf("wildcard rule %+v", r)
		}
	}
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			fmt.Fprintln(&b, line)
		}
	}
	return b.String()
}

func TestDeploySamplesDecode(t *testing.T) {
	for file, obj := range map[string]any{
		"../examples/deploy/samples/gpu-claim-template.yaml":  &resourcev1.ResourceClaimTemplate{},
		"../examples/deploy/samples/gpu-pod.yaml":             &corev1.Pod{},
		"../examples/deploy/samples/loop-claim-template.yaml": &resourcev1.ResourceClaimTemplate{},
		"../examples/deploy/samples/loop-pod.yaml":            &corev1.Pod{},
	} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(data, obj); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
	var tmpl resourcev1.ResourceClaimTemplate
	data, _ := os.ReadFile("../examples/deploy/samples/gpu-claim-template.yaml")
	_ = yaml.Unmarshal(data, &tmpl)
	var pod corev1.Pod
	data, _ = os.ReadFile("../examples/deploy/samples/gpu-pod.yaml")
	_ = yaml.Unmarshal(data, &pod)
	if len(pod.Spec.ResourceClaims) != 1 || pod.Spec.ResourceClaims[0].ResourceClaimTemplateName == nil || *pod.Spec.ResourceClaims[0].ResourceClaimTemplateName != tmpl.Name {
		t.Errorf("the sample pod does not use the sample template %q: %+v", tmpl.Name, pod.Spec.ResourceClaims)
	}
}

// The loop driver is in the chart's values but off; values-loop.yaml turns
// it on with its DeviceClass, and its state directory is a host path
// mounted at the same path (the kernel names a loop device's backing file
// by the attaching process's path).
func TestHelmTemplateLoopDriver(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		drivers []string
		classes []string
	}{
		{"default", nil, []string{"gpu"}, []string{"gpu.example.com"}},
		{"values-loop.yaml", []string{"--values", filepath.Join(chartDir, "values-loop.yaml")}, []string{"gpu", "loop"}, []string{"gpu.example.com", "loop.example.com"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := runHelm(t, append([]string{"template", "rel", chartDir, "--namespace", "dranode", "--kube-version", "1.37.2"}, tc.args...)...)
			var cm corev1.ConfigMap
			var ds appsv1.DaemonSet
			var classes []string
			for _, doc := range strings.Split(string(out), "\n---") {
				var meta struct{ Kind string }
				if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
					t.Fatal(err)
				}
				switch meta.Kind {
				case "ConfigMap":
					if err := yaml.UnmarshalStrict([]byte(doc), &cm); err != nil {
						t.Fatal(err)
					}
				case "DaemonSet":
					if err := yaml.UnmarshalStrict([]byte(doc), &ds); err != nil {
						t.Fatal(err)
					}
				case "DeviceClass":
					var dc resourcev1.DeviceClass
					if err := yaml.UnmarshalStrict([]byte(doc), &dc); err != nil {
						t.Fatal(err)
					}
					classes = append(classes, dc.Name)
				}
			}
			cfg := loadChartConfig(t, cm.Data["agent.yaml"])
			var names []string
			for _, d := range cfg.Plugins.Drivers {
				names = append(names, d.Name)
				if _, ok := d.Config["enabled"]; ok {
					t.Errorf("driver %s: the chart's enabled key reached the plugin's config", d.Name)
				}
				if d.Name != "loop" {
					continue
				}
				stateDir, _ := d.Config["stateDir"].(string)
				mounted := false
				for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
					mounted = mounted || strings.HasPrefix(stateDir+"/", m.MountPath+"/") && m.MountPath == cfg.StateDir
				}
				if !mounted {
					t.Errorf("loop stateDir %q is not under the agent's stateDir mount %s", stateDir, cfg.StateDir)
				}
			}
			slices.Sort(names)
			if !slices.Equal(names, tc.drivers) || !slices.Equal(classes, tc.classes) {
				t.Errorf("drivers %v, classes %v; want %v, %v", names, classes, tc.drivers, tc.classes)
			}
		})
	}
}

// loadChartConfig loads the agent's configuration file the chart's
// ConfigMap holds, as the DaemonSet's agent does (its node name from the
// environment).
func loadChartConfig(t *testing.T, content string) config.Config {
	t.Helper()
	file := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(nil, []string{"DRANODE_CONFIG=" + file, "DRANODE_NODENAME=node-1"})
	if err != nil {
		t.Fatalf("chart's agent configuration: %v\n%s", err, content)
	}
	return cfg
}

// The chart's deviceMetadata value is the agent's cdi.deviceMetadata: off
// as shipped, on with one value.
func TestHelmTemplateDeviceMetadata(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--set", "deviceMetadata=true"}, true},
	} {
		out := runHelm(t, append([]string{"template", "rel", chartDir, "--namespace", "dranode", "--kube-version", "1.37.2", "--show-only", "templates/configmap.yaml"}, tc.args...)...)
		var cm corev1.ConfigMap
		if err := yaml.UnmarshalStrict(out, &cm); err != nil {
			t.Fatalf("%v: %v\n%s", tc.args, err, out)
		}
		if got := loadChartConfig(t, cm.Data["agent.yaml"]).CDI.DeviceMetadata; got != tc.want {
			t.Errorf("helm template %v: cdi.deviceMetadata = %v, want %v", tc.args, got, tc.want)
		}
	}
}
