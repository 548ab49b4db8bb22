package customcall

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/gomlx/go-xla/pkg/stablehlo"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/xla"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/janpfeifer/must"
	"github.com/pkg/errors"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrUnsupported: the backend is not GoMLX's XLA backend, or the GoMLX and go-xla internals
	// are not the ones this package was written against. Keep the HLO formulation.
	ErrUnsupported = errors.New("custom calls are not supported on this backend")

	// ErrInvalid: the node, target, operands or attributes cannot make a custom call (the message
	// says which and what is accepted).
	ErrInvalid = errors.New("invalid custom call")
)

// APIVersion is the custom call API version emitted: API_VERSION_TYPED_FFI, the typed XLA FFI
// handlers that package xlaffi registers.
const APIVersion = 4

var reTarget = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// Check returns nil when Rewrite works on backend: it is GoMLX's XLA backend, the binary is built
// with GoMLXVersion and GoXLAVersion, and their internals are the expected ones. Otherwise it
// returns an error wrapping ErrUnsupported that says why.
func Check(backend backends.Backend) error {
	if _, ok := backend.(*xla.Backend); !ok {
		return errors.Wrapf(ErrUnsupported, "customcall: backend %T; accepted: GoMLX's XLA backend (*xla.Backend)", backend)
	}
	_, err := inspected()
	return err
}

// Supported reports whether Check(backend) is nil.
func Supported(backend backends.Backend) bool {
	return Check(backend) == nil
}

// Rewrite turns the XLA statement that computes node into a call of the typed-FFI handler
// registered as target, with the given operands and attributes (the handler's backend_config).
// The call's result has node's shape; nodes that use node now read the call's result.
//
// Build node as the ordinary formulation of what the handler computes (for a quantized product:
// decode the weight, then graph.DotGeneral) and pass the nodes the handler reads as operands (the
// activations, the packed weight components): GoMLX still sees the formulation, so
// graph.Gradient differentiates it, while in a forward-only graph the formulation's inputs that
// nothing else reads are dead code XLA removes. node's statement must be its own (not shared with
// another node), not a constant or a parameter, and not rewritten already; every operand must
// come from the same graph and be computed before node.
//
// It changes nothing and returns an error wrapping ErrUnsupported (see Check) or ErrInvalid when
// it cannot rewrite: the caller keeps the formulation. A target that is not registered is not
// detected here: compiling the graph fails with XLA's "No FFI handler registered" error.
func Rewrite(node *graph.Node, target string, operands []*graph.Node, attrs Attributes) error {
	if node == nil {
		return errors.Wrap(ErrInvalid, "customcall.Rewrite: nil node")
	}
	describe := func() string {
		shapes := make([]string, len(operands))
		for i, op := range operands {
			if op == nil {
				shapes[i] = "nil"
			} else {
				shapes[i] = op.Shape().String()
			}
		}
		return fmt.Sprintf("customcall.Rewrite(node #%d %s, target %q, operands [%s])", node.Id(), node.Shape(),
			target, strings.Join(shapes, ", "))
	}
	g := node.Graph()
	if err := Check(g.Backend()); err != nil {
		return errors.WithMessage(err, describe())
	}
	if !g.IsBuilding() {
		return errors.Wrapf(ErrInvalid, "%s: the graph is not being built (compiled or finalized)", describe())
	}
	if !reTarget.MatchString(target) {
		return errors.Wrapf(ErrInvalid, "%s: accepted targets: letters, digits, '_' and '.', not starting with a digit",
			describe())
	}
	config, err := attrs.dictionary()
	if err != nil {
		return errors.Wrapf(ErrInvalid, "%s: %v", describe(), err)
	}
	in, _ := inspected()
	stmt, inputs, err := in.prepare(node, operands)
	if err != nil {
		return errors.WithMessage(err, describe())
	}
	reflect.ValueOf(stmt).Elem().FieldByName("OpType").Set(in.customCall)
	stmt.Inputs = inputs
	stmt.Attributes = map[string]any{
		"call_target_name": target,
		"api_version":      int32(APIVersion),
		"backend_config":   config,
	}
	stmt.FunctionParameters, stmt.FunctionParametersNames = nil, nil
	return nil
}

// MustRewrite is Rewrite, but panics on error.
func MustRewrite(node *graph.Node, target string, operands []*graph.Node, attrs Attributes) {
	must.M(Rewrite(node, target, operands, attrs))
}

// prepare finds node's statement and the operands' values, checking that the rewrite is sound.
func (in *internals) prepare(node *graph.Node, operands []*graph.Node) (*stablehlo.Statement, []*stablehlo.Value, error) {
	g := node.Graph()
	value, err := in.valueOf(node)
	if err != nil {
		return nil, nil, err
	}
	for _, other := range g.Nodes() {
		if other == node || other.NumOutputs() != 1 || isIdentityOf(other, node) {
			continue
		}
		if v, err := in.valueOf(other); err == nil && v == value {
			return nil, nil, errors.Wrapf(ErrInvalid, "node's value is also node #%d's (%s): accepted: a node "+
				"with its own statement", other.Id(), other.Type())
		}
	}
	fn := in.functionOf(value)
	if fn.Returned {
		return nil, nil, errors.Wrap(ErrInvalid, "the function already returned")
	}
	at := -1
	defined := map[*stablehlo.Value]bool{}
	for _, v := range fn.Inputs {
		defined[v] = true
	}
	for i, stmt := range fn.Statements {
		if len(stmt.Outputs) > 0 && stmt.Outputs[0] == value {
			at = i
			break
		}
		for _, v := range stmt.Outputs {
			defined[v] = true
		}
	}
	if at < 0 {
		return nil, nil, errors.Wrap(ErrInvalid, "node is not computed by a statement (a parameter?): accepted: "+
			"a node computed by an op")
	}
	stmt := fn.Statements[at]
	opType := reflect.ValueOf(stmt).Elem().FieldByName("OpType")
	switch {
	case len(stmt.Outputs) != 1:
		return nil, nil, errors.Wrapf(ErrInvalid, "node's statement has %d outputs; accepted: 1", len(stmt.Outputs))
	case opType.Int() == in.customCall.Int():
		return nil, nil, errors.Wrap(ErrInvalid, "node is already a custom call")
	case opType.Int() == in.constant.Int():
		return nil, nil, errors.Wrap(ErrInvalid, "node is a constant (which the backend may share): accepted: "+
			"a node computed from other nodes")
	}
	inputs := make([]*stablehlo.Value, len(operands))
	for i, op := range operands {
		switch {
		case op == nil:
			return nil, nil, errors.Wrapf(ErrInvalid, "operand #%d is nil", i)
		case op.Graph() != g:
			return nil, nil, errors.Wrapf(ErrInvalid, "operand #%d belongs to another graph", i)
		case op == node:
			return nil, nil, errors.Wrapf(ErrInvalid, "operand #%d is the node itself", i)
		}
		v, err := in.valueOf(op)
		if err != nil {
			return nil, nil, errors.WithMessagef(err, "operand #%d", i)
		}
		if !defined[v] {
			return nil, nil, errors.Wrapf(ErrInvalid, "operand #%d (node #%d) is computed after the node, or in "+
				"another function: accepted: operands built before the node", i, op.Id())
		}
		inputs[i] = v
	}
	return stmt, inputs, nil
}

// isIdentityOf reports whether other is node through a chain of graph.Identity: the XLA backend
// gives an identity its input's value, and a rewrite of node is meant for those too.
func isIdentityOf(other, node *graph.Node) bool {
	for other.Type() == graph.NodeTypeIdentity && len(other.Inputs()) == 1 {
		other = other.Inputs()[0]
		if other == node {
			return true
		}
	}
	return false
}
