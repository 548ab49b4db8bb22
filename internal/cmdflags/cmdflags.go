// Package cmdflags holds what the project's commands (bench, the examples, the conformance
// tools) check alike on their command lines.
package cmdflags

import (
	"flag"

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
