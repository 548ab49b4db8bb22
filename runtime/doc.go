// Package runtime picks and starts the GoMLX backend that quanta computations run on.
//
// Its name meets the standard library's runtime package (as Kubernetes'
// apimachinery/pkg/runtime does): a file that needs both aliases one of them, e.g.
//
//	import (
//		goruntime "runtime"
//
//		"github.com/quanta-ml/quanta/runtime"
//	)
//
// # Choosing the backend
//
// Backend returns one process-wide backend, created lazily on first use (PJRT clients are
// expensive) and shared by every caller. It is chosen, in order:
//
//  1. by $GOMLX_BACKEND when set, GoMLX's own convention: "xla:cpu", "xla:cuda", "xla:tpu",
//     "xla:/abs/path/to/pjrt_c_api_cpu_plugin.so", "go", ...; a failure is returned, never
//     replaced by another backend. Options after the plugin ("xla:cpu,shared_buffers") are
//     GoMLX's, read as GoMLX reads them: v0.26.0 knows shared_buffers, noshared_buffers and tf32,
//     and logs any other as "unknown plugin options" on stderr and starts without it, as any GoMLX
//     program given the same value (the CPU device count is QUANTA_CPU_DEVICES, not an option);
//  2. otherwise XLA on the best PJRT plugin found: tpu, then cuda, then cpu. Plugins are
//     looked up where go-xla looks ($PJRT_PLUGIN_LIBRARY_PATH, or $HOME/.local/lib/go-xla,
//     /usr/local/lib/go-xla and the system library paths) and, when the machine has the
//     devices, where Python wheels install them: libtpu/libtpu.so and
//     jax_plugins/xla_cuda{13,12}/xla_cuda_plugin.so in any site-packages (DiscoverAccelerators),
//     loaded by their real path with the NVIDIA libraries of the nvidia-* wheels preloaded;
//  3. otherwise GoMLX's pure-Go backend ("go"), after printing one line to stderr that says
//     the XLA plugin was not found and the command that installs it (make setup).
//
// GoMLX's plugin auto-installer downloads from GitHub; it is never run: when the backend starts,
// this package sets GOMLX_NO_AUTO_INSTALL=1 (unless already set) and disables it. Importing the
// package changes nothing in the process. `make setup` installs the XLA CPU plugin from a PyPI
// wheel instead.
//
// # XLA flags
//
// Before the XLA plugin loads, the runtime adds lowering.LibraryFusionFlag to XLA_FLAGS, turning
// off XLA CPU's library (YNNPACK) fusions, under which quantized products cannot fuse their decode
// (see lowering.XLACPUFusedLoops). QUANTA_XLA_LIBRARY_FUSIONS=1 (or true, yes, on), or an
// XLA_FLAGS that sets the flag itself, keeps them; other values than the boolean spellings are an
// error.
//
// # Virtual CPU devices
//
// QUANTA_CPU_DEVICES=N gives the XLA CPU client N devices (the PJRT client option
// "cpu_device_count"), for sharding tests and examples on one machine; N is at most
// MaxCPUDevices. It applies to the XLA
// CPU plugin only, including when chosen by GOMLX_BACKEND=xla:cpu or by a path (one whose file name
// does not say "cpu", such as xla_cpu_pjrt.so, is known by its devices); elsewhere it is ignored
// and Report says so. An invalid value is an error only where the variable may apply
// (GOMLX_BACKEND unset, or naming XLA with the CPU plugin, by name or by a path to it whatever the
// file's name, or none); with another backend
// (GOMLX_BACKEND=go, xla:cuda) it is ignored too, with the same note. XLA_FLAGS=--xla_force_host_platform_device_count has no effect on the
// PJRT plugins quanta uses.
//
// # Errors
//
// Backend and Report return the error that stopped the backend from starting (an invalid
// QUANTA_CPU_DEVICES where the XLA CPU plugin may start, an invalid QUANTA_XLA_LIBRARY_FUSIONS, a
// GOMLX_BACKEND that cannot start); the same error is returned to
// every later caller. MustBackend and MustReport panic with it instead.
//
// # Kernels
//
// When the runtime starts an XLA backend it attaches quanta's CPU kernels to it (package
// kernels), so that the products built on it call them where they serve; Kernels returns what
// was attached and `quanta doctor` prints it. Any GoMLX program gets the same by importing
// package kernels.
package runtime
