// Package customcall emits a stablehlo.custom_call from an ordinary GoMLX v0.26 graph on the XLA
// backend: the call of a typed XLA FFI handler (api_version = 4) that package xlaffi registered,
// with a backend_config dictionary as the handler's attributes. It is the one package of quanta
// that reaches into GoMLX's and go-xla's unexported internals (with reflect and unsafe); nothing
// else may.
//
// # Why
//
// go-xla v0.1.4's stablehlo builder has the custom-call op type but no exported way to build one,
// and GoMLX v0.26's backend interface has no custom-call op.
//
// # How
//
// The caller builds the ordinary formulation of what the handler computes — for a quantized
// product, the weight decode then graph.DotGeneral — and Rewrite turns only the statement of its
// final node into the custom call, whose operands are other nodes already built (the activations,
// the packed weight components):
//
//	y := graph.DotGeneral(x, []int{1}, nil, decode(codes, scale), []int{0}, nil)
//	if err := customcall.Rewrite(y, "quanta_u8_gemv", []*graph.Node{x, codes, scale},
//		customcall.Attributes{"zero": 128}); err != nil {
//		// y is unchanged: the HLO formulation runs.
//	}
//
// GoMLX's graph still holds the formulation, so graph.Gradient differentiates it (the true
// gradient, through the decode and the DotGeneral), with the custom call's result as the forward
// value. In a forward-only graph, the decode that only the rewritten statement read is dead: XLA
// drops it while it imports the program, before its HLO passes (TestDeadDecodeRemoved reads both
// programs). The result is the node's shape and dtype; nodes built from node read the call.
//
// GoMLX v0.26 builds backend ops eagerly: every graph.Node holds the XLA backend's *xla.Node,
// which holds the go-xla *stablehlo.Value it computes; the value's function holds the statements
// that go-xla writes into the StableHLO program at compile time. Rewrite reads three unexported
// fields, each checked by name and type before any use:
//
//   - graph.Node.outputOps ([]backends.Op): the node's backend ops, here one *xla.Node;
//   - xla.Node.value (*stablehlo.Value): the value the op computes;
//   - stablehlo.Value.fn (*stablehlo.Function): the function that owns the value;
//
// finds the statement among Function.Statements whose output is that value, and rewrites it
// through its exported fields: OpType (of go-xla's internal enum type, set by reflection to the
// value that go-xla writes "stablehlo.custom_call"), Inputs (the operands' values), Attributes
// (call_target_name, api_version = 4 : i32, backend_config = {...}); FunctionParameters are
// cleared. Nothing else in GoMLX or go-xla changes.
//
// Rewrite refuses (ErrInvalid), changing nothing, when the rewrite would not be sound: a node
// whose value another node shares (but identities of it), a parameter, a constant (constants may
// be shared), a node already rewritten, an operand nil, of another graph, or computed after the
// node (StableHLO values must be defined before use), a graph not being built, a bad target name
// or attribute.
//
// # In-place state
//
// AliasOutput marks a parameter with the argument attribute tf.aliasing_output (what JAX writes
// for donated arguments), which XLA's StableHLO import turns into the module's
// input_output_alias: a donated buffer (a key/value cache) is then written in place by the
// program that returns it updated, instead of copied into a new output buffer each call. It sets
// the exported Attributes of the parameter's go-xla value, reached as Rewrite reaches a node's.
//
// # Hazards
//
//   - One output only: the custom call replaces a single-output statement.
//   - The call's result must equal the formulation's (up to rounding): the gradient is the
//     formulation's, evaluated at the call's forward values. A handler that computes something
//     else gets the wrong gradient, silently.
//   - The GoMLX graph misreports the node: its type, its inputs and graph printouts still say
//     DotGeneral; only the StableHLO program holds the call.
//   - Training graphs keep the decode alive (the gradient reads it), so a rewrite saves nothing
//     there: use it for inference products.
//   - The SPMD partitioner replicates a custom call's operands: keep sharded programs on HLO.
//   - An unregistered target is not seen until compile time, where XLA fails with "No FFI
//     handler registered for <target>" (an error, not a crash). A handler's error fails the
//     execution with its message.
//
// # Checks, and what to do on an upgrade
//
// Check (and so Rewrite) returns an error wrapping ErrUnsupported, and callers keep the HLO
// formulation, when the backend is not GoMLX's XLA backend, when the binary's build information
// names a GoMLX or go-xla version other than GoMLXVersion and GoXLAVersion, or when a field above
// is missing or has another type. TestPinnedVersions fails when go.mod requires other versions.
// On an upgrade: read the new graph.Node, backends/xla.Node, stablehlo.Value, stablehlo.Statement
// and Function.Statements; check that ops are still emitted eagerly, one statement per node
// (the XLA backend's DotGeneral), and that the statement's Write prints OpType, Inputs and
// Attributes as before; run this package's tests; then update GoMLXVersion and GoXLAVersion.
//
// # GoMLX ≥ 0.27
//
// GoMLX v0.27 adds graph.FusedQuantizedDense(x, weights, bias, Quantization{Scheme, Scale,
// BlockAxis}), a fused op that a backend may implement and that falls back to its decomposition
// when the backend does not. When quanta moves to it, the one call site that today builds the
// formulation and calls Rewrite (lowering's kernel strategy) calls FusedQuantizedDense instead,
// with the same operands (activations, packed weight, scales) and the format as Scheme; the
// kernels then reach XLA through the backend's implementation of that op, and this package is
// deleted. Keep Rewrite's callers in that shape — formulation node, target, operands, attributes
// — so the swap stays local.
//
// # Errors
//
// ErrUnsupported: not the XLA backend, or unexpected internals (Check says which). ErrInvalid:
// the rewrite would be unsound (the message names the node, target, operand shapes and what is
// accepted). MustRewrite panics instead of returning them.
package customcall
