// Package lowering turns a quantized dot_general into dense GoMLX graph ops that a backend can
// fuse. It knows dense ops only: format packages (nf4, and later int8 and onebit) describe their
// stored components with a type such as Blockwise4 and call DotGeneral with a Strategy.
//
// # Blockwise4
//
// A weight stored as 4-bit codes of a 16-entry codebook, two codes a byte (the first in the high
// nibble), with one scale per block of the last axis: NF4's layout. Unpack and Pack convert
// between bytes and codes with integer division and bitwise-and (the pure-Go backend has no
// logical shift); Dequantize builds the dense weight; DotGeneral multiplies it with a dense
// activation, the weight on either side, any contracting and batch axes, accumulating in
// float32 (float64 for float64 inputs) and returning the activation's dtype.
//
// # Strategies
//
//   - DequantizeDot (and Materialize, which format packages implement through
//     implicitarray.Materialize so it is counted): decode with a 256-entry gather table (both
//     codes of a byte at once), multiply by the block scale, one dense DotGeneral. Serves
//     every layout.
//   - MulReduce: the decode feeds a broadcast multiply and a reduce-sum (one fusion).
//   - BlockFactored: a DotGeneral batched over blocks with the unscaled codes, then the scales
//     (needs the block axis contracted).
//   - ProductTable: per call, the products of the activations with every byte's two code
//     values (256 per byte position and activation row), then one gather and one add per two
//     weights.
//
// The fused strategies serve rank-2 weights with one contracting axis and no batch axes, with
// the blocks free (x @ W, W (K, N): eformer's layout, BlocksFree) or contracted (x @ Wᵀ or
// W @ x, BlocksContracted).
//
// # Measurements and the policy (Choose)
//
// XLA CPU (the PJRT plugin of make setup), 2 cores shared with other work, K = N = 4096,
// float32 activations, block 64, cycling through 8 weights so each call streams its weight from
// memory; milliseconds per call (dense f32 gemv: 3.6 ms, about 19 GB/s):
//
//	M     dense  materialize  dequantize-dot  mul-reduce  product-table  block-factored
//	1      3.6       54           55              88           31            n/a (free blocks)
//	8      5.6       35           40              55         2684            n/a
//	64    33         79           84             193            -            n/a
//	512  363        468          633               -            -            n/a   (load 9: noisy)
//
// Blocks contracted (x @ Wᵀ, one weight, M = 1): materialize 32, dequantize-dot 30, mul-reduce
// 44, block-factored 67, product-table 19 ms.
//
// Decoding 4096×4096 codes alone costs 25-35 ms whatever the formulation (select tree 26, a
// 16-entry gather 31, eformer's polynomial 33, a one-hot sum 411): XLA CPU's fused loops do
// not vectorize a 4-bit table lookup, so every strategy is bound by the decode, not by the
// 9 MiB of weight bytes, and none reaches the dense gemv (which streams 64 MiB at ~19 GB/s). A
// reduction over the major axis (x @ W in eformer's layout) is a further ~10x slower than over
// the minor axis on XLA CPU. At M = 2048 (load 9, noisy) dense took 2216 ms and NF4 1500-1850
// ms: the decode is amortized and NF4 is within noise of dense.
//
// Pure-Go backend, M = 1 (2 calls each, load 6-9, noisy): dense 336, materialize 983,
// dequantize-dot 615, mul-reduce 818, product-table 527 ms.
//
// Choose therefore picks ProductTable for M = 1 (1.7x faster than materialize-then-dot on XLA,
// 1.9x on the pure-Go backend) and DequantizeDot otherwise (one decode, then the dense product;
// ProductTable's table grows with M, MulReduce re-decodes per row).
package lowering
