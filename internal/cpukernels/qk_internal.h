/* qk_internal.h: what the kernel files share. Not part of the public API. */
#ifndef QK_INTERNAL_H
#define QK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "quanta_kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#define QK_X86 1
#else
#define QK_X86 0
#endif

#define QK_INLINE static inline __attribute__((always_inline))
#define QK_MIN(a, b) ((a) < (b) ? (a) : (b))
#define QK_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Scratch each executing thread may use inside one chunk (decode tiles, LUT tables, x staging).
 * Drivers size their tiles to fit it. */
#define QK_CHUNK_SCRATCH (1u << 20)

/* ---- element conversions (portable, branch-free enough to sit in inner setup loops) ---- */

QK_INLINE float qk_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

QK_INLINE uint32_t qk_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

QK_INLINE float qk_bf16_f32(uint16_t h) { return qk_bits_f32((uint32_t)h << 16); }

/* qk_f16_f32 converts IEEE half to float exactly, without going through float denormals (which a
 * caller's DAZ mode would flush). */
QK_INLINE float qk_f16_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t mag = h & 0x7fffu;
  uint32_t bits;
  if (mag >= 0x7c00u) {
    bits = 0x7f800000u | ((mag & 0x3ffu) << 13); /* Inf, NaN (payload kept) */
  } else if (mag >= 0x0400u) {
    bits = (mag << 13) + ((uint32_t)(127 - 15) << 23); /* normal: rebias the exponent */
  } else {
    bits = qk_f32_bits((float)mag * 0x1p-24f); /* subnormal or zero: exact */
  }
  return qk_bits_f32(bits | sign);
}

QK_INLINE float qk_load_scalar(const void *p, int dtype, int64_t i) {
  switch (dtype) {
  case QK_BF16:
    return qk_bf16_f32(((const uint16_t *)p)[i]);
  case QK_F16:
    return qk_f16_f32(((const uint16_t *)p)[i]);
  default:
    return ((const float *)p)[i];
  }
}

/* ---- NF4 ---- */

extern const float qk_nf4_codebook[16];

/* qk_nf4w is an NF4 weight as its stored rows: row r holds nb blocks of bs elements, two codes a
 * byte (the first element in the high nibble), row_bytes = nb*bs/2, and one block scale per block.
 * The block scales are read only through qk_nf4_scale: a double-quantized absmax adds a case
 * there and nothing else changes. */
typedef struct {
  const uint8_t *packed;
  int64_t row_bytes, bs, nb;
  const void *absmax;
  int absmax_dtype;
} qk_nf4w;

/* qk_nf4_scale returns the float32 scale of block blk of stored row row. */
QK_INLINE float qk_nf4_scale(const qk_nf4w *w, int64_t row, int64_t blk) {
  return qk_load_scalar(w->absmax, w->absmax_dtype, row * w->nb + blk);
}

/* ---- products ---- */

enum { QK_FMT_F32, QK_FMT_NF4, QK_FMT_I8, QK_FMT_TB2, QK_FMT_TB1 };

/* Column orders of partial sums (kn products). Within each group of 32 (PAIRS) or 128 (STRIDE8)
 * columns, column c sits at:
 *   QK_ORDER_PAIRS: 16*(c%2) + c/2 (even columns, then odd: the high and low nibbles of 16 bytes);
 *   QK_ORDER_STRIDE8: 16*((c%8)^1) + c/8 (nibble s of the sixteen 32-bit words of 64 bytes, s =
 *   0..7, holds columns c%8 == s^1);
 *   QK_ORDER_STRIDE4 (groups of 64): 16*(c%4) + c/4 (byte b of the sixteen 32-bit words of 64
 *   bytes holds columns c%4 == b). */
enum { QK_ORDER_NATURAL, QK_ORDER_PAIRS, QK_ORDER_STRIDE8, QK_ORDER_STRIDE4 };

/* Post-scaling of outputs: y[i][j] *= scale (QK_SCALE_TENSOR) or scale[j] (QK_SCALE_N). */
typedef struct {
  int kind;
  float tensor;
  const float *col; /* n values, for QK_SCALE_N */
} qk_post;

/* qk_prod is one product as the drivers and chunk kernels see it. The weight is a sequence of
 * stored rows (srows of them, row_bytes each): for the k x n layouts ("kn") a stored row holds rps
 * logical rows of n columns (1 for f32/NF4/int8, 4 for 2-bit, 8 for 1-bit), and the work is
 * split along the stored rows with one partial sum per thread; for the n x k layouts ("nk") a
 * stored row is one output column and chunks write y directly. */
typedef struct qk_prod {
  int fmt;
  int64_t m, k, n;
  const float *x; /* prepared activations (float32), m rows of ldx; see qk_api.c for each path */
  int64_t ldx;
  const uint8_t *w; /* weight bytes */
  int64_t srows, row_bytes;
  int rps;
  qk_nf4w nf4;
  float *y; /* m rows of n */
  /* kn: per-slot partial sums, m rows of ldp, slot s at part + s*m*ldp; zeroed on first use */
  float *part;
  int64_t ldp;
  unsigned char *part_used; /* one flag per slot */
  int order;                /* column order of the partial sums: QK_ORDER_* */
  qk_post post;
} qk_prod;

/* Per-ISA kernels. Primitives (mk_*, *_row) serve the generic tiled drivers of qk_drive.c; the
 * chunk kernels, when not NULL, replace a driver for the products they accept. */
typedef struct qk_ops {
  int isa;
  /* C[i][0..P) += sum_l A[i][l] * B[l][0..P) for i < M, l < kb. */
  void (*mk_kn)(int64_t M, int64_t kb, int64_t P, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                int64_t ldc);
  /* C[i][r] += sum_l A[i][l] * B[r][l] for i < M, r < R, l < kb. */
  void (*mk_nk)(int64_t M, int64_t R, int64_t kb, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                int64_t ldc);
  /* Elements [e0, e0+cnt) of NF4 stored row `row` as float32 (e0 even). */
  void (*nf4_row)(const qk_nf4w *w, int64_t row, int64_t e0, int64_t cnt, float *out);
  /* cnt int8 codes as float32. */
  void (*i8_row)(const int8_t *src, int64_t cnt, float *out);
  /* Packed 2-bit (bits=2) or 1-bit (bits=1) rows [p0, p0+np), columns [c0, c0+cnt), as values:
   * out row (p-p0)*rps + g holds field g of packed row p (rps = 8/bits). */
  void (*tb_rows)(const uint8_t *packed, int64_t ldw, int bits, int64_t p0, int64_t np, int64_t c0, int64_t cnt,
                  float *out, int64_t ldo);

  /* Chunk kernels for small m: used up to the *_max_m below (the tuning knob may raise that up to
   * fused_cap_m, the most they handle); NF4 also needs a block size multiple of nf4_bs_mod. */
  int nf4_kn_max_m, nf4_nk_max_m, i8_kn_max_m, i8_nk_max_m;
  int64_t fused_cap_m;
  int nf4_bs_mod;
  /* The column order of nf4_kn's partial sums and of nf4_nk's activations: QK_ORDER_PAIRS or
   * QK_ORDER_NATURAL. */
  int nf4_order;
  /* kn NF4: stored rows [s0, s1) into part (in nf4_order). */
  void (*nf4_kn)(const qk_prod *p, int64_t s0, int64_t s1, float *part, void *scratch);
  /* kn NF4 for m = 1 and block sizes dividing 128 (multiples of 8) or multiples of 128: stored
   * rows [s0, s1) into part (QK_ORDER_STRIDE8). */
  void (*nf4_kn_m1)(const qk_prod *p, int64_t s0, int64_t s1, float *part, void *scratch);
  /* nk NF4: output columns [n0, n1), x in nf4_order (see qk_api.c). */
  void (*nf4_nk)(const qk_prod *p, int64_t n0, int64_t n1, void *scratch);
  /* nk NF4 for m = 1, block sizes as nf4_kn_m1: x in QK_ORDER_STRIDE8. */
  void (*nf4_nk_m1)(const qk_prod *p, int64_t n0, int64_t n1, void *scratch);
  void (*i8_kn)(const qk_prod *p, int64_t s0, int64_t s1, float *part, void *scratch);
  void (*i8_nk)(const qk_prod *p, int64_t n0, int64_t n1, void *scratch);
  /* 2-bit and 1-bit by table lookup, any m: stored rows [s0, s1) into part (QK_ORDER_NATURAL). */
  void (*tb_lut)(const qk_prod *p, int64_t s0, int64_t s1, float *part, void *scratch);
  /* The same for m = 1, into part in QK_ORDER_STRIDE4. */
  void (*tb_lut_m1)(const qk_prod *p, int64_t s0, int64_t s1, float *part, void *scratch);
} qk_ops;

extern const qk_ops qk_ops_portable;
#if QK_X86
extern const qk_ops qk_ops_avx2;
extern const qk_ops qk_ops_avx512;
#endif

/* ---- drivers (qk_drive.c) ---- */
/* Logical rows of the generic kn driver's tiles for m activation rows (chunks are planned in
 * multiples of it). */
int64_t qk_kn_tile_rows(int64_t m);
void qk_kn_generic(const qk_ops *ops, const qk_prod *p, int64_t s0, int64_t s1, float *part, void *scratch);
void qk_nk_generic(const qk_ops *ops, const qk_prod *p, int64_t n0, int64_t n1, void *scratch);
/* Applies p->post to y[i][n0..n1) for all i. */
void qk_post_apply(const qk_prod *p, int64_t n0, int64_t n1);

/* ---- CPU and threads (qk_cpu.c, qk_pool.c) ---- */
const qk_ops *qk_active_ops(void);

/* A task runs chunk `chunk` on behalf of thread slot `slot` (0 is the caller) with that thread's
 * chunk scratch (QK_CHUNK_SCRATCH bytes). */
typedef void (*qk_task)(void *ctx, int64_t chunk, int slot, void *scratch);
/* qk_parallel runs chunks [0, nchunks) on up to nthreads threads and returns when all are done.
 * Returns QK_ERR_NOMEM (running nothing) if the caller's scratch cannot be allocated. */
int qk_parallel(int64_t nchunks, int nthreads, qk_task task, void *ctx);
/* qk_call_buffer returns the calling thread's per-call buffer of at least bytes (64-aligned),
 * reused across calls; NULL if it cannot be allocated. */
void *qk_call_buffer(size_t bytes);

/* ---- tuning (tests and benchmarks) ---- */
enum {
  QK_TUNE_SPIN_NS = 0,     /* idle workers spin this long before blocking (ns) */
  QK_TUNE_SMALL_WORK = 1,  /* below this much weighted work (bytes), a product runs on the caller */
  QK_TUNE_CHUNK_BYTES = 2, /* weight bytes per chunk; 0: automatic */
  QK_TUNE_FUSED_MAX_M = 3, /* the fused kernels serve m up to this; -1: the ISA's default; 0 also
                              turns off the 2-bit/1-bit lookup kernels (all through the generic drivers) */
};
/* qk_tune sets a knob and returns its previous value. Not synchronized with products in flight. */
int64_t qk_tune(int knob, int64_t value);
void qk_set_spin_ns(int64_t ns);
int64_t qk_get_spin_ns(void);

#endif /* QK_INTERNAL_H */
