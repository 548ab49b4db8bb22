package kernelreg

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// Target is one custom call of quanta's CPU kernels: the one declaration of its name, operands
// and attributes. Package lowering emits calls in this operand order; the C handlers
// (internal/cpukernels/ffi.c) read their operands by the indices the generated header
// qk_targets.h names after it (CHeader; `go generate ./internal/cpukernels`).
type Target struct {
	// Name is the custom-call target name.
	Name string
	// Operands names the operands after the activations, in call order; an operand named in
	// Optional may be left out (it is then the last).
	Operands []string
	Optional string
	// Attributes names the integer attributes of the call's backend_config, FloatAttributes its
	// float ones.
	Attributes, FloatAttributes []string
	// First describes operand 0 when it is not the activations x (M, K) of a product.
	First string
	// Contract describes the operands' shapes and dtypes, for messages and documentation.
	Contract string
}

// The activations x (M, K), float32 or bfloat16, are every product's first operand, and the
// result y (M, N) float32 its only one; the attention's first operand is the queries, and a
// weight decode's the stored weight, its result the weight in float32. The scale_kind attribute
// says how a scale is laid out (the ScaleKind constants); ggml_type names a GGML block type by
// ggml's type id (gguf.Type's value), whose block size bs and bytes blockBytes the handler checks
// the operands against.
var targets = []Target{
	{Name: "quanta_nf4_kn", Operands: []string{"packed", "absmax"},
		Contract: "packed uint8 (K, ceil(N/bs), bs/2), absmax float (K, ceil(N/bs)): x·W"},
	{Name: "quanta_nf4_nk", Operands: []string{"packed", "absmax"},
		Contract: "packed uint8 (N, ceil(K/bs), bs/2), absmax float (N, ceil(K/bs)): x·Wᵀ"},
	{Name: "quanta_int8_kn", Operands: []string{"codes", "scale"}, Optional: "scale", Attributes: []string{"scale_kind"},
		Contract: "codes int8 (K, N), scale float (1, K or N values): x·W"},
	{Name: "quanta_int8_nk", Operands: []string{"codes", "scale"}, Optional: "scale", Attributes: []string{"scale_kind"},
		Contract: "codes int8 (N, K), scale float (1, K or N values): x·Wᵀ"},
	{Name: "quanta_twobit_kn", Operands: []string{"packed", "scale"}, Optional: "scale", Attributes: []string{"scale_kind"},
		Contract: "packed uint8 (K/4, N), scale float32 (1 or N values): x·W"},
	{Name: "quanta_onebit_kn", Operands: []string{"packed", "scale"}, Optional: "scale", Attributes: []string{"scale_kind"},
		Contract: "packed uint8 (K/8, N), scale float32 (1 or N values): x·W"},
	{Name: "quanta_ggml_nk", Operands: []string{"blocks"}, Attributes: []string{"ggml_type"},
		Contract: "blocks uint8 (N, K/bs·blockBytes), N rows of K/bs blocks of the ggml type ggml_type: x·Wᵀ"},
	{Name: "quanta_nf4_decode", Operands: []string{"absmax"},
		First:    "packed uint8 (rows, ceil(span/bs), bs/2)",
		Contract: "absmax float (rows, ceil(span/bs)): the weight float32 (rows, span) of either NF4 layout"},
	{Name: "quanta_ggml_decode", Attributes: []string{"ggml_type"},
		First:    "blocks uint8 (rows, K/bs·blockBytes)",
		Contract: "rows of K/bs blocks of the ggml type ggml_type: the weight float32 (rows, K)"},
	{Name: "quanta_f32_kn", Operands: []string{"w"},
		Contract: "w float32 (K, N): x·W of a dense weight"},
	{Name: "quanta_f32_nk", Operands: []string{"w"},
		Contract: "w float32 (N, K): x·Wᵀ of a dense weight"},
	{Name: AttentionTarget, Operands: []string{"keys", "values", "visible"}, FloatAttributes: []string{"scale"},
		First:    "q float32 (batch, heads, seq, headDim)",
		Contract: "keys and values both float32 or both float16 (batch, kvHeads, length, headDim), visible bool (seq, keys ≤ length): grouped-query attention over the first keys positions (batch, heads, seq, headDim)"},
}

// AttentionTarget is the custom call of grouped-query attention over a key/value cache (C:
// qk_attention): one call a layer in place of XLA's small products and softmax.
const AttentionTarget = "quanta_attention"

// AttentionMaxKeys bounds the keys an attention call reads (the C kernel's QK_ATTENTION_MAX_KEYS).
const AttentionMaxKeys = 1 << 18

// ScaleKind says how the scale operand of a call is laid out (the scale_kind attribute).
type ScaleKind int

const (
	ScaleNone   ScaleKind = 0 // no scale operand
	ScaleTensor ScaleKind = 1 // one value
	ScaleK      ScaleKind = 2 // one per contracted index
	ScaleN      ScaleKind = 3 // one per output column
)

// Targets returns the kernel table.
func Targets() []Target {
	out := make([]Target, len(targets))
	copy(out, targets)
	return out
}

// TargetNamed returns the target of that name; it panics if there is none (a name in the code
// that the table lacks).
func TargetNamed(name string) Target {
	for _, t := range targets {
		if t.Name == name {
			return t
		}
	}
	panic(fmt.Sprintf("kernelreg: no kernel target %q", name))
}

// Args returns the call's operands after the activations in the target's order, from operands
// by name; it panics if one is missing or unknown (a mistake in the caller's code).
func (t Target) Args(operands map[string]*graph.Node) []*graph.Node {
	args := make([]*graph.Node, 0, len(t.Operands))
	for _, name := range t.Operands {
		v, ok := operands[name]
		switch {
		case ok:
			args = append(args, v)
		case name != t.Optional:
			panic(fmt.Sprintf("kernelreg: %s: operand %q missing", t.Name, name))
		}
	}
	if len(args) != len(operands) {
		panic(fmt.Sprintf("kernelreg: %s: operands %v; accepted: %v", t.Name, keys(operands), t.Operands))
	}
	return args
}

func keys(m map[string]*graph.Node) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// first describes operand 0.
func (t Target) first() string {
	if t.First != "" {
		return t.First
	}
	return "x (M, K)"
}

// cName is the C identifier of a target's operand index: QK_ARG_NF4_KN_PACKED.
func cName(target, operand string) string {
	return strings.ToUpper("QK_ARG_" + strings.TrimPrefix(target, "quanta_") + "_" + operand)
}

// CHeader returns the C header internal/cpukernels/qk_targets.h: the table as an X-macro of
// targets, and each operand's index in the call.
func CHeader() string {
	var sb strings.Builder
	sb.WriteString("/* Code generated by internal/kernelreg (go generate ./internal/cpukernels); DO NOT EDIT.\n" +
		" * quanta's custom-call targets: the operand indices of each call (operand 0: x, or q for the attention). */\n" +
		"#ifndef QK_TARGETS_H\n#define QK_TARGETS_H\n\n")
	sb.WriteString("/* QK_TARGETS(X) expands X(target) for every target. */\n#define QK_TARGETS(X)")
	for _, t := range targets {
		fmt.Fprintf(&sb, " \\\n  X(%s)", t.Name)
	}
	sb.WriteString("\n\n")
	for _, t := range targets {
		fmt.Fprintf(&sb, "/* %s: %s, %s */\n", t.Name, t.first(), t.Contract)
		if len(t.Operands) == 0 {
			continue
		}
		sb.WriteString("enum {\n")
		for i, op := range t.Operands {
			fmt.Fprintf(&sb, "  %s = %d,\n", cName(t.Name, op), i+1)
		}
		sb.WriteString("};\n")
	}
	sb.WriteString("\n/* The attributes. */\n")
	var attrs []string
	for _, t := range targets {
		for _, a := range append(slices.Clone(t.Attributes), t.FloatAttributes...) {
			if !slices.Contains(attrs, a) {
				attrs = append(attrs, a)
				fmt.Fprintf(&sb, "#define QK_ATTR_%s \"%s\"\n", strings.ToUpper(a), a)
			}
		}
	}
	fmt.Fprintf(&sb, "/* The most keys an attention call takes. */\n#define QK_ATTENTION_MAX_KEYS_TABLE %d\n", AttentionMaxKeys)
	fmt.Fprintf(&sb, "/* The values of scale_kind. */\n"+
		"enum {\n  QK_ATTR_SCALE_NONE = %d,\n  QK_ATTR_SCALE_TENSOR = %d,\n  QK_ATTR_SCALE_K = %d,\n  QK_ATTR_SCALE_N = %d,\n};\n",
		ScaleNone, ScaleTensor, ScaleK, ScaleN)
	sb.WriteString("\n/* The handlers by target, in the table's order (ffi.c). */\n" +
		"typedef struct {\n  const char *target;\n  void *fn;\n} qk_target_entry;\n" +
		"/* qk_targets returns the table and its length in *count. */\n" +
		"const qk_target_entry *qk_targets(int *count);\n")
	sb.WriteString("\n#endif /* QK_TARGETS_H */\n")
	return sb.String()
}
