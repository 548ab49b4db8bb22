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

// Exit ends the command when err is not nil: it writes "command: err" on standard error and exits
// with code (2 for a command line refused, as package flag exits for a flag it does not know; 1
// for a run that failed). A nil err returns at once.
func Exit(command string, code int, err error) {
	if err == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", command, err)
	os.Exit(code)
}
