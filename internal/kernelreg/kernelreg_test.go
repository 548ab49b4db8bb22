package kernelreg_test

import (
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/quanta-ml/quanta/internal/kernelreg"
)

// fakeXLA is an XLA backend as XLACPU sees it: its name, description and first device; any other
// method panics (the embedded interface is nil).
type fakeXLA struct {
	backends.Backend
	description, device string
}

func (f fakeXLA) String() string                              { return "xla" }
func (f fakeXLA) Description() string                         { return f.description }
func (f fakeXLA) NumDevices() int                             { return 1 }
func (f fakeXLA) DeviceDescription(backends.DeviceNum) string { return f.device }

// TestXLACPU: a plugin is a CPU one by what it reports of its devices, XLA's CPU client's "cpu:N"
// or its older TFRT client's "TFRT_CPU_N", never by its file's name.
func TestXLACPU(t *testing.T) {
	const lib = "/x/lib.so"
	desc := `xla:` + lib + ` - PJRT plugin (` + lib + `) v0.81 [StableHLO] [4 device(s)]`
	for _, tc := range []struct {
		device  string
		wantCPU bool
	}{
		{"cpu:0 [processId=0]", true},
		{"TFRT_CPU_0 [processId=0]", true},
		{"cuda:0 NVIDIA H200", false},
		{"TPU_0(process=0,(0,0,0,0))", false},
	} {
		got, cpu := kernelreg.XLACPU(fakeXLA{description: desc, device: tc.device})
		if cpu != tc.wantCPU || (cpu && got != lib) {
			t.Errorf("XLACPU(device %q) = %q, %v; want CPU %v (library %s)", tc.device, got, cpu, tc.wantCPU, lib)
		}
	}
}

// TestXLACPUPluginPath: the plugin's library path is read whole from the backend's description,
// parentheses included, whether the backend was named by the plugin's path or by its name.
func TestXLACPUPluginPath(t *testing.T) {
	for _, lib := range []string{
		"/x/lib.so",
		"/tmp/a)b/pjrt_c_api_cpu_plugin.so",
		"/tmp/(x) v1.2 (y)/pjrt_c_api_cpu_plugin.so",
		"/opt/x (2)/pjrt_c_api_cpu_plugin.so",
	} {
		for _, desc := range []string{
			`xla:` + lib + ` - PJRT plugin (` + lib + `) v0.115 [StableHLO] [4 device(s)]`,
			`xla:cpu - PJRT "cpu" plugin (` + lib + `) v0.115 [1 device(s)]`,
		} {
			got, cpu := kernelreg.XLACPU(fakeXLA{description: desc, device: "cpu:0 [processId=0]"})
			if !cpu || got != lib {
				t.Errorf("XLACPU(description %q) = %q, %v; want %q, true", desc, got, cpu, lib)
			}
		}
	}
}
