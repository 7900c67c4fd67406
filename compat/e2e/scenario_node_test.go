package e2e

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/dranode/dranode/compat/e2e/harness"
	"github.com/dranode/dranode/compat/e2e/scenarios"
)

// The agent's node runs the shared scenarios (package scenarios).
var _ scenarios.Node = (*node)(nil)

func (n *node) Context() context.Context      { return n.ctx }
func (n *node) Cluster() *harness.Cluster     { return cluster }
func (n *node) Namespace() string             { return n.ns }
func (n *node) Kubelet() *harness.Kubelet     { return n.kubelet }
func (n *node) CDIDir() string                { return n.agent.CDIDir }
func (n *node) PrepareAll(pods []*corev1.Pod) { n.prepareAll(pods, prepareTimeout) }
