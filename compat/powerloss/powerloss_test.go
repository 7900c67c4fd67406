package powerloss

import (
	"os"
	"testing"

	"github.com/dranode/dranode/compat/powerloss/lazyfs"
)

func TestMain(m *testing.M) {
	if IsWriter() {
		os.Exit(WriterMain())
	}
	os.Exit(m.Run())
}

func skipUnlessAvailable(t *testing.T) {
	t.Helper()
	if err := lazyfs.Available(); err != nil {
		t.Skipf("power-loss tests need root and /dev/fuse (CI has both): %v", err)
	}
}

func TestJournalQuick(t *testing.T) {
	skipUnlessAvailable(t)
	res, err := Run(Config{Workload: "journal", Iterations: 10, Goroutines: 4, Steps: 30, Seed: 1, TornRandom: true, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.Violations {
		t.Error(v)
	}
	t.Log(res.Labels(), res.Acks)
}
