package cmdflags_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/quanta-ml/quanta/internal/cmdflags"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// TestNoArguments: an argument is refused naming it; a command line of flags alone passes.
func TestNoArguments(t *testing.T) {
	testutil.ArgumentRefused(t, cmdflags.NoArguments)
	t.Run("flags only", func(t *testing.T) {
		testutil.SetFlags(t)
		if err := cmdflags.NoArguments(); err != nil {
			t.Errorf("NoArguments() = %v with no argument; want nil", err)
		}
	})
}

// TestExit: a nil error returns; an error is written after the command's name on standard error
// and ends the process with the code given (run in a child process of the test binary).
func TestExit(t *testing.T) {
	if os.Getenv("CMDFLAGS_TEST_EXIT") == "1" {
		cmdflags.Exit("cmd", 3, errors.New("went wrong"))
		return
	}
	cmdflags.Exit("cmd", 3, nil)
	child := exec.Command(os.Args[0], "-test.run=^TestExit$")
	child.Env = append(os.Environ(), "CMDFLAGS_TEST_EXIT=1")
	var stderr bytes.Buffer
	child.Stderr = &stderr
	err := child.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Exit(\"cmd\", 3, err): the process ended with %v; want exit status 3", err)
	}
	if got, want := stderr.String(), "cmd: went wrong\n"; got != want {
		t.Errorf("Exit(\"cmd\", 3, err) wrote %q on stderr; want %q", got, want)
	}
}
