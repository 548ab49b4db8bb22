package lowering

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/quanta-ml/quanta/runtime"
)

// productTableMaxM is the largest M served by ProductTable: its table holds 256 products per byte
// position and activation row, so it grows with M (at M=8 and K=N=4096 it was 480x slower than
// at M=1 on XLA CPU).
const productTableMaxM = 1

// Choose picks the strategy for a product on backend with m activation rows (the product of x's
// free dimensions) and the weight's layout:
//
//   - one row, blocks free (x @ W, eformer's layout): SlicedPoly on the pure-Go backend and on
//     XLA CPU with its library fusions off (runtime.CPUFusedLoops, the quanta runtime's default), else ProductTable;
//   - one row, blocks contracted: ProductTable;
//   - otherwise DequantizeDot.
//
// See the package documentation for the measurements.
func Choose(backend backends.Backend, m int, layout Layout) Strategy {
	if m <= productTableMaxM && layout != General {
		if layout == BlocksFree && (runtime.IsGo(backend) || runtime.CPUFusedLoops(backend)) {
			return SlicedPoly
		}
		return ProductTable
	}
	return DequantizeDot
}
