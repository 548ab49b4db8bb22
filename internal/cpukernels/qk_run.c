/* qk_run.c: the one driver of each product shape, whatever the format: the kernel choice from the
 * table, the activations and scales prepared in the calling thread's buffer, the plan of the work,
 * the parallel run and, for k x n weights, the reduction of the partial sums.
 *
 * Determinism: a product's result depends on its inputs and sizes only, never on the thread
 * count or on which thread ran what. Every kernel adds the rows of its chunk into an output in
 * row order, so a k x n product is split into stripes of stored rows whose number and bounds
 * depend on the sizes alone; each stripe sums into a partial of its own, and the partials are
 * added in stripe order. Columns are split into panels for the threads: a column's sum does not
 * depend on the panel it is in, since panel bounds are multiples of every kernel's column group
 * (128) and the kernels' tails fall only at the end of the columns. An n x k product writes each
 * output from one chunk, whose bounds are multiples of the kernels' output groups (16). */
#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "qk_internal.h"

/* ---- tuning ---- */

/* Below this much work (weight bytes, plus a quarter of them per activation row) a product runs
 * on its caller's thread alone. 128 KiB puts SmolLM2's 576 x 576 NF4 projection (166 KiB) on two
 * threads, which decoded NF4 3-7 % faster than 256 KiB (docs/performance.md). */
static _Atomic int64_t tune_small_work = 128 << 10;
static _Atomic int64_t tune_chunk_bytes = 0;
static _Atomic int64_t tune_fused_max_m = -1;
static _Atomic int64_t tune_panels = 0;
static _Atomic int64_t tune_xla_pool = 0;

/* QUANTA_KERNEL_POOL=xla makes the kernels XLA calls run on XLA's intra-op pool (the default,
 * "quanta", is quanta's own pool): read once, at the first use of the knob or of qk_pool_note. As
 * quanta's other variables, white space around the value is ignored and its case too; any other
 * value is ignored with a note. */
static pthread_once_t pool_env_once = PTHREAD_ONCE_INIT;
static char pool_note[160];
static void pool_env_init(void) {
  const char *v = getenv("QUANTA_KERNEL_POOL");
  if (v == NULL) {
    return;
  }
  const char *s = v;
  while (isspace((unsigned char)*s)) {
    s++;
  }
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) {
    n--;
  }
  if (n == 0 || (n == 6 && strncasecmp(s, "quanta", 6) == 0)) {
    return;
  }
  if (n == 3 && strncasecmp(s, "xla", 3) == 0) {
    atomic_store(&tune_xla_pool, 1);
    return;
  }
  snprintf(pool_note, sizeof pool_note,
           "QUANTA_KERNEL_POOL=%.40s is neither xla nor quanta: ignored, the kernels run on quanta's pool", v);
}

const char *qk_pool_note(void) {
  pthread_once(&pool_env_once, pool_env_init);
  return pool_note[0] != '\0' ? pool_note : NULL;
}

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
  case QK_TUNE_PANELS:
    return atomic_exchange(&tune_panels, value);
  case QK_TUNE_XLA_POOL:
    pthread_once(&pool_env_once, pool_env_init);
    return atomic_exchange(&tune_xla_pool, value);
  }
  return 0;
}

int64_t qk_tuned(int knob) {
  switch (knob) {
  case QK_TUNE_SPIN_NS:
    return qk_get_spin_ns();
  case QK_TUNE_SMALL_WORK:
    return atomic_load(&tune_small_work);
  case QK_TUNE_CHUNK_BYTES:
    return atomic_load(&tune_chunk_bytes);
  case QK_TUNE_FUSED_MAX_M:
    return atomic_load(&tune_fused_max_m);
  case QK_TUNE_PANELS:
    return atomic_load(&tune_panels);
  case QK_TUNE_XLA_POOL:
    pthread_once(&pool_env_once, pool_env_init);
    return atomic_load(&tune_xla_pool);
  }
  return 0;
}

/* ---- the kernel choice ---- */

/* choose returns the first fused kernel of list that serves p, or NULL (the generic driver). */
static const qk_fused *choose(const qk_fused *list, const qk_prod *p) {
  const int64_t tuned = atomic_load_explicit(&tune_fused_max_m, memory_order_relaxed);
  for (int i = 0; i < QK_MAX_FUSED; i++) {
    const qk_fused *f = &list[i];
    if (f->kn == NULL && f->nk == NULL) {
      continue;
    }
    const int64_t limit = tuned >= 0 ? QK_MIN(tuned, f->cap_m) : f->max_m;
    if (p->m <= limit && (f->takes == NULL || f->takes(p))) {
      return f;
    }
  }
  return NULL;
}

/* ---- the call buffer ---- */

/* lead returns a row stride of at least cols floats, a multiple of 16, that is not a multiple of
 * 1 KiB: rows a multiple of 4 KiB apart share L1 sets, and a tile over a few dozen such rows
 * evicts itself. */
static int64_t lead(int64_t cols) {
  int64_t l = (cols + 15) & ~(int64_t)15;
  return l % 256 == 0 ? l + 16 : l;
}

/* Sizes are kept below 2^58 elements (checked by the entry points) so these never overflow. */
static int64_t up16(int64_t n) { return (n + 15) & ~(int64_t)15; }
static int64_t roundup(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

/* ---- activations ---- */

enum { XP_NATURAL, XP_ORDERED, XP_STRIDED };

/* prep_x writes the activations as float32 rows of ldo into out, times kscale[l] if given:
 *   XP_NATURAL: same order;
 *   XP_ORDERED: groups of qk_order_group(order) columns permuted as the order says, zero past k;
 *   XP_STRIDED: element rps*s+g is x[g*(k/rps)+s] (the rows of a 2-bit or 1-bit tile). */
static void prep_x(const qk_prod *p, qk_acts a, const float *kscale, int mode, int order, float *out, int64_t ldo) {
  const int64_t m = p->m, k = p->k;
  for (int64_t i = 0; i < m; i++) {
    float *o = out + i * ldo;
    if (mode == XP_NATURAL) {
      if (a.dtype == QK_BF16) {
        const uint16_t *src = (const uint16_t *)a.x + i * k;
        for (int64_t l = 0; l < k; l++) {
          o[l] = qk_bf16_f32(src[l]);
        }
      } else {
        memcpy(o, (const float *)a.x + i * k, (size_t)k * sizeof(float));
      }
      if (kscale != NULL) {
        for (int64_t l = 0; l < k; l++) {
          o[l] *= kscale[l];
        }
      }
    } else if (mode == XP_ORDERED) {
      for (int64_t l = 0; l < ldo; l++) {
        o[l] = 0;
      }
      for (int64_t l = 0; l < k; l++) {
        float v = qk_load_scalar(a.x, a.dtype, i * k + l);
        o[qk_order_pos(order, l)] = kscale != NULL ? v * kscale[l] : v;
      }
    } else {
      const int rps = p->rps;
      const int64_t S = k / rps;
      for (int64_t s = 0; s < S; s++) {
        for (int g = 0; g < rps; g++) {
          o[rps * s + g] = qk_load_scalar(a.x, a.dtype, i * k + g * S + s);
        }
      }
    }
  }
}

/* x8_fits reports whether the integer route can quantize the m x k activations in groups of g:
 * every activation finite (a quantized group would lose its infinities and NaNs), and every group
 * all zeros or with its largest magnitude in [2^-119, 2^119), so that 127/amax and amax/127 are
 * finite, normal floats and a group's d·Σq (at most 256·amax) is finite where the product need not
 * overflow. Otherwise the product takes the float route. Magnitudes compare as their bits (IEEE
 * order is integer order), so the loop has no branch and vectorizes. */
static int x8_fits(qk_acts a, int64_t m, int64_t k, int64_t g) {
  for (int64_t c = 0; c < m * k; c += g) {
    uint32_t top = 0;
    for (int64_t l = c; l < c + g; l++) {
      const uint32_t mag = qk_f32_bits(qk_load_scalar(a.x, a.dtype, l)) & 0x7fffffffu;
      top = mag > top ? mag : top;
    }
    if (top >= 0x7b000000u || (top != 0 && top < 0x04000000u)) { /* 2^119 or more, Inf, NaN; below 2^-119 */
      return 0;
    }
  }
  return 1;
}

/* round_even rounds v (|v| < 2^22) to the nearest integer, ties to even: adding and subtracting
 * 1.5 * 2^23 leaves the integer part in float32's last bit. The empty asm keeps the compiler from
 * fusing the caller's product into the addition (one rounding instead of two). */
static inline float round_even(float v) {
#if QK_X86
  __asm__("" : "+x"(v));
#else
  __asm__ volatile("" : "+m"(v));
#endif
  const float t = v + 12582912.0f;
  return t - 12582912.0f;
}

/* quantize_x8 writes the 8-bit activations (qk_x8) of the m x k activations a, in groups of g
 * elements (g divides k, a multiple of 16), into q, d, s and ds (rows of k, k/g, k/16 and k/g). */
static void quantize_x8(const qk_prod *p, qk_acts a, int64_t g, int8_t *q, float *d, int16_t *s, float *ds) {
  const qk_ops *ops = qk_active_ops();
  if (a.dtype == QK_F32 && ops->quantize_x8 != NULL) {
    ops->quantize_x8((const float *)a.x, p->m, p->k, g, q, d, s, ds);
    return;
  }
  const int64_t k = p->k;
  float v[256];
  for (int64_t i = 0; i < p->m; i++) {
    for (int64_t c = 0; c < k; c += g) {
      float amax = 0;
      for (int64_t l = 0; l < g; l++) {
        v[l] = qk_load_scalar(a.x, a.dtype, i * k + c + l);
        const float m = v[l] < 0 ? -v[l] : v[l];
        amax = m > amax ? m : amax;
      }
      const float id = amax > 0 ? 127.0f / amax : 0.0f;
      const float dg = amax / 127.0f;
      int total = 0;
      for (int64_t l = 0; l < g; l += 16) {
        int sum = 0;
        for (int64_t e = l; e < l + 16; e++) {
          const int code = (int)round_even(v[e] * id);
          q[i * k + c + e] = (int8_t)code;
          sum += code;
        }
        s[(i * k + c + l) / 16] = (int16_t)sum;
        total += sum;
      }
      d[(i * k + c) / g] = dg;
      ds[(i * k + c) / g] = dg * (float)total;
    }
  }
}

void qk_x8_quantize(const float *x, int64_t m, int64_t k, int64_t g, int8_t *q, float *d, int16_t *s, float *ds) {
  const qk_prod p = {.m = m, .k = k};
  quantize_x8(&p, (qk_acts){.x = x, .dtype = QK_F32}, g, q, d, s, ds);
}

/* layout says how the chosen kernel wants the activations: the mode, and a stride (0: x as given,
 * float32 rows of k, no copy). */
typedef struct {
  int mode, order;
  int64_t ldx;
} x_layout;

/* pad_x says whether a kn product wants the activations copied with a padded stride (lead): the
 * generic drivers' micro-kernels sweep several rows of x at once when m is large, and a fused
 * kernel serving more than 16 rows reads x down its rows (the 2- and 1-bit tables are built from
 * a column of x across the rows), which a stride of a multiple of 4 KiB maps onto one set of each
 * cache: the 1-bit product of 256 rows of 8192 ran 3.7x slower than with the stride padded. For
 * other strides the copy costs more than it saves. */
static int pad_x(int64_t m, int64_t k, int fused) {
  return fused ? m > 16 && k % 1024 == 0 : m > 4 && k % 256 == 0;
}

static x_layout x_layout_for(const qk_prod *p, qk_acts a, const qk_fused *f, int nk) {
  const int convert = a.dtype != QK_F32 || a.kscale != NULL;
  if (f != NULL && f->x8 > 0) {
    return (x_layout){XP_NATURAL, QK_ORDER_NATURAL, 0}; /* no float activations */
  }
  if (f != NULL && nk && f->order != QK_ORDER_NATURAL) {
    return (x_layout){XP_ORDERED, f->order, roundup(p->k, qk_order_group(f->order))};
  }
  if (f == NULL && !nk && p->rps > 1) {
    return (x_layout){XP_STRIDED, QK_ORDER_NATURAL, lead(p->k)};
  }
  if ((f == NULL || !nk) && pad_x(p->m, p->k, f != NULL)) {
    return (x_layout){XP_NATURAL, QK_ORDER_NATURAL, lead(p->k)};
  }
  return (x_layout){XP_NATURAL, QK_ORDER_NATURAL, convert ? p->k : 0};
}

/* The call buffer: prepared activations, scale vectors, partial sums, 8-bit activations. */
typedef struct {
  float *x, *kscale, *col, *part, *x8;
} carve;

/* prepare lays out the calling thread's buffer for x, the scale vectors, part_floats of partial
 * sums and, for a kernel of 8-bit activations in groups of x8, those; fills x, the scales and the
 * 8-bit activations, and points p at them. */
static int prepare(qk_prod *p, qk_acts a, x_layout xl, int64_t part_floats, int64_t x8) {
  const int64_t xf = xl.ldx > 0 ? up16(p->m * xl.ldx) : 0;
  const int64_t kf = a.kscale != NULL ? up16(p->k) : 0;
  const int64_t cf = p->post.kind == QK_SCALE_N && p->post.dtype != QK_F32 ? up16(p->n) : 0;
  /* codes (k bytes a row), scales (k/x8 floats), sums (k/16 int16), scales times sums (k/x8
   * floats), each area 64-byte aligned */
  const int64_t qf =
      x8 > 0 ? up16(p->m * p->k / 4 + 1) + 2 * up16(p->m * p->k / x8) + up16(p->m * p->k / 32 + 1) : 0;
  float *buf = (float *)qk_call_buffer((size_t)(xf + kf + cf + part_floats + qf) * sizeof(float) + 64);
  if (buf == NULL) {
    return QK_ERR_NOMEM;
  }
  carve c = {.x = buf, .kscale = buf + xf, .col = buf + xf + kf, .part = buf + xf + kf + cf,
             .x8 = buf + xf + kf + cf + part_floats};
  if (x8 > 0) {
    int8_t *q = (int8_t *)c.x8;
    float *d = c.x8 + up16(p->m * p->k / 4 + 1);
    float *ds = d + up16(p->m * p->k / x8);
    int16_t *s = (int16_t *)(ds + up16(p->m * p->k / x8));
    quantize_x8(p, a, x8, q, d, s, ds);
    p->x8 = (qk_x8){.q = q, .d = d, .ds = ds, .s = s, .ldq = p->k, .ldd = p->k / x8, .lds = p->k / 16};
  }
  const float *ks = NULL;
  if (kf > 0) {
    for (int64_t l = 0; l < p->k; l++) {
      c.kscale[l] = qk_load_scalar(a.kscale, a.kscale_dtype, l);
    }
    ks = c.kscale;
  }
  switch (p->post.kind) {
  case QK_SCALE_TENSOR:
    p->post.tensor = qk_load_scalar(p->post.src, p->post.dtype, 0);
    break;
  case QK_SCALE_N:
    if (cf > 0) {
      for (int64_t j = 0; j < p->n; j++) {
        c.col[j] = qk_load_scalar(p->post.src, p->post.dtype, j);
      }
      p->post.col = c.col;
    } else {
      p->post.col = (const float *)p->post.src;
    }
    break;
  }
  if (xl.ldx > 0) {
    prep_x(p, a, ks, xl.mode, xl.order, c.x, xl.ldx);
    p->x = c.x;
    p->ldx = xl.ldx;
  } else {
    p->x = (const float *)a.x;
    p->ldx = p->k;
  }
  p->part = c.part;
  return QK_OK;
}

/* threads_for returns the threads a product of this many weight bytes may use: one below a small
 * amount of work. */
static int threads_for(int64_t total, int64_t m) {
  int64_t work = total + total / 4 * m;
  return work < atomic_load_explicit(&tune_small_work, memory_order_relaxed) ? 1 : qk_threads();
}

/* ---- k x n ---- */

/* A kn plan. Stripes (fixed by the sizes) of stored rows, each run as kernel calls of at most
 * call_rows rows; panels (by the thread count) of columns. A task is one (stripe, panel). */
typedef struct {
  const qk_ops *ops;
  const qk_fused *f;
  qk_prod *p;
  int64_t stripe_rows, nstripes, call_rows;
  int64_t panel_cols, npanels, ext;
} kn_job;

static void kn_task(void *ctx, int64_t t, int slot, void *scratch) {
  (void)slot;
  kn_job *j = (kn_job *)ctx;
  qk_prod *p = j->p;
  const int64_t s = t / j->npanels, pn = t % j->npanels;
  const int64_t r0 = s * j->stripe_rows, r1 = QK_MIN(r0 + j->stripe_rows, p->srows);
  const int64_t c0 = pn * j->panel_cols, c1 = QK_MIN(c0 + j->panel_cols, j->ext);
  float *part = p->part + s * p->m * p->ldp;
  for (int64_t i = 0; i < p->m; i++) {
    memset(part + i * p->ldp + c0, 0, (size_t)(c1 - c0) * sizeof(float));
  }
  for (int64_t r = r0; r < r1; r += j->call_rows) {
    const int64_t re = QK_MIN(r + j->call_rows, r1);
    if (j->f != NULL) {
      j->f->kn(p, r, re, c0, c1, part, scratch);
    } else {
      qk_kn_generic(j->ops, p, r, re, c0, c1, part, scratch);
    }
  }
}

/* reduce_rows writes y rows [i0, i1): the stripes' partial sums added in stripe order (into the
 * first stripe's), read in the partials' column order, post-scaled. */
static void reduce_rows(const kn_job *j, int64_t i0, int64_t i1) {
  const qk_prod *p = j->p;
  const int64_t N = p->n, stride = p->m * p->ldp;
  for (int64_t i = i0; i < i1; i++) {
    float *acc = p->part + i * p->ldp;
    for (int64_t s = 1; s < j->nstripes; s++) {
      const float *src = acc + s * stride;
      for (int64_t c = 0; c < j->ext; c++) {
        acc[c] += src[c];
      }
    }
    float *y = p->y + i * N;
    if (p->order == QK_ORDER_NATURAL) {
      memcpy(y, acc, (size_t)N * sizeof(float));
    } else {
      for (int64_t c = 0; c < N; c++) {
        y[c] = acc[qk_order_pos(p->order, c)];
      }
    }
  }
  qk_prod q = *p;
  q.y = p->y + i0 * N;
  q.m = i1 - i0;
  qk_post_apply(&q, 0, N);
}

typedef struct {
  const kn_job *j;
  int64_t rows;
} reduce_job;

static void reduce_task(void *ctx, int64_t c, int slot, void *scratch) {
  (void)slot;
  (void)scratch;
  reduce_job *r = (reduce_job *)ctx;
  int64_t i0 = c * r->rows;
  reduce_rows(r->j, i0, QK_MIN(i0 + r->rows, r->j->p->m));
}

static int64_t gcd(int64_t a, int64_t b) {
  while (b != 0) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Stored rows per stripe of a float32 weight; at one activation row (a gemv, which reuses no
 * weight), fewer rows a stripe and the stripes whole rows wide: each task then streams one
 * contiguous block of the weight, where panels of columns read short strided segments of each
 * row (docs/performance.md). */
#define F32_STRIPE_ROWS 256
#define F32_GEMV_STRIPE_ROWS 64

/* The column alignment of panels: the largest column group of any kernel (128), and the NF4 block
 * for kernels that walk whole blocks. */
#define PANEL_ALIGN 128

int qk_run_kn(qk_prod *p, qk_acts a) {
  const qk_ops *ops = qk_active_ops();
  const qk_fused *f = choose(ops->fmt[p->fmt].kn, p);
  kn_job j = {.ops = ops, .f = f, .p = p};
  /* the columns the kernel covers: NF4's fused kernels run over whole blocks; groups of an order
   * are whole */
  p->order = f != NULL ? f->order : QK_ORDER_NATURAL;
  int64_t cols = p->n, align = PANEL_ALIGN;
  if (f != NULL && p->fmt == QK_FMT_NF4) {
    cols = p->nf4.nb * p->nf4.bs;
    align = PANEL_ALIGN / gcd(PANEL_ALIGN, p->nf4.bs) * p->nf4.bs;
  }
  j.ext = roundup(cols, qk_order_group(p->order));
  p->ldp = lead(j.ext);

  /* Stripes: about a sixteenth of the weight each but at least 32 KiB, and no more partial sums
   * in all than a quarter of the weight's bytes (at least 64 KiB). Whole generic tiles (or 8 rows
   * for the fused kernels, the most they take per pass). Enough stripes to share among the
   * threads matter: a panel narrower than the weight's rows costs the fused NF4 kernel more than
   * the stripes' partial sums cost. */
  const int64_t total = p->srows * p->row_bytes;
  const int64_t rows_align = f != NULL ? 8 : QK_MAX(1, qk_kn_tile_rows(p->m) / p->rps);
  const int64_t units = (p->srows + rows_align - 1) / rows_align;
  const int64_t tuned_bytes = atomic_load_explicit(&tune_chunk_bytes, memory_order_relaxed);
  int64_t nst;
  if (tuned_bytes > 0) {
    nst = (total + tuned_bytes - 1) / tuned_bytes;
  } else if (p->fmt == QK_FMT_F32) {
    /* by the rows alone: a column's sum is then the same whatever the other columns, so a
     * product of weights side by side (fused projections) gives each one's bits */
    const int64_t rows = p->m == 1 ? F32_GEMV_STRIPE_ROWS : F32_STRIPE_ROWS;
    nst = (p->srows + rows - 1) / rows;
  } else {
    const int64_t target = QK_MAX(total / 16, INT64_C(32) << 10);
    const int64_t partial_bytes = p->m * p->ldp * (int64_t)sizeof(float);
    nst = QK_MIN((total + target - 1) / target, QK_MAX(total / 4, INT64_C(64) << 10) / partial_bytes);
  }
  nst = QK_MIN(QK_MAX(nst, 1), units);
  j.stripe_rows = (units + nst - 1) / nst * rows_align;
  j.nstripes = (p->srows + j.stripe_rows - 1) / j.stripe_rows;

  /* calls within a stripe: the lookup kernels' tables (2 x 16 floats per activation row and
   * stored row) must fit the chunk scratch */
  j.call_rows = j.stripe_rows;
  if (f != NULL && p->rps > 1) {
    j.call_rows = QK_MAX(8, (QK_CHUNK_SCRATCH / (128 * p->m)) & ~(int64_t)7);
  }

  /* Panels: about four tasks a thread (a float32 gemv: one, whole rows). */
  const int T = threads_for(total, p->m);
  int64_t np = atomic_load_explicit(&tune_panels, memory_order_relaxed);
  if (np <= 0) {
    np = T > 1 && !(p->fmt == QK_FMT_F32 && p->m == 1) ? (4 * (int64_t)T + j.nstripes - 1) / j.nstripes : 1;
  }
  np = QK_MIN(np, (j.ext + align - 1) / align);
  j.panel_cols = roundup((j.ext + np - 1) / np, align);
  j.npanels = (j.ext + j.panel_cols - 1) / j.panel_cols;

  const x_layout xl = x_layout_for(p, a, f, 0);
  int st = prepare(p, a, xl, j.nstripes * p->m * p->ldp, 0);
  if (st != QK_OK) {
    return st;
  }
  st = qk_parallel(j.nstripes * j.npanels, T, kn_task, &j);
  if (st != QK_OK) {
    return st;
  }
  if (j.nstripes * p->m * p->n >= (INT64_C(1) << 18) && p->m >= 2 && T > 1) {
    reduce_job r = {.j = &j, .rows = QK_MAX(1, p->m / (4 * T))};
    return qk_parallel((p->m + r.rows - 1) / r.rows, T, reduce_task, &r);
  }
  reduce_rows(&j, 0, p->m);
  return QK_OK;
}

/* ---- n x k ---- */

typedef struct {
  const qk_ops *ops;
  const qk_fused *f;
  const qk_prod *p;
  int64_t rows;
} nk_job;

static void nk_task(void *ctx, int64_t c, int slot, void *scratch) {
  (void)slot;
  nk_job *j = (nk_job *)ctx;
  const int64_t n0 = c * j->rows, n1 = QK_MIN(n0 + j->rows, j->p->srows);
  if (j->f != NULL) {
    j->f->nk(j->p, n0, n1, scratch);
  } else {
    qk_nk_generic(j->ops, j->p, n0, n1, scratch);
  }
  qk_post_apply(j->p, n0, n1);
}

/* Chunks of whole groups of outputs (the kernels take up to 8 at a time): an output's sum is
 * then the same whatever the chunks. */
#define NK_ALIGN 16

int qk_nk_x8(int fmt, int64_t m) {
  const qk_prod p = {.fmt = fmt, .m = m};
  const qk_fused *f = choose(qk_active_ops()->fmt[fmt].nk, &p);
  return f != NULL ? f->x8 : 0;
}

int qk_run_nk(qk_prod *p, qk_acts a) {
  const qk_ops *ops = qk_active_ops();
  const qk_fused *f = choose(ops->fmt[p->fmt].nk, p);
  if (f != NULL && f->x8 > 0 && !x8_fits(a, p->m, p->k, f->x8)) {
    f = NULL;
  }
  p->order = f != NULL ? f->order : QK_ORDER_NATURAL;
  const int64_t total = p->srows * p->row_bytes;
  const int T = threads_for(total, p->m);
  const int64_t tuned = atomic_load_explicit(&tune_chunk_bytes, memory_order_relaxed);
  int64_t target = tuned;
  if (target <= 0) {
    target = QK_MIN(QK_MAX(total / (8 * (int64_t)T), INT64_C(16) << 10), INT64_C(1) << 20);
  }
  int64_t rows = roundup(QK_MAX(1, (target + p->row_bytes - 1) / p->row_bytes), NK_ALIGN);
  if (f == NULL && tuned <= 0) {
    const int64_t generic = qk_nk_generic_chunk(ops, p, T);
    rows = generic > 0 ? generic : rows;
  }
  nk_job j = {.ops = ops, .f = f, .p = p, .rows = QK_MIN(rows, roundup(p->srows, NK_ALIGN))};
  int st = prepare(p, a, x_layout_for(p, a, f, 1), 0, f != NULL ? f->x8 : 0);
  if (st != QK_OK) {
    return st;
  }
  return qk_parallel((p->srows + j.rows - 1) / j.rows, T, nk_task, &j);
}

/* ---- decode ---- */

/* A decode task writes DECODE_ROWS stored rows, DECODE_COLS elements (whole K-quant super-blocks)
 * at a time. Each element is decoded on its own, so the bits do not depend on the tasks. */
#define DECODE_ROWS 4
#define DECODE_COLS 4096

typedef struct {
  qk_tile_fn tile;
  const qk_prod *p;
  int64_t span;
  float *out;
} decode_job;

static void decode_task(void *ctx, int64_t c, int slot, void *scratch) {
  (void)slot;
  (void)scratch;
  const decode_job *j = (const decode_job *)ctx;
  const int64_t r0 = c * DECODE_ROWS, nr = QK_MIN(DECODE_ROWS, j->p->srows - r0);
  for (int64_t c0 = 0; c0 < j->span; c0 += DECODE_COLS) {
    j->tile(j->p, r0, nr, c0, QK_MIN(DECODE_COLS, j->span - c0), j->out + r0 * j->span + c0, j->span);
  }
}

int qk_run_decode(const qk_prod *p, int64_t span, float *out) {
  if (p->srows == 0 || span == 0) {
    return QK_OK;
  }
  const decode_job j = {.tile = qk_active_ops()->fmt[p->fmt].tile, .p = p, .span = span, .out = out};
  const int T = threads_for(p->srows * span * (int64_t)sizeof(float), 0);
  return qk_parallel((p->srows + DECODE_ROWS - 1) / DECODE_ROWS, T, decode_task, (void *)&j);
}
