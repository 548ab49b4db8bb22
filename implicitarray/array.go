package implicitarray

import (
	"fmt"
	"reflect"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
)

// Value is anything the operations of this package accept: a dense *graph.Node or an implicit Array
// whose components are graph nodes. Both have a Shape method, which is all the interface asks, so
// a *tensors.Tensor also satisfies it at compile time; operations reject it at run time with a message
// that says to pass it through Exec.
type Value interface {
	Shape() shapes.Shape
}

// Array is the contract every implicit array implements: a value that stands for a dense array of
// Shape() but is stored in another form (quantized, lazy, ...).
//
// The same Go type serves on the host (components are *tensors.Tensor, e.g. straight out of a
// host-side Quantize) and inside a graph (components are *graph.Node): Exec moves an Array from one
// side to the other with WithComponents.
type Array interface {
	// Shape is the logical shape and dtype: those of the dense array Materialize builds.
	Shape() shapes.Shape

	// Components are the stored arrays, in a fixed order. They become graph parameters in Exec.
	// A component may itself be an implicit Array (nesting).
	Components() []Component

	// Metadata describes the static fields (block size, axes, materialization dtype, ...) in a
	// canonical form. It is never a graph parameter: Exec keys its graph cache on it, so two arrays
	// with equal Metadata, Shape and component shapes must build identical graphs.
	Metadata() string

	// WithComponents returns a new Array of the same type and metadata holding the given
	// components, which have the same count and shapes as Components(). Used to move an Array
	// between the host and a graph.
	WithComponents(components []Component) Array

	// Materialize builds the value this array stands for inside the graph of its components: a
	// dense *graph.Node, or another implicit Array (one level of nesting). It panics if the components are host tensors. Library code calls
	// the package-level Materialize, which materializes fully and counts each level.
	Materialize() Value
}

// Component is one stored array of an implicit array: a host tensor outside a graph, a graph node
// inside one, or a nested implicit Array (on either side).
type Component struct {
	tensor *tensors.Tensor
	node   *graph.Node
	array  Array
}

// TensorComponent wraps a host tensor.
func TensorComponent(t *tensors.Tensor) Component { return Component{tensor: t} }

// NodeComponent wraps a graph node.
func NodeComponent(n *graph.Node) Component { return Component{node: n} }

// ArrayComponent wraps a nested implicit array.
func ArrayComponent(a Array) Component { return Component{array: a} }

// Shape of the component (for a nested array, its logical shape).
func (c Component) Shape() shapes.Shape {
	switch {
	case c.tensor != nil:
		return c.tensor.Shape()
	case c.node != nil:
		return c.node.Shape()
	case c.array != nil:
		return c.array.Shape()
	}
	return shapes.Invalid()
}

// IsTensor reports whether the component is a host tensor.
func (c Component) IsTensor() bool { return c.tensor != nil }

// IsNode reports whether the component is a graph node.
func (c Component) IsNode() bool { return c.node != nil }

// IsArray reports whether the component is a nested implicit array.
func (c Component) IsArray() bool { return c.array != nil }

// Tensor returns the host tensor, or nil if the component is not one.
func (c Component) Tensor() *tensors.Tensor { return c.tensor }

// Array returns the nested implicit array, or nil if the component is not one.
func (c Component) Array() Array { return c.array }

// Node returns the graph node. It panics with a clear message if the component is a host tensor
// (the array was not passed through a graph) or a nested array (use Value or Materialize).
func (c Component) Node() *graph.Node {
	if c.node != nil {
		return c.node
	}
	switch {
	case c.tensor != nil:
		panic(errors.Errorf("implicitarray: component %s is a host tensor, not a graph node: "+
			"pass the implicit array through implicitarray.Exec (or OnGraph) before using it in a graph", c.tensor.Shape()))
	case c.array != nil:
		panic(errors.Errorf("implicitarray: component is a nested %s %s, not a graph node: use Component.Value "+
			"or implicitarray.Materialize", TypeName(c.array), c.array.Shape()))
	}
	panic(errors.New("implicitarray: empty component"))
}

// Value returns the component as an operand of this package's operations: the node, or the nested
// Array. It panics like Node for a host tensor.
func (c Component) Value() Value {
	if c.array != nil {
		return c.array
	}
	return c.Node()
}

// String describes the component for error messages.
func (c Component) String() string {
	switch {
	case c.tensor != nil:
		return "tensor " + c.tensor.Shape().String()
	case c.node != nil:
		return "node " + c.node.Shape().String()
	case c.array != nil:
		return TypeName(c.array) + " " + c.array.Shape().String()
	}
	return "empty"
}

// TypeName is the name used for an operand's type in messages and warnings, e.g. "*nf4.Array".
func TypeName(v any) string {
	if v == nil {
		return "nil"
	}
	return reflect.TypeOf(v).String()
}

// describe gives "TYPE SHAPE" for an operand in an error message.
func describe(v any) string {
	if isNil(v) {
		return "nil"
	}
	if s, ok := v.(interface{ Shape() shapes.Shape }); ok {
		return fmt.Sprintf("%s %s", TypeName(v), s.Shape())
	}
	return TypeName(v)
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func:
		return rv.IsNil()
	}
	return false
}
