package customcall_test

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/internal/customcall"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/internal/xlaffi"
	"github.com/quanta-ml/quanta/internal/xlaffi/ffitest"
	"github.com/quanta-ml/quanta/runtime"
	"k8s.io/klog/v2"
)

// withKernels returns the process-wide backend after registering ffitest's handlers with its
// plugin, or skips the test when custom calls are not supported there.
func withKernels(t *testing.T) backends.Backend {
	t.Helper()
	backend := testutil.Backend(t)
	if err := customcall.Check(backend); err != nil {
		t.Skipf("custom calls unsupported on %s: %v (TestRefusedOnOtherBackends covers this backend)", backend.Name(), err)
	}
	info := runtime.MustReport()
	if info.PluginName != "cpu" {
		t.Skipf("the test handlers are host code; the XLA plugin is %q", info.PluginName)
	}
	p, err := xlaffi.Open(info.PluginPath)
	if err != nil {
		t.Fatalf("xlaffi.Open(%q): %+v", info.PluginPath, err)
	}
	if err := p.Register(ffitest.Handlers()...); err != nil {
		t.Fatalf("registering ffitest's handlers: %+v", err)
	}
	return backend
}

// axpby is y = a·x + b·z as graph ops, rewritten into a call of ffitest.Axpby; the formulation is
// x + z, so a result equal to a·x + b·z proves the handler computed it with the attributes.
func axpby(x, z *graph.Node, a, b float64) *graph.Node {
	y := graph.Add(x, z)
	customcall.MustRewrite(y, ffitest.Axpby, []*graph.Node{x, z}, customcall.Attributes{"a": a, "b": float32(b)})
	return y
}

// u8dotFormulation is what ffitest.U8Dot computes, as graph ops: x @ ((codes − zero)·scale).
func u8dotFormulation(x, codes, scale *graph.Node, zero int) *graph.Node {
	w := graph.Mul(graph.AddScalar(graph.ConvertDType(codes, dtypes.Float32), -zero), graph.ExpandAxes(scale, 0))
	return graph.DotGeneral(x, []int{1}, nil, w, []int{0}, nil)
}

// u8dot is u8dotFormulation with its product rewritten into a call of ffitest.U8Dot.
func u8dot(x, codes, scale *graph.Node, zero int) *graph.Node {
	y := u8dotFormulation(x, codes, scale, zero)
	customcall.MustRewrite(y, ffitest.U8Dot, []*graph.Node{x, codes, scale}, customcall.Attributes{"zero": zero})
	return y
}

// u8dotWant computes U8Dot's result in Go.
func u8dotWant(x [][]float32, codes [][]uint8, scale []float32, zero int) [][]float32 {
	y := make([][]float32, len(x))
	for m := range x {
		y[m] = make([]float32, len(scale))
		for n := range scale {
			var sum float64
			for k := range x[m] {
				sum += float64(x[m][k]) * float64(int(codes[k][n])-zero)
			}
			y[m][n] = float32(sum) * scale[n]
		}
	}
	return y
}

// matrixOf returns a [rows][cols] matrix of successive draws, row by row.
func matrixOf[T any](rows, cols int, draw func() T) [][]T {
	m := make([][]T, rows)
	for i := range m {
		m[i] = make([]T, cols)
		for j := range m[i] {
			m[i][j] = draw()
		}
	}
	return m
}

func randomMatrix(rng *rand.Rand, rows, cols int) [][]float32 {
	return matrixOf(rows, cols, func() float32 { return float32(rng.NormFloat64()) })
}

func randomCodes(rng *rand.Rand, rows, cols int) [][]uint8 {
	return matrixOf(rows, cols, func() uint8 { return uint8(rng.Intn(256)) })
}

func randomVector(rng *rand.Rand, n int) []float32 {
	return randomMatrix(rng, 1, n)[0]
}

// flat returns the values of a tensor as float64s.
func flat(t *testing.T, x *tensors.Tensor) []float64 {
	t.Helper()
	switch x.DType() {
	case dtypes.Float32:
		v := tensors.MustCopyFlatData[float32](x)
		out := make([]float64, len(v))
		for i, f := range v {
			out[i] = float64(f)
		}
		return out
	case dtypes.BFloat16:
		v := tensors.MustCopyFlatData[bfloat16.BFloat16](x)
		out := make([]float64, len(v))
		for i, f := range v {
			out[i] = float64(f.Float32())
		}
		return out
	}
	t.Fatalf("unexpected dtype %s", x.DType())
	return nil
}

// closeTo reports the first element of got that differs from want by more than tol·(1+|want|).
func closeTo(got, want []float64, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > tol*(1+math.Abs(want[i])) {
			return fmt.Errorf("element %d: got %g, want %g (tolerance %g relative)", i, got[i], want[i], tol)
		}
	}
	return nil
}

func flatten(m [][]float32) []float64 {
	var out []float64
	for _, row := range m {
		for _, v := range row {
			out = append(out, float64(v))
		}
	}
	return out
}

func toBF16(v []float32) []bfloat16.BFloat16 {
	out := make([]bfloat16.BFloat16, len(v))
	for i, f := range v {
		out[i] = bfloat16.FromFloat32(f)
	}
	return out
}

func roundBF16(v []float32) []float32 {
	out := make([]float32, len(v))
	for i, f := range v {
		out[i] = bfloat16.FromFloat32(f).Float32()
	}
	return out
}

// TestGraphs runs graphs with custom calls against the values computed in Go, and checks that
// each handler ran once per execution.
func TestGraphs(t *testing.T) {
	backend := withKernels(t)
	rng := rand.New(rand.NewSource(1))
	x, z := randomVector(rng, 6), randomVector(rng, 6)
	xm := randomMatrix(rng, 3, 16)
	codes, scale := randomCodes(rng, 16, 40), randomVector(rng, 40)
	ax := func(a, b float64, x, z []float32) []float64 {
		out := make([]float64, len(x))
		for i := range x {
			out[i] = a*float64(x[i]) + b*float64(z[i])
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		fn    any
		args  []any
		want  []float64
		tol   float64
		calls map[string]int64 // handler executions per run
	}{{
		name:  "axpby float32",
		fn:    func(x, z *graph.Node) *graph.Node { return axpby(x, z, 2, -3) },
		args:  []any{x, z},
		want:  ax(2, -3, x, z),
		tol:   1e-6,
		calls: map[string]int64{ffitest.Axpby: 1},
	}, {
		name:  "axpby bfloat16",
		fn:    func(x, z *graph.Node) *graph.Node { return axpby(x, z, 0.5, 4) },
		args:  []any{toBF16(x), toBF16(z)},
		want:  ax(0.5, 4, roundBF16(x), roundBF16(z)),
		tol:   1e-2,
		calls: map[string]int64{ffitest.Axpby: 1},
	}, {
		name: "ops before and after",
		fn: func(x, z *graph.Node) *graph.Node {
			return graph.AddScalar(graph.MulScalar(axpby(graph.Square(x), z, 2, -3), 0.5), 1)
		},
		args: []any{x, z},
		want: func() []float64 {
			sq := make([]float32, len(x))
			for i := range x {
				sq[i] = x[i] * x[i]
			}
			out := ax(2, -3, sq, z)
			for i := range out {
				out[i] = out[i]*0.5 + 1
			}
			return out
		}(),
		tol:   1e-6,
		calls: map[string]int64{ffitest.Axpby: 1},
	}, {
		name:  "chained",
		fn:    func(x, z *graph.Node) *graph.Node { return axpby(axpby(x, z, 2, -3), z, 0.5, 1) },
		args:  []any{x, z},
		want:  ax(0.5, 1, func() []float32 { return testutil.Converted[float32](ax(2, -3, x, z)) }(), z),
		tol:   1e-6,
		calls: map[string]int64{ffitest.Axpby: 2},
	}, {
		name: "two kernels",
		fn: func(x, codes, scale *graph.Node) *graph.Node {
			return u8dot(axpby(x, graph.Neg(x), 1, 0.5), codes, scale, 128)
		},
		args: []any{xm, codes, scale},
		want: func() []float64 {
			half := make([][]float32, len(xm))
			for i, row := range xm {
				half[i] = make([]float32, len(row))
				for j, v := range row {
					half[i][j] = v - 0.5*v
				}
			}
			return flatten(u8dotWant(half, codes, scale, 128))
		}(),
		tol:   1e-5,
		calls: map[string]int64{ffitest.Axpby: 1, ffitest.U8Dot: 1},
	}, {
		name: "probe",
		fn: func(x *graph.Node) *graph.Node {
			y := graph.AddScalar(x, 1)
			customcall.MustRewrite(y, xlaffi.ProbeTarget, []*graph.Node{x}, nil)
			return y
		},
		args: []any{x},
		want: ax(1, 0, x, x),
		tol:  0,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			before := map[string]int64{}
			for target := range tc.calls {
				before[target] = ffitest.Calls(target)
			}
			out, err := graph.MustNewExecAny(backend, tc.fn).Exec1(tc.args...)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			if err := closeTo(flat(t, out), tc.want, tc.tol); err != nil {
				t.Error(err)
			}
			for target, n := range tc.calls {
				if got := ffitest.Calls(target) - before[target]; got != n {
					t.Errorf("%s ran %d times, want %d", target, got, n)
				}
			}
		})
	}
}

// TestAttributes checks that every attribute type reaches the handler.
func TestAttributes(t *testing.T) {
	backend := withKernels(t)
	for _, tc := range []struct {
		name  string
		attrs customcall.Attributes
		want  []float64
	}{
		{"int float32 string array", customcall.Attributes{"i": 7, "f": float32(0.25), "s": "Q", "v": []int64{1, 2, 3}},
			[]float64{7, 0.25, 1 + 1000*'Q', 6, 0}},
		{"int32 float64 empty", customcall.Attributes{"i": int32(-5), "f": 1.5, "s": "", "v": []int64{}, "missing": 1},
			[]float64{-5, 1.5, 0, 0, 1}},
		{"bool int64 escapes", customcall.Attributes{"i": true, "f": -2e-3, "s": "a\"b\\c\n\u00e9", "v": []int64{-1 << 40, 1 << 40}},
			[]float64{1, -2e-3, 8 + 1000*'a', 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := graph.MustNewExec(backend, func(x *graph.Node) *graph.Node {
				y := graph.Neg(x)
				customcall.MustRewrite(y, ffitest.Attrs, []*graph.Node{x}, tc.attrs)
				return y
			}).Exec1(make([]float32, 5))
			if err != nil {
				t.Fatalf("%+v", err)
			}
			if err := closeTo(flat(t, out), tc.want, 1e-7); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestU8Dot checks a packed-weight product (uint8 and float32 operands) on a few shapes; the
// kernel splits its columns over XLA's intra-op thread pool.
func TestU8Dot(t *testing.T) {
	backend := withKernels(t)
	rng := rand.New(rand.NewSource(2))
	exec := graph.MustNewExec(backend, func(x, codes, scale *graph.Node) *graph.Node { return u8dot(x, codes, scale, 100) })
	for _, shape := range [][3]int{{1, 64, 48}, {4, 33, 7}, {8, 256, 512}} {
		m, k, n := shape[0], shape[1], shape[2]
		t.Run(fmt.Sprintf("m=%d/k=%d/n=%d", m, k, n), func(t *testing.T) {
			x, codes, scale := randomMatrix(rng, m, k), randomCodes(rng, k, n), randomVector(rng, n)
			out, err := exec.Exec1(x, codes, scale)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			if err := closeTo(flat(t, out), flatten(u8dotWant(x, codes, scale, 100)), 1e-3); err != nil { // float32 sums of up to 256 terms
				t.Error(err)
			}
		})
	}
	t.Logf("XLA intra-op pool: %d threads; column chunks run off the calling thread so far: %d",
		ffitest.PoolThreads(), ffitest.PoolChunks())
}

// TestCompileOnce checks that repeated executions reuse one compiled program, and run the handler
// each time.
func TestCompileOnce(t *testing.T) {
	backend := withKernels(t)
	builds := 0
	exec := graph.MustNewExec(backend, func(x, z *graph.Node) *graph.Node {
		builds++
		return axpby(x, z, 1, 1)
	})
	before := ffitest.Calls(ffitest.Axpby)
	for i := range 4 {
		v := float32(i)
		out := exec.MustExec1([]float32{v, 1}, []float32{1, v})
		if got := tensors.MustCopyFlatData[float32](out); got[0] != v+1 || got[1] != v+1 {
			t.Errorf("run %d: got %v, want [%g %g]", i, got, v+1, v+1)
		}
	}
	if builds != 1 {
		t.Errorf("the graph was built %d times for one shape, want 1", builds)
	}
	if got := ffitest.Calls(ffitest.Axpby) - before; got != 4 {
		t.Errorf("the handler ran %d times in 4 executions", got)
	}
	exec.MustExec1([]float32{1, 2, 3}, []float32{1, 2, 3})
	if builds != 2 {
		t.Errorf("a new shape built the graph %d times in all, want 2", builds)
	}
}

// TestExecutionErrors checks that a target nobody registered fails the compile, and a handler's
// error fails the execution, each with a message, without harming the process.
func TestExecutionErrors(t *testing.T) {
	backend := withKernels(t)
	for _, tc := range []struct {
		name string
		fn   any
		args []any
		want []string // in the error message
	}{{
		name: "unregistered target",
		fn: func(x *graph.Node) *graph.Node {
			y := graph.Neg(x)
			customcall.MustRewrite(y, "quanta_test_not_registered", []*graph.Node{x}, nil)
			return y
		},
		args: []any{[]float32{1}},
		want: []string{"quanta_test_not_registered"},
	}, {
		name: "handler refuses float64",
		fn:   func(x, z *graph.Node) *graph.Node { return axpby(x, z, 1, 1) },
		args: []any{[]float64{1}, []float64{2}},
		want: []string{"quanta_test_axpby", "float64", "accepted"},
	}, {
		name: "missing attribute",
		fn: func(x *graph.Node) *graph.Node {
			y := graph.Neg(x)
			customcall.MustRewrite(y, ffitest.Attrs, []*graph.Node{x}, customcall.Attributes{"i": 1})
			return y
		},
		args: []any{make([]float32, 5)},
		want: []string{"quanta_test_attrs: attribute f missing"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := graph.MustNewExecAny(backend, tc.fn).Exec1(tc.args...)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q: %v", w, err)
				}
			}
			t.Logf("%.300s", err)
		})
	}
	// The plugin still works.
	out := graph.MustNewExec(backend, func(x, z *graph.Node) *graph.Node { return axpby(x, z, 1, 1) }).
		MustExec1([]float32{1}, []float32{2})
	if got := tensors.MustCopyFlatData[float32](out); got[0] != 3 {
		t.Errorf("after the errors: got %v, want [3]", got)
	}
}

// TestRewriteErrors checks the rewrites Rewrite refuses, leaving the graph as it was.
func TestRewriteErrors(t *testing.T) {
	backend := withKernels(t)
	other := graph.NewGraph(backend, "other")
	foreign := graph.Parameter(other, "foreign", shapes.Make(dtypes.Float32, 3))
	for _, tc := range []struct {
		name string
		// rewrite builds nodes in g and attempts a rewrite, returning its error.
		rewrite func(g *graph.Graph, x *graph.Node) error
	}{
		{"bad target", func(g *graph.Graph, x *graph.Node) error {
			return customcall.Rewrite(graph.Neg(x), "quanta test", []*graph.Node{x}, nil)
		}},
		{"bad attribute name", func(g *graph.Graph, x *graph.Node) error {
			return customcall.Rewrite(graph.Neg(x), ffitest.Axpby, []*graph.Node{x}, customcall.Attributes{"a-b": 1})
		}},
		{"bad attribute value", func(g *graph.Graph, x *graph.Node) error {
			return customcall.Rewrite(graph.Neg(x), ffitest.Axpby, []*graph.Node{x}, customcall.Attributes{"a": complex(1, 2)})
		}},
		{"parameter", func(g *graph.Graph, x *graph.Node) error {
			return customcall.Rewrite(x, ffitest.Axpby, []*graph.Node{x}, nil)
		}},
		{"constant", func(g *graph.Graph, x *graph.Node) error {
			return customcall.Rewrite(graph.Const(g, []float32{1, 2, 3}), ffitest.Axpby, []*graph.Node{x}, nil)
		}},
		{"operand built after the node", func(g *graph.Graph, x *graph.Node) error {
			y := graph.Neg(x)
			return customcall.Rewrite(y, ffitest.Axpby, []*graph.Node{x, graph.Exp(x)}, nil)
		}},
		{"operand of another graph", func(g *graph.Graph, x *graph.Node) error {
			return customcall.Rewrite(graph.Neg(x), ffitest.Axpby, []*graph.Node{x, foreign}, nil)
		}},
		{"nil operand", func(g *graph.Graph, x *graph.Node) error {
			return customcall.Rewrite(graph.Neg(x), ffitest.Axpby, []*graph.Node{nil}, nil)
		}},
		{"operand is the node", func(g *graph.Graph, x *graph.Node) error {
			y := graph.Neg(x)
			return customcall.Rewrite(y, ffitest.Axpby, []*graph.Node{y}, nil)
		}},
		{"rewritten twice", func(g *graph.Graph, x *graph.Node) error {
			y := graph.Neg(x)
			customcall.MustRewrite(y, ffitest.Axpby, []*graph.Node{x, x}, nil)
			return customcall.Rewrite(y, ffitest.Axpby, []*graph.Node{x, x}, nil)
		}},
		{"value of another node", func(g *graph.Graph, x *graph.Node) error {
			y := graph.Neg(x)
			return customcall.Rewrite(graph.Identity(y), ffitest.Axpby, []*graph.Node{x}, nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := graph.NewGraph(backend, "rewrite_errors")
			defer g.Finalize()
			err := tc.rewrite(g, graph.Parameter(g, "x", shapes.Make(dtypes.Float32, 3)))
			if !errors.Is(err, customcall.ErrInvalid) {
				t.Fatalf("got %v, want an error wrapping ErrInvalid", err)
			}
			t.Logf("%v", err)
		})
	}
}

// TestIdentityOfRewrittenNode checks that an identity of the rewritten node reads the call's result.
func TestIdentityOfRewrittenNode(t *testing.T) {
	backend := withKernels(t)
	out := graph.MustNewExec(backend, func(x, z *graph.Node) (*graph.Node, *graph.Node) {
		y := graph.Add(x, z)
		id := graph.Identity(y)
		customcall.MustRewrite(y, ffitest.Axpby, []*graph.Node{x, z}, customcall.Attributes{"a": 2.0, "b": 0.0})
		return y, graph.AddScalar(id, 1)
	}).MustExec([]float32{1, 2}, []float32{5, 5})
	if got := tensors.MustCopyFlatData[float32](out[1]); got[0] != 3 || got[1] != 5 {
		t.Errorf("identity of the call + 1 = %v, want [3 5]", got)
	}
}

// TestRefusedOnOtherBackends checks the clean refusal where custom calls cannot be emitted: the
// rewrite changes nothing and the formulation runs.
func TestRefusedOnOtherBackends(t *testing.T) {
	backend := testutil.Backend(t)
	if customcall.Supported(backend) {
		t.Skipf("custom calls are supported on %s (the other tests cover it)", backend.Name())
	}
	var err error
	out := graph.MustNewExec(backend, func(x, z *graph.Node) *graph.Node {
		y := graph.Add(x, z)
		err = customcall.Rewrite(y, ffitest.Axpby, []*graph.Node{x, z}, customcall.Attributes{"a": 2.0, "b": -3.0})
		return y
	}).MustExec1([]float32{1, 2}, []float32{3, 4})
	if !errors.Is(err, customcall.ErrUnsupported) {
		t.Errorf("Rewrite on %s: %v, want an error wrapping ErrUnsupported", backend.Name(), err)
	}
	if got := tensors.MustCopyFlatData[float32](out); got[0] != 4 || got[1] != 6 {
		t.Errorf("formulation x + z = %v, want [4 6]", got)
	}
	t.Logf("%v", err)
}

// TestGradient checks the first claim of the design: the gradient through a rewritten product is
// the gradient of its formulation (GoMLX differentiates the formulation; the custom call gives
// the forward value), checked against the plain formulation and by finite differences.
func TestGradient(t *testing.T) {
	backend := withKernels(t)
	rng := rand.New(rand.NewSource(3))
	const zero = 120
	x, codes, scale := randomMatrix(rng, 2, 12), randomCodes(rng, 12, 5), randomVector(rng, 5)
	build := func(rewrite bool) *graph.Exec {
		return graph.MustNewExec(backend, func(x, codes, scale *graph.Node) (*graph.Node, *graph.Node, *graph.Node) {
			var y *graph.Node
			if rewrite {
				y = u8dot(x, codes, scale, zero)
			} else {
				y = u8dotFormulation(x, codes, scale, zero)
			}
			loss := graph.ReduceAllSum(graph.Square(y)) // its gradient reads y: the call's result
			grads := graph.Gradient(loss, x, scale)
			return loss, grads[0], grads[1]
		})
	}
	before := ffitest.Calls(ffitest.U8Dot)
	rewritten := build(true).MustExec(x, codes, scale)
	if ffitest.Calls(ffitest.U8Dot) == before {
		t.Fatal("the rewritten graph did not call the handler")
	}
	plain := build(false).MustExec(x, codes, scale)
	for i, name := range []string{"loss", "d loss/d x", "d loss/d scale"} {
		got, want := flat(t, rewritten[i]), flat(t, plain[i])
		if err := closeTo(got, want, 1e-5); err != nil {
			t.Errorf("%s: rewritten vs plain formulation: %v", name, err)
		}
		t.Logf("%s: %d values, largest |rewritten - plain| = %.3g, largest |plain| = %.3g", name, len(got),
			maxAbsDiff(got, want), maxAbsDiff(want, make([]float64, len(want))))
		if i > 0 && slicesAllZero(got) {
			t.Errorf("%s is all zero", name)
		}
	}
	// Finite differences of the rewritten forward loss.
	loss := graph.MustNewExec(backend, func(x, codes, scale *graph.Node) *graph.Node {
		return graph.ReduceAllSum(graph.Square(u8dot(x, codes, scale, zero)))
	})
	lossAt := func(x [][]float32, scale []float32) float64 { return flat(t, loss.MustExec1(x, codes, scale))[0] }
	gradX, gradScale := flat(t, rewritten[1]), flat(t, rewritten[2])
	const eps = 1e-2
	for _, at := range [][2]int{{0, 0}, {1, 7}} {
		xp, xm := cloneMatrix(x), cloneMatrix(x)
		xp[at[0]][at[1]] += eps
		xm[at[0]][at[1]] -= eps
		fd := (lossAt(xp, scale) - lossAt(xm, scale)) / (2 * eps)
		if g := gradX[at[0]*12+at[1]]; math.Abs(g-fd) > 1e-2*(1+math.Abs(fd)) {
			t.Errorf("d loss/d x%v = %g, finite difference %g", at, g, fd)
		}
	}
	for _, n := range []int{0, 4} {
		sp, sm := append([]float32(nil), scale...), append([]float32(nil), scale...)
		sp[n] += eps
		sm[n] -= eps
		fd := (lossAt(x, sp) - lossAt(x, sm)) / (2 * eps)
		if g := gradScale[n]; math.Abs(g-fd) > 1e-2*(1+math.Abs(fd)) {
			t.Errorf("d loss/d scale[%d] = %g, finite difference %g", n, g, fd)
		}
	}
}

func maxAbsDiff(a, b []float64) float64 {
	var m float64
	for i := range a {
		m = max(m, math.Abs(a[i]-b[i]))
	}
	return m
}

func cloneMatrix(m [][]float32) [][]float32 {
	out := make([][]float32, len(m))
	for i := range m {
		out[i] = append([]float32(nil), m[i]...)
	}
	return out
}

func slicesAllZero(v []float64) bool {
	for _, f := range v {
		if f != 0 {
			return false
		}
	}
	return true
}

// TestDeadDecodeRemoved checks the second claim of the design from what XLA receives and runs: in
// a forward-only graph the decode that the rewritten product no longer reads is in the StableHLO
// program given to XLA (GoMLX logs it at klog level 2) and gone from the program XLA runs
// (XLA_FLAGS=--xla_dump_to), which holds the custom call. GoMLX exposes neither, so the test
// reruns itself to capture them.
func TestDeadDecodeRemoved(t *testing.T) {
	backend := withKernels(t)
	if testutil.InHLOChild() {
		logFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(logFlags)
		for name, value := range map[string]string{"v": "2", "logtostderr": "true"} {
			if err := logFlags.Set(name, value); err != nil {
				t.Fatal(err)
			}
		}
		rng := rand.New(rand.NewSource(4))
		graph.MustNewExec(backend, func(x, codes, scale *graph.Node) *graph.Node {
			return graph.AddScalar(u8dot(x, codes, scale, 128), 1)
		}).MustExec1(randomMatrix(rng, 3, 40), randomCodes(rng, 40, 24), randomVector(rng, 24))
		klog.Flush()
		return
	}
	dir, log := testutil.DumpHLO(t)
	program := string(log)
	if at := strings.Index(program, "StableHLO program:"); at >= 0 {
		program = program[at:]
		if end := strings.Index(program, "\n}\n"); end >= 0 {
			program = program[:end+3]
		}
	} else {
		t.Fatalf("the child did not log the StableHLO program:\n%.2000s", log)
	}
	read := func(pattern string) string {
		files, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(data), "u8[40,24]") {
				return string(data)
			}
		}
		t.Fatalf("no %s dump holds the u8[40,24] program (%d files)", pattern, len(files))
		return ""
	}
	before, after := read("*before_optimizations.txt"), read("*after_optimizations.txt")
	const call = `custom_call_target="quanta_test_u8dot"`
	for _, tc := range []struct {
		what, text, fragment string
		want                 bool
	}{
		{"StableHLO: the custom call", program, `call_target_name = "quanta_test_u8dot"`, true},
		{"StableHLO: the decode of the codes", program, "(tensor<40x24xui8>) -> tensor<40x24xf32>", true},
		{"StableHLO: no dot_general left", program, "stablehlo.dot_general", false},
		{"HLO before optimizations: the custom call", before, call, true},
		{"HLO after optimizations: the custom call", after, call, true},
		{"HLO after optimizations: the decoded weight", after, "f32[40,24]", false},
		{"HLO after optimizations: a convert", after, "convert(", false},
		{"HLO after optimizations: a dot", after, " dot(", false},
	} {
		if strings.Contains(tc.text, tc.fragment) != tc.want {
			t.Errorf("%s (%q): present = %v, want %v", tc.what, tc.fragment, !tc.want, tc.want)
		}
	}
	t.Logf("the decoded weight in XLA's HLO before its optimizations: %v", strings.Contains(before, "f32[40,24]"))
	t.Logf("%s", program)
	if at := strings.Index(after, "\nENTRY"); at >= 0 {
		t.Logf("optimized entry computation:%s", after[at:])
	}
}
