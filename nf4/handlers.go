package nf4

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
	ia "github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/lowering"
)

// nf4Type matches *nf4.Array operands.
var nf4Type = ia.TypeOf[*Array]()

func init() {
	register := func(op ia.Op, name string, h ia.Handler, operands ...ia.Match) {
		ia.Register(ia.Rule{Op: op, Operands: operands, Handler: h, Name: "nf4." + name})
	}
	register(ia.OpDotGeneral, "dotGeneral(dense, nf4)", dotGeneralWeightRight, ia.Dense, nf4Type)
	register(ia.OpDotGeneral, "dotGeneral(nf4, dense)", dotGeneralWeightLeft, nf4Type, ia.Dense)
	register(ia.OpDotGeneral, "dotGeneral(nf4, nf4)", materializeAndApply, nf4Type, nf4Type)

	register(ia.OpReshape, "reshape", reshape, nf4Type)
	register(ia.OpTranspose, "transpose", transpose, nf4Type)
	register(ia.OpBroadcastInDim, "broadcastInDim", broadcastInDim, nf4Type)
	register(ia.OpConvertDType, "convertElementType", convertDType, nf4Type)
	register(ia.OpGather, "gather", materializeAndApply, nf4Type, ia.Anything)
	ia.Register(ia.Rule{Op: ia.OpConcatenate, Operands: []ia.Match{nf4Type, ia.Anything}, Variadic: true,
		Handler: concatenate, Name: "nf4.concatenate"})

	// eformer's materializing handlers: the NF4 operands become dense, the result is dense.
	for _, op := range []ia.Op{ia.OpAdd, ia.OpMul, ia.OpMax, ia.OpDiv, ia.OpLessThan, ia.OpConvGeneral} {
		register(op, string(op)+"(nf4, dense)", materializeAndApply, nf4Type, ia.Dense)
		register(op, string(op)+"(dense, nf4)", materializeAndApply, ia.Dense, nf4Type)
		register(op, string(op)+"(nf4, nf4)", materializeAndApply, nf4Type, nf4Type)
	}
	for _, op := range []ia.Op{ia.OpExp, ia.OpLog, ia.OpSqrt, ia.OpIntegerPow,
		ia.OpReduceSum, ia.OpReduceMax, ia.OpReduceMin, ia.OpReduceProduct} {
		register(op, string(op), materializeAndApply, nf4Type)
	}
}

func materializeAndApply(c *ia.Call) ia.Value { return c.MaterializeAndApply() }

// dotGeneralWeightRight serves x · W (W the rhs), dotGeneralWeightLeft W · x.
func dotGeneralWeightRight(c *ia.Call) ia.Value { return dotGeneral(c, false) }
func dotGeneralWeightLeft(c *ia.Call) ia.Value  { return dotGeneral(c, true) }

func dotGeneral(c *ia.Call, weightOnLeft bool) ia.Value {
	p := c.Params.(*ia.DotGeneralParams)
	xi, wi := 0, 1
	xc, xb, wc, wb := p.LhsContractingAxes, p.LhsBatchAxes, p.RhsContractingAxes, p.RhsBatchAxes
	if weightOnLeft {
		xi, wi = 1, 0
		xc, xb, wc, wb = wc, wb, xc, xb
	}
	x, w := c.Operands[xi].(*graph.Node), c.Operands[wi].(*Array)
	if !x.DType().IsFloat() {
		panic(errors.Errorf("nf4 dot_general: activation %s with %s; accepted: a float activation "+
			"(float32, bfloat16, float16, float64)", x.Shape(), w))
	}
	s := w.strategy
	if s == lowering.Materialize {
		// eformer's path: build the dense weight (counted), then one dense product.
		dense := ia.Materialize(w)
		cdt := x.DType()
		if dense.DType() != cdt {
			dense = graph.ConvertDType(dense, cdt)
		}
		if weightOnLeft {
			return graph.DotGeneral(dense, wc, wb, x, xc, xb)
		}
		return graph.DotGeneral(x, xc, xb, dense, wc, wb)
	}
	if !s.Applicable(lowering.LayoutOf(w.shape.Rank(), wc, wb)) {
		s = lowering.DequantizeDot
	}
	return lowering.DotGeneral(x, xc, xb, w.Blockwise(), wc, wb, weightOnLeft, s)
}

// reshape keeps the array quantized when the last axis is unchanged (the packed and absmax rows
// are reshaped as they are: exact); otherwise it materializes, reshapes and re-quantizes.
func reshape(c *ia.Call) ia.Value {
	dims := c.Params.(*ia.ReshapeParams).Dimensions
	a := c.Operands[0].(*Array).clone()
	a.Placement = a.Placement.Reshaped(a.shape.Dimensions, dims)
	last := a.shape.Dim(-1)
	if len(dims) > 0 && dims[len(dims)-1] == last {
		lead := dims[:len(dims)-1]
		pDims := append(slices.Clone(lead), a.NumBlocks(), a.blockSize/2)
		sDims := append(slices.Clone(lead), a.NumBlocks())
		return a.withNodes(graph.Reshape(a.packed.Node(), pDims...), graph.Reshape(a.absmax.Node(), sDims...), dims)
	}
	return requantize(c.Dense(ia.Materialize(a)), a)
}

// transpose keeps the array quantized when the last axis stays last (whole rows of blocks move:
// exact); otherwise it materializes, transposes and re-quantizes.
func transpose(c *ia.Call) ia.Value {
	perm := c.Params.(*ia.TransposeParams).Permutation
	a := c.Operands[0].(*Array).clone()
	a.Placement = a.Placement.Transposed(perm) // the sharding follows the axes
	r := len(perm)
	if perm[r-1] == r-1 {
		dims := make([]int, r)
		for i, p := range perm {
			dims[i] = a.shape.Dim(p)
		}
		return a.withNodes(graph.TransposeAllAxes(a.packed.Node(), append(slices.Clone(perm), r)...),
			graph.TransposeAllAxes(a.absmax.Node(), perm...), dims)
	}
	return requantize(c.Dense(ia.Materialize(a)), a)
}

// broadcastInDim keeps the array quantized when the last axis maps, unbroadcast, to the last
// output axis (new and broadcast leading axes copy whole rows: exact); otherwise it materializes,
// broadcasts and re-quantizes.
func broadcastInDim(c *ia.Call) ia.Value {
	p := c.Params.(*ia.BroadcastInDimParams)
	a := c.Operands[0].(*Array).clone()
	a.Placement = a.Placement.Broadcasted(p.BroadcastAxes, len(p.Dimensions)) // the sharding follows the axes
	r, outRank := a.shape.Rank(), len(p.Dimensions)
	if p.BroadcastAxes[r-1] == outRank-1 && p.Dimensions[outRank-1] == a.shape.Dim(-1) {
		lead := p.Dimensions[:outRank-1]
		axes := p.BroadcastAxes[:r-1]
		packed := broadcastLeading(a.packed.Node(), append(slices.Clone(lead), a.NumBlocks(), a.blockSize/2),
			append(slices.Clone(axes), outRank-1, outRank))
		absmax := broadcastLeading(a.absmax.Node(), append(slices.Clone(lead), a.NumBlocks()),
			append(slices.Clone(axes), outRank-1))
		return a.withNodes(packed, absmax, p.Dimensions)
	}
	return requantize(c.Dense(ia.Materialize(a)), a)
}

// broadcastLeading is broadcast_in_dim of a component (input axis i → output axis axes[i]).
func broadcastLeading(x *graph.Node, dims, axes []int) *graph.Node {
	var expanded []int
	for i := range dims {
		if !slices.Contains(axes, i) {
			expanded = append(expanded, i)
		}
	}
	if len(expanded) == 0 {
		return graph.BroadcastToDims(x, dims...)
	}
	return graph.ExpandAndBroadcast(x, dims, expanded)
}

// convertDType is lazy for float targets: a new array that materializes in the new dtype (the
// operand is not modified, unlike eformer's in-place change). Other targets materialize.
func convertDType(c *ia.Call) ia.Value {
	a := c.Operands[0].(*Array)
	dt := c.Params.(*ia.ConvertDTypeParams).DType
	if dt.IsFloat() && !dt.IsComplex() {
		return a.withDType(dt)
	}
	return c.MaterializeAndApply()
}

// concatenate keeps NF4 arrays quantized when all operands are NF4 with the same block size and
// absmax dtype and the axis is not the last (rows of blocks are stacked: exact); otherwise it
// materializes.
func concatenate(c *ia.Call) ia.Value {
	axis := c.Params.(*ia.ConcatenateParams).Axis
	first, ok := c.Operands[0].(*Array)
	packed := make([]*graph.Node, len(c.Operands))
	absmax := make([]*graph.Node, len(c.Operands))
	for i, v := range c.Operands {
		b, isNF4 := v.(*Array)
		if !ok || !isNF4 || axis == first.shape.Rank()-1 || b.blockSize != first.blockSize ||
			b.absmax.Shape().DType != first.absmax.Shape().DType || b.shape.DType != first.shape.DType {
			return c.MaterializeAndApply()
		}
		packed[i], absmax[i] = b.packed.Node(), b.absmax.Node()
	}
	dims := slices.Clone(first.shape.Dimensions)
	dims[axis] = 0
	for _, v := range c.Operands {
		dims[axis] += v.Shape().Dim(axis)
	}
	out := first.withNodes(graph.Concatenate(packed, axis), graph.Concatenate(absmax, axis), dims)
	out.Placement = first.Placement.Concatenated(axis)
	return out
}

// withNodes returns a copy of a (same block size, dtype, sharding, strategy) with new graph
// components and logical dimensions.
func (a *Array) withNodes(packed, absmax *graph.Node, dims []int) *Array {
	b := a.clone()
	b.packed, b.absmax = ia.NodeComponent(packed), ia.NodeComponent(absmax)
	b.shape.Dimensions = slices.Clone(dims)
	return b
}
