package int8_test

import (
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/conformance"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/runtime"
)

// TestConformance quantizes the inputs of eformer's int8 vectors (conformance/testdata) and
// compares codes and scales bit for bit, and the materialized values.
func TestConformance(t *testing.T) {
	backend := testutil.Backend(t)
	idx, err := conformance.LoadIndex(filepath.Join("..", "conformance", "testdata"))
	if err != nil {
		t.Skipf("no conformance vectors: %v", err)
	}
	for i := range idx.Cases {
		c := &idx.Cases[i]
		if c.Kind != "int8" {
			continue
		}
		t.Run(c.ID, func(t *testing.T) {
			var attrs struct {
				Axis  []int  `json:"axis"`
				DType string `json:"dtype"`
			}
			if err := json.Unmarshal(c.Attrs, &attrs); err != nil {
				t.Fatal(err)
			}
			x, err := idx.Input(c, "x")
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range attrs.Axis {
				if a >= x.Shape().Rank() || a < -x.Shape().Rank() {
					t.Skipf("eformer wraps out-of-range axis %v modulo the rank; quanta rejects it", attrs.Axis)
				}
			}
			if !x.DType().IsFloat() {
				t.Skipf("input %s: quanta rejects non-float input", x.Shape())
			}
			dtype, err := dtypes.DTypeString(attrs.DType)
			if err != nil {
				t.Fatal(err)
			}
			a, err := qint8.QuantizeAs(x, dtype, attrs.Axis...)
			if err != nil {
				t.Fatal(err)
			}
			wantW, _ := idx.Output(c, "weight")
			wantS, _ := idx.Output(c, "scale")
			wantM, _ := idx.Output(c, "materialized")
			if got, want := codes(t, a), tensors.MustCopyFlatData[int8](wantW); !slices.Equal(got, want) {
				n := 0
				for i := range got {
					if got[i] != want[i] && n < 5 {
						t.Errorf("code %d: got %d, want %d", i, got[i], want[i])
						n++
					}
				}
			}
			if got, want := testutil.Float64s(t, a.Scale().Tensor()), testutil.Float64s(t, wantS); !slices.Equal(got, want) {
				n := 0
				for i := range got {
					if got[i] != want[i] && n < 5 {
						t.Errorf("scale %d: got %.10g, want %.10g", i, got[i], want[i])
						n++
					}
				}
			}
			goBackend := runtime.IsGo(backend)
			if goBackend && dtype == dtypes.Float16 {
				return // the pure-Go backend has no float16
			}
			m := testutil.Materialize(t, a)
			if m.DType() != wantM.DType() {
				t.Fatalf("materialized %s, want %s", m.Shape(), wantM.Shape())
			}
			got, want := testutil.Float64s(t, m), testutil.Float64s(t, wantM)
			for i := range got {
				// The pure-Go backend truncates bfloat16 products instead of rounding: one ulp.
				if got[i] != want[i] && !(goBackend && math.Abs(got[i]-want[i]) <= math.Abs(want[i])/128) {
					t.Fatalf("materialized[%d] = %g, want %g", i, got[i], want[i])
				}
			}
		})
	}
}
