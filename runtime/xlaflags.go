package runtime

import (
	"os"
	"strings"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/lowering"
)

// LibraryFusionsEnv names the environment variable that keeps XLA CPU's library (YNNPACK) fusions
// on: a true value (1, true, yes, on) stops the runtime from adding lowering.LibraryFusionFlag to
// XLA_FLAGS; a false value (0, false, no, off) or none lets it. See lowering.XLACPUFusedLoops for
// why quantized products want them off.
const LibraryFusionsEnv = "QUANTA_XLA_LIBRARY_FUSIONS"

// parseBool reads the usual boolean spellings, case-insensitively; "" is false.
func parseBool(name, value string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(value)) {
	case "", "0", "false", "no", "off":
		return false, nil
	case "1", "true", "yes", "on":
		return true, nil
	}
	return false, errors.Errorf("quanta runtime: invalid %s=%q; accepted: 1, true, yes, on, or 0, false, no, off", name, value)
}

// configureXLAFlags adds lowering.LibraryFusionFlag to XLA_FLAGS before the plugin loads, unless
// the user chose otherwise: LibraryFusionsEnv true, or XLA_FLAGS already setting the ynn fusion
// type.
func configureXLAFlags() error {
	keep, err := parseBool(LibraryFusionsEnv, os.Getenv(LibraryFusionsEnv))
	if err != nil || keep {
		return err
	}
	flags := os.Getenv(xlaFlagsEnv)
	if strings.Contains(flags, "xla_cpu_experimental_ynn_fusion_type") {
		return nil
	}
	return os.Setenv(xlaFlagsEnv, strings.TrimSpace(flags+" "+lowering.LibraryFusionFlag))
}
