package runtime

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/pkg/errors"
)

// IsAccelerator reports whether the plugin name is one of the accelerators quanta knows: "tpu"
// or "cuda".
func IsAccelerator(pluginName string) bool {
	return pluginName == "tpu" || pluginName == "cuda"
}

// pluginVersion describes the plugin's version: the wheel it came from, when known, and the
// StableHLO version among its PJRT attributes.
func pluginVersion(attributes pjrt.NamedValuesMap, accel *AcceleratorPlugin) string {
	var parts []string
	if accel != nil && accel.Wheel != "" {
		parts = append(parts, accel.Wheel)
	}
	if v, ok := attributes["stablehlo_current_version"].([]int64); ok && len(v) > 0 {
		digits := make([]string, len(v))
		for i, d := range v {
			digits[i] = fmt.Sprint(d)
		}
		parts = append(parts, "StableHLO "+strings.Join(digits, "."))
	}
	if v, ok := attributes["xla_version"]; ok {
		parts = append(parts, fmt.Sprintf("xla_version %v", v))
	}
	return strings.Join(parts, "; ")
}

// deviceMemory describes the memory of the plugin's devices. go-xla v0.1.4 exposes no PJRT memory
// statistics (PJRT_Device_MemoryStats), so CUDA devices are asked through nvidia-smi; for TPUs
// it says that the memory is unknown.
func deviceMemory(pluginName string) []string {
	switch pluginName {
	case "cuda":
		mem, err := nvidiaSMIMemory()
		if err != nil {
			return []string{fmt.Sprintf("unknown (nvidia-smi: %s)", oneLine(err.Error()))}
		}
		return mem
	case "tpu":
		return []string{"unknown (go-xla v0.1.4 exposes no PJRT device memory statistics)"}
	}
	return nil
}

// nvidiaSMIMemory returns "#<index> <name>: <total memory> (nvidia-smi)" for each NVIDIA GPU.
func nvidiaSMIMemory() ([]string, error) {
	smi, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, smi, "--query-gpu=index,name,memory.total",
		"--format=csv,noheader").Output()
	if err != nil {
		// nvidia-smi says why on stdout ("NVIDIA-SMI has failed because it couldn't communicate with
		// the NVIDIA driver ..."), or on stderr; the exit status alone says nothing.
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			out = append(out, exitErr.Stderr...)
		}
		if why := oneLine(string(out)); why != "" {
			return nil, fmt.Errorf("%w: %s", err, why)
		}
		return nil, err
	}
	mem := parseNvidiaSMIMemory(string(out))
	if len(mem) == 0 {
		return nil, fmt.Errorf("no GPU listed: %q", oneLine(string(out)))
	}
	return mem, nil
}

// parseNvidiaSMIMemory formats nvidia-smi's "index, name, memory.total" CSV lines.
func parseNvidiaSMIMemory(csv string) []string {
	var mem []string
	for line := range strings.Lines(csv) {
		fields := strings.Split(strings.TrimSpace(line), ", ")
		if len(fields) < 3 {
			continue
		}
		last := len(fields) - 1
		mem = append(mem, fmt.Sprintf("#%s %s: %s (nvidia-smi)",
			fields[0], strings.Join(fields[1:last], ", "), fields[last]))
	}
	return slices.Clip(mem)
}
