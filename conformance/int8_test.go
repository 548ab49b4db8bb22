package conformance

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/hostdata"
)

type int8Params struct {
	API              string          `json:"api"`
	Axis             json.RawMessage `json:"axis"`
	DType            string          `json:"dtype"`
	InputShape       []int           `json:"input_shape"`
	MaterializeDType *string         `json:"materialize_dtype"`
}

// parseAxes reads eformer's axis argument: null (the default, (-1,)), an int or a list.
func parseAxes(t *testing.T, raw json.RawMessage) []int {
	t.Helper()
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}
	}
	var list []int
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatalf("axis %s: %v", raw, err)
	}
	return list
}

// checkInt8: weight codes and scales identical to eformer's; materialized values within one
// rounding of the materialization dtype.
func checkInt8(s *suite, t *testing.T, c *Case) {
	var p int8Params
	mustParams(t, c, &p)
	x := s.mustInput(t, c, "x")
	axes := parseAxes(t, p.Axis)
	rank := x.Rank()
	for i, a := range axes {
		if a < -rank || a >= rank {
			// eformer wraps an out-of-range axis modulo the rank; quanta rejects it.
			if _, err := int8.Quantize(x, axes...); err == nil {
				t.Fatalf("int8.Quantize accepted axis %d on rank %d", a, rank)
			}
			wrapped := ((a % rank) + rank) % rank
			s.differ(t, c, "axis %d on rank %d: eformer wraps it to %d, int8.Quantize returns an error; checked with axis %d",
				a, rank, wrapped, wrapped)
			axes[i] = wrapped
		}
	}
	mdtype := dtypes.InvalidDType
	if p.MaterializeDType != nil {
		var err error
		if mdtype, err = dtypeOf(*p.MaterializeDType); err != nil {
			t.Fatal(err)
		}
	}
	q, err := int8.QuantizeAs(x, mdtype, axes...)
	if err != nil {
		t.Fatalf("int8.QuantizeAs(%s, %s, %v): %+v", x.Shape(), mdtype, axes, err)
	}
	weight, scale := s.mustOutput(t, c, "weight"), s.mustOutput(t, c, "scale")
	s.identical(t, "weight", q.Weight(), weight)
	s.identical(t, "scale", q.Scale(), scale)

	want := s.mustOutput(t, c, "materialized")
	if q.Shape().DType != want.DType() {
		t.Errorf("materialization dtype %s, eformer's %s", q.Shape().DType, want.DType())
	}
	s.skipFloat16OnGo(t, x.DType(), q.Shape().DType)
	got := s.materialize(t, q)
	// Reference: eformer's materialized values; ours may differ by one rounding of the dtype
	// (weight × scale is computed in float32, then converted).
	wv := tensorFloat64s(want)
	eps := 2*max(epsilon(want.DType()), epsilon(scale.DType())) + s.convertSlack(want.DType())
	checkClose(t, "materialized", got, want.Shape().Dimensions, wv, func(i int) float64 {
		return eps * math.Abs(wv[i])
	})
	if p.API == "quantize" {
		sim := s.mustOutput(t, c, "simulated")
		checkClose(t, "eformer's simulated vs our materialized", got, sim.Shape().Dimensions, tensorFloat64s(sim),
			func(i int) float64 { return eps * math.Abs(wv[i]) })
	}
}

// int8Dense is weight × scale (broadcast) in float64: the exact value of eformer's components.
func int8Dense(weight, scale *tensors.Tensor) []float64 {
	w, sc := tensorFloat64s(weight), tensorFloat64s(scale)
	dims, sdims := weight.Shape().Dimensions, scale.Shape().Dimensions
	out := make([]float64, len(w))
	for i := range w {
		idx := hostdata.Unflatten(i, dims)
		flat := 0
		for k, d := range sdims {
			v := idx[k]
			if d == 1 {
				v = 0
			}
			flat = flat*d + v
		}
		out[i] = w[i] * sc[flat]
	}
	return out
}
