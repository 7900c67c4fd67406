package sliceclient

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dranode/dranode/inventory"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ErrInvalidOptions is matched by errors about a Publisher's Options, a
// Watcher's options or a DryRun's fields. An inventory is checked by
// package inventory instead: a rejected one matches inventory.ErrInvalid.
var ErrInvalidOptions = errors.New("invalid publisher options")

// checkDriverName is inventory.ValidateDriverName as an options error: a
// bad driver name is the caller's configuration, not its inventory.
func checkDriverName(name string) error {
	err := inventory.ValidateDriverName(name)
	var verr *inventory.ValidationError
	if !errors.As(err, &verr) {
		return err
	}
	msgs := make([]string, len(verr.Problems))
	for i, p := range verr.Problems {
		msgs[i] = p.String()
	}
	return fmt.Errorf("%w: %s", ErrInvalidOptions, strings.Join(msgs, "; "))
}

// checkNodeName checks the node a publisher or dry run is for; slices carry
// it as spec.nodeName, which the API server requires to be a DNS subdomain.
func checkNodeName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: NodeName is empty", ErrInvalidOptions)
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("%w: NodeName %q: %s", ErrInvalidOptions, name, strings.Join(msgs, "; "))
	}
	return nil
}
