package implicitarray_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	. "github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// dotSeen records the dot_general parameters that reached the handler of toy[dotTag] (a test
// runs its graphs one at a time).
var dotSeen []DotGeneralParams

type dotTag struct{}

func init() {
	record := func(c *Call) Value {
		dotSeen = append(dotSeen, *c.Params.(*DotGeneralParams))
		return c.Dense(Materialize(c.Operands[0]), Materialize(c.Operands[1]))
	}
	dotToy := TypeOf[*toy[dotTag]]()
	for _, operands := range [][]Match{{Dense, dotToy}, {dotToy, Dense}, {dotToy, dotToy}} {
		Register(Rule{Op: OpDotGeneral, Operands: operands, Handler: record, Name: "dot_general(dot toy)"})
	}
}

// counting returns the values 1, 2, 3, ... (row-major) in an array of dims: exact in float32
// products of these sizes.
func counting(g *graph.Graph, dims ...int) *graph.Node {
	size := 1
	for _, d := range dims {
		size *= d
	}
	return graph.Reshape(graph.OnePlus(graph.Iota(g, shapes.Make(dtypes.Float32, size), 0)), dims...)
}

// TestTransposedDotGeneral: a dot_general with a lazily transposed operand reaches the inner
// array's own handler with the axes mapped through the permutation, and gives the dense product
// of the transposed values exactly (the result's free axes reordered where the permutation
// reorders them), on either side, with batch axes, and with both operands transposed.
func TestTransposedDotGeneral(t *testing.T) {
	backend := newBackend(t)
	type side struct {
		dims []int // the inner array's (or the dense operand's) dimensions
		perm []int // nil: a dense operand
	}
	for _, tc := range []struct {
		name           string
		lhs, rhs       side
		lc, lb, rc, rb []int
		// seen: the rhs contracting axes the inner handler must see (lhs's when only lhs is lazy).
		seen []int
	}{
		{"matmul-by-transpose", side{[]int{4, 5}, nil}, side{[]int{3, 5}, []int{1, 0}}, []int{1}, nil, []int{0}, nil, []int{1}},
		{"free-axes-reordered", side{[]int{6, 4}, nil}, side{[]int{2, 3, 4}, []int{2, 1, 0}}, []int{1}, nil, []int{0}, nil, []int{2}},
		{"lazy-lhs", side{[]int{2, 3, 4}, []int{2, 1, 0}}, side{[]int{4, 6}, nil}, []int{0}, nil, []int{0}, nil, []int{2}},
		{"batch-axes", side{[]int{2, 5, 4}, nil}, side{[]int{2, 3, 4}, []int{0, 2, 1}}, []int{2}, []int{0}, []int{1}, []int{0}, []int{2}},
		{"both-lazy", side{[]int{5, 3, 2}, []int{2, 1, 0}}, side{[]int{4, 5}, []int{1, 0}}, []int{2}, nil, []int{0}, nil, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dotSeen = nil
			operand := func(g *graph.Graph, s side, offset float64) (lazy Value, dense *graph.Node) {
				values := graph.AddScalar(counting(g, s.dims...), offset)
				if s.perm == nil {
					return values, values
				}
				inner := graphToy[dotTag](values, 2)
				return NewTransposed(inner, s.perm), graph.TransposeAllAxes(graph.MulScalar(values, 2), s.perm...)
			}
			out := run(t, backend, func(g *graph.Graph) []*graph.Node {
				l, ld := operand(g, tc.lhs, 0)
				r, rd := operand(g, tc.rhs, 10)
				return []*graph.Node{Materialize(DotGeneral(l, tc.lc, tc.lb, r, tc.rc, tc.rb)),
					graph.DotGeneral(ld, tc.lc, tc.lb, rd, tc.rc, tc.rb)}
			})
			if !out[0].Shape().Equal(out[1].Shape()) {
				t.Fatalf("shape %s, want %s", out[0].Shape(), out[1].Shape())
			}
			testutil.SameBits(t, "product", testutil.Float32s(t, out[0]), testutil.Float32s(t, out[1]))
			if len(dotSeen) != 1 {
				t.Fatalf("the inner handler ran %d times, want once", len(dotSeen))
			}
			seen := dotSeen[0].RhsContractingAxes
			if tc.rhs.perm == nil {
				seen = dotSeen[0].LhsContractingAxes
			}
			if !slices.Equal(seen, tc.seen) {
				t.Errorf("the inner handler contracted axes %v, want %v", seen, tc.seen)
			}
		})
	}
}

// TestTransposedComposes: transposes of a Transposed compose, back to the inner array itself when
// they cancel; NewTransposed of the identity is the array; a bad permutation is refused, named.
func TestTransposedComposes(t *testing.T) {
	g := graph.NewGraph(newBackend(t), "compose")
	inner := graphToy[plainTag](counting(g, 2, 3, 4), 1)
	if got := NewTransposed(inner, []int{0, 1, 2}); got != Array(inner) {
		t.Errorf("identity: got %T, want the array itself", got)
	}
	lazy := NewTransposed(inner, []int{2, 0, 1})
	if lt, ok := lazy.(*Transposed); !ok || !slices.Equal(lt.Shape().Dimensions, []int{4, 2, 3}) || lt.Inner() != Array(inner) {
		t.Fatalf("NewTransposed: %T %s", lazy, lazy.Shape())
	}
	if got := TransposeAllAxes(lazy, 1, 2, 0); got != Value(inner) {
		t.Errorf("transposing back: got %T %s, want the inner array", got, got.Shape())
	}
	again := TransposeAllAxes(lazy, 0, 2, 1).(*Transposed)
	if !slices.Equal(again.Permutation(), []int{2, 1, 0}) || again.Inner() != Array(inner) {
		t.Errorf("composed permutation %v of %T, want [2 1 0] of the inner array", again.Permutation(), again.Inner())
	}
	for _, tc := range []struct {
		name string
		a    Array
		perm []int
		want []string
	}{
		{"bad permutation", inner, []int{0, 0, 1}, []string{"NewTransposed", "[0 0 1]", "accepted"}},
		{"nil array", nil, []int{1, 0}, []string{"NewTransposed", "nil", "accepted"}},
		{"nil typed array", (*toy[plainTag])(nil), []int{1, 0}, []string{"NewTransposed", "nil", "accepted"}},
	} {
		err := recoverError(func() { NewTransposed(tc.a, tc.perm) })
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v does not mention %q", tc.name, err, w)
			}
		}
	}
}

// TestTransposedCrossesExec: a Transposed comes back to the host with its inner array and
// permutation, materializes to the transposed values and goes into another graph as it is.
func TestTransposedCrossesExec(t *testing.T) {
	backend := newBackend(t)
	w := hostToy[plainTag]([][]float32{{1, 2, 3}, {4, 5, 6}}, 2)
	e := MustNewExec(backend, func(w *toy[plainTag]) Value { return Transpose(NewTransposed(w, []int{1, 0}), 0, 1) })
	defer e.Finalize()
	if back := e.MustCall1(w); fmt.Sprintf("%T", back) != "*implicitarray_test.toy[github.com/quanta-ml/quanta/implicitarray_test.plainTag]" {
		t.Errorf("transposed back and forth: %T", back)
	}
	lazyExec := MustNewExec(backend, func(w *toy[plainTag]) Value { return NewTransposed(w, []int{1, 0}) })
	defer lazyExec.Finalize()
	lazy, ok := lazyExec.MustCall1(w).(*Transposed)
	if !ok || !slices.Equal(lazy.Shape().Dimensions, []int{3, 2}) || lazy.Metadata() != "permutation=[1 0]" {
		t.Fatalf("returned %T %v", lazy, lazy)
	}
	got, err := MaterializeOnHost(backend, lazy)
	if err != nil {
		t.Fatal(err)
	}
	testutil.SameBits(t, "materialized", testutil.Float32s(t, got), []float32{2, 8, 4, 10, 6, 12})
	sum := MustNewExec(backend, func(v *Transposed) *graph.Node {
		g := v.Inner().(*toy[plainTag]).payload.Node().Graph()
		return Materialize(MatMul(graph.Const(g, [][]float32{{1, 1, 1}}), v))
	})
	defer sum.Finalize()
	if got := sum.MustCall1(lazy).(*tensors.Tensor); !slices.Equal(testutil.Float32s(t, got), []float32{12, 30}) {
		t.Errorf("product with the returned Transposed: %v, want [12 30]", testutil.Float32s(t, got))
	}
}

// TestTransposedPolicy: a Transposed follows its inner array's fallback policy, and a conversion
// to another dtype converts the inner array.
func TestTransposedPolicy(t *testing.T) {
	g := graph.NewGraph(newBackend(t), "policy")
	forbid := NewTransposed(graphToy[forbidTag](counting(g, 2, 3), 1), []int{1, 0})
	if err := recoverError(func() { Exp(forbid) }); !errors.Is(err, ErrMaterializationForbidden) {
		t.Errorf("exp of a transposed forbid toy: %v, want ErrMaterializationForbidden", err)
	}
	converted := ConvertDType(NewTransposed(graphToy[plainTag](counting(g, 2, 3), 1), []int{1, 0}), dtypes.Float64)
	if converted.Shape().DType != dtypes.Float64 || !slices.Equal(converted.Shape().Dimensions, []int{3, 2}) {
		t.Errorf("converted: %s", converted.Shape())
	}
}
