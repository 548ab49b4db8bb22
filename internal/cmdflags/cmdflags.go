// Package cmdflags holds what the project's commands (bench, the examples, the conformance
// tools) check alike on their command lines, and how they report what ends them.
package cmdflags

import (
	"flag"
	"fmt"
	"os"

	"github.com/pkg/errors"
)

// NoArguments returns an error naming the first argument of the command line (flag.Args), nil
// when there is none: flag parsing stops at the first argument, so the flags after it would be
// dropped silently.
func NoArguments() error {
	if flag.NArg() == 0 {
		return nil
	}
	return errors.Errorf("argument %q; accepted: none (flags only; a flag after an argument is not read)", flag.Arg(0))
}

// The exit statuses of the project's commands: ExitUsage for a command line refused (package flag
// exits with it on a flag it does not know), ExitFailure for work that failed.
const (
	ExitFailure = 1
	ExitUsage   = 2
)

// Exit ends the command when err is not nil: it writes "command: err" on standard error and exits
// with code (ExitUsage, ExitFailure, or a status of the command's own). A nil err returns at once.
func Exit(command string, code int, err error) {
	if err == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", command, err)
	os.Exit(code)
}

// AtLeast returns an error naming an integer flag (key, as "-k") and its value when the value is
// below least, nil otherwise: "-k 0; accepted: >= 1", with note, where not empty, in parentheses
// after the bound ("-tokens 1; accepted: >= 2 (tokens scored)").
func AtLeast(key string, value, least int, note string) error {
	switch {
	case value >= least:
		return nil
	case note == "":
		return errors.Errorf("%s %d; accepted: >= %d", key, value, least)
	}
	return errors.Errorf("%s %d; accepted: >= %d (%s)", key, value, least, note)
}

// First returns the first of errs that is not nil (nil when none is): the checks of a command
// line, in the order their errors are reported.
func First(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
