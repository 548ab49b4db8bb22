package implicitarray

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/pkg/errors"
)

// Transposed is an implicit array transposed lazily: it stands for TransposeAllAxes(Inner,
// Permutation...) while Inner keeps its storage. A format whose storage cannot follow a transpose
// exactly (NF4 and GGML blocks run along the last axis) returns one (NewTransposed) instead of
// quantizing the transposed values again or materializing them, so the PyTorch idiom
// MatMul(x, Transpose(w, 0, 1)) on a weight stored (out, in) is the product of w's own blocks:
//
//   - DotGeneral contracts Inner along the permuted axes (and reorders the result's axes where
//     the permutation reorders free axes), reaching Inner's product handlers;
//   - Transpose composes the permutations (back to Inner itself when they cancel), through
//     Inner's own transpose handler where it has one, so that a permutation that leaves the
//     blocks whole gives the format's exact result;
//   - ConvertDType converts Inner;
//   - every other op materializes, through the generic fallback, under Inner's FallbackPolicy.
type Transposed struct {
	inner Array
	perm  []int
	shape shapes.Shape
}

var _ FallbackPolicy = (*Transposed)(nil)

// NewTransposed returns a standing for TransposeAllAxes(a, permutation...): a itself for the
// identity, the composed permutation of a Transposed a. permutation must hold each axis of a once
// (no negative axes).
func NewTransposed(a Array, permutation []int) Array {
	if isNil(a) {
		panic(errors.Errorf("implicitarray.NewTransposed: nil array; accepted: an implicitarray.Array"))
	}
	rank := a.Shape().Rank()
	if len(permutation) != rank || !isPermutation(permutation) {
		panic(errors.Errorf("implicitarray.NewTransposed: permutation %v of %s %s; accepted: each of its %d axes once",
			permutation, TypeName(a), a.Shape(), rank))
	}
	perm := slices.Clone(permutation)
	if t, ok := a.(*Transposed); ok {
		for i, p := range perm {
			perm[i] = t.perm[p]
		}
		a = t.inner
	}
	if isIdentity(perm) {
		return a
	}
	shape := a.Shape().Clone()
	for i, p := range perm {
		shape.Dimensions[i] = a.Shape().Dimensions[p]
	}
	return &Transposed{inner: a, perm: perm, shape: shape}
}

// Inner is the array whose transpose t stands for.
func (t *Transposed) Inner() Array { return t.inner }

// Permutation is the transpose's permutation: axis i of t is axis Permutation()[i] of Inner.
func (t *Transposed) Permutation() []int { return slices.Clone(t.perm) }

// Shape is the transposed logical shape.
func (t *Transposed) Shape() shapes.Shape { return t.shape }

// Components is Inner, nested.
func (t *Transposed) Components() []Component { return []Component{ArrayComponent(t.inner)} }

// Metadata is the permutation.
func (t *Transposed) Metadata() string { return fmt.Sprintf("permutation=%v", t.perm) }

// WithComponents returns the transpose of components[0], an array of Inner's type and metadata.
func (t *Transposed) WithComponents(components []Component) Array {
	if len(components) != 1 || !components[0].IsArray() {
		panic(errors.Errorf("implicitarray.Transposed.WithComponents: %d components; accepted: one nested array", len(components)))
	}
	return &Transposed{inner: components[0].Array(), perm: t.perm, shape: t.shape}
}

// Materialize is the dense transpose of Inner materialized.
func (t *Transposed) Materialize() Value {
	return graph.TransposeAllAxes(Materialize(t.inner), t.perm...)
}

// FallbackPolicy is Inner's: a type that forbids materialization forbids it transposed too.
func (t *Transposed) FallbackPolicy() Fallback { return fallbackOf(t.inner) }

func init() {
	transposed := TypeOf[*Transposed]()
	for _, operands := range [][]Match{{transposed, Anything}, {Anything, transposed}, {transposed, transposed}} {
		Register(Rule{Op: OpDotGeneral, Operands: operands, Handler: dotTransposed, Name: "implicitarray.Transposed.dot_general"})
	}
	RegisterOps("implicitarray.Transposed", transposed, map[Op]Handler{
		OpTranspose: func(c *Call) Value {
			return transposeValue(c.Operands[0].(*Transposed), c.Params.(*TransposeParams).Permutation)
		},
		OpConvertDType: func(c *Call) Value {
			t := c.Operands[0].(*Transposed)
			return transposeValue(ConvertDType(t.inner, c.Params.(*ConvertDTypeParams).DType), t.perm)
		},
	})
}

// transposeValue transposes v, a dense node or an array: a Transposed composes its permutation,
// back to its inner array when they cancel; another permutation goes to the inner array's own
// transpose handler where it has one (which keeps its storage exactly where the permutation
// allows, and is lazy again where not), and stays lazy otherwise. Another array reaches its
// handlers.
func transposeValue(v Value, perm []int) Value {
	t, ok := v.(*Transposed)
	if !ok {
		return TransposeAllAxes(v, perm...)
	}
	composed, lazy := NewTransposed(t, perm).(*Transposed)
	if !lazy {
		return t.inner
	}
	if len(candidates(OpTranspose, []Value{composed.inner})) > 0 {
		return TransposeAllAxes(composed.inner, composed.perm...)
	}
	return composed
}

// dotTransposed is the dot_general of Transposed operands: each is replaced by its Inner, its
// contracting and batch axes mapped through the permutation. DotGeneral lays out each operand's
// free axes in increasing order, which for Inner may differ from the transposed order: the
// result is transposed back where it does.
func dotTransposed(c *Call) Value {
	p := c.Params.(*DotGeneralParams)
	lhs, lc, lb, lFree, lOrder := untranspose(c.Operands[0], p.LhsContractingAxes, p.LhsBatchAxes)
	rhs, rc, rb, rFree, rOrder := untranspose(c.Operands[1], p.RhsContractingAxes, p.RhsBatchAxes)
	out := DotGeneral(lhs, lc, lb, rhs, rc, rb)
	batch := len(p.LhsBatchAxes)
	perm := make([]int, 0, batch+lFree+rFree)
	for i := range batch {
		perm = append(perm, i)
	}
	for _, o := range lOrder {
		perm = append(perm, batch+o)
	}
	for _, o := range rOrder {
		perm = append(perm, batch+lFree+o)
	}
	if isIdentity(perm) {
		return out
	}
	return TransposeAllAxes(out, perm...)
}

// untranspose returns the operand of a dot_general to use for v, with its contracting and batch
// axes: Inner and the mapped axes for a Transposed, v itself otherwise. free is v's number of free
// axes; order[j] is the position, among the free axes of the returned operand in increasing
// order, of v's j-th free axis.
func untranspose(v Value, contracting, batch []int) (operand Value, c, b []int, free int, order []int) {
	t, ok := v.(*Transposed)
	rank := v.Shape().Rank()
	free = rank - len(contracting) - len(batch)
	if !ok {
		order = make([]int, free)
		for j := range order {
			order[j] = j
		}
		return v, contracting, batch, free, order
	}
	mapAxes := func(axes []int) []int {
		out := make([]int, len(axes))
		for i, a := range axes {
			out[i] = t.perm[a]
		}
		return out
	}
	var innerFree []int // the inner axes of v's free axes, in v's order
	for a := range rank {
		if !slices.Contains(contracting, a) && !slices.Contains(batch, a) {
			innerFree = append(innerFree, t.perm[a])
		}
	}
	sorted := slices.Sorted(slices.Values(innerFree))
	order = make([]int, free)
	for j, a := range innerFree {
		order[j] = slices.Index(sorted, a)
	}
	return t.inner, mapAxes(contracting), mapAxes(batch), free, order
}

func isPermutation(perm []int) bool {
	seen := make([]bool, len(perm))
	for _, p := range perm {
		if p < 0 || p >= len(perm) || seen[p] {
			return false
		}
		seen[p] = true
	}
	return true
}

func isIdentity(perm []int) bool {
	for i, p := range perm {
		if p != i {
			return false
		}
	}
	return true
}
