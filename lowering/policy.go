package lowering

import (
	"os"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/quanta-ml/quanta/runtime"
)

// productTableMaxM is the largest M served by ProductTable: its table holds 256 products per byte
// position and activation row, so it grows with M (at M=8 and K=N=4096 it was 480x slower than
// at M=1 on XLA CPU).
const productTableMaxM = 1

// LibraryFusionFlag is the XLA_FLAGS entry that turns off XLA CPU's YNNPACK library fusions. By
// default XLA CPU moves element-wise multiplies, adds and reductions into YNNPACK kernels, which
// accept no integer, select or gather op: the decode of a quantized weight is then written out as
// a dense float tensor before the library kernel reads it back. With this flag the decode, the
// products and the partial sums stay in parallel XLA loops (SlicedPoly, and onebit's fused
// product). The dense gemv (M = 1) was within noise with and without it; larger dense products
// were not measured carefully (see the package documentation).
const LibraryFusionFlag = "--xla_cpu_experimental_ynn_fusion_type="

// LibraryFusionsDisabled reports whether XLA_FLAGS holds LibraryFusionFlag with an empty value.
// XLA reads XLA_FLAGS when its plugin loads, so this reflects the running backend as long as the
// variable was set before that.
func LibraryFusionsDisabled() bool {
	for _, f := range strings.Fields(os.Getenv("XLA_FLAGS")) {
		if f == LibraryFusionFlag {
			return true
		}
	}
	return false
}

// Choose picks the strategy for a product on backend with m activation rows (the product of x's
// free dimensions) and the weight's layout:
//
//   - one row, blocks free (x @ W, eformer's layout): SlicedPoly on the pure-Go backend and on
//     XLA with LibraryFusionsDisabled, else ProductTable;
//   - one row, blocks contracted: ProductTable;
//   - otherwise DequantizeDot.
//
// See the package documentation for the measurements.
func Choose(backend backends.Backend, m int, layout Layout) Strategy {
	if m <= productTableMaxM && layout != General {
		if layout == BlocksFree && (runtime.IsGo(backend) || LibraryFusionsDisabled()) {
			return SlicedPoly
		}
		return ProductTable
	}
	return DequantizeDot
}
