package lowering_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
)

// hloProgram is a product built as for a GPU, with weight shapes no other program has, so that its
// module is found by its parameters.
type hloProgram struct {
	name      string
	signature string // a parameter of the module, as HLO prints it
	w         func(r *rand.Rand) implicitarray.Array
	xDims     []int
	axes      lowering.Axes
	check     func(t *testing.T, entry hloComputation)
}

func hloPrograms() []hloProgram {
	xWt := lowering.Axes{XContracting: []int{1}, WContracting: []int{1}}
	xW := lowering.Axes{XContracting: []int{1}, WContracting: []int{0}}
	return []hloProgram{
		{"nf4/prologue-dot", "u8[96,5,32]", func(r *rand.Rand) implicitarray.Array {
			return nf4.MustQuantize(testutil.NormalTensor(r, 96, 320), 64).WithStrategy(lowering.PrologueDot)
		}, []int{16, 320}, xWt, func(t *testing.T, entry hloComputation) {
			w := entry.dotOperands(t, "bf16", "bf16")[1]
			entry.checkPrologue(t, w, "u8[96,5,32]")
			// The block scale: parameter -> broadcast -> reshape -> multiply, then the dot's dtype.
			entry.checkChain(t, w, "convert", "multiply", "reshape", "broadcast", "parameter f32[96,5]")
		}},
		{"int8/prologue-dot", "s8[80,160]", func(r *rand.Rand) implicitarray.Array {
			return qint8.MustQuantize(testutil.NormalTensor(r, 80, 160)).WithStrategy(lowering.PrologueDot)
		}, []int{16, 160}, xWt, func(t *testing.T, entry hloComputation) {
			w := entry.dotOperands(t, "bf16", "bf16")[1]
			entry.checkChain(t, w, "convert", "parameter s8[80,160]") // codes converted next to the dot
			entry.checkPrologue(t, w, "")
		}},
		{"ternary/prologue-dot", "u8[16,48]", func(r *rand.Rand) implicitarray.Array {
			return onebit.MustQuantizeTernary(testutil.NormalTensor(r, 64, 48), &onebit.Options{Scale: true, ScaleAxes: []int{0}}).WithStrategy(lowering.PrologueDot)
		}, []int{16, 64}, xW, func(t *testing.T, entry hloComputation) {
			entry.checkPrologue(t, entry.dotOperands(t, "bf16", "bf16")[1], "u8[16,48]")
		}},
		{"binary1/prologue-dot", "u8[8,24]", func(r *rand.Rand) implicitarray.Array {
			return onebit.MustQuantizeBinaryBits(testutil.NormalTensor(r, 64, 24), nil).WithStrategy(lowering.PrologueDot)
		}, []int{16, 64}, xW, func(t *testing.T, entry hloComputation) {
			entry.checkPrologue(t, entry.dotOperands(t, "bf16", "bf16")[1], "u8[8,24]")
		}},
		{"ternary/codes-dot", "u8[16,40]", func(r *rand.Rand) implicitarray.Array {
			return onebit.MustQuantizeTernary(testutil.NormalTensor(r, 64, 40), nil).WithStrategy(lowering.CodesDot)
		}, []int{16, 64}, xW, func(t *testing.T, entry hloComputation) {
			// int8 codes materialized by any ops (a loop fusion of its own on a GPU), converted next to the dot.
			entry.checkChain(t, entry.dotOperands(t, "bf16", "bf16")[1], "convert", "reshape s8[64,40]")
		}},
		{"nf4/mul-reduce", "u8[96,3,32]", func(r *rand.Rand) implicitarray.Array {
			return nf4.MustQuantize(testutil.NormalTensor(r, 96, 192), 64) // Auto: the GPU's reduction for one row
		}, []int{1, 192}, xWt, func(t *testing.T, entry hloComputation) {
			if entry.count("dot") != 0 || entry.count("reduce") != 1 {
				t.Errorf("want one reduce and no dot, got %d reduce and %d dot", entry.count("reduce"), entry.count("dot"))
			}
		}},
	}
}

// TestGPUHLO checks the HLO that the GPU formulations hand to XLA (the programs before XLA's
// passes, dumped by XLA CPU): PrologueDot's weight reaches the dot only through ops Triton takes in
// a GEMM prologue (no uint8 op but one bitcast of the packed bytes, no shift, gather or
// concatenate), the dot multiplies bfloat16 operands, the NF4 block scale joins through broadcast,
// reshape and multiply; CodesDot converts materialized int8 codes next to the dot; one activation
// row gives a reduction, no dot. XLA CPU's own fusion decisions are not the GPU's and are not
// checked. The programs are built in a child process whose XLA_FLAGS ask for the dumps.
func TestGPUHLO(t *testing.T) {
	backend := testutil.Backend(t)
	if backend.String() != "xla" {
		t.Skipf("HLO dumps are XLA's; backend %s", backend.Name())
	}
	if testutil.InHLOChild() {
		r := rand.New(rand.NewPCG(17, 18))
		for _, p := range hloPrograms() {
			x := activations(t, r, p.xDims, dtypes.BFloat16)
			e := implicitarray.MustNewExec(backend, func(x *graph.Node, w implicitarray.Array) *graph.Node {
				return lowering.DotGeneralAs(lowering.XLAGPU, x, w.(lowering.Quantized), p.axes)
			})
			e.MustCall1(x, p.w(r))
			e.Finalize()
		}
		return
	}
	dir, _ := testutil.DumpHLO(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.before_optimizations.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no HLO dumps in %s (%v)", dir, err)
	}
	for _, p := range hloPrograms() {
		t.Run(p.name, func(t *testing.T) {
			var found []string
			for _, f := range files {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if header, _, _ := strings.Cut(string(data), "\n"); strings.Contains(header, p.signature) {
					found = append(found, string(data))
				}
			}
			if len(found) != 1 {
				t.Fatalf("%d modules with a parameter %s, want 1", len(found), p.signature)
			}
			p.check(t, parseEntry(t, found[0]))
		})
	}
}

// hloInstruction is one line of an HLO computation: %name = type opcode(operands).
type hloInstruction struct {
	name, dtype, dims, opcode string
	operands                  []string
}

func (i hloInstruction) String() string { return i.opcode + " " + i.dtype + "[" + i.dims + "]" }

type hloComputation map[string]hloInstruction

var (
	hloLine    = regexp.MustCompile(`^\s*(?:ROOT\s+)?%(\S+)\s*=\s*(\w+)\[([^\]]*)\]\S*\s+([\w-]+)\((.*)$`)
	hloOperand = regexp.MustCompile(`%([\w.-]+)`)
)

// parseEntry reads the ENTRY computation of an HLO module's text.
func parseEntry(t *testing.T, module string) hloComputation {
	_, entry, ok := strings.Cut(module, "\nENTRY ")
	if !ok {
		t.Fatalf("no ENTRY computation in\n%s", module)
	}
	c := hloComputation{}
	for _, line := range strings.Split(entry, "\n")[1:] {
		m := hloLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		args, _, _ := strings.Cut(m[5], ")") // the operands end at the first parenthesis: no op here nests them
		var operands []string
		for _, o := range hloOperand.FindAllStringSubmatch(args, -1) {
			operands = append(operands, o[1])
		}
		c[m[1]] = hloInstruction{name: m[1], dtype: m[2], dims: m[3], opcode: m[4], operands: operands}
	}
	return c
}

func (c hloComputation) count(opcode string) int {
	n := 0
	for _, i := range c {
		if i.opcode == opcode {
			n++
		}
	}
	return n
}

// dotOperands returns the operands of the computation's one dot, checking their dtypes.
func (c hloComputation) dotOperands(t *testing.T, lhs, rhs string) []hloInstruction {
	t.Helper()
	var dots []hloInstruction
	for _, i := range c {
		if i.opcode == "dot" {
			dots = append(dots, i)
		}
	}
	if len(dots) != 1 || len(dots[0].operands) != 2 {
		t.Fatalf("want one dot with two operands, got %v", dots)
	}
	ops := []hloInstruction{c[dots[0].operands[0]], c[dots[0].operands[1]]}
	if ops[0].dtype != lhs || ops[1].dtype != rhs {
		t.Errorf("dot of %s and %s, want %s and %s operands", ops[0], ops[1], lhs, rhs)
	}
	return ops
}

// producers returns every instruction that w is computed from, w included.
func (c hloComputation) producers(w hloInstruction) []hloInstruction {
	seen := map[string]bool{}
	var out []hloInstruction
	var walk func(name string)
	walk = func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		i, ok := c[name]
		if !ok {
			return
		}
		out = append(out, i)
		for _, o := range i.operands {
			walk(o)
		}
	}
	walk(w.name)
	return out
}

// tritonPrologueOps are the opcodes XLA's Triton GEMM emitter takes between a dot and its
// parameters (xla/backends/gpu/codegen/triton/support.cc), of those PrologueDot uses.
var tritonPrologueOps = []string{"parameter", "constant", "convert", "broadcast", "reshape", "bitcast", "transpose", "slice",
	"and", "subtract", "divide", "multiply", "add", "compare", "select"}

// checkPrologue checks that w is computed by Triton prologue ops on types Triton supports, with
// no uint8 value but the packed parameter (signature, or none when empty) and its one
// bitcast-convert to int8.
func (c hloComputation) checkPrologue(t *testing.T, w hloInstruction, packed string) {
	t.Helper()
	bitcasts := 0
	for _, i := range c.producers(w) {
		switch {
		case i.opcode == "bitcast-convert":
			bitcasts++
			if from := c[i.operands[0]]; i.dtype != "s8" || from.opcode != "parameter" || from.dtype+"["+from.dims+"]" != packed {
				t.Errorf("%s of %s: want the packed parameter %s seen as s8", i, from, packed)
			}
		case !slices.Contains(tritonPrologueOps, i.opcode):
			t.Errorf("%s on the weight's way to the dot: not a Triton prologue op", i)
		case i.dtype == "u8" && !(i.opcode == "parameter" && i.dtype+"["+i.dims+"]" == packed):
			t.Errorf("%s on the weight's way to the dot: Triton has no uint8", i)
		}
	}
	if want := min(1, len(packed)); bitcasts != want {
		t.Errorf("%d bitcast-converts on the weight's way to the dot, want %d", bitcasts, want)
	}
}

// checkChain checks that w's producers hold the chain of opcodes (each "opcode" or "opcode
// dtype[dims]"), each an operand of the one before, starting at w.
func (c hloComputation) checkChain(t *testing.T, w hloInstruction, chain ...string) {
	t.Helper()
	matches := func(i hloInstruction, want string) bool {
		return want == i.opcode || want == i.String()
	}
	var follow func(i hloInstruction, rest []string) bool
	follow = func(i hloInstruction, rest []string) bool {
		if len(rest) == 0 {
			return true
		}
		for _, o := range i.operands {
			if next := c[o]; matches(next, rest[0]) && follow(next, rest[1:]) {
				return true
			}
		}
		return false
	}
	if !matches(w, chain[0]) || !follow(w, chain[1:]) {
		t.Errorf("no chain %v from the dot's weight operand %s", chain, w)
	}
}
