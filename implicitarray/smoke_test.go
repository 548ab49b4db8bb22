package implicitarray_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
)

func TestSmokeExecRoundTrip(t *testing.T) {
	backend := testutil.Backend(t)
	w := newScaled(implicitarray.TensorComponent(tensors.FromValue([][]float32{{1, 2}, {3, 4}})),
		implicitarray.TensorComponent(tensors.FromValue(float32(10))))
	implicitarray.ResetStats()
	e := implicitarray.MustNewExec(backend, func(x *graph.Node, w *scaled) (*graph.Node, *scaled) {
		return implicitarray.Materialize(implicitarray.MatMul(x, w)), w
	})
	out := e.MustCall(tensors.FromValue([][]float32{{1, 1}}), w)
	got := out[0].(*tensors.Tensor).Value().([][]float32)
	if got[0][0] != 40 || got[0][1] != 60 {
		t.Fatalf("got %v", got)
	}
	back := out[1].(*scaled)
	if !back.payload.IsTensor() {
		t.Fatalf("result array not on host")
	}
	st := implicitarray.CurrentStats()
	t.Logf("stats %+v", st)
}
