package harness

import (
	"fmt"
	"net"
	"path/filepath"
	"text/template"
)

var kubeletConfig = template.Must(template.New("kubelet").Parse(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://{{.Socket}}
cgroupDriver: cgroupfs
cgroupRoot: /{{.Cgroup}}
failCgroupV1: {{not .CgroupV1}}
failSwapOn: false
# The API server reaches the kubelet (logs, exec) on the node's private
# bridge address only; there is no client certificate to check, so the
# kubelet allows anonymous requests there.
address: {{.NodeIP}}
port: {{.Port}}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {{.HealthzPort}}
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
podLogsDir: {{.Dir}}/logs
volumePluginDir: {{.Dir}}/volume-plugins
resolvConf: ""
# The machine's disk is shared with everything else; the node must not
# evict test pods or collect their images because of it.
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
{{- with .FeatureGates}}
featureGates:
{{- range $name, $on := .}}
  {{$name}}: {{$on}}
{{- end}}
{{- end}}
`))

func (n *Node) writeKubeletConfig() error {
	v1, err := cgroupV1()
	if err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	return writeTemplate(filepath.Join(n.dir, "kubelet.yaml"), kubeletConfig, map[string]any{
		"Socket": n.containerdSocket(), "Cgroup": n.cgroupName(), "CgroupV1": v1,
		"NodeIP": n.nodeIP, "Port": ports[0], "HealthzPort": ports[1], "Dir": n.dir,
		"FeatureGates": n.opts.KubeletFeatureGates,
	})
}

func freePorts(count int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range count {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("harness: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
