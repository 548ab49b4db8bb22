package runtime

import (
	"os"
	"strings"

	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/lowering"
)

// LibraryFusionsEnv names the environment variable that keeps XLA CPU's library (YNNPACK) fusions
// on: a true value (1, true, yes, on) stops the runtime from adding lowering.LibraryFusionFlag to
// XLA_FLAGS; a false value (0, false, no, off) or none lets it. See lowering.XLACPUFusedLoops for
// why quantized products want them off.
const LibraryFusionsEnv = "QUANTA_XLA_LIBRARY_FUSIONS"

// configureXLAFlags adds lowering.LibraryFusionFlag to XLA_FLAGS before the plugin loads, unless
// the user chose otherwise: LibraryFusionsEnv true, or XLA_FLAGS already setting the ynn fusion
// type.
func configureXLAFlags() error {
	keep, err := fileio.ParseBool("quanta runtime", LibraryFusionsEnv, os.Getenv(LibraryFusionsEnv))
	if err != nil || keep {
		return err
	}
	flags := os.Getenv(xlaFlagsEnv)
	if strings.Contains(flags, "xla_cpu_experimental_ynn_fusion_type") {
		return nil
	}
	return os.Setenv(xlaFlagsEnv, strings.TrimSpace(flags+" "+lowering.LibraryFusionFlag))
}
