package nf4_test

import (
	"testing"

	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/nf4"
)

// materialize returns the dense float32 values of a host-side array.
func materialize(t testing.TB, a *nf4.Array) []float32 {
	t.Helper()
	dense, err := implicitarray.MaterializeOnHost(testutil.Backend(t), a)
	if err != nil {
		t.Fatalf("MaterializeOnHost: %+v", err)
	}
	return testutil.Float32s(t, dense)
}
