package lowering_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/runtime"
)

// A codebook unrelated to NF4 (lowering serves any 16-entry table).
var testCodebook = [16]float32{-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7}

// FuzzPackUnpack: Unpack splits each byte into (high, low) nibbles in element order, and Pack
// inverts it.
func FuzzPackUnpack(f *testing.F) {
	f.Add([]byte{0x3C, 0x77, 0xFF, 0x00})
	f.Add([]byte{0x01, 0x10, 0xF0, 0x0F, 0xAB})
	backend := testutil.Backend(f)
	unpack := graph.MustNewExec(backend, func(p *graph.Node) (*graph.Node, *graph.Node) {
		codes := lowering.Unpack(p)
		return codes, lowering.Pack(codes)
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		packed := make([]uint8, 2*2*4) // (2 rows, 2 blocks, 4 bytes): blocks of 8
		copy(packed, data)
		out := unpack.MustExec(tensors.FromFlatDataAndDimensions(packed, 2, 2, 4))
		codes := tensors.MustCopyFlatData[uint8](out[0])
		for i, b := range packed {
			if codes[2*i] != b>>4 || codes[2*i+1] != b&15 {
				t.Fatalf("byte %02X unpacked to %d,%d", b, codes[2*i], codes[2*i+1])
			}
		}
		if again := tensors.MustCopyFlatData[uint8](out[1]); !slices.Equal(again, packed) {
			t.Fatalf("Pack(Unpack(%02X)) = %02X", packed, again)
		}
	})
}

// hostDequantize decodes packed (rows, nb, bs/2) with scales (rows, nb), keeping dim columns.
func hostDequantize(packed []uint8, scales []float32, rows, nb, bs, dim int) []float32 {
	out := make([]float32, 0, rows*dim)
	for r := range rows {
		for c := range dim {
			b := packed[(r*nb+c/bs)*bs/2+(c%bs)/2]
			code := b >> 4
			if c%2 == 1 {
				code = b & 15
			}
			out = append(out, testCodebook[code]*scales[r*nb+c/bs])
		}
	}
	return out
}

// TestStrategies: every strategy equals the dense product of the host-decoded weight, in every
// layout it serves, with the weight on either side.
func TestStrategies(t *testing.T) {
	backend := testutil.Backend(t)
	const rows, dim, bs = 12, 20, 8 // dim 20: 3 blocks, the last padded
	nb := (dim + bs - 1) / bs
	r := rand.New(rand.NewPCG(1, 2))
	packed := make([]uint8, rows*nb*bs/2)
	for i := range packed {
		packed[i] = uint8(r.IntN(256))
	}
	for i := range packed { // padding codes decode to 0 in NF4; here code 8 is 0
		if c := (i%(bs/2))*2 + (i/(bs/2))%nb*bs; c >= dim {
			packed[i] = 0x88
		}
	}
	scales := make([]float32, rows*nb)
	for i := range scales {
		scales[i] = float32(r.Float64() + 0.5)
	}
	wDense := tensors.FromFlatDataAndDimensions(hostDequantize(packed, scales, rows, nb, bs, dim), rows, dim)
	pT := tensors.FromFlatDataAndDimensions(packed, rows, nb, bs/2)
	sT := tensors.FromFlatDataAndDimensions(scales, rows, nb)
	for _, tc := range []struct {
		name         string
		xDims        []int
		xc, wc       []int
		weightOnLeft bool
	}{
		{"x@W", []int{1, rows}, []int{1}, []int{0}, false},
		{"x@W-m3", []int{3, rows}, []int{1}, []int{0}, false},
		{"x@Wt", []int{1, dim}, []int{1}, []int{1}, false},
		{"W@x", []int{dim, 2}, []int{0}, []int{1}, true},
		{"Wt@x", []int{rows, 2}, []int{0}, []int{0}, true},
	} {
		xVals := make([]float32, tc.xDims[0]*tc.xDims[1])
		for i := range xVals {
			xVals[i] = float32(r.NormFloat64())
		}
		x := tensors.FromFlatDataAndDimensions(xVals, tc.xDims...)
		want := tensors.MustCopyFlatData[float32](graph.MustExecOnce(backend, func(x, w *graph.Node) *graph.Node {
			if tc.weightOnLeft {
				return graph.DotGeneral(w, tc.wc, nil, x, tc.xc, nil)
			}
			return graph.DotGeneral(x, tc.xc, nil, w, tc.wc, nil)
		}, x, wDense))
		layout := lowering.LayoutOf(2, tc.wc, nil)
		for _, s := range append([]lowering.Strategy{lowering.Auto}, lowering.Strategies()...) {
			if !s.Applicable(layout) {
				continue
			}
			t.Run(fmt.Sprintf("%s/%s", tc.name, s), func(t *testing.T) {
				out := graph.MustExecOnce(backend, func(x, p, s2 *graph.Node) *graph.Node {
					w := lowering.Blockwise4{Packed: p, Scales: s2, Codebook: testCodebook, Dim: dim}
					return lowering.DotGeneral(x, tc.xc, nil, w, tc.wc, nil, tc.weightOnLeft, s)
				}, x, pT, sT)
				got := tensors.MustCopyFlatData[float32](out)
				if len(got) != len(want) {
					t.Fatalf("shape %s, want %d values", out.Shape(), len(want))
				}
				for i := range want {
					if math.Abs(float64(got[i]-want[i])) > 1e-4*math.Max(1, math.Abs(float64(want[i]))) {
						t.Fatalf("element %d: %v, want %v", i, got[i], want[i])
					}
				}
			})
		}
	}
}

func TestStrategyNotApplicablePanics(t *testing.T) {
	backend := testutil.Backend(t)
	defer func() {
		if r := recover(); r == nil {
			t.Errorf("BlockFactored with free blocks did not panic")
		}
	}()
	g := graph.NewGraph(backend, "bad")
	w := lowering.Blockwise4{Packed: graph.Const(g, [][][]uint8{{{0}}}), Scales: graph.Const(g, [][]float32{{1}}), Dim: 2}
	lowering.DotGeneral(graph.Const(g, [][]float32{{1}}), []int{1}, nil, w, []int{0}, nil, false, lowering.BlockFactored)
}

// TestSlicedPolyCodebook: SlicedPoly's arithmetic decode reproduces every NF4 code value to float32
// rounding (the reference is the codebook itself), for both nibbles and with the block scale.
func TestSlicedPolyCodebook(t *testing.T) {
	backend := testutil.Backend(t)
	codebook := nf4.Codebook()
	// Row 0 holds codes 0..15 in order, row 1 codes 15..0; one block of 16, scales 1 and 3.
	packed := make([]uint8, 16)
	for j := range 8 {
		packed[j] = uint8(2*j)<<4 | uint8(2*j+1)
		packed[8+j] = uint8(15-2*j)<<4 | uint8(14-2*j)
	}
	pT := tensors.FromFlatDataAndDimensions(packed, 2, 1, 8)
	sT := tensors.FromFlatDataAndDimensions([]float32{1, 3}, 2, 1)
	for _, tc := range []struct {
		name  string
		x     []float32
		scale float64 // |x|·block scale: the decode error is at most 4e-7 of it
		value func(i int) float64
	}{
		{"row0", []float32{1, 0}, 1, func(i int) float64 { return float64(codebook[i]) }},
		{"row1x2", []float32{0, 2}, 6, func(i int) float64 { return 6 * float64(codebook[15-i]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := graph.MustExecOnce(backend, func(x, p, s *graph.Node) *graph.Node {
				w := lowering.Blockwise4{Packed: p, Scales: s, Codebook: codebook, Dim: 16}
				return lowering.DotGeneral(x, []int{1}, nil, w, []int{0}, nil, false, lowering.SlicedPoly)
			}, tensors.FromFlatDataAndDimensions(tc.x, 1, 2), pT, sT)
			got := tensors.MustCopyFlatData[float32](out)
			for i, g := range got {
				want := tc.value(i)
				if math.Abs(float64(g)-want) > 4e-7*tc.scale {
					t.Errorf("code position %d: %v, want %v", i, g, want)
				}
			}
		})
	}
}

// TestChoose: one row with free blocks uses SlicedPoly on the pure-Go backend or with XLA's library
// fusions disabled, ProductTable otherwise; more rows use DequantizeDot.
func TestChoose(t *testing.T) {
	backend := testutil.Backend(t)
	t.Setenv("XLA_FLAGS", "")
	wantFree := lowering.ProductTable
	if runtime.IsGo(backend) {
		wantFree = lowering.SlicedPoly
	}
	if got := lowering.Choose(backend, 1, lowering.BlocksFree); got != wantFree {
		t.Errorf("Choose(1, BlocksFree) = %s, want %s", got, wantFree)
	}
	t.Setenv("XLA_FLAGS", "--xla_cpu_foo=1 "+runtime.LibraryFusionFlag)
	if !runtime.LibraryFusionsDisabled() {
		t.Errorf("LibraryFusionsDisabled() = false with XLA_FLAGS=%q", "--xla_cpu_foo=1 "+runtime.LibraryFusionFlag)
	}
	for _, tc := range []struct {
		m      int
		layout lowering.Layout
		want   lowering.Strategy
	}{
		{1, lowering.BlocksFree, lowering.SlicedPoly},
		{1, lowering.BlocksContracted, lowering.ProductTable},
		{1, lowering.General, lowering.DequantizeDot},
		{8, lowering.BlocksFree, lowering.DequantizeDot},
	} {
		if got := lowering.Choose(backend, tc.m, tc.layout); got != tc.want {
			t.Errorf("Choose(%d, %d) = %s, want %s", tc.m, tc.layout, got, tc.want)
		}
	}
}
