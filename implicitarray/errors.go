package implicitarray

import (
	"fmt"
	"runtime"

	"github.com/pkg/errors"
)

// annotate re-panics a panic raised while building op with a message that names the op and its
// operands' types and shapes. Use as: defer annotate(op, operands...).
func annotate(op Op, operands ...Value) {
	r := recover()
	if r == nil {
		return
	}
	err, ok := r.(error)
	if !ok {
		err = errors.New(fmt.Sprint(r))
	}
	panic(errors.WithMessagef(err, "implicitarray.%s%s", op, describeAll(operands)))
}

// callerName returns "file:line" of the caller skip frames up, to name rules in messages.
func callerName(skip int) string {
	_, file, line, ok := runtime.Caller(skip)
	if !ok {
		return "unknown"
	}
	return fmt.Sprintf("%s:%d", file, line)
}
