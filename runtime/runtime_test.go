package runtime_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/runtime"
)

// TestBackendSelection checks that the backend follows GOMLX_BACKEND when set, and is XLA
// (or the reported fallback) otherwise.
func TestBackendSelection(t *testing.T) {
	backend := testutil.Backend(t)
	info := runtime.MustReport()
	if config := os.Getenv(backends.ConfigEnvVar); config != "" {
		if info.Source != runtime.SourceEnv || info.Fallback {
			t.Errorf("%s=%q: got source %q (fallback=%v), want %q", backends.ConfigEnvVar, config, info.Source, info.Fallback, runtime.SourceEnv)
		}
		name, _, _ := strings.Cut(config, ":")
		if wantXLA := name == "xla" || name == "stablehlo" || name == "hlo" || name == "shlo"; wantXLA != runtime.IsXLA(backend) {
			t.Errorf("%s=%q started backend %q", backends.ConfigEnvVar, config, backend.Name())
		}
		if !runtime.IsXLA(backend) && backend.String() != name {
			t.Errorf("%s=%q started backend %q", backends.ConfigEnvVar, config, backend.Name())
		}
	} else {
		switch {
		case info.Fallback:
			if !runtime.IsGo(backend) || info.Source != runtime.SourceFallback {
				t.Errorf("fallback reported, but backend is %q (source %q)", backend.Name(), info.Source)
			}
		case !runtime.IsXLA(backend) || info.Source != runtime.SourceAuto || info.PluginPath == "" || info.PJRTVersion == "":
			t.Errorf("no GOMLX_BACKEND and no fallback: want XLA with a plugin, got %+v", info)
		}
	}
	if info.Name != backend.Name() || len(info.Devices) != backend.NumDevices() {
		t.Errorf("report %+v does not match backend %q with %d devices", info, backend.Name(), backend.NumDevices())
	}
	t.Logf("backend: %s", info.Description)
}

// TestBackendShared checks that concurrent callers share one backend.
func TestBackendShared(t *testing.T) {
	want := testutil.Backend(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got := runtime.MustBackend(); got != want {
				t.Errorf("Backend() returned a different backend: %p != %p", got, want)
			}
		})
	}
	wg.Wait()
}

func TestCheck(t *testing.T) {
	if err := runtime.Check(testutil.Backend(t)); err != nil {
		t.Fatalf("Check: %+v", err)
	}
	if err := runtime.Check(nil); err == nil {
		t.Error("Check(nil) returned no error")
	}
}

// childDevicesEnv makes the test binary, re-executed by TestVirtualCPUDevices, run
// checkDevices in a process that reads QUANTA_CPU_DEVICES afresh.
const childDevicesEnv = "QUANTA_RUNTIME_TEST_CHILD_DEVICES"

// TestVirtualCPUDevices checks that QUANTA_CPU_DEVICES=N gives a GoMLX graph N XLA CPU devices.
func TestVirtualCPUDevices(t *testing.T) {
	if want := os.Getenv(childDevicesEnv); want == "error" {
		if _, err := runtime.Report(); err == nil || !strings.Contains(err.Error(), runtime.CPUDevicesEnv) {
			t.Fatalf("%s=%q: Report() = %v, want an error naming %s", runtime.CPUDevicesEnv, os.Getenv(runtime.CPUDevicesEnv),
				err, runtime.CPUDevicesEnv)
		}
		return
	} else if want == "cpu" {
		if info := runtime.MustReport(); info.PluginName != "cpu" {
			t.Fatalf("%s=%q: PluginName %q, want \"cpu\" (the plugin's devices are %q)", backends.ConfigEnvVar,
				os.Getenv(backends.ConfigEnvVar), info.PluginName, info.Devices)
		}
		return
	} else if want != "" {
		n, err := strconv.Atoi(want)
		if err != nil {
			t.Fatalf("bad %s=%q", childDevicesEnv, want)
		}
		checkDevices(t, n)
		return
	}
	testutil.Backend(t)
	if info := runtime.MustReport(); !runtime.IsXLA(runtime.MustBackend()) || info.PluginName != "cpu" {
		t.Skipf("virtual CPU devices need the XLA CPU plugin; backend is %q", info.Config)
	}
	for _, n := range []int{1, 3, 4} {
		t.Run(fmt.Sprintf("%s=%d", runtime.CPUDevicesEnv, n), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestVirtualCPUDevices$", "-test.v")
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", runtime.CPUDevicesEnv, n), fmt.Sprintf("%s=%d", childDevicesEnv, n))
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS") {
				t.Fatalf("child test with %s=%d failed: %v\n%s", runtime.CPUDevicesEnv, n, err, out)
			}
		})
	}
	// The CPU plugin under a file name that does not say "cpu" (the xla-cpu-pjrt wheel's own): the
	// virtual devices apply all the same, since the plugin is known by its devices, not its name.
	t.Run("file name without cpu", func(t *testing.T) {
		plugin := filepath.Join(t.TempDir(), "xla_cpu_pjrt.so")
		if err := os.Symlink(runtime.MustReport().PluginPath, plugin); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestVirtualCPUDevices$", "-test.v")
		cmd.Env = append(os.Environ(), backends.ConfigEnvVar+"=xla:"+plugin, runtime.CPUDevicesEnv+"=3", childDevicesEnv+"=3")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("child test with %s=xla:%s, %s=3 failed: %v\n%s", backends.ConfigEnvVar, plugin, runtime.CPUDevicesEnv, err, out)
		}
		// Without the variable, it is named the CPU plugin all the same.
		cmd = exec.Command(os.Args[0], "-test.run=^TestVirtualCPUDevices$", "-test.v")
		cmd.Env = append(os.Environ(), backends.ConfigEnvVar+"=xla:"+plugin, runtime.CPUDevicesEnv+"=", childDevicesEnv+"=cpu")
		out, err = cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("child test with %s=xla:%s failed: %v\n%s", backends.ConfigEnvVar, plugin, err, out)
		}
		// An invalid value is an error there too, not ignored as for a plugin other than the CPU one.
		cmd = exec.Command(os.Args[0], "-test.run=^TestVirtualCPUDevices$", "-test.v")
		cmd.Env = append(os.Environ(), backends.ConfigEnvVar+"=xla:"+plugin, runtime.CPUDevicesEnv+"=abc", childDevicesEnv+"=error")
		out, err = cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("child test with %s=xla:%s, %s=abc failed: %v\n%s", backends.ConfigEnvVar, plugin, runtime.CPUDevicesEnv, err, out)
		}
	})
}

// checkDevices runs, in the child process, graphs that use each of the n devices.
func checkDevices(t *testing.T, n int) {
	backend := testutil.Backend(t)
	if got := backend.NumDevices(); got != n {
		t.Fatalf("%s=%d: backend has %d devices", runtime.CPUDevicesEnv, n, got)
	}

	// A portable graph, run on the last device: its output lives there.
	g := graph.NewGraph(backend, "neg")
	x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32))
	g.Compile(graph.Neg(x))
	last := backends.DeviceNum(n - 1)
	out := g.RunOnDevice(last, float32(n))[0]
	if device, err := out.Device(); err != nil || device != last || out.Value().(float32) != -float32(n) {
		t.Errorf("run on device %d: got %v on device %d (err=%v)", last, out.Value(), device, err)
	}
	if n == 1 {
		return
	}

	// An SPMD graph over all n devices: AllReduce sums one value from each.
	mesh, err := distributed.NewDeviceMesh([]int{n}, []string{"replica"})
	if err != nil {
		t.Fatal(err)
	}
	g = graph.NewGraph(backend, "allreduce")
	if err := g.SetSPMD(mesh); err != nil {
		t.Fatal(err)
	}
	x = graph.Parameter(g, "x", shapes.Make(dtypes.Float32))
	g.Compile(g.Distributed().AllReduceOne(x, backends.ReduceOpSum))
	inputs := make([]any, n)
	var want float32
	for i := range n {
		inputs[i] = float32(i + 1)
		want += float32(i + 1)
	}
	outputs := g.Run(inputs...)
	if len(outputs) != n {
		t.Fatalf("AllReduce over %d devices returned %d outputs", n, len(outputs))
	}
	for i, out := range outputs {
		if got := out.Value().(float32); got != want {
			t.Errorf("AllReduce on device %d = %v, want %v", i, got, want)
		}
	}
}
