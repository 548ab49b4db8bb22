// Package kernels gives GoMLX programs quanta's CPU kernels: C kernels for products of float
// activations with quantized weights, which XLA calls as typed FFI custom calls. On XLA's CPU
// plugin they make the quantized products of few activation rows several times faster than the
// dense ones (docs/performance.md); everywhere else the products keep their HLO formulations.
//
// # Use
//
// Import the package, for its effect or to call it, in the program that creates the backend:
//
//	import (
//		_ "github.com/gomlx/gomlx/backends/default" // GoMLX's backends: XLA and pure Go
//		_ "github.com/quanta-ml/quanta/kernels"
//	)
//
//	backend := backends.MustNew() // GoMLX's own way; GOMLX_BACKEND chooses
//
// Run such a program with GOMLX_NO_AUTO_INSTALL=1 (or call GoMLX's xla.EnableAutoInstall(false)
// before backends.New), as package runtime does for its own backend: otherwise GoMLX's
// backends.New fetches its own XLA CPU plugin from GitHub (go-xla's pjrt-cpu-binaries v0.83.3,
// older than the PJRT C API 0.115 the kernels need) and links it over
// ~/.local/lib/go-xla/pjrt_c_api_cpu_plugin.so, the plugin `make setup` installed, and without
// network it fails to start.
//
// The kernels then attach to each backend the first time a quantized product is built on it:
// package lowering asks, and Attach registers the kernels with the backend's plugin. Attach can
// also be called directly, to learn at start-up whether the kernels serve a backend (its Report
// says why not); Probe runs one custom call end to end. Package runtime, which starts quanta's
// commands and examples, is one user of it. Importing this package is the opt-in: it registers
// the lazy attachment with the products (internal/kernelreg) and does nothing else until a
// product is built. It links GoMLX's XLA backend but not the pure-Go one: GOMLX_BACKEND=go needs
// GoMLX's backends/default (or backends/simplego) imported, as any GoMLX program does.
//
// # Which backends
//
// A backend is served when it is GoMLX's XLA backend on a PJRT plugin whose devices are CPUs
// (the plugin's own device description, never its file name), the plugin implements the PJRT
// FFI extension at PJRT C API 0.115 or later with XLA FFI API 0.4 (internal/xlaffi checks each),
// and GoMLX's graphs can emit custom calls there (internal/customcall checks the GoMLX and go-xla
// versions it was written for). A plugin without the FFI extension (xla-cpu-pjrt 0.0.1, PJRT C
// API 0.81) runs quanta's products on their HLO formulations: decoding (one activation row) one to
// two orders of magnitude slower, a prompt a few times (docs/performance.md has the figures):
// Attach's error says so, the first attachment to such a backend prints one line on stderr (also
// for a kernel that failed to register), and `quanta doctor`, `make setup` and every benchmark
// header report it.
//
// # Results
//
// A kernel's result depends only on its inputs: the same bits on every call, from any number of
// goroutines, whatever the kernel thread count (QUANTA_KERNEL_THREADS, default the online CPUs).
// Results differ from XLA's dense product of the materialized weight by float32 rounding only.
//
// # Errors
//
// Attach and Probe return errors wrapping ErrUnavailable when the kernels cannot serve the
// backend; MustAttach panics instead.
package kernels
