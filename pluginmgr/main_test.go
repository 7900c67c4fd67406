package pluginmgr_test

import (
	"os"
	"testing"

	"github.com/dranode/dranode/pluginmgr/internal/testbin"
)

// testDriverPath is the real test plugin binary, built once per test run.
var testDriverPath string

func TestMain(m *testing.M) {
	if os.Getenv(hostModeEnv) != "" {
		runAsHost()
	}
	for _, mode := range []string{echoModeEnv, grpcModeEnv} {
		if os.Getenv(mode) != "" {
			runPeer(mode)
		}
	}
	testbin.Main(m, map[string]*string{"./internal/testdriver/cmd/testdriver": &testDriverPath})
}
