package lowering

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// SlabMaxRows is the largest number of activation rows whose DequantizeDot is slabbed: beyond it
// one weight-sized decode and one dot are faster (at 2048 rows, 406 ms slabbed against 359).
const SlabMaxRows = 64

// SlabBytes is the size of the dense float slab slabDot decodes at a time. At K = N = 4096 on XLA
// CPU (2 cores, library fusions off), NF4 at 8 / 64 / 512 rows took 9.9 / 39.5 / 127 ms with 1 MiB
// slabs, 8.2 / 22.5 / 102 with 4 MiB and 18.4 / 22.3 / 109 with 16 MiB (dense float32: 4.6 /
// 14.5 / 87); without slabs 25 / 36 / 106.
const SlabBytes = 4 << 20

// After returns x plus a term that is always exactly zero but computed from prev (IsFinite of one
// of prev's values, times zero: never NaN), so XLA schedules x's producer after prev. Chaining the
// slabs of a product this way makes XLA run them in order and reuse one buffer for all of them.
func After(prev, x *graph.Node) *graph.Node {
	one := prev
	for one.Rank() > 0 {
		one = graph.Squeeze(graph.SliceAxis(one, 0, graph.AxisElem(0)), 0)
	}
	zero := graph.Mul(graph.ConvertDType(graph.IsFinite(one), x.DType()), graph.ScalarZero(x.Graph(), x.DType()))
	return graph.Add(x, graph.BroadcastToDims(zero, x.Shape().Dimensions...))
}

// slabDot: x2 (M, K) times the weight (K, N) with blocks along N (BlocksFree), decoded a slab of
// rows at a time into a float (rows, N) block of about SlabBytes that one dot consumes. Each
// slab's decode depends on the previous partial product through a term that is always exactly
// zero (IsFinite(a value) · 0), so XLA runs the slabs in order and reuses one small buffer: a
// freshly allocated weight-sized float buffer per call (64 MiB at 4096×4096) costs more in page
// faults than the product of a few rows. decode builds the dense rows of a sub-weight.
func slabDot(x2 *graph.Node, w Blockwise4, cdt dtypes.DType, decode func(Blockwise4) *graph.Node) *graph.Node {
	k := w.Packed.Shape().Dim(0)
	rows := max(1, SlabBytes/(w.Dim*cdt.Size()))
	var acc *graph.Node
	for start := 0; start < k; start += rows {
		end := min(k, start+rows)
		r := graph.AxisRange(start, end)
		sub := w
		sub.Packed, sub.Scales = graph.SliceAxis(w.Packed, 0, r), graph.SliceAxis(w.Scales, 0, r)
		dense := decode(sub) // (rows, N)
		if acc != nil {
			dense = After(acc, dense)
		}
		d := graph.Dot(graph.SliceAxis(x2, 1, r), dense)
		if acc == nil {
			acc = d
		} else {
			acc = graph.Add(acc, d)
		}
	}
	return acc
}
