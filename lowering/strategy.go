package lowering

import (
	"fmt"
	"strings"

	"github.com/pkg/errors"
)

// Strategy names a formulation of the product of dense activations with a quantized weight.
// Auto lets Choose pick one for the platform, the weight and the number of activation rows; any
// other value is a requirement: a product it cannot serve panics with ErrUnsupported when the
// graph is built, so a benchmark that forces a strategy measures that strategy.
type Strategy int

const (
	// Auto picks the strategy with Choose. It serves every product.
	Auto Strategy = iota
	// Materialize builds the dense weight through implicitarray.Materialize (counted in its
	// Stats) and runs one dense DotGeneral: what a library without fused products does. The array
	// is materialized in the product's compute dtype (its lazy ConvertDType), not in its own
	// dtype: a bfloat16 or float16 array's weight is not rounded to that dtype first, so the
	// values are those of every other strategy. It serves every product.
	Materialize
	// DecodeDot decodes the stored codes to float inside the graph and runs one dense DotGeneral,
	// with a scale that is constant along the contracting axes multiplied into the result and one
	// constant along the free axes into the activations, never into the weight. For a few
	// activation rows, a weight whose float form exceeds two slabs is decoded one slab of its
	// first contracting axis at a time, so the graph holds one small float buffer (see slabBytes).
	// It serves every product.
	DecodeDot
	// MulReduce feeds the decoded weight into a broadcast multiply with the activations and a
	// reduce-sum over the contracting axis: one fusion that reads each stored byte once. It serves
	// rank-2 weights with one contracting axis and no batch axes.
	MulReduce
	// SlicedSum sums the element-wise products of a few slices of the contracting axis before one
	// small reduction, with a decode that is arithmetic only (no gather), so that XLA CPU with its
	// library fusions off emits one parallel loop that never writes a float weight. It serves
	// weights contracted on their first axis: rank-2 x·W for Blockwise4 and Int8 (whose scale must
	// be constant along one side), any rank for Signs (float activations only).
	SlicedSum
	// ProductTable builds, per call, the products of the activations with the two code values of
	// every possible packed byte (256 entries per byte position and activation row), so the inner
	// loop is one gather and one add per two weights. It serves rank-2 Blockwise4 weights with one
	// contracting axis and no batch axes; its table grows with the number of rows.
	ProductTable
	// Kernel calls quanta's CPU kernel for the layout as an XLA custom call: it reads each stored
	// byte once per call, for all the activation rows, at memory speed. The graph keeps the
	// DecodeDot formulation for GoMLX's gradients (XLA drops it from graphs that do not
	// differentiate). It serves rank-2 products on XLA CPU with the kernels registered (the
	// runtime registers them when it starts the backend), float32 or bfloat16 activations, and
	// graphs that are not sharded: Blockwise4 with the kernels' codebook and Int8, both with
	// float32, bfloat16 or float16 scales (a float64 scale accumulates in float64), Signs
	// contracted on their packed axis with no scale, a per-tensor or a per-column float32 scale,
	// and GGML contracted on its block axis (x·Wᵀ, GGUF's linear weight), whose kernels for up to
	// 8 rows multiply 8-bit activations for Q4_K, Q5_K, Q6_K, Q4_1, Q5_0 and Q5_1, and for up to 2
	// rows for Q4_0 (package cpukernels documents both numerical contracts).
	Kernel
	// PrologueDot is the GEMM form of XLA's GPU and TPU compilers: the weight is decoded with
	// only the ops XLA's Triton GEMM emitter takes in a dot operand's prologue (after one bitcast
	// of packed bytes to int8: integer and/subtract/divide, compares, selects, float arithmetic,
	// broadcasts and reshapes; no uint8 op, shift, gather or concatenate), block scales multiplied
	// through broadcast, reshape and multiply, and one DotGeneral, whose operands take a 16-bit
	// activation dtype on a GPU or TPU (float32 elsewhere); a separable scale multiplies the
	// output, or the weight when it varies along the contracting axes. It serves every product of
	// Blockwise4 (also double-quantized or flat), Int8 and Signs weights (float activations).
	PrologueDot
	// CodesDot materializes a Signs weight's values as int8 (one byte each, decoded with any op
	// in one pass over the packed bytes), then multiplies as PrologueDot does an Int8 weight:
	// the codes converted in the dot's operand, the scale on the output or the weight. It serves
	// Signs weights with float activations.
	CodesDot
)

var strategyNames = [...]string{"auto", "materialize", "decode-dot", "mul-reduce", "sliced-sum", "product-table", "kernel",
	"prologue-dot", "codes-dot"}

// String returns the strategy's name, e.g. "sliced-sum".
func (s Strategy) String() string {
	if s >= 0 && int(s) < len(strategyNames) {
		return strategyNames[s]
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// ParseStrategy reads a strategy from its name (as String writes it), case-insensitively.
func ParseStrategy(name string) (Strategy, error) {
	for i, n := range strategyNames {
		if strings.EqualFold(strings.TrimSpace(name), n) {
			return Strategy(i), nil
		}
	}
	return 0, errors.Errorf("lowering: unknown strategy %q; accepted: %s", name, strings.Join(strategyNames[:], ", "))
}

// Valid reports whether s is one of the declared strategies.
func (s Strategy) Valid() bool { return s >= 0 && int(s) < len(strategyNames) }

// Strategies lists every strategy but Auto, in declaration order.
func Strategies() []Strategy {
	out := make([]Strategy, 0, len(strategyNames)-1)
	for i := 1; i < len(strategyNames); i++ {
		out = append(out, Strategy(i))
	}
	return out
}

// MarshalText implements encoding.TextMarshaler (for flags and JSON).
func (s Strategy) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, errors.Errorf("lowering: invalid Strategy %d", int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Strategy) UnmarshalText(text []byte) error {
	parsed, err := ParseStrategy(string(text))
	if err != nil {
		return err
	}
	*s = parsed
	return nil
}
