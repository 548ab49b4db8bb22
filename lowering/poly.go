package lowering

import (
	"math"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// polySlices is the largest number of slices of the contraction axis the Blockwise4 SlicedSum
// adds element-wise (docs/performance.md has the measurements behind it).
const polySlices = 8

// polyCoefficients returns c with codebook[4h+l] = Σ_{a,b} c[a][b]·h^a·l^b for the digits h, l in
// [0, 4): the bivariate cubic interpolating the codebook on the 4×4 grid of digits, computed in
// float64 (Newton's divided differences on the nodes 0..3, expanded to the monomial basis).
func polyCoefficients(codebook [16]float32) [4][4]float64 {
	cubic := func(f [4]float64) [4]float64 {
		d := f
		for k := 1; k < 4; k++ {
			for i := 3; i >= k; i-- {
				d[i] = (d[i] - d[i-1]) / float64(k)
			}
		}
		// d0 + d1·t + d2·t(t-1) + d3·t(t-1)(t-2)
		return [4]float64{d[0], d[1] - d[2] + 2*d[3], d[2] - 3*d[3], d[3]}
	}
	var perH [4][4]float64 // perH[h][b]: the cubic in l for each h
	for h := range 4 {
		var f [4]float64
		for l := range 4 {
			f[l] = float64(codebook[4*h+l])
		}
		perH[h] = cubic(f)
	}
	var c [4][4]float64
	for b := range 4 {
		var f [4]float64
		for h := range 4 {
			f[h] = perH[h][b]
		}
		ca := cubic(f)
		for a := range 4 {
			c[a][b] = ca[a]
		}
	}
	return c
}

// evalPoly evaluates Σ c[a][b]·h^a·l^b by Horner's rule (15 multiply-adds).
func evalPoly(c [4][4]float64, h, l *graph.Node) *graph.Node {
	var q [4]*graph.Node
	for a := range 4 {
		q[a] = graph.AddScalar(graph.Mul(l, graph.AddScalar(graph.Mul(l, graph.AddScalar(graph.MulScalar(l, c[a][3]),
			c[a][2])), c[a][1])), c[a][0])
	}
	return graph.Add(q[0], graph.Mul(h, graph.Add(q[1], graph.Mul(h, graph.Add(q[2], graph.Mul(h, q[3]))))))
}

// digits returns the four base-4 digits of the bytes b, least significant first, in cdt: integer
// division and bitwise-and, which every backend implements.
func digits(b *graph.Node, cdt dtypes.DType) [4]*graph.Node {
	g := b.Graph()
	var out [4]*graph.Node
	for i := range out {
		d := b
		if i > 0 {
			d = graph.Div(d, graph.Scalar(g, dtypes.Uint8, 1<<(2*i)))
		}
		if i < 3 {
			d = graph.BitwiseAnd(d, graph.Scalar(g, dtypes.Uint8, 3))
		}
		out[i] = graph.ConvertDType(d, cdt)
	}
	return out
}

// polyPairs returns the code values of the high and low nibbles of packed bytes, decoded
// arithmetically: each nibble's two digits through the bivariate cubic, within 4.8e-7 of the
// codebook in float32, and a codebook zero exactly zero (so that an infinite activation times it
// is NaN, as in the dense product).
func polyPairs(packed *graph.Node, codebook [16]float32, cdt dtypes.DType) (hi, lo *graph.Node) {
	c := polyCoefficients(codebook)
	d := digits(packed, cdt)
	hi, lo = evalPoly(c, d[3], d[2]), evalPoly(c, d[1], d[0])
	if snap, ok := zeroSnap(codebook); ok {
		hi, lo = snapToZero(hi, snap), snapToZero(lo, snap)
	}
	return hi, lo
}

// zeroSnap returns half the smallest non-zero magnitude of a codebook with a zero entry: a
// polynomial value below it stands for that zero.
func zeroSnap(codebook [16]float32) (float64, bool) {
	hasZero, smallest := false, math.Inf(1)
	for _, v := range codebook {
		if v == 0 {
			hasZero = true
		} else {
			smallest = min(smallest, math.Abs(float64(v)))
		}
	}
	return smallest / 2, hasZero
}

func snapToZero(v *graph.Node, snap float64) *graph.Node {
	return graph.Where(graph.LessThan(graph.Abs(v), graph.Scalar(v.Graph(), v.DType(), snap)), graph.ZerosLike(v), v)
}

// polyDecode is the dense weight in cdt, decoded arithmetically (polyPairs): XLA CPU with its
// library fusions off fuses it into one parallel loop where the gather decode runs apart.
func (w Blockwise4) polyDecode(cdt dtypes.DType) *graph.Node {
	hi, lo := polyPairs(w.Packed, w.Codebook, cdt)
	ps := w.Packed.Shape()
	pairs := graph.Stack([]*graph.Node{hi, lo}, -1) // (..., nb, bs/2, 2)
	values := graph.Reshape(pairs, append(slices.Clone(ps.Dimensions[:ps.Rank()-1]), 2*ps.Dim(-1))...)
	return w.scaleAndFlatten(values, cdt)
}

// slicedSum is SlicedSum for x·W, W (K, N) with blocks along N, returning (M, N) in p.cdt. Row k
// contributes xs[m, k, b]·v(code) to column n of block b, with xs = x·scale; the byte at (k, b, j)
// holds the codes of columns 2j (high nibble) and 2j+1 (low nibble) of block b, so the even and
// odd columns are two separate sums, interleaved only at the end, on the (M, N) result.
func (w Blockwise4) slicedSum(p *product) *graph.Node {
	x2 := p.toMK(p.activations()) // (M, K)
	ps := w.Packed.Shape()
	k, nb, half := ps.Dim(0), ps.Dim(1), ps.Dim(2)
	m := x2.Shape().Dim(0)
	// xs[m, k, b, 1] = x[m, k]·scale[k, b]
	xs := graph.InsertAxes(graph.Mul(graph.InsertAxes(x2, -1), graph.InsertAxes(graph.ConvertDType(w.Scales, p.cdt), 0)), -1)
	var even, odd *graph.Node
	for _, r := range sliceBounds(k, polySlices) {
		hi, lo := polyPairs(sliceAxis(w.Packed, 0, r[0], r[1]), w.Codebook, p.cdt) // (k', nb, half)
		xt := sliceActivations(xs, 1, r[0], r[1])                                  // (M, k', nb, 1)
		e, o := graph.Mul(graph.InsertAxes(hi, 0), xt), graph.Mul(graph.InsertAxes(lo, 0), xt)
		if even == nil {
			even, odd = e, o
		} else {
			even, odd = graph.Add(even, e), graph.Add(odd, o)
		}
	}
	ye, yo := graph.ReduceSum(even, 1), graph.ReduceSum(odd, 1) // (M, nb, half)
	out := graph.Reshape(graph.Stack([]*graph.Node{ye, yo}, -1), m, nb*2*half)
	if out.Shape().Dim(1) != w.Dim {
		out = sliceActivations(out, 1, 0, w.Dim)
	}
	return out
}
