package conformance

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/x448/float16"
)

// suite is what every case check gets: the index, the backend and the running summary.
type suite struct {
	idx     *Index
	backend backends.Backend
	sum     *summary
}

// summary collects the figures TestConformance reports at the end.
type summary struct {
	casesByKind map[string]int
	// identical counts the component comparisons (packed bytes, absmax, int8 codes and scales,
	// 1-bit bytes) found bit-identical to eformer's; compared counts all of them.
	identical, compared int
	// identicalExcused counts the comparisons identical except for documented eformer artifacts.
	identicalExcused int
	// nf4PolyRel is the largest |eformer's polynomial decode − codebook·absmax| / absmax over
	// every NF4 element compared, at nf4PolyCase (bf16/f16 cases include the rounding of eformer's
	// output to that dtype); nf4PolyRelF32 the same over float32 cases only.
	nf4PolyRel, nf4PolyRelF32 float64
	nf4PolyCase               string
	// differences lists, per case id, where quanta differs from eformer on purpose.
	differences map[string][]string
}

func newSummary() *summary {
	return &summary{casesByKind: map[string]int{}, differences: map[string][]string{}}
}

// skipFloat16OnGo skips the rest of a case that needs a graph over float16 data on the pure-Go
// backend, which has no float16 (the byte comparisons done before still count).
func (s *suite) skipFloat16OnGo(t *testing.T, ds ...dtypes.DType) {
	t.Helper()
	if runtime.IsGo(s.backend) && slices.Contains(ds, dtypes.Float16) {
		t.Skip("the pure-Go backend has no float16: bytes checked, graph checks skipped")
	}
}

// convertSlack is the relative error a graph-side conversion to dtype may add on this backend:
// the pure-Go backend converts float32 to bfloat16 by truncation (XLA rounds to nearest even),
// one bfloat16 ulp at most.
func (s *suite) convertSlack(dtype dtypes.DType) float64 {
	if runtime.IsGo(s.backend) && dtype == dtypes.BFloat16 {
		return 0x1p-7
	}
	return 0
}

// differ records a deliberate difference observed on case c (and logs it).
func (s *suite) differ(t *testing.T, c *Case, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	t.Logf("deliberate difference: %s", msg)
	s.sum.differences[c.ID] = append(s.sum.differences[c.ID], msg)
}

// report logs the summary.
func (s *summary) report(t *testing.T, idx *Index) {
	t.Helper()
	var kinds []string
	total := 0
	for k, n := range s.casesByKind {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(kinds)
	var diffs []string
	for id, list := range s.differences {
		diffs = append(diffs, fmt.Sprintf("  %s: %s", id, strings.Join(list, "; ")))
	}
	sort.Strings(diffs)
	t.Logf("conformance summary (eformer %s, jax %s):\n"+
		"  cases run: %d (%s)\n"+
		"  byte-identical component comparisons: %d of %d (%d more identical outside documented eformer artifacts)\n"+
		"  NF4 max |eformer polynomial decode - exact codebook x absmax|: %.6g x absmax over all cases (%s), %.6g x absmax over float32 cases\n"+
		"  deliberate differences observed in %d cases:\n%s",
		idx.Versions["eformer"], idx.Versions["jax"], total, strings.Join(kinds, ", "),
		s.identical, s.compared, s.identicalExcused, s.nf4PolyRel, s.nf4PolyCase, s.nf4PolyRelF32, len(diffs), strings.Join(diffs, "\n"))
}

// mustInput and mustOutput load a case's arrays, failing the test on error.
func (s *suite) mustInput(t *testing.T, c *Case, name string) *tensors.Tensor {
	t.Helper()
	return mustLoad(t, s.idx.Input, c, name)
}

func (s *suite) mustOutput(t *testing.T, c *Case, name string) *tensors.Tensor {
	t.Helper()
	return mustLoad(t, s.idx.Output, c, name)
}

func mustLoad(t *testing.T, load func(*Case, string) (*tensors.Tensor, error), c *Case, name string) *tensors.Tensor {
	t.Helper()
	x, err := load(c, name)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	return x
}

// materialize materializes q on the host, failing the test on error.
func (s *suite) materialize(t *testing.T, q implicitarray.Array) *tensors.Tensor {
	t.Helper()
	got, err := implicitarray.MaterializeOnHost(s.backend, q)
	if err != nil {
		t.Fatalf("materialize: %+v", err)
	}
	return got
}

// mustParams decodes the case's params into p.
func mustParams(t *testing.T, c *Case, p any) {
	t.Helper()
	if err := c.decodeParams(p); err != nil {
		t.Fatalf("%+v", err)
	}
}

// identical asserts that got (a host component of ours) has eformer's dtype, dimensions and
// bytes, and counts the comparison.
func (s *suite) identical(t *testing.T, what string, got implicitarray.Component, want *tensors.Tensor) {
	t.Helper()
	s.identicalExcept(t, what, got, want, nil)
}

// identicalExcept is identical, except that elements at the flat indices for which excused
// returns true may differ: those are documented eformer artifacts, and the comparison is counted
// as identical only if they do not differ. It returns the number of excused elements that differ.
func (s *suite) identicalExcept(t *testing.T, what string, got implicitarray.Component, want *tensors.Tensor,
	excused func(flat int) bool) (excusedDiffs int) {
	t.Helper()
	s.sum.compared++
	if !got.IsTensor() {
		t.Errorf("%s: our component is not a host tensor", what)
		return 0
	}
	g := got.Tensor()
	if g.DType() != want.DType() || !slices.Equal(g.Shape().Dimensions, want.Shape().Dimensions) {
		t.Errorf("%s: ours is %s, eformer's %s", what, g.Shape(), want.Shape())
		return 0
	}
	gb, wb := tensorBytes(g), tensorBytes(want)
	if bytes.Equal(gb, wb) {
		s.sum.identical++
		return 0
	}
	size := want.DType().Size()
	gv, wv := tensorFloat64s(g), tensorFloat64s(want)
	var firsts []string
	count := 0
	for i := range wv {
		if bytes.Equal(gb[i*size:(i+1)*size], wb[i*size:(i+1)*size]) {
			continue
		}
		if excused != nil && excused(i) {
			excusedDiffs++
			continue
		}
		if count < 5 {
			firsts = append(firsts, fmt.Sprintf("flat %d %v: ours %v, eformer %v", i, hostdata.Unflatten(i, want.Shape().Dimensions), gv[i], wv[i]))
		}
		count++
	}
	if count > 0 {
		t.Errorf("%s: %d of %d elements differ from eformer's; first: %s", what, count, len(wv), strings.Join(firsts, "; "))
	} else {
		s.sum.identicalExcused++
	}
	return excusedDiffs
}

// roundTo rounds v (exactly representable in float64) to dtype with round-half-to-even, as XLA's
// convert does, and returns the rounded value.
func roundTo(v float64, dtype dtypes.DType) float64 {
	switch dtype {
	case dtypes.Float64:
		return v
	case dtypes.Float32:
		return float64(float32(v))
	case dtypes.BFloat16:
		// bfloat16.FromFloat32 truncates; XLA rounds to nearest even.
		bits := math.Float32bits(float32(v))
		bits += 0x7FFF + (bits>>16)&1
		return float64(math.Float32frombits(bits &^ 0xFFFF))
	case dtypes.Float16:
		return float64(float16.Fromfloat32(float32(v)).Float32())
	case dtypes.Int8:
		return v
	}
	panic(fmt.Sprintf("roundTo: unsupported dtype %s", dtype))
}

// unitRoundoff is the unit roundoff of each float dtype.
var unitRoundoff = map[dtypes.DType]float64{
	dtypes.Float64: 0x1p-53, dtypes.Float32: 0x1p-24, dtypes.BFloat16: 0x1p-8, dtypes.Float16: 0x1p-11,
}

// epsilon is the unit roundoff of a float dtype (0 for another dtype).
func epsilon(dtype dtypes.DType) float64 { return unitRoundoff[dtype] }

// checkValues asserts got[i] == want[i] exactly (NaN equal to NaN), with got's dimensions
// equal to dims.
func checkValues(t *testing.T, what string, got *tensors.Tensor, dims []int, want []float64) {
	t.Helper()
	checkClose(t, what, got, dims, want, func(int) float64 { return 0 })
}

// checkClose asserts |got[i] − want[i]| <= tol(i), with got's dimensions equal to dims.
func checkClose(t *testing.T, what string, got *tensors.Tensor, dims []int, want []float64, tol func(i int) float64) {
	t.Helper()
	if !slices.Equal(got.Shape().Dimensions, dims) {
		t.Errorf("%s: ours has shape %s, want dimensions %v", what, got.Shape(), dims)
		return
	}
	g := tensorFloat64s(got)
	count := 0
	var firsts []string
	for i := range want {
		if g[i] == want[i] || (math.IsNaN(g[i]) && math.IsNaN(want[i])) || math.Abs(g[i]-want[i]) <= tol(i) {
			continue
		}
		if count < 5 {
			firsts = append(firsts, fmt.Sprintf("%v: ours %v, want %v (tolerance %.3g)", hostdata.Unflatten(i, dims), g[i], want[i], tol(i)))
		}
		count++
	}
	if count > 0 {
		t.Errorf("%s: %d of %d values differ; first: %s", what, count, len(want), strings.Join(firsts, "; "))
	}
}
