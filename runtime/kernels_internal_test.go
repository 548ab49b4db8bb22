package runtime

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/quanta-ml/quanta/internal/xlaffi"
)

// TestKernelRegistry checks the table's refusals, each on a fresh table.
func TestKernelRegistry(t *testing.T) {
	fn := unsafe.Pointer(new(byte)) // never called: the table only stores it
	for _, tc := range []struct {
		name    string
		kernels []Kernel
		frozen  bool
		want    string // in the panic; "" for none
	}{
		{"two kernels", []Kernel{{"quanta_a", fn}, {"quanta_b", fn}}, false, ""},
		{"duplicate", []Kernel{{"quanta_a", fn}, {"quanta_a", fn}}, false, "duplicate target"},
		{"the probe's target", []Kernel{{xlaffi.ProbeTarget, fn}}, false, "duplicate target"},
		{"bad target", []Kernel{{"quanta a", fn}}, false, "accepted targets"},
		{"nil handler", []Kernel{{"quanta_a", nil}}, false, "nil handler"},
		{"after freeze", []Kernel{{"quanta_a", fn}}, true, "read-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var table kernelRegistry
			if tc.frozen {
				table.freeze()
			}
			defer func() {
				r := recover()
				switch {
				case tc.want == "" && r != nil:
					t.Errorf("panicked: %v", r)
				case tc.want != "" && (r == nil || !strings.Contains(r.(error).Error(), tc.want)):
					t.Errorf("panic %v, want one saying %q", r, tc.want)
				case tc.want == "" && len(table.freeze()) != len(tc.kernels):
					t.Errorf("table holds %d kernels, want %d", len(table.freeze()), len(tc.kernels))
				}
			}()
			table.add(tc.kernels...)
		})
	}
}
