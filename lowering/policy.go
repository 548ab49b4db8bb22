package lowering

import "github.com/gomlx/gomlx/pkg/core/shapes"

// The policy's thresholds, in activation rows (M): docs/performance.md has the measurements.
const (
	// productTableMaxRows: ProductTable's table grows with M.
	productTableMaxRows = 1
	// int8SlicedMaxRows: the Int8 SlicedSum re-reads the codes per row.
	int8SlicedMaxRows = 2
	// mulReduceMaxRows: MulReduce of an int8 x·Wᵀ beats DecodeDot up to here.
	mulReduceMaxRows = 8
	// signsSlicedMaxRows: the Signs SlicedSum reads each byte once for all rows up to here.
	signsSlicedMaxRows = 16
)

// Choose returns the strategy Auto uses for a product of activations of shape x with w on
// platform (with Kernels, as if every kernel were registered with the codebook of w). The one
// policy table, by layout, rows M (the product of x's free dimensions) and the product's axes:
//
//	layout      condition                                              strategy
//	any         M <= 512, platform with Kernels, a kernel serves       Kernel
//	Signs       GPU, M < 16, contracted on the packed axis, float x    SlicedSum
//	GGML        GPU, M = 1, rank 2 contracted on its block axis (x·Wᵀ)  MulReduce
//	not Int8    GPU, M < 16, rank 2, PrologueDot serves                MulReduce
//	any         GPU or TPU, PrologueDot serves                         PrologueDot
//	Blockwise4  M = 1, x·W (blocks free), pure Go or XLA CPU fused loops   SlicedSum
//	Blockwise4  M = 1, rank 2                                            ProductTable
//	Int8        M <= 2, x·W with a separable scale, XLA CPU fused loops   SlicedSum
//	Int8        M <= 8, rank 2 contracted on its last axis (x·Wᵀ)         MulReduce
//	Signs       M <= 16, contracted on the packed axis, float x          SlicedSum
//	any         otherwise                                                DecodeDot
//
// GPU means XLAGPU and TPU XLATPU: the four rows that name them are theirs, and the rows below
// are those of the CPUs (pure Go, XLA CPU) and of other backends. There, a Blockwise4DQ weight is
// chosen for as the Blockwise4 of its decoded scales; a FlatBlockwise4, and a GGML weight that no
// kernel serves (without kernels, or contracted on another axis than its block axis), take
// DecodeDot. Choose never returns a strategy that cannot serve the product.
func Choose(platform Platform, w Layout, x shapes.Shape, axes Axes) Strategy {
	w.check("lowering.Choose")
	p := newProduct("lowering.Choose", x, w.Dimensions(), axes)
	p.platform = platform
	return choose(p, w)
}

func choose(p *product, w Layout) Strategy {
	rows := p.rows()
	if _, ok := kernelFor(p, w); ok && rows <= kernelMaxRows {
		return Kernel
	}
	if s, ok := chooseAccelerator(p, w); ok {
		return s
	}
	fusedLoops := p.platform.base() == XLACPUFusedLoops
	switch w := w.(type) {
	case Blockwise4DQ:
		return choose(p, w.decoded()) // the products of the decoded scales are Blockwise4's
	case Blockwise4:
		if rows <= productTableMaxRows && p.rank2() {
			if p.kMajor() && (fusedLoops || p.platform.base() == PureGo) {
				return SlicedSum
			}
			return ProductTable
		}
	case Int8:
		switch {
		case rows <= int8SlicedMaxRows && fusedLoops && w.serves(SlicedSum, p):
			return SlicedSum
		case rows <= mulReduceMaxRows && p.rank2() && !p.kMajor():
			return MulReduce
		}
	case Signs:
		if rows <= signsSlicedMaxRows && w.serves(SlicedSum, p) {
			return SlicedSum
		}
	}
	return DecodeDot
}
