// Package implicitarray lets quantized (or otherwise lazy) arrays stand in for dense arrays in
// GoMLX graphs, as quax does for JAX.
//
// # The model
//
// An implicit array (the Array interface) stands for a dense array of a logical Shape but is
// stored as other arrays, its Components: an NF4 weight is a packed uint8 array and a per-block
// absmax, an int8 weight is its codes and scales. Its static fields (block size, axes,
// materialization dtype, sharding) are its Metadata, kept apart from the components so that the
// components become graph parameters while the metadata shapes the graph. Materialize builds
// the dense value inside a graph.
//
// Go has no operator overloading and no hook into GoMLX's ops, so instead of tracing, values go
// through this package's operations — DotGeneral, MatMul, Einsum, Add, Mul, Reshape, Transpose,
// ConvertDType, ReduceSum, ... — which accept a Value: a dense *graph.Node or an implicit Array.
// When every operand is dense they simply call the GoMLX op. Otherwise they dispatch:
//
//  1. Handlers registered with Register for the op are matched against the concrete types of
//     all operands (Dense, TypeOf[*nf4.Array](), AnyImplicit, Anything), on either side.
//  2. The highest Precedence wins; among equal precedence the most specific pattern wins; two
//     equally specific rules are an error (ErrAmbiguous) naming the op and the operand types.
//  3. With no handler, the generic fallback materializes the implicit operands and applies the
//     dense op, counted in Stats. Each type chooses, with FallbackPolicy, whether that is silent,
//     logged once per (op, type) (FallbackWarn), or an error (FallbackForbid). A handler that
//     answers by quantizing its result again (a second rounding) says so with Call.Requantizing,
//     counted in Stats.Requantizations under the same policy.
//
// A handler returns a dense node or an implicit array (reshaping an NF4 weight along its leading
// axes stays NF4, for example), and may defer to the next handler with Call.Next. A format whose
// storage cannot follow a transpose returns a Transposed (NewTransposed): a lazy transpose whose
// products contract the inner array along the permuted axes, through the inner array's handlers. Format packages
// register their handlers in init(); this package imports none of them.
//
// # Crossing the host/graph boundary
//
// The same Go type holds host tensors (after a host-side Quantize) or graph nodes (inside a
// graph). Exec, the analogue of jit(implicit(f)), takes a function whose parameters are nodes,
// implicit array types, Values, or structs, maps and slices of them; Call flattens the host
// arguments into tensors (Flatten / TreeDef), compiles one graph per structure, metadata and
// shapes, rebuilds the arguments inside it, and brings the results — implicit arrays included —
// back to the host:
//
//	e := implicitarray.MustNewExec(backend, func(x *graph.Node, w *nf4.Array) *graph.Node {
//		return implicitarray.Materialize(implicitarray.MatMul(x, w))
//	})
//	y := e.MustCall1(x, w).(*tensors.Tensor)
//
// # Nesting and gradients
//
// A component may itself be implicit, and Materialize may return another implicit array:
// MaterializeNested goes one level or all the way, and the package-level Materialize always
// returns a dense node. Gradients need nothing special: a materialization is made of ordinary
// graph ops on the components, so graph.Gradient reaches the float components (uint8 and int8
// components get none).
//
// # Operations mirror GoMLX
//
// Each operation has the name, the arguments and the meaning of its GoMLX counterpart:
// Transpose swaps two axes and TransposeAllAxes permutes them, ReduceMultiply multiplies over
// axes, Gather takes an optional indicesAreSorted. A handler for a commutative op is registered
// for each operand order; dispatch matches every position.
//
// # Errors
//
// Graph-building functions panic, as GoMLX's do, with an error naming the op, the operand types
// and shapes, and what is accepted; the sentinel errors ErrAmbiguous, ErrNoHandler,
// ErrMaterializationForbidden and ErrDeleted can be tested with errors.Is on the recovered value. Host-side
// functions (NewExec, Call, Flatten, MaterializeOnHost) return errors; NewExec and Call have Must
// variants (MustNewExec, MustCall, MustCall1).
package implicitarray
