package main

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// GoMLX v0.26 differentiates a matrix product x[i,j]·w[j,k] by broadcasting the incoming
// gradient to [i, j, k] and reducing it twice (its dotVJP), leaving XLA to recognise two products.
// When one broadcast feeds both reductions, as in the middle layer of this MLP, XLA CPU
// materializes it ([128, 512, 512] floats per step) and the step takes over ten times longer
// (docs/real-models.md). This command replaces the gradient of rank-2 products with the two
// products themselves, v·wᵀ and xᵀ·v, through the table GoMLX exports for that purpose
// (graph.VJPRegistration); other products keep GoMLX's gradient.
func init() {
	generic := graph.VJPRegistration[graph.NodeTypeDot]
	graph.VJPRegistration[graph.NodeTypeDot] = func(node *graph.Node, vjpOutputs []*graph.Node, outputShape shapes.Shape) []*graph.Node {
		inputs := node.Inputs()
		x, w := inputs[0], inputs[1]
		if x.Rank() != 2 || w.Rank() != 2 || len(vjpOutputs) != 1 {
			return generic(node, vjpOutputs, outputShape)
		}
		v := vjpOutputs[0] // [i, k]
		return []*graph.Node{
			graph.DotGeneral(v, []int{1}, nil, w, []int{1}, nil), // [i, j]
			graph.DotGeneral(x, []int{0}, nil, v, []int{0}, nil), // [j, k]
		}
	}
}
