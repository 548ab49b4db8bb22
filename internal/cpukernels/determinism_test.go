package cpukernels

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
)

// detCase is one product with fixed inputs: run writes its result into y.
type detCase struct {
	name string
	m, n int
	run  func(y []float32) error
}

// detCases returns every product at m rows, on weights big enough (k = 4608) that the plan splits
// the stored rows into several stripes at small m; the GGML types cover both routes of the fused
// kernels (integer: Q4_K, Q5_K, Q6_K, and the types of 32 at a few rows; float: Q8_0 and Q4_0
// from 3 rows) and the generic driver (Q3_K).
func detCases(m int) []detCase {
	const k, n = 4608, 264 // n: ragged in every column group
	r := newRand(uint64(m))
	x := randActivations(r, m*k, false)
	codes := make([]int8, k*n)
	for i := range codes {
		codes[i] = int8(r.Uint32())
	}
	nf4Packed, absmax, _ := nf4Weight(r, k, n, 64)
	nf4T, absmaxT, _ := nf4Weight(r, n, k, 64)
	two := randBytes(r, k/4*n)
	one := randBytes(r, k/8*n)
	colScale := randScales(r, n, false)
	kScale := randScales(r, k, false)
	dense := make([]float32, k*n)
	for i := range dense {
		dense[i] = float32(r.NormFloat64())
	}
	ggmlCase := func(typ gguf.Type) detCase {
		blocks := ggmlWeight(r, typ, n, k, ordinaryHalf)
		return detCase{"ggml-" + typ.String(), m, n, func(y []float32) error { return ggmlNK(y, x.f32, typ, blocks, m, k, n) }}
	}
	return []detCase{
		ggmlCase(gguf.TypeQ4_K), ggmlCase(gguf.TypeQ6_K), ggmlCase(gguf.TypeQ5_K), ggmlCase(gguf.TypeQ8_0),
		ggmlCase(gguf.TypeQ4_0), ggmlCase(gguf.TypeQ5_1), ggmlCase(gguf.TypeQ3_K),
		{"nf4-kn", m, n, func(y []float32) error { return nf4KN(y, x.f32, nf4Packed, absmax.f32, m, k, n, 64) }},
		{"nf4-kn-bf16", m, n, func(y []float32) error { return nf4KN(y, x.bf16, nf4Packed, absmax.bf16, m, k, n, 64) }},
		{"nf4-nk", m, n, func(y []float32) error { return nf4NK(y, x.f32, nf4T, absmaxT.f32, m, k, n, 64) }},
		{"int8-kn-per-n", m, n, func(y []float32) error { return int8KN(y, x.f32, codes, colScale.f32, ScaleN, m, k, n) }},
		{"int8-kn-per-k", m, n, func(y []float32) error { return int8KN(y, x.f32, codes, kScale.f16, ScaleK, m, k, n) }},
		{"int8-nk", m, n, func(y []float32) error { return int8NK(y, x.f32, codes, colScale.f32, ScaleN, m, k, n) }},
		{"2-bit", m, n, func(y []float32) error { return twoBitKN(y, x.f32, two, colScale.f32, ScaleN, m, k, n) }},
		{"1-bit", m, n, func(y []float32) error { return oneBitKN(y, x.f32, one, colScale.f32, ScaleN, m, k, n) }},
		{"dense", m, n, func(y []float32) error { return denseKN(y, x.f32, dense, m, k, n) }},
		{"dense-nk", m, n, func(y []float32) error { return denseNK(y, x.f32, dense, m, k, n) }},
	}
}

// sameBits reports the first output whose bits differ.
func sameBits(got, want []float32) (int, bool) {
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return i, false
		}
	}
	return 0, true
}

// TestDeterministic: a product's bits depend on its inputs only: the same on every call, with any
// thread count or number of column panels, and when many goroutines call at once (the pool then
// serves one and the others run alone).
func TestDeterministic(t *testing.T) {
	defer SetThreads(0)
	oldSmall := tune(tuneSmallWork, 0) // the threads even on small products
	defer tune(tuneSmallWork, oldSmall)
	forEachISA(t, func(t *testing.T) {
		ms := []int{1, 3, 17, 64, 300}
		if testing.Short() { // the emulated AVX-512 run of make test
			ms = ms[:3]
		}
		for _, m := range ms {
			for _, c := range detCases(m) {
				t.Run(fmt.Sprintf("%s/m=%d", c.name, m), func(t *testing.T) {
					SetThreads(1)
					want := make([]float32, c.m*c.n)
					if err := c.run(want); err != nil {
						t.Fatal(err)
					}
					check := func(what string, y []float32) {
						t.Helper()
						if i, ok := sameBits(y, want); !ok {
							t.Errorf("%s: y[%d] = %v (%08x), with one thread %v (%08x)", what, i, y[i],
								math.Float32bits(y[i]), want[i], math.Float32bits(want[i]))
						}
					}
					threadCounts, panelCounts, calls, goroutines := []int{2, 3, 8}, []int64{0, 1, 5}, 3, 8
					if m >= 64 { // compute-bound: fewer runs
						threadCounts, panelCounts, calls, goroutines = []int{3, 8}, []int64{0}, 1, 4
					}
					for _, threads := range threadCounts {
						for _, panels := range panelCounts {
							SetThreads(threads)
							old := tune(tunePanels, panels)
							for call := range calls {
								y := make([]float32, c.m*c.n)
								if err := c.run(y); err != nil {
									t.Fatal(err)
								}
								check(fmt.Sprintf("threads=%d panels=%d call %d", threads, panels, call), y)
							}
							tune(tunePanels, old)
						}
					}
					SetThreads(2)
					oldSpin := tune(tuneSpinNs, 0) // threads block at once between tasks and jobs
					y := make([]float32, c.m*c.n)
					if err := c.run(y); err != nil {
						t.Fatal(err)
					}
					tune(tuneSpinNs, oldSpin)
					check("threads=2, blocking without lingering", y)
					var wg sync.WaitGroup
					results := make([][]float32, goroutines*calls)
					errs := make([]error, len(results))
					for g := range goroutines {
						wg.Go(func() {
							for call := range calls {
								i := calls*g + call
								results[i] = make([]float32, c.m*c.n)
								errs[i] = c.run(results[i])
							}
						})
					}
					wg.Wait()
					for i, y := range results {
						if errs[i] != nil {
							t.Fatal(errs[i])
						}
						check(fmt.Sprintf("goroutine %d call %d", i/calls, i%calls), y)
					}
				})
			}
		}
	})
}

// TestDeterministicFlushDenormals: a caller that flushes denormals to zero (XLA's CPU client runs
// its computations so) gets the bits it gets alone whatever the thread count, and so does one that
// does not: the pool's workers run each product's chunks in its caller's floating-point mode,
// whatever mode they were started in. The weight's values are denormal, so the modes differ.
//
// The mode belongs to an OS thread: each subtest (a goroutine of its own) locks its thread before
// it sets the mode and clears the mode before it unlocks, so that its products run in the mode it
// set and no other goroutine inherits it.
func TestDeterministicFlushDenormals(t *testing.T) {
	if !flushDenormals(false) { // clearing the mode is harmless on any thread
		t.Skip("no flush-to-zero mode on this CPU")
	}
	defer SetThreads(0)
	oldSmall, oldChunk := tune(tuneSmallWork, 0), tune(tuneChunkBytes, 4096)
	defer func() { tune(tuneSmallWork, oldSmall); tune(tuneChunkBytes, oldChunk) }()
	const m, k, n = 3, 1024, 1024
	r := newRand(17)
	x, w := make([]float32, m*k), make([]float32, k*n)
	for i := range x {
		x[i] = 1 + r.Float32()
	}
	for i := range w {
		w[i] = float32(r.IntN(1001)-500) * 1e-41 // denormal
	}
	run := func(threads int) []float32 {
		t.Helper()
		SetThreads(threads)
		y := make([]float32, m*n)
		if err := denseKN(y, x, w, m, k, n); err != nil {
			t.Fatal(err)
		}
		return y
	}
	forEachISA(t, func(t *testing.T) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer flushDenormals(false)
		var alone [2][]float32
		// 24 threads with flushing first: workers started in either mode serve callers in both
		for _, c := range []struct {
			flush   bool
			threads int
		}{{false, 4}, {true, 4}, {true, 24}, {false, 24}} {
			flushDenormals(c.flush)
			want := run(1)
			f := 0
			if c.flush {
				f = 1
			}
			if alone[f] == nil {
				alone[f] = want
			}
			for range 5 {
				got := run(c.threads)
				if i, ok := sameBits(got, want); !ok {
					t.Fatalf("flush %v: %d threads give y[%d] = %g, the caller alone %g", c.flush, c.threads, i, got[i], want[i])
				}
			}
		}
		if _, ok := sameBits(alone[0], alone[1]); ok {
			t.Fatal("the denormal weight gives the same bits with and without flushing: the test tests nothing")
		}
	})
}
