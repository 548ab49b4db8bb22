package modelbase

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// TestPickRow: the row at last of x [2, 3, 2] (x[b, s, d] = 100b + 10s + d); a last outside the
// sequence, known only at run time, gives a row of NaN (a row of zeros would pass for logits), and
// a constant one or operands of the wrong shape or type panic naming the op.
func TestPickRow(t *testing.T) {
	backend := testutil.Backend(t)
	const batch, seq, dim = 2, 3, 2
	x := make([]float32, batch*seq*dim)
	for b := range batch {
		for s := range seq {
			for d := range dim {
				x[(b*seq+s)*dim+d] = float32(100*b + 10*s + d)
			}
		}
	}
	xt := tensors.FromFlatDataAndDimensions(x, batch, seq, dim)
	exec := graph.MustNewExec(backend, func(x, last *graph.Node) *graph.Node { return PickRow("test.Step", x, last) })
	defer exec.Finalize()
	for _, last := range []int32{0, 1, 2, -1, 3, math.MaxInt32} {
		got := exec.MustExec(xt, last)[0].Value().([][]float32)
		for b := range batch {
			for d := range dim {
				want := float64(100*b + 10*int(last) + d)
				if last < 0 || last >= seq {
					want = math.NaN()
				}
				if g := float64(got[b][d]); g != want && !(math.IsNaN(g) && math.IsNaN(want)) {
					t.Errorf("last %d: row[%d][%d] = %g; want %g", last, b, d, g, want)
				}
			}
		}
	}
	const param = math.MinInt // last a parameter, not a constant
	for _, tc := range []struct {
		x, last   shapes.Shape
		constLast int
		want      string
	}{
		{shapes.Make(dtypes.Float32, seq, dim), shapes.Make(dtypes.Int32), param, "x (Float32)[3 2]"},
		{shapes.Make(dtypes.Float32, batch, seq, dim), shapes.Make(dtypes.Int32, 1), param, "last (Int32)[1]"},
		{shapes.Make(dtypes.Float32, batch, seq, dim), shapes.Make(dtypes.Float32), param, "last (Float32)"},
		{shapes.Make(dtypes.Float32, batch, seq, dim), shapes.Make(dtypes.Int32), seq, "last 3 outside the sequence of 3"},
		{shapes.Make(dtypes.Float32, batch, seq, dim), shapes.Make(dtypes.Int32), -2, "last -2 outside the sequence of 3"},
	} {
		name := fmt.Sprintf("x=%s/last=%s", tc.x, tc.last)
		if tc.constLast != param {
			name = fmt.Sprintf("x=%s/last=%d", tc.x, tc.constLast)
		}
		t.Run(name, func(t *testing.T) {
			err := func() (err error) {
				defer testutil.RecoverError(&err)
				g := graph.NewGraph(backend, "pickrow")
				defer g.Finalize()
				last := graph.Parameter(g, "last", tc.last)
				if tc.constLast != param {
					last = graph.Const(g, int32(tc.constLast))
				}
				PickRow("test.Step", graph.Parameter(g, "x", tc.x), last)
				return nil
			}()
			if err == nil || !strings.Contains(err.Error(), "test.Step") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("panic %v; want one naming test.Step and %q", err, tc.want)
			}
		})
	}
}

// TestPickRowNarrowIndex: a last of an integer type narrower than the sequence's length (uint8
// into 300 positions, int8 into 200) picks its row: the positions are not counted in last's type,
// where they would wrap (300 as a uint8 is 44, and every last from 44 on gave NaN).
func TestPickRowNarrowIndex(t *testing.T) {
	backend := testutil.Backend(t)
	for _, tc := range []struct {
		seq  int
		last any
		want float32
	}{{300, uint8(50), 50}, {300, uint8(255), 255}, {200, int8(5), 5}, {200, int8(127), 127}, {200, int8(-1), float32(math.NaN())}} {
		x := make([]float32, tc.seq)
		for s := range x {
			x[s] = float32(s)
		}
		exec := graph.MustNewExec(backend, func(x, last *graph.Node) *graph.Node { return PickRow("test.Step", x, last) })
		got := exec.MustExec(tensors.FromFlatDataAndDimensions(x, 1, tc.seq, 1), tc.last)[0].Value().([][]float32)[0][0]
		exec.Finalize()
		if got != tc.want && !(math.IsNaN(float64(got)) && math.IsNaN(float64(tc.want))) {
			t.Errorf("seq %d, last %v (%T): %g; want %g", tc.seq, tc.last, tc.last, got, tc.want)
		}
	}
}
