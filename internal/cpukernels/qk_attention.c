/* qk_attention.c: grouped-query attention of a few query rows over a key/value cache, one call a
 * layer (quanta_kernels.h's qk_attention). A decoding step's attention is a few small products
 * and a softmax, which XLA CPU runs as separate operations, each with its own dispatch cost; here
 * each query row is one pass: scores, softmax and the weighted sum of the values, the scores in
 * the thread's chunk scratch. The loops are plain C, compiled once for the baseline and once for
 * AVX2 + FMA (eight-lane accumulators that the compiler vectorizes); the lane sums are added in a
 * fixed order. */
#include <math.h>

#include "qk_internal.h"

#define QK_LANES 8

/* The body of one row, as a macro over the function attributes, so that the compiler builds it
 * for each instruction set. */
#define QK_ATTENTION_ROW(NAME, ATTR)                                                                                    \
  static ATTR void NAME(const float *q, const float *k, const float *v, const uint8_t *vis, int64_t n_keys,           \
                        int64_t hd, float scale, float *scores, float *out) {                                          \
    float best = -INFINITY;                                                                                            \
    for (int64_t t = 0; t < n_keys; t++) {                                                                             \
      if (!vis[t]) {                                                                                                   \
        continue;                                                                                                      \
      }                                                                                                                \
      const float *kt = k + t * hd;                                                                                    \
      float acc[QK_LANES] = {0};                                                                                       \
      int64_t d = 0;                                                                                                   \
      for (; d + QK_LANES <= hd; d += QK_LANES) {                                                                      \
        for (int l = 0; l < QK_LANES; l++) {                                                                           \
          acc[l] += q[d + l] * kt[d + l];                                                                              \
        }                                                                                                              \
      }                                                                                                                \
      for (int l = 0; d < hd; d++, l++) {                                                                              \
        acc[l] += q[d] * kt[d];                                                                                        \
      }                                                                                                                \
      const float s = (((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))) * scale;     \
      scores[t] = s;                                                                                                   \
      best = s > best ? s : best;                                                                                      \
    }                                                                                                                  \
    for (int64_t d = 0; d < hd; d++) {                                                                                 \
      out[d] = 0;                                                                                                      \
    }                                                                                                                  \
    if (best == -INFINITY) { /* no key visible (or every score -inf): the softmax of -inf */                           \
      for (int64_t d = 0; d < hd; d++) {                                                                               \
        out[d] = NAN;                                                                                                  \
      }                                                                                                                \
      return;                                                                                                          \
    }                                                                                                                  \
    float total = 0;                                                                                                   \
    for (int64_t t = 0; t < n_keys; t++) {                                                                             \
      if (vis[t]) {                                                                                                    \
        scores[t] = expf(scores[t] - best);                                                                            \
        total += scores[t];                                                                                            \
      }                                                                                                                \
    }                                                                                                                  \
    for (int64_t t = 0; t < n_keys; t++) {                                                                             \
      if (vis[t]) {                                                                                                    \
        const float p = scores[t] / total;                                                                             \
        const float *vt = v + t * hd;                                                                                  \
        for (int64_t d = 0; d < hd; d++) {                                                                             \
          out[d] += p * vt[d];                                                                                         \
        }                                                                                                              \
      }                                                                                                                \
    }                                                                                                                  \
  }

QK_ATTENTION_ROW(row_portable, )
#if QK_X86
QK_ATTENTION_ROW(row_avx2, __attribute__((target("avx2,fma"))))
#endif

typedef void (*qk_attention_row)(const float *, const float *, const float *, const uint8_t *, int64_t, int64_t,
                                 float, float *, float *);

typedef struct {
  const float *q, *k, *v;
  const uint8_t *vis;
  int64_t heads, kv, seq, length, n_keys, hd;
  float scale;
  float *out;
  qk_attention_row row;
} attention_job;

/* attention_task computes query row `chunk` (batch, head, position in order). */
static void attention_task(void *ctx, int64_t chunk, int slot, void *scratch) {
  (void)slot;
  const attention_job *j = (const attention_job *)ctx;
  const int64_t s = chunk % j->seq, bh = chunk / j->seq, h = bh % j->heads, b = bh / j->heads;
  const int64_t kvh = b * j->kv + h / (j->heads / j->kv);
  const int64_t cache = kvh * j->length * j->hd;
  j->row(j->q + chunk * j->hd, j->k + cache, j->v + cache, j->vis + s * j->n_keys, j->n_keys, j->hd, j->scale,
         (float *)scratch, j->out + chunk * j->hd);
}

/* Below this many multiply-adds a call runs on the caller's thread: waking the pool costs more. */
#define QK_ATTENTION_SMALL (1 << 17)

int qk_attention(const float *q, const float *keys, const float *values, const uint8_t *visible, int64_t batch,
                 int64_t heads, int64_t kv, int64_t seq, int64_t length, int64_t n_keys, int64_t hd, float scale,
                 float *out) {
  if (batch < 0 || heads < 0 || kv < 1 || seq < 0 || n_keys < 1 || length < n_keys || hd < 0 ||
      n_keys > QK_ATTENTION_MAX_KEYS || heads % kv != 0 || hd > (INT64_MAX / 4) / length) {
    return QK_ERR_SIZE;
  }
  const int64_t rows = batch * heads * seq;
  if (rows == 0 || hd == 0) {
    return QK_OK;
  }
  if (!q || !keys || !values || !visible || !out) {
    return QK_ERR_NULL;
  }
  attention_job j = {q, keys, values, visible, heads, kv, seq, length, n_keys, hd, scale, out, row_portable};
#if QK_X86
  if (qk_isa_active() >= QK_ISA_AVX2) {
    j.row = row_avx2;
  }
#endif
  const int threads = rows > 1 && 2 * rows * n_keys * hd >= QK_ATTENTION_SMALL ? qk_threads() : 1;
  return qk_parallel(rows, threads, attention_task, &j);
}
