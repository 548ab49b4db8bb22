package conformance

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/onebit"
)

// checkOneBit: Array1B.quantize(w) of values in {-1, 0, +1} is onebit.Pack: identical bytes,
// equal values in the input's dtype.
func checkOneBit(s *suite, t *testing.T, c *Case) {
	x := s.mustInput(t, c, "x")
	q, err := onebit.Pack(x, nil)
	if err != nil {
		if !holdsOnlyTernary(x) {
			s.differ(t, c, "values outside {-1, 0, +1}: eformer stores trunc(w+1) (2 bits, 3 decodes as +2), "+
				"onebit.Pack returns an error (%v)", err)
			return
		}
		t.Fatalf("onebit.Pack(%s, nil): %+v", x.Shape(), err)
	}
	if !holdsOnlyTernary(x) {
		t.Fatalf("onebit.Pack accepted values outside {-1, 0, +1}")
	}
	s.identical(t, "weight (packed)", q.Packed(), s.mustOutput(t, c, "weight"))
	want := s.mustOutput(t, c, "materialized")
	s.checkMaterialized(t, q, want)
}

// checkMaterialized asserts that q materializes on the host in want's dtype, to want's values.
func (s *suite) checkMaterialized(t *testing.T, q implicitarray.Array, want *tensors.Tensor) *tensors.Tensor {
	t.Helper()
	got := s.materialize(t, q)
	if got.DType() != want.DType() {
		t.Errorf("materialized dtype %s, eformer's %s", got.DType(), want.DType())
	}
	checkValues(t, "materialized", got, want.Shape().Dimensions, tensorFloat64s(want))
	return got
}

// holdsOnlyTernary reports whether every value of x is -1, 0 or +1.
func holdsOnlyTernary(x *tensors.Tensor) bool {
	for _, v := range tensorFloat64s(x) {
		if v != -1 && v != 0 && v != 1 {
			return false
		}
	}
	return true
}

// checkBinaryTernary: quantize(x, dtype=binary|ternary) is onebit.QuantizeBinary/QuantizeTernary
// (unscaled, the eformer-compatible default): identical bytes, equal int8 values, and the same
// values as eformer's simulate=True.
func checkBinaryTernary(s *suite, t *testing.T, c *Case) {
	x := s.mustInput(t, c, "x")
	quantize := onebit.QuantizeBinary
	if c.Kind == "ternary" {
		quantize = onebit.QuantizeTernary
	}
	q, err := quantize(x, nil)
	if err != nil {
		t.Fatalf("onebit.Quantize %s(%s): %+v", c.Kind, x.Shape(), err)
	}
	want := s.mustOutput(t, c, "materialized")
	if c.Kind == "ternary" {
		if th := tensorFloat64s(s.mustOutput(t, c, "threshold"))[0]; math.IsInf(th, 0) || math.IsNaN(th) {
			// eformer's jnp.std in the input dtype overflowed: its threshold is not finite.
			if n := s.identicalExcept(t, "weight (packed)", q.Packed(), s.mustOutput(t, c, "weight"),
				func(int) bool { return true }); n > 0 {
				s.differ(t, c, "ternary threshold: eformer's 0.5*std(x) in %s overflows to %v (x^2 > max float), so every "+
					"value is 0; quanta computes the std in float64 (%d packed bytes differ)", x.DType(), th, n)
			}
			return
		}
	}
	s.identical(t, "weight (packed)", q.Packed(), s.mustOutput(t, c, "weight"))
	s.skipFloat16OnGo(t, x.DType())
	got := s.checkMaterialized(t, q, want)
	sim := s.mustOutput(t, c, "simulated")
	checkValues(t, "simulated (eformer's simulate=True)", got, sim.Shape().Dimensions, tensorFloat64s(sim))
}
