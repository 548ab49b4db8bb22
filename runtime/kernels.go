package runtime

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/janpfeifer/must"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/customcall"
	"github.com/quanta-ml/quanta/internal/xlaffi"
)

// Kernel is one of quanta's CPU kernels: a typed XLA FFI handler written in C with
// internal/xlaffi's qffi.h, and the custom-call target that graphs call it by.
type Kernel struct {
	// Target is the custom-call target name, "quanta_<what>".
	Target string

	// Handler points to the C handler defined with QFFI_HANDLER:
	// unsafe.Pointer(C.qffi_handler(C.quanta_what)).
	Handler unsafe.Pointer
}

// RegisterKernels adds kernels to the table that the runtime registers with the XLA CPU plugin
// the first time kernels are asked for (Kernels, HasKernel, ProbeKernels), after the backend
// started. Call it from init(). It panics on an invalid or duplicate target, a nil handler, or a
// call after the table was first read: the table is read-only from then on.
func RegisterKernels(kernels ...Kernel) {
	kernelTable.add(kernels...)
}

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
}

// Kernels registers the kernel table with the process-wide backend's plugin, the first time it is
// called, and reports what was registered. The error is the backend's, when it failed to start;
// kernels that cannot be registered are reported, not returned as errors.
func Kernels() (*KernelReport, error) {
	backend, err := Backend()
	if err != nil {
		return nil, err
	}
	kernelState.once.Do(func() {
		kernelState.report = registerKernels(backend, shared.info, kernelTable.freeze())
	})
	return kernelState.report.clone(), nil
}

// MustKernels is Kernels, but panics on error.
func MustKernels() *KernelReport {
	return must.M1(Kernels())
}

// HasKernel reports whether a graph on backend can call target: backend is the process-wide
// backend, target is registered with its plugin, and its graphs can emit custom calls. Lowerings
// ask it before choosing a kernel, and keep their HLO formulation otherwise.
func HasKernel(backend backends.Backend, target string) bool {
	if shared, err := Backend(); err != nil || backend != shared {
		return false
	}
	report, err := Kernels()
	return err == nil && report.Unavailable == nil && report.CustomCalls == nil &&
		slices.Contains(report.Registered, target)
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

// registerKernels registers kernels with the plugin of backend, described by info.
func registerKernels(backend backends.Backend, info *Info, kernels []Kernel) *KernelReport {
	report := &KernelReport{Failed: map[string]error{}, CustomCalls: customcall.Check(backend)}
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
	for _, k := range kernels {
		if err := p.Register(xlaffi.Handler{Target: k.Target, Fn: k.Handler}); err != nil {
			report.Failed[k.Target] = err
		}
	}
	report.Registered = p.Registered()
	return report
}

// kernelState holds the result of the one registration.
var kernelState struct {
	once   sync.Once
	report *KernelReport
}

var reKernelTarget = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// kernelRegistry is the table RegisterKernels fills; read-only once frozen.
type kernelRegistry struct {
	mu      sync.Mutex
	kernels []Kernel
	frozen  bool
}

var kernelTable kernelRegistry

func (t *kernelRegistry) add(kernels ...Kernel) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range kernels {
		switch {
		case t.frozen:
			panic(errors.Errorf("runtime.RegisterKernels(%q): the kernel table is read-only once kernels were asked "+
				"for: register from init()", k.Target))
		case !reKernelTarget.MatchString(k.Target):
			panic(errors.Errorf("runtime.RegisterKernels(%q): accepted targets: letters, digits, '_' and '.', not "+
				"starting with a digit", k.Target))
		case k.Handler == nil:
			panic(errors.Errorf("runtime.RegisterKernels(%q): nil handler", k.Target))
		case k.Target == xlaffi.ProbeTarget || slices.ContainsFunc(t.kernels, func(o Kernel) bool { return o.Target == k.Target }):
			panic(errors.Errorf("runtime.RegisterKernels(%q): duplicate target", k.Target))
		}
		t.kernels = append(t.kernels, k)
	}
}

// freeze makes the table read-only and returns it.
func (t *kernelRegistry) freeze() []Kernel {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.frozen = true
	return slices.Clone(t.kernels)
}
