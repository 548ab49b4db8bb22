package cpukernels

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/x448/float16"
)

// TestArgumentErrors checks that the Go wrappers reject lengths, sizes and kinds that do not fit,
// before the C code reads anything, and leave y untouched.
func TestArgumentErrors(t *testing.T) {
	const m, k, n, bs = 2, 64, 40, 32
	nb := ceilDiv(n, bs)
	x := make([]float32, m*k)
	packed := make([]uint8, k*nb*bs/2)
	absmax := make([]float32, k*nb)
	w8 := make([]int8, k*n)
	p2, p1 := make([]uint8, k/4*n), make([]uint8, k/8*n)
	cases := []struct {
		name string
		call func(y []float32) error
	}{
		{"nf4-kn short x", func(y []float32) error { return nf4KN(y, x[1:], packed, absmax, m, k, n, bs) }},
		{"nf4-kn short packed", func(y []float32) error { return nf4KN(y, x, packed[1:], absmax, m, k, n, bs) }},
		{"nf4-kn long absmax", func(y []float32) error {
			return nf4KN(y, x, packed, append(absmax, 1), m, k, n, bs)
		}},
		{"nf4-kn odd block", func(y []float32) error { return nf4KN(y, x, packed, absmax, m, k, n, 33) }},
		{"nf4-kn zero block", func(y []float32) error { return nf4KN(y, x, packed, absmax, m, k, n, 0) }},
		{"nf4-kn negative m", func(y []float32) error { return nf4KN(y, x, packed, absmax, -1, k, n, bs) }},
		{"nf4-nk packed for kn", func(y []float32) error { return nf4NK(y, x, packed, absmax, m, k, n, bs) }},
		{"nf4-kn huge", func(y []float32) error { return nf4KN(y, x, packed, absmax, 1<<40, 1<<40, n, bs) }},
		{"int8-kn short w", func(y []float32) error { return int8KN(y, x, w8[1:], []float32{1}, ScaleTensor, m, k, n) }},
		{"int8-kn scale len", func(y []float32) error { return int8KN(y, x, w8, []float32{1, 2}, ScaleTensor, m, k, n) }},
		{"int8-nk scale kind", func(y []float32) error { return int8NK(y, x, w8, []float32{1}, ScaleKind(9), m, k, n) }},
		{"int8-nk per-k len", func(y []float32) error {
			return int8NK(y, x, w8, make([]float16.Float16, n), ScaleK, m, k, n)
		}},
		{"2bit k%4", func(y []float32) error { return twoBitKN(y, x[:m*(k-2)], p2, nil, ScaleNone, m, k-2, n) }},
		{"2bit per-k", func(y []float32) error { return twoBitKN(y, x, p2, make([]float32, k), ScaleK, m, k, n) }},
		{"1bit k%8", func(y []float32) error { return oneBitKN(y, x[:m*(k-4)], p1, nil, ScaleNone, m, k-4, n) }},
		{"1bit short packed", func(y []float32) error { return oneBitKN(y, x, p1[:len(p1)-1], nil, ScaleNone, m, k, n) }},
		{"dense short w", func(y []float32) error { return denseKN(y, x, make([]float32, k*n-1), m, k, n) }},
		{"dense-nk short w", func(y []float32) error { return denseNK(y, x, make([]float32, k*n-1), m, k, n) }},
		{"short y", func(y []float32) error { return denseKN(y[1:], x, make([]float32, k*n), m, k, n) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			y := make([]float32, m*n)
			for i := range y {
				y[i] = 42
			}
			err := c.call(y)
			if !errors.Is(err, ErrArgument) {
				t.Fatalf("got %v, want an error wrapping ErrArgument", err)
			}
			for i, v := range y {
				if v != 42 {
					t.Fatalf("y[%d] written (%v) on error", i, v)
				}
			}
		})
	}
}

// TestCStatuses checks the C entry points' own argument checks (what an FFI handler relies on).
func TestCStatuses(t *testing.T) {
	x := make([]float32, 64)
	packed := make([]uint8, 64)
	absmax := make([]float32, 4)
	y := make([]float32, 64)
	px, pp, pa, py := unsafe.Pointer(&x[0]), unsafe.Pointer(&packed[0]), unsafe.Pointer(&absmax[0]), unsafe.Pointer(&y[0])
	const f32, bf16, f16 = 0, 1, 2
	cases := []struct {
		name string
		got  int
		want int
	}{
		{"ok", rawNF4KN(px, pp, pa, f32, f32, 1, 2, 64, 64, py), 0},
		{"empty m, null x and y", rawNF4KN(nil, pp, pa, f32, f32, 0, 2, 64, 64, nil), 0},
		{"empty m, null weight", rawNF4KN(nil, nil, pa, f32, f32, 0, 2, 64, 64, nil), -1},
		{"empty k and n, all null", rawNF4KN(nil, nil, nil, f32, f32, 1, 0, 0, 64, nil), 0},
		{"null x", rawNF4KN(nil, pp, pa, f32, f32, 1, 2, 64, 64, py), -1},
		{"null packed", rawNF4KN(px, nil, pa, f32, f32, 1, 2, 64, 64, py), -1},
		{"null absmax", rawNF4KN(px, pp, nil, f32, f32, 1, 2, 64, 64, py), -1},
		{"null y", rawNF4KN(px, pp, pa, f32, f32, 1, 2, 64, 64, nil), -1},
		{"negative k", rawNF4KN(px, pp, pa, f32, f32, 1, -2, 64, 64, py), -2},
		{"overflow", rawNF4KN(px, pp, pa, f32, f32, 1<<40, 1<<40, 64, 64, py), -2},
		{"overflow packed", rawNF4KN(px, pp, pa, f32, f32, 1, 1<<40, 1<<40, 64, py), -2},
		{"x float16", rawNF4KN(px, pp, pa, f16, f32, 1, 2, 64, 64, py), -3},
		{"absmax dtype 7", rawNF4KN(px, pp, pa, bf16, 7, 1, 2, 64, 64, py), -3},
		{"odd block", rawNF4KN(px, pp, pa, f32, f32, 1, 2, 64, 63, py), -4},
		{"negative block", rawNF4KN(px, pp, pa, f32, f32, 1, 2, 64, -64, py), -4},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: status %d, want %d", c.name, c.got, c.want)
		}
	}
}

func TestForceISA(t *testing.T) {
	defer func() { _ = forceISA(autoISA) }()
	if err := forceISA(ISA(99)); !errors.Is(err, ErrUnsupported) {
		t.Errorf("forceISA(99) = %v, want ErrUnsupported", err)
	}
	for _, isa := range isas() {
		err := forceISA(isa)
		if isa.Supported() != (err == nil) {
			t.Errorf("forceISA(%s) = %v but Supported() = %v", isa, err, isa.Supported())
		}
		if err == nil && ActiveISA() != isa {
			t.Errorf("after forceISA(%s), ActiveISA() = %s", isa, ActiveISA())
		}
	}
	if err := forceISA(autoISA); err != nil || ActiveISA() != bestISA() {
		t.Errorf("forceISA(autoISA) = %v, active %s, best %s", err, ActiveISA(), bestISA())
	}
}

// TestThreadsEnv runs the test binary with QUANTA_KERNEL_THREADS set: the value is read once, and
// an invalid one is ignored (or clamped) with a note.
func TestThreadsEnv(t *testing.T) {
	if os.Getenv("QK_THREADS_CHILD") == "1" {
		fmt.Printf("threads=%d note=%s\n", Threads(), ConfigNote())
		return
	}
	child := func(env string) (threads int, note string) {
		t.Helper()
		state, note := childReport(t, "TestThreadsEnv", "threads=", "QK_THREADS_CHILD=1", threadsEnv+"="+env)
		if _, err := fmt.Sscanf(state, "threads=%d", &threads); err != nil {
			t.Fatalf("child output %q: %v", state, err)
		}
		return threads, note
	}
	def, note := child("")
	if def < 1 || note != "" {
		t.Fatalf("default: %d threads, note %q", def, note)
	}
	for _, c := range []struct {
		env  string
		want int
		note bool
	}{{"3", 3, false}, {"1", 1, false}, {"abc", def, true}, {"2x", def, true}, {"0", 1, true}, {"100000", maxThreads, true},
		{"3 ", 3, false}, {" 3\t", 3, false}, {" ", def, true}, {"99999999999999999999", maxThreads, true},
		{"-99999999999999999999", 1, true}} {
		got, note := child(c.env)
		if got != c.want || (note != "") != c.note {
			t.Errorf("%s=%q: %d threads, note %q; want %d threads, note %v", threadsEnv, c.env, got, note, c.want, c.note)
		}
	}
	if got := SetThreads(5); got != 5 || Threads() != 5 {
		t.Errorf("SetThreads(5) = %d, Threads() = %d", got, Threads())
	}
	if got := SetThreads(1 << 20); got != maxThreads {
		t.Errorf("SetThreads(1<<20) = %d, want %d", got, maxThreads)
	}
	def = SetThreads(0)
	for _, n := range []int{-1, math.MinInt32, -(1 << 32) + 5, math.MinInt64 + 3} { // restore the default, whatever the low 32 bits
		SetThreads(7)
		if got := SetThreads(n); got != def || Threads() != def {
			t.Errorf("SetThreads(%d) = %d, Threads() = %d; want the default %d", n, got, Threads(), def)
		}
	}
	SetThreads(0)
}

// TestPoolEnv runs the test binary with QUANTA_KERNEL_POOL set: xla and quanta choose the pool,
// in any case and with white space around, as quanta's other variables are read; any other value
// is ignored with a note naming the variable, so that a typo does not go unseen.
func TestPoolEnv(t *testing.T) {
	if os.Getenv("QK_POOL_CHILD") == "1" {
		fmt.Printf("xla=%v note=%s\n", SetXLAPool(false), ConfigNote())
		return
	}
	for _, c := range []struct {
		env       string
		xla, note bool
	}{{"", false, false}, {"xla", true, false}, {"quanta", false, false}, {"XLA", true, false}, {" xla\t", true, false},
		{" Quanta ", false, false}, {"  ", false, false}, {"garbage", false, true}, {"x la", false, true}, {"xlaa", false, true}} {
		state, note := childReport(t, "TestPoolEnv", "xla=", "QK_POOL_CHILD=1", "QUANTA_KERNEL_POOL="+c.env, threadsEnv+"=")
		xla := state == "xla=true"
		if xla != c.xla || (note != "") != c.note || (c.note && !strings.Contains(note, "QUANTA_KERNEL_POOL")) {
			t.Errorf("QUANTA_KERNEL_POOL=%q: xla pool %v, note %q; want xla pool %v, note %v", c.env, xla, note, c.xla, c.note)
		}
	}
}

// childReport runs test again in a child process of the test binary with env added, and splits
// the line the child prints, "<prefix>... note=<ConfigNote>", into what precedes " note=" and the
// note.
func childReport(t *testing.T, test, prefix string, env ...string) (state, note string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	line := string(out)
	i := strings.Index(line, prefix)
	if i < 0 {
		t.Fatalf("child output %q", line)
	}
	line = line[i : strings.IndexByte(line[i:], '\n')+i]
	state, note, _ = strings.Cut(line, " note=")
	return state, note
}

// TestConcurrentCallers runs products from several goroutines at once: one holds the pool, the
// others run alone on their threads; every result must still be right.
func TestConcurrentCallers(t *testing.T) {
	defer func() { _ = forceISA(autoISA) }()
	oldSmall, oldChunk := tune(tuneSmallWork, 0), tune(tuneChunkBytes, 2048)
	defer func() { tune(tuneSmallWork, oldSmall); tune(tuneChunkBytes, oldChunk) }()
	SetThreads(3)
	defer SetThreads(0)
	const k, n, bs = 256, 300, 64
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := 1 + g*3
			r := newRand(uint64(g))
			packed, absmax, nb := nf4Weight(r, k, n, bs)
			x := randActivations(r, m*k, false)
			ref, mag := refProduct(x.f32, m, k, n, func(l, j int) float32 {
				return nf4Codebook[nf4Code(packed, nb*bs/2, l, j)] * absmax.f32[l*nb+j/bs]
			})
			for range 30 {
				y := make([]float32, m*n)
				if err := nf4KN(y, x.f32, packed, absmax.f32, m, k, n, bs); err != nil {
					t.Error(err)
					return
				}
				checkClose(t, y, ref, mag, k, false)
			}
		}()
	}
	wg.Wait()
}
