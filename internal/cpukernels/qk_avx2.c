/* qk_avx2.c: AVX2 + FMA + F16C kernels (x86-64 CPUs without AVX-512).
 *
 * Every function carries its own target attribute, so this file builds with the compiler's
 * baseline flags. Products decode a small tile to float32 and run the micro-kernels below over
 * it, except for one activation row (NF4 and int8), which decodes in registers. NF4 looks up its
 * 16 values with two 8-entry vpermps (the codebook halves) and a blend on bit 3 of the code. */
#include "qk_ggml.h"

#if QK_X86
#include <immintrin.h>

#define T256 __attribute__((target("avx2,fma,f16c")))
#define I256 static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define UNROLL _Pragma("GCC unroll 16")

/* lane mask of the first r (< 8) lanes, for maskload/maskstore */
I256 __m256i lanes(int64_t r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* C[i][0..8V) += sum_l A[i][l] * B[l][0..8V); with TAIL the last vector covers the lanes of tm. */
I256 void mk_kn_tile(const int MR, const int V, const int TAIL, __m256i tm, int64_t kb, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float *C, int64_t ldc) {
  __m256 acc[6][8];
  UNROLL for (int i = 0; i < MR; i++) {
    UNROLL for (int v = 0; v < V; v++) {
      acc[i][v] = (TAIL && v == V - 1) ? _mm256_maskload_ps(C + i * ldc + 8 * v, tm) : _mm256_loadu_ps(C + i * ldc + 8 * v);
    }
  }
  for (int64_t l = 0; l < kb; l++) {
    __m256 b[8];
    UNROLL for (int v = 0; v < V; v++) {
      b[v] = (TAIL && v == V - 1) ? _mm256_maskload_ps(B + l * ldb + 8 * v, tm) : _mm256_loadu_ps(B + l * ldb + 8 * v);
    }
    UNROLL for (int i = 0; i < MR; i++) {
      const __m256 a = _mm256_broadcast_ss(A + i * lda + l);
      UNROLL for (int v = 0; v < V; v++) { acc[i][v] = _mm256_fmadd_ps(a, b[v], acc[i][v]); }
    }
  }
  UNROLL for (int i = 0; i < MR; i++) {
    UNROLL for (int v = 0; v < V; v++) {
      if (TAIL && v == V - 1) {
        _mm256_maskstore_ps(C + i * ldc + 8 * v, tm, acc[i][v]);
      } else {
        _mm256_storeu_ps(C + i * ldc + 8 * v, acc[i][v]);
      }
    }
  }
}

#define MK_KN_CASES(V, TAIL) QK_SWITCH6(mr, mk_kn_tile, V, TAIL, tm, kb, a, lda, B + j, ldb, c + j, ldc)

/* At least 8 accumulators in flight (FMA latency 4, two per cycle): 1 row x 8 vectors, 2 x 4, or
 * up to 6 x 2. */
static T256 void mk_kn(int64_t M, int64_t kb, int64_t P, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float *C, int64_t ldc) {
  for (int64_t i0 = 0; i0 < M; i0 += 6) {
    const int mr = (int)QK_MIN(6, M - i0);
    const float *a = A + i0 * lda;
    float *c = C + i0 * ldc;
    int64_t j = 0;
    __m256i tm = _mm256_set1_epi32(-1);
    if (mr == 1) {
      for (; j + 64 <= P; j += 64) {
        mk_kn_tile(1, 8, 0, tm, kb, a, lda, B + j, ldb, c + j, ldc);
      }
    } else if (mr == 2) {
      for (; j + 32 <= P; j += 32) {
        mk_kn_tile(2, 4, 0, tm, kb, a, lda, B + j, ldb, c + j, ldc);
      }
    }
    for (; j + 16 <= P; j += 16) {
      MK_KN_CASES(2, 0)
    }
    for (; j + 8 <= P; j += 8) {
      MK_KN_CASES(1, 0)
    }
    if (j < P) {
      tm = lanes(P - j);
      MK_KN_CASES(1, 1)
    }
  }
}

/* t8 transposes the 8 x 8 block in r: r[c] becomes the old column c (32-bit pairs, then 64-bit
 * pairs within each 128-bit half, then the halves). */
I256 void t8(__m256 r[8]) {
  __m256 t[8], u[8];
  UNROLL for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  UNROLL for (int g = 0; g < 2; g++) { /* u[4g + s], half h: rows 4g..4g+3 at column 4h + s */
    u[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
    u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
  }
  UNROLL for (int s = 0; s < 4; s++) {
    r[s] = _mm256_permute2f128_ps(u[s], u[4 + s], 0x20);
    r[4 + s] = _mm256_permute2f128_ps(u[s], u[4 + s], 0x31);
  }
}

QK_TRANSPOSE(T256, 8, __m256, __m256i, lanes, _mm256_maskload_ps, _mm256_setzero_ps, _mm256_storeu_ps, t8)

/* horizontal sum of a ymm */
I256 float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* C[i][r] += sum_l A[i][l] * B[r][l] for MR x RR. */
I256 void mk_nk_tile(const int MR, const int RR, int64_t kb, const float *A, int64_t lda, const float *B, int64_t ldb,
                     float *C, int64_t ldc) {
  __m256 acc[4][2];
  UNROLL for (int i = 0; i < MR; i++) {
    UNROLL for (int r = 0; r < RR; r++) { acc[i][r] = _mm256_setzero_ps(); }
  }
  int64_t l = 0;
  for (; l + 8 <= kb; l += 8) {
    __m256 b[2];
    UNROLL for (int r = 0; r < RR; r++) { b[r] = _mm256_loadu_ps(B + r * ldb + l); }
    UNROLL for (int i = 0; i < MR; i++) {
      const __m256 a = _mm256_loadu_ps(A + i * lda + l);
      UNROLL for (int r = 0; r < RR; r++) { acc[i][r] = _mm256_fmadd_ps(a, b[r], acc[i][r]); }
    }
  }
  if (l < kb) {
    const __m256i m = lanes(kb - l);
    __m256 b[2];
    UNROLL for (int r = 0; r < RR; r++) { b[r] = _mm256_maskload_ps(B + r * ldb + l, m); }
    UNROLL for (int i = 0; i < MR; i++) {
      const __m256 a = _mm256_maskload_ps(A + i * lda + l, m);
      UNROLL for (int r = 0; r < RR; r++) { acc[i][r] = _mm256_fmadd_ps(a, b[r], acc[i][r]); }
    }
  }
  UNROLL for (int i = 0; i < MR; i++) {
    UNROLL for (int r = 0; r < RR; r++) { C[i * ldc + r] += hsum(acc[i][r]); }
  }
}

/* mk_nk: tiles of up to 4 activation rows by 2 weight rows. */
QK_MK_NK(T256, I256, 2)

/* 8 bytes widened to 32-bit lanes */
I256 __m256i load_u8x8(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }

/* codebook value of the low 4 bits of each lane: bit 3 picks the half */
I256 __m256 lookup16(__m256i idx, __m256 lo, __m256 hi) {
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx),
                          _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

/* 8 bytes (16 elements) of an NF4 row, natural order, as two vectors. */
I256 void nf4_values16(const uint8_t *src, __m256 lo, __m256 hi, __m256 *w0, __m256 *w1) {
  const __m256i v = load_u8x8(src);
  const __m256 we = lookup16(_mm256_srli_epi32(v, 4), lo, hi); /* even elements: high nibbles */
  const __m256 wo = lookup16(v, lo, hi);
  const __m256 t0 = _mm256_unpacklo_ps(we, wo), t1 = _mm256_unpackhi_ps(we, wo);
  *w0 = _mm256_permute2f128_ps(t0, t1, 0x20);
  *w1 = _mm256_permute2f128_ps(t0, t1, 0x31);
}

/* 8 bytes (16 elements) of an NF4 row, natural order, into out[0..16). */
I256 void nf4_decode16(const uint8_t *src, __m256 lo, __m256 hi, float *out) {
  __m256 w0, w1;
  nf4_values16(src, lo, hi, &w0, &w1);
  _mm256_storeu_ps(out, w0);
  _mm256_storeu_ps(out + 8, w1);
}

/* Elements [e, bend) of one block of an NF4 row at src, of scale s, into o. */
I256 void nf4_run(const uint8_t *src, float s, int64_t e, int64_t bend, float *o) {
  const __m256 sv = _mm256_set1_ps(s);
  const __m256 lo = _mm256_mul_ps(_mm256_loadu_ps(qk_nf4_codebook), sv);
  const __m256 hi = _mm256_mul_ps(_mm256_loadu_ps(qk_nf4_codebook + 8), sv);
  const int64_t e0 = e;
  for (; e + 16 <= bend; e += 16) {
    nf4_decode16(src + e / 2, lo, hi, o + (e - e0));
  }
  if (e < bend) {
    const int64_t r = bend - e; /* 1..15 elements */
    uint8_t tmp[8] = {0};
    float f[16];
    memcpy(tmp, src + e / 2, (size_t)(r + 1) / 2);
    nf4_decode16(tmp, lo, hi, f);
    memcpy(o + (e - e0), f, (size_t)r * sizeof(float));
  }
}

QK_NF4_TILE(T256, nf4_run)

static T256 void i8_tile(const qk_prod *p, int64_t r0, int64_t nr, int64_t c0, int64_t cnt, float *out,
                         int64_t ldo) {
  for (int64_t r = 0; r < nr; r++) {
    const int8_t *src = (const int8_t *)(p->w + (r0 + r) * p->ldw) + c0;
    float *o = out + r * ldo;
    int64_t i = 0;
    for (; i + 8 <= cnt; i += 8) {
      _mm256_storeu_ps(o + i, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(src + i)))));
    }
    for (; i < cnt; i++) {
      o[i] = (float)src[i];
    }
  }
}

static T256 void tb_tile(const qk_prod *p, int64_t p0, int64_t np, int64_t c0, int64_t cnt, float *out,
                         int64_t ldo) {
  const int rps = p->rps, bits = 8 / rps;
  const uint8_t *packed = p->w;
  const int64_t ldw = p->ldw;
  const __m256i mask = _mm256_set1_epi32((1 << bits) - 1);
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
  for (int64_t p = 0; p < np; p++) {
    const uint8_t *src = packed + (p0 + p) * ldw + c0;
    for (int64_t j = 0; j < cnt; j += 8) {
      const int64_t r = QK_MIN(8, cnt - j);
      uint8_t tmp[8] = {0};
      const uint8_t *s8 = src + j;
      if (r < 8) {
        memcpy(tmp, s8, (size_t)r);
        s8 = tmp;
      }
      const __m256i v = load_u8x8(s8);
      for (int g = 0; g < rps; g++) {
        const __m256 c = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(v, _mm_cvtsi32_si128(bits * g)), mask));
        /* 2-bit: code - 1 (code 3 reads as +2); 1-bit: 2*bit - 1 */
        const __m256 val = bits == 2 ? _mm256_sub_ps(c, one) : _mm256_fmsub_ps(c, two, one);
        float *o = out + (p * rps + g) * ldo + j;
        if (r == 8) {
          _mm256_storeu_ps(o, val);
        } else {
          _mm256_maskstore_ps(o, lanes(r), val);
        }
      }
    }
  }
}

/* ---- fused kernels for one activation row (the tiled drivers pay a store and a reload of every
 * decoded weight, which one row cannot amortize) ---- */

/* Byte j of each of the 16 codebook values, in both 128-bit lanes: vpshufb tables. */
I256 void nf4_planes(__m256i plane[4]) {
  uint8_t bytes[4][16];
  for (int v = 0; v < 16; v++) {
    uint32_t u;
    memcpy(&u, &qk_nf4_codebook[v], 4);
    for (int j = 0; j < 4; j++) {
      bytes[j][v] = (uint8_t)(u >> (8 * j));
    }
  }
  for (int j = 0; j < 4; j++) {
    plane[j] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)bytes[j]));
  }
}

/* The codebook values (unscaled) of the 32 codes in the 16 bytes at src, by four byte lookups and
 * two interleaves: the low lane looks up the high nibbles (the even elements), the high lane the
 * low ones, so the vectors hold the elements in QK_ORDER_PAIRS8. */
I256 void nf4_values32(const uint8_t *src, const __m256i plane[4], __m256 v[4]) {
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)src));
  const __m256i idx =
      _mm256_and_si256(_mm256_srlv_epi32(b, _mm256_setr_epi32(4, 4, 4, 4, 0, 0, 0, 0)), _mm256_set1_epi8(0x0F));
  const __m256i p0 = _mm256_shuffle_epi8(plane[0], idx), p1 = _mm256_shuffle_epi8(plane[1], idx);
  const __m256i p2 = _mm256_shuffle_epi8(plane[2], idx), p3 = _mm256_shuffle_epi8(plane[3], idx);
  const __m256i l01 = _mm256_unpacklo_epi8(p0, p1), h01 = _mm256_unpackhi_epi8(p0, p1);
  const __m256i l23 = _mm256_unpacklo_epi8(p2, p3), h23 = _mm256_unpackhi_epi8(p2, p3);
  v[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(l01, l23));
  v[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(l01, l23));
  v[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(h01, h23));
  v[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(h01, h23));
}

/* The fused NF4 kernels (one activation row, blocks of a multiple of 32) read whole groups of 32
 * codes, the stored rows' padding included: the driver lays the activations (nk) and the partial
 * sums (kn) out in QK_ORDER_PAIRS8, zero past k. */

/* NF4 x @ W, one stored row at a time (sequential reads): part += x[k] * scale * codebook. */
static T256 void nf4_kn(const qk_prod *p, int64_t s0, int64_t s1, int64_t c0, int64_t c1, float *part,
                        void *scratch) {
  (void)scratch;
  const qk_nf4w *w = &p->nf4;
  __m256i plane[4];
  nf4_planes(plane);
  for (int64_t k = s0; k < s1; k++) {
    const uint8_t *row = w->packed + k * w->row_bytes;
    for (int64_t b = c0 / w->bs; b * w->bs < c1; b++) {
      const __m256 sc = _mm256_set1_ps(p->x[k] * qk_nf4_scale(w, k, b));
      for (int64_t c = b * w->bs; c < (b + 1) * w->bs; c += 32) {
        __m256 v[4];
        nf4_values32(row + c / 2, plane, v);
        for (int q = 0; q < 4; q++) {
          _mm256_storeu_ps(part + c + 8 * q, _mm256_fmadd_ps(v[q], sc, _mm256_loadu_ps(part + c + 8 * q)));
        }
      }
    }
  }
}

/* NF4 x @ W^T, one stored row at a time: a block's products summed unscaled, then scaled. */
static T256 void nf4_nk(const qk_prod *p, int64_t n0, int64_t n1, void *scratch) {
  (void)scratch;
  const qk_nf4w *w = &p->nf4;
  const int64_t K = (p->k + 31) / 32 * 32;
  __m256i plane[4];
  nf4_planes(plane);
  for (int64_t n = n0; n < n1; n++) {
    const uint8_t *row = w->packed + n * w->row_bytes;
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b * w->bs < K; b++) {
      __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      const int64_t end = QK_MIN((b + 1) * w->bs, K);
      for (int64_t c = b * w->bs; c < end; c += 32) {
        __m256 v[4];
        nf4_values32(row + c / 2, plane, v);
        for (int q = 0; q < 4; q++) {
          s[q] = _mm256_fmadd_ps(_mm256_loadu_ps(p->x + c + 8 * q), v[q], s[q]);
        }
      }
      const __m256 sc = _mm256_set1_ps(qk_nf4_scale(w, n, b));
      for (int q = 0; q < 4; q++) {
        a[q] = _mm256_fmadd_ps(s[q], sc, a[q]);
      }
    }
    p->y[n] = hsum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
  }
}

/* int8 x @ W, four rows per pass held in registers, 32 columns at a time. */
static T256 void i8_kn(const qk_prod *p, int64_t s0, int64_t s1, int64_t c0, int64_t c1, float *part,
                       void *scratch) {
  (void)scratch;
  const int64_t N = p->n;
  int64_t k = s0;
  for (; k < s1; k += 4) {
    const int R = (int)QK_MIN(4, s1 - k);
    const int8_t *rows[4];
    __m256 xv[4];
    for (int r = 0; r < 4; r++) {
      rows[r] = (const int8_t *)p->w + (k + QK_MIN(r, R - 1)) * N;
      xv[r] = _mm256_set1_ps(r < R ? p->x[k + r] : 0.0f);
    }
    int64_t c = c0;
    for (; c + 32 <= c1; c += 32) {
      __m256 acc[4];
      UNROLL for (int v = 0; v < 4; v++) { acc[v] = _mm256_loadu_ps(part + c + 8 * v); }
      UNROLL for (int r = 0; r < 4; r++) {
        UNROLL for (int v = 0; v < 4; v++) {
          const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(rows[r] + c + 8 * v))));
          acc[v] = _mm256_fmadd_ps(xv[r], q, acc[v]);
        }
      }
      UNROLL for (int v = 0; v < 4; v++) { _mm256_storeu_ps(part + c + 8 * v, acc[v]); }
    }
    for (; c < c1; c++) {
      float a = part[c];
      for (int r = 0; r < R; r++) {
        a += p->x[k + r] * (float)rows[r][c];
      }
      part[c] = a;
    }
  }
}

/* int8 x @ W^T, two accumulators per row. */
static T256 void i8_nk(const qk_prod *p, int64_t n0, int64_t n1, void *scratch) {
  (void)scratch;
  const int64_t K = p->k;
  for (int64_t n = n0; n < n1; n++) {
    const int8_t *row = (const int8_t *)p->w + n * K;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t l = 0;
    for (; l + 16 <= K; l += 16) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(p->x + l),
                           _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(row + l)))), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(p->x + l + 8),
                           _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(row + l + 8)))), a1);
    }
    float t = 0;
    for (; l < K; l++) {
      t += p->x[l] * (float)row[l];
    }
    p->y[n] = hsum(_mm256_add_ps(a0, a1)) + t;
  }
}

/* ---- ggml's block types: qk_ggml_vec.h over 8 lanes ---- */

#define GV_F __m256
#define GV_I __m256i
#define GV_N 8
#define GV_INLINE I256
#define GV_FN T256
#define gv_zero _mm256_setzero_ps
#define gv_set1 _mm256_set1_ps
#define gv_bcast _mm256_broadcast_ss
#define gv_loadu _mm256_loadu_ps
#define gv_storeu _mm256_storeu_ps
#define gv_fma _mm256_fmadd_ps
#define gv_mul _mm256_mul_ps
#define gv_add _mm256_add_ps
#define gv_cvt _mm256_cvtepi32_ps
#define gv_hsum hsum
#define gv_xload(p) _mm_loadl_epi64((const __m128i *)(p))
#define gv_u8(p) _mm256_cvtepu8_epi32(gv_xload(p))
#define gv_s8(p) _mm256_cvtepi8_epi32(gv_xload(p))
#define gv_s8x _mm256_cvtepi8_epi32
#define gv_iset1 _mm256_set1_epi32
#define gv_iloadu(p) _mm256_loadu_si256((const __m256i *)(p))
#define gv_and _mm256_and_si256
#define gv_or _mm256_or_si256
#define gv_iadd _mm256_add_epi32
#define gv_isub _mm256_sub_epi32
#define gv_srli _mm256_srli_epi32
#define gv_slli _mm256_slli_epi32
#define gv_srlv _mm256_srlv_epi32
#define GV_MAX_M 8
#include "qk_ggml_vec.h"

/* The fused kernels take one activation row. */
const qk_ops qk_ops_avx2 = {
    .isa = QK_ISA_AVX2,
    .mk_kn = mk_kn,
    .mk_nk = mk_nk,
    .transpose = transpose,
    .quantize_x8 = gv_quantize_x8,
    .fmt =
        {
            [QK_FMT_F32] = {.tile = qk_f32_tile},
            [QK_FMT_NF4] = {.tile = nf4_tile,
                            .kn = {{.kn = nf4_kn, .max_m = 1, .cap_m = 1, .order = QK_ORDER_PAIRS8, .takes = qk_nf4_bs32}},
                            .nk = {{.nk = nf4_nk, .max_m = 1, .cap_m = 1, .order = QK_ORDER_PAIRS8, .takes = qk_nf4_bs32}}},
            [QK_FMT_I8] = {.tile = i8_tile,
                           .kn = {{.kn = i8_kn, .max_m = 1, .cap_m = 1}},
                           .nk = {{.nk = i8_nk, .max_m = 1, .cap_m = 1}}},
            [QK_FMT_TB2] = {.tile = tb_tile},
            [QK_FMT_TB1] = {.tile = tb_tile},
            GV_GGML_ROWS,
        },
};

#endif /* QK_X86 */
