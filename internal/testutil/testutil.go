package testutil

import (
	"os"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/quanta-ml/quanta/runtime"
)

// TestAllEnv names the environment variable that turns on slow tests (see Slow).
const TestAllEnv = "QUANTA_TEST_ALL"

// Backend returns the process-wide backend (runtime.Backend), failing the test if it cannot start.
func Backend(t testing.TB) backends.Backend {
	t.Helper()
	backend, err := runtime.Backend()
	if err != nil {
		t.Fatalf("quanta backend failed to start: %+v", err)
	}
	return backend
}

// Slow skips the test unless QUANTA_TEST_ALL=1 (set by `make test-all`).
func Slow(t testing.TB) {
	t.Helper()
	if os.Getenv(TestAllEnv) != "1" {
		t.Skipf("slow test: runs only with %s=1 (make test-all)", TestAllEnv)
	}
}
