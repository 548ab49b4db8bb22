package testutil

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// hloChildEnv, set to 1, marks the child process of DumpHLO (InHLOChild).
const hloChildEnv = "QUANTA_HLO_CHILD"

// InHLOChild reports whether the test runs in the child process DumpHLO starts: it then only
// builds and runs the programs whose HLO the parent reads.
func InHLOChild() bool { return os.Getenv(hloChildEnv) == "1" }

// DumpHLO reruns the running top-level test in a child process (InHLOChild true there) whose XLA
// dumps the HLO text of every program it compiles, before and after optimization, into a fresh
// temporary folder (XLA_FLAGS=--xla_dump_to, added to the test's own XLA_FLAGS): GoMLX exposes no
// compiled program. It returns the folder and what the child wrote, failing the test if the child
// fails.
func DumpHLO(t testing.TB) (dir string, output []byte) {
	t.Helper()
	dir = t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), hloChildEnv+"=1",
		"XLA_FLAGS="+strings.TrimSpace(os.Getenv("XLA_FLAGS")+" --xla_dump_to="+dir+" --xla_dump_hlo_as_text"))
	output, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child test: %v\n%s", err, output)
	}
	return dir, output
}
