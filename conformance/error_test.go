package conformance

import (
	"fmt"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
)

type errorParams struct {
	Op         string `json:"op"`
	PortErrors bool   `json:"port_errors"`
	BlockSize  int    `json:"block_size"`
	Axis       []int  `json:"axis"`
	// DType is the quantization type string passed to eformer ("binary", "int4", ...).
	DType  string `json:"dtype"`
	Format string `json:"format"`
	Side   string `json:"side"`
}

// checkError: where eformer raised and a port must fail too (port_errors), the corresponding
// quanta function returns an error. The eformer-only failures (port_errors false) must work here.
func checkError(s *suite, t *testing.T, c *Case) {
	var p errorParams
	mustParams(t, c, &p)
	t.Logf("eformer: %s: %s", c.Error.Type, c.Error.Message)
	if !p.PortErrors {
		checkEformerOnlyFailure(s, t, c, &p)
		return
	}
	var err error
	switch p.Op {
	case "ArrayNF4.quantize":
		_, err = nf4.Quantize(s.mustInput(t, c, "x"), p.BlockSize)
	case "Array8B.quantize":
		_, err = int8.Quantize(s.mustInput(t, c, "x"), p.Axis...)
	case "Array1B.quantize":
		_, err = onebit.Pack(s.mustInput(t, c, "x"), nil)
	case "quantize", "QuantizationConfig", "straight_through":
		var typ quanta.Type
		typ, err = quanta.ParseType(p.DType)
		if err == nil {
			switch {
			case typ.String() != p.DType:
				// eformer's QuantizationType is case-sensitive; quanta.ParseType is not.
				s.differ(t, c, "type string %q: eformer raises, quanta.ParseType accepts it case-insensitively as %s", p.DType, typ)
				return
			case p.Op == "straight_through":
				err = straightThroughError(s, t, c, typ)
			default:
				err = quantizeError(s, t, c, typ)
			}
		}
	case "matmul":
		err = matmulError(s, t, c, &p)
	default:
		t.Fatalf("unknown op %q", p.Op)
	}
	if err == nil {
		t.Fatalf("%s: eformer raised %s, quanta returned no error", c.Call, c.Error.Type)
	}
	t.Logf("quanta: %v", err)
}

// quantizeError quantizes the case's x to typ on the host and returns the error.
func quantizeError(s *suite, t *testing.T, c *Case, typ quanta.Type) error {
	x := s.mustInput(t, c, "x")
	var err error
	switch typ {
	case quanta.NF4:
		_, err = nf4.Quantize(x, quanta.DefaultBlockSize)
	case quanta.Int8:
		_, err = int8.Quantize(x)
	case quanta.Binary:
		_, err = onebit.QuantizeBinary(x, nil)
	case quanta.Ternary:
		_, err = onebit.QuantizeTernary(x, nil)
	}
	return err
}

// straightThroughError runs the STE of typ on the case's x and returns its error.
func straightThroughError(s *suite, t *testing.T, c *Case, typ quanta.Type) error {
	x := s.mustInput(t, c, "x")
	_, _, err := straightThrough(s, typ, quanta.DefaultBlockSize, x, nil)
	if err == nil {
		// eformer's binary STE packs (first dimension a multiple of 4); ours never packs.
		s.differ(t, c, "straight_through %s on shape %v: eformer packs the weight and raises, quanta's STE does not pack "+
			"and has no shape constraint", typ, x.Shape().Dimensions)
		return fmt.Errorf("no error by design")
	}
	return err
}

// matmulError builds x @ q (or q @ y) with incompatible contracting dimensions.
func matmulError(s *suite, t *testing.T, c *Case, p *errorParams) error {
	w := s.mustInput(t, c, "w")
	var q implicitarray.Array
	var err error
	switch p.Format {
	case "nf4":
		q, err = nf4.Quantize(w, 32)
	case "int8":
		q, err = int8.Quantize(w)
	case "binary":
		q, err = onebit.QuantizeBinary(w, nil)
	}
	if err != nil {
		t.Fatalf("quantizing w %s as %s: %+v", w.Shape(), p.Format, err)
	}
	name := "x"
	if p.Side == "lhs" {
		name = "y"
	}
	other := s.mustInput(t, c, name)
	return callCatching(s, func(o *graph.Node, q implicitarray.Value) *graph.Node {
		if p.Side == "lhs" {
			return implicitarray.Materialize(implicitarray.MatMul(q, o))
		}
		return implicitarray.Materialize(implicitarray.MatMul(o, q))
	}, other, q)
}

// callCatching runs fn through implicitarray.Exec and returns its error, or the panic of
// building the graph as an error.
func callCatching(s *suite, fn any, args ...any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	e, err := implicitarray.NewExec(s.backend, fn)
	if err != nil {
		return err
	}
	defer e.Finalize()
	_, err = e.Call(args...)
	return err
}

// checkEformerOnlyFailure: eformer's NF4 STE fails under plain jit and with padding; ours must
// return the forward value with the input's shape and the identity gradient.
func checkEformerOnlyFailure(s *suite, t *testing.T, c *Case, p *errorParams) {
	if p.Op != "straight_through" || p.DType != "nf4" {
		t.Fatalf("unexpected eformer-only failure %s", c.Call)
	}
	x := s.mustInput(t, c, "x")
	forward, grad, err := straightThrough(s, quanta.NF4, p.BlockSize, x, nil)
	if err != nil {
		t.Fatalf("quanta's NF4 STE (block size %d) on %s: %+v", p.BlockSize, x.Shape(), err)
	}
	if !forward.Shape().Equal(x.Shape()) || !grad.Shape().Equal(x.Shape()) {
		t.Fatalf("forward %s, gradient %s; want %s", forward.Shape(), grad.Shape(), x.Shape())
	}
	ones := make([]float64, x.Size())
	for i := range ones {
		ones[i] = 1
	}
	checkValues(t, "gradient of sum(ste(x))", grad, x.Shape().Dimensions, ones)
	s.differ(t, c, "eformer raises %s; quanta's NF4 STE works", c.Error.Type)
}
