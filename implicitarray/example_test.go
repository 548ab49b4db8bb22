package implicitarray_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/runtime"
)

// Ones is a user-defined implicit array: an all-ones matrix that stores nothing but its shape
// (its one component is a scalar, so it can travel through Exec).
type Ones struct {
	one  implicitarray.Component
	dims []int
}

func (o *Ones) Shape() shapes.Shape { return shapes.Make(o.one.Shape().DType, o.dims...) }
func (o *Ones) Components() []implicitarray.Component {
	return []implicitarray.Component{o.one}
}
func (o *Ones) Metadata() string { return fmt.Sprint(o.dims) }
func (o *Ones) WithComponents(c []implicitarray.Component) implicitarray.Array {
	return &Ones{one: c[0], dims: o.dims}
}
func (o *Ones) Materialize() implicitarray.Value {
	return graph.BroadcastToDims(o.one.Node(), o.dims...)
}

func init() {
	// x @ Ones needs no matrix: every output column is the row sum of x.
	implicitarray.Register(implicitarray.Rule{
		Op:       implicitarray.OpDotGeneral,
		Operands: []implicitarray.Match{implicitarray.Dense, implicitarray.TypeOf[*Ones]()},
		Name:     "example: dense @ Ones",
		Handler: func(c *implicitarray.Call) implicitarray.Value {
			p := c.Params.(*implicitarray.DotGeneralParams)
			x, ones := c.Operands[0].(*graph.Node), c.Operands[1].(*Ones)
			if x.Rank() != 2 || len(p.LhsContractingAxes) != 1 || p.LhsContractingAxes[0] != 1 ||
				len(p.RhsContractingAxes) != 1 || p.RhsContractingAxes[0] != 0 || len(p.LhsBatchAxes) != 0 {
				return c.Next() // not the plain matrix product: let the fallback do it
			}
			rowSums := graph.ReduceSum(graph.Mul(x, ones.one.Node()), 1)
			return graph.BroadcastToDims(graph.InsertAxes(rowSums, -1), x.Shape().Dimensions[0], ones.dims[1])
		},
	})
}

// Example shows a user-defined implicit type with one custom handler, used through Exec: the
// handler serves the product, so nothing is materialized.
func Example() {
	backend := runtime.MustBackend()
	ones := &Ones{one: implicitarray.TensorComponent(tensors.FromValue(float32(1))), dims: []int{3, 2}}

	implicitarray.ResetStats()
	e := implicitarray.MustNewExec(backend, func(x *graph.Node, w *Ones) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	})
	y := e.MustCall1([][]float32{{1, 2, 3}, {4, 5, 6}}, ones).(*tensors.Tensor)
	fmt.Println(y.Value())
	fmt.Println("materializations:", implicitarray.CurrentStats().Materializations["*implicitarray_test.Ones"])
	// Output:
	// [[6 6] [15 15]]
	// materializations: 0
}
