package cpukernels

import (
	"os"
	"testing"

	"github.com/quanta-ml/quanta/internal/kernelreg"
)

// TestKernelTable: the C side of the kernel table is generated from its one declaration
// (kernelreg), and registers a handler for each target, in its order.
func TestKernelTable(t *testing.T) {
	header, err := os.ReadFile("qk_targets.h")
	if err != nil {
		t.Fatal(err)
	}
	if string(header) != kernelreg.CHeader() {
		t.Errorf("qk_targets.h is not what kernelreg declares: run go generate ./internal/cpukernels")
	}
	handlers, targets := Handlers(), kernelreg.Targets()
	if len(handlers) != len(targets) {
		t.Fatalf("%d handlers for %d targets", len(handlers), len(targets))
	}
	for i, h := range handlers {
		if h.Target != targets[i].Name || h.Fn == nil {
			t.Errorf("handler %d: %q (fn %v), target %q", i, h.Target, h.Fn, targets[i].Name)
		}
	}
}
