package agent

import (
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dranode/dranode/agent/config"
)

func readBootID(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", &config.Error{Key: "bootIDFile", Reason: err.Error()}
	}
	id := strings.TrimSpace(string(data))
	if id == "" {
		return "", &config.Error{Key: "bootIDFile", Reason: path + " is empty"}
	}
	return id, nil
}

// connect picks the mode: kubeconfig, in-cluster, or standalone.
func (a *Agent) connect() error {
	rc := a.opts.RESTConfig
	switch {
	case rc != nil:
		rc = rest.CopyConfig(rc)
	case a.cfg.Kubeconfig != "":
		var err error
		rc, err = clientcmd.BuildConfigFromFlags("", a.cfg.Kubeconfig)
		if err != nil {
			return &config.Error{Key: "kubeconfig", Reason: err.Error()}
		}
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		var err error
		rc, err = rest.InClusterConfig()
		if err != nil {
			return fmt.Errorf("in-cluster configuration: %w", err)
		}
	}
	if rc != nil {
		rc.QPS, rc.Burst = a.cfg.Claims.QPS, a.cfg.Claims.Burst
		rc.UserAgent = "dranode-agent/" + a.cfg.NodeName
		var err error
		if a.client, err = newAPIClient(rc); err != nil {
			return err
		}
	}
	a.standalone = a.client == nil
	switch {
	case a.opts.Claims != nil:
		a.claims = a.opts.Claims
	case a.standalone:
		a.claims = DirClaimSource{Dir: a.cfg.Claims.Dir}
	default:
		a.claims = a.client.claims
	}
	return nil
}
