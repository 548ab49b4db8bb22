/* qk_api.c: the public products: argument checks, activation preparation, chunk planning, the
 * parallel run and the reduction of per-thread partial sums. */
#include <stdatomic.h>
#include <stdlib.h>

#include "qk_internal.h"

/* ---- tuning ---- */

static _Atomic int64_t tune_small_work = 256 << 10;
static _Atomic int64_t tune_chunk_bytes = 0;
static _Atomic int64_t tune_fused_max_m = -1;

int64_t qk_tune(int knob, int64_t value) {
  switch (knob) {
  case QK_TUNE_SPIN_NS: {
    int64_t old = qk_get_spin_ns();
    qk_set_spin_ns(value);
    return old;
  }
  case QK_TUNE_SMALL_WORK:
    return atomic_exchange(&tune_small_work, value);
  case QK_TUNE_CHUNK_BYTES:
    return atomic_exchange(&tune_chunk_bytes, value);
  case QK_TUNE_FUSED_MAX_M:
    return atomic_exchange(&tune_fused_max_m, value);
  }
  return 0;
}

/* fused_max_m returns the largest m a fused kernel serves: the ISA's own limit unless tuned, never
 * more than the kernels handle. */
static int64_t fused_max_m(const qk_ops *ops, int64_t own) {
  int64_t t = atomic_load_explicit(&tune_fused_max_m, memory_order_relaxed);
  return QK_MIN(t >= 0 ? t : own, ops->fused_cap_m);
}

/* ---- argument checks ---- */

/* Sizes are kept below 2^58 elements so every byte count and sum below fits in int64. */
#define QK_MAX_ELEMS (INT64_C(1) << 58)

static int mul(int64_t a, int64_t b, int64_t *r) {
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, r) || *r > QK_MAX_ELEMS) {
    return 0;
  }
  return 1;
}

static int mul3(int64_t a, int64_t b, int64_t c, int64_t *r) {
  int64_t t;
  return mul(a, b, &t) && mul(t, c, r);
}

static int need(const void *ptr, int64_t elems) { return elems == 0 || ptr != NULL; }

static int x_dtype_ok(int dt) { return dt == QK_F32 || dt == QK_BF16; }
static int scale_dtype_ok(int dt) { return dt == QK_F32 || dt == QK_BF16 || dt == QK_F16; }

/* check_common validates x (m x k), y (m x n) and the sizes. */
static int check_common(const void *x, int x_dtype, int64_t m, int64_t k, int64_t n, const float *y) {
  int64_t mk, mn;
  if (m < 0 || k < 0 || n < 0 || !mul(m, k, &mk) || !mul(m, n, &mn)) {
    return QK_ERR_SIZE;
  }
  if (!x_dtype_ok(x_dtype)) {
    return QK_ERR_DTYPE;
  }
  if (!need(x, mk) || !need(y, mn)) {
    return QK_ERR_NULL;
  }
  return QK_OK;
}

/* ---- activations ---- */

enum { XP_NATURAL, XP_PAIRS, XP_STRIDE8, XP_STRIDED };

/* prep_x writes x (m x k, x_dtype) as float32 rows of ldo into out, times kscale[l] if given:
 *   XP_NATURAL: same order;
 *   XP_PAIRS, XP_STRIDE8: QK_ORDER_PAIRS and QK_ORDER_STRIDE8 of qk_internal.h (the orders in
 *     which the AVX-512 NF4 kernels decode nibbles), zero past k up to ldo;
 *   XP_STRIDED: element rps*s+g is x[g*(k/rps)+s] (the order of a 2-bit or 1-bit tile). */
static void prep_x(const void *x, int x_dtype, int64_t m, int64_t k, const float *kscale, int mode, int rps,
                   float *out, int64_t ldo) {
  for (int64_t i = 0; i < m; i++) {
    float *o = out + i * ldo;
    if (mode == XP_NATURAL) {
      if (x_dtype == QK_BF16) {
        const uint16_t *src = (const uint16_t *)x + i * k;
        for (int64_t l = 0; l < k; l++) {
          o[l] = qk_bf16_f32(src[l]);
        }
      } else {
        memcpy(o, (const float *)x + i * k, (size_t)k * sizeof(float));
      }
      if (kscale != NULL) {
        for (int64_t l = 0; l < k; l++) {
          o[l] *= kscale[l];
        }
      }
    } else if (mode == XP_PAIRS || mode == XP_STRIDE8) {
      for (int64_t l = 0; l < ldo; l++) {
        int64_t src = mode == XP_PAIRS ? (l & ~(int64_t)31) + 2 * (l & 15) + ((l >> 4) & 1)
                                       : (l & ~(int64_t)127) + 8 * (l & 15) + (((l >> 4) & 7) ^ 1);
        float v = 0;
        if (src < k) {
          v = qk_load_scalar(x, x_dtype, i * k + src);
          if (kscale != NULL) {
            v *= kscale[src];
          }
        }
        o[l] = v;
      }
    } else {
      const int64_t S = k / rps;
      for (int64_t s = 0; s < S; s++) {
        for (int g = 0; g < rps; g++) {
          o[rps * s + g] = qk_load_scalar(x, x_dtype, i * k + g * S + s);
        }
      }
    }
  }
}

/* ---- the run ---- */

enum { RUN_GENERIC, RUN_NF4, RUN_NF4_M1, RUN_I8, RUN_LUT, RUN_LUT_M1 };

typedef struct {
  const qk_ops *ops;
  qk_prod *p;
  int64_t rows; /* stored rows per chunk */
  int run;
  int nslots;
} job;

static void kn_task(void *ctx, int64_t c, int slot, void *scratch) {
  job *j = (job *)ctx;
  qk_prod *p = j->p;
  int64_t s0 = c * j->rows, s1 = QK_MIN(s0 + j->rows, p->srows);
  float *part = p->part + (int64_t)slot * p->m * p->ldp;
  if (!p->part_used[slot]) {
    memset(part, 0, (size_t)(p->m * p->ldp) * sizeof(float));
    p->part_used[slot] = 1;
  }
  switch (j->run) {
  case RUN_NF4:
    j->ops->nf4_kn(p, s0, s1, part, scratch);
    break;
  case RUN_NF4_M1:
    j->ops->nf4_kn_m1(p, s0, s1, part, scratch);
    break;
  case RUN_I8:
    j->ops->i8_kn(p, s0, s1, part, scratch);
    break;
  case RUN_LUT:
    j->ops->tb_lut(p, s0, s1, part, scratch);
    break;
  case RUN_LUT_M1:
    j->ops->tb_lut_m1(p, s0, s1, part, scratch);
    break;
  default:
    qk_kn_generic(j->ops, p, s0, s1, part, scratch);
  }
}

static void nk_task(void *ctx, int64_t c, int slot, void *scratch) {
  (void)slot;
  job *j = (job *)ctx;
  qk_prod *p = j->p;
  int64_t n0 = c * j->rows, n1 = QK_MIN(n0 + j->rows, p->srows);
  switch (j->run) {
  case RUN_NF4:
    j->ops->nf4_nk(p, n0, n1, scratch);
    break;
  case RUN_NF4_M1:
    j->ops->nf4_nk_m1(p, n0, n1, scratch);
    break;
  case RUN_I8:
    j->ops->i8_nk(p, n0, n1, scratch);
    break;
  default:
    qk_nk_generic(j->ops, p, n0, n1, scratch);
  }
}

/* Partial column of output column j in the orders of qk_internal.h. */
QK_INLINE int64_t pair_pos(int64_t j) { return (j & ~(int64_t)31) + ((j & 1) << 4) + ((j & 31) >> 1); }
QK_INLINE int64_t stride8_pos(int64_t j) { return (j & ~(int64_t)127) + (((j & 7) ^ 1) << 4) + ((j & 127) >> 3); }
QK_INLINE int64_t stride4_pos(int64_t j) { return (j & ~(int64_t)63) + ((j & 3) << 4) + ((j & 63) >> 2); }

/* reduce_rows writes y rows [i0, i1) = post-scale * the sum of the used partials. */
static void reduce_rows(const qk_prod *p, int nslots, int64_t i0, int64_t i1) {
  const int64_t N = p->n;
  for (int64_t i = i0; i < i1; i++) {
    float *y = p->y + i * N;
    int first = 1;
    for (int s = 0; s < nslots; s++) {
      if (!p->part_used[s]) {
        continue;
      }
      const float *src = p->part + ((int64_t)s * p->m + i) * p->ldp;
      if (p->order == QK_ORDER_PAIRS) {
        if (first) {
          for (int64_t j = 0; j < N; j++) {
            y[j] = src[pair_pos(j)];
          }
        } else {
          for (int64_t j = 0; j < N; j++) {
            y[j] += src[pair_pos(j)];
          }
        }
      } else if (p->order == QK_ORDER_STRIDE8) {
        if (first) {
          for (int64_t j = 0; j < N; j++) {
            y[j] = src[stride8_pos(j)];
          }
        } else {
          for (int64_t j = 0; j < N; j++) {
            y[j] += src[stride8_pos(j)];
          }
        }
      } else if (p->order == QK_ORDER_STRIDE4) {
        if (first) {
          for (int64_t j = 0; j < N; j++) {
            y[j] = src[stride4_pos(j)];
          }
        } else {
          for (int64_t j = 0; j < N; j++) {
            y[j] += src[stride4_pos(j)];
          }
        }
      } else if (first) {
        memcpy(y, src, (size_t)N * sizeof(float));
      } else {
        for (int64_t j = 0; j < N; j++) {
          y[j] += src[j];
        }
      }
      first = 0;
    }
    if (first) {
      memset(y, 0, (size_t)N * sizeof(float));
    }
  }
  if (p->post.kind != QK_SCALE_NONE) {
    qk_prod q = *p;
    q.y = p->y + i0 * N;
    q.m = i1 - i0;
    qk_post_apply(&q, 0, N);
  }
}

typedef struct {
  const qk_prod *p;
  int nslots;
  int64_t rows;
} reduce_job;

static void reduce_task(void *ctx, int64_t c, int slot, void *scratch) {
  (void)slot;
  (void)scratch;
  reduce_job *r = (reduce_job *)ctx;
  int64_t i0 = c * r->rows;
  reduce_rows(r->p, r->nslots, i0, QK_MIN(i0 + r->rows, r->p->m));
}

/* plan picks the thread count and the stored rows per chunk (a multiple of align). */
static void plan(int64_t srows, int64_t row_bytes, int64_t m, int64_t align, int64_t max_rows, int *nthreads,
                 int64_t *rows) {
  int64_t total = srows * row_bytes;
  int T = qk_threads();
  int64_t work = total + total / 4 * m;
  if (work < atomic_load_explicit(&tune_small_work, memory_order_relaxed)) {
    T = 1;
  }
  int64_t target = atomic_load_explicit(&tune_chunk_bytes, memory_order_relaxed);
  if (target <= 0) {
    target = QK_MIN(QK_MAX(total / (8 * (int64_t)T), INT64_C(16) << 10), INT64_C(1) << 20);
  }
  int64_t r = (target + row_bytes - 1) / row_bytes;
  r = (r + align - 1) / align * align;
  r = QK_MIN(QK_MAX(r, align), max_rows);
  r = QK_MIN(r, srows);
  *rows = QK_MAX(r, 1);
  *nthreads = T;
}

/* run_kn runs a k x n product split along its stored rows and reduces the partial sums into y.
 * xbytes is the size of the prepared activations already at the start of the call buffer. */
static int run_kn(const qk_ops *ops, qk_prod *p, int run, int64_t align, int64_t max_rows, float *buf,
                  int64_t buf_floats) {
  int T;
  int64_t rows;
  plan(p->srows, p->row_bytes, p->m, align, max_rows, &T, &rows);
  int64_t nchunks = (p->srows + rows - 1) / rows;
  int nslots = (int)QK_MIN((int64_t)T, nchunks);
  /* partials follow the prepared activations in the call buffer */
  int64_t part_floats;
  if (!mul3(nslots, p->m, p->ldp, &part_floats)) {
    return QK_ERR_NOMEM;
  }
  size_t bytes = (size_t)(buf_floats + part_floats) * sizeof(float) + (size_t)nslots + 64;
  float *base = (float *)qk_call_buffer(bytes);
  if (base == NULL) {
    return QK_ERR_NOMEM;
  }
  if (buf != NULL && buf != base) {
    return QK_ERR_NOMEM; /* the activations were prepared in a buffer that moved: cannot happen */
  }
  p->part = base + buf_floats;
  p->part_used = (unsigned char *)(p->part + part_floats);
  memset(p->part_used, 0, (size_t)nslots);
  job j = {.ops = ops, .p = p, .rows = rows, .run = run, .nslots = nslots};
  int st = qk_parallel(nchunks, nslots, kn_task, &j);
  if (st != QK_OK) {
    return st;
  }
  int64_t red = p->m * p->n * nslots;
  if (red >= (INT64_C(1) << 18) && p->m >= 2 && T > 1) {
    int64_t rrows = QK_MAX(1, p->m / (4 * T));
    reduce_job r = {.p = p, .nslots = nslots, .rows = rrows};
    return qk_parallel((p->m + rrows - 1) / rrows, T, reduce_task, &r);
  }
  reduce_rows(p, nslots, 0, p->m);
  return QK_OK;
}

static int run_nk(const qk_ops *ops, qk_prod *p, int run) {
  int T;
  int64_t rows;
  plan(p->srows, p->row_bytes, p->m, 4, p->srows, &T, &rows);
  int64_t nchunks = (p->srows + rows - 1) / rows;
  job j = {.ops = ops, .p = p, .rows = rows, .run = run, .nslots = T};
  return qk_parallel(nchunks, T, nk_task, &j);
}

/* prepare reserves the call buffer for extra floats after m x ldx prepared activations (the
 * partials of run_kn are appended later in the same buffer, which is grown up front to avoid a
 * move) and fills the activations. Returns the buffer or NULL. */
static float *prepare(int64_t m, int64_t ldx, int64_t extra_floats, int64_t reserve_floats, int64_t *used) {
  int64_t xf;
  if (!mul(m, ldx, &xf)) {
    return NULL;
  }
  xf = (xf + 15) & ~(int64_t)15;
  *used = xf + extra_floats;
  size_t bytes = (size_t)(*used + reserve_floats) * sizeof(float) + 512;
  return (float *)qk_call_buffer(bytes);
}

/* Upper bound of the partial floats run_kn will append (all thread slots). */
static int64_t partial_reserve(int64_t m, int64_t ldp) {
  int64_t r;
  if (!mul3(qk_threads(), m, ldp, &r)) {
    return QK_MAX_ELEMS;
  }
  return r + QK_MAX_THREADS;
}

/* lead returns a row stride of at least cols floats, a multiple of 16, that is not a multiple of
 * 1 KiB: rows a multiple of 4 KiB apart share L1 sets, and a tile over a few dozen such rows
 * evicts itself. */
static int64_t lead(int64_t cols) {
  int64_t l = (cols + 15) & ~(int64_t)15;
  return l % 256 == 0 ? l + 16 : l;
}

/* pad_x says whether the generic drivers want the activations copied with a padded stride: their
 * micro-kernels sweep several rows of x at once when m is large. */
static int pad_x(int64_t m, int64_t k) { return m > 4 && k % 256 == 0; }

static void zero_y(float *y, int64_t m, int64_t n) { memset(y, 0, (size_t)(m * n) * sizeof(float)); }

/* ---- NF4 ---- */

static int nf4_check(const void *x, int x_dtype, const uint8_t *packed, const void *absmax, int absmax_dtype,
                     int64_t m, int64_t k, int64_t n, int64_t bs, const float *y, int64_t rows, int64_t elems,
                     int64_t *nb) {
  int st = check_common(x, x_dtype, m, k, n, y);
  if (st != QK_OK) {
    return st;
  }
  if (bs <= 0 || bs % 2 != 0 || bs > QK_MAX_ELEMS) {
    return QK_ERR_BLOCK;
  }
  if (!scale_dtype_ok(absmax_dtype)) {
    return QK_ERR_DTYPE;
  }
  *nb = (elems + bs - 1) / bs;
  int64_t pk, am;
  if (!mul3(rows, *nb, bs / 2, &pk) || !mul(rows, *nb, &am)) {
    return QK_ERR_SIZE;
  }
  if (!need(packed, pk) || !need(absmax, am)) {
    return QK_ERR_NULL;
  }
  return QK_OK;
}

/* nf4_run picks the kernel of an NF4 product: the single-row kernel (has_m1) for one row and a
 * block size it walks, the fused chunk kernel (has_fused) up to its row limit own_max, else the
 * generic tiled driver. */
static int nf4_run(const qk_ops *ops, int has_m1, int has_fused, int64_t own_max, int64_t m, int64_t block_size) {
  const int64_t fmax = fused_max_m(ops, own_max);
  if (has_m1 && m == 1 && fmax >= 1 && ((block_size % 8 == 0 && 128 % block_size == 0) || block_size % 128 == 0)) {
    return RUN_NF4_M1;
  }
  if (has_fused && m <= fmax && block_size % ops->nf4_bs_mod == 0) {
    return RUN_NF4;
  }
  return RUN_GENERIC;
}

/* nf4_prod describes an NF4 product whose weight has srows stored rows of nb blocks. */
static qk_prod nf4_prod(const uint8_t *packed, const void *absmax, int absmax_dtype, int64_t m, int64_t k, int64_t n,
                        int64_t block_size, int64_t nb, int64_t srows, float *y) {
  qk_prod p = {.fmt = QK_FMT_NF4, .m = m, .k = k, .n = n, .w = packed, .srows = srows, .rps = 1, .y = y};
  p.nf4 = (qk_nf4w){.packed = packed, .row_bytes = nb * block_size / 2, .bs = block_size, .nb = nb,
                     .absmax = absmax, .absmax_dtype = absmax_dtype};
  p.row_bytes = p.nf4.row_bytes + nb * (absmax_dtype == QK_F32 ? 4 : 2);
  return p;
}

int qk_nf4_kn(const void *x, int x_dtype, const uint8_t *packed, const void *absmax, int absmax_dtype, int64_t m,
              int64_t k, int64_t n, int64_t block_size, float *y) {
  int64_t nb;
  int st = nf4_check(x, x_dtype, packed, absmax, absmax_dtype, m, k, n, block_size, y, k, n, &nb);
  if (st != QK_OK || m == 0 || n == 0) {
    return st;
  }
  if (k == 0) {
    zero_y(y, m, n);
    return QK_OK;
  }
  const qk_ops *ops = qk_active_ops();
  const int run = nf4_run(ops, ops->nf4_kn_m1 != NULL, ops->nf4_kn != NULL, ops->nf4_kn_max_m, m, block_size);
  const int fused = run != RUN_GENERIC;
  qk_prod p = nf4_prod(packed, absmax, absmax_dtype, m, k, n, block_size, nb, k, y);
  p.order = run == RUN_NF4_M1 ? QK_ORDER_STRIDE8 : run == RUN_NF4 ? ops->nf4_order : QK_ORDER_NATURAL;
  p.ldp = lead(run == RUN_NF4_M1 ? (nb * block_size + 127) / 128 * 128 : fused ? nb * block_size : n);
  int64_t used = 0;
  float *buf = NULL;
  p.x = (const float *)x;
  p.ldx = k;
  if (x_dtype != QK_F32 || (!fused && pad_x(m, k))) {
    p.ldx = fused ? k : lead(k);
    buf = prepare(m, p.ldx, 0, partial_reserve(m, p.ldp), &used);
    if (buf == NULL) {
      return QK_ERR_NOMEM;
    }
    prep_x(x, x_dtype, m, k, NULL, XP_NATURAL, 1, buf, p.ldx);
    p.x = buf;
  }
  return run_kn(ops, &p, run, fused ? 8 : qk_kn_tile_rows(m), p.srows, buf, used);
}

int qk_nf4_nk(const void *x, int x_dtype, const uint8_t *packed, const void *absmax, int absmax_dtype, int64_t m,
              int64_t k, int64_t n, int64_t block_size, float *y) {
  int64_t nb;
  int st = nf4_check(x, x_dtype, packed, absmax, absmax_dtype, m, k, n, block_size, y, n, k, &nb);
  if (st != QK_OK || m == 0 || n == 0) {
    return st;
  }
  if (k == 0) {
    zero_y(y, m, n);
    return QK_OK;
  }
  const qk_ops *ops = qk_active_ops();
  const int run = nf4_run(ops, ops->nf4_nk_m1 != NULL, ops->nf4_nk != NULL, ops->nf4_nk_max_m, m, block_size);
  qk_prod p = nf4_prod(packed, absmax, absmax_dtype, m, k, n, block_size, nb, n, y);
  const int reorder = run == RUN_NF4_M1 || (run == RUN_NF4 && ops->nf4_order == QK_ORDER_PAIRS);
  if (reorder) {
    int64_t group = run == RUN_NF4 ? 32 : 128;
    int64_t ldx = (k + group - 1) / group * group, used;
    float *buf = prepare(m, ldx, 0, 0, &used);
    if (buf == NULL) {
      return QK_ERR_NOMEM;
    }
    prep_x(x, x_dtype, m, k, NULL, run == RUN_NF4 ? XP_PAIRS : XP_STRIDE8, 1, buf, ldx);
    p.x = buf;
    p.ldx = ldx;
  } else if (x_dtype == QK_F32 && (run != RUN_GENERIC || !pad_x(m, k))) {
    p.x = (const float *)x;
    p.ldx = k;
  } else {
    int64_t used;
    p.ldx = lead(k);
    float *buf = prepare(m, p.ldx, 0, 0, &used);
    if (buf == NULL) {
      return QK_ERR_NOMEM;
    }
    prep_x(x, x_dtype, m, k, NULL, XP_NATURAL, 1, buf, p.ldx);
    p.x = buf;
  }
  return run_nk(ops, &p, run);
}

/* ---- int8 ---- */

/* int8_setup validates and prepares an int8 product: a per-k scale is folded into the activations
 * (x[i][l] * scale[l], as the dense weight would multiply), a per-n or per-tensor scale
 * multiplies the outputs. */
static int int8_setup(const void *x, int x_dtype, const int8_t *w, const void *scale, int scale_dtype,
                      int scale_kind, int64_t m, int64_t k, int64_t n, float *y, qk_prod *p, int64_t ldp,
                      int64_t reserve, float **bufp, int64_t *usedp) {
  int st = check_common(x, x_dtype, m, k, n, y);
  if (st != QK_OK) {
    return st;
  }
  int64_t kn;
  if (!mul(k, n, &kn)) {
    return QK_ERR_SIZE;
  }
  if (!need(w, kn)) {
    return QK_ERR_NULL;
  }
  int64_t ns;
  switch (scale_kind) {
  case QK_SCALE_NONE:
    ns = 0;
    break;
  case QK_SCALE_TENSOR:
    ns = 1;
    break;
  case QK_SCALE_K:
    ns = k;
    break;
  case QK_SCALE_N:
    ns = n;
    break;
  default:
    return QK_ERR_SCALE;
  }
  if (scale_kind != QK_SCALE_NONE && !scale_dtype_ok(scale_dtype)) {
    return QK_ERR_DTYPE;
  }
  if (!need(scale, ns)) {
    return QK_ERR_NULL;
  }
  *p = (qk_prod){.fmt = QK_FMT_I8, .m = m, .k = k, .n = n, .w = (const uint8_t *)w, .rps = 1, .y = y, .ldp = ldp};
  if (m == 0 || n == 0 || k == 0) {
    return QK_OK;
  }
  int fold = scale_kind == QK_SCALE_K;
  int64_t extra = (scale_kind == QK_SCALE_K || scale_kind == QK_SCALE_N) ? ((ns + 15) & ~(int64_t)15) : 0;
  int copy_x = x_dtype != QK_F32 || fold || pad_x(m, k);
  int64_t ldx = copy_x ? lead(k) : k;
  int64_t used = 0;
  float *buf = NULL;
  if (copy_x || extra > 0) {
    buf = prepare(m, copy_x ? ldx : 0, extra, reserve, &used);
    if (buf == NULL) {
      return QK_ERR_NOMEM;
    }
  }
  float *sc = buf + (used - extra); /* the scale vector sits after the activations */
  if (extra > 0) {
    for (int64_t i = 0; i < ns; i++) {
      sc[i] = qk_load_scalar(scale, scale_dtype, i);
    }
  }
  if (copy_x) {
    prep_x(x, x_dtype, m, k, fold ? sc : NULL, XP_NATURAL, 1, buf, ldx);
    p->x = buf;
  } else {
    p->x = (const float *)x;
  }
  p->ldx = ldx;
  if (scale_kind == QK_SCALE_TENSOR) {
    p->post = (qk_post){.kind = QK_SCALE_TENSOR, .tensor = qk_load_scalar(scale, scale_dtype, 0)};
  } else if (scale_kind == QK_SCALE_N) {
    p->post = (qk_post){.kind = QK_SCALE_N, .col = sc};
  }
  *bufp = buf;
  *usedp = used;
  return QK_OK;
}

int qk_int8_kn(const void *x, int x_dtype, const int8_t *w, const void *scale, int scale_dtype, int scale_kind,
               int64_t m, int64_t k, int64_t n, float *y) {
  qk_prod p;
  float *buf = NULL;
  int64_t used = 0, ldp = lead(n);
  int st = int8_setup(x, x_dtype, w, scale, scale_dtype, scale_kind, m, k, n, y, &p, ldp,
                      n > 0 && m > 0 ? partial_reserve(m, ldp) : 0, &buf, &used);
  if (st != QK_OK || m == 0 || n == 0) {
    return st;
  }
  if (k == 0) {
    zero_y(y, m, n);
    return QK_OK;
  }
  const qk_ops *ops = qk_active_ops();
  int fused = ops->i8_kn != NULL && m <= fused_max_m(ops, ops->i8_kn_max_m);
  p.srows = k;
  p.row_bytes = n;
  return run_kn(ops, &p, fused ? RUN_I8 : RUN_GENERIC, fused ? 8 : qk_kn_tile_rows(m), p.srows, buf, used);
}

int qk_int8_nk(const void *x, int x_dtype, const int8_t *w, const void *scale, int scale_dtype, int scale_kind,
               int64_t m, int64_t k, int64_t n, float *y) {
  qk_prod p;
  float *buf = NULL;
  int64_t used = 0;
  int st = int8_setup(x, x_dtype, w, scale, scale_dtype, scale_kind, m, k, n, y, &p, 0, 0, &buf, &used);
  if (st != QK_OK || m == 0 || n == 0) {
    return st;
  }
  if (k == 0) {
    zero_y(y, m, n);
    return QK_OK;
  }
  const qk_ops *ops = qk_active_ops();
  int fused = ops->i8_nk != NULL && m <= fused_max_m(ops, ops->i8_nk_max_m);
  p.srows = n;
  p.row_bytes = k;
  return run_nk(ops, &p, fused ? RUN_I8 : RUN_GENERIC);
}

/* ---- 2-bit and 1-bit ---- */

/* Tables of the lookup kernels: two 16-float tables per activation row and stored row. */
#define LUT_MAX_M 512

static int tb_run(int fmt, const void *x, int x_dtype, const uint8_t *packed, const float *scale, int scale_kind,
                  int64_t m, int64_t k, int64_t n, float *y) {
  int st = check_common(x, x_dtype, m, k, n, y);
  if (st != QK_OK) {
    return st;
  }
  const int rps = fmt == QK_FMT_TB2 ? 4 : 8;
  if (k % rps != 0) {
    return QK_ERR_SIZE;
  }
  int64_t pk;
  if (!mul(k / rps, n, &pk)) {
    return QK_ERR_SIZE;
  }
  if (!need(packed, pk)) {
    return QK_ERR_NULL;
  }
  int64_t ns;
  switch (scale_kind) {
  case QK_SCALE_NONE:
    ns = 0;
    break;
  case QK_SCALE_TENSOR:
    ns = 1;
    break;
  case QK_SCALE_N:
    ns = n;
    break;
  default:
    return QK_ERR_SCALE;
  }
  if (!need(scale, ns)) {
    return QK_ERR_NULL;
  }
  if (m == 0 || n == 0) {
    return QK_OK;
  }
  if (k == 0) {
    zero_y(y, m, n);
    return QK_OK;
  }
  const qk_ops *ops = qk_active_ops();
  int lut = ops->tb_lut != NULL && m <= LUT_MAX_M && atomic_load(&tune_fused_max_m) != 0;
  int run = !lut ? RUN_GENERIC : (m == 1 && ops->tb_lut_m1 != NULL) ? RUN_LUT_M1 : RUN_LUT;
  qk_prod p = {.fmt = fmt, .m = m, .k = k, .n = n, .w = packed, .srows = k / rps, .row_bytes = n, .rps = rps, .y = y};
  p.order = run == RUN_LUT_M1 ? QK_ORDER_STRIDE4 : QK_ORDER_NATURAL;
  p.ldp = lead(run == RUN_LUT_M1 ? (n + 63) / 64 * 64 : n);
  if (scale_kind == QK_SCALE_TENSOR) {
    p.post = (qk_post){.kind = QK_SCALE_TENSOR, .tensor = scale[0]};
  } else if (scale_kind == QK_SCALE_N) {
    p.post = (qk_post){.kind = QK_SCALE_N, .col = scale};
  }
  float *buf = NULL;
  int64_t used = 0;
  p.x = (const float *)x;
  p.ldx = k;
  if (!lut || x_dtype != QK_F32) {
    p.ldx = lead(k);
    buf = prepare(m, p.ldx, 0, partial_reserve(m, p.ldp), &used);
    if (buf == NULL) {
      return QK_ERR_NOMEM;
    }
    prep_x(x, x_dtype, m, k, NULL, lut ? XP_NATURAL : XP_STRIDED, rps, buf, p.ldx);
    p.x = buf;
  }
  /* the lookup tables of a chunk (2 x 16 floats per activation row and stored row) fit the scratch */
  int64_t max_rows = lut ? QK_MAX(8, (QK_CHUNK_SCRATCH / (128 * m)) & ~(int64_t)7) : p.srows;
  return run_kn(ops, &p, run, lut ? 8 : QK_MAX(1, qk_kn_tile_rows(m) / rps), max_rows, buf, used);
}

int qk_twobit_kn(const void *x, int x_dtype, const uint8_t *packed, const float *scale, int scale_kind, int64_t m,
                 int64_t k, int64_t n, float *y) {
  return tb_run(QK_FMT_TB2, x, x_dtype, packed, scale, scale_kind, m, k, n, y);
}

int qk_onebit_kn(const void *x, int x_dtype, const uint8_t *packed, const float *scale, int scale_kind, int64_t m,
                 int64_t k, int64_t n, float *y) {
  return tb_run(QK_FMT_TB1, x, x_dtype, packed, scale, scale_kind, m, k, n, y);
}

/* ---- dense ---- */

int qk_f32_kn(const float *x, const float *w, int64_t m, int64_t k, int64_t n, float *y) {
  int st = check_common(x, QK_F32, m, k, n, y);
  if (st != QK_OK) {
    return st;
  }
  int64_t kn;
  if (!mul(k, n, &kn)) {
    return QK_ERR_SIZE;
  }
  if (!need(w, kn)) {
    return QK_ERR_NULL;
  }
  if (m == 0 || n == 0) {
    return QK_OK;
  }
  if (k == 0) {
    zero_y(y, m, n);
    return QK_OK;
  }
  qk_prod p = {.fmt = QK_FMT_F32, .m = m, .k = k, .n = n, .x = x, .ldx = k, .w = (const uint8_t *)w, .srows = k,
               .row_bytes = 4 * n, .rps = 1, .y = y};
  p.ldp = lead(n);
  float *buf = NULL;
  int64_t used = 0;
  if (pad_x(m, k)) {
    p.ldx = lead(k);
    buf = prepare(m, p.ldx, 0, partial_reserve(m, p.ldp), &used);
    if (buf == NULL) {
      return QK_ERR_NOMEM;
    }
    prep_x(x, QK_F32, m, k, NULL, XP_NATURAL, 1, buf, p.ldx);
    p.x = buf;
  }
  return run_kn(qk_active_ops(), &p, RUN_GENERIC, qk_kn_tile_rows(m), p.srows, buf, used);
}

/* ---- bandwidth probe ---- */

typedef struct {
  const uint64_t *p;
  int64_t words, per_chunk;
  _Atomic uint64_t sum;
} probe_job;

static void probe_task(void *ctx, int64_t c, int slot, void *scratch) {
  (void)slot;
  (void)scratch;
  probe_job *j = (probe_job *)ctx;
  int64_t a = c * j->per_chunk, b = QK_MIN(a + j->per_chunk, j->words);
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = a;
  for (; i + 4 <= b; i += 4) {
    s0 += j->p[i];
    s1 += j->p[i + 1];
    s2 += j->p[i + 2];
    s3 += j->p[i + 3];
  }
  for (; i < b; i++) {
    s0 += j->p[i];
  }
  atomic_fetch_add(&j->sum, s0 + s1 + s2 + s3);
}

uint64_t qk_read_probe(const void *p, int64_t bytes) {
  if (p == NULL || bytes < 8) {
    return 0;
  }
  probe_job j = {.p = (const uint64_t *)p, .words = bytes / 8, .per_chunk = (1 << 20) / 8};
  atomic_init(&j.sum, 0);
  qk_parallel((j.words + j.per_chunk - 1) / j.per_chunk, qk_threads(), probe_task, &j);
  return atomic_load(&j.sum);
}
