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

// TestAtLeast: a value at or above the bound passes; one below is refused naming the flag, the
// value and the bound, with the note in parentheses where there is one; First reports the first
// refusal.
func TestAtLeast(t *testing.T) {
	for _, tc := range []struct {
		name         string
		value, least int
		note, want   string
	}{
		{name: "at the bound", value: 1, least: 1},
		{name: "above", value: 7, least: 2, note: "tokens"},
		{name: "below", value: 0, least: 1, want: "-k 0; accepted: >= 1"},
		{name: "below with a note", value: -3, least: 0, note: "float epochs", want: "-k -3; accepted: >= 0 (float epochs)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := cmdflags.AtLeast("-k", tc.value, tc.least, tc.note)
			if tc.want == "" {
				if err != nil {
					t.Errorf("AtLeast(-k, %d, %d) = %v; want nil", tc.value, tc.least, err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("AtLeast(-k, %d, %d) = %v; want %q", tc.value, tc.least, err, tc.want)
			}
		})
	}
	t.Run("First", func(t *testing.T) {
		if err := cmdflags.First(nil, nil); err != nil {
			t.Errorf("First(nil, nil) = %v; want nil", err)
		}
		first, second := errors.New("first"), errors.New("second")
		if err := cmdflags.First(nil, first, second); err != first {
			t.Errorf("First(nil, first, second) = %v; want first", err)
		}
	})
}
