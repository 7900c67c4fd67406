package conformance_test

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/pluginmgr/conformance"
	"github.com/dranode/dranode/pluginmgr/internal/testbin"
)

// Run is meant for a vendor's own test, with the *testing.T of the test:
//
//	p, err := pluginmgr.Launch(ctx, pluginmgr.PluginConfig{Path: bin, SHA256: digest}, pluginmgr.Options{})
//	...
//	conformance.Run(t, p, conformance.Options{})
//
// Here a recorder stands in for the *testing.T, and the plugin is one that
// breaks the contract on purpose; these are the complaints about its Info.
func ExampleRun() {
	p, err := pluginmgr.Launch(context.Background(), pluginmgr.PluginConfig{
		Path: brokenPlugin, SHA256: testbin.SHA256(brokenPlugin),
	}, pluginmgr.Options{Logger: hclog.NewNullLogger()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	rec := &recorder{}
	done := make(chan struct{})
	go func() { // Run stops a goroutine on a fatal problem, as t.Fatal does
		defer close(done)
		conformance.Run(rec, p, conformance.Options{})
	}()
	<-done
	var info []string
	for _, m := range rec.messages {
		if strings.HasPrefix(m, "conformance: Info:") {
			info = append(info, m)
		}
	}
	sort.Strings(info)
	fmt.Println(strings.Join(info, "\n"))
	// Output:
	// conformance: Info: driver version is empty
	// conformance: Info: opaque config kind "NotAKind": want group/version/Kind
}
