package main

import (
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
)

const denseName = "dense"

// variant is one way of computing y @ W.
type variant struct {
	name string
	// prepare turns the float32 weights into the values the product takes, and reports the bytes
	// of one layer's weight.
	prepare func(ws []*tensors.Tensor, dtype dtypes.DType) ([]implicitarray.Value, int64, error)
	product func(y *graph.Node, w implicitarray.Value) *graph.Node
}

var variants = []variant{
	{
		name: denseName,
		prepare: func(ws []*tensors.Tensor, dtype dtypes.DType) ([]implicitarray.Value, int64, error) {
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
