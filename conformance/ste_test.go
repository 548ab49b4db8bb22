package conformance

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta"
)

type steParams struct {
	QType     string `json:"qtype"`
	BlockSize int    `json:"block_size"`
}

// straightThrough runs quanta.StraightThrough of typ on x and returns
// the forward value and the gradient of sum(ste(x) * cotangent) (sum(ste(x)) when cotangent is
// nil) with respect to x.
func straightThrough(s *suite, typ quanta.Type, blockSize int, x, cotangent *tensors.Tensor) (forward, grad *tensors.Tensor, err error) {
	fn := func(x, c *graph.Node) (*graph.Node, *graph.Node) {
		y := quanta.StraightThrough(x, quanta.Config{Type: typ, BlockSize: blockSize})
		loss := y
		if c != nil {
			loss = graph.Mul(y, c)
		}
		return y, graph.Gradient(graph.ReduceAllSum(loss), x)[0]
	}
	defer func() {
		if r := recover(); r != nil {
			err = errors.Errorf("panic: %v", r)
		}
	}()
	var exec *graph.Exec
	var args []any
	if cotangent == nil {
		exec, err = graph.NewExec(s.backend, func(x *graph.Node) (*graph.Node, *graph.Node) { return fn(x, nil) })
		args = []any{x}
	} else {
		exec, err = graph.NewExec(s.backend, fn)
		args = []any{x, cotangent}
	}
	if err != nil {
		return nil, nil, err
	}
	defer exec.Finalize()
	out, err := exec.Exec(args...)
	if err != nil {
		return nil, nil, err
	}
	return out[0], out[1], nil
}

// checkSTE: the gradient is the upstream cotangent, exactly (as eformer's); the forward value
// agrees with eformer's for NF4 (up to eformer's polynomial decode) and int8 (up to one rounding);
// for binary and ternary eformer's forward is trunc(w+1)−1, ours the quantizer's rule.
func checkSTE(s *suite, t *testing.T, c *Case) {
	var p steParams
	mustParams(t, c, &p)
	typ, err := quanta.ParseType(p.QType)
	if err != nil {
		t.Fatal(err)
	}
	w, cot := s.mustInput(t, c, "w"), s.mustInput(t, c, "c")
	forward, grad, err := straightThrough(s, typ, p.BlockSize, w, cot)
	if err != nil {
		t.Fatalf("STE %s: %+v", typ, err)
	}
	dims := w.Shape().Dimensions
	if forward.DType() != w.DType() || grad.DType() != w.DType() {
		t.Errorf("forward %s, gradient %s; want dtype %s", forward.Shape(), grad.Shape(), w.DType())
	}
	checkValues(t, "gradient = cotangent", grad, dims, tensorFloat64s(cot))
	checkValues(t, "eformer's gradient = cotangent", s.mustOutput(t, c, "grad"), dims, tensorFloat64s(cot))

	want := tensorFloat64s(s.mustOutput(t, c, "forward"))
	switch typ {
	case quanta.NF4:
		// eformer decodes with a polynomial: within 0.0149·absmax of the exact codebook.
		absOf := blockAbsmax(tensorFloat64s(w), dims, p.BlockSize)
		eps := epsilon(w.DType())
		checkClose(t, "forward vs eformer (polynomial decode)", forward, dims, want, func(i int) float64 {
			return 0.0149*absOf[i] + 2*eps*math.Abs(want[i])
		})
	case quanta.Int8:
		// The codes are eformer's on every backend (the graph quantizer follows XLA's
		// arithmetic); the product code·scale may differ by one rounding of the dtype, plus, on
		// the pure-Go backend, its truncating conversion to bfloat16.
		eps := 2*epsilon(w.DType()) + s.convertSlack(w.DType())
		checkClose(t, "forward vs eformer", forward, dims, want, func(i int) float64 {
			return eps * math.Abs(want[i])
		})
	default:
		got := tensorFloat64s(forward)
		differ := 0
		for i := range want {
			if got[i] != want[i] {
				differ++
			}
		}
		s.differ(t, c, "STE %s forward: eformer computes trunc(w+1)-1 for binary and ternary alike, quanta the quantizer's "+
			"rule (%d of %d values differ)", typ, differ, len(want))
	}
}

// blockAbsmax returns, for every element, the absmax of its NF4 block along the last axis.
func blockAbsmax(x []float64, dims []int, blockSize int) []float64 {
	last := dims[len(dims)-1]
	out := make([]float64, len(x))
	for start := 0; start < len(x); start += last {
		for b := 0; b < last; b += blockSize {
			end := min(b+blockSize, last)
			var m float64
			for i := b; i < end; i++ {
				m = max(m, math.Abs(x[start+i]))
			}
			for i := b; i < end; i++ {
				out[start+i] = m
			}
		}
	}
	return out
}
