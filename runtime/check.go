package runtime

import (
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
)

// Check compiles and runs a small matmul graph ([2,3] x [3,2]) on the backend and compares
// its result with the one computed in Go. It returns an error naming what failed.
func Check(backend backends.Backend) (err error) {
	if backend == nil {
		return errors.New("quanta runtime: Check: nil backend")
	}
	lhs := [][]float32{{1, 2, 3}, {4, 5, 6}}
	rhs := [][]float32{{1, -1}, {0, 2}, {0.5, 0}}
	want := [][]float32{{2.5, 3}, {7, 6}}
	defer func() {
		if r := recover(); r != nil {
			err = errors.Errorf("quanta runtime: Check: running a matmul graph on backend %q panicked: %v", backend.Name(), r)
		}
	}()
	out, err := graph.ExecOnce(backend, func(x, y *graph.Node) *graph.Node { return graph.MatMul(x, y) }, lhs, rhs)
	if err != nil {
		return errors.WithMessagef(err, "quanta runtime: Check: running a matmul graph on backend %q", backend.Name())
	}
	got, ok := out.Value().([][]float32)
	if !ok || !slices.EqualFunc(got, want, slices.Equal[[]float32]) {
		return errors.Errorf("quanta runtime: Check: matmul on backend %q returned %v, want %v", backend.Name(), out.Value(), want)
	}
	return nil
}
