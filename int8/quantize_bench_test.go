package int8_test

import (
	"fmt"
	"testing"

	"github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// BenchmarkQuantize times the host quantizer on a float32 weight of Llama-7B's attention shape
// (what a model converted at load pays per projection), a scale per row and per column.
func BenchmarkQuantize(b *testing.B) {
	w := testutil.RandomTensor(1, 4096, 4096)
	for _, axis := range []int{-1, 0} {
		testutil.BenchQuantize(b, fmt.Sprintf("float32/4096x4096/axis=%d", axis), w,
			func() (interface{ Delete() }, error) { return int8.Quantize(w, axis) })
	}
}
