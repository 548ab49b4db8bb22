package implicitarray_test

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	. "github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// hostLayer is a parameter tree on the host; graphLayer mirrors it inside the graph.
type hostLayer struct {
	W     *toy[plainTag]
	Bias  *tensors.Tensor
	Extra map[string]Value
	List  []Value
}

type graphLayer struct {
	W     *toy[plainTag]
	Bias  *graph.Node
	Extra map[string]Value
	List  []Value
}

type layerOut struct {
	Y Value
	W Value
}

func TestExecRoundTripStructures(t *testing.T) {
	backend := newBackend(t)
	builds := 0
	e := MustNewExec(backend, func(x *graph.Node, p graphLayer) (layerOut, []*graph.Node) {
		builds++
		y := Add(MatMul(x, p.W), p.Bias)
		second := Materialize(p.Extra["b"])
		return layerOut{Y: y, W: p.W}, []*graph.Node{second, Materialize(p.List[1])}
	})
	params := hostLayer{
		W:    hostToy[plainTag]([][]float32{{1, 2}, {3, 4}}, 10),
		Bias: tensors.FromValue([][]float32{{0.5, -0.5}}),
		Extra: map[string]Value{
			"a": tensors.FromValue([]float32{1}),
			"b": hostToy[plainTag]([]float32{7, 8}, 2),
		},
		List: []Value{tensors.FromValue(float32(3)), hostToy[plainTag]([]float32{1}, 4)},
	}
	out := e.MustCall([][]float32{{1, 1}}, params)
	result := out[0].(layerOut)
	if got := testutil.Float64s(t, result.Y.(*tensors.Tensor)); got[0] != 40.5 || got[1] != 59.5 {
		t.Errorf("y = %v, want [40.5 59.5]", got)
	}
	// The implicit array comes back to the host with the same type and metadata.
	w, ok := result.W.(*toy[plainTag])
	if !ok || !w.payload.IsTensor() || !w.scale.IsTensor() {
		t.Fatalf("W came back as %T with components %v", result.W, w.Components())
	}
	if got := testutil.Float64s(t, w.payload.Tensor()); got[3] != 4 {
		t.Errorf("W payload = %v", got)
	}
	rest := out[1].([]*tensors.Tensor)
	if got := testutil.Float64s(t, rest[0]); got[0] != 14 || got[1] != 16 {
		t.Errorf("extra b = %v, want [14 16]", got)
	}
	if got := testutil.Float64s(t, rest[1]); got[0] != 4 {
		t.Errorf("list[1] = %v, want [4]", got)
	}

	// Same structure, shapes and metadata: cached. Different metadata: a new graph.
	e.MustCall([][]float32{{2, 2}}, params)
	if builds != 1 {
		t.Errorf("graph built %d times for identical structure, want 1", builds)
	}
	params.W.warn = true
	e.MustCall([][]float32{{2, 2}}, params)
	if builds != 2 {
		t.Errorf("graph built %d times after a metadata change, want 2", builds)
	}
}

func TestTreeDefUnflatten(t *testing.T) {
	tree := map[string]any{"w": hostToy[plainTag]([]float32{1, 2}, 3), "n": []float64{1, 2, 3}}
	leaves, def, err := Flatten(tree)
	if err != nil {
		t.Fatal(err)
	}
	if def.NumLeaves() != 3 || len(leaves) != 3 {
		t.Fatalf("leaves %d/%d, want 3 (numbers, payload, scale)", def.NumLeaves(), len(leaves))
	}
	wantShapes := []shapes.Shape{shapes.Make(dtypes.Float64, 3), shapes.Make(dtypes.Float32, 2), shapes.Make(dtypes.Float32)}
	for i, s := range def.LeafShapes() {
		if !s.Equal(wantShapes[i]) {
			t.Errorf("leaf %d shape %s, want %s", i, s, wantShapes[i])
		}
	}
	back, err := def.Unflatten(leaves)
	if err != nil {
		t.Fatal(err)
	}
	w := back.(map[string]any)["w"].(*toy[plainTag])
	if w.payload.Tensor() != leaves[1] || w.scale.Tensor() != leaves[2] {
		t.Errorf("unflatten did not put the leaves back in place")
	}
	arrays, defWith, err := FlattenWithImplicit(tree)
	if err != nil || len(arrays) != 2 || defWith.NumLeaves() != 2 {
		t.Fatalf("FlattenWithImplicit: %d leaves, err %v; want the tensor and the array whole", len(arrays), err)
	}
	if _, ok := arrays[1].(*toy[plainTag]); !ok {
		t.Errorf("leaf 1 is %T, want the implicit array", arrays[1])
	}
}

// TestUnflattenNilLeaf: a nil in place of a plain leaf is an error naming its path, as it is in
// place of an implicit array's component, not a panic from package reflect.
func TestUnflattenNilLeaf(t *testing.T) {
	tree := map[string]any{"w": hostToy[plainTag]([]float32{1, 2}, 3), "n": []float64{1, 2, 3}}
	leaves, def, err := Flatten(tree)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"tree[n]: leaf nil", "tree[w].component[0]: leaf nil", "tree[w].component[1]: leaf nil"} {
		edited := append([]any(nil), leaves...)
		edited[i] = nil
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Unflatten with leaf %d nil panicked: %v", i, r)
				}
			}()
			if back, err := def.Unflatten(edited); err == nil || back != nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Unflatten with leaf %d nil: %v, %v; want an error containing %q", i, back, err, want)
			}
		}()
	}
}

func TestGradientThroughMaterialize(t *testing.T) {
	backend := newBackend(t)
	out := run(t, backend, func(g *graph.Graph) []*graph.Node {
		payload := graph.Const(g, []float32{1, 2, 3})
		scale := graph.Const(g, float32(0.5))
		x := &toy[plainTag]{payload: NodeComponent(payload), scale: NodeComponent(scale)}
		c := graph.Const(g, []float32{2, -1, 4})
		loss := graph.ReduceAllSum(graph.Mul(Materialize(x), c))
		grads := graph.Gradient(loss, payload, scale)
		return grads
	})
	// d/dpayload = c*scale; d/dscale = sum(c*payload) = 2 - 2 + 12.
	if got := testutil.Float64s(t, out[0]); got[0] != 1 || got[1] != -0.5 || got[2] != 2 {
		t.Errorf("grad payload = %v, want [1 -0.5 2]", got)
	}
	if got := testutil.Float64s(t, out[1]); got[0] != 12 {
		t.Errorf("grad scale = %v, want 12", got)
	}
}

func TestBadInput(t *testing.T) {
	backend := newBackend(t)
	g := graph.NewGraph(backend, "bad")
	x := graphToy[plainTag](graph.Const(g, [][]float32{{1, 2, 3}, {4, 5, 6}}), 1)
	for _, tc := range []struct {
		name string
		fn   func()
		want []string
	}{
		{"mismatched shapes", func() { Add(x, graph.Const(g, []float32{1, 2})) },
			[]string{"implicitarray.add", "plainTag", "[2 3]", "[2]", "do not broadcast", "accepted"}},
		{"nil operand", func() { Mul(x, nil) }, []string{"implicitarray.mul", "nil", "accepted"}},
		{"nil typed node", func() { Exp((*graph.Node)(nil)) }, []string{"implicitarray.exp", "nil"}},
		{"host tensor", func() { Exp(tensors.FromValue([]float32{1})) }, []string{"exp", "*tensors.Tensor", "Exec"}},
		{"unsupported einsum", func() { Einsum("ab,bc->a", x, graph.Const(g, [][]float32{{1}, {2}, {3}})) },
			[]string{"einsum", "only in rhs", "[2 3]"}},
		{"bad reshape", func() { Reshape(x, 4, 2) }, []string{"reshape", "plainTag", "[4 2]"}},
		{"reshape of an empty array to -1", func() { Reshape(graph.Zeros(g, shapes.Make(dtypes.Float32, 0, 4)), 0, -1) },
			[]string{"reshape", "[0 4]", "[0 -1]", "accepted"}},
		{"negative broadcast size", func() { BroadcastInDim(x, []int{2, -3}, []int{0, 1}) },
			[]string{"broadcast_in_dim", "[2 -3]", "accepted"}},
		{"concatenate scalars", func() { Concatenate([]Value{graph.Const(g, float32(1)), graph.Const(g, float32(2))}, 0) },
			[]string{"concatenate", "rank 0", "accepted"}},
		{"bad transpose", func() { TransposeAllAxes(x, 0, 0) }, []string{"transpose", "repeat", "accepted: distinct axes"}},
		{"dot axes of other sizes", func() { DotGeneral(x, []int{1}, nil, x, []int{0}, nil) },
			[]string{"dot_general", "paired but differ", "accepted: paired axes of equal dimensions"}},
		{"dot axis both contracting and batch", func() { DotGeneral(x, []int{0}, []int{0}, x, []int{0}, []int{0}) },
			[]string{"dot_general", "both contracting and batch", "accepted"}},
		{"transpose axis out of range", func() { Transpose(x, 0, 5) }, []string{"transpose", "out of range"}},
		{"bad dot", func() { DotGeneral(x, []int{1}, nil, x, []int{1, 0}, nil) }, []string{"dot_general", "differ in count", "accepted: as many lhs as rhs axes"}},
		{"axis out of range", func() { ReduceSum(x, 2) }, []string{"reduce_sum", "out of range", "accepted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := recoverError(tc.fn)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}

	// Host side: errors, not panics.
	_, _, err := Flatten(struct {
		W    *tensors.Tensor
		Name string
	}{tensors.FromValue([]float32{1}), "w"})
	if err == nil || !strings.Contains(err.Error(), "tree.Name") || !strings.Contains(err.Error(), "string") {
		t.Errorf("non-array leaf: got %v, want an error naming tree.Name and its type", err)
	}
	e := MustNewExec(backend, func(a *graph.Node) *graph.Node { return a })
	if _, err := e.Call(1, 2); err == nil || !strings.Contains(err.Error(), "2 arguments") {
		t.Errorf("arity: got %v", err)
	}
	if _, err := e.Call(map[string]any{"w": nil}); err == nil || !strings.Contains(err.Error(), "nil leaf") {
		t.Errorf("nil leaf: got %v", err)
	}
	// A host tensor where the function takes an implicit array: the error names the tensor.
	toyExec := MustNewExec(backend, func(a *toy[plainTag]) *graph.Node { return Materialize(a) })
	if _, err := toyExec.Call(tensors.FromValue([]float32{1})); err == nil || !strings.Contains(err.Error(), "a *tensors.Tensor does not fit") {
		t.Errorf("tensor for an implicit array: got %v, want an error saying the *tensors.Tensor does not fit", err)
	}
	if _, err := NewExec(backend, 3); err == nil {
		t.Errorf("NewExec accepted a non-function")
	}
	if _, err := NewExec(backend, func(a *graph.Node) int { return 0 }); err == nil {
		t.Errorf("NewExec accepted an int result")
	}
	err = recoverError(func() { Materialize(tensors.FromValue(1)) })
	if err == nil || !strings.Contains(err.Error(), "cannot materialize") || !strings.Contains(err.Error(), "*tensors.Tensor") {
		t.Errorf("Materialize of a host tensor: got %v", err)
	}
}
