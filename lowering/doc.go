// Package lowering turns a quantized dot_general into dense GoMLX graph ops that a backend can
// fuse. It knows dense ops only: a format package describes its stored components with a type
// such as Blockwise4 (NF4's layout; nf4 is its user) and calls DotGeneral with a Strategy. int8
// and onebit keep their lowerings in their own packages for now.
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
//     codes of a byte at once) — or, on XLA with its library fusions off, SlicedPoly's
//     arithmetic decode — multiply by the block scale, one dense DotGeneral. Serves every
//     layout. For up to SlabMaxRows activation rows, a weight with free blocks larger than two
//     SlabBytes is decoded and multiplied a slab of rows at a time, reusing one small float
//     buffer (see SlabBytes for the figures).
//   - MulReduce: the decode feeds a broadcast multiply and a reduce-sum (one fusion).
//   - BlockFactored: a DotGeneral batched over blocks with the unscaled codes, then the scales
//     (needs the block axis contracted).
//   - ProductTable: per call, the products of the activations with every byte's two code
//     values (256 per byte position and activation row), then one gather and one add per two
//     weights.
//   - SlicedPoly (one activation row, blocks free): arithmetic decode (the byte's base-4 digits
//     by integer division and bitwise-and; each code value as a bivariate cubic of its two
//     digits, within 2.4e-7 of the NF4 codebook in float32), the even and odd output columns as
//     two separate sums, and the contraction split into a few slices added element-wise before
//     one small reduction.
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
// With XLA's default flags, decoding 4096×4096 codes alone costs 25-35 ms whatever the
// formulation (select tree 26, a 16-entry gather 31, eformer's polynomial 33, a one-hot sum
// 411), so every strategy above is bound by the decode, not by the 9 MiB of weight bytes, and
// none reaches the dense gemv (which streams 64 MiB at ~19 GB/s); see the next section for the
// cause and SlicedPoly. At M = 2048 (load 9, noisy) dense took 2216 ms and NF4 1500-1850
// ms: the decode is amortized and NF4 is within noise of dense.
//
// Pure-Go backend, M = 1 (2 calls each, load 6-9, noisy): dense 336, materialize 983,
// dequantize-dot 615, mul-reduce 818, product-table 527 ms.
//
// # XLA CPU's library fusions
//
// The optimized HLO (XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_text) shows why: XLA CPU
// moves the float multiplies, adds and reductions into YNNPACK kernels ("__ynn_fusion"), which take
// no integer, select or gather op, so the decode runs as its own loop and writes a dense float32
// weight (64 MiB at 4096×4096) that the library kernel then reads back. An all-float decode
// (SlicedPoly) is taken into the library kernel whole, and there it is slower still (130 ms).
// With runtime.LibraryFusionFlag (--xla_cpu_experimental_ynn_fusion_type=, empty) in XLA_FLAGS,
// which the quanta runtime sets by default (runtime.CPUFusedLoops tells the policies), the decode,
// the products and the slice sums become one XLA loop per output parity, split across the cores
// (outer_dimension_partitions 4), and a small reduction. Two runs of BenchmarkMatMul in
// package nf4, one per setting, M = 1, load 4.3 and 4.2 (ms per call):
//
//	XLA_FLAGS      dense  materialize  dequantize-dot  mul-reduce  product-table  sliced-poly
//	(default)       2.8       33             35             51            33           131
//	flag            3.6       53             59             59            70           4.5
//
// (That sliced-poly took its digits by floor on float32 bytes; with integer division and
// bitwise-and, in a later run at load 1.5 with the flag: dense 2.6, auto = sliced-poly 3.5 ms;
// without the flag, auto = product-table 29.9 ms against dense 2.6.)
//
// The flag left the dense gemv within noise (2.2-3.6 ms in either setting across runs); at
// M = 8 and 64, DequantizeDot took 36 and 45 ms with it against 54 and 46 ms without, and the
// dense product at M = 64 18.6 against 14.1 ms (one run each, load 3.6: noisy). On the pure-Go
// backend, M = 1 (the floor digits): product-table 520, sliced-poly 370 ms.
//
// Choose therefore picks, for M = 1: SlicedPoly with blocks free on the pure-Go backend and on
// XLA with the flag (8x faster than ProductTable without it, 1.3-1.6x slower than the dense
// gemv), ProductTable otherwise (1.7x faster than materialize-then-dot on XLA without the flag);
// and DequantizeDot for more rows (one decode, then the dense product; ProductTable's table
// grows with M, MulReduce and SlicedPoly re-decode per row).
package lowering
