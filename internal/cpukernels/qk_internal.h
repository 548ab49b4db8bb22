/* qk_internal.h: what the kernel files share. Not part of the public API.
 *
 * The kernels are organised as ggml's type traits are: a table with one row per weight format
 * (qk_format) for each instruction set (qk_ops). A row holds the format's decode (the tile
 * function every product can run through, with the generic drivers of qk_drive.c) and, where an
 * ISA has them, fused chunk kernels that replace a driver for some products. The two product
 * shapes (k x n weights, x @ W; n x k weights, x @ W^T) each have one driver in qk_run.c that
 * plans the work, runs it on the pool and reduces it, whatever the format. */
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

/* QK_SWITCHn(v, F, ...) calls F(c, ...) with c the constant 1, 2, ... for v = c, and n for any
 * other v: the kernels take their tile sizes as const int parameters of always-inline functions,
 * so each case compiles to its own unrolled copy. */
#define QK_CASE(c, F, ...)                                                                                             \
  case c:                                                                                                              \
    F(c, __VA_ARGS__);                                                                                                 \
    break;
#define QK_CASES3(F, ...) QK_CASE(1, F, __VA_ARGS__) QK_CASE(2, F, __VA_ARGS__) QK_CASE(3, F, __VA_ARGS__)
#define QK_SWITCH2(v, F, ...)                                                                                          \
  switch (v) {                                                                                                         \
    QK_CASE(1, F, __VA_ARGS__)                                                                                         \
  default:                                                                                                             \
    F(2, __VA_ARGS__);                                                                                                 \
  }
#define QK_SWITCH4(v, F, ...)                                                                                          \
  switch (v) {                                                                                                         \
    QK_CASES3(F, __VA_ARGS__)                                                                                          \
  default:                                                                                                             \
    F(4, __VA_ARGS__);                                                                                                 \
  }
#define QK_SWITCH6(v, F, ...)                                                                                          \
  switch (v) {                                                                                                         \
    QK_CASES3(F, __VA_ARGS__) QK_CASE(4, F, __VA_ARGS__) QK_CASE(5, F, __VA_ARGS__)                                    \
  default:                                                                                                             \
    F(6, __VA_ARGS__);                                                                                                 \
  }
#define QK_SWITCH8(v, F, ...)                                                                                          \
  switch (v) {                                                                                                         \
    QK_CASES3(F, __VA_ARGS__) QK_CASE(4, F, __VA_ARGS__) QK_CASE(5, F, __VA_ARGS__) QK_CASE(6, F, __VA_ARGS__)         \
    QK_CASE(7, F, __VA_ARGS__)                                                                                         \
  default:                                                                                                             \
    F(8, __VA_ARGS__);                                                                                                 \
  }

/* QK_MK_NK(FN, INLINE, RMAX) defines, in an ISA's file, that ISA's mk_nk (qk_ops) over the file's
 * always-inline mk_nk_tile(MR, RR, kb, A, lda, B, ldb, C, ldc), which adds the products of MR <= 4
 * activation rows with RR <= RMAX weight rows into C: the outputs go in tiles of up to 4 activation
 * rows by RMAX weight rows, each size of tile with its own copy of mk_nk_tile (FN and INLINE: the
 * ISA's target attributes of a function and of an always-inline one). */
#define QK_MK_NK(FN, INLINE, RMAX)                                                                                     \
  INLINE void mk_nk_rows(const int RR, int mr, int64_t kb, const float *A, int64_t lda, const float *B, int64_t ldb,   \
                         float *C, int64_t ldc) {                                                                      \
    QK_SWITCH4(mr, mk_nk_tile, RR, kb, A, lda, B, ldb, C, ldc)                                                         \
  }                                                                                                                    \
  static FN void mk_nk(int64_t M, int64_t R, int64_t kb, const float *A, int64_t lda, const float *B, int64_t ldb,     \
                       float *C, int64_t ldc) {                                                                        \
    for (int64_t i0 = 0; i0 < M; i0 += 4) {                                                                            \
      const int mr = (int)QK_MIN(4, M - i0);                                                                           \
      for (int64_t r0 = 0; r0 < R; r0 += (RMAX)) {                                                                     \
        const int rr = (int)QK_MIN((RMAX), R - r0);                                                                    \
        const float *a = A + i0 * lda, *b = B + r0 * ldb;                                                              \
        float *c = C + i0 * ldc + r0;                                                                                  \
        QK_SWITCH##RMAX(rr, mk_nk_rows, mr, kb, a, lda, b, ldb, c, ldc)                                                \
      }                                                                                                                \
    }                                                                                                                  \
  }

/* QK_TRANSPOSE(FN, W, VEC, MASK_T, MASK, LOAD, ZERO, STORE, BLOCK) defines, in an ISA's file, that
 * ISA's transpose (qk_ops) in blocks of W x W floats: W rows of the tile loaded as VEC vectors
 * (LOAD(p, mask), the lanes past kc masked by MASK(kc - l0) of type MASK_T; ZERO() past nr), turned
 * over in registers by BLOCK(rows), and stored (STORE(p, v)) as rows of the panel. */
#define QK_TRANSPOSE(FN, W, VEC, MASK_T, MASK, LOAD, ZERO, STORE, BLOCK)                                              \
  static FN void transpose(const float *tile, int64_t ldt, int64_t nr, int64_t kc, float *panel, int64_t ldp) {    \
    for (int64_t j0 = 0; j0 < nr; j0 += (W)) {                                                                     \
      for (int64_t l0 = 0; l0 < kc; l0 += (W)) {                                                                   \
        const MASK_T m = MASK(kc - l0);                                                                            \
        VEC r[W];                                                                                                  \
        _Pragma("GCC unroll 16") for (int j = 0; j < (W); j++) {                                                   \
          r[j] = j0 + j < nr ? LOAD(tile + (j0 + j) * ldt + l0, m) : ZERO();                                       \
        }                                                                                                          \
        BLOCK(r);                                                                                                  \
        _Pragma("GCC unroll 16") for (int l = 0; l < (W); l++) {                                                   \
          if (l0 + l < kc) {                                                                                       \
            STORE(panel + (l0 + l) * ldp + j0, r[l]);                                                              \
          }                                                                                                        \
        }                                                                                                          \
      }                                                                                                            \
    }                                                                                                              \
  }

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

/* QK_NF4_TILE(FN, RUN) defines, in an ISA's file, its NF4 tile decode nf4_tile (a qk_tile_fn; FN
 * the ISA's target attribute) over the file's always-inline RUN(src, s, e, bend, o), which decodes
 * elements [e, bend) of one block of the stored row at src, whose scale is s, into o[0, bend - e):
 * nf4_tile walks the rows of the tile and, in each, the blocks its elements fall in. */
#define QK_NF4_TILE(FN, RUN)                                                                                           \
  static FN void nf4_tile(const qk_prod *p, int64_t r0, int64_t nr, int64_t c0, int64_t cnt, float *out,               \
                          int64_t ldo) {                                                                               \
    const qk_nf4w *w = &p->nf4;                                                                                        \
    const int64_t end = c0 + cnt;                                                                                      \
    for (int64_t r = 0; r < nr; r++) {                                                                                 \
      const int64_t row = r0 + r;                                                                                      \
      const uint8_t *src = w->packed + row * w->row_bytes;                                                             \
      for (int64_t e = c0; e < end;) {                                                                                 \
        const int64_t blk = e / w->bs, bend = QK_MIN((blk + 1) * w->bs, end);                                          \
        RUN(src, qk_nf4_scale(w, row, blk), e, bend, out + r * ldo + (e - c0));                                        \
        e = bend;                                                                                                      \
      }                                                                                                                \
    }                                                                                                                  \
  }

/* ---- products ---- */

/* The weight formats: the rows of the kernel table. QK_FMT_Q4_0 to QK_FMT_IQ4_NL are ggml's block
 * types (qk_ggml.h), in ggml's type order. */
enum {
  QK_FMT_F32,
  QK_FMT_NF4,
  QK_FMT_I8,
  QK_FMT_TB2,
  QK_FMT_TB1,
  QK_FMT_Q4_0,
  QK_FMT_Q4_1,
  QK_FMT_Q5_0,
  QK_FMT_Q5_1,
  QK_FMT_Q8_0,
  QK_FMT_Q2_K,
  QK_FMT_Q3_K,
  QK_FMT_Q4_K,
  QK_FMT_Q5_K,
  QK_FMT_Q6_K,
  QK_FMT_IQ4_NL,
  QK_NFMT
};

/* Column orders of partial sums (kn) or of prepared activations (nk). Within each group of 32
 * (PAIRS), 128 (STRIDE8) or 64 (STRIDE4) columns, column c sits at:
 *   QK_ORDER_PAIRS: 16*(c%2) + c/2 (even columns, then odd: the high and low nibbles of 16 bytes);
 *   QK_ORDER_STRIDE8: 16*((c%8)^1) + c/8 (nibble s of the sixteen 32-bit words of 64 bytes, s =
 *   0..7, holds columns c%8 == s^1);
 *   QK_ORDER_STRIDE4: 16*(c%4) + c/4 (byte b of the sixteen 32-bit words of 64 bytes holds
 *   columns c%4 == b);
 *   QK_ORDER_PAIRS8: 8*(c/8) + 4*(c%2) + (c%8)/2 (within each 8 the even columns, then the odd:
 *   16 bytes' nibbles looked up a byte at a time and interleaved back to floats). */
enum { QK_ORDER_NATURAL, QK_ORDER_PAIRS, QK_ORDER_STRIDE8, QK_ORDER_STRIDE4, QK_ORDER_PAIRS8 };

/* qk_order_group returns the size of the column groups an order permutes within (1: none). */
QK_INLINE int64_t qk_order_group(int order) {
  switch (order) {
  case QK_ORDER_PAIRS:
  case QK_ORDER_PAIRS8:
    return 32;
  case QK_ORDER_STRIDE8:
    return 128;
  case QK_ORDER_STRIDE4:
    return 64;
  }
  return 1;
}

/* qk_order_pos returns where column j sits in a row laid out in the given order. */
QK_INLINE int64_t qk_order_pos(int order, int64_t j) {
  switch (order) {
  case QK_ORDER_PAIRS:
    return (j & ~(int64_t)31) + ((j & 1) << 4) + ((j & 31) >> 1);
  case QK_ORDER_STRIDE8:
    return (j & ~(int64_t)127) + (((j & 7) ^ 1) << 4) + ((j & 127) >> 3);
  case QK_ORDER_STRIDE4:
    return (j & ~(int64_t)63) + ((j & 3) << 4) + ((j & 63) >> 2);
  case QK_ORDER_PAIRS8:
    return (j & ~(int64_t)7) + ((j & 1) << 2) + ((j & 7) >> 1);
  }
  return j;
}

/* Post-scaling of outputs: y[i][j] *= scale (QK_SCALE_TENSOR) or scale[j] (QK_SCALE_N). The
 * caller gives src (1 or n values of dtype); the driver sets tensor or col (float32). */
typedef struct {
  int kind;
  const void *src;
  int dtype;
  float tensor;
  const float *col;
} qk_post;

/* The 8-bit activations of the fused kernels that take them (qk_fused.x8 > 0): row i of x in
 * groups of x8 elements, each stored as int8 codes q = round(x * (127 / amax)) (ties to even; amax
 * the group's largest magnitude, q = 0 if it is 0) and the group's scale d = amax / 127, so that
 * the kernel multiplies x' = d * q; the sum of the codes of every 16 elements; and the group's
 * d * (sum of its codes), in float32 (the sum of its x'). Row i's codes are at q + i*ldq, its
 * scales at d + i*ldd, its sums at s + i*lds, its d * sums at ds + i*ldd. */
typedef struct {
  const int8_t *q;
  const float *d, *ds;
  const int16_t *s;
  int64_t ldq, ldd, lds;
} qk_x8;

/* qk_prod is one product as the drivers and chunk kernels see it. The weight is a sequence of
 * stored rows (srows of them, ldw bytes apart): for the k x n layouts ("kn") a stored row holds
 * rps logical rows of n columns (1 for f32/NF4/int8, 4 for 2-bit, 8 for 1-bit), and the work is
 * split along the stored rows into stripes with partial sums of their own, and along the columns
 * into panels; for the n x k layouts ("nk") a stored row is one output column and chunks write y
 * directly (for ggml's block types, ldw bytes of k/bs blocks: qk_ggml.h). */
typedef struct qk_prod {
  int fmt;
  int64_t m, k, n;
  const float *x; /* prepared activations (float32), m rows of ldx, in the order the kernel wants */
  int64_t ldx;
  const uint8_t *w; /* stored rows of the weight, ldw bytes apart */
  int64_t ldw, srows;
  int64_t row_bytes; /* weight bytes per stored row, scales included: the planner's measure of work */
  int rps;
  int elem_bits; /* bits of a stored row per column, for the kn driver's prefetch: 32, 8 or 4 */
  qk_nf4w nf4;
  qk_x8 x8; /* the 8-bit activations, for a fused kernel with x8 > 0 */
  float *y; /* m rows of n */
  /* kn: the partial sums of stripe s at part + s*m*ldp, in column order `order` */
  float *part;
  int64_t ldp;
  int order;
  qk_post post;
} qk_prod;

/* qk_nf4_bs32 accepts the NF4 products whose blocks are whole groups of 32 elements: the fused
 * kernels that read 32 codes at a time take only those (qk_fused.takes). */
static inline int qk_nf4_bs32(const qk_prod *p) { return p->nf4.bs % 32 == 0; }

/* A tile decode: stored rows [r0, r0+nr), columns (kn) or elements (nk) [c0, c0+cnt) of each, as
 * rps*nr float32 rows of ldo (c0 even for NF4). For 2-bit and 1-bit, out row rps*r+g holds field
 * g of stored row r0+r. */
typedef void (*qk_tile_fn)(const qk_prod *p, int64_t r0, int64_t nr, int64_t c0, int64_t cnt, float *out,
                           int64_t ldo);
/* A kn chunk kernel: stored rows [s0, s1), columns [c0, c1) of the kernel's column extent, added
 * into part (the stripe's partial sums, in the kernel's order). c0 and c1 are multiples of the
 * driver's column alignment, but for c1 at the end of the extent. */
typedef void (*qk_kn_fn)(const qk_prod *p, int64_t s0, int64_t s1, int64_t c0, int64_t c1, float *part,
                         void *scratch);
/* An nk chunk kernel: output columns [n0, n1), written to y before the post-scale. */
typedef void (*qk_nk_fn)(const qk_prod *p, int64_t n0, int64_t n1, void *scratch);

/* A fused chunk kernel, chosen over the generic driver for m up to max_m (tuning may set another
 * limit, never above cap_m) when takes accepts the product (NULL: every product). kn kernels keep
 * their partial sums, nk kernels read their activations, in column order `order`. An nk kernel
 * with x8 > 0 multiplies 8-bit activations in groups of x8 elements (qk_x8) instead; it serves
 * only finite activations (the others take the generic driver). */
typedef struct {
  qk_kn_fn kn;
  qk_nk_fn nk;
  int64_t max_m, cap_m;
  int order;
  int (*takes)(const qk_prod *p);
  int x8;
} qk_fused;

#define QK_MAX_FUSED 2

/* One format on one ISA: a row of the kernel table. tile serves the generic drivers (every row
 * has one); the fused kernels are listed by preference. */
typedef struct {
  qk_tile_fn tile;
  qk_fused kn[QK_MAX_FUSED], nk[QK_MAX_FUSED];
} qk_format;

/* The float32 micro-kernels of the generic drivers, and the table of formats, for one ISA. */
typedef struct qk_ops {
  int isa;
  /* C[i][0..P) += sum_l A[i][l] * B[l][0..P) for i < M, l < kb. */
  void (*mk_kn)(int64_t M, int64_t kb, int64_t P, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                int64_t ldc);
  /* C[i][r] += sum_l A[i][l] * B[r][l] for i < M, r < R, l < kb. */
  void (*mk_nk)(int64_t M, int64_t R, int64_t kb, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                int64_t ldc);
  /* Optional: panel[l*ldp + j] = tile[j*ldt + l] for j < nr, l < kc; it may also write the
   * columns from nr up to nr rounded up to the ISA's vector, which must fit in ldp. With it the
   * generic nk driver runs many activation rows on mk_kn (qk_drive.c). */
  void (*transpose)(const float *tile, int64_t ldt, int64_t nr, int64_t kc, float *panel, int64_t ldp);
  /* Optional: the 8-bit activations of float32 ones (qk_run.c's quantize_x8, the same bits). */
  void (*quantize_x8)(const float *x, int64_t m, int64_t k, int64_t g, int8_t *q, float *d, int16_t *s, float *ds);
  qk_format fmt[QK_NFMT];
} qk_ops;

extern const qk_ops qk_ops_portable;
#if QK_X86
extern const qk_ops qk_ops_avx2;
extern const qk_ops qk_ops_avx512;
#endif

/* The tile decode of float32 weights (a copy), the same on every ISA. */
void qk_f32_tile(const qk_prod *p, int64_t r0, int64_t nr, int64_t c0, int64_t cnt, float *out, int64_t ldo);

/* ---- drivers (qk_drive.c: generic tiled; qk_run.c: planning, the parallel run, reduction) ---- */
/* Logical rows of the generic kn driver's tiles for m activation rows. */
int64_t qk_kn_tile_rows(int64_t m);
void qk_kn_generic(const qk_ops *ops, const qk_prod *p, int64_t s0, int64_t s1, int64_t c0, int64_t c1, float *part,
                   void *scratch);
void qk_nk_generic(const qk_ops *ops, const qk_prod *p, int64_t n0, int64_t n1, void *scratch);
/* qk_nk_generic_chunk returns the output columns of a chunk the generic nk driver wants for p on
 * threads threads (a multiple of 16), or 0 for none in particular. */
int64_t qk_nk_generic_chunk(const qk_ops *ops, const qk_prod *p, int threads);
/* Applies p->post to y[i][n0..n1) for all i. */
void qk_post_apply(const qk_prod *p, int64_t n0, int64_t n1);

/* The caller's activations: x (m x k) of dtype, and optionally k scales (of kscale_dtype) that
 * multiply its columns before the product (int8's per-k scale). */
typedef struct {
  const void *x;
  int dtype;
  const void *kscale;
  int kscale_dtype;
} qk_acts;

/* qk_run_kn and qk_run_nk run a validated product described by p (its format, sizes, weight,
 * y and post; the rest is theirs): they pick the kernel from the table, prepare the activations
 * and scales in the calling thread's buffer, run the chunks on the pool and, for kn, reduce the
 * partial sums into y. */
int qk_run_kn(qk_prod *p, qk_acts a);
int qk_run_nk(qk_prod *p, qk_acts a);
/* qk_run_decode writes the validated weight of p (srows stored rows of span elements each, rps 1)
 * as float32 rows of span into out, with the format's tile decode, on the pool. */
int qk_run_decode(const qk_prod *p, int64_t span, float *out);
/* qk_nk_x8 returns the group of the 8-bit activations the nk product of format fmt with m rows
 * would run with on the active ISA (finite activations), or 0 if it runs on float activations. */
int qk_nk_x8(int fmt, int64_t m);
/* qk_x8_quantize writes the 8-bit activations of the float32 m x k activations x in groups of g
 * (as a product's preparation does, on the active ISA) into q (m*k), d and ds (m*k/g), s (m*k/16):
 * for tests, bit for bit across the ISAs. */
void qk_x8_quantize(const float *x, int64_t m, int64_t k, int64_t g, int8_t *q, float *d, int16_t *s, float *ds);

/* ---- CPU and threads (qk_cpu.c, qk_pool.c) ---- */
const qk_ops *qk_active_ops(void);

/* A task runs chunk `chunk` on behalf of thread slot `slot` (0 is the caller) with that thread's
 * chunk scratch (QK_CHUNK_SCRATCH bytes). */
typedef void (*qk_task)(void *ctx, int64_t chunk, int slot, void *scratch);
/* qk_parallel runs chunks [0, nchunks) on up to nthreads threads and returns when all are done.
 * Returns QK_ERR_NOMEM (running nothing) if the caller's scratch cannot be allocated. */
int qk_parallel(int64_t nchunks, int nthreads, qk_task task, void *ctx);
/* A scheduler runs task over chunks [0, nchunks) (with each executing thread's chunk scratch,
 * qk_thread_scratch) and returns when all are done, in place of the pool: qk_set_scheduler makes
 * fn(arg, ...) the calling thread's until it is cleared (fn NULL). The FFI handlers set XLA's
 * intra-op pool there when QK_TUNE_XLA_POOL is on. */
typedef int (*qk_scheduler)(void *arg, int64_t nchunks, int nthreads, qk_task task, void *ctx);
void qk_set_scheduler(qk_scheduler fn, void *arg);
/* qk_thread_scratch returns the calling thread's chunk scratch (QK_CHUNK_SCRATCH bytes), or NULL. */
void *qk_thread_scratch(void);
/* qk_call_buffer returns the calling thread's per-call buffer of at least bytes (64-aligned),
 * reused across calls; NULL if it cannot be allocated. */
void *qk_call_buffer(size_t bytes);

/* ---- tuning (tests and benchmarks) ---- */
enum {
  QK_TUNE_SPIN_NS = 0,     /* threads out of work linger this long before blocking (ns) */
  QK_TUNE_SMALL_WORK = 1,  /* below this much weighted work (bytes), a product runs on the caller */
  QK_TUNE_CHUNK_BYTES = 2, /* weight bytes per stripe (kn) or chunk (nk); 0: automatic */
  QK_TUNE_FUSED_MAX_M = 3, /* the fused kernels serve m up to this; -1: their default; 0 also turns off
                              the 2-bit/1-bit lookup kernels (all through the generic drivers) */
  QK_TUNE_PANELS = 4,      /* column panels of a kn product; 0: automatic */
  QK_TUNE_XLA_POOL = 5,    /* 1: products called by XLA run on XLA's intra-op pool, not quanta's */
};
/* qk_tune sets a knob and returns its previous value. Not synchronized with products in flight. */
int64_t qk_tune(int knob, int64_t value);
int64_t qk_tuned(int knob);
void qk_set_spin_ns(int64_t ns);
int64_t qk_get_spin_ns(void);

#endif /* QK_INTERNAL_H */
