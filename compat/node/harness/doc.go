// Package harness runs a real Kubernetes node on the test machine: containerd
// (with Debian's runc and CNI plugins) and a kubelet, built from the versions
// pinned in build/node, registered with a real API server (tools/envtest).
//
// Everything a node writes goes under one temporary directory — containerd's
// root, state and socket, runc's state, the kubelet's root, certificates,
// pod logs and volume-plugin directory, the CDI spec directory — with three
// exceptions the kubelet hard-codes and Stop removes again: the device-plugin
// socket under /var/lib/kubelet/device-plugins, the symbolic links in
// /var/log/containers and shim sockets under /run/containerd/s. The node also
// owns a cgroup (the kubelet's cgroupRoot) in every hierarchy and a Linux
// bridge with a private subnet whose gateway address is the node's
// InternalIP. Stop kills every process the node started (the kubelet,
// containerd, shims, containers), unmounts what they mounted and removes all
// of it, whether the test passed or not.
//
// One node runs on a machine at a time (tools/envtest/hostlock), because of those
// host-wide paths.
//
// What this machine kind needs, found by running the kubelet here: the
// hierarchy is cgroup v1, so the kubelet runs with failCgroupV1: false; root
// lacks CAP_SYS_RESOURCE, so runc cannot lower oom_score_adj (the kubelet
// asks -998 for sandboxes) and containerd runs with restrict_oom_score_adj;
// the kubelet refuses a loopback node IP, hence the bridge. The kubelet runs
// with a PATH without iptables: it would otherwise install host-wide
// KUBE-FIREWALL rules, which on a real node are kube-proxy's business.
package harness
