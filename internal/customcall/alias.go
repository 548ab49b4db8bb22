package customcall

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
)

// aliasAttribute is the argument attribute with which XLA's StableHLO import sets up an
// input/output alias (what JAX writes for donated arguments).
const aliasAttribute = "tf.aliasing_output"

// AliasOutput lets XLA write the program's output number output into the buffer of param, a
// parameter of the graph being built, when the caller donates that buffer: a state that a step
// reads and returns updated (a key/value cache) is then updated in place instead of copied. The
// output must have param's shape and dtype (XLA refuses to compile otherwise); a buffer not
// donated is copied first, so the alias never changes results, only where they are written.
//
// It changes nothing and returns an error wrapping ErrUnsupported (see Check) or ErrInvalid when
// param is not a parameter of a graph being built, output is negative, or param is aliased
// already.
func AliasOutput(param *graph.Node, output int) error {
	if param == nil {
		return errors.Wrap(ErrInvalid, "customcall.AliasOutput: nil node")
	}
	describe := fmt.Sprintf("customcall.AliasOutput(node #%d %s, output %d)", param.Id(), param.Shape(), output)
	g := param.Graph()
	if err := Check(g.Backend()); err != nil {
		return errors.WithMessage(err, describe)
	}
	switch {
	case !g.IsBuilding():
		return errors.Wrapf(ErrInvalid, "%s: the graph is not being built (compiled or finalized)", describe)
	case param.Type() != graph.NodeTypeParameter:
		return errors.Wrapf(ErrInvalid, "%s: node is a %s; accepted: a parameter", describe, param.Type())
	case output < 0:
		return errors.Wrapf(ErrInvalid, "%s: accepted outputs: >= 0", describe)
	}
	in, _ := inspected()
	value, err := in.valueOf(param)
	if err != nil {
		return errors.WithMessage(err, describe)
	}
	fn := in.functionOf(value)
	if fn.Returned || fn.Parent != nil {
		return errors.Wrapf(ErrInvalid, "%s: the parameter's function is returned or a closure", describe)
	}
	if _, ok := value.Attributes[aliasAttribute]; ok {
		return errors.Wrapf(ErrInvalid, "%s: the parameter is aliased already", describe)
	}
	if value.Attributes == nil {
		value.Attributes = map[string]any{}
	}
	value.Attributes[aliasAttribute] = literal(fmt.Sprintf("%d : i32", output))
	return nil
}

// AliasOutputs aliases params[i] to output firstOutput+i (AliasOutput), stopping at the first
// error, which it returns.
func AliasOutputs(params []*graph.Node, firstOutput int) error {
	for i, p := range params {
		if err := AliasOutput(p, firstOutput+i); err != nil {
			return err
		}
	}
	return nil
}
