package runtime

import (
	"fmt"
	"slices"
	"strings"
)

// Info describes the backend that Backend started. Report returns it; `quanta doctor` prints it.
type Info struct {
	// Name is the backend's name, as its Name method gives it: "xla", "SimpleGo (go)".
	Name string

	// Config is the backend configuration that was started, spelled as GOMLX_BACKEND would
	// spell it: "xla:cpu", "xla:/path/to/plugin.so", "go".
	Config string

	// Source says how the backend was chosen: SourceEnv (GOMLX_BACKEND), SourceAuto (the best
	// XLA plugin found) or SourceFallback (no XLA plugin could start).
	Source string

	// Description is the backend's own description.
	Description string

	// PluginName, PluginPath and PJRTVersion ("major.minor" of the PJRT C API the plugin
	// implements) describe the PJRT plugin; they are empty for backends other than XLA.
	PluginName, PluginPath, PJRTVersion string

	// PluginVersion is the plugin's own version: the wheel it comes from ("jax_cuda13_pjrt 0.7.2")
	// when known, and the StableHLO version it reports; empty for backends other than XLA.
	PluginVersion string

	// Memory describes the accelerator's memory, one entry per device with its source
	// ("#0 NVIDIA H100 80GB HBM3: 81559 MiB (nvidia-smi)"), or says why it is unknown; empty for
	// the CPU and the pure-Go backend.
	Memory []string

	// Devices holds the description of each device, indexed by device number.
	Devices []string

	// CPUDevices is the number of virtual CPU devices asked for with QUANTA_CPU_DEVICES
	// (0 when unset).
	CPUDevices int

	// XLAFlags is XLA_FLAGS as the XLA plugin read it (the runtime adds LibraryFusionFlag unless
	// told otherwise); empty for other backends.
	XLAFlags string

	// Fallback is true when the pure-Go backend runs because no XLA plugin could start.
	Fallback bool

	// Notes holds anything else worth knowing: plugins that failed to start, settings ignored.
	Notes []string
}

func (info *Info) clone() *Info {
	c := *info
	c.Devices = slices.Clone(info.Devices)
	c.Notes = slices.Clone(info.Notes)
	c.Memory = slices.Clone(info.Memory)
	return &c
}

// sourceDescriptions explains each Info.Source in words.
var sourceDescriptions = map[string]string{
	SourceEnv:      "set by $GOMLX_BACKEND",
	SourceAuto:     "chosen automatically: the best XLA PJRT plugin found, in the order tpu, cuda, cpu",
	SourceFallback: "fallback: no XLA PJRT plugin could start",
}

// String formats the report, one field per line, as `quanta doctor` prints it.
func (info *Info) String() string {
	var sb strings.Builder
	field := func(name, format string, args ...any) {
		fmt.Fprintf(&sb, "%-13s %s\n", name+":", fmt.Sprintf(format, args...))
	}
	field("backend", "%s (%s)", info.Config, sourceDescriptions[info.Source])
	field("description", "%s", info.Description)
	if info.PluginPath != "" {
		field("plugin", "%s", info.PluginPath)
		field("PJRT API", "v%s", info.PJRTVersion)
		if info.PluginVersion != "" {
			field("version", "%s", info.PluginVersion)
		}
	} else {
		field("plugin", "none")
	}
	devices := fmt.Sprintf("%d", len(info.Devices))
	if info.CPUDevices > 0 && isCPUPlugin(info.PluginName) { // elsewhere ignored, with a note
		devices += fmt.Sprintf(" (%s=%d)", CPUDevicesEnv, info.CPUDevices)
	}
	field("devices", "%s", devices)
	for i, d := range info.Devices {
		fmt.Fprintf(&sb, "  #%d: %s\n", i, d)
	}
	if IsAccelerator(info.PluginName) {
		field("accelerator", "%s", info.PluginName)
	}
	for _, m := range info.Memory {
		field("memory", "%s", m)
	}
	if info.XLAFlags != "" {
		field("XLA_FLAGS", "%s", info.XLAFlags)
	}
	if info.Fallback {
		field("fallback", "yes: pure-Go backend in use; install the XLA CPU plugin with: %s", InstallCommand)
	} else {
		field("fallback", "no")
	}
	for _, note := range info.Notes {
		field("note", "%s", note)
	}
	return sb.String()
}
