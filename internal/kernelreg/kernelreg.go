// Package kernelreg is where the products learn which of quanta's CPU kernels a backend can call,
// and how to emit a call: package kernels installs an entry when it has registered the kernels
// with the backend's XLA CPU plugin, package lowering looks it up when it builds a product. It
// keeps lowering free of the execution packages (cgo, go-xla's plugin), and nothing happens until
// a program imports package kernels: importing this package changes nothing.
package kernelreg

import (
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// Kernels is what a backend can call.
type Kernels struct {
	// Targets are the registered custom-call targets.
	Targets map[string]bool
	// Codebook4 is the table of code values the 4-bit blockwise kernels decode.
	Codebook4 [16]float32
	// Emit rewrites node (the product's formulation, which keeps the graph's gradients) into a
	// call of target on operands, with attributes; an error leaves the graph unchanged.
	Emit func(node *graph.Node, target string, operands []*graph.Node, attrs map[string]any) error
}

var (
	installed sync.Map // backends.Backend → *Kernels
	// attach, set by package kernels, attaches the kernels to a backend seen for the first time.
	attach   atomic.Pointer[func(backends.Backend)]
	attached sync.Map // backends.Backend → *sync.Once
)

// Install records the kernels backend can call (nil removes them).
func Install(backend backends.Backend, k *Kernels) {
	if k == nil {
		installed.Delete(backend)
		return
	}
	installed.Store(backend, k)
}

// SetAttach sets the function For calls, once per backend, before it answers for a backend with
// no kernels installed: package kernels attaches the kernels there.
func SetAttach(f func(backends.Backend)) {
	attach.Store(&f)
}

// For returns the kernels backend can call, or nil.
func For(backend backends.Backend) *Kernels {
	if backend == nil {
		return nil
	}
	if k, ok := installed.Load(backend); ok {
		return k.(*Kernels)
	}
	if f := attach.Load(); f != nil {
		once, _ := attached.LoadOrStore(backend, &sync.Once{})
		once.(*sync.Once).Do(func() { (*f)(backend) })
		if k, ok := installed.Load(backend); ok {
			return k.(*Kernels)
		}
	}
	return nil
}

// pluginPath finds the plugin's library in an XLA backend's description, e.g.
// `xla:cpu - PJRT "cpu" plugin (/path/pjrt_c_api_cpu_plugin.so) v0.115 [StableHLO] [1 device(s)]`.
// The path may hold parentheses: it ends at the last ") v<major>.<minor>" of the description.
var pluginPath = regexp.MustCompile(`PJRT (?:"(?:[^"\\]|\\.)*" )?plugin \((.+)\) v\d+\.\d+`)

// XLACPU reports whether backend is GoMLX's XLA backend on a PJRT plugin whose devices are CPUs,
// and returns the plugin's library path. It goes by what the plugin reports of its devices, never
// by the library's file name.
func XLACPU(backend backends.Backend) (pluginLibrary string, ok bool) {
	if backend == nil || backend.String() != "xla" || backend.NumDevices() < 1 {
		return "", false
	}
	// XLA's CPU client names its devices "cpu:N"; older ones, built on TFRT, "TFRT_CPU_N".
	desc := backend.DeviceDescription(0)
	if kind, _, _ := strings.Cut(desc, ":"); kind != "cpu" && !strings.HasPrefix(desc, "TFRT_CPU_") {
		return "", false
	}
	if m := pluginPath.FindStringSubmatch(backend.Description()); m != nil {
		return m[1], true
	}
	return "", true
}
