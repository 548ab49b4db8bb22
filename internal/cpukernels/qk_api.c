/* qk_api.c: the public products: each checks its arguments, describes its weight as a qk_prod and
 * hands it to the driver of its shape (qk_run.c). */
#include <stdatomic.h>

#include "qk_ggml.h"

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

/* check_weight validates a weight of rows x cols elements at w. */
static int check_weight(const void *w, int64_t rows, int64_t cols) {
  int64_t elems;
  if (!mul(rows, cols, &elems)) {
    return QK_ERR_SIZE;
  }
  return need(w, elems) ? QK_OK : QK_ERR_NULL;
}

/* check_scale validates a scale of the given kind (allow_k: a per-k scale is accepted) and
 * returns its number of values in *ns. */
static int check_scale(const void *scale, int dtype, int kind, int allow_k, int64_t k, int64_t n, int64_t *ns) {
  switch (kind) {
  case QK_SCALE_NONE:
    *ns = 0;
    return QK_OK;
  case QK_SCALE_TENSOR:
    *ns = 1;
    break;
  case QK_SCALE_K:
    if (!allow_k) {
      return QK_ERR_SCALE;
    }
    *ns = k;
    break;
  case QK_SCALE_N:
    *ns = n;
    break;
  default:
    return QK_ERR_SCALE;
  }
  if (!scale_dtype_ok(dtype)) {
    return QK_ERR_DTYPE;
  }
  return need(scale, *ns) ? QK_OK : QK_ERR_NULL;
}

/* trivial handles the products with nothing to compute: an empty y, or k == 0 (zeros). It
 * returns 1 when it did. */
static int trivial(int64_t m, int64_t k, int64_t n, float *y) {
  if (m == 0 || n == 0) {
    return 1;
  }
  if (k == 0) {
    memset(y, 0, (size_t)(m * n) * sizeof(float));
    return 1;
  }
  return 0;
}

static qk_acts no_kscale(const void *x, int x_dtype) { return (qk_acts){.x = x, .dtype = x_dtype}; }

/* ---- NF4 ---- */

/* nf4_weight checks an NF4 weight of rows stored rows of elems elements in blocks of bs and
 * describes it in p (format, weight and its sizes). */
static int nf4_weight(const uint8_t *packed, const void *absmax, int absmax_dtype, int64_t rows, int64_t elems,
                      int64_t bs, qk_prod *p) {
  if (bs <= 0 || bs % 2 != 0 || bs > QK_MAX_ELEMS) {
    return QK_ERR_BLOCK;
  }
  if (!scale_dtype_ok(absmax_dtype)) {
    return QK_ERR_DTYPE;
  }
  if (rows < 0 || elems < 0 || elems > QK_MAX_ELEMS) {
    return QK_ERR_SIZE;
  }
  const int64_t nb = (elems + bs - 1) / bs;
  int64_t pk, am;
  if (!mul3(rows, nb, bs / 2, &pk) || !mul(rows, nb, &am)) {
    return QK_ERR_SIZE;
  }
  if (!need(packed, pk) || !need(absmax, am)) {
    return QK_ERR_NULL;
  }
  *p = (qk_prod){.fmt = QK_FMT_NF4, .w = packed, .srows = rows, .rps = 1, .elem_bits = 4};
  p->nf4 = (qk_nf4w){.packed = packed, .row_bytes = nb * bs / 2, .bs = bs, .nb = nb, .absmax = absmax,
                     .absmax_dtype = absmax_dtype};
  p->ldw = p->nf4.row_bytes;
  p->row_bytes = p->ldw + nb * (absmax_dtype == QK_F32 ? 4 : 2);
  return QK_OK;
}

/* nf4 runs both NF4 layouts: the weight's stored rows are k (kn) or n (nk). */
static int nf4(int kn, const void *x, int x_dtype, const uint8_t *packed, const void *absmax, int absmax_dtype,
               int64_t m, int64_t k, int64_t n, int64_t bs, float *y) {
  int st = check_common(x, x_dtype, m, k, n, y);
  qk_prod p;
  if (st != QK_OK || (st = nf4_weight(packed, absmax, absmax_dtype, kn ? k : n, kn ? n : k, bs, &p)) != QK_OK) {
    return st;
  }
  if (trivial(m, k, n, y)) {
    return QK_OK;
  }
  p.m = m;
  p.k = k;
  p.n = n;
  p.y = y;
  return kn ? qk_run_kn(&p, no_kscale(x, x_dtype)) : qk_run_nk(&p, no_kscale(x, x_dtype));
}

int qk_nf4_decode(const uint8_t *packed, const void *absmax, int absmax_dtype, int64_t rows, int64_t span,
                  int64_t block_size, float *out) {
  qk_prod p;
  int64_t elems;
  if (!mul(rows, span, &elems)) {
    return QK_ERR_SIZE;
  }
  int st = nf4_weight(packed, absmax, absmax_dtype, rows, span, block_size, &p);
  if (st != QK_OK) {
    return st;
  }
  if (!need(out, elems)) {
    return QK_ERR_NULL;
  }
  return qk_run_decode(&p, span, out);
}

int qk_nf4_kn(const void *x, int x_dtype, const uint8_t *packed, const void *absmax, int absmax_dtype, int64_t m,
              int64_t k, int64_t n, int64_t block_size, float *y) {
  return nf4(1, x, x_dtype, packed, absmax, absmax_dtype, m, k, n, block_size, y);
}

int qk_nf4_nk(const void *x, int x_dtype, const uint8_t *packed, const void *absmax, int absmax_dtype, int64_t m,
              int64_t k, int64_t n, int64_t block_size, float *y) {
  return nf4(0, x, x_dtype, packed, absmax, absmax_dtype, m, k, n, block_size, y);
}

/* ---- int8 ---- */

/* int8 runs both int8 layouts. A per-k scale multiplies the activations (x[i][l] * scale[l], as
 * the dense weight would); a per-n or per-tensor scale multiplies the outputs. */
static int int8(int kn, const void *x, int x_dtype, const int8_t *w, const void *scale, int scale_dtype,
                int scale_kind, int64_t m, int64_t k, int64_t n, float *y) {
  int64_t ns;
  int st = check_common(x, x_dtype, m, k, n, y);
  if (st != QK_OK || (st = check_weight(w, k, n)) != QK_OK ||
      (st = check_scale(scale, scale_dtype, scale_kind, 1, k, n, &ns)) != QK_OK) {
    return st;
  }
  if (trivial(m, k, n, y)) {
    return QK_OK;
  }
  qk_prod p = {.fmt = QK_FMT_I8, .m = m, .k = k, .n = n, .w = (const uint8_t *)w, .srows = kn ? k : n,
               .ldw = kn ? n : k, .rps = 1, .elem_bits = 8, .y = y};
  p.row_bytes = p.ldw;
  qk_acts a = no_kscale(x, x_dtype);
  if (scale_kind == QK_SCALE_K) {
    a.kscale = scale;
    a.kscale_dtype = scale_dtype;
  } else if (scale_kind != QK_SCALE_NONE) {
    p.post = (qk_post){.kind = scale_kind, .src = scale, .dtype = scale_dtype};
  }
  return kn ? qk_run_kn(&p, a) : qk_run_nk(&p, a);
}

int qk_int8_kn(const void *x, int x_dtype, const int8_t *w, const void *scale, int scale_dtype, int scale_kind,
               int64_t m, int64_t k, int64_t n, float *y) {
  return int8(1, x, x_dtype, w, scale, scale_dtype, scale_kind, m, k, n, y);
}

int qk_int8_nk(const void *x, int x_dtype, const int8_t *w, const void *scale, int scale_dtype, int scale_kind,
               int64_t m, int64_t k, int64_t n, float *y) {
  return int8(0, x, x_dtype, w, scale, scale_dtype, scale_kind, m, k, n, y);
}

/* ---- 2-bit and 1-bit ---- */

static int signs(int fmt, const void *x, int x_dtype, const uint8_t *packed, const float *scale, int scale_kind,
                 int64_t m, int64_t k, int64_t n, float *y) {
  int st = check_common(x, x_dtype, m, k, n, y);
  if (st != QK_OK) {
    return st;
  }
  const int rps = fmt == QK_FMT_TB2 ? 4 : 8;
  if (k % rps != 0) {
    return QK_ERR_SIZE;
  }
  int64_t ns;
  if ((st = check_weight(packed, k / rps, n)) != QK_OK ||
      (st = check_scale(scale, QK_F32, scale_kind, 0, k, n, &ns)) != QK_OK) {
    return st;
  }
  if (trivial(m, k, n, y)) {
    return QK_OK;
  }
  qk_prod p = {.fmt = fmt, .m = m, .k = k, .n = n, .w = packed, .srows = k / rps, .ldw = n, .row_bytes = n,
               .rps = rps, .elem_bits = 8, .y = y};
  if (scale_kind != QK_SCALE_NONE) {
    p.post = (qk_post){.kind = scale_kind, .src = scale, .dtype = QK_F32};
  }
  return qk_run_kn(&p, no_kscale(x, x_dtype));
}

int qk_twobit_kn(const void *x, int x_dtype, const uint8_t *packed, const float *scale, int scale_kind, int64_t m,
                 int64_t k, int64_t n, float *y) {
  return signs(QK_FMT_TB2, x, x_dtype, packed, scale, scale_kind, m, k, n, y);
}

int qk_onebit_kn(const void *x, int x_dtype, const uint8_t *packed, const float *scale, int scale_kind, int64_t m,
                 int64_t k, int64_t n, float *y) {
  return signs(QK_FMT_TB1, x, x_dtype, packed, scale, scale_kind, m, k, n, y);
}

/* ---- ggml's block types ---- */

int qk_ggml_nk(const void *x, int x_dtype, int type, const uint8_t *blocks, int64_t m, int64_t k, int64_t n,
               float *y) {
  int st = check_common(x, x_dtype, m, k, n, y);
  if (st != QK_OK) {
    return st;
  }
  const int fmt = qk_ggml_fmt(type);
  if (fmt < 0) {
    return QK_ERR_TYPE;
  }
  const qk_ggml_block *t = qk_ggml_of(fmt);
  int64_t bytes;
  if (k % t->bs != 0 || !mul3(n, k / t->bs, t->bytes, &bytes)) {
    return QK_ERR_SIZE;
  }
  if (!need(blocks, bytes)) {
    return QK_ERR_NULL;
  }
  if (trivial(m, k, n, y)) {
    return QK_OK;
  }
  qk_prod p = {.fmt = fmt, .m = m, .k = k, .n = n, .w = blocks, .srows = n, .ldw = k / t->bs * t->bytes, .rps = 1,
               .y = y};
  p.row_bytes = p.ldw;
  return qk_run_nk(&p, no_kscale(x, x_dtype));
}

int qk_ggml_decode(int type, const uint8_t *blocks, int64_t rows, int64_t k, float *out) {
  const int fmt = qk_ggml_fmt(type);
  if (fmt < 0) {
    return QK_ERR_TYPE;
  }
  const qk_ggml_block *t = qk_ggml_of(fmt);
  int64_t bytes, elems;
  if (k < 0 || k % t->bs != 0 || !mul3(rows, k / t->bs, t->bytes, &bytes) || !mul(rows, k, &elems)) {
    return QK_ERR_SIZE;
  }
  if (!need(blocks, bytes) || !need(out, elems)) {
    return QK_ERR_NULL;
  }
  const qk_prod p = {.fmt = fmt, .k = k, .n = rows, .w = blocks, .srows = rows, .ldw = k / t->bs * t->bytes, .rps = 1};
  return qk_run_decode(&p, k, out);
}

/* ---- dense ---- */

/* dense_run runs run (qk_run_kn or qk_run_nk) on the float32 product of x and w, whose stored
 * rows are rows by cols. */
static int dense_run(int (*run)(qk_prod *, qk_acts), const float *x, const float *w, int64_t m, int64_t k, int64_t n,
                     float *y, int64_t rows, int64_t cols) {
  int st = check_common(x, QK_F32, m, k, n, y);
  if (st != QK_OK || (st = check_weight(w, rows, cols)) != QK_OK) {
    return st;
  }
  if (trivial(m, k, n, y)) {
    return QK_OK;
  }
  qk_prod p = {.fmt = QK_FMT_F32, .m = m, .k = k, .n = n, .w = (const uint8_t *)w, .srows = rows, .ldw = 4 * cols,
               .row_bytes = 4 * cols, .rps = 1, .elem_bits = 32, .y = y};
  return run(&p, no_kscale(x, QK_F32));
}

int qk_f32_kn(const float *x, const float *w, int64_t m, int64_t k, int64_t n, float *y) {
  return dense_run(qk_run_kn, x, w, m, k, n, y, k, n);
}

int qk_f32_nk(const float *x, const float *w, int64_t m, int64_t k, int64_t n, float *y) {
  return dense_run(qk_run_nk, x, w, m, k, n, y, n, k);
}

/* ---- bandwidth probe ---- */

typedef struct {
  const uint64_t *p;
  int64_t words, per_chunk;
  _Atomic uint64_t sum;
} probe_job;

/* probe_task reads its chunk as QK_PROBE_STREAMS sequential streams in step, a cache line of
 * each per pass: the products read several weight rows at once, and a single stream a thread
 * keeps too few lines in flight to reach the bandwidth they reach. */
#define QK_PROBE_STREAMS 8
static void probe_task(void *ctx, int64_t c, int slot, void *scratch) {
  (void)slot;
  (void)scratch;
  probe_job *j = (probe_job *)ctx;
  const int64_t a = c * j->per_chunk, b = QK_MIN(a + j->per_chunk, j->words);
  const int64_t lines = (b - a) / 8 / QK_PROBE_STREAMS, span = lines * 8; /* words a stream */
  uint64_t s[8] = {0};
  for (int64_t i = 0; i < span; i += 8) {
    for (int t = 0; t < QK_PROBE_STREAMS; t++) {
      const uint64_t *w = j->p + a + t * span + i;
      for (int l = 0; l < 8; l++) {
        s[l] += w[l];
      }
    }
  }
  for (int64_t i = a + QK_PROBE_STREAMS * span; i < b; i++) {
    s[0] += j->p[i];
  }
  atomic_fetch_add(&j->sum, ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])));
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
