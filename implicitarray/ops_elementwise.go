package implicitarray

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
)

// binary dispatches an element-wise binary op. GoMLX's broadcasting rule applies: one operand is a
// scalar, or both have the same rank and each pair of dimensions is equal or contains a 1.
func binary(op Op, lhs, rhs Value, fn func(a, b *graph.Node) *graph.Node) Value {
	defer annotate(op, lhs, rhs)
	if !isNil(lhs) && !isNil(rhs) {
		ls, rs := lhs.Shape(), rhs.Shape()
		if !broadcastable(ls.Dimensions, rs.Dimensions) {
			panic(errors.Errorf("operand shapes %s and %s do not broadcast; accepted: a scalar operand, or equal "+
				"ranks with each pair of dimensions equal or 1", ls, rs))
		}
	}
	return dispatch(op, []Value{lhs, rhs}, nil, func(n []*graph.Node) *graph.Node { return fn(n[0], n[1]) })
}

func unary(op Op, x Value, fn func(*graph.Node) *graph.Node) Value {
	defer annotate(op, x)
	return dispatch(op, []Value{x}, nil, func(n []*graph.Node) *graph.Node { return fn(n[0]) })
}

func broadcastable(a, b []int) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && a[i] != 1 && b[i] != 1 {
			return false
		}
	}
	return true
}

// Add returns lhs + rhs.
func Add(lhs, rhs Value) Value { return binary(OpAdd, lhs, rhs, graph.Add) }

// Sub returns lhs - rhs.
func Sub(lhs, rhs Value) Value { return binary(OpSub, lhs, rhs, graph.Sub) }

// Mul returns lhs * rhs element-wise.
func Mul(lhs, rhs Value) Value { return binary(OpMul, lhs, rhs, graph.Mul) }

// Div returns lhs / rhs element-wise.
func Div(lhs, rhs Value) Value { return binary(OpDiv, lhs, rhs, graph.Div) }

// Max returns the element-wise maximum.
func Max(lhs, rhs Value) Value { return binary(OpMax, lhs, rhs, graph.Max) }

// Min returns the element-wise minimum.
func Min(lhs, rhs Value) Value { return binary(OpMin, lhs, rhs, graph.Min) }

// Pow returns lhs raised to rhs element-wise.
func Pow(lhs, rhs Value) Value { return binary(OpPow, lhs, rhs, graph.Pow) }

// LessThan returns lhs < rhs (boolean).
func LessThan(lhs, rhs Value) Value { return binary(OpLessThan, lhs, rhs, graph.LessThan) }

// LessOrEqual returns lhs <= rhs (boolean).
func LessOrEqual(lhs, rhs Value) Value { return binary(OpLessOrEqual, lhs, rhs, graph.LessOrEqual) }

// GreaterThan returns lhs > rhs (boolean).
func GreaterThan(lhs, rhs Value) Value { return binary(OpGreaterThan, lhs, rhs, graph.GreaterThan) }

// GreaterOrEqual returns lhs >= rhs (boolean).
func GreaterOrEqual(lhs, rhs Value) Value {
	return binary(OpGreaterOrEqual, lhs, rhs, graph.GreaterOrEqual)
}

// Equal returns lhs == rhs (boolean).
func Equal(lhs, rhs Value) Value { return binary(OpEqual, lhs, rhs, graph.Equal) }

// NotEqual returns lhs != rhs (boolean).
func NotEqual(lhs, rhs Value) Value { return binary(OpNotEqual, lhs, rhs, graph.NotEqual) }

// Neg returns -x.
func Neg(x Value) Value { return unary(OpNeg, x, graph.Neg) }

// Abs returns |x|.
func Abs(x Value) Value { return unary(OpAbs, x, graph.Abs) }

// Exp returns e^x.
func Exp(x Value) Value { return unary(OpExp, x, graph.Exp) }

// Log returns the natural logarithm of x.
func Log(x Value) Value { return unary(OpLog, x, graph.Log) }

// Sqrt returns the square root of x.
func Sqrt(x Value) Value { return unary(OpSqrt, x, graph.Sqrt) }

// IntegerPowParams are the parameters of IntegerPow.
type IntegerPowParams struct{ Exponent int }

// IntegerPow returns x^exponent for an integer exponent (negative allowed for floats; it panics
// for a negative exponent of an integer x, as JAX's integer_pow).
func IntegerPow(x Value, exponent int) Value {
	defer annotate(OpIntegerPow, x)
	mustNotBeNil(x)
	if s := x.Shape(); exponent < 0 && !s.DType.IsFloat() && !s.DType.IsComplex() {
		panic(errors.Errorf("exponent %d for %s; accepted: an exponent >= 0, or a float operand", exponent, s))
	}
	return dispatch(OpIntegerPow, []Value{x}, &IntegerPowParams{exponent}, func(n []*graph.Node) *graph.Node {
		return graph.Pow(n[0], graph.Scalar(n[0].Graph(), n[0].DType(), exponent))
	})
}
