package xlaffi_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/internal/xlaffi"
	"github.com/quanta-ml/quanta/internal/xlaffi/ffitest"
	"github.com/quanta-ml/quanta/runtime"
)

// cpuPlugin opens the XLA CPU plugin of the process-wide backend, or skips the test when the
// backend is not XLA on its CPU plugin.
func cpuPlugin(t *testing.T) *xlaffi.Plugin {
	t.Helper()
	backend := testutil.Backend(t)
	info := runtime.MustReport()
	if !runtime.IsXLA(backend) || info.PluginName != "cpu" {
		t.Skipf("registers handlers with the XLA CPU plugin; the backend is %s", info.Config)
	}
	p, err := xlaffi.Open(info.PluginPath)
	if err != nil {
		t.Fatalf("Open(%q): %+v", info.PluginPath, err)
	}
	return p
}

func TestOpen(t *testing.T) {
	p := cpuPlugin(t)
	if v := p.PJRTVersion(); v.Major != 0 || v.Minor < xlaffi.MinPJRTMinor {
		t.Errorf("PJRTVersion() = %s, want 0.%d or later", v, xlaffi.MinPJRTMinor)
	}
	if v := p.FFIVersion(); v != xlaffi.ABIVersion {
		t.Errorf("FFIVersion() = %s, want %s", v, xlaffi.ABIVersion)
	}
	if again := xlaffi.MustOpen(p.Path()); again != p {
		t.Errorf("Open(%q) twice returned two plugins", p.Path())
	}
	if !slices.Contains(p.Registered(), xlaffi.ProbeTarget) {
		t.Errorf("Registered() = %v, want it to hold %s", p.Registered(), xlaffi.ProbeTarget)
	}
	t.Logf("%s: %s", p.Path(), p)
}

// TestOpenRefusals runs on every backend: the libraries are not PJRT plugins of this process.
func TestOpenRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		want       error
	}{
		{"not loaded", "/nonexistent/pjrt_c_api_cpu_plugin.so", xlaffi.ErrPluginNotLoaded},
		{"not PJRT", "libc.so.6", xlaffi.ErrNotPJRT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := xlaffi.Open(tc.path)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open(%q) = %v, %v; want error %v", tc.path, p, err, tc.want)
			}
			t.Logf("%v", err)
		})
	}
}

func TestRegister(t *testing.T) {
	p := cpuPlugin(t)
	handlers := ffitest.Handlers()
	if err := p.Register(handlers...); err != nil {
		t.Fatalf("Register(ffitest.Handlers()...): %+v", err)
	}
	for _, tc := range []struct {
		name    string
		handler xlaffi.Handler
		want    error // nil: accepted
	}{
		{"same function again", handlers[0], nil},
		{"target taken", xlaffi.Handler{Target: handlers[0].Target, Fn: handlers[1].Fn}, xlaffi.ErrDuplicate},
		{"target with a space", xlaffi.Handler{Target: "quanta test", Fn: handlers[0].Fn}, xlaffi.ErrInvalidHandler},
		{"target starting with a digit", xlaffi.Handler{Target: "1quanta", Fn: handlers[0].Fn}, xlaffi.ErrInvalidHandler},
		{"nil function", xlaffi.Handler{Target: "quanta_test_nil"}, xlaffi.ErrInvalidHandler},
		{"no metadata answer", ffitest.Unanswering(), xlaffi.ErrInvalidHandler},
		{"older ABI", ffitest.OldABI(), xlaffi.ErrVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Register(tc.handler)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Register(%q) = %v, want %v", tc.handler.Target, err, tc.want)
			}
			if err != nil {
				t.Logf("%v", err)
				if tc.handler.Target != handlers[0].Target && slices.Contains(p.Registered(), tc.handler.Target) {
					t.Errorf("refused target %q is listed as registered", tc.handler.Target)
				}
			}
		})
	}
	got := p.Registered()
	for _, h := range handlers {
		if !slices.Contains(got, h.Target) {
			t.Errorf("Registered() = %v, missing %q", got, h.Target)
		}
	}
}

// TestRegisterJoinsErrors checks that one bad handler in a batch does not stop the others.
func TestRegisterJoinsErrors(t *testing.T) {
	p := cpuPlugin(t)
	good := ffitest.Handlers()[2]
	err := p.Register(ffitest.Unanswering(), good, ffitest.OldABI())
	if !errors.Is(err, xlaffi.ErrInvalidHandler) || !errors.Is(err, xlaffi.ErrVersion) {
		t.Errorf("Register(bad, good, bad) = %v; want both refusals joined", err)
	}
	if !slices.Contains(p.Registered(), good.Target) {
		t.Errorf("the good handler %q was not registered: %v", good.Target, p.Registered())
	}
}
