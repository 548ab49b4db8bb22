// Package kernelreg is where the runtime tells the products which of quanta's CPU kernels a
// backend can call, and how to emit a call: package runtime installs an entry when it has
// registered the kernels with the backend's XLA CPU plugin, package lowering looks it up when it
// builds a product. It keeps lowering free of the execution packages (go-xla, the plugin), and no
// entry exists until a backend started with the kernels: importing it changes nothing.
package kernelreg

import (
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// Kernels is what a backend can call.
type Kernels struct {
	// Targets are the registered custom-call targets.
	Targets map[string]bool
	// Codebook4 is the table of code values the 4-bit blockwise kernels decode.
	Codebook4 [16]float32
	// Emit rewrites node (the product's formulation, which keeps the graph's gradients) into a
	// call of target on operands, with attributes; an error leaves the graph unchanged.
	Emit func(node *graph.Node, target string, operands []*graph.Node, attrs map[string]any) error
}

var installed sync.Map // backends.Backend → *Kernels

// Install records the kernels backend can call (nil removes them).
func Install(backend backends.Backend, k *Kernels) {
	if k == nil {
		installed.Delete(backend)
		return
	}
	installed.Store(backend, k)
}

// For returns the kernels backend can call, or nil.
func For(backend backends.Backend) *Kernels {
	if backend == nil {
		return nil
	}
	if k, ok := installed.Load(backend); ok {
		return k.(*Kernels)
	}
	return nil
}
