package conformance

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
)

type matmulParams struct {
	Format      string          `json:"format"`
	Side        string          `json:"side"`
	BlockSize   int             `json:"block_size"`
	Axis        json.RawMessage `json:"axis"`
	OtherShape  []int           `json:"other_shape"`
	WShape      []int           `json:"w_shape"`
	QShape      []int           `json:"q_shape"`
	ResultDType string          `json:"result_dtype"`
}

// quantizeLike quantizes w as eformer's case did and checks the stored components against
// eformer's; it returns our array and the exact dense value of eformer's components (float64,
// logical shape w's: eformer's NF4 padding dropped).
func (s *suite) quantizeLike(t *testing.T, c *Case, p *matmulParams, w *tensors.Tensor) (implicitarray.Array, []float64) {
	t.Helper()
	switch p.Format {
	case "nf4":
		q, err := nf4.Quantize(w, p.BlockSize)
		if err != nil {
			t.Fatalf("nf4.Quantize: %+v", err)
		}
		packed, absmax := s.mustOutput(t, c, "packed"), s.mustOutput(t, c, "absmax")
		s.checkNF4Components(t, c, q, packed, absmax, p.BlockSize)
		exact, _ := nf4Exact(s.idx.NF4Codebook, packed, absmax, p.BlockSize, p.WShape, dtypes.Float64)
		return q, exact
	case "int8":
		q, err := int8.Quantize(w, parseAxes(t, p.Axis)...)
		if err != nil {
			t.Fatalf("int8.Quantize: %+v", err)
		}
		weight, scale := s.mustOutput(t, c, "weight"), s.mustOutput(t, c, "scale")
		s.identical(t, "weight", q.Weight(), weight)
		s.identical(t, "scale", q.Scale(), scale)
		return q, int8Dense(weight, scale)
	case "binary", "ternary", "onebit":
		var q *onebit.Array
		var err error
		switch p.Format {
		case "binary":
			q, err = onebit.QuantizeBinary(w, nil)
		case "ternary":
			q, err = onebit.QuantizeTernary(w, nil)
		default:
			q, err = onebit.Pack(w, nil)
		}
		if err != nil {
			t.Fatalf("onebit %s: %+v", p.Format, err)
		}
		s.identical(t, "weight (packed)", q.Packed(), s.mustOutput(t, c, "weight"))
		return q, tensorFloat64s(s.mustOutput(t, c, "materialized"))
	}
	t.Fatalf("unknown format %q", p.Format)
	return nil, nil
}

// checkMatMul: x @ q (or q @ y) with our fused lowering, against a float64 reference computed from
// eformer's stored components (exact decode), and against eformer's own result, whose tolerance
// adds eformer's NF4 polynomial error and its bf16 rounding of int8 products.
func checkMatMul(s *suite, t *testing.T, c *Case) {
	var p matmulParams
	mustParams(t, c, &p)
	w := s.mustInput(t, c, "w")
	otherName := "x"
	if p.Side == "lhs" {
		otherName = "y"
	}
	other := s.mustInput(t, c, otherName)
	q, dense := s.quantizeLike(t, c, &p, w)

	e, err := implicitarray.NewExec(s.backend, func(o *graph.Node, q implicitarray.Value) *graph.Node {
		if p.Side == "lhs" {
			return implicitarray.Materialize(implicitarray.MatMul(q, o))
		}
		return implicitarray.Materialize(implicitarray.MatMul(o, q))
	})
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer e.Finalize()
	out, err := e.Call1(other, q)
	if err != nil {
		t.Fatalf("%s matmul: %+v", c.Call, err)
	}
	got := out.(*tensors.Tensor)

	// Reference in float64 from eformer's components, and the Σ|a||b| scale of each result.
	a, b := tensorFloat64s(other), dense
	aDims, bDims := p.OtherShape, p.WShape
	if p.Side == "lhs" {
		a, b = dense, tensorFloat64s(other)
		aDims, bDims = p.WShape, p.OtherShape
	}
	ref, mag, dims := matmul64(a, aDims, b, bDims)
	// The part of eformer's result that comes from its own decode: Σ|a|·|decode − exact|.
	eformerDecode := tensorFloat64s(s.mustOutput(t, c, "materialized"))
	if p.Format == "nf4" {
		qs := p.QShape
		eformerDecode = unpad(eformerDecode, qs, p.WShape)
	}
	decodeErr := make([]float64, len(dense))
	for i := range dense {
		decodeErr[i] = math.Abs(eformerDecode[i] - dense[i])
	}
	var polyTerm []float64
	if p.Side == "lhs" {
		polyTerm, _, _ = matmul64(decodeErr, aDims, absAll(b), bDims)
	} else {
		polyTerm, _, _ = matmul64(absAll(a), aDims, decodeErr, bDims)
	}

	ourEps := 8 * epsilon(got.DType())
	if other.DType() == dtypes.BFloat16 || w.DType() == dtypes.BFloat16 {
		ourEps = max(ourEps, 2*epsilon(dtypes.BFloat16))
	}
	gv := tensorFloat64s(got)
	var worst float64
	for i := range ref {
		if mag[i] > 0 {
			worst = max(worst, math.Abs(gv[i]-ref[i])/(epsilon(got.DType())*mag[i]))
		}
	}
	t.Logf("ours vs exact reference: max error %.3g x eps(%s) x sum|a||b|", worst, got.DType())
	// onebit's fused reduction sums the activations times byte prefixes (up to 255) and combines
	// them: its rounding error scales with 255·Σ|dense|, not Σ|a||b|.
	fusedTerm := make([]float64, len(ref))
	if p.Format != "nf4" && p.Format != "int8" {
		if p.Side == "lhs" {
			fusedTerm, _, _ = matmul64(onesLike(a), aDims, absAll(b), bDims)
		} else {
			fusedTerm, _, _ = matmul64(absAll(a), aDims, onesLike(b), bDims)
		}
		for i := range fusedTerm {
			fusedTerm[i] *= 256 * epsilon(got.DType())
		}
	}
	checkClose(t, "ours vs exact reference", got, dims, ref, func(i int) float64 { return ourEps*mag[i] + fusedTerm[i] })

	want := s.mustOutput(t, c, "result")
	wantDType := want.DType()
	if wantDType != got.DType() {
		s.differ(t, c, "result dtype: eformer %s, quanta %s", wantDType, got.DType())
	}
	wantDims := want.Shape().Dimensions
	wv := tensorFloat64s(want)
	if !slices.Equal(wantDims, dims) {
		// eformer's NF4 keeps the padded columns; a 1-D lhs with a (1,N) int8 scale gives (1,N).
		if p.Format == "nf4" && len(wantDims) == len(dims) {
			wv = unpad(wv, wantDims, dims)
		} else if len(wv) != len(ref) {
			t.Fatalf("eformer's result %v cannot be compared with ours %v", wantDims, dims)
		}
		s.differ(t, c, "result shape: eformer %v, quanta %v", wantDims, dims)
	}
	eEps := 8 * epsilon(wantDType)
	if other.DType() == dtypes.BFloat16 || w.DType() == dtypes.BFloat16 || wantDType == dtypes.BFloat16 {
		eEps = max(eEps, 2*epsilon(dtypes.BFloat16))
	}
	var maxDiff float64
	for i := range wv {
		maxDiff = max(maxDiff, math.Abs(gv[i]-wv[i]))
	}
	t.Logf("max |ours - eformer| = %.4g (eformer decode term up to %.4g)", maxDiff, slices.Max(polyTerm))
	checkClose(t, "ours vs eformer's result", got, dims, wv, func(i int) float64 {
		return (ourEps+eEps)*mag[i] + fusedTerm[i] + polyTerm[i] + 1e-30
	})
}

func onesLike(v []float64) []float64 {
	out := make([]float64, len(v))
	for i := range out {
		out[i] = 1
	}
	return out
}

func absAll(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Abs(x)
	}
	return out
}

// matmul64 is numpy's matmul for a (…, K) or (K,) by (K, N) or (K,): returns the product, the
// Σ|a||b| magnitudes and the result dimensions.
func matmul64(a []float64, aDims []int, b []float64, bDims []int) (out, mag []float64, dims []int) {
	if len(bDims) != 2 {
		panic(fmt.Sprintf("matmul64: rhs dims %v; want rank 2", bDims))
	}
	k, n := bDims[0], bDims[1]
	if aDims[len(aDims)-1] != k {
		panic(fmt.Sprintf("matmul64: %v @ %v", aDims, bDims))
	}
	m := len(a) / k
	out, mag = make([]float64, m*n), make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s, sa float64
			for l := range k {
				s += a[i*k+l] * b[l*n+j]
				sa += math.Abs(a[i*k+l] * b[l*n+j])
			}
			out[i*n+j], mag[i*n+j] = s, sa
		}
	}
	dims = append(slices.Clone(aDims[:len(aDims)-1]), n)
	return out, mag, dims
}
