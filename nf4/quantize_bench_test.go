package nf4_test

import (
	"fmt"
	"testing"

	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/nf4"
)

// BenchmarkQuantize times the host quantizer on a float32 weight of Llama-7B's attention shape
// (what a model converted at load pays per projection).
func BenchmarkQuantize(b *testing.B) {
	w := testutil.RandomTensor(1, 4096, 4096)
	for _, bs := range []int{64, 128} {
		testutil.BenchQuantize(b, fmt.Sprintf("float32/4096x4096/block=%d", bs), w,
			func() (interface{ Delete() }, error) { return nf4.Quantize(w, bs) })
	}
}
