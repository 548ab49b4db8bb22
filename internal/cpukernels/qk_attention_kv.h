/* qk_attention_kv.h: the parts of qk_attention.c that read the key/value cache, written once over
 * the cache's element type. qk_attention.c includes it once per type, with
 *   KV_T        the element type (float, or uint16_t holding IEEE halves),
 *   KV_NAME(n)  n with the type's suffix,
 *   KV_F32(x)   one element as float, exactly,
 *   KV_LOAD8(p) eight elements at p as a __m256, exactly (x86 only).
 * Each function converts an element where the float32 one loads it and does nothing else
 * differently, so a half cache gives the bits of a float32 cache holding the same values. */

QK_ATTENTION_DOT(KV_NAME(dot_portable), , KV_T, KV_F32)

/* dots4 writes to dot[i] the dot products of query row i (of g, rows apart from q) with the four
 * key rows kt[0..3], each as the one-key dot computes it. */
static inline void KV_NAME(dots4_portable)(int g, const float *q, int64_t rows, const KV_T *const kt[4], int64_t hd,
                                           float dot[][4]) {
  for (int i = 0; i < g; i++) {
    for (int j = 0; j < 4; j++) {
      dot[i][j] = KV_NAME(dot_portable)(q + i * rows, kt[j], hd);
    }
  }
}

/* mix adds into each output row i that sees a key (best[i] > -inf; out rows apart) the visible
 * value rows weighted by their probabilities (scores, n_keys apart), in key order:
 * out[d] += p·v_t[d]. */
static inline void KV_NAME(mix_portable)(int g, const KV_T *v, const uint8_t *vis, int64_t n_keys, int64_t hd,
                                         const float *scores, const float *best, float *out, int64_t rows) {
  for (int64_t t = 0; t < n_keys; t++) {
    if (!vis[t]) {
      continue;
    }
    const KV_T *vt = v + t * hd;
    for (int i = 0; i < g; i++) {
      if (best[i] == -INFINITY) {
        continue;
      }
      const float p = scores[i * n_keys + t];
      float *oi = out + i * rows;
      for (int64_t d = 0; d < hd; d++) {
        oi[d] += p * KV_F32(vt[d]);
      }
    }
  }
}

QK_ATTENTION_ROWS(KV_NAME(rows_portable), , KV_T, exp_pass_portable, KV_NAME(dot_portable), KV_NAME(dots4_portable),
                  KV_NAME(mix_portable))

#if QK_X86
QK_ATTENTION_DOT(KV_NAME(dot_avx2), QK_ATTENTION_AVX2, KV_T, KV_F32)

/* dots4_rows_avx2 is dots4 for R query rows (1 to 3; a constant after inlining), the R x 4 sums in
 * registers as independent chains of multiply-adds: each key vector is loaded (converted) once for
 * the R rows. The same fused multiply-adds in the same order as dot_avx2 for each row and key, so
 * the same bits. */
static inline __attribute__((always_inline)) QK_ATTENTION_AVX2 void KV_NAME(dots4_rows_avx2)(
    int R, const float *q, int64_t rows, const KV_T *const kt[4], int64_t hd, float dot[][4]) {
  __m256 a[3][4];
  for (int r = 0; r < R; r++) {
    for (int j = 0; j < 4; j++) {
      a[r][j] = _mm256_setzero_ps();
    }
  }
  int64_t d = 0;
  for (; d + QK_LANES <= hd; d += QK_LANES) {
    for (int j = 0; j < 4; j++) {
      const __m256 x = KV_LOAD8(kt[j] + d);
      for (int r = 0; r < R; r++) {
        a[r][j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * rows + d), x, a[r][j]);
      }
    }
  }
  for (int r = 0; r < R; r++) {
    if (d == hd) {
      _mm_storeu_ps(dot[r], lanes_sum4(a[r][0], a[r][1], a[r][2], a[r][3]));
      continue;
    }
    float lane[4][QK_LANES];
    for (int j = 0; j < 4; j++) {
      _mm256_storeu_ps(lane[j], a[r][j]);
    }
    for (int64_t e = d, l = 0; e < hd; e++, l++) {
      for (int j = 0; j < 4; j++) {
        lane[j][l] = fmaf(q[r * rows + e], KV_F32(kt[j][e]), lane[j][l]);
      }
    }
    for (int j = 0; j < 4; j++) {
      dot[r][j] = lanes_sum(lane[j]);
    }
  }
}

/* dots4_avx2 is dots4 over the g rows three at a time (two and two of four). */
static inline __attribute__((always_inline)) QK_ATTENTION_AVX2 void KV_NAME(dots4_avx2)(int g, const float *q,
                                                                                      int64_t rows,
                                                                                      const KV_T *const kt[4],
                                                                                      int64_t hd, float dot[][4]) {
  for (int i = 0; i < g;) {
    const int R = rows_step(g - i);
    if (R == 1) {
      KV_NAME(dots4_rows_avx2)(1, q + i * rows, rows, kt, hd, dot + i);
    } else if (R == 2) {
      KV_NAME(dots4_rows_avx2)(2, q + i * rows, rows, kt, hd, dot + i);
    } else {
      KV_NAME(dots4_rows_avx2)(3, q + i * rows, rows, kt, hd, dot + i);
    }
    i += R;
  }
}

/* mix_rows_avx2 adds keys [t0, t1) into C vectors at d of each of R output rows (rows idx[0..R),
 * R and C constants after inlining), the sums in registers: each visible value vector is loaded
 * (converted) once for the R rows, and each element gets the fused multiply-adds of mix in key
 * order, so the same bits. */
static inline __attribute__((always_inline)) QK_ATTENTION_AVX2 void KV_NAME(mix_rows_avx2)(
    int R, int C, const int *idx, const KV_T *v, const uint8_t *vis, int64_t t0, int64_t t1, int64_t n_keys,
    int64_t hd, int64_t d, const float *scores, float *out, int64_t rows) {
  __m256 a[3][4];
  for (int r = 0; r < R; r++) {
    for (int c = 0; c < C; c++) {
      a[r][c] = _mm256_loadu_ps(out + idx[r] * rows + d + 8 * c);
    }
  }
  for (int64_t t = t0; t < t1; t++) {
    if (!vis[t]) {
      continue;
    }
    const KV_T *vt = v + t * hd + d;
    __m256 p[3];
    for (int r = 0; r < R; r++) {
      p[r] = _mm256_set1_ps(scores[idx[r] * n_keys + t]);
    }
    for (int c = 0; c < C; c++) {
      const __m256 x = KV_LOAD8(vt + 8 * c);
      for (int r = 0; r < R; r++) {
        a[r][c] = _mm256_fmadd_ps(p[r], x, a[r][c]);
      }
    }
  }
  for (int r = 0; r < R; r++) {
    for (int c = 0; c < C; c++) {
      _mm256_storeu_ps(out + idx[r] * rows + d + 8 * c, a[r][c]);
    }
  }
}

/* mix_span_avx2 is mix_rows_avx2 for R of 1, 2 or 3 (each its own inlined body). */
static inline __attribute__((always_inline)) QK_ATTENTION_AVX2 void KV_NAME(mix_span_avx2)(
    int R, int C, const int *idx, const KV_T *v, const uint8_t *vis, int64_t t0, int64_t t1, int64_t n_keys,
    int64_t hd, int64_t d, const float *scores, float *out, int64_t rows) {
  if (R == 1) {
    KV_NAME(mix_rows_avx2)(1, C, idx, v, vis, t0, t1, n_keys, hd, d, scores, out, rows);
  } else if (R == 2) {
    KV_NAME(mix_rows_avx2)(2, C, idx, v, vis, t0, t1, n_keys, hd, d, scores, out, rows);
  } else {
    KV_NAME(mix_rows_avx2)(3, C, idx, v, vis, t0, t1, n_keys, hd, d, scores, out, rows);
  }
}

/* mix_avx2 is mix over blocks of QK_MIX_KEYS keys (their value rows stay in the L2 cache for the
 * next elements), the rows that see a key taken three at a time (two and two of four), their
 * elements 32 at a time, then 8, then one by one: each value vector is converted once for the
 * rows of a pass. */
static inline __attribute__((always_inline)) QK_ATTENTION_AVX2 void KV_NAME(mix_avx2)(
    int g, const KV_T *v, const uint8_t *vis, int64_t n_keys, int64_t hd, const float *scores,
    const float *best, float *out, int64_t rows) {
  int idx[QK_ATTENTION_GROUP], n = 0;
  for (int i = 0; i < g; i++) {
    if (best[i] != -INFINITY) {
      idx[n++] = i;
    }
  }
  for (int64_t t0 = 0; t0 < n_keys; t0 += QK_MIX_KEYS) {
    const int64_t t1 = QK_MIN(t0 + QK_MIX_KEYS, n_keys);
    for (int i = 0; i < n;) {
      const int R = rows_step(n - i);
      int64_t d = 0;
      for (; d + 32 <= hd; d += 32) {
        KV_NAME(mix_span_avx2)(R, 4, idx + i, v, vis, t0, t1, n_keys, hd, d, scores, out, rows);
      }
      for (; d + 8 <= hd; d += 8) {
        KV_NAME(mix_span_avx2)(R, 1, idx + i, v, vis, t0, t1, n_keys, hd, d, scores, out, rows);
      }
      for (; d < hd; d++) {
        for (int r = 0; r < R; r++) {
          const int ir = idx[i + r];
          float *oi = out + ir * rows;
          float a = oi[d];
          for (int64_t t = t0; t < t1; t++) {
            if (vis[t]) {
              a = fmaf(scores[ir * n_keys + t], KV_F32(v[t * hd + d]), a);
            }
          }
          oi[d] = a;
        }
      }
      i += R;
    }
  }
}

QK_ATTENTION_ROWS(KV_NAME(rows_avx2), QK_ATTENTION_AVX2, KV_T, exp_pass_avx2, KV_NAME(dot_avx2),
                  KV_NAME(dots4_avx2), KV_NAME(mix_avx2))
#endif
