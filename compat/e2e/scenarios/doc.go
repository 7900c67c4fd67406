// Package scenarios holds the kubelet end-to-end scenarios that every DRA
// driver built from dranode must pass, whatever it is built from: the
// reference agent with a plugin, or a vendor's own driver on the upstream
// kubelet plugin helper. Each test package brings its driver up on a Node
// and runs the same scenario functions against it, so the two cannot drift
// apart; the kubelet side of such a Node is Host, which both embed.
package scenarios
