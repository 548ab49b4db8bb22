package cpukernels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/x448/float16"
)

// halfFields lists the byte offsets of a block's half-precision fields (d, and dmin or m), from
// ggml-common.h's layouts (package gguf documents them).
func halfFields(typ gguf.Type) []int {
	switch typ {
	case gguf.TypeQ4_1, gguf.TypeQ5_1, gguf.TypeQ4_K, gguf.TypeQ5_K:
		return []int{0, 2}
	case gguf.TypeQ2_K:
		return []int{80, 82}
	case gguf.TypeQ3_K:
		return []int{108}
	case gguf.TypeQ6_K:
		return []int{208}
	}
	return []int{0} // Q4_0, Q5_0, Q8_0, IQ4_NL
}

// ggmlWeight returns n rows of k elements of typ: random bytes, with every half field set by
// half (given the random source).
func ggmlWeight(r *rand.Rand, typ gguf.Type, n, k int, half func(r *rand.Rand) uint16) []uint8 {
	bs, bb := typ.BlockSize(), typ.BlockBytes()
	blocks := randBytes(r, n*k/bs*bb)
	for b := 0; b < len(blocks); b += bb {
		for _, off := range halfFields(typ) {
			binary.LittleEndian.PutUint16(blocks[b+off:], half(r))
		}
	}
	return blocks
}

// ordinaryHalf is a finite scale: ±(1 + f)·2^e, e in [-12, -4], sometimes 0.
func ordinaryHalf(r *rand.Rand) uint16 {
	if r.IntN(16) == 0 {
		return 0
	}
	v := float32(math.Ldexp(1+r.Float64(), -4-r.IntN(9)))
	if r.IntN(2) == 0 {
		v = -v
	}
	return float16.Fromfloat32(v).Bits()
}

// exactHalf is ±2^-4 or 0: with integer activations in [-4, 4] and k ≤ 1024, every partial sum
// of a product is a multiple of 2^-4 below 2^20, exact in float32 in any order.
func exactHalf(r *rand.Rand) uint16 {
	switch r.IntN(8) {
	case 0:
		return 0
	case 1, 2, 3:
		return 0xAC00 // -2^-4
	}
	return 0x2C00 // 2^-4
}

// specialHalves are the edge cases of the scales' decode: zeros, subnormals, the largest finite,
// infinities, NaNs.
var specialHalves = []uint16{0x0000, 0x8000, 0x0001, 0x03FF, 0x8001, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00,
	0x7E00, 0x7C01, 0xFE00, 0x3C00, 0x1234}

// decodeRef is the reference weight: gguf.Decode, ggml's values bit for bit (checked there
// against ggml's C code and gguf-py).
func decodeRef(t *testing.T, typ gguf.Type, blocks []uint8, n, k int) []float32 {
	t.Helper()
	w := make([]float32, n*k)
	if err := gguf.Decode(typ, blocks, w); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestGGMLBlocks: the kernels know every block type with gguf's sizes, and no other type.
func TestGGMLBlocks(t *testing.T) {
	for _, typ := range gguf.BlockTypes() {
		bs, bb, ok := GGMLBlock(typ)
		if !ok || bs != typ.BlockSize() || bb != typ.BlockBytes() {
			t.Errorf("GGMLBlock(%s) = %d, %d, %v; want %d, %d", typ, bs, bb, ok, typ.BlockSize(), typ.BlockBytes())
		}
	}
	for _, typ := range []gguf.Type{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ8_1, gguf.TypeQ8_K, gguf.TypeBF16, 99} {
		if _, _, ok := GGMLBlock(typ); ok {
			t.Errorf("GGMLBlock(%s) accepted", typ)
		}
	}
}

// TestGGMLDecode: on every ISA path, the tile decode of every block type gives gguf.Decode's
// values bit for bit (a NaN matches any NaN), with ordinary and special scales.
func TestGGMLDecode(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		for ti, typ := range gguf.BlockTypes() {
			r := newRand(uint64(ti))
			const rows = 48
			k := 2 * typ.BlockSize()
			if ti%2 == 1 {
				k = 4096 + 2*typ.BlockSize() // rows longer than one decode task's columns
			}
			special := func(r *rand.Rand) uint16 {
				if r.IntN(2) == 0 {
					return specialHalves[r.IntN(len(specialHalves))]
				}
				return uint16(r.Uint32()) // any half
			}
			for name, half := range map[string]func(*rand.Rand) uint16{"ordinary": ordinaryHalf, "special": special} {
				t.Run(typ.String()+"/"+name, func(t *testing.T) {
					blocks := ggmlWeight(r, typ, rows, k, half)
					want := decodeRef(t, typ, blocks, rows, k)
					got, err := ggmlDecode(typ, blocks, rows, k)
					if err != nil {
						t.Fatal(err)
					}
					bad := 0
					for i := range want {
						g, w := got[i], want[i]
						if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
							if bad < 5 {
								t.Errorf("element %d (row %d, block %d, index %d): %v (%08x), want %v (%08x)", i, i/k,
									i%k/typ.BlockSize(), i%typ.BlockSize(), g, math.Float32bits(g), w, math.Float32bits(w))
							}
							bad++
						}
					}
					if bad > 0 {
						t.Errorf("%d of %d values differ", bad, len(want))
					}
				})
			}
		}
	})
}

// quantizeX8 returns the activations x as the integer route multiplies them (qk_x8, its
// definition): in each group of g elements, the codes round-to-even(x·(127/amax)) computed in
// float32 (amax the group's largest magnitude; codes 0 if it is 0), times the scale amax/127.
func quantizeX8(x []float32, g int) []float64 {
	out := make([]float64, len(x))
	for c := 0; c < len(x); c += g {
		var amax float32
		for _, v := range x[c : c+g] {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		var id float32
		if amax > 0 {
			id = 127 / amax
		}
		d := amax / 127
		for l, v := range x[c : c+g] {
			out[c+l] = float64(d) * math.RoundToEven(float64(v*id))
		}
	}
	return out
}

// TestX8Quantize checks the 8-bit activations each path prepares against quantizeX8's
// definition, bit for bit: codes, scales, sums of 16 and scales times sums, on groups of 32 and
// 256 with ties after scaling, zeros, signed zeros, subnormals beside 2^-119 and wide ranges.
func TestX8Quantize(t *testing.T) {
	defer func() { _ = forceISA(autoISA) }()
	r := rand.New(rand.NewPCG(7, 8))
	const k = 512
	ties := make([]float32, k) // amax 127 in every group: the codes are the values, ties included
	for l := range ties {
		ties[l] = float32(l%255-127) + 0.5*float32(l%2)
	}
	for l := 0; l < k; l += 32 {
		ties[l] = 127
	}
	cases := []struct {
		name string
		x    []float32
	}{
		{"normal", randF32(r, 3*k)},
		{"ties", ties},
		{"zeros", make([]float32, k)},
		{"signed zeros and subnormals", func() []float32 {
			x := make([]float32, k)
			for l := range x {
				x[l] = math.Float32frombits(uint32(l) | uint32(l%2)<<31)
			}
			x[0] = float32(math.Copysign(0, -1))
			for l := 1; l < k; l += 32 {
				x[l] = 0x1p-119 // the smallest largest magnitude the integer route quantizes
			}
			return x
		}()},
		{"wide", func() []float32 {
			x := randF32(r, k)
			for l := range x {
				x[l] *= float32(math.Pow(10, float64(l%60-30)))
			}
			return x
		}()},
	}
	for _, isa := range isas() {
		if !isa.Supported() {
			continue
		}
		if err := forceISA(isa); err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			for _, g := range []int{32, 256} {
				m := len(c.x) / k
				q, d, s, ds := x8Quantize(c.x, m, k, g)
				for grp := 0; grp < m*k/g; grp++ {
					x := c.x[grp*g : (grp+1)*g]
					var amax float32
					for _, v := range x {
						amax = max(amax, float32(math.Abs(float64(v))))
					}
					var id float32
					if amax > 0 {
						id = 127 / amax
					}
					total := 0
					for l, v := range x {
						code := int(math.RoundToEven(float64(v * id)))
						if int(q[grp*g+l]) != code {
							t.Fatalf("%s %s g=%d: code %d of group %d = %d, want %d", isa, c.name, g, l, grp, q[grp*g+l], code)
						}
						total += code
						if l%16 == 15 {
							sum := 0
							for _, c := range q[grp*g+l-15 : grp*g+l+1] {
								sum += int(c)
							}
							if int(s[(grp*g+l)/16]) != sum {
								t.Fatalf("%s %s g=%d: sum %d = %d, want %d", isa, c.name, g, (grp*g+l)/16, s[(grp*g+l)/16], sum)
							}
						}
					}
					dg := amax / 127
					if math.Float32bits(d[grp]) != math.Float32bits(dg) || math.Float32bits(ds[grp]) != math.Float32bits(dg*float32(total)) {
						t.Fatalf("%s %s g=%d: group %d scale %g and %g, want %g and %g", isa, c.name, g, grp, d[grp], ds[grp], dg, dg*float32(total))
					}
				}
			}
		}
	}
}

// TestX8GroupsOutOfRange checks that a group of activations the integer route cannot quantize
// sends the product to the float route: too small (largest magnitude below 2^-119: 127/amax
// would overflow) or too large (2^119 or more: a group's d·Σq could overflow where the product
// does not). With every other activation zero, the outputs are that group's exact contributions,
// not zeros or infinities.
func TestX8GroupsOutOfRange(t *testing.T) {
	const k, n = 64, 16
	of32 := []gguf.Type{gguf.TypeQ4_0, gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1}
	for _, c := range []struct {
		name  string
		x     func(l int) float32
		types []gguf.Type
	}{
		{"tiny", func(l int) float32 { return float32(l+1) * 0x1p-130 }, append(of32, gguf.TypeQ4_K)}, // at most 2^-122
		{"huge", func(int) float32 { return 2e37 }, of32},                                             // d·Σq of a group of 32: 6.4e38
	} {
		r := newRand(5)
		for _, typ := range c.types {
			if ggmlX8(typ, 1) == 0 {
				t.Fatalf("%s: one activation row takes the float route anyway: the test would prove nothing", typ)
			}
			k := max(k, typ.BlockSize())
			w := ggmlWeight(r, typ, n, k, ordinaryHalf)
			dense := make([]float32, n*k)
			if err := gguf.Decode(typ, w, dense); err != nil {
				t.Fatal(err)
			}
			x := make([]float32, k)
			for l := range typ.BlockSize() {
				x[l] = c.x(l)
			}
			y := make([]float32, n)
			if err := ggmlNK(y, x, typ, w, 1, k, n); err != nil {
				t.Fatal(err)
			}
			checked := 0
			for j := range n {
				var want, mag float64
				for l := range k {
					want += float64(x[l]) * float64(dense[j*k+l])
					mag += math.Abs(float64(x[l]) * float64(dense[j*k+l]))
				}
				if mag > math.MaxFloat32/2 {
					continue // the float route's own sums may overflow
				}
				checked++
				// Products below 2^-126 are float32 subnormals, rounded to steps of 2^-149: an
				// absolute term of half a step per product.
				if math.Abs(float64(y[j])-want) > 1e-5*mag+float64(k)*0x1p-150 || (mag > 0 && y[j] == 0) {
					t.Fatalf("%s %s: y[%d] = %g, want %g", c.name, typ, j, y[j], want)
				}
			}
			if checked < n/2 {
				t.Fatalf("%s %s: %d of %d rows checked", c.name, typ, checked, n)
			}
		}
	}
}

// k4Terms returns a Q4_K or Q5_K block's elements as f·q + g (gguf's decodeQ4_K and decodeQ5_K:
// sub-block j = e/32 has f = d·scale_j, g = −dmin·min_j, ggml's get_scale_min_k4).
func k4Terms(typ gguf.Type, blk []byte) (f, g []float32, q []int) {
	f, g, q = make([]float32, 256), make([]float32, 256), make([]int, 256)
	d, dmin, s := halfAt(blk), halfAt(blk[2:]), blk[4:16]
	for e := range 256 {
		j := e / 32
		var sc, mn byte
		if j < 4 {
			sc, mn = s[j]&63, s[j+4]&63
		} else {
			sc, mn = s[j+4]&15|(s[j-4]>>6)<<4, s[j+4]>>4|(s[j]>>6)<<4
		}
		f[e], g[e] = d*float32(sc), -(dmin * float32(mn))
		i, l, high := e/64, e%32, e%64 >= 32
		if typ == gguf.TypeQ4_K {
			b := blk[16+32*i+l]
			q[e] = int(b & 15)
			if high {
				q[e] = int(b >> 4)
			}
			continue
		}
		b, h := blk[48+32*i+l], blk[16+l]
		q[e] = int(b&15) | int(h>>(2*i)&1)<<4
		if high {
			q[e] = int(b>>4) | int(h>>(2*i+1)&1)<<4
		}
	}
	return f, g, q
}

// q32Terms returns a block of Q4_0, Q4_1, Q5_0 or Q5_1 as f·q + g (gguf's decoders: f = d; g = m
// for Q4_1 and Q5_1, −8·d for Q4_0, −16·d for Q5_0; element e < 16 in the low nibble of code byte
// e, e ≥ 16 in the high nibble of byte e − 16; the fifth bit of element e is bit e of the
// little-endian word after the halves).
func q32Terms(typ gguf.Type, blk []byte) (f, g []float32, q []int) {
	f, g, q = make([]float32, 32), make([]float32, 32), make([]int, 32)
	d := halfAt(blk)
	var offset float32
	var codes []byte
	var fifth uint32
	switch typ {
	case gguf.TypeQ4_0:
		offset, codes = -8*d, blk[2:18]
	case gguf.TypeQ5_0:
		offset, codes, fifth = -16*d, blk[6:22], binary.LittleEndian.Uint32(blk[2:])
	case gguf.TypeQ4_1:
		offset, codes = halfAt(blk[2:]), blk[4:20]
	case gguf.TypeQ5_1:
		offset, codes, fifth = halfAt(blk[2:]), blk[8:24], binary.LittleEndian.Uint32(blk[4:])
	}
	for e := range 32 {
		f[e], g[e] = d, offset
		nibble := codes[e%16] & 15
		if e >= 16 {
			nibble = codes[e-16] >> 4
		}
		q[e] = int(nibble) | int(fifth>>e&1)<<4
	}
	return f, g, q
}

func halfAt(b []byte) float32 { return float16.Frombits(binary.LittleEndian.Uint16(b)).Float32() }

// offsetTerms are the types whose integer route meets the offset g apart from the codes: their
// elements as f·q + g, one block at a time.
var offsetTerms = map[gguf.Type]func(typ gguf.Type, blk []byte) (f, g []float32, q []int){
	gguf.TypeQ4_K: k4Terms, gguf.TypeQ5_K: k4Terms,
	gguf.TypeQ4_0: q32Terms, gguf.TypeQ4_1: q32Terms, gguf.TypeQ5_0: q32Terms, gguf.TypeQ5_1: q32Terms,
}

// roundingMagnitudes returns, per element of the decoded weight w (n rows of k), the magnitude
// that bounds the integer route's rounding: |f·q| + |g| for the types of offsetTerms (their
// offsets cancel against the codes in float), |w| otherwise. It checks that f·q + g is w's value.
func roundingMagnitudes(t *testing.T, typ gguf.Type, blocks []uint8, w []float32) []float64 {
	mags := make([]float64, len(w))
	for i, v := range w {
		mags[i] = math.Abs(float64(v))
	}
	terms, ok := offsetTerms[typ]
	if !ok {
		return mags
	}
	bb, bs := typ.BlockBytes(), typ.BlockSize()
	for b := 0; b < len(blocks)/bb; b++ {
		f, g, q := terms(typ, blocks[b*bb:(b+1)*bb])
		for e := range bs {
			v := float32(f[e]*float32(q[e]) + g[e])
			if got := w[bs*b+e]; v != got && !(v != v && got != got) { // −0 and 0 alike
				t.Fatalf("%s block %d element %d: f·q + g = %v, decoded %v", typ, b, e, v, got)
			}
			mags[bs*b+e] = math.Abs(float64(f[e]*float32(q[e]))) + math.Abs(float64(g[e]))
		}
	}
	return mags
}

type ggmlCase struct {
	typ     gguf.Type
	m, k, n int
	exact   bool
	x       activations
	blocks  []uint8
	// the product of the float activations, and of the 8-bit ones (the integer route)
	ref, mag, ref8, mag8 []float64
}

func (c ggmlCase) String() string {
	return fmt.Sprintf("%s/m=%d/k=%d/n=%d/exact=%v", c.typ, c.m, c.k, c.n, c.exact)
}

// ggmlShapes are (m, k in blocks, n): one activation row (the fused kernels' case), a few, more
// than the fused kernels' default limit; ragged counts of blocks and of outputs; one k longer
// than the generic driver's k chunk for m > 4; enough rows for the generic driver's transposed
// tiles.
var ggmlShapes = [][3]int{
	{1, 1, 1}, {1, 3, 33}, {1, 9, 70}, {2, 2, 17}, {3, 5, 40}, {4, 3, 20}, {5, 2, 9}, {8, 33, 20}, {17, 4, 24},
	{130, 3, 37},
}

func ggmlCases(t *testing.T) []ggmlCase {
	var cases []ggmlCase
	for ti, typ := range gguf.BlockTypes() {
		for si, s := range ggmlShapes {
			for _, exact := range []bool{false, true} {
				m, k, n := s[0], s[1]*typ.BlockSize(), s[2]
				if exact && k > 1024 {
					continue
				}
				r := rand.New(rand.NewPCG(uint64(ti), uint64(si)))
				half := ordinaryHalf
				if exact {
					half = exactHalf
				}
				c := ggmlCase{typ: typ, m: m, k: k, n: n, exact: exact, x: randActivations(r, m*k, exact),
					blocks: ggmlWeight(r, typ, n, k, half)}
				w := decodeRef(t, typ, c.blocks, n, k)
				c.ref, c.mag = refProduct(c.x.f32, m, k, n, func(l, j int) float32 { return w[j*k+l] })
				wm := roundingMagnitudes(t, typ, c.blocks, w)
				c.ref8, c.mag8 = refProduct64(quantizeX8(c.x.f32, typ.BlockSize()), m, k, n, func(l, j int) (float64, float64) {
					return float64(w[j*k+l]), wm[j*k+l]
				})
				cases = append(cases, c)
			}
		}
	}
	return cases
}

// TestGGMLNK: x·Wᵀ for every block type, on every ISA path and configuration, float32 and
// bfloat16 activations, against the product of the decoded weight (gguf.Decode): within float32
// accumulation, and exact where every partial sum is; where the integer route serves the product,
// the product of the 8-bit activations (quantizeX8) within float32 rounding.
func TestGGMLNK(t *testing.T) {
	cases := ggmlCases(t)
	forEachConfig(t, func(t *testing.T) {
		for _, c := range cases {
			for _, dt := range []string{"f32", "bf16"} {
				t.Run(c.String()+"/"+dt, func(t *testing.T) {
					y := make([]float32, c.m*c.n)
					var err error
					if dt == "f32" {
						err = ggmlNK(y, c.x.f32, c.typ, c.blocks, c.m, c.k, c.n)
					} else {
						err = ggmlNK(y, c.x.bf16, c.typ, c.blocks, c.m, c.k, c.n)
					}
					if err != nil {
						t.Fatal(err)
					}
					if g := ggmlX8(c.typ, c.m); g > 0 {
						if g != c.typ.BlockSize() {
							t.Fatalf("8-bit activations in groups of %d, want %d", g, c.typ.BlockSize())
						}
						checkClose(t, y, c.ref8, c.mag8, c.k, false)
						return
					}
					checkClose(t, y, c.ref, c.mag, c.k, c.exact)
				})
			}
		}
	})
}

// TestGGMLOutlierActivation: one activation far larger than the others (LLMs' "massive
// activations") on a weight of zero. Its group's 8-bit codes keep only the outlier, whose large
// terms in the integer route cancel exactly; the other group's terms must come through within
// the route's documented rounding, on every path.
func TestGGMLOutlierActivation(t *testing.T) {
	const k, n, at = 512, 4, 5
	for _, typ := range []gguf.Type{gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeQ4_1, gguf.TypeQ5_0} {
		for _, big := range []float32{1e4, 1e6, 1e20} {
			r := rand.New(rand.NewPCG(1, 2))
			wf := make([]float32, n*k)
			for l := range wf {
				wf[l] = float32(r.NormFloat64())
				if l%k == at {
					wf[l] = 0
				}
			}
			blocks := make([]uint8, n*k/typ.BlockSize()*typ.BlockBytes())
			if err := gguf.Quantize(typ, wf, blocks); err != nil {
				t.Fatal(err)
			}
			w := decodeRef(t, typ, blocks, n, k)
			x := make([]float32, k)
			for l := range x {
				x[l] = float32(r.NormFloat64())
			}
			x[at] = big
			ref, mag := refProduct(x, 1, k, n, func(l, j int) float32 { return w[j*k+l] })
			wm := roundingMagnitudes(t, typ, blocks, w)
			ref8, mag8 := refProduct64(quantizeX8(x, typ.BlockSize()), 1, k, n, func(l, j int) (float64, float64) {
				return float64(w[j*k+l]), wm[j*k+l]
			})
			t.Run(fmt.Sprintf("%s/x=%g", typ, big), func(t *testing.T) {
				forEachISA(t, func(t *testing.T) {
					y := make([]float32, n)
					if err := ggmlNK(y, x, typ, blocks, 1, k, n); err != nil {
						t.Fatal(err)
					}
					if ggmlX8(typ, 1) > 0 {
						checkClose(t, y, ref8, mag8, k, false)
					} else {
						checkClose(t, y, ref, mag, k, false)
					}
				})
			})
		}
	}
}

// TestGGMLArguments: lengths, block-size multiples and types that do not fit are errors wrapping
// ErrArgument, and leave y untouched.
func TestGGMLArguments(t *testing.T) {
	const m, k, n = 2, 512, 3
	x := make([]float32, m*k)
	q4k := make([]uint8, n*2*144)
	cases := []struct {
		name string
		call func(y []float32) error
	}{
		{"short blocks", func(y []float32) error { return ggmlNK(y, x, gguf.TypeQ4_K, q4k[1:], m, k, n) }},
		{"long blocks", func(y []float32) error { return ggmlNK(y, x, gguf.TypeQ4_K, append(q4k, 0), m, k, n) }},
		{"k not whole blocks", func(y []float32) error {
			return ggmlNK(y, x[:m*(k-32)], gguf.TypeQ4_K, q4k, m, k-32, n)
		}},
		{"not a block type", func(y []float32) error { return ggmlNK(y, x, gguf.TypeF16, q4k, m, k, n) }},
		{"Q8_K", func(y []float32) error { return ggmlNK(y, x, gguf.TypeQ8_K, q4k, m, k, n) }},
		{"short x", func(y []float32) error { return ggmlNK(y, x[1:], gguf.TypeQ4_K, q4k, m, k, n) }},
		{"negative n", func(y []float32) error { return ggmlNK(y[:0], x, gguf.TypeQ4_K, q4k, m, k, -1) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			y := make([]float32, m*n)
			for i := range y {
				y[i] = 42
			}
			if err := c.call(y); !errors.Is(err, ErrArgument) {
				t.Fatalf("want an error wrapping ErrArgument, got %v", err)
			}
			for i, v := range y {
				if v != 42 {
					t.Fatalf("y[%d] written: %v", i, v)
				}
			}
		})
	}
}

// TestX8SameBitsAcrossISAs: where the integer route serves a product on both x86 paths, AVX-512
// and AVX2 give the same bits (the AVX-512 blocks fold their 512-bit integer sums into the AVX2
// lanes before any float work).
func TestX8SameBitsAcrossISAs(t *testing.T) {
	if !AVX512.Supported() || !AVX2.Supported() || avx512Emulated {
		t.Skip("needs both AVX-512 and AVX2 on the hardware")
	}
	defer func() { _ = forceISA(autoISA) }()
	product := func(isa ISA, c ggmlCase) ([]float32, int) {
		if err := forceISA(isa); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, c.m*c.n)
		if err := ggmlNK(y, c.x.f32, c.typ, c.blocks, c.m, c.k, c.n); err != nil {
			t.Fatal(err)
		}
		return y, ggmlX8(c.typ, c.m)
	}
	compared := 0
	for _, c := range ggmlCases(t) {
		wide, g512 := product(AVX512, c)
		narrow, g256 := product(AVX2, c)
		if g512 == 0 || g256 == 0 {
			continue
		}
		compared++
		for i := range wide {
			if math.Float32bits(wide[i]) != math.Float32bits(narrow[i]) {
				t.Fatalf("%v output %d: AVX-512 %v, AVX2 %v", c, i, wide[i], narrow[i])
			}
		}
	}
	if compared == 0 {
		t.Fatal("no case took the integer route on both paths")
	}
}
