package lowering

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/quanta-ml/quanta/internal/kernelreg"
)

// Platform is what the policy needs to know of the backend a product is built for: the
// formulations that are fast differ between them.
type Platform int

const (
	// OtherBackend is a backend this package does not recognise; it is treated as XLAAccelerator.
	OtherBackend Platform = iota
	// PureGo is GoMLX's pure-Go backend ("go", package simplego).
	PureGo
	// XLACPU is XLA on its CPU plugin with XLA's default flags, under which its library (YNNPACK)
	// fusions take the float multiplies, adds and reductions of a loop but no integer, select or
	// gather op: a decode then runs apart and writes a float weight.
	XLACPU
	// XLACPUFusedLoops is XLA on its CPU plugin with the library fusions off (LibraryFusionFlag in
	// XLA_FLAGS, as quanta's runtime sets by default): decode, products and sums form one parallel
	// loop.
	XLACPUFusedLoops
	// XLAAccelerator is XLA on an accelerator plugin other than those below.
	XLAAccelerator
	// XLAGPU is XLA on a GPU plugin (CUDA or ROCm): its compiler fuses element-wise producers of a
	// dot operand into a Triton GEMM when each op is one Triton supports, and any element-wise
	// producer into a reduction.
	XLAGPU
	// XLATPU is XLA on a TPU plugin, whose compiler fuses element-wise producers into the
	// operands of its matrix unit's products.
	XLATPU

	// Kernels, or-ed into an XLA CPU platform, says the backend can call quanta's CPU kernels (the
	// runtime registered them with its plugin).
	Kernels Platform = 1 << 4
)

var platformNames = [...]string{"other", "pure-go", "xla-cpu", "xla-cpu-fused-loops", "xla-accelerator", "xla-gpu", "xla-tpu"}

// String returns the platform's name, e.g. "xla-cpu-fused-loops+kernels".
func (p Platform) String() string {
	base, suffix := p&^Kernels, ""
	if p&Kernels != 0 {
		suffix = "+kernels"
	}
	if base >= 0 && int(base) < len(platformNames) {
		return platformNames[base] + suffix
	}
	return "Platform(?)"
}

// base is the platform without the Kernels flag.
func (p Platform) base() Platform { return p &^ Kernels }

// LibraryFusionFlag, in XLA_FLAGS when the XLA CPU plugin loads, turns off XLA CPU's library
// (YNNPACK) fusions (see XLACPUFusedLoops).
const LibraryFusionFlag = "--xla_cpu_experimental_ynn_fusion_type="

// xlaFlagsEnv is the environment variable XLA reads its flags from.
const xlaFlagsEnv = "XLA_FLAGS"

// pjrtPluginName finds the plugin's name in an XLA backend's description, e.g.
// `xla:cpu - PJRT "cpu" plugin (/path/pjrt_c_api_cpu_plugin.so) v0.115 ...`.
var pjrtPluginName = regexp.MustCompile(`PJRT "([^"]+)" plugin`)

// PlatformOf classifies backend. XLA CPU's library fusions are read from XLA_FLAGS, which XLA
// reads once when its plugin loads: changing the variable afterwards makes the answer wrong.
func PlatformOf(backend backends.Backend) Platform {
	p := platformOf(backend)
	if kernelreg.For(backend) != nil {
		p |= Kernels
	}
	return p
}

func platformOf(backend backends.Backend) Platform {
	if backend == nil {
		return OtherBackend
	}
	switch backend.String() { // the backend's registered name; Name() is a display name
	case "go":
		return PureGo
	case "xla":
	default:
		return OtherBackend
	}
	plugin := ""
	if m := pjrtPluginName.FindStringSubmatch(backend.Description()); m != nil {
		plugin = m[1]
	} else {
		config, _, _ := strings.Cut(backend.Description(), " ")
		plugin = strings.TrimPrefix(config, "xla:")
	}
	if _, cpu := kernelreg.XLACPU(backend); cpu {
		plugin = "cpu" // its devices say so, whatever its file's name
	} else if backend.NumDevices() > 0 {
		plugin += " " + backend.DeviceDescription(0)
	}
	switch p := pluginPlatform(plugin); {
	case p != XLACPU:
		return p
	case libraryFusionsDisabled():
		return XLACPUFusedLoops
	}
	return XLACPU
}

// pluginPlatform classifies a PJRT plugin by its name ("cpu", "cuda") or, for a plugin loaded by
// its path, by the file's name ("pjrt_c_api_cpu_plugin.so", "xla_cuda_plugin.so", "libtpu.so"):
// XLACPU, XLAGPU, XLATPU or XLAAccelerator.
func pluginPlatform(plugin string) Platform {
	name := strings.ToLower(filepath.Base(plugin))
	has := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(name, w) {
				return true
			}
		}
		return false
	}
	switch {
	case has("cpu", "host"):
		return XLACPU
	case has("cuda", "rocm", "gpu"):
		return XLAGPU
	case has("tpu"):
		return XLATPU
	}
	return XLAAccelerator
}

// libraryFusionsDisabled reports whether XLA_FLAGS holds LibraryFusionFlag with its empty value.
func libraryFusionsDisabled() bool {
	for _, f := range strings.Fields(os.Getenv(xlaFlagsEnv)) {
		if f == LibraryFusionFlag {
			return true
		}
	}
	return false
}
