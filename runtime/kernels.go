package runtime

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/janpfeifer/must"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/cpukernels"
	"github.com/quanta-ml/quanta/internal/customcall"
	"github.com/quanta-ml/quanta/internal/kernelreg"
	"github.com/quanta-ml/quanta/internal/xlaffi"
)

// KernelReport says which of quanta's kernels the process-wide backend can call. `quanta doctor`
// prints it.
type KernelReport struct {
	// Plugin describes the plugin the kernels are registered with: "PJRT C API 0.115, XLA FFI
	// API 0.4, platform Host"; empty when Unavailable.
	Plugin string

	// Registered lists the custom-call targets registered with the plugin, sorted: the
	// registered kernels and xlaffi's probe.
	Registered []string

	// Failed holds, by target, why a kernel of the table was not registered.
	Failed map[string]error

	// Unavailable says why no kernel can be registered (the backend is not XLA on its CPU
	// plugin, or the plugin's FFI is not one quanta accepts); nil otherwise.
	Unavailable error

	// CustomCalls says why GoMLX graphs cannot emit custom calls on the backend
	// (customcall.Check); nil when they can.
	CustomCalls error

	// Threads is the number of threads a kernel may use, the caller's included
	// (QUANTA_KERNEL_THREADS, else the online CPUs), and ISA the instruction set the kernels run.
	Threads int
	ISA     string

	// ThreadsNote says why QUANTA_KERNEL_THREADS was ignored or clamped; empty otherwise.
	ThreadsNote string
}

// Kernels reports which of quanta's CPU kernels the process-wide backend registered when it
// started. The error is the backend's, when it failed to start; kernels that could not be
// registered are reported, not returned as errors.
func Kernels() (*KernelReport, error) {
	if _, err := Backend(); err != nil {
		return nil, err
	}
	return shared.kernels.clone(), nil
}

// MustKernels is Kernels, but panics on error.
func MustKernels() *KernelReport {
	return must.M1(Kernels())
}

// HasKernel reports whether a graph on backend can call target: the runtime registered it with
// backend's plugin, and backend's graphs can emit custom calls.
func HasKernel(backend backends.Backend, target string) bool {
	k := kernelreg.For(backend)
	return k != nil && k.Targets[target]
}

// ProbeKernels runs a graph on the process-wide backend that calls xlaffi's probe kernel through
// a custom call, and checks its result: the whole path from registration to execution. It
// returns why it failed.
func ProbeKernels() (err error) {
	report, err := Kernels()
	if err != nil {
		return err
	}
	if report.Unavailable != nil {
		return report.Unavailable
	}
	if report.CustomCalls != nil {
		return report.CustomCalls
	}
	defer func() {
		if r := recover(); r != nil {
			err = errors.Errorf("quanta runtime: ProbeKernels: the probe graph panicked: %v", r)
		}
	}()
	in := []float32{1, -2, 3.5}
	out, err := graph.MustNewExec(MustBackend(), func(x *graph.Node) *graph.Node {
		y := graph.AddScalar(x, 1) // the formulation differs from the probe's copy, so a copy proves the call
		customcall.MustRewrite(y, xlaffi.ProbeTarget, []*graph.Node{x}, nil)
		return y
	}).Exec1(in)
	if err != nil {
		return errors.WithMessage(err, "quanta runtime: ProbeKernels")
	}
	if got := tensors.MustCopyFlatData[float32](out); !slices.Equal(got, in) {
		return errors.Errorf("quanta runtime: ProbeKernels: the probe returned %v, want its input %v", got, in)
	}
	return nil
}

// String formats the report as `quanta doctor` prints it, in Info.String's layout.
func (r *KernelReport) String() string {
	var sb strings.Builder
	field := func(name, format string, args ...any) {
		fmt.Fprintf(&sb, "%-13s %s\n", name+":", fmt.Sprintf(format, args...))
	}
	if r.Unavailable != nil {
		field("kernels", "none: %v", r.Unavailable)
	} else {
		field("kernels", "%d registered (%s): %s", len(r.Registered), r.Plugin, strings.Join(r.Registered, ", "))
		field("kernel CPU", "%s, %d threads", r.ISA, r.Threads)
	}
	if r.ThreadsNote != "" {
		field("kernel note", "%s", r.ThreadsNote)
	}
	for _, target := range slices.Sorted(maps.Keys(r.Failed)) {
		field("kernel error", "%s: %v", target, r.Failed[target])
	}
	if r.CustomCalls != nil {
		field("custom calls", "no: %v", r.CustomCalls)
	} else {
		field("custom calls", "yes (GoMLX %s, go-xla %s internals checked)", customcall.GoMLXVersion, customcall.GoXLAVersion)
	}
	return sb.String()
}

func (r *KernelReport) clone() *KernelReport {
	c := *r
	c.Registered = slices.Clone(r.Registered)
	c.Failed = maps.Clone(r.Failed)
	return &c
}

// registerKernels registers quanta's CPU kernels with the plugin of backend, described by info,
// and, where its graphs can emit custom calls, installs them for package lowering.
func registerKernels(backend backends.Backend, info *Info) *KernelReport {
	report := &KernelReport{Failed: map[string]error{}, CustomCalls: customcall.Check(backend),
		Threads: cpukernels.Threads(), ISA: cpukernels.ActiveISA().String(), ThreadsNote: cpukernels.ConfigNote()}
	switch {
	case !IsXLA(backend):
		report.Unavailable = errors.Errorf("the backend is %q: quanta's kernels need XLA's CPU plugin", backend.Name())
		return report
	case !isCPUPlugin(info.PluginName):
		report.Unavailable = errors.Errorf("the XLA plugin is %q: quanta's kernels are host code for XLA's CPU plugin",
			info.PluginName)
		return report
	}
	p, err := xlaffi.Open(info.PluginPath)
	if err != nil {
		report.Unavailable = err
		return report
	}
	report.Plugin = p.String()
	for _, h := range cpukernels.Handlers() {
		if err := p.Register(h); err != nil {
			report.Failed[h.Target] = err
		}
	}
	report.Registered = p.Registered()
	if report.CustomCalls == nil {
		targets := map[string]bool{}
		for _, target := range report.Registered {
			targets[target] = true
		}
		kernelreg.Install(backend, &kernelreg.Kernels{Targets: targets, Codebook4: cpukernels.NF4Codebook(),
			Emit: func(node *graph.Node, target string, operands []*graph.Node, attrs map[string]any) error {
				return customcall.Rewrite(node, target, operands, customcall.Attributes(attrs))
			}})
	}
	return report
}
