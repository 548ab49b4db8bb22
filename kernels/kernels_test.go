package kernels_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/cpukernels"
	"github.com/quanta-ml/quanta/internal/kernelreg"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/internal/xlaffi"
	"github.com/quanta-ml/quanta/kernels"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
)

// TestBackendsNew: a backend made by GoMLX's backends.New (not quanta's runtime) gets the kernels
// when a quantized product is first built on it, on XLA CPU; elsewhere the product runs on its
// HLO formulation and Attach says why.
func TestBackendsNew(t *testing.T) {
	backend, err := backends.New()
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Finalize()
	_, cpu := kernelreg.XLACPU(backend)
	r := rand.New(rand.NewPCG(3, 4))
	weight := testutil.NormalTensor(r, 256, 96)
	w := nf4.MustQuantize(weight, 64)
	x := testutil.NormalTensor(r, 1, 256)
	lowering.ResetBuilt()
	exec := implicitarray.MustNewExec(backend, func(x *graph.Node, w *nf4.Array) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	})
	got := tensors.MustCopyFlatData[float32](exec.MustCall1(x, w).(*tensors.Tensor))
	denseT, err := implicitarray.MaterializeOnHost(backend, w)
	if err != nil {
		t.Fatal(err)
	}
	dense := tensors.MustCopyFlatData[float32](denseT)
	xs := tensors.MustCopyFlatData[float32](x)
	for j := range 96 {
		var want float64
		for l := range 256 {
			want += float64(xs[l]) * float64(dense[l*96+j])
		}
		if math.Abs(float64(got[j])-want) > 1e-4*(1+math.Abs(want)) {
			t.Fatalf("y[%d] = %v, want %v", j, got[j], want)
		}
	}
	kernelServed := lowering.Built()[lowering.Choice{Layout: "blockwise4", Strategy: lowering.Kernel}] > 0
	report, err := kernels.Attach(backend)
	t.Logf("%s", report.Summary())
	if cpu {
		if err != nil || !kernelServed {
			t.Fatalf("XLA CPU: want the product on a kernel; Attach: %v, built %v", err, lowering.Built())
		}
		for _, h := range cpukernels.Handlers() {
			if !kernels.Available(backend, h.Target) {
				t.Errorf("%s not available", h.Target)
			}
		}
		if err := kernels.Probe(backend); err != nil {
			t.Errorf("Probe: %+v", err)
		}
		return
	}
	if err == nil || !errors.Is(err, kernels.ErrUnavailable) || kernelServed {
		t.Fatalf("%s: want no kernels, got %v (built %v)", backend.Name(), err, lowering.Built())
	}
}

// TestReport: the report lists every kernel (and the probe) where they serve, and says why not
// elsewhere; a caller's copy is its own.
func TestReport(t *testing.T) {
	backend := testutil.Backend(t)
	report, err := kernels.Attach(backend)
	targets := []string{xlaffi.ProbeTarget}
	for _, h := range cpukernels.Handlers() {
		targets = append(targets, h.Target)
	}
	if _, cpu := kernelreg.XLACPU(backend); cpu {
		if err != nil || len(report.Failed) > 0 {
			t.Fatalf("XLA CPU: kernels unavailable: %v %+v", err, report)
		}
		for _, target := range targets {
			if !slices.Contains(report.Registered, target) {
				t.Errorf("%s not registered: %v", target, report.Registered)
			}
		}
		if report.Threads != cpukernels.Threads() || report.ISA != cpukernels.ActiveISA().String() {
			t.Errorf("report says %d threads on %s; cpukernels %d on %s", report.Threads, report.ISA,
				cpukernels.Threads(), cpukernels.ActiveISA())
		}
		if s := report.String(); !strings.Contains(s, "registered (PJRT C API") || !strings.Contains(s, "custom calls: yes") {
			t.Errorf("String() = %q", s)
		}
		if s := report.Summary(); !strings.HasPrefix(s, "kernels: ") || strings.Contains(s, "NONE") {
			t.Errorf("Summary() = %q", s)
		}
	} else {
		if err == nil || report.Unavailable == nil || len(report.Registered) > 0 {
			t.Errorf("want the kernels unavailable, got %v %+v", err, report)
		}
		if s := report.Summary(); !strings.HasPrefix(s, "kernels: NONE: ") {
			t.Errorf("Summary() = %q", s)
		}
		if err := kernels.Probe(backend); err == nil {
			t.Error("Probe: no error without kernels")
		}
	}
	if kernels.Available(backend, "quanta_no_such_kernel") {
		t.Error("Available of a target nobody registered")
	}
	report.Registered = append(report.Registered, "changed")
	if again, _ := kernels.Attach(backend); slices.Contains(again.Registered, "changed") {
		t.Error("changing a report changed the package's")
	}
}

// TestThreadsNoteOnStderr: an invalid QUANTA_KERNEL_THREADS is reported on stderr when the kernels
// are attached, as docs/backends.md says, not only in quanta doctor's report.
func TestThreadsNoteOnStderr(t *testing.T) {
	if os.Getenv("QUANTA_THREADS_NOTE_CHILD") == "1" {
		_, _ = kernels.Attach(nil)
		_, _ = kernels.Attach(nil)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestThreadsNoteOnStderr$", "-test.count=1")
	cmd.Env = append(os.Environ(), "QUANTA_THREADS_NOTE_CHILD=1", "QUANTA_KERNEL_THREADS=abc")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v; stderr:\n%s", err, stderr.String())
	}
	const want = "QUANTA_KERNEL_THREADS=abc is not a decimal integer"
	if n := strings.Count(stderr.String(), want); n != 1 {
		t.Errorf("stderr has %d notes %q, want 1:\n%s", n, want, stderr.String())
	}
}

// hiddenPlugin is an XLA backend whose description does not name its plugin library, so the
// kernels cannot be registered with it.
type hiddenPlugin struct{ backends.Backend }

func (hiddenPlugin) Description() string { return "xla:cpu (plugin not named)" }

// TestLostKernelsSaid: when the kernels cannot serve an XLA CPU backend, the first attachment says
// so on stderr, once, so that a program that builds products without calling Attach learns that
// they run on their HLO formulations and what that costs; a backend the kernels never serve (not XLA CPU) gets no line.
func TestLostKernelsSaid(t *testing.T) {
	backend := testutil.Backend(t)
	stderr := func(b backends.Backend) string {
		t.Helper()
		return testutil.CaptureStderr(t, func() error {
			_, _ = kernels.Attach(b)
			_, _ = kernels.Attach(b)
			return nil
		})
	}
	if _, cpu := kernelreg.XLACPU(backend); !cpu {
		if out := stderr(backend); strings.Contains(out, "HLO formulations") {
			t.Errorf("%s: a line about kernels that never serve it: %q", backend.Name(), out)
		}
		t.Skipf("%s is not XLA on a CPU plugin", backend.Name())
	}
	out := stderr(&hiddenPlugin{backend})
	const want = "quanta: kernels: NONE: "
	if strings.Count(out, want) != 1 || !strings.Contains(out, "HLO formulations") || !strings.Contains(out, "decoding 10 to 300 times slower") {
		t.Errorf("stderr %q; want one line starting %q saying the products run on their HLO formulations and what decoding loses", out, want)
	}
}

// TestReportThreads: the report counts one thread as "1 thread", as doctor and the benchmark
// headers print it, and more as "N threads".
func TestReportThreads(t *testing.T) {
	for _, tc := range []struct {
		threads int
		want    string
	}{{1, ", 1 thread"}, {2, ", 2 threads"}} {
		r := &kernels.Report{Plugin: "PJRT C API 0.115", Registered: []string{"quanta_probe"}, ISA: "avx2", Threads: tc.threads}
		if s := r.Summary(); !strings.HasSuffix(s, tc.want) {
			t.Errorf("Summary() = %q, want it to end with %q", s, tc.want)
		}
		if s := r.String(); !strings.Contains(s, "avx2"+tc.want+"\n") {
			t.Errorf("String() = %q, want a line ending with %q", s, tc.want)
		}
	}
}
