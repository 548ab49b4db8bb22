package runtime_test

import (
	"slices"
	"testing"

	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/kernels"
	"github.com/quanta-ml/quanta/runtime"
)

// TestKernels: the runtime attaches the kernels when its backend starts (package kernels' tests
// cover what the report says), so its report is the one Attach returns.
func TestKernels(t *testing.T) {
	backend := testutil.Backend(t)
	got := runtime.MustKernels()
	t.Logf("\n%s", got)
	want, err := kernels.Attach(backend)
	if (err == nil) != (got.Err() == nil) || !slices.Equal(got.Registered, want.Registered) || got.Plugin != want.Plugin {
		t.Errorf("runtime.Kernels() = %+v, kernels.Attach = %+v", got, want)
	}
	info := runtime.MustReport()
	if runtime.IsXLA(backend) && info.PluginName == "cpu" && err != nil {
		t.Errorf("XLA CPU: %v", err)
	}
}
