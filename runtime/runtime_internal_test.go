package runtime

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/lowering"
)

func TestParseCPUDevices(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    int
		wantErr bool
	}{
		{"", 0, false},
		{"  ", 0, false},
		{"1", 1, false},
		{"4", 4, false},
		{" 8 ", 8, false},
		{"0", 0, true},
		{"-2", 0, true},
		{"four", 0, true},
		{"2.5", 0, true},
		{"256", 256, false},
		{"257", 0, true},
		{"100000", 0, true},
	} {
		t.Run(tc.value, func(t *testing.T) {
			got, err := parseCPUDevices(tc.value)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parseCPUDevices(%q) = %d, want an error", tc.value, got)
				}
				if !strings.Contains(err.Error(), CPUDevicesEnv) {
					t.Errorf("parseCPUDevices(%q) error %q does not name %s", tc.value, err, CPUDevicesEnv)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseCPUDevices(%q) = %d, %v; want %d, nil", tc.value, got, err, tc.want)
			}
		})
	}
}

func TestOrderPlugins(t *testing.T) {
	for _, tc := range []struct {
		name          string
		plugins, want []string
	}{
		{"none", nil, []string{}},
		{"cpu only", []string{"cpu"}, []string{"cpu"}},
		{"preference", []string{"cpu", "cuda", "tpu"}, []string{"tpu", "cuda", "cpu"}},
		{"others last", []string{"metal", "cpu", "amd"}, []string{"cpu", "amd", "metal"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := orderPlugins(tc.plugins); !slices.Equal(got, tc.want) && len(got)+len(tc.want) > 0 {
				t.Errorf("orderPlugins(%q) = %q, want %q", tc.plugins, got, tc.want)
			}
		})
	}
}

func TestPluginNameOf(t *testing.T) {
	for _, tc := range []struct{ plugin, want string }{
		{"cpu", "cpu"},
		{"cuda", "cuda"},
		{"/home/u/.local/lib/go-xla/pjrt_c_api_cpu_plugin.so", "cpu"},
		{"/opt/pjrt-plugin-tpu.so", "tpu"},
		{"/opt/pjrt_plugin_metal.dylib", "metal"},
		{"/opt/xla_cuda_plugin.so", "xla_cuda_plugin.so"},
	} {
		t.Run(tc.plugin, func(t *testing.T) {
			if got := pluginNameOf(tc.plugin); got != tc.want {
				t.Errorf("pluginNameOf(%q) = %q, want %q", tc.plugin, got, tc.want)
			}
		})
	}
}

func TestFallbackMessage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures []string
		want     string
	}{
		{"not found", nil, "XLA PJRT plugin not found"},
		{"failed", []string{"xla:cpu: bad\nplugin"}, "no XLA PJRT plugin could start"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, f := range tc.failures {
				tc.failures[i] = oneLine(f)
			}
			msg := fallbackMessage(tc.failures)
			if strings.Contains(msg, "\n") {
				t.Errorf("fallback message spans several lines: %q", msg)
			}
			for _, want := range []string{tc.want, InstallCommand, `"go"`} {
				if !strings.Contains(msg, want) {
					t.Errorf("fallback message %q does not contain %q", msg, want)
				}
			}
		})
	}
}

func TestConfigureXLAFlags(t *testing.T) {
	for _, tc := range []struct {
		name, flags, optOut, want string
		wantErr                   bool
	}{
		{"unset", "", "", lowering.LibraryFusionFlag, false},
		{"appended", "--xla_cpu_foo=1", "", "--xla_cpu_foo=1 " + lowering.LibraryFusionFlag, false},
		{"user's choice kept", "--xla_cpu_experimental_ynn_fusion_type=dot", "", "--xla_cpu_experimental_ynn_fusion_type=dot", false},
		{"opt-out 1", "--xla_cpu_foo=1", "1", "--xla_cpu_foo=1", false},
		{"opt-out true", "--xla_cpu_foo=1", "True", "--xla_cpu_foo=1", false},
		{"explicit false", "", "off", lowering.LibraryFusionFlag, false},
		{"invalid", "", "maybe", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(xlaFlagsEnv, tc.flags)
			t.Setenv(LibraryFusionsEnv, tc.optOut)
			err := configureXLAFlags()
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), LibraryFusionsEnv) {
					t.Fatalf("configureXLAFlags() = %v, want an error naming %s", err, LibraryFusionsEnv)
				}
				return
			}
			if got := os.Getenv(xlaFlagsEnv); err != nil || got != tc.want {
				t.Errorf("XLA_FLAGS = %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}
