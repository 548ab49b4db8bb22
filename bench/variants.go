package main

import (
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/lowering"
)

const denseName = "dense"

// variant is one way of computing y @ W.
type variant struct {
	name string
	// prepare turns the weights (in the activations' dtype) into the values the product takes, and reports the bytes
	// of one layer's weight.
	prepare func(ws []*tensors.Tensor) ([]implicitarray.Value, int64, error)
	product func(y *graph.Node, w implicitarray.Value) *graph.Node
}

// quantized returns the fused and the materialize-then-dot variants of a format.
func quantized(name string, cfg quanta.Config) []variant {
	prepare := func(cfg quanta.Config) func(ws []*tensors.Tensor) ([]implicitarray.Value, int64, error) {
		return func(ws []*tensors.Tensor) ([]implicitarray.Value, int64, error) {
			out := make([]implicitarray.Value, len(ws))
			var bytes int64
			for i, w := range ws {
				q, err := quanta.Quantize(w, cfg)
				if err != nil {
					return nil, 0, err
				}
				out[i] = q
				bytes = componentBytes(q)
			}
			return out, bytes, nil
		}
	}
	fused := func(y *graph.Node, w implicitarray.Value) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(y, w))
	}
	materialized := cfg
	materialized.Strategy = lowering.Materialize
	return []variant{
		{name: name, prepare: prepare(cfg), product: fused},
		{name: name + " materialize-then-dot", prepare: prepare(materialized), product: fused},
	}
}

func componentBytes(a implicitarray.Array) int64 {
	var total int64
	for _, c := range a.Components() {
		total += int64(c.Shape().Memory())
	}
	return total
}

var variants = slices.Concat([]variant{denseVariant},
	quantized("nf4", quanta.Config{Type: quanta.NF4}),
	quantized("int8", quanta.Config{Type: quanta.Int8}),
	quantized("ternary", quanta.Config{Type: quanta.Ternary, Scaled: true}),
	quantized("binary", quanta.Config{Type: quanta.Binary, Scaled: true}),
)

var denseVariant = variant{
	name: denseName,
	prepare: func(ws []*tensors.Tensor) ([]implicitarray.Value, int64, error) {
		out := make([]implicitarray.Value, len(ws))
		for i, w := range ws {
			out[i] = w
		}
		return out, int64(ws[0].Shape().Memory()), nil
	},
	product: func(y *graph.Node, w implicitarray.Value) *graph.Node {
		wn := w.(*graph.Node)
		if wn.DType() != y.DType() {
			wn = graph.ConvertDType(wn, y.DType())
		}
		return graph.MatMul(y, wn)
	},
}

func selectedVariants() []variant {
	if *flagVariants == "" {
		return variants
	}
	names := strings.Split(*flagVariants, ",")
	var out []variant
	for _, v := range variants {
		if slices.Contains(names, v.name) {
			out = append(out, v)
		}
	}
	return out
}
