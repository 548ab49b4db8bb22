/* qk_attention.c: grouped-query attention over a key/value cache, one call a layer
 * (quanta_kernels.h's qk_attention): a decoding step's few query rows by the per-row route below,
 * a prompt's many positions by products (the route further down, "many query positions"). A
 * decoding step's attention is a few small products and a softmax, which XLA CPU runs as separate
 * operations, each with its own dispatch cost; here the query heads that share a key/value head
 * are one pass over its keys and values (each row read once for the group): scores into the
 * thread's chunk scratch, softmax, the weighted sum of the values. The cache is float32 or
 * float16, each half converted exactly as it is read (qk_attention_kv.h holds the code that reads
 * it, once per type). The loops are plain C, compiled once for the baseline and once for AVX2 +
 * FMA (eight-lane accumulators that the compiler vectorizes, exp by a polynomial), but for the
 * AVX2 steps written with intrinsics (four keys' scores at once, the values' sums in registers, a
 * prompt's mask and its conversion of halves) that keep the plain loops' operations and order; the lane sums are added in a fixed order, and
 * each output row is computed by one thread. */
#include <math.h>

#include "qk_internal.h"

#define QK_LANES 8

/* lanes_sum adds eight lanes in the one fixed order every sum of this file uses. */
QK_INLINE float lanes_sum(const float *lane) {
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

/* exp_pass replaces each score s (-inf where masked) by exp(s - best) and returns their sum,
 * added in eight lanes by index modulo 8, the lanes then in a fixed order. The portable path
 * calls expf; the AVX2 path the polynomial below. */
static float exp_pass_portable(float *scores, int64_t n, float best) {
  float lane[QK_LANES] = {0};
  for (int64_t t = 0; t < n; t++) {
    scores[t] = expf(scores[t] - best);
    lane[t % QK_LANES] += scores[t];
  }
  return lanes_sum(lane);
}

/* mask_pass scales each score a row sees, sets the others to -inf and returns the largest: only
 * products and comparisons, so every path returns the plain loop's values (the largest may differ
 * in the sign of a zero, which no later step can tell: exp(s - best) is the same). */
static float mask_pass_portable(float *scores, const uint8_t *vis, int64_t n, float scale) {
  float best = -INFINITY;
  for (int64_t t = 0; t < n; t++) {
    scores[t] = vis[t] ? scores[t] * scale : -INFINITY;
    best = scores[t] > best ? scores[t] : best;
  }
  return best;
}

/* QK_ATTENTION_DOT(NAME, ATTR, T, F32) defines NAME(qi, kt, hd), the dot product of a query row and
 * a key row of hd elements of type T (F32 converts one to float, exactly): summed in eight lanes by
 * index modulo 8, the lanes then in the fixed order (eight-lane accumulators that the compiler
 * vectorizes for the instruction set of ATTR). */
#define QK_ATTENTION_DOT(NAME, ATTR, T, F32)                                                                           \
  static inline ATTR float NAME(const float *qi, const T *kt, int64_t hd) {                                           \
    float acc[QK_LANES] = {0};                                                                                         \
    int64_t d = 0;                                                                                                     \
    for (; d + QK_LANES <= hd; d += QK_LANES) {                                                                        \
      for (int l = 0; l < QK_LANES; l++) {                                                                             \
        acc[l] += qi[d + l] * F32(kt[d + l]);                                                                          \
      }                                                                                                                \
    }                                                                                                                  \
    for (int l = 0; d < hd; d++, l++) {                                                                                \
      acc[l] += qi[d] * F32(kt[d]);                                                                                    \
    }                                                                                                                  \
    return lanes_sum(acc);                                                                                             \
  }

#if QK_X86
#include <immintrin.h>

#define A256 static inline __attribute__((always_inline, target("avx2,fma")))

/* The AVX2 parts that read the cache also convert halves (F16C, part of quanta's AVX2 level). */
#define QK_ATTENTION_AVX2 __attribute__((target("avx2,fma,f16c")))

/* The keys mix_avx2 takes per pass over a block of an output row: their value rows (32 x hd
 * elements) stay in the L2 cache for the next block and the next row. */
#define QK_MIX_KEYS 32

/* rows_step is how many of `left` query rows the AVX2 paths take in one pass: three at a time
 * (their sums fill the registers), the last four as two and two. */
static inline int rows_step(int left) { return left == 1 ? 1 : left == 2 || left == 4 ? 2 : 3; }

/* lanes_sum4 returns lanes_sum of each of a0..a3, in that order, with its additions in its order:
 * the halves first (lane l + lane l+4), then (0) + (2) and (1) + (3) as one horizontal add of the
 * halves put in the order 0 2 1 3, then those two as another. */
A256 __m128 lanes_sum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 h01 = _mm256_add_ps(_mm256_permute2f128_ps(a0, a1, 0x20), _mm256_permute2f128_ps(a0, a1, 0x31));
  const __m256 h23 = _mm256_add_ps(_mm256_permute2f128_ps(a2, a3, 0x20), _mm256_permute2f128_ps(a2, a3, 0x31));
  /* per 128-bit half (a0 | a1 and a2 | a3): the two sums of lanes_sum's inner parentheses */
  const __m256 pq = _mm256_hadd_ps(_mm256_permute_ps(h01, _MM_SHUFFLE(3, 1, 2, 0)),
                                   _mm256_permute_ps(h23, _MM_SHUFFLE(3, 1, 2, 0)));
  const __m256 s = _mm256_hadd_ps(pq, pq); /* low half: a0, a2; high half: a1, a3 */
  return _mm_unpacklo_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

/* exp8 is e^x for x <= 0 (Cephes' single-precision range reduction and degree-6 polynomial,
 * within about 2 ulp of expf; below -87.3, where e^x is under float32's normal range, 0), NaN for
 * a NaN x as expf (a NaN score makes its row NaN on every path). */
A256 __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(lo, x); /* x where either is NaN (the second operand): the NaN goes through */
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(scale)));
}

static __attribute__((target("avx2,fma"))) float exp_pass_avx2(float *scores, int64_t n, float best) {
  const __m256 b = _mm256_set1_ps(best);
  __m256 acc = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t + QK_LANES <= n; t += QK_LANES) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + t), b));
    _mm256_storeu_ps(scores + t, e);
    acc = _mm256_add_ps(acc, e);
  }
  float lane[QK_LANES];
  _mm256_storeu_ps(lane, acc);
  if (t < n) {
    float tail[QK_LANES];
    for (int l = 0; l < QK_LANES; l++) {
      tail[l] = t + l < n ? scores[t + l] - best : -INFINITY;
    }
    float e[QK_LANES];
    _mm256_storeu_ps(e, exp8(_mm256_loadu_ps(tail)));
    for (int l = 0; t + l < n; l++) {
      scores[t + l] = e[l];
      lane[l] += e[l];
    }
  }
  return lanes_sum(lane);
}
#endif

static __attribute__((target("avx2,fma"))) float mask_pass_avx2(float *scores, const uint8_t *vis, int64_t n,
                                                                 float scale) {
  const __m256 sc = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
  __m256 best8 = ninf;
  int64_t t = 0;
  for (; t + QK_LANES <= n; t += QK_LANES) {
    const __m256i seen = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(vis + t)));
    const __m256 hidden = _mm256_castsi256_ps(_mm256_cmpeq_epi32(seen, _mm256_setzero_si256()));
    const __m256 x = _mm256_blendv_ps(_mm256_mul_ps(_mm256_loadu_ps(scores + t), sc), ninf, hidden);
    _mm256_storeu_ps(scores + t, x);
    best8 = _mm256_max_ps(x, best8); /* x > best8 ? x : best8, as the plain loop (a NaN x is passed over) */
  }
  float lane[QK_LANES];
  _mm256_storeu_ps(lane, best8);
  float best = -INFINITY;
  for (int l = 0; l < QK_LANES; l++) {
    best = lane[l] > best ? lane[l] : best;
  }
  const float rest = mask_pass_portable(scores + t, vis + t, n - t, scale);
  return rest > best ? rest : best;
}

/* The body of a group of query rows that read one key/value head, as a macro over the function
 * attributes, the exp pass, the one-key and four-key scores and the mix of the values, so that the
 * compiler builds it for each instruction set: g rows of q (rows apart), their scores (n_keys apart
 * in the scratch) and outputs; each key row is read once for the group. With best_out non-NULL
 * it also stores each row's largest score and its sum of exponentials there (apart by bstride),
 * for the merge of a key block's rows (merge_key_blocks). */
#define QK_ATTENTION_ROWS(NAME, ATTR, T, EXP_PASS, DOT, DOTS4, MIX)                                                    \
  static ATTR void NAME(int g, const float *q, int64_t rows, const void *keys, const void *values, const uint8_t *vis, \
                        int64_t n_keys, int64_t hd, float scale, float *scores, float *out, float *best_out,           \
                        float *sum_out, int64_t bstride) {                                                             \
    const T *k = (const T *)keys, *v = (const T *)values;                                                              \
    float best[QK_ATTENTION_GROUP];                                                                                    \
    for (int i = 0; i < g; i++) {                                                                                      \
      best[i] = -INFINITY;                                                                                             \
    }                                                                                                                  \
    for (int64_t t = 0; t < n_keys; t++) {                                                                             \
      if (t + 4 <= n_keys && vis[t] && vis[t + 1] && vis[t + 2] && vis[t + 3]) { /* four visible keys at once */       \
        const T *const k4[4] = {k + t * hd, k + (t + 1) * hd, k + (t + 2) * hd, k + (t + 3) * hd};                     \
        float dot[QK_ATTENTION_GROUP][4];                                                                              \
        DOTS4(g, q, rows, k4, hd, dot);                                                                                \
        for (int i = 0; i < g; i++) {                                                                                  \
          for (int j = 0; j < 4; j++) {                                                                                \
            const float s = dot[i][j] * scale;                                                                         \
            scores[i * n_keys + t + j] = s;                                                                            \
            best[i] = s > best[i] ? s : best[i];                                                                       \
          }                                                                                                            \
        }                                                                                                              \
        t += 3;                                                                                                        \
        continue;                                                                                                      \
      }                                                                                                                \
      if (!vis[t]) {                                                                                                   \
        for (int i = 0; i < g; i++) {                                                                                  \
          scores[i * n_keys + t] = -INFINITY;                                                                          \
        }                                                                                                              \
        continue;                                                                                                      \
      }                                                                                                                \
      const T *kt = k + t * hd;                                                                                        \
      for (int i = 0; i < g; i++) {                                                                                    \
        const float s = DOT(q + i * rows, kt, hd) * scale;                                                             \
        scores[i * n_keys + t] = s;                                                                                    \
        best[i] = s > best[i] ? s : best[i];                                                                           \
      }                                                                                                                \
    }                                                                                                                  \
    for (int i = 0; i < g; i++) {                                                                                      \
      float *oi = out + i * rows, *si = scores + i * n_keys;                                                           \
      const float fill = best[i] == -INFINITY ? NAN : 0; /* no key visible: the softmax of -inf */                     \
      for (int64_t d = 0; d < hd; d++) {                                                                               \
        oi[d] = fill;                                                                                                  \
      }                                                                                                                \
      const float sum = best[i] == -INFINITY ? 0 : EXP_PASS(si, n_keys, best[i]);                                      \
      if (best[i] != -INFINITY) { /* the probabilities, each exp(s - best) · (1/sum) */                                \
        const float inv = 1 / sum;                                                                                     \
        for (int64_t t = 0; t < n_keys; t++) {                                                                         \
          si[t] *= inv;                                                                                                \
        }                                                                                                              \
      }                                                                                                                \
      if (best_out) {                                                                                                  \
        best_out[i * bstride] = best[i];                                                                               \
        sum_out[i * bstride] = sum;                                                                                    \
      }                                                                                                                \
    }                                                                                                                  \
    MIX(g, v, vis, n_keys, hd, scores, best, out, rows);                                                               \
  }

/* The most query rows one pass serves (the query heads that share a key/value head). */
#define QK_ATTENTION_GROUP 8

#define KV_NAME_(name, suffix) name##_##suffix
#define KV_NAME_SUFFIX(name, suffix) KV_NAME_(name, suffix)
#define KV_NAME(name) KV_NAME_SUFFIX(name, KV_SUFFIX)

/* A float32 cache: rows_portable_f32, rows_avx2_f32. */
#define KV_T float
#define KV_SUFFIX f32
#define KV_F32(x) (x)
#define KV_LOAD8(p) _mm256_loadu_ps(p)
#include "qk_attention_kv.h"
#undef KV_T
#undef KV_SUFFIX
#undef KV_F32
#undef KV_LOAD8

/* A float16 cache (IEEE halves), converted exactly as it is read: rows_portable_f16,
 * rows_avx2_f16. */
#define KV_T uint16_t
#define KV_SUFFIX f16
#define KV_F32(x) qk_f16_f32(x)
#define KV_LOAD8(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#include "qk_attention_kv.h"
#undef KV_T
#undef KV_SUFFIX
#undef KV_F32
#undef KV_LOAD8

typedef void (*qk_attention_rows)(int, const float *, int64_t, const void *, const void *, const uint8_t *, int64_t,
                                  int64_t, float, float *, float *, float *, float *, int64_t);

/* visible_span sets [*lo, *hi) to the keys that any of rows rows of vis (n_keys apart) sees;
 * *hi <= *lo when none does. */
static void visible_span(const uint8_t *vis, int64_t rows, int64_t n_keys, int64_t *lo, int64_t *hi) {
  *lo = n_keys;
  *hi = 0;
  for (int64_t i = 0; i < rows; i++) {
    const uint8_t *row = vis + i * n_keys;
    int64_t t = 0;
    while (t < *lo && !row[t]) {
      t++;
    }
    *lo = QK_MIN(t, *lo);
    t = n_keys;
    while (t > *hi && !row[t - 1]) {
      t--;
    }
    *hi = QK_MAX(t, *hi);
  }
}

/* The keys of one task: a longer window is split into blocks of this many keys, each attended by
 * its own task into partial rows that merge_key_blocks then combines, so that the threads share
 * the keys of a few key/value heads (Gemma-3 has one) and each key is read once. The blocks
 * follow from the key count alone, so the result does not depend on the threads. */
#define QK_ATTENTION_KEY_BLOCK 64

typedef struct {
  const float *q;
  const char *k, *v; /* the caches, elem bytes an element */
  const uint8_t *vis;
  int64_t elem;
  int64_t heads, kv, seq, length, n_keys, hd, per; /* per: query rows a task serves */
  float scale;
  float *out;
  qk_attention_rows rows;
  int64_t first, blocks, all_rows; /* key blocks from first (1: the tasks write out), output rows of the call */
  float *part, *best, *sum; /* blocks > 1: each block's rows, largest scores and sums */
} attention_job;

/* attention_task serves task `chunk`: up to `per` query heads of one key/value head at one
 * position over one block of keys (batch, key/value head, head block, position, key block in
 * order; the key blocks from j->first). */
static void attention_task(void *ctx, int64_t chunk, int slot, void *scratch) {
  (void)slot;
  const attention_job *j = (const attention_job *)ctx;
  const int64_t groups = j->heads / j->kv, hblocks = (groups + j->per - 1) / j->per;
  const int64_t kj = chunk % j->blocks, kb = j->first + kj, rest0 = chunk / j->blocks;
  const int64_t s = rest0 % j->seq, rest = rest0 / j->seq, blk = rest % hblocks, bkv = rest / hblocks;
  const int64_t b = bkv / j->kv, h0 = (bkv % j->kv) * groups + blk * j->per;
  const int g = (int)QK_MIN(j->per, groups - blk * j->per);
  const int64_t t0 = kb * QK_ATTENTION_KEY_BLOCK, n = QK_MIN(QK_ATTENTION_KEY_BLOCK, j->n_keys - t0);
  const int64_t cache = (bkv * j->length + t0) * j->hd, r0 = (b * j->heads + h0) * j->seq + s, row0 = r0 * j->hd;
  const int64_t rows = j->seq * j->hd; /* between the query heads' rows */
  const void *k = j->k + cache * j->elem, *v = j->v + cache * j->elem;
  const uint8_t *vis = j->vis + s * j->n_keys + t0;
  if (j->blocks == 1) {
    j->rows(g, j->q + row0, rows, k, v, vis, n, j->hd, j->scale, (float *)scratch, j->out + row0, NULL, NULL, 0);
    return;
  }
  const int64_t all = j->all_rows, at = kj * all; /* block kb's rows */
  j->rows(g, j->q + row0, rows, k, v, vis, n, j->hd, j->scale, (float *)scratch, j->part + at * j->hd + row0,
          j->best + at + r0, j->sum + at + r0, j->seq);
}

/* merge_key_blocks writes each of the rows of out from its blocks' partial rows: with m the
 * largest of the blocks' largest scores and w_j = exp(best_j − m)·sum_j, out = Σ_j (w_j / Σ w)·part_j
 * over the blocks in order (a block where the row sees no key has no weight; a row that sees no
 * key at all is NaN, as the formulation's softmax over -inf). */
static void merge_key_blocks(int64_t blocks, int64_t rows, int64_t hd, const float *part, const float *best,
                             const float *sum, float *out) {
  for (int64_t r = 0; r < rows; r++) {
    float m = -INFINITY;
    for (int64_t j = 0; j < blocks; j++) {
      m = best[j * rows + r] > m ? best[j * rows + r] : m;
    }
    float *o = out + r * hd;
    if (m == -INFINITY) {
      for (int64_t d = 0; d < hd; d++) {
        o[d] = NAN;
      }
      continue;
    }
    float total = 0;
    for (int64_t j = 0; j < blocks; j++) {
      if (best[j * rows + r] != -INFINITY) {
        total += expf(best[j * rows + r] - m) * sum[j * rows + r];
      }
    }
    for (int64_t d = 0; d < hd; d++) {
      o[d] = 0;
    }
    for (int64_t j = 0; j < blocks; j++) {
      if (best[j * rows + r] == -INFINITY) {
        continue;
      }
      const float w = expf(best[j * rows + r] - m) * sum[j * rows + r] / total;
      const float *pj = part + (j * rows + r) * hd;
      for (int64_t d = 0; d < hd; d++) {
        o[d] += w * pj[d];
      }
    }
  }
}

/* ---- many query positions (a prompt) ----
 * From QK_ATTENTION_MANY positions on, a call goes through the float32 micro-kernel of the
 * products (qk_ops.mk_kn), which keeps a block of positions' sums in registers while it sweeps the
 * keys: first the read keys and values of each key/value head are converted once to float32 (the
 * keys transposed, hd rows of n_keys), then each task takes a block of positions of one key/value
 * head and, for each of its query heads, computes the block's scores Q·Kᵀ as one product over
 * the keys the block sees (from the first key any of its rows sees to the last), the softmax per
 * row (the masked keys' scores -inf, exp_pass), and out = (p·V) times the inverse of the sum as a
 * second product. The per-row path above reads each key once per position; a prompt's positions
 * then cost a dot product and a horizontal sum each. */
#define QK_ATTENTION_MANY 32
/* Positions per prompt task: the scores of a block (positions × keys) fit the chunk scratch. */
#define QK_ATTENTION_MANY_BLOCK 64
/* Keys per conversion task. */
#define QK_ATTENTION_CONVERT_KEYS 256

/* halves_row converts a key's and a value's row of hd halves exactly: the key into a column of kt
 * (n_keys apart), the value into a row of vf. */
static void halves_row_portable(const uint16_t *kr, const uint16_t *vr, int64_t hd, int64_t n_keys, float *kt,
                                float *vf) {
  for (int64_t d = 0; d < hd; d++) {
    kt[d * n_keys] = qk_f16_f32(kr[d]);
    vf[d] = qk_f16_f32(vr[d]);
  }
}

#if QK_X86
static QK_ATTENTION_AVX2 void halves_row_avx2(const uint16_t *kr, const uint16_t *vr, int64_t hd, int64_t n_keys,
                                              float *kt, float *vf) {
  int64_t d = 0;
  for (; d + QK_LANES <= hd; d += QK_LANES) {
    _mm256_storeu_ps(vf + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + d))));
    float k8[QK_LANES];
    _mm256_storeu_ps(k8, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + d))));
    for (int l = 0; l < QK_LANES; l++) {
      kt[(d + l) * n_keys] = k8[l];
    }
  }
  halves_row_portable(kr + d, vr + d, hd - d, n_keys, kt + d * n_keys, vf + d);
}
#endif

typedef struct {
  const char *k, *v; /* the caches, elem bytes an element */
  int64_t elem, length, n_keys, hd;
  float *kt, *vf; /* per (batch, key/value head): hd rows of n_keys keys; n_keys rows of hd */
  void (*halves_row)(const uint16_t *, const uint16_t *, int64_t, int64_t, float *, float *);
} convert_job;

static void convert_task(void *ctx, int64_t chunk, int slot, void *scratch) {
  (void)slot;
  (void)scratch;
  const convert_job *j = (const convert_job *)ctx;
  const int64_t blocks = (j->n_keys + QK_ATTENTION_CONVERT_KEYS - 1) / QK_ATTENTION_CONVERT_KEYS;
  const int64_t bkv = chunk / blocks, t0 = chunk % blocks * QK_ATTENTION_CONVERT_KEYS;
  const int64_t t1 = QK_MIN(t0 + QK_ATTENTION_CONVERT_KEYS, j->n_keys), hd = j->hd;
  float *kt = j->kt + bkv * hd * j->n_keys, *vf = j->vf + bkv * j->n_keys * hd;
  const int64_t cache = bkv * j->length * hd;
  for (int64_t t = t0; t < t1; t++) {
    const int64_t at = cache + t * hd;
    if (j->elem == 4) {
      const float *kr = (const float *)j->k + at;
      for (int64_t d = 0; d < hd; d++) {
        kt[d * j->n_keys + t] = kr[d];
      }
      memcpy(vf + t * hd, (const float *)j->v + at, (size_t)hd * sizeof(float));
    } else {
      j->halves_row((const uint16_t *)j->k + at, (const uint16_t *)j->v + at, hd, j->n_keys, kt + t, vf + t * hd);
    }
  }
}

typedef struct {
  const qk_ops *ops;
  const float *q;
  const uint8_t *vis;
  int64_t heads, kv, seq, n_keys, hd, block;
  float scale;
  const float *kt, *vf;
  float *out;
  float (*mask_pass)(float *, const uint8_t *, int64_t, float);
  float (*exp_pass)(float *, int64_t, float);
} many_job;

/* many_task serves one block of positions of one (batch, key/value head): every query head of
 * the group over the keys the block's rows see. */
static void many_task(void *ctx, int64_t chunk, int slot, void *scratch) {
  (void)slot;
  const many_job *j = (const many_job *)ctx;
  const int64_t pblocks = (j->seq + j->block - 1) / j->block;
  const int64_t bkv = chunk / pblocks, s0 = chunk % pblocks * j->block, rows = QK_MIN(j->block, j->seq - s0);
  const int64_t groups = j->heads / j->kv, b = bkv / j->kv, hd = j->hd, n_keys = j->n_keys;
  int64_t lo, hi; /* the keys any row of the block sees */
  visible_span(j->vis + s0 * n_keys, rows, n_keys, &lo, &hi);
  const int64_t n = hi > lo ? hi - lo : 0;
  const float *kt = j->kt + bkv * hd * n_keys + lo, *vf = j->vf + (bkv * n_keys + lo) * hd;
  float *scores = (float *)scratch;
  float inv[QK_ATTENTION_MANY_BLOCK];
  for (int64_t g = 0; g < groups; g++) {
    const int64_t row0 = ((b * j->heads + (bkv % j->kv) * groups + g) * j->seq + s0) * hd;
    float *out = j->out + row0;
    memset(out, 0, (size_t)(rows * hd) * sizeof(float));
    if (n > 0) {
      memset(scores, 0, (size_t)(rows * n) * sizeof(float));
      j->ops->mk_kn(rows, hd, n, j->q + row0, hd, kt, n_keys, scores, n);
    }
    for (int64_t i = 0; i < rows; i++) {
      float *si = scores + i * n;
      const uint8_t *vis = j->vis + (s0 + i) * n_keys + lo;
      const float best = j->mask_pass(si, vis, n, j->scale);
      inv[i] = best == -INFINITY ? NAN : 1 / j->exp_pass(si, n, best); /* no key visible: the softmax of -inf */
      if (best == -INFINITY) {
        memset(si, 0, (size_t)n * sizeof(float));
      }
    }
    if (n > 0) {
      j->ops->mk_kn(rows, n, hd, scores, n, vf, hd, out, hd);
    }
    for (int64_t i = 0; i < rows; i++) {
      for (int64_t d = 0; d < hd; d++) {
        out[i * hd + d] *= inv[i];
      }
    }
  }
}

/* The most bytes of converted keys and values a call holds (the thread's call buffer). */
#define QK_ATTENTION_MANY_BYTES (INT64_C(256) << 20)

/* attention_many runs a call of many positions as above; QK_ERR_SIZE if its block of scores or
 * the converted keys and values would not fit (the caller then takes the per-row path). */
static int attention_many(const float *q, const void *keys, const void *values, int half, const uint8_t *visible,
                          int64_t batch, int64_t heads, int64_t kv, int64_t seq, int64_t length, int64_t n_keys,
                          int64_t hd, float scale, float *out) {
  const int64_t block = QK_MIN(QK_ATTENTION_MANY_BLOCK, (int64_t)(QK_CHUNK_SCRATCH / sizeof(float)) / n_keys);
  if (block < QK_ATTENTION_MANY / 2 || batch * kv > QK_ATTENTION_MANY_BYTES / 8 / n_keys / hd) {
    return QK_ERR_SIZE;
  }
  float *buf = (float *)qk_call_buffer((size_t)(batch * kv * n_keys * hd * 2) * sizeof(float));
  if (buf == NULL) {
    return QK_ERR_NOMEM;
  }
  const int threads = qk_threads();
  convert_job c = {.k = (const char *)keys, .v = (const char *)values, .elem = half ? 2 : 4, .length = length,
                   .n_keys = n_keys, .hd = hd, .kt = buf, .vf = buf + batch * kv * n_keys * hd,
                   .halves_row = halves_row_portable};
#if QK_X86
  if (qk_isa_active() >= QK_ISA_AVX2) {
    c.halves_row = halves_row_avx2;
  }
#endif
  int st = qk_parallel(batch * kv * ((n_keys + QK_ATTENTION_CONVERT_KEYS - 1) / QK_ATTENTION_CONVERT_KEYS), threads,
                       convert_task, &c);
  if (st != QK_OK) {
    return st;
  }
  many_job j = {.ops = qk_active_ops(), .q = q, .vis = visible, .heads = heads, .kv = kv, .seq = seq,
                .n_keys = n_keys, .hd = hd, .block = block, .scale = scale, .kt = c.kt, .vf = c.vf, .out = out,
                .mask_pass = mask_pass_portable, .exp_pass = exp_pass_portable};
#if QK_X86
  if (qk_isa_active() >= QK_ISA_AVX2) {
    j.mask_pass = mask_pass_avx2;
    j.exp_pass = exp_pass_avx2;
  }
#endif
  return qk_parallel(batch * kv * ((seq + block - 1) / block), threads, many_task, &j);
}

/* Below this many multiply-adds a call runs on the caller's thread: waking the pool costs more. */
#define QK_ATTENTION_SMALL (1 << 17)

int qk_attention(const float *q, const void *keys, const void *values, int kv_dtype, const uint8_t *visible,
                 int64_t batch, int64_t heads, int64_t kv, int64_t seq, int64_t length, int64_t n_keys, int64_t hd,
                 float scale, float *out) {
  if (kv_dtype != QK_F32 && kv_dtype != QK_F16) {
    return QK_ERR_DTYPE;
  }
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
  if (seq >= QK_ATTENTION_MANY) {
    const int st = attention_many(q, keys, values, kv_dtype == QK_F16, visible, batch, heads, kv, seq, length,
                                  n_keys, hd, scale, out);
    if (st != QK_ERR_SIZE) {
      return st;
    }
  }
  /* A task serves up to per query heads of one key/value head over one block of keys: as many
   * heads as fit QK_ATTENTION_GROUP, and, when the call runs on several threads, few enough that
   * the tasks come to about the threads where the key/value heads and key blocks are fewer. Each
   * task reads its block of its key/value head's rows, so more tasks than threads read them more
   * often than they balance the work (at 640 keys from memory, two tasks a thread measured slower
   * than one: docs/performance.md). A row's sums do not depend on the rows beside it, so the bits
   * do not depend on per. The tasks cover the key blocks that some row sees (a window's unfilled
   * part costs nothing; the merge passes over a block no row sees, so the bits are those of all
   * blocks); where no row sees a key, the first block's tasks write the rows' NaN. */
  int64_t lo, hi;
  visible_span(visible, seq, n_keys, &lo, &hi);
  const int64_t first = hi > lo ? lo / QK_ATTENTION_KEY_BLOCK : 0;
  const int64_t blocks = hi > lo ? (hi + QK_ATTENTION_KEY_BLOCK - 1) / QK_ATTENTION_KEY_BLOCK - first : 1;
  const int64_t units = batch * kv * seq * blocks, groups = heads / kv; /* (batch, kv head, position, key block) */
  const int64_t threads = 2 * rows * (blocks * QK_ATTENTION_KEY_BLOCK) * hd >= QK_ATTENTION_SMALL ? qk_threads() : 1;
  const int64_t split = threads == 1 || units >= threads ? 1 : (threads + units - 1) / units;
  const int64_t per = QK_MAX(1, QK_MIN(QK_MIN((groups + split - 1) / split, QK_ATTENTION_GROUP),
                                       (int64_t)(QK_CHUNK_SCRATCH / sizeof(float)) / QK_MIN(n_keys, QK_ATTENTION_KEY_BLOCK)));
  const int half = kv_dtype == QK_F16;
  attention_job j = {.q = q, .k = keys, .v = values, .vis = visible, .elem = half ? 2 : 4, .heads = heads, .kv = kv,
                     .seq = seq, .length = length, .n_keys = n_keys, .hd = hd, .per = per, .scale = scale,
                     .out = out, .rows = half ? rows_portable_f16 : rows_portable_f32, .first = first,
                     .blocks = blocks, .all_rows = rows};
#if QK_X86
  if (qk_isa_active() >= QK_ISA_AVX2) {
    j.rows = half ? rows_avx2_f16 : rows_avx2_f32;
  }
#endif
  if (blocks > 1) {
    if (rows > (INT64_MAX / 8) / blocks / (hd + 2)) {
      return QK_ERR_SIZE;
    }
    float *buf = (float *)qk_call_buffer((size_t)(blocks * rows * (hd + 2)) * sizeof(float));
    if (buf == NULL) {
      return QK_ERR_NOMEM;
    }
    j.part = buf;
    j.best = buf + blocks * rows * hd;
    j.sum = j.best + blocks * rows;
  }
  const int64_t tasks = batch * kv * ((groups + per - 1) / per) * seq * blocks;
  const int st = qk_parallel(tasks, tasks > 1 ? (int)threads : 1, attention_task, &j);
  if (st == QK_OK && blocks > 1) {
    merge_key_blocks(blocks, rows, hd, j.part, j.best, j.sum, out);
  }
  return st;
}
