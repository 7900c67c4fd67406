// Package crashtest helps tests that kill a child process in the middle of
// writing through this module's stores and then check what is on disk. The
// child is the test binary itself, started again in another role (chosen
// by an environment variable, as the standard library's exec tests do).
//
// Such tests start hundreds of children. Under go test -race each would be
// the race-instrumented binary: a start costs about five times the CPU of
// a plain one (0.09 CPU-s against 0.017 on a 2-core machine), every write
// is slower, and the kills land elsewhere than in the build users run.
// [Child] gives the same package's test binary without the race
// detector; the parent stays instrumented, and the stores' concurrency is
// race-tested in process by the packages' own tests.
//
// Use one Child per test binary:
//
//	var child crashtest.Child
//
//	func TestMain(m *testing.M) {
//		if os.Getenv("MY_CHILD_ROLE") != "" {
//			os.Exit(childMain()) // the child's loop of writes
//		}
//		os.Exit(child.Run(m)) // the tests, then the built child removed
//	}
//
//	func TestCrash(t *testing.T) {
//		cmd := exec.Command(child.Path(t))
//		cmd.Env = append(os.Environ(), "MY_CHILD_ROLE=writer")
//		// start, read its acknowledgements, SIGKILL, check the files
//	}
package crashtest
