package cpukernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/x448/float16"
)

// nf4Codebook is the NF4 codebook as package nf4 defines it (the layout definition the
// reference decodes with).
var nf4Codebook = [16]float32{
	-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
	-0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
	0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
	0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
}

// ---- references, straight from the layout definitions ----

// refProduct returns y = x · W in float64 and, per output, Σ|x·W| (the error scale), for a
// weight given by its element function w(l, j) (l contracted, j output column) as float32.
func refProduct(x []float32, m, k, n int, w func(l, j int) float32) (y, mag []float64) {
	x64 := make([]float64, len(x))
	for i, v := range x {
		x64[i] = float64(v)
	}
	return refProduct64(x64, m, k, n, func(l, j int) (float64, float64) {
		v := float64(w(l, j))
		return v, math.Abs(v)
	})
}

// refProduct64 is refProduct for activations given in float64 and weights given by their value
// and the magnitude that bounds their rounding: mag sums |x|·that magnitude.
func refProduct64(x []float64, m, k, n int, w func(l, j int) (value, magnitude float64)) (y, mag []float64) {
	y = make([]float64, m*n)
	mag = make([]float64, m*n)
	wt, wm := make([]float64, k*n), make([]float64, k*n) // decode once
	for l := range k {
		for j := range n {
			wt[l*n+j], wm[l*n+j] = w(l, j)
		}
	}
	for i := range m {
		for l := range k {
			xv := x[i*k+l]
			for j := range n {
				y[i*n+j] += xv * wt[l*n+j]
				mag[i*n+j] += math.Abs(xv) * wm[l*n+j]
			}
		}
	}
	return y, mag
}

func nf4Code(packed []uint8, rowBytes, row, e int) int {
	b := packed[row*rowBytes+e/2]
	if e%2 == 0 {
		return int(b >> 4)
	}
	return int(b & 15)
}

// ---- random inputs ----

type activations struct {
	f32  []float32 // the values as float32 (what the reference multiplies)
	bf16 []bfloat16.BFloat16
}

func randActivations(r *rand.Rand, size int, integer bool) activations {
	a := activations{f32: make([]float32, size), bf16: make([]bfloat16.BFloat16, size)}
	for i := range a.f32 {
		v := float32(r.NormFloat64())
		if integer {
			v = float32(r.IntN(9) - 4)
		}
		a.bf16[i] = bfloat16.FromFloat32(v)
		a.f32[i] = a.bf16[i].Float32() // representable in both dtypes
	}
	return a
}

type scales struct {
	f32  []float32
	bf16 []bfloat16.BFloat16
	f16  []float16.Float16
}

func randScales(r *rand.Rand, size int, pow2 bool) scales {
	s := scales{f32: make([]float32, size), bf16: make([]bfloat16.BFloat16, size), f16: make([]float16.Float16, size)}
	for i := range s.f32 {
		v := float32(0.01 + r.Float64())
		if pow2 {
			v = float32(math.Ldexp(1, r.IntN(5)-2))
		}
		if r.IntN(20) == 0 {
			v = 0 // an all-zero block or row
		}
		s.bf16[i] = bfloat16.FromFloat32(v)
		s.f32[i] = s.bf16[i].Float32()
		s.f16[i] = float16.Fromfloat32(s.f32[i]) // exact: 8 significant bits, in range
		if s.f16[i].Float32() != s.f32[i] {
			panic(fmt.Sprintf("scale %v not representable in float16", s.f32[i]))
		}
	}
	return s
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 11)) }

func randBytes(r *rand.Rand, size int) []uint8 {
	b := make([]uint8, size)
	for i := range b {
		b[i] = uint8(r.Uint32())
	}
	return b
}

// ---- comparison ----

const f32eps = 0x1p-23

// checkClose compares y with the reference: non-finite references must be matched exactly in
// class (NaN, +Inf, -Inf); finite ones within the float32 accumulation bound (k+16)·eps·Σ|x·w|,
// or exactly if exact.
func checkClose(t *testing.T, y []float32, ref, mag []float64, k int, exact bool) {
	t.Helper()
	bad := 0
	for i, want := range ref {
		got := float64(y[i])
		var ok bool
		switch {
		case math.IsNaN(want):
			ok = math.IsNaN(got)
		case math.IsInf(want, 0):
			ok = got == want
		case exact:
			ok = got == want
		default:
			ok = math.Abs(got-want) <= float64(k+16)*f32eps*mag[i]+1e-30
		}
		if !ok {
			if bad < 5 {
				t.Errorf("y[%d] = %v, want %v (Σ|x·w| = %g, k = %d)", i, got, want, mag[i], k)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d outputs wrong", bad, len(ref))
	}
}

// ---- configurations: every ISA, and the run both as planned and split into many small chunks
// over several threads (exercising the pool, the partial sums and their reduction) ----

type config struct {
	name    string
	threads int
	split   bool // small stripes, no single-thread shortcut
	fused   int  // tuneFusedMaxM: 0 leaves the default, -1 turns the fused and lookup kernels off
	panels  int  // tunePanels: 0 leaves the default
}

var configs = []config{
	{"plain", 0, false, 0, 0},
	{"split3", 3, true, 0, 0},
	{"panels", 3, true, 0, 7},   // many column panels
	{"generic", 2, true, -1, 3}, // the generic tiled drivers only
	{"fused", 2, true, 1000, 2}, // the fused kernels wherever they apply
}

// forEachISA runs test as a subtest on each instruction-set path, that path forced (one the CPU
// cannot run is skipped), and the best path back in force after.
func forEachISA(t *testing.T, test func(t *testing.T)) {
	for _, isa := range isas() {
		t.Run(isa.String(), func(t *testing.T) {
			if !isa.Supported() {
				t.Skipf("%s not supported on this CPU", isa)
			}
			if err := forceISA(isa); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = forceISA(autoISA) }()
			test(t)
		})
	}
}

func forEachConfig(t *testing.T, f func(t *testing.T)) {
	forEachISA(t, func(t *testing.T) {
		for _, c := range configs {
			t.Run(c.name, func(t *testing.T) {
				SetThreads(c.threads)
				defer SetThreads(0)
				if c.split {
					oldSmall, oldChunk := tune(tuneSmallWork, 0), tune(tuneChunkBytes, 512)
					defer func() { tune(tuneSmallWork, oldSmall); tune(tuneChunkBytes, oldChunk) }()
				}
				if c.fused != 0 {
					old := tune(tuneFusedMaxM, int64(max(c.fused, 0)))
					defer tune(tuneFusedMaxM, old)
				}
				if c.panels != 0 {
					old := tune(tunePanels, int64(c.panels))
					defer tune(tunePanels, old)
				}
				f(t)
			})
		}
	})
}

// ---- NF4 ----

type nf4Shape struct{ m, k, n, bs int }

func (s nf4Shape) String() string { return fmt.Sprintf("m=%d/k=%d/n=%d/bs=%d", s.m, s.k, s.n, s.bs) }

var nf4Shapes = []nf4Shape{
	{1, 64, 64, 64}, {1, 7, 33, 64}, {1, 300, 1000, 64}, {1, 50, 300, 32}, {1, 40, 200, 256}, {1, 33, 130, 8},
	{1, 20, 100, 16}, {1, 30, 70, 6}, {1, 9, 500, 128}, {1, 256, 130, 64}, {1, 250, 20, 32}, {1, 380, 24, 128},
	{1, 24, 4300, 64}, {1, 16, 8500, 32}, {2, 130, 200, 64}, {3, 257, 100, 32}, {133, 300, 97, 64},
	{4, 96, 300, 128}, {5, 50, 70, 6}, {4, 33, 65, 2}, {8, 100, 97, 64}, {16, 200, 130, 64},
	{17, 64, 257, 32}, {64, 130, 200, 64}, {33, 40, 31, 256},
}

// nf4Weight returns packed and absmax for rows × elems with blocks along elems; the codes past
// elems in the last block are random (they must be ignored).
func nf4Weight(r *rand.Rand, rows, elems, bs int) ([]uint8, scales, int) {
	nb := (elems + bs - 1) / bs
	return randBytes(r, rows*nb*bs/2), randScales(r, rows*nb, false), nb
}

func runNF4[X Activation, S Scale](blocksFree bool, y []float32, x []X, packed []uint8, absmax []S, s nf4Shape) error {
	if blocksFree {
		return nf4KN(y, x, packed, absmax, s.m, s.k, s.n, s.bs)
	}
	return nf4NK(y, x, packed, absmax, s.m, s.k, s.n, s.bs)
}

func testNF4(t *testing.T, blocksFree bool) {
	forEachConfig(t, func(t *testing.T) {
		for si, s := range nf4Shapes {
			r := rand.New(rand.NewPCG(uint64(si), 1))
			rows, elems := s.k, s.n
			if !blocksFree {
				rows, elems = s.n, s.k
			}
			packed, absmax, nb := nf4Weight(r, rows, elems, s.bs)
			x := randActivations(r, s.m*s.k, false)
			rowBytes := nb * s.bs / 2
			ref, mag := refProduct(x.f32, s.m, s.k, s.n, func(l, j int) float32 {
				if blocksFree {
					return nf4Codebook[nf4Code(packed, rowBytes, l, j)] * absmax.f32[l*nb+j/s.bs]
				}
				return nf4Codebook[nf4Code(packed, rowBytes, j, l)] * absmax.f32[j*nb+l/s.bs]
			})
			for _, dt := range []string{"f32/f32", "f32/bf16", "bf16/f16", "bf16/f32"} {
				t.Run(s.String()+"/"+dt, func(t *testing.T) {
					y := make([]float32, s.m*s.n)
					var err error
					switch dt {
					case "f32/f32":
						err = runNF4(blocksFree, y, x.f32, packed, absmax.f32, s)
					case "f32/bf16":
						err = runNF4(blocksFree, y, x.f32, packed, absmax.bf16, s)
					case "bf16/f16":
						err = runNF4(blocksFree, y, x.bf16, packed, absmax.f16, s)
					case "bf16/f32":
						err = runNF4(blocksFree, y, x.bf16, packed, absmax.f32, s)
					}
					if err != nil {
						t.Fatal(err)
					}
					checkClose(t, y, ref, mag, s.k, false)
				})
			}
		}
	})
}

func TestNF4KN(t *testing.T) { testNF4(t, true) }
func TestNF4NK(t *testing.T) { testNF4(t, false) }

// TestNF4Decode: on every ISA path and thread count, the weight decode (qk_nf4_decode, DecodeDot's
// weight on XLA CPU) gives codebook value × block scale in float32 bit for bit, for every scale
// dtype, rows longer than one task's span, and a padded last block.
func TestNF4Decode(t *testing.T) {
	forEachConfig(t, func(t *testing.T) {
		for si, s := range []struct{ rows, span, bs int }{{3, 64, 64}, {9, 4500, 64}, {17, 130, 6}, {5, 9000, 4096}, {1, 1, 2}} {
			r := rand.New(rand.NewPCG(uint64(si), 2))
			packed, absmax, nb := nf4Weight(r, s.rows, s.span, s.bs)
			want := make([]float32, s.rows*s.span)
			for row := range s.rows {
				for e := range s.span {
					want[row*s.span+e] = nf4Codebook[nf4Code(packed, nb*s.bs/2, row, e)] * absmax.f32[row*nb+e/s.bs]
				}
			}
			for _, dt := range []string{"f32", "bf16", "f16"} {
				t.Run(fmt.Sprintf("rows=%d/span=%d/bs=%d/%s", s.rows, s.span, s.bs, dt), func(t *testing.T) {
					var got []float32
					var err error
					switch dt {
					case "f32":
						got, err = nf4Decode(packed, absmax.f32, s.rows, s.span, s.bs)
					case "bf16":
						got, err = nf4Decode(packed, absmax.bf16, s.rows, s.span, s.bs)
					case "f16":
						got, err = nf4Decode(packed, absmax.f16, s.rows, s.span, s.bs)
					}
					if err != nil {
						t.Fatal(err)
					}
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("element %d (row %d, index %d): %v, want %v", i, i/s.span, i%s.span, got[i], want[i])
						}
					}
				})
			}
		}
	})
	for _, bs := range []int{0, 33, -2} {
		if _, err := nf4Decode(make([]uint8, 64), make([]float32, 4), 2, 64, bs); !errors.Is(err, ErrArgument) {
			t.Errorf("block size %d: %v, want an error wrapping ErrArgument", bs, err)
		}
	}
}

// ---- int8 ----

type shape struct{ m, k, n int }

func (s shape) String() string { return fmt.Sprintf("m=%d/k=%d/n=%d", s.m, s.k, s.n) }

var int8Shapes = []shape{
	{1, 1, 1}, {1, 17, 33}, {1, 600, 700}, {2, 100, 257}, {4, 64, 48}, {5, 31, 15}, {9, 70, 130},
	{16, 200, 100}, {64, 70, 130}, {33, 5, 300}, {133, 300, 97},
}

var scaleKinds = []ScaleKind{ScaleNone, ScaleTensor, ScaleK, ScaleN}

func int8Scale(kind ScaleKind, s scales, l, j int) float32 {
	switch kind {
	case ScaleTensor:
		return s.f32[0]
	case ScaleK:
		return s.f32[l]
	case ScaleN:
		return s.f32[j]
	}
	return 1
}

func testInt8(t *testing.T, kn bool) {
	forEachConfig(t, func(t *testing.T) {
		for si, s := range int8Shapes {
			for _, kind := range scaleKinds {
				for _, exact := range []bool{false, true} {
					r := rand.New(rand.NewPCG(uint64(si), uint64(kind)))
					w := make([]int8, s.k*s.n)
					for i := range w {
						w[i] = int8(r.Uint32())
					}
					x := randActivations(r, s.m*s.k, exact)
					ns := scaleLen(kind, s.k, s.n, true)
					sc := randScales(r, ns, exact)
					ref, mag := refProduct(x.f32, s.m, s.k, s.n, func(l, j int) float32 {
						q := w[l*s.n+j]
						if !kn {
							q = w[j*s.k+l]
						}
						return float32(q) * int8Scale(kind, sc, l, j)
					})
					name := fmt.Sprintf("%s/%s/exact=%v", s, kind, exact)
					for _, dt := range []string{"f32/f32", "bf16/bf16", "f32/f16"} {
						t.Run(name+"/"+dt, func(t *testing.T) {
							y := make([]float32, s.m*s.n)
							f := int8NK[float32, float32]
							var err error
							switch dt {
							case "f32/f32":
								if kn {
									f = int8KN[float32, float32]
								}
								err = f(y, x.f32, w, sc.f32, kind, s.m, s.k, s.n)
							case "bf16/bf16":
								f := int8NK[bfloat16.BFloat16, bfloat16.BFloat16]
								if kn {
									f = int8KN[bfloat16.BFloat16, bfloat16.BFloat16]
								}
								err = f(y, x.bf16, w, sc.bf16, kind, s.m, s.k, s.n)
							case "f32/f16":
								f := int8NK[float32, float16.Float16]
								if kn {
									f = int8KN[float32, float16.Float16]
								}
								err = f(y, x.f32, w, sc.f16, kind, s.m, s.k, s.n)
							}
							if err != nil {
								t.Fatal(err)
							}
							checkClose(t, y, ref, mag, s.k, exact)
						})
					}
				}
			}
		}
	})
}

func TestInt8KN(t *testing.T) { testInt8(t, true) }
func TestInt8NK(t *testing.T) { testInt8(t, false) }

// ---- 2-bit and 1-bit ----

// The 2- and 1-bit shapes end with rows of 4 KiB (k = 1024) over 16 rows, which the lookup
// kernels read through a padded copy, and 2-bit past its lookups' 128 rows.
var twoBitShapes = []shape{
	{1, 4, 1}, {1, 32, 33}, {1, 800, 900}, {1, 16, 4200}, {1, 8, 8300}, {2, 100, 130}, {3, 64, 17}, {7, 200, 40}, {16, 64, 257},
	{64, 40, 70}, {20, 1000, 48}, {20, 1024, 48}, {136, 1024, 24},
}

var oneBitShapes = []shape{
	{1, 8, 1}, {1, 64, 33}, {1, 800, 900}, {1, 16, 4200}, {1, 8, 8300}, {2, 104, 130}, {5, 64, 17}, {7, 200, 40}, {16, 64, 257},
	{64, 48, 70}, {20, 1000, 48}, {20, 1024, 48},
}

// twoBitValue is element (l, j) of eformer's 2-bit layout: code c = (packed[l mod q][j] >> 2(l div q)) & 3,
// value c - 1.
func twoBitValue(packed []uint8, k, n, l, j int) float32 {
	q := k / 4
	c := (packed[(l%q)*n+j] >> (2 * (l / q))) & 3
	return float32(c) - 1
}

// oneBitValue is element (l, j) of the 1-bit layout: bit l div e of packed[l mod e][j], 1 → +1.
func oneBitValue(packed []uint8, k, n, l, j int) float32 {
	e := k / 8
	if (packed[(l%e)*n+j]>>(l/e))&1 == 1 {
		return 1
	}
	return -1
}

var tbScaleKinds = []ScaleKind{ScaleNone, ScaleTensor, ScaleN}

func testTB(t *testing.T, bits int) {
	shapes, value := twoBitShapes, twoBitValue
	if bits == 1 {
		shapes, value = oneBitShapes, oneBitValue
	}
	forEachConfig(t, func(t *testing.T) {
		for si, s := range shapes {
			for _, kind := range tbScaleKinds {
				for _, exact := range []bool{false, true} {
					r := rand.New(rand.NewPCG(uint64(si), uint64(kind)))
					packed := randBytes(r, s.k*bits/8*s.n)
					if bits == 2 && !exact {
						// codes 0..2 only (code 3 is never written), except in the exact runs
						for i := range packed {
							for g := 0; g < 4; g++ {
								if (packed[i]>>(2*g))&3 == 3 {
									packed[i] &^= 1 << (2 * g)
								}
							}
						}
					}
					x := randActivations(r, s.m*s.k, exact)
					sc := randScales(r, scaleLen(kind, s.k, s.n, false), exact)
					ref, mag := refProduct(x.f32, s.m, s.k, s.n, func(l, j int) float32 {
						v := value(packed, s.k, s.n, l, j)
						switch kind {
						case ScaleTensor:
							v *= sc.f32[0]
						case ScaleN:
							v *= sc.f32[j]
						}
						return v
					})
					name := fmt.Sprintf("%s/%s/exact=%v", s, kind, exact)
					for _, dt := range []string{"f32", "bf16"} {
						t.Run(name+"/"+dt, func(t *testing.T) {
							y := make([]float32, s.m*s.n)
							var err error
							if dt == "f32" {
								f := twoBitKN[float32]
								if bits == 1 {
									f = oneBitKN[float32]
								}
								err = f(y, x.f32, packed, sc.f32, kind, s.m, s.k, s.n)
							} else {
								f := twoBitKN[bfloat16.BFloat16]
								if bits == 1 {
									f = oneBitKN[bfloat16.BFloat16]
								}
								err = f(y, x.bf16, packed, sc.f32, kind, s.m, s.k, s.n)
							}
							if err != nil {
								t.Fatal(err)
							}
							checkClose(t, y, ref, mag, s.k, exact)
						})
					}
				}
			}
		}
	})
}

func TestTwoBitKN(t *testing.T) { testTB(t, 2) }
func TestOneBitKN(t *testing.T) { testTB(t, 1) }

// ---- dense ----

// TestDense: x·W of a float32 W (k×n) and x·Wᵀ of one stored (n×k) against float64 products,
// from one row (the gemv paths) to 133 (the nk driver's turned tiles).
func TestDense(t *testing.T) {
	forEachConfig(t, func(t *testing.T) {
		for si, s := range int8Shapes {
			r := rand.New(rand.NewPCG(uint64(si), 7))
			x := randActivations(r, s.m*s.k, false)
			w := randActivations(r, s.k*s.n, false).f32
			for _, c := range []struct {
				name string
				at   func(l, j int) float32
				run  func(y []float32) error
			}{
				{"kn", func(l, j int) float32 { return w[l*s.n+j] }, func(y []float32) error { return denseKN(y, x.f32, w, s.m, s.k, s.n) }},
				{"nk", func(l, j int) float32 { return w[j*s.k+l] }, func(y []float32) error { return denseNK(y, x.f32, w, s.m, s.k, s.n) }},
			} {
				ref, mag := refProduct(x.f32, s.m, s.k, s.n, c.at)
				t.Run(c.name+"/"+s.String(), func(t *testing.T) {
					y := make([]float32, s.m*s.n)
					if err := c.run(y); err != nil {
						t.Fatal(err)
					}
					checkClose(t, y, ref, mag, s.k, false)
				})
			}
		}
	})
}

// TestDenseKNColumnsApart: a column's sum does not depend on the other columns, so the product of
// weights side by side gives each weight's product bit for bit (the models' fused projections).
func TestDenseKNColumnsApart(t *testing.T) {
	const k = 1000 // several stripes of stored rows
	r := rand.New(rand.NewPCG(31, 32))
	for _, m := range []int{1, 3, 16} {
		x := randActivations(r, m*k, false).f32
		parts := []int{48, 16, 300}
		n := 0
		for _, p := range parts {
			n += p
		}
		w := randActivations(r, k*n, false).f32
		y := make([]float32, m*n)
		if err := denseKN(y, x, w, m, k, n); err != nil {
			t.Fatal(err)
		}
		checkPartsAlone(t, m, n, parts, y, func(yp []float32, c0, p int) error {
			wp := make([]float32, k*p)
			for l := range k {
				copy(wp[l*p:(l+1)*p], w[l*n+c0:l*n+c0+p])
			}
			return denseKN(yp, x, wp, m, k, p)
		})
	}
}

// checkPartsAlone checks that each part of a weight split along n (parts, side by side in y's
// m×n outputs) gives its outputs in y bit for bit alone: alone(yp, c0, p) writes the m×p product
// of the part whose first output is c0.
func checkPartsAlone(t *testing.T, m, n int, parts []int, y []float32, alone func(yp []float32, c0, p int) error) {
	t.Helper()
	c0 := 0
	for _, p := range parts {
		yp := make([]float32, m*p)
		if err := alone(yp, c0, p); err != nil {
			t.Fatal(err)
		}
		for i := range m {
			for j := range p {
				if got, want := math.Float32bits(yp[i*p+j]), math.Float32bits(y[i*n+c0+j]); got != want {
					t.Fatalf("m=%d, row %d: output %d alone %v, beside the others %v", m, i, c0+j, yp[i*p+j], y[i*n+c0+j])
				}
			}
		}
		c0 += p
	}
}

// TestNKColumnsApart: an x·Wᵀ output does not depend on the other stored rows either, so weights
// stacked along n (the fused projections of the models' OutIn layouts and GGUF files) give each
// weight's product bit for bit: through the fused kernels, the generic driver's dot-product tiles
// and, from 128 rows, its turned tiles.
func TestNKColumnsApart(t *testing.T) {
	const k, bs = 300, 64 // NF4 blocks across the parts' bounds in k; ggml: k in blocks below
	parts := []int{48, 16, 37, 1}
	n := 0
	for _, p := range parts {
		n += p
	}
	r := rand.New(rand.NewPCG(33, 34))
	codes := randI8(r, n*k)
	nf4, absmax, nb := nf4Weight(r, n, k, bs)
	const kq = 512
	q4k, q40 := ggmlWeight(r, gguf.TypeQ4_K, n, kq, ordinaryHalf), ggmlWeight(r, gguf.TypeQ4_0, n, kq, ordinaryHalf)
	dense := randActivations(r, n*k, false).f32
	for _, m := range []int{3, 17, 130} {
		x, xq := randActivations(r, m*k, false), randActivations(r, m*kq, false)
		// each product of stored rows [j0, j0+nj) of the weight
		for _, c := range []struct {
			name string
			run  func(y []float32, j0, nj int) error
		}{
			{"int8", func(y []float32, j0, nj int) error {
				return int8NK(y, x.f32, codes[j0*k:(j0+nj)*k], []float32(nil), ScaleNone, m, k, nj)
			}},
			{"nf4", func(y []float32, j0, nj int) error {
				return nf4NK(y, x.bf16, nf4[j0*nb*bs/2:(j0+nj)*nb*bs/2], absmax.f32[j0*nb:(j0+nj)*nb], m, k, nj, bs)
			}},
			{"q4_k", func(y []float32, j0, nj int) error {
				rb := kq / 256 * gguf.TypeQ4_K.BlockBytes()
				return ggmlNK(y, xq.f32, gguf.TypeQ4_K, q4k[j0*rb:(j0+nj)*rb], m, kq, nj)
			}},
			{"q4_0", func(y []float32, j0, nj int) error {
				rb := kq / 32 * gguf.TypeQ4_0.BlockBytes()
				return ggmlNK(y, xq.f32, gguf.TypeQ4_0, q40[j0*rb:(j0+nj)*rb], m, kq, nj)
			}},
			{"dense", func(y []float32, j0, nj int) error { return denseNK(y, x.f32, dense[j0*k:(j0+nj)*k], m, k, nj) }},
		} {
			t.Run(fmt.Sprintf("%s/m=%d", c.name, m), func(t *testing.T) {
				y := make([]float32, m*n)
				if err := c.run(y, 0, n); err != nil {
					t.Fatal(err)
				}
				checkPartsAlone(t, m, n, parts, y, c.run)
			})
		}
	}
}

// ---- non-finite activations ----

// specialActivations returns m×k activations with an Inf, a -Inf and +Inf pair, and a NaN in the
// first three rows (the others finite).
func specialActivations(r *rand.Rand, m, k int) activations {
	a := randActivations(r, m*k, false)
	set := func(i, l int, v float32) {
		if i < m && l < k {
			a.f32[i*k+l] = v
			a.bf16[i*k+l] = bfloat16.FromFloat32(v)
		}
	}
	inf := float32(math.Inf(1))
	set(0, 3, inf)
	set(1, 5, -inf)
	set(1, k-1, inf)
	set(2, 0, float32(math.NaN()))
	return a
}

// TestNonFinite checks that Inf and NaN activations give what the dense product gives: ±Inf where
// the weight is nonzero, NaN where it is 0 or where +Inf and -Inf meet, NaN for NaN (the integer
// route of the GGML kernels leaves such products to the float one).
func TestNonFinite(t *testing.T) {
	type product struct {
		name string
		k    int
		run  func(y []float32, x activations, m int) error
		w    func(l, j int) float32
	}
	const n = 70
	r := rand.New(rand.NewPCG(9, 9))
	var products []product
	{
		const k, bs = 96, 64
		packedKN, absKN, nbKN := nf4Weight(r, k, n, bs)
		packedNK, absNK, nbNK := nf4Weight(r, n, k, bs)
		products = append(products,
			product{"nf4-kn", k, func(y []float32, x activations, m int) error {
				return nf4KN(y, x.f32, packedKN, absKN.f32, m, k, n, bs)
			}, func(l, j int) float32 {
				return nf4Codebook[nf4Code(packedKN, nbKN*bs/2, l, j)] * absKN.f32[l*nbKN+j/bs]
			}},
			product{"nf4-nk", k, func(y []float32, x activations, m int) error {
				return nf4NK(y, x.bf16, packedNK, absNK.bf16, m, k, n, bs)
			}, func(l, j int) float32 {
				return nf4Codebook[nf4Code(packedNK, nbNK*bs/2, j, l)] * absNK.f32[j*nbNK+l/bs]
			}})
	}
	{
		const k = 96
		w := randI8(r, k*n)
		for i := range w[:n] {
			w[i] = 0 // zero weights in row 0 of k×n (and in the first column of n×k)
		}
		sk, sn := randScales(r, k, false), randScales(r, n, false)
		products = append(products,
			product{"int8-kn-k", k, func(y []float32, x activations, m int) error {
				return int8KN(y, x.f32, w, sk.f32, ScaleK, m, k, n)
			}, func(l, j int) float32 { return float32(w[l*n+j]) * sk.f32[l] }},
			product{"int8-kn-n", k, func(y []float32, x activations, m int) error {
				return int8KN(y, x.f32, w, sn.f32, ScaleN, m, k, n)
			}, func(l, j int) float32 { return float32(w[l*n+j]) * sn.f32[j] }},
			product{"int8-nk-n", k, func(y []float32, x activations, m int) error {
				return int8NK(y, x.bf16, w, sn.f16, ScaleN, m, k, n)
			}, func(l, j int) float32 { return float32(w[j*k+l]) * sn.f32[j] }})
	}
	{
		const k = 96
		p2, p1 := randBytes(r, k/4*n), randBytes(r, k/8*n)
		sn := randScales(r, n, false)
		products = append(products,
			product{"2bit", k, func(y []float32, x activations, m int) error {
				return twoBitKN(y, x.f32, p2, sn.f32, ScaleN, m, k, n)
			}, func(l, j int) float32 { return twoBitValue(p2, k, n, l, j) * sn.f32[j] }},
			product{"1bit", k, func(y []float32, x activations, m int) error {
				return oneBitKN(y, x.bf16, p1, nil, ScaleNone, m, k, n)
			}, func(l, j int) float32 { return oneBitValue(p1, k, n, l, j) }})
		for _, typ := range []gguf.Type{gguf.TypeQ4_K, gguf.TypeQ8_0, gguf.TypeQ5_1} {
			k := 2 * typ.BlockSize()
			blocks := ggmlWeight(r, typ, n, k, ordinaryHalf)
			copy(blocks[:typ.BlockBytes()], make([]byte, typ.BlockBytes())) // zero weights in column 0's first block
			w := make([]float32, n*k)
			if err := gguf.Decode(typ, blocks, w); err != nil {
				t.Fatal(err)
			}
			products = append(products, product{"ggml-" + typ.String(), k, func(y []float32, x activations, m int) error {
				return ggmlNK(y, x.bf16, typ, blocks, m, k, n)
			}, func(l, j int) float32 { return w[j*k+l] }})
		}
		wd := randF32(r, k*n)
		wd[3*n] = 0
		products = append(products, product{"dense", k, func(y []float32, x activations, m int) error {
			return denseKN(y, x.f32, wd, m, k, n)
		}, func(l, j int) float32 { return wd[l*n+j] }})
	}
	forEachConfig(t, func(t *testing.T) {
		for _, p := range products {
			for _, m := range []int{1, 2, 4, 8, 130} {
				t.Run(fmt.Sprintf("%s/m=%d", p.name, m), func(t *testing.T) {
					x := specialActivations(rand.New(rand.NewPCG(uint64(m), 5)), m, p.k)
					ref, mag := refProduct(x.f32, m, p.k, n, p.w)
					y := make([]float32, m*n)
					if err := p.run(y, x, m); err != nil {
						t.Fatal(err)
					}
					checkClose(t, y, ref, mag, p.k, false)
				})
			}
		}
	})
}
