package runtime_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/cpukernels"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/internal/xlaffi"
	"github.com/quanta-ml/quanta/runtime"
)

// TestKernels checks the registration of quanta's kernels: on XLA's CPU plugin every kernel is
// registered and callable; elsewhere the report says why none is, and nothing claims a kernel.
func TestKernels(t *testing.T) {
	backend := testutil.Backend(t)
	report := runtime.MustKernels()
	info := runtime.MustReport()
	t.Logf("\n%s", report)
	targets := []string{xlaffi.ProbeTarget}
	for _, h := range cpukernels.Handlers() {
		targets = append(targets, h.Target)
	}
	if runtime.IsXLA(backend) && info.PluginName == "cpu" {
		if report.Unavailable != nil || report.CustomCalls != nil || len(report.Failed) > 0 {
			t.Fatalf("XLA CPU: kernels unavailable: %+v", report)
		}
		for _, target := range targets {
			if !slices.Contains(report.Registered, target) || !runtime.HasKernel(backend, target) {
				t.Errorf("%s: registered %v, HasKernel %v; want both", target, report.Registered,
					runtime.HasKernel(backend, target))
			}
		}
		if err := runtime.ProbeKernels(); err != nil {
			t.Errorf("ProbeKernels: %+v", err)
		}
		if report.Threads != cpukernels.Threads() || report.ISA != cpukernels.ActiveISA().String() {
			t.Errorf("report says %d threads on %s; cpukernels %d on %s", report.Threads, report.ISA, cpukernels.Threads(),
				cpukernels.ActiveISA())
		}
		if s := report.String(); !strings.Contains(s, "registered (PJRT C API") || !strings.Contains(s, "custom calls: yes") ||
			!strings.Contains(s, fmt.Sprintf("kernel CPU:   %s, %d threads", report.ISA, report.Threads)) {
			t.Errorf("String() = %q", s)
		}
	} else {
		if report.Unavailable == nil || len(report.Registered) > 0 {
			t.Errorf("%s: want the kernels unavailable, got %+v", info.Config, report)
		}
		for _, target := range targets {
			if runtime.HasKernel(backend, target) {
				t.Errorf("HasKernel(%s) on %s", target, info.Config)
			}
		}
		if err := runtime.ProbeKernels(); err == nil {
			t.Errorf("ProbeKernels on %s: no error", info.Config)
		}
		if s := report.String(); !strings.Contains(s, "kernels:      none: ") {
			t.Errorf("String() = %q", s)
		}
	}
	if runtime.HasKernel(backend, "quanta_no_such_kernel") {
		t.Error("HasKernel of a target nobody registered")
	}
	report.Registered = append(report.Registered, "changed")
	if slices.Contains(runtime.MustKernels().Registered, "changed") {
		t.Error("changing a report changed the runtime's")
	}
}
