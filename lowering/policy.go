package lowering

// productTableMaxM is the largest M served by ProductTable: its table holds 256 products per byte
// position and activation row, so it grows with M (at M=8 and K=N=4096 it was 480x slower than
// at M=1 on XLA CPU).
const productTableMaxM = 1

// Choose picks the strategy for a product with m activation rows (the product of x's free
// dimensions) and the weight's layout: ProductTable for a single row of a rank-2 weight,
// DequantizeDot otherwise. It was the fastest choice on both XLA CPU and the pure-Go backend;
// see the package documentation for the measurements.
func Choose(m int, layout Layout) Strategy {
	if m <= productTableMaxM && layout != General {
		return ProductTable
	}
	return DequantizeDot
}
