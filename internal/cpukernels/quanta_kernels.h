/*
 * quanta_kernels.h: quanta's CPU kernels for products of float activations with quantized
 * weights, as plain C functions on raw pointers (callable from any thread, including XLA FFI
 * handlers). See doc.go in this directory for the layouts, the ISA dispatch and the threading
 * model.
 *
 * Every product computes y (m x n, float32, row-major) = x (m x k, row-major) times a weight W
 * that is k x n logically, accumulating in float32, and overwrites y. A product reads each
 * weight byte once per call and never builds a dense weight.
 *
 * Argument contract, shared by all products:
 *   - m, k, n >= 0 (and the format's divisibility rules); an empty y (m == 0 or n == 0) is a
 *     no-op, and k == 0 writes zeros.
 *   - A pointer may be NULL only when the buffer it points to is empty; buffers must hold exactly
 *     the number of elements stated below (the caller checks lengths: the kernels cannot).
 *   - x is QK_F32 or QK_BF16; scales are QK_F32, QK_BF16 or QK_F16 where stated.
 *   - Buffers must not overlap y; they need no particular alignment.
 * Each function returns QK_OK or a negative QK_ERR_* status, and writes nothing on error.
 */
#ifndef QUANTA_KERNELS_H
#define QUANTA_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of activations and scales. */
enum {
  QK_F32 = 0,
  QK_BF16 = 1,
  QK_F16 = 2,
};

/* Statuses. */
enum {
  QK_OK = 0,
  QK_ERR_NULL = -1,  /* a pointer is NULL while its buffer is not empty */
  QK_ERR_SIZE = -2,  /* a size is negative, breaks the format's rules, or overflows */
  QK_ERR_DTYPE = -3, /* an element type the argument does not accept */
  QK_ERR_BLOCK = -4, /* the block size is not even and positive */
  QK_ERR_SCALE = -5, /* a scale kind the product does not accept */
  QK_ERR_ISA = -6,   /* the CPU (or this build) lacks the instruction set asked for */
  QK_ERR_NOMEM = -7, /* scratch memory could not be allocated */
  QK_ERR_TYPE = -8,  /* a weight type the kernels do not know */
};

/* qk_status_string names a status ("ok", "null pointer", ...); never NULL. */
const char *qk_status_string(int status);

/* Instruction-set paths. */
enum {
  QK_ISA_AUTO = 0, /* for qk_isa_force: the best path the CPU supports */
  QK_ISA_PORTABLE = 1,
  QK_ISA_AVX2 = 2,   /* AVX2 + FMA + F16C */
  QK_ISA_AVX512 = 3, /* AVX-512 F/BW/VL/DQ + FMA + F16C */
};

/* qk_isa_active returns the path the products use now. */
int qk_isa_active(void);
/* qk_isa_best returns the best path this CPU and build support. */
int qk_isa_best(void);
/* qk_isa_supported reports (1 or 0) whether isa can run here. */
int qk_isa_supported(int isa);
/* qk_isa_force makes every later product use isa (QK_ISA_AUTO: the best); QK_ERR_ISA if
 * unsupported. Meant for tests and benchmarks; not synchronized with products in flight. */
int qk_isa_force(int isa);
/* qk_isa_name returns "portable", "avx2", "avx512" or "auto"; "unknown" otherwise. */
const char *qk_isa_name(int isa);

/* Threads. The count is read once from QUANTA_KERNEL_THREADS (a decimal in [1, QK_MAX_THREADS],
 * white space around it allowed; one out of range is clamped, anything else ignored, see
 * qk_config_note), else the number of online CPUs. */
#define QK_MAX_THREADS 256
/* qk_threads returns the number of threads a product may use (the caller's included). */
int qk_threads(void);
/* qk_set_threads sets it (clamped to [1, QK_MAX_THREADS]); n <= 0 restores the default. Returns
 * the new count. */
int qk_set_threads(int n);
/* qk_config_note returns a sentence about an ignored or clamped QUANTA_KERNEL_THREADS, or NULL. */
const char *qk_config_note(void);
/* qk_pool_note returns a sentence about an ignored QUANTA_KERNEL_POOL (neither xla nor quanta), or
 * NULL. */
const char *qk_pool_note(void);

/* Scale kinds (int8, 2-bit and 1-bit products). */
enum {
  QK_SCALE_NONE = 0,   /* no scale (scale may be NULL) */
  QK_SCALE_TENSOR = 1, /* one value */
  QK_SCALE_K = 2,      /* one per contracted index: k values */
  QK_SCALE_N = 3,      /* one per output column: n values */
};

/*
 * NF4, blocks along n (x @ W, W stored k x n): packed uint8 (k, nb, bs/2) with nb = ceil(n/bs),
 * two codes a byte, the first (even) element in the high nibble; absmax (k, nb) in absmax_dtype.
 * W[i][j] = codebook[code] * absmax[i][j / bs]; codes past n in the last block are ignored.
 * block_size: even, positive.
 */
int qk_nf4_kn(const void *x, int x_dtype, const uint8_t *packed, const void *absmax, int absmax_dtype,
              int64_t m, int64_t k, int64_t n, int64_t block_size, float *y);

/*
 * NF4, blocks contracted (x @ W^T, W stored n x k): packed (n, nbk, bs/2) with nbk = ceil(k/bs),
 * absmax (n, nbk); y[i][j] = sum_l x[i][l] * codebook[code(j, l)] * absmax[j][l / bs]. Codes
 * past k in the last block are ignored.
 */
int qk_nf4_nk(const void *x, int x_dtype, const uint8_t *packed, const void *absmax, int absmax_dtype,
              int64_t m, int64_t k, int64_t n, int64_t block_size, float *y);

/*
 * The weight of either NF4 layout in float32: rows stored rows (k of qk_nf4_kn's, n of
 * qk_nf4_nk's) of span elements, packed (rows, ceil(span/bs), bs/2) and absmax (rows,
 * ceil(span/bs)); out[r][l] = codebook[code(r, l)] * absmax[r][l / bs], bit for bit the value the
 * products multiply. For XLA's dense product of many activation rows.
 */
int qk_nf4_decode(const uint8_t *packed, const void *absmax, int absmax_dtype, int64_t rows, int64_t span,
                  int64_t block_size, float *out);

/*
 * int8 codes with float scales. qk_int8_kn: w is k x n (x @ W); qk_int8_nk: w is n x k
 * (x @ W^T, bitsandbytes' Linear8bitLt). W = w * scale, with scale_kind QK_SCALE_NONE, _TENSOR,
 * _K (k values: a per-row scale of the k x n layout) or _N (n values: per column of k x n, per
 * row of n x k), in scale_dtype.
 */
int qk_int8_kn(const void *x, int x_dtype, const int8_t *w, const void *scale, int scale_dtype, int scale_kind,
               int64_t m, int64_t k, int64_t n, float *y);
int qk_int8_nk(const void *x, int x_dtype, const int8_t *w, const void *scale, int scale_dtype, int scale_kind,
               int64_t m, int64_t k, int64_t n, float *y);

/*
 * 2-bit binary/ternary (eformer's Array1B), x @ W with W k x n, k a multiple of 4: packed uint8
 * (k/4, n); with q = k/4, packed[p][j] = c[p][j] | c[q+p][j]<<2 | c[2q+p][j]<<4 | c[3q+p][j]<<6
 * where code c = value + 1 (code 3 reads as +2). scale: float32, QK_SCALE_NONE, _TENSOR or _N.
 */
int qk_twobit_kn(const void *x, int x_dtype, const uint8_t *packed, const float *scale, int scale_kind,
                 int64_t m, int64_t k, int64_t n, float *y);

/*
 * 1-bit binary, x @ W with W k x n, k a multiple of 8: packed uint8 (k/8, n); with e = k/8, row i
 * is bit (i / e) of packed row (i % e); bit 1 is +1, bit 0 is -1. scale as for qk_twobit_kn.
 */
int qk_onebit_kn(const void *x, int x_dtype, const uint8_t *packed, const float *scale, int scale_kind,
                 int64_t m, int64_t k, int64_t n, float *y);

/* ggml's block types, by ggml's type ids (ggml.h's enum ggml_type). */
enum {
  QK_GGML_Q4_0 = 2,
  QK_GGML_Q4_1 = 3,
  QK_GGML_Q5_0 = 6,
  QK_GGML_Q5_1 = 7,
  QK_GGML_Q8_0 = 8,
  QK_GGML_Q2_K = 10,
  QK_GGML_Q3_K = 11,
  QK_GGML_Q4_K = 12,
  QK_GGML_Q5_K = 13,
  QK_GGML_Q6_K = 14,
  QK_GGML_IQ4_NL = 20,
};

/* qk_ggml_block_info writes the elements and bytes of one block of ggml type `type`, or returns
 * QK_ERR_TYPE for a type that is not one of the above. */
int qk_ggml_block_info(int type, int64_t *block_size, int64_t *block_bytes);

/*
 * ggml's block types, x @ W^T with W n x k stored as a GGUF file stores it: blocks holds n rows of
 * k/bs blocks of ggml type `type` (bs elements in block_bytes bytes each: qk_ggml_block_info),
 * ggml-common.h's layouts, k a multiple of bs. W's values are ggml's dequantize_row_* values bit
 * for bit; y[i][j] = sum_l x[i][l] * W[j][l], accumulated in float32.
 */
int qk_ggml_nk(const void *x, int x_dtype, int type, const uint8_t *blocks, int64_t m, int64_t k, int64_t n,
               float *y);

/* The weight of qk_ggml_nk's layout in float32: rows rows of k elements (ggml's dequantize_row_*
 * values) into out (rows x k). */
int qk_ggml_decode(int type, const uint8_t *blocks, int64_t rows, int64_t k, float *out);

/*
 * Grouped-query attention: q (batch, heads, seq, hd) float32, keys and values (batch, kv, length,
 * hd) of kv_dtype QK_F32 or QK_F16 (read as their exact float32 values) with kv dividing heads
 * (query head h reads key/value head h / (heads/kv)), of which the first n_keys <= length
 * positions are read, visible (seq, n_keys) bytes (0: masked). For each query row, scores
 * s_t = (q · keys_t)·scale over the visible t, p = softmax(s) (exp(s_t − max) times the inverse of their
 * sum, added in eight lanes in a fixed order; the AVX2 path computes exp with a polynomial), out =
 * sum_t p_t·values_t (t in order); a row that sees no key is NaN, as the formulation's softmax
 * over -inf. Over more than 64 keys the softmax and sum run per block of 64 keys and the blocks'
 * rows are combined in order, weighted by their share of the exponentials. From 32 positions on
 * (seq >= 32, n_keys <= 16384, the converted keys and values of the call (batch·kv·n_keys·hd·8
 * bytes) at most 256 MiB), blocks of up to 64 positions instead take the keys from the first any
 * of their rows sees to the last as one softmax per row, their scores and weighted values as
 * float32 products; a masked key in that range adds 0·value. Each block of a row is computed by
 * one thread, in one order: the result does not depend on the thread count.
 * n_keys <= QK_ATTENTION_MAX_KEYS.
 */
#define QK_ATTENTION_MAX_KEYS (1 << 18)
int qk_attention(const float *q, const void *keys, const void *values, int kv_dtype, const uint8_t *visible,
                 int64_t batch, int64_t heads, int64_t kv, int64_t seq, int64_t length, int64_t n_keys, int64_t hd,
                 float scale, float *out);

/* Dense float32: y = x @ w with w k x n float32 (qk_f32_kn), y = x @ wᵀ with w n x k (qk_f32_nk). */
int qk_f32_kn(const float *x, const float *w, int64_t m, int64_t k, int64_t n, float *y);
int qk_f32_nk(const float *x, const float *w, int64_t m, int64_t k, int64_t n, float *y);

/* qk_read_probe reads bytes bytes at p with the product threads and returns a checksum: the
 * streaming-read bandwidth the products are measured against. */
uint64_t qk_read_probe(const void *p, int64_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* QUANTA_KERNELS_H */
