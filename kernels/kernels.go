package kernels

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

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

// ErrUnavailable is wrapped by the errors of Attach and Probe when the kernels cannot serve a
// backend: it is not XLA on a CPU plugin, the plugin lacks the FFI extension quanta registers
// with, or GoMLX graphs cannot emit custom calls there.
var ErrUnavailable = errors.New("quanta's CPU kernels are unavailable")

// Report says what Attach found and did for a backend. `quanta doctor` prints it.
type Report struct {
	// Plugin describes the plugin the kernels are registered with: "PJRT C API 0.115, XLA FFI
	// API 0.4, platform Host"; empty when Unavailable.
	Plugin string

	// Registered lists the custom-call targets registered with the plugin, sorted: the kernels
	// and xlaffi's probe.
	Registered []string

	// Failed holds, by target, why a kernel was not registered.
	Failed map[string]error

	// Unavailable says why no kernel can be registered (the backend is not XLA on a CPU plugin,
	// or the plugin's FFI is not one quanta accepts); nil otherwise.
	Unavailable error

	// CustomCalls says why GoMLX graphs cannot emit custom calls on the backend; nil when they
	// can.
	CustomCalls error

	// Threads is the number of threads a kernel may use, the caller's included
	// (QUANTA_KERNEL_THREADS, else the online CPUs), and ISA the instruction set the kernels run.
	Threads int
	ISA     string

	// ThreadsNote says why QUANTA_KERNEL_THREADS was ignored or clamped, or QUANTA_KERNEL_POOL
	// ignored; empty otherwise.
	ThreadsNote string
}

// Err returns why the products built on the backend cannot call the kernels (wrapping
// ErrUnavailable), or nil when they can.
func (r *Report) Err() error {
	switch {
	case r.Unavailable != nil:
		return errors.Wrapf(ErrUnavailable, "%v", r.Unavailable)
	case r.CustomCalls != nil:
		return errors.Wrapf(ErrUnavailable, "GoMLX graphs cannot emit custom calls: %v", r.CustomCalls)
	}
	return nil
}

// Summary is the report in one line, for benchmark and example headers: "kernels: 6 registered
// (PJRT C API 0.115, XLA FFI API 0.4, platform Host), avx2, 2 threads" (with ", N refused (quanta
// doctor lists them)" before the ISA when the plugin refused some) or "kernels: NONE: why".
func (r *Report) Summary() string {
	if err := r.Err(); err != nil {
		return "kernels: NONE: " + strings.TrimPrefix(err.Error(), ErrUnavailable.Error()+": ")
	}
	refused := ""
	if len(r.Failed) > 0 {
		refused = fmt.Sprintf(", %d refused (quanta doctor lists them)", len(r.Failed))
	}
	return fmt.Sprintf("kernels: %d registered (%s)%s, %s, %s", len(r.Registered), r.Plugin, refused, r.ISA, threads(r.Threads))
}

// threads writes n and "thread", plural unless n is 1.
func threads(n int) string {
	if n == 1 {
		return "1 thread"
	}
	return fmt.Sprintf("%d threads", n)
}

// String formats the report as `quanta doctor` prints it.
func (r *Report) String() string {
	var sb strings.Builder
	field := func(name, format string, args ...any) {
		fmt.Fprintf(&sb, "%-13s %s\n", name+":", fmt.Sprintf(format, args...))
	}
	if r.Unavailable != nil {
		field("kernels", "none: %v", r.Unavailable)
	} else {
		field("kernels", "%d registered (%s): %s", len(r.Registered), r.Plugin, strings.Join(r.Registered, ", "))
		field("kernel CPU", "%s, %s", r.ISA, threads(r.Threads))
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

func (r *Report) clone() *Report {
	c := *r
	c.Registered = slices.Clone(r.Registered)
	c.Failed = maps.Clone(r.Failed)
	return &c
}

// attachments holds, per backend, the report of its one attachment.
var attachments sync.Map // backends.Backend → *attachment

type attachment struct {
	once   sync.Once
	report *Report
}

func init() {
	kernelreg.SetAttach(func(backend backends.Backend) { _, _ = Attach(backend) })
}

// Attach registers quanta's CPU kernels with the XLA CPU plugin backend runs on and makes them
// callable by the products later built on backend (lowering's Kernel strategy, and Auto for
// products of few rows). It is safe for concurrent use and does its work once per backend; later
// calls return the same report. The error, nil when the kernels serve backend, wraps
// ErrUnavailable; the report says what was found either way.
//
// A program does not need to call it: importing this package attaches the kernels to each
// backend the first time a product is built on it.
func Attach(backend backends.Backend) (*Report, error) {
	a, _ := attachments.LoadOrStore(backend, &attachment{})
	at := a.(*attachment)
	at.once.Do(func() {
		at.report = attach(backend)
		sayLost(backend, at.report)
	})
	return at.report.clone(), at.report.Err()
}

// MustAttach is Attach, but panics when the kernels cannot serve backend.
func MustAttach(backend backends.Backend) *Report {
	return must.M1(Attach(backend))
}

// sayLost says on stderr, when the kernels are attached to an XLA backend on a CPU plugin (where the
// products would call them), which of them cannot serve it: its quantized products then run on
// their HLO formulations, decoding one to two orders of magnitude slower (docs/performance.md), and
// a program that never calls Attach
// would not know.
func sayLost(backend backends.Backend, r *Report) {
	if _, cpu := kernelreg.XLACPU(backend); !cpu {
		return
	}
	const slower = "quantized products on this XLA CPU backend run on their HLO formulations " +
		"(decoding 10 to 300 times slower, a prompt 2 to 6 times: docs/performance.md)"
	if r.Err() != nil {
		fmt.Fprintf(os.Stderr, "quanta: %s; %s\n", r.Summary(), slower)
		return
	}
	for _, target := range slices.Sorted(maps.Keys(r.Failed)) {
		fmt.Fprintf(os.Stderr, "quanta: kernel %s not registered: %v; its %s\n", target, r.Failed[target],
			strings.TrimPrefix(slower, "quantized "))
	}
}

// threadsNoteOnce prints the note about an ignored or clamped QUANTA_KERNEL_THREADS, or an ignored
// QUANTA_KERNEL_POOL, once a process.
var threadsNoteOnce sync.Once

func attach(backend backends.Backend) *Report {
	report := &Report{Failed: map[string]error{}, Threads: cpukernels.Threads(), ISA: cpukernels.ActiveISA().String(),
		ThreadsNote: cpukernels.ConfigNote()}
	if report.ThreadsNote != "" {
		// docs/backends.md: an invalid value is ignored and one out of range clamped, each with a
		// note on stderr (quanta doctor also prints it in its report).
		threadsNoteOnce.Do(func() { fmt.Fprintf(os.Stderr, "quanta: %s\n", report.ThreadsNote) })
	}
	if backend == nil {
		report.Unavailable = errors.New("no backend")
		return report
	}
	report.CustomCalls = customcall.Check(backend)
	library, cpu := kernelreg.XLACPU(backend)
	switch {
	case backend.String() != "xla":
		report.Unavailable = errors.Errorf("the backend is %q: quanta's kernels need XLA on a CPU PJRT plugin", backend.Name())
		return report
	case !cpu:
		report.Unavailable = errors.Errorf("the XLA plugin's devices are %q, not CPUs: quanta's kernels are host code",
			backend.DeviceDescription(0))
		return report
	case library == "":
		report.Unavailable = errors.Errorf("the XLA backend does not say which plugin library it runs (%q)",
			backend.Description())
		return report
	}
	p, err := xlaffi.Open(library)
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
	report.Unavailable = noneRegistered(report.Failed, len(cpukernels.Handlers()))
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

// noneRegistered returns why no kernel can serve when the plugin refused all handlers of the
// kernels (failed by target), nil otherwise: the plugin then serves the probe target at most, and
// a report with no other error would call the kernels available.
func noneRegistered(failed map[string]error, handlers int) error {
	if handlers == 0 || len(failed) < handlers {
		return nil
	}
	first := slices.Min(slices.Collect(maps.Keys(failed)))
	return errors.Errorf("the plugin refused every kernel (%d; %s: %v)", len(failed), first, failed[first])
}

// Probe runs a graph on backend that calls xlaffi's probe kernel through a custom call and checks
// its result: the whole path from registration to execution. It attaches the kernels first and
// returns why the path failed.
func Probe(backend backends.Backend) (err error) {
	if _, err := Attach(backend); err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = errors.Errorf("kernels.Probe: the probe graph panicked: %v", r)
		}
	}()
	in := []float32{1, -2, 3.5}
	out, err := graph.MustNewExec(backend, func(x *graph.Node) *graph.Node {
		y := graph.AddScalar(x, 1) // the formulation differs from the probe's copy, so a copy proves the call
		customcall.MustRewrite(y, xlaffi.ProbeTarget, []*graph.Node{x}, nil)
		return y
	}).Exec1(in)
	if err != nil {
		return errors.WithMessage(err, "kernels.Probe")
	}
	if got := tensors.MustCopyFlatData[float32](out); !slices.Equal(got, in) {
		return errors.Errorf("kernels.Probe: the probe returned %v, want its input %v", got, in)
	}
	return nil
}

// Available reports whether a graph on backend can call target: the kernels are attached to
// backend (attaching them if this is the first use) and target is registered.
func Available(backend backends.Backend, target string) bool {
	k := kernelreg.For(backend)
	return k != nil && k.Targets[target]
}
