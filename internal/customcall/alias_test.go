package customcall_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/internal/customcall"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// cacheStep adds x to every row of cache and returns the sum of x and the updated cache, aliasing
// the cache to output 1 (the error of AliasOutput goes to *aliasErr).
func cacheStep(aliasErr *error) func(x, cache *graph.Node) []*graph.Node {
	return func(x, cache *graph.Node) []*graph.Node {
		*aliasErr = customcall.AliasOutput(cache, 1)
		return []*graph.Node{graph.ReduceAllSum(x), graph.Add(cache, graph.ExpandAxes(x, 0))}
	}
}

// TestAliasOutput checks that an aliased state gives the same results whether its buffer is
// donated (updated in place) or not (copied), step after step, and that the input of a step
// that did not donate it stays as it was.
func TestAliasOutput(t *testing.T) {
	backend := testutil.Backend(t)
	var aliasErr error
	e := graph.MustNewExec(backend, cacheStep(&aliasErr))
	cache := tensors.FromShape(shapes.Make(dtypes.Float32, 4, 2))
	for step := range 4 {
		x := []float32{float32(step + 1), float32(-step)}
		before := tensors.MustCopyFlatData[float32](cache)
		var arg any = cache
		if step%2 == 1 {
			donated, err := graph.DonateTensorBuffer(cache, backend, 0)
			if err != nil {
				t.Fatal(err)
			}
			arg = donated
		}
		out := e.MustExec(x, arg)
		if step%2 == 0 {
			if got := tensors.MustCopyFlatData[float32](cache); !equalFloats(got, before) {
				t.Fatalf("step %d: the input not donated changed: %v, was %v", step, got, before)
			}
		}
		cache = out[1]
	}
	if !customcall.Supported(backend) {
		if !errors.Is(aliasErr, customcall.ErrUnsupported) {
			t.Errorf("AliasOutput on %s: %v, want an error wrapping ErrUnsupported", backend.Name(), aliasErr)
		}
	} else if aliasErr != nil {
		t.Errorf("AliasOutput: %v", aliasErr)
	}
	want := []float32{10, -6, 10, -6, 10, -6, 10, -6}
	if got := tensors.MustCopyFlatData[float32](cache); !equalFloats(got, want) {
		t.Errorf("cache after 4 steps = %v, want %v", got, want)
	}
}

func equalFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAliasOutputErrors(t *testing.T) {
	backend := withKernels(t)
	for _, tc := range []struct {
		name  string
		alias func(x, y *graph.Node) error
	}{
		{"not a parameter", func(x, _ *graph.Node) error { return customcall.AliasOutput(graph.Neg(x), 0) }},
		{"negative output", func(x, _ *graph.Node) error { return customcall.AliasOutput(x, -1) }},
		{"nil node", func(_, _ *graph.Node) error { return customcall.AliasOutput(nil, 0) }},
		{"aliased twice", func(x, _ *graph.Node) error {
			if err := customcall.AliasOutput(x, 0); err != nil {
				return nil // the first must succeed: reported as a missing error below
			}
			return customcall.AliasOutput(x, 1)
		}},
		{"second of a list", func(x, y *graph.Node) error {
			return customcall.AliasOutputs([]*graph.Node{x, graph.Neg(y)}, 0)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			graph.MustNewExec(backend, func(x, y *graph.Node) *graph.Node {
				err = tc.alias(x, y)
				return graph.Add(x, y)
			}).MustExec1([]float32{1}, []float32{2})
			if !errors.Is(err, customcall.ErrInvalid) {
				t.Errorf("got %v, want an error wrapping ErrInvalid", err)
			}
		})
	}
}

// TestAliasInProgram checks, in what XLA compiles (XLA_FLAGS=--xla_dump_to, in a child process),
// that the aliased parameter and output share a buffer: the module's input_output_alias.
func TestAliasInProgram(t *testing.T) {
	backend := withKernels(t)
	if testutil.InHLOChild() {
		var err error
		graph.MustNewExec(backend, cacheStep(&err)).MustExec([]float32{1, 2}, tensors.FromShape(shapes.Make(dtypes.Float32, 5, 2)))
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	dir, _ := testutil.DumpHLO(t)
	files, _ := filepath.Glob(filepath.Join(dir, "*after_optimizations.txt"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		if !strings.Contains(text, "f32[5,2]") {
			continue
		}
		header, _, _ := strings.Cut(text, "\n")
		if !strings.Contains(header, "input_output_alias={ {1}: (1, {}") {
			t.Errorf("the compiled module does not alias parameter 1 to output 1: %s", header)
		}
		return
	}
	t.Fatalf("no dump holds the f32[5,2] program (%d files)", len(files))
}
