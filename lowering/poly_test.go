package lowering_test

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
)

// TestPolyPairs: the arithmetic decode of every byte is within 4.8e-7 (4 float32 units in the
// last place at 1) of the codebook, and a codebook zero decodes to exactly zero (an infinite
// activation times it must give NaN).
func TestPolyPairs(t *testing.T) {
	var linear, noZero [16]float32
	for i := range 16 {
		linear[i] = float32(i-8) / 8         // zero at code 8
		noZero[i] = (float32(i) - 7.5) / 7.5 // no zero entry
	}
	bytes := make([]uint8, 256)
	for i := range bytes {
		bytes[i] = uint8(i)
	}
	for _, tc := range []struct {
		name     string
		codebook [16]float32
	}{{"nf4", nf4.Codebook()}, {"linear", linear}, {"no-zero", noZero}} {
		t.Run(tc.name, func(t *testing.T) {
			out := graph.MustExecOnceN(testutil.Backend(t), func(b *graph.Node) []*graph.Node {
				hi, lo := lowering.PolyPairs(b, tc.codebook, dtypes.Float32)
				return []*graph.Node{hi, lo}
			}, tensors.FromValue(bytes))
			hi, lo := tensors.MustCopyFlatData[float32](out[0]), tensors.MustCopyFlatData[float32](out[1])
			for b := range 256 {
				for _, d := range []struct {
					got  float32
					code int
				}{{hi[b], b >> 4}, {lo[b], b & 15}} {
					want := tc.codebook[d.code]
					if want == 0 && d.got != 0 || math.Abs(float64(d.got-want)) > 4.8e-7 {
						t.Fatalf("byte %#02x, code %d: decoded %g, codebook %g", b, d.code, d.got, want)
					}
				}
			}
		})
	}
}
