package runtime

import (
	"os"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/xla"
)

const (
	// LibraryFusionFlag, in XLA_FLAGS, turns off XLA CPU's YNNPACK library fusions. Those fusions
	// take the float multiplies, adds and reductions of a loop but no integer, select or gather
	// op, so a quantized product's decode runs apart and writes a dense float weight for them to
	// read back; without them the decode, the products and the sums form one parallel XLA loop
	// (NF4 at one row: 4.3 ms instead of 18.6; ternary 0.52 instead of 6.2; int8 0.87 instead of
	// 8.7; against 2.6 ms for the dense float32 product, K = N = 4096 on 2 cores). The dense
	// products of 64 to 512 rows lose 10-25% without them.
	LibraryFusionFlag = "--xla_cpu_experimental_ynn_fusion_type="

	// LibraryFusionsEnv names the environment variable that keeps XLA CPU's library fusions on:
	// QUANTA_XLA_LIBRARY_FUSIONS=1 stops the runtime from adding LibraryFusionFlag.
	LibraryFusionsEnv = "QUANTA_XLA_LIBRARY_FUSIONS"
)

// LibraryFusionsDisabled reports whether XLA_FLAGS holds LibraryFusionFlag with an empty value, as
// the runtime sets it by default. XLA reads XLA_FLAGS when its plugin loads, so this reflects the
// running XLA backend as long as the variable was not changed after that; lowerings consult it
// to pick the formulation that is fast under the flags in force.
func LibraryFusionsDisabled() bool {
	for _, f := range strings.Fields(os.Getenv(xlaFlagsEnv)) {
		if f == LibraryFusionFlag {
			return true
		}
	}
	return false
}

// configureXLAFlags adds LibraryFusionFlag to XLA_FLAGS before the plugin loads, unless the user
// chose otherwise: LibraryFusionsEnv=1, or XLA_FLAGS already setting the ynn fusion type.
func configureXLAFlags() {
	if os.Getenv(LibraryFusionsEnv) == "1" {
		return
	}
	flags := os.Getenv(xlaFlagsEnv)
	if strings.Contains(flags, "xla_cpu_experimental_ynn_fusion_type") {
		return
	}
	_ = os.Setenv(xlaFlagsEnv, strings.TrimSpace(flags+" "+LibraryFusionFlag))
}

// CPUFusedLoops reports whether backend is XLA on its CPU plugin with the library fusions off
// (LibraryFusionsDisabled): where the quantized lowerings' one-parallel-loop formulations are the
// fast ones. Other backends (GPU, TPU, the pure-Go one) keep their default formulations.
func CPUFusedLoops(backend backends.Backend) bool {
	if backend == nil || !IsXLA(backend) || !LibraryFusionsDisabled() {
		return false
	}
	config, _, _ := strings.Cut(backend.Description(), " ")
	return isCPUPlugin(strings.TrimPrefix(config, xla.BackendName+":"))
}
