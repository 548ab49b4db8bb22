package kernels_test

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/internal/kernelreg"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/kernels"
)

// TestHandlerErrors: a custom call of a kernel whose operands or attributes do not fit the
// kernel's contract fails its execution with an error naming the target and what it accepts
// (never a crash or a result written from the wrong sizes); the packed-signs kernels, which take
// no per-K scale and only a float32 one, say so.
func TestHandlerErrors(t *testing.T) {
	backend := testutil.Backend(t)
	if _, err := kernels.Attach(backend); err != nil {
		t.Skipf("no kernels: %v", err)
	}
	emit := kernelreg.For(backend).Emit
	f32 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }
	u8 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.Uint8, dims...) }
	i8 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.Int8, dims...) }
	kind := func(k kernelreg.ScaleKind) map[string]any { return map[string]any{"scale_kind": int(k)} }
	for _, tc := range []struct {
		name, target string
		out          shapes.Shape
		operands     []shapes.Shape
		attrs        map[string]any
		wantErr      string // "" for a call that fits
	}{
		{"nf4 fits", "quanta_nf4_nk", f32(3, 8), []shapes.Shape{f32(3, 64), u8(8, 1, 32), f32(8, 1)}, nil, ""},
		{"nf4 packed blocks", "quanta_nf4_nk", f32(3, 8), []shapes.Shape{f32(3, 64), u8(8, 1, 16), f32(8, 1)}, nil,
			"packed uint8 (N, ceil(K/bs), bs/2)"},
		{"nf4 float64 activations", "quanta_nf4_nk", f32(3, 8),
			[]shapes.Shape{shapes.Make(dtypes.Float64, 3, 64), u8(8, 1, 32), f32(8, 1)}, nil, "float32 or bfloat16"},
		{"nf4 result rows", "quanta_nf4_kn", f32(4, 8), []shapes.Shape{f32(3, 64), u8(64, 1, 4), f32(64, 1)}, nil,
			"y (M, N) float32"},
		{"int8 scale_kind 7", "quanta_int8_nk", f32(3, 8), []shapes.Shape{f32(3, 64), i8(8, 64), f32(8)}, kind(7),
			"K (scale_kind 2) or N (scale_kind 3)"},
		{"int8 scale size", "quanta_int8_kn", f32(3, 8), []shapes.Shape{f32(3, 64), i8(64, 8), f32(7)}, kind(kernelreg.ScaleN),
			"K (scale_kind 2) or N (scale_kind 3)"},
		{"twobit per-K scale", "quanta_twobit_kn", f32(3, 8), []shapes.Shape{f32(3, 64), u8(16, 8), f32(64)},
			kind(kernelreg.ScaleK), "float32 scale of 1 (scale_kind 1) or N (scale_kind 3)"},
		{"onebit bfloat16 scale", "quanta_onebit_kn", f32(3, 8),
			[]shapes.Shape{f32(3, 64), u8(8, 8), shapes.Make(dtypes.BFloat16, 8)}, kind(kernelreg.ScaleN),
			"float32 scale of 1 (scale_kind 1) or N (scale_kind 3)"},
		{"ggml type", "quanta_ggml_nk", f32(3, 8), []shapes.Shape{f32(3, 64), u8(8, 68)}, map[string]any{"ggml_type": 4},
			"ggml_type 4; accepted"},
		{"ggml block bytes", "quanta_ggml_nk", f32(3, 8), []shapes.Shape{f32(3, 64), u8(8, 67)}, map[string]any{"ggml_type": 8},
			"blocks uint8 (N, K/bs*blockBytes)"},
		{"dense fits", "quanta_f32_nk", f32(3, 8), []shapes.Shape{f32(3, 64), f32(8, 64)}, nil, ""},
		{"dense weight (K, N) for x·Wᵀ", "quanta_f32_nk", f32(3, 8), []shapes.Shape{f32(3, 64), f32(64, 8)}, nil,
			"w float32 (N, K)"},
		{"dense weight (N, K) for x·W", "quanta_f32_kn", f32(3, 8), []shapes.Shape{f32(3, 64), f32(8, 64)}, nil,
			"w float32 (K, N)"},
		{"attention keys", "quanta_attention", f32(1, 4, 2, 8), []shapes.Shape{f32(1, 4, 2, 8), f32(1, 2, 5, 8), f32(1, 2, 5, 8),
			shapes.Make(dtypes.Bool, 2, 6)}, map[string]any{"scale": 0.5}, "1 <= keys <= min(length, 2^18)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			func() {
				defer testutil.RecoverError(&err)
				g := graph.NewGraph(backend, "ffi_errors")
				defer g.Finalize()
				var params []*graph.Node
				var inputs []any
				for i, s := range tc.operands {
					params = append(params, graph.Parameter(g, "operand"+string(rune('0'+i)), s))
					inputs = append(inputs, tensors.FromShape(s))
				}
				node := graph.Neg(graph.Zeros(g, tc.out)) // the call's result shape
				if err = emit(node, tc.target, params, tc.attrs); err != nil {
					t.Fatalf("Emit: %v", err)
				}
				g.Compile(node)
				g.Run(inputs...)
			}()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("the call failed: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("the call ran; want an error saying %q", tc.wantErr)
			case err != nil && (!strings.Contains(err.Error(), tc.target+": ") || !strings.Contains(err.Error(), tc.wantErr) ||
				!strings.Contains(err.Error(), "accepted")):
				t.Fatalf("error %q; want one from %s saying %q and what is accepted", err, tc.target, tc.wantErr)
			}
		})
	}
}
