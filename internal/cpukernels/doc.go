// Package cpukernels holds quanta's CPU kernels for products of float activations with quantized
// weights (NF4, int8, 2-bit ternary and 1-bit binary, ggml's block types), as a small C library
// whose Go wrappers of the products (nf4KN and the others below) serve this package's tests and
// benchmarks. The kernels read the packed weight once per call and never build a dense weight, so
// that a quantized product moves fewer bytes than the dense float32 one and, at few activation
// rows, runs faster by about the ratio of the bytes. They are meant to be called from XLA as typed
// FFI custom calls (package runtime registers them; lowering emits the calls); this package knows
// nothing of XLA.
//
// # Why C
//
// The entry points must be plain C functions on raw pointers: XLA calls its FFI handlers from its
// own C++ threads, where Go functions (and Go assembly) cannot run without the Go runtime. C with
// intrinsics also lets the compiler allocate registers and schedule the dozens of specialised
// variants (kernels instantiated per count of activation rows and weight rows held in registers)
// that hand-written assembly would have to repeat. Every x86 function carries its own target
// attribute (no -m flags), so one build runs on any x86-64 and picks its path at run time; the
// portable path builds on any architecture.
//
// # Layouts
//
// Every product computes y (m×n, float32, row-major) = x (m×k, row-major) · W with W logically
// k×n, accumulating in float32; x is float32 or bfloat16.
//
//   - NF4, blocks along n (nf4KN, qk_nf4_kn; eformer's x @ W): packed uint8 (k, nb, bs/2) with
//     nb = ceil(n/bs), two codes a byte, the even element in the high nibble; absmax (k, nb) in
//     float32, bfloat16 or float16; W[i][j] = codebook[code] × absmax[i][j/bs]. Codes past n in
//     the last block are ignored.
//   - NF4, blocks contracted (nf4NK, qk_nf4_nk; x @ Wᵀ with W stored n×k, bitsandbytes'
//     Linear4bit): packed (n, ceil(k/bs), bs/2), absmax (n, ceil(k/bs)); codes past k ignored.
//   - int8 (int8KN / int8NK): codes int8, W stored k×n or n×k, times a float scale that is per
//     tensor, per contracted index (ScaleK: the per-row scale of the k×n layout, eformer's
//     default) or per output column (ScaleN: per column of k×n, per row of n×k as in
//     bitsandbytes' Linear8bitLt).
//   - 2-bit (twoBitKN; eformer's Array1B): packed (k/4, n), value v ∈ {-1, 0, +1} stored as code
//     v+1, quarter-strided along k: with q = k/4, packed[p][j] holds rows p, q+p, 2q+p, 3q+p of
//     column j in bits 0-1, 2-3, 4-5, 6-7; code 3 reads as +2. Optional float32 scale per output
//     column or per tensor.
//   - 1-bit (oneBitKN): packed (k/8, n), bit 1 = +1, bit 0 = -1, eighth-strided: row i is bit
//     i div (k/8) of packed row i mod (k/8). Scale as for 2-bit.
//   - ggml's block types (ggmlNK, qk_ggml_nk; x @ Wᵀ with W stored n×k as a GGUF file stores a
//     linear weight): blocks uint8, n rows of k/bs blocks of the type, byte for byte the file's
//     (ggml-common.h's layouts, which package gguf documents), k a multiple of the block size bs
//     (32, or 256 for the K-quants). Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
//     and IQ4_NL, named by ggml's type ids (gguf.Type's values); W's values are ggml's
//     dequantize_row_* bit for bit.
//   - The weight decodes (qk_nf4_decode and qk_ggml_decode, the custom calls quanta_nf4_decode
//     and quanta_ggml_decode): an NF4 weight of either layout, or a GGML one, written as float32
//     (its stored rows, each of its span), the values the products multiply bit for bit; package
//     lowering's DecodeDot hands the result to XLA's dense product for many activation rows.
//   - denseKN (qk_f32_kn, the custom call quanta_f32_kn): a dense float32 w (k×n), which
//     lowering.DenseMatMul gives products of a few rows (it streams the weight faster than XLA's
//     dot there), and the in-package baseline of the benchmarks; denseNK (qk_f32_nk, the custom
//     call quanta_f32_nk): a dense float32 w (n×k), PyTorch's layout, multiplied as the x·Wᵀ
//     products of the quantized formats (lowering.DenseMatMulTransposed, at any row count).
//
// # The C API
//
// quanta_kernels.h declares qk_nf4_kn, qk_nf4_nk, qk_int8_kn, qk_int8_nk, qk_twobit_kn,
// qk_onebit_kn, qk_ggml_nk (with qk_ggml_block_info and the QK_GGML_* type ids), qk_f32_kn, qk_f32_nk and
// the weight decodes qk_nf4_decode and qk_ggml_decode, with the element types (QK_F32, QK_BF16, QK_F16), scale kinds
// (QK_SCALE_NONE, _TENSOR, _K, _N) and statuses (QK_OK, QK_ERR_*), plus the ISA and thread
// controls and qk_read_probe. The contract: sizes m, k, n are int64 and non-negative, products of
// sizes must stay below 2^58, a pointer may be NULL only if its buffer is empty, an empty y is a
// no-op and k = 0 writes zeros; each function validates what it can see (NULL pointers, sizes,
// overflow, dtypes, block size, scale kind) and returns a status before writing anything. It
// cannot see buffer lengths: the caller guarantees them (the Go wrappers check slice lengths
// exactly and return an error wrapping ErrArgument otherwise; an FFI handler has them from the
// buffer shapes). Outputs never alias inputs; no alignment is required.
//
// # Instruction-set paths
//
// Portable (plain C), AVX2 (AVX2, FMA, F16C) and AVX512 (F, BW, VL, DQ, with FMA and F16C),
// chosen at first use as the best the CPU supports (cpuid through __builtin_cpu_supports, which
// also checks that the OS saves the AVX-512 state). forceISA (qk_isa_force) switches paths for
// tests and benchmarks; ActiveISA reports the one in use.
//
// Every path runs every product through generic tiled drivers: a tile of the weight (32×128, or
// 128×64 float32 for more than 4 activation rows) is decoded into the executing thread's scratch,
// where it stays in L1/L2 while the path's float32 micro-kernel sweeps all activation rows over
// it (register-blocked, up to 6 rows at a time). From 128 activation rows the x86 paths turn the
// x @ Wᵀ tiles over (64 stored rows by 256 elements, transposed in registers) and run them on the
// x @ W micro-kernel, whose tiles keep 24 sums (AVX-512: 6 rows × 64 columns) or 12 (AVX2: 6 ×
// 16) in registers. The AVX2 path adds kernels for one activation row that decode int8 and NF4 in
// registers, NF4 a byte at a time (blocks of a multiple of 32): the nibbles of 16 bytes index
// four 16-byte vpshufb tables, byte j of each codebook value, and two rounds of interleaving make
// the 32 floats (in the column order QK_ORDER_PAIRS8); the AVX-512 path adds kernels that decode
// in registers:
//
//   - NF4 by vpermps over the 16 codebook values: for one activation row, 64 bytes are read as
//     sixteen 32-bit words and each nibble, shifted down, indexes the codebook in place (no
//     widening shuffle), times per-lane block scales; for more rows (up to the limits in
//     qk_ops_avx512), a zmm table of the codebook times the block scale is indexed by widened
//     bytes and its values, the dense weight's, feed one FMA per activation row.
//   - int8 widened and converted once per 16 weights for all the activation rows of a tile.
//   - 2-bit and 1-bit by table lookup at every m: a byte holds the codes of one column for 4 (8)
//     rows of k, so its two nibbles index two 16-entry tables of partial sums of the activations
//     (x[a]·v1 + x[b]·v2, or four ±x terms), built per activation row and stored row: one vpermps
//     and one add replace 2 (4) multiply-adds.
//
// ggml's block types decode with one vector source for both x86 paths (qk_ggml_vec.h, over 8 or
// 16 lanes; Q2_K and Q3_K with the plain C decode everywhere), and have fused x @ Wᵀ kernels for
// up to 8 activation rows (beyond, the generic driver over the decode is faster), of two kinds:
//
//   - the integer route, for Q4_K, Q5_K, Q6_K, Q4_1, Q5_0 and Q5_1, and for Q4_0 up to 2 rows:
//     the activations are quantized once per call to int8 in groups of one block (256 or 32),
//     and each block's product is integer arithmetic on the codes as ggml stores them
//     (vpmaddubsw, vpmaddwd: exact in int32), scaled to float once per block, as llama.cpp's CPU
//     backend computes these types (the blocks of 32 eight at a time: their scales gathered and
//     converted together);
//   - the float route, for IQ4_NL and Q8_0, and for Q4_0 beyond 2 rows: each weight decoded in
//     registers to its float value (16 values of a 4-bit code looked up by vpermps on AVX-512,
//     converted codes times the scales on AVX2) and multiplied into float accumulators.
//
// The integer route's instructions are 256-bit on both paths. Each type takes the route that
// measured the faster at each m (docs/ggml.md).
//
// These kernels keep their partial sums in the column order their decode produces (pairs,
// stride-8 or stride-4 within a group, see qk_internal.h); the final reduction restores the
// natural order. The absmax of NF4 is read only through qk_nf4_scale and its vector form
// nf4_lane_scales (qk_avx512.c): a double-quantized absmax adds a case there.
//
// # Numerics
//
// Accumulation is float32. NF4 weights are codebook[code] × absmax rounded once (the dense
// weight's value), except in the single-row kernels, which multiply x × absmax first (AVX2's x·Wᵀ
// sums a block's x × codebook and scales the sum). An int8
// per-k scale multiplies the activations before the product, a per-n or per-tensor scale (int8,
// 2-bit, 1-bit) the outputs. 2-bit and 1-bit table entries are sums of exact products. So an Inf
// activation gives ±Inf where the dense product does and NaN where the dense weight is 0 (Inf·0)
// or where +Inf and -Inf meet, and a NaN propagates; results differ from the dense product only
// by float32 rounding (tests: within (k+16)·2⁻²³·Σ|x·w|, and exact for integer data). The same
// holds for ggml's block types on the float route and through the generic drivers, whose decode
// gives ggml's values bit for bit.
//
// The integer route of the GGML kernels (above) has its own contract: it multiplies x', the
// activations quantized in groups of one block along k (each group's amax = its largest
// magnitude; codes q = round-half-even(x·(127/amax)) in float32, 0 for an all-zero group; x' =
// q·(amax/127)), with the weights' exact values f·q + g (d·sc·q − dmin·m for Q4_K and Q5_K, d·q +
// m for Q4_1 and Q5_1, d·q − 8d and d·q − 16d for Q4_0 and Q5_0, which the decode rounds once),
// and rounds only per block (tests: within (k+16)·2⁻²³·Σ|x'|·(|f·q| + |g|) of that product, from
// a Go reference of the quantization). It therefore differs from
// the float product by at most Σ_l |W[j][l]|·amax(l)/254 more, amax(l) that of l's group, as
// llama.cpp's results do (docs/ggml.md has the difference on real weights). A product whose
// activations hold an Inf or a NaN takes the generic driver instead, so non-finite values
// propagate as above.
//
// # The kernel table
//
// The kernels are a table, as ggml's type traits are: qk_internal.h's qk_format is one row per
// weight format for each instruction set (qk_ops), holding the format's tile decode (every
// product can run through the generic tiled drivers of qk_drive.c with it) and, where an ISA has
// them, fused chunk kernels with the rows they serve. The entry points of qk_api.c only check
// their arguments and describe the weight (qk_prod); the one driver of each product shape
// (qk_run.c: k×n weights, x·W; n×k weights, x·Wᵀ) picks the kernel from the table, prepares the
// activations, plans and runs the work and reduces it. The custom-call targets that reach these
// entry points from XLA are declared once, in internal/kernelreg (qk_targets.h is generated from
// it). A new format is a row per ISA (a tile decode at least), an entry point and a target.
//
// # Attention
//
// Beside the products, qk_attention.c runs grouped-query attention of a few query rows over a
// key/value cache (the attention of a decoding step), one call a layer where XLA CPU would run
// two small products, a mask and a softmax, each with its own dispatch cost. The query heads that
// share a key/value head are one pass over its cache (scores into the thread's chunk scratch,
// four keys at a time on AVX2, softmax, the weighted sum of the values with each output's sums in
// registers over blocks of keys), computed by one thread in a fixed order, so the result does not
// depend on the thread count; the calls read the first keys of a cache longer than the attended
// window, so that the cache goes in whole, without a copy of the window. The cache is float32 or
// float16 (qk_attention_kv.h, compiled once per type): a half is converted exactly as it is read,
// so a float16 cache gives the bits of a float32 cache holding the same values, at half the bytes.
// A window of more than 64 keys is split into blocks of 64, one task each over all the query
// heads of its key/value head, merged in order on the calling thread, so that the threads share
// the keys of a model with one key/value head; the blocks follow from the key count alone.
//
// From 32 query positions on (a prompt) the same call takes another route, where the call's
// attended keys and values, converted once to float32 (keys transposed), fit 256 MiB and a block
// of 16 positions' scores the chunk scratch (up to 16384 keys): each task takes a block of up to
// 64 positions of one key/value head and runs, per query head, the scores of the block over the keys
// it sees and then the weighted sum of the values as two products of the float32 micro-kernel of
// the tiled drivers, with the softmax per row between them; the per-row route would read each
// key once per position with a horizontal sum per score. The keys a block sees run from the
// first any of its rows sees to the last, so a masked key inside that range enters the values'
// product as 0·v (an Inf or NaN value there gives NaN, as in the formulation's product of the
// probabilities and the values). Blocks follow from the key count and positions alone, one task
// each: the bits do not depend on the threads. models.GroupedAttention emits the call at every
// query count.
//
// # Threads and determinism
//
// A product runs on up to Threads() threads: the caller plus workers of a small persistent
// pthread pool started on first use (signals blocked in them), or, with QUANTA_KERNEL_POOL=xla,
// XLA's own intra-op pool when XLA calls the kernel (case and white space around it ignored, as
// for quanta's other variables; a value other than xla or quanta is ignored with a ConfigNote). A product's result depends only on its
// inputs: never on the thread count, on which thread ran what, or on other products running at
// the same time (and on the caller's floating-point mode, which the workers take for its chunks:
// XLA's CPU client flushes denormals to zero, a Go program does not). k×n products (x·W) are split into stripes of stored rows whose number and bounds
// depend on the sizes alone (about a sixteenth of the weight each, at least 32 KiB, with at most
// a quarter of the weight's bytes in partial sums; for a float32 weight 256 rows, 64 at one
// activation row); each stripe adds its rows, in order, into a partial sum of its own, and the
// partials are added in stripe order. The columns are split into panels for the threads (about
// four tasks a thread; a float32 product of one row keeps whole rows, so that each task streams
// one contiguous block of the weight): every kernel sums a column's rows in order
// whatever panel it is in, since panel bounds are multiples of every kernel's column group (128)
// and tails fall only at the end of the columns. n×k products (x·Wᵀ) give each output to one
// chunk, whose bounds are multiples of 16 outputs (the kernels' output groups). Tasks are claimed
// from an atomic counter tagged with the job's generation, in runs of consecutive tasks that
// shrink to one task as the job's unclaimed tasks run out, so a descheduled thread delays at most
// its current run, and a worker that wakes after the job ended finds nothing to claim. Products below a small amount of work run on the caller alone, and a caller that finds
// the pool busy with another thread's product runs its tasks alone instead of waiting: the same
// stripes, so the same bits. A thread out of work (an idle worker, a caller waiting for the
// others' tasks) lingers for 200 µs, yielding its CPU between looks, before it blocks on a
// condition variable: waking a blocked thread costs tens of microseconds on a virtual machine,
// as much as one product of a small model's layer. The count is read once from
// QUANTA_KERNEL_THREADS (threadsEnv: a decimal in [1, maxThreads], white space around it allowed;
// an invalid value is ignored and a value out of range clamped, either way with a ConfigNote), else
// the online CPUs, and can be changed with SetThreads. Different instruction sets (forceISA) give
// different roundings.
//
// Scratch memory is per thread: 1 MiB of chunk scratch for each executing thread, and a per-call
// buffer on the calling thread for the prepared activations, the scale vectors and the stripes'
// partial sums, reused and grown across calls and freed when the thread exits.
//
// # Errors
//
// The Go functions return errors wrapping ErrArgument (a size, length, element type, block size
// or scale kind not accepted; nothing is written), ErrUnsupported (forceISA of a path the CPU
// lacks) or ErrNoMemory.
//
// # Tests and benchmarks
//
// The tests compare every product with a pure-Go reference written from the layout definitions (for
// ggml's types, package gguf's decoders, themselves checked against ggml's C code), on every ISA
// path forced in turn (`make test` also builds the AVX-512 path over SIMDe's portable intrinsics,
// build tag qk_simde: how a CPU without AVX-512 runs it), as planned and split into many stripes,
// panels and threads, through the generic drivers only and through the fused kernels wherever they
// apply; TestDeterministic checks that the bits never change with threads, panels, repeated calls
// or concurrent callers. The benchmarks (`go test -run '^$' -bench . ./internal/cpukernels/`;
// QUANTA_TEST_ALL=1 adds the 4096×11008 and 11008×4096 shapes) report stored-weight throughput, its
// fraction of the streaming-read bandwidth measured in the same run, CPU time per call and the
// ratio to the dense baseline; BenchmarkBestOfM1 interleaves one pass of every format at one row
// with the bandwidth probe and keeps each one's best round, for a machine shared with other work.
// Their figures belong in docs/performance.md (ggml's types: docs/ggml.md).
package cpukernels
