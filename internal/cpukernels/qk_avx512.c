/* qk_avx512.c: AVX-512 kernels (F, BW, VL, DQ).
 *
 * Every function carries its own target attribute, so this file builds with the compiler's
 * baseline flags and its code runs only where qk_cpu.c found the features.
 *
 * NF4 decodes by table lookup: a zmm holds the 16 codebook values times the block scale (the dense
 * weight's values, rounded once, as materializing would), vpermps picks one per 32-bit lane using
 * the low 4 bits of the index, so a byte widened to 32 bits indexes its low nibble directly and,
 * shifted right by 4, its high nibble. The two vectors that come out hold the even and the odd
 * columns of 32 consecutive elements; the fused kernels keep that "pair order" in their partial
 * sums (kn) or in the activations (nk) instead of shuffling every vector back.
 *
 * 2-bit and 1-bit weights use table lookups too: a byte holds 4 (or 8) values of one column for 4
 * (8) different k, so its low and high nibbles index two 16-entry tables of partial sums of the
 * activations (x[k1]*v1 + x[k2]*v2 for 2-bit, four +-x terms for 1-bit), built per activation row
 * and stored row: one vpermps and one add replace 2 (4) multiply-adds. */
#include "qk_ggml.h"

#if QK_X86
#ifdef QK_SIMDE
/* Tests on CPUs without AVX-512: the same code over SIMDe's portable implementations of the
 * intrinsics (qk_cpu.c then reports the path as supported). */
#define SIMDE_ENABLE_NATIVE_ALIASES
#include "qk_simde.h"
#define T512
#define I512 static inline __attribute__((always_inline))
#else
#include <immintrin.h>
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define I512 static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#endif
#define UNROLL _Pragma("GCC unroll 16")
/* Tuning, chosen by measurement on Zen 4 (CPU time per product of weights streamed from memory;
 * -D overrides them for experiments):
 *   QK_PFD: software prefetch distance (bytes) of the kernels that stream one weight row at a
 *     time; the hardware prefetchers alone leave them short of the bandwidth.
 *   QK_R1, QK_NKR1: NF4 rows per pass for one activation row (the pair-order kernels, for block
 *     sizes the stride-8 kernels do not take): one row at a time reads sequentially, which beat
 *     interleaving several rows.
 *   QK_I8R1, QK_I8NKR1: int8 rows per pass for one activation row: several rows in registers beat
 *     the sequential order there, with the next pass's bytes prefetched (on an Intel Xeon the
 *     hardware prefetchers did not follow the interleaved rows).
 *   QK_R4, QK_I8R4: rows per pass for more activation rows.
 *   S8R, LUT_R1: weight rows per pass of the single-row NF4 x @ W and 2/1-bit kernels, which load
 *     and store a panel of partial sums once per pass: two NF4 rows ran faster from cache and no
 *     slower from memory; two 2/1-bit rows ran slower from memory.
 *   M1_PANEL: columns per panel of the single-row kn kernels, which load and store the partial
 *     sums of a panel once per weight row: 16 KiB of float32 stays in L1 (for n = 11008 the
 *     whole row of partial sums did not, and those kernels slowed by a third). */
#ifndef QK_PFD
#define QK_PFD 2048
#endif
#ifndef QK_R1
#define QK_R1 1
#endif
#ifndef QK_NKR1
#define QK_NKR1 1
#endif
#ifndef QK_I8R1
#define QK_I8R1 8
#endif
#ifndef QK_I8NKR1
#define QK_I8NKR1 8
#endif
#ifndef QK_R4
#define QK_R4 4
#endif
#ifndef QK_I8R4
#define QK_I8R4 4
#endif

#ifndef S8R
#define S8R 2
#endif
#ifndef LUT_R1
#define LUT_R1 1
#endif
#ifndef M1_PANEL
#define M1_PANEL 4096
#endif

#define prefetch(p)                                                                                                    \
  do {                                                                                                                 \
    if (QK_PFD > 0) {                                                                                                  \
      _mm_prefetch((const char *)(p) + QK_PFD, _MM_HINT_T0);                                                           \
    }                                                                                                                  \
  } while (0)

/* The prefetch offset of the single-row kn kernels, relative to QK_PFD: they walk a column panel
 * of M1_PANEL columns down the rows, so the bytes wanted next are one row further (rb bytes per
 * row, cols columns in all) when the panel is narrower than the row, and QK_PFD further along
 * the row otherwise. */
QK_INLINE int64_t next_row(int64_t rb, int64_t cols) { return cols > M1_PANEL ? rb - QK_PFD : 0; }

I512 __mmask16 tail16(int64_t r) { return r >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << r) - 1); }

I512 __m512i load_u8x16(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }

I512 __m512i load_u8x16_mask(const uint8_t *p, __mmask16 m) {
  return _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p));
}

I512 __m512 load_i8x16(const int8_t *p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

I512 __m512 load_i8x16_mask(const int8_t *p, __mmask16 m) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p)));
}

/* The 16 NF4 values times a block scale. */
I512 __m512 nf4_table(const qk_nf4w *w, int64_t row, int64_t blk) {
  return _mm512_mul_ps(_mm512_loadu_ps(qk_nf4_codebook), _mm512_set1_ps(qk_nf4_scale(w, row, blk)));
}

/* sum4 returns the horizontal sums of a, b, c, d as one xmm. */
I512 __m128 sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  __m256 ta = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  __m256 tb = _mm256_add_ps(_mm512_castps512_ps256(b), _mm512_extractf32x8_ps(b, 1));
  __m256 tc = _mm256_add_ps(_mm512_castps512_ps256(c), _mm512_extractf32x8_ps(c, 1));
  __m256 td = _mm256_add_ps(_mm512_castps512_ps256(d), _mm512_extractf32x8_ps(d, 1));
  __m256 x = _mm256_hadd_ps(_mm256_hadd_ps(ta, tb), _mm256_hadd_ps(tc, td));
  return _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
}

/* ================= generic primitives ================= */

/* C[i][0..16V) += sum_l A[i][l] * B[l][0..16V), the last vector masked by last: each sum runs
 * over l in order, one multiply-add at a time, whatever the tile. */
I512 void mk_kn_tile(const int MR, const int V, __mmask16 last, int64_t kb, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float *C, int64_t ldc) {
  __m512 acc[6][4];
  UNROLL for (int i = 0; i < MR; i++) {
    UNROLL for (int v = 0; v < V; v++) {
      acc[i][v] = v == V - 1 ? _mm512_maskz_loadu_ps(last, C + i * ldc + 16 * v) : _mm512_loadu_ps(C + i * ldc + 16 * v);
    }
  }
  for (int64_t l = 0; l < kb; l++) {
    __m512 b[4];
    UNROLL for (int v = 0; v < V; v++) {
      b[v] = v == V - 1 ? _mm512_maskz_loadu_ps(last, B + l * ldb + 16 * v) : _mm512_loadu_ps(B + l * ldb + 16 * v);
    }
    UNROLL for (int i = 0; i < MR; i++) {
      const __m512 a = _mm512_set1_ps(A[i * lda + l]);
      UNROLL for (int v = 0; v < V; v++) { acc[i][v] = _mm512_fmadd_ps(a, b[v], acc[i][v]); }
    }
  }
  UNROLL for (int i = 0; i < MR; i++) {
    UNROLL for (int v = 0; v < V; v++) {
      if (v == V - 1) {
        _mm512_mask_storeu_ps(C + i * ldc + 16 * v, last, acc[i][v]);
      } else {
        _mm512_storeu_ps(C + i * ldc + 16 * v, acc[i][v]);
      }
    }
  }
}

#define MK_KN_CASES(V) QK_SWITCH6(mr, mk_kn_tile, V, last, kb, a, lda, B + j, ldb, c + j, ldc)

/* Tiles of up to 6 activation rows by 4 vectors (24 sums in registers, the loads of a step
 * shared by 24 multiply-adds); the columns past the last whole 64 in one tile of 1-4 vectors. */
static T512 void mk_kn(int64_t M, int64_t kb, int64_t P, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float *C, int64_t ldc) {
  for (int64_t i0 = 0; i0 < M; i0 += 6) {
    const int mr = (int)QK_MIN(6, M - i0);
    const float *a = A + i0 * lda;
    float *c = C + i0 * ldc;
    int64_t j = 0;
    __mmask16 last = 0xffff;
    for (; j + 64 <= P; j += 64) {
      MK_KN_CASES(4)
    }
    if (j < P) {
      const int v = (int)((P - j + 15) / 16); /* vectors of the last tile, 1-4 */
      last = tail16(P - j - 16 * (v - 1));
      switch (v) { /* the switch macros do not nest: QK_SWITCH6 is inside MK_KN_CASES */
      case 1:
        MK_KN_CASES(1)
        break;
      case 2:
        MK_KN_CASES(2)
        break;
      case 3:
        MK_KN_CASES(3)
        break;
      default:
        MK_KN_CASES(4)
      }
    }
  }
}

/* t16 transposes the 16 x 16 block in r: r[c] becomes the old column c (32-bit pairs, then
 * 64-bit pairs within each 128-bit lane, then the lanes). */
I512 void t16(__m512 r[16]) {
  __m512 t[16];
  UNROLL for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  __m512 u[16]; /* u[4g + s], lane q: rows 4g..4g+3 at column 4q + s */
  UNROLL for (int g = 0; g < 4; g++) {
    u[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
  }
  UNROLL for (int s = 0; s < 4; s++) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[s], u[4 + s], 0x88), v1 = _mm512_shuffle_f32x4(u[s], u[4 + s], 0xdd);
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + s], u[12 + s], 0x88);
    const __m512 w1 = _mm512_shuffle_f32x4(u[8 + s], u[12 + s], 0xdd);
    r[s] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    r[8 + s] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
    r[4 + s] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    r[12 + s] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
  }
}

#define T16_LOAD(p, m) _mm512_maskz_loadu_ps(m, p)
QK_TRANSPOSE(T512, 16, __m512, __mmask16, tail16, T16_LOAD, _mm512_setzero_ps, _mm512_storeu_ps, t16)

/* C[i][0..RR) += sum_l A[i][l] * B[r][l]. */
I512 void mk_nk_tile(const int MR, const int RR, int64_t kb, const float *A, int64_t lda, const float *B, int64_t ldb,
                     float *C, int64_t ldc) {
  __m512 acc[4][4];
  UNROLL for (int i = 0; i < 4; i++) {
    UNROLL for (int r = 0; r < 4; r++) { acc[i][r] = _mm512_setzero_ps(); }
  }
  int64_t l = 0;
  for (; l + 16 <= kb; l += 16) {
    __m512 b[4];
    UNROLL for (int r = 0; r < RR; r++) { b[r] = _mm512_loadu_ps(B + r * ldb + l); }
    UNROLL for (int i = 0; i < MR; i++) {
      const __m512 a = _mm512_loadu_ps(A + i * lda + l);
      UNROLL for (int r = 0; r < RR; r++) { acc[i][r] = _mm512_fmadd_ps(a, b[r], acc[i][r]); }
    }
  }
  if (l < kb) {
    const __mmask16 m = tail16(kb - l);
    __m512 b[4];
    UNROLL for (int r = 0; r < RR; r++) { b[r] = _mm512_maskz_loadu_ps(m, B + r * ldb + l); }
    UNROLL for (int i = 0; i < MR; i++) {
      const __m512 a = _mm512_maskz_loadu_ps(m, A + i * lda + l);
      UNROLL for (int r = 0; r < RR; r++) { acc[i][r] = _mm512_fmadd_ps(a, b[r], acc[i][r]); }
    }
  }
  const __mmask8 cm = (__mmask8)((1u << RR) - 1);
  UNROLL for (int i = 0; i < MR; i++) {
    __m128 s = sum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    _mm_mask_storeu_ps(C + i * ldc, cm, _mm_add_ps(s, _mm_maskz_loadu_ps(cm, C + i * ldc)));
  }
}

/* mk_nk: tiles of up to 4 activation rows by 4 weight rows. */
QK_MK_NK(T512, I512, 4)

/* Output lane 2j takes lane j of the even vector, 2j+1 lane j of the odd one (j < 8; +8 for hi). */
#define PAIR_LO _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0)
#define PAIR_HI _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8)

/* Elements [e, bend) of one block of an NF4 row at src, of scale s, into out. */
I512 void nf4_run(const uint8_t *src, float s, int64_t e, int64_t bend, float *out) {
  const __m512i plo = PAIR_LO, phi = PAIR_HI;
  const __m512 T = _mm512_mul_ps(_mm512_loadu_ps(qk_nf4_codebook), _mm512_set1_ps(s));
  const int64_t e0 = e;
  for (; e + 32 <= bend; e += 32) {
    const __m512i v = load_u8x16(src + e / 2);
    const __m512 we = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), T);
    const __m512 wo = _mm512_permutexvar_ps(v, T);
    _mm512_storeu_ps(out + (e - e0), _mm512_permutex2var_ps(we, plo, wo));
    _mm512_storeu_ps(out + (e - e0) + 16, _mm512_permutex2var_ps(we, phi, wo));
  }
  if (e < bend) {
    const int64_t r = bend - e; /* 1..31 elements, (r+1)/2 bytes */
    const __m512i v = load_u8x16_mask(src + e / 2, tail16((r + 1) / 2));
    const __m512 we = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), T);
    const __m512 wo = _mm512_permutexvar_ps(v, T);
    _mm512_mask_storeu_ps(out + (e - e0), tail16(r), _mm512_permutex2var_ps(we, plo, wo));
    if (r > 16) {
      _mm512_mask_storeu_ps(out + (e - e0) + 16, tail16(r - 16), _mm512_permutex2var_ps(we, phi, wo));
    }
  }
}

QK_NF4_TILE(T512, nf4_run)

static T512 void i8_tile(const qk_prod *p, int64_t r0, int64_t nr, int64_t c0, int64_t cnt, float *out,
                         int64_t ldo) {
  for (int64_t r = 0; r < nr; r++) {
    const int8_t *src = (const int8_t *)(p->w + (r0 + r) * p->ldw) + c0;
    float *o = out + r * ldo;
    int64_t i = 0;
    for (; i + 16 <= cnt; i += 16) {
      _mm512_storeu_ps(o + i, load_i8x16(src + i));
    }
    if (i < cnt) {
      const __mmask16 m = tail16(cnt - i);
      _mm512_mask_storeu_ps(o + i, m, load_i8x16_mask(src + i, m));
    }
  }
}

static T512 void tb_tile(const qk_prod *p, int64_t p0, int64_t np, int64_t c0, int64_t cnt, float *out,
                         int64_t ldo) {
  const int rps = p->rps, bits = 8 / rps;
  const uint8_t *packed = p->w;
  const int64_t ldw = p->ldw;
  const __m512i mask = _mm512_set1_epi32((1 << bits) - 1);
  for (int64_t p = 0; p < np; p++) {
    const uint8_t *src = packed + (p0 + p) * ldw + c0;
    for (int64_t j = 0; j < cnt; j += 16) {
      const __mmask16 m = tail16(cnt - j);
      const __m512i v = load_u8x16_mask(src + j, m);
      for (int g = 0; g < rps; g++) {
        const __m512 c = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srl_epi32(v, _mm_cvtsi32_si128(bits * g)), mask));
        /* 2-bit: code - 1 (code 3 reads as +2); 1-bit: 2*bit - 1 */
        const __m512 val = bits == 2 ? _mm512_sub_ps(c, _mm512_set1_ps(1.0f))
                                     : _mm512_fmsub_ps(c, _mm512_set1_ps(2.0f), _mm512_set1_ps(1.0f));
        _mm512_mask_storeu_ps(out + (p * rps + g) * ldo + j, m, val);
      }
    }
  }
}

/* ================= fused NF4, blocks along n (x @ W) ================= */

/* R stored rows from k0, columns [c0, c1) (whole blocks), activation rows i0..i0+MR, into part
 * (pair order). Needs bs % 32 == 0. */
I512 void nf4_kn_rows(const int MR, const int R, const qk_prod *p, int64_t k0, int64_t i0, int64_t c0, int64_t c1,
                      float *part) {
  const qk_nf4w *w = &p->nf4;
  const int64_t ldp = p->ldp, bs = w->bs;
  const uint8_t *rows[8];
  float xs[8][8];
  part += i0 * ldp;
  UNROLL for (int r = 0; r < R; r++) {
    rows[r] = w->packed + (k0 + r) * w->row_bytes;
    UNROLL for (int i = 0; i < MR; i++) { xs[i][r] = p->x[(i0 + i) * p->ldx + k0 + r]; }
  }
  for (int64_t b = c0 / bs; b * bs < c1; b++) {
    __m512 T[8];
    UNROLL for (int r = 0; r < R; r++) {
      T[r] = nf4_table(w, k0 + r, b);
    }
    for (int64_t c = b * bs; c < (b + 1) * bs; c += 32) {
      __m512 ae[8], ao[8];
      UNROLL for (int i = 0; i < MR; i++) {
        ae[i] = _mm512_loadu_ps(part + i * ldp + c);
        ao[i] = _mm512_loadu_ps(part + i * ldp + c + 16);
      }
      UNROLL for (int r = 0; r < R; r++) {
        const __m512i v = load_u8x16(rows[r] + c / 2);
        const __m512 we = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), T[r]);
        const __m512 wo = _mm512_permutexvar_ps(v, T[r]);
        UNROLL for (int i = 0; i < MR; i++) {
          const __m512 xv = _mm512_set1_ps(xs[i][r]);
          ae[i] = _mm512_fmadd_ps(xv, we, ae[i]);
          ao[i] = _mm512_fmadd_ps(xv, wo, ao[i]);
        }
      }
      UNROLL for (int i = 0; i < MR; i++) {
        _mm512_storeu_ps(part + i * ldp + c, ae[i]);
        _mm512_storeu_ps(part + i * ldp + c + 16, ao[i]);
      }
    }
  }
}

/* KN_PASSES runs a kn chunk through ROWS(MR, R, p, k, i0, c0, c1, part): one activation row takes
 * R1 weight rows per pass; more take RM rows per pass for m-tiles of 8, so the partial sums are
 * loaded and stored once per RM rows and each tile decodes the rows again from L1; the rows left
 * over go one at a time. */
#define KN_PASSES(ROWS, R1, RM, p, s0, s1, c0, c1, part)                                                               \
  do {                                                                                                                 \
    const int64_t M_ = (p)->m;                                                                                         \
    int64_t k_ = (s0);                                                                                                 \
    if (M_ == 1) {                                                                                                     \
      for (; k_ + (R1) <= (s1); k_ += (R1)) {                                                                          \
        ROWS(1, R1, p, k_, 0, c0, c1, part);                                                                           \
      }                                                                                                                \
    } else {                                                                                                           \
      for (; k_ + (RM) <= (s1); k_ += (RM)) {                                                                          \
        for (int64_t i0 = 0; i0 < M_; i0 += 8) {                                                                       \
          QK_SWITCH8(QK_MIN(8, M_ - i0), ROWS, RM, p, k_, i0, c0, c1, part)                                            \
        }                                                                                                              \
      }                                                                                                                \
    }                                                                                                                  \
    for (; k_ < (s1); k_++) {                                                                                          \
      for (int64_t i0 = 0; i0 < M_; i0 += 8) {                                                                         \
        QK_SWITCH8(QK_MIN(8, M_ - i0), ROWS, 1, p, k_, i0, c0, c1, part)                                               \
      }                                                                                                                \
    }                                                                                                                  \
  } while (0)

/* Rows per pass: sequential reads measured best for NF4 rows, several rows in flight for int8. */
static T512 void nf4_kn(const qk_prod *p, int64_t s0, int64_t s1, int64_t c0, int64_t c1, float *part, void *scratch) {
  (void)scratch;
  KN_PASSES(nf4_kn_rows, QK_R1, QK_R4, p, s0, s1, c0, c1, part);
}

/* Lane j of a 128-column group covers columns c0+8j .. c0+8j+7 (c0 a multiple of 128), in block
 * (c0+8j)/bs: the group's first block plus lane_block[j]. Needs bs a multiple of 128 (one block
 * per group) or a multiple of 8 dividing 128. */
typedef struct {
  __m512i lane_block; /* j / (bs/8), or 0 */
  int64_t per_group;  /* blocks per group: 128/bs, or 1 */
  int64_t groups;     /* groups per block: bs/128, or 1 */
} lane_map;

I512 lane_map nf4_lane_map(int64_t bs) {
  lane_map l;
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  if (bs % 128 == 0) {
    l.lane_block = _mm512_setzero_si512();
    l.per_group = 1;
    l.groups = bs / 128;
  } else {
    l.lane_block = _mm512_srlv_epi32(lane, _mm512_set1_epi32(__builtin_ctzll((unsigned long long)(bs / 8))));
    l.per_group = 128 / bs;
    l.groups = 1;
  }
  return l;
}

/* prefetch_nf4_scales fetches the scales of blocks [b0, b1) of stored row `row` of p toward L1
 * (nothing past the last row). The scales are a stream apart from the codes, one the hardware
 * prefetchers did not keep ahead of: the one-row kernels stalled on their scale loads. Callers
 * pass the row whose codes their code prefetch (QK_PFD bytes on) now reaches. */
I512 void prefetch_nf4_scales(const qk_prod *p, int64_t row, int64_t b0, int64_t b1) {
  if (row >= p->srows) {
    return;
  }
  const qk_nf4w *w = &p->nf4;
  const int64_t size = w->absmax_dtype == QK_F32 ? 4 : 2;
  const char *at = (const char *)w->absmax + (row * w->nb + b0) * size;
  for (int64_t o = 0; o < (b1 - b0) * size; o += 64) {
    _mm_prefetch(at + o, _MM_HINT_T0);
  }
}

/* The block scales of the 16 lanes of a 128-column group of stored row `row` whose first block is
 * b0: the vector counterpart of qk_nf4_scale (a new absmax encoding adds a case here too). The
 * callers step b0 by l.per_group (a division per group costs more than the group's lookups). */
I512 __m512 nf4_lane_scales(const qk_nf4w *w, lane_map l, int64_t row, int64_t b0) {
  if (l.per_group == 1) {
    return _mm512_set1_ps(qk_nf4_scale(w, row, b0));
  }
  const int64_t nbl = QK_MIN(l.per_group, w->nb - b0);
  const __mmask16 m = (__mmask16)((1u << nbl) - 1);
  const int64_t at = row * w->nb + b0;
  __m512 s;
  switch (w->absmax_dtype) {
  case QK_F32:
    s = _mm512_maskz_loadu_ps(m, (const float *)w->absmax + at);
    break;
  case QK_BF16:
    s = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w->absmax + at)), 16));
    break;
  default: {
    float t[16] = {0};
    for (int64_t b = 0; b < nbl; b++) {
      t[b] = qk_nf4_scale(w, row, b0 + b);
    }
    s = _mm512_loadu_ps(t);
  }
  }
  return _mm512_permutexvar_ps(l.lane_block, s);
}

/* acc[16s .. 16s+16) += coef * codebook[nibble s of each word of v] for s = 0..7 */
I512 void nf4_s8_group(__m512i v, __m512 coef, __m512 cb, float *acc) {
  UNROLL for (int s = 0; s < 8; s++) {
    const __m512i idx = s == 0 ? v : _mm512_srli_epi32(v, (unsigned)(4 * s));
    _mm512_storeu_ps(acc + 16 * s, _mm512_fmadd_ps(coef, _mm512_permutexvar_ps(idx, cb), _mm512_loadu_ps(acc + 16 * s)));
  }
}

/* m = 1, stored rows [s0, s1) one at a time (sequential reads), into part in QK_ORDER_STRIDE8:
 * the 64 bytes of 128 columns are read as sixteen 32-bit words, and word j shifted right by 4s
 * has in its low 4 bits the code of column 8j + (s^1), which vpermps looks up directly: eight
 * lookups and no widening per 128 weights. The codebook is unscaled; the per-lane block scale
 * times x[k] multiplies it (the lanes of one vector may belong to different blocks). */
/* As nf4_s8_group for R rows: one load and store of the partial sums per R rows (those, not the
 * lookups, bound the one-row loop). */
I512 void nf4_s8_groupR(const int R, const __m512i *v, const __m512 *coef, __m512 cb, float *acc) {
  UNROLL for (int s = 0; s < 8; s++) {
    __m512 a = _mm512_loadu_ps(acc + 16 * s);
    UNROLL for (int r = 0; r < R; r++) {
      const __m512i idx = s == 0 ? v[r] : _mm512_srli_epi32(v[r], (unsigned)(4 * s));
      a = _mm512_fmadd_ps(coef[r], _mm512_permutexvar_ps(idx, cb), a);
    }
    _mm512_storeu_ps(acc + 16 * s, a);
  }
}

/* The lane scales of block b of row k (see nf4_lane_scales), with a fast path for float32. */
I512 __m512 s8_scales(const qk_nf4w *w, lane_map l, int f32, __mmask16 fm, int64_t k, int64_t b) {
  return f32 ? _mm512_permutexvar_ps(l.lane_block, _mm512_maskz_loadu_ps(fm, (const float *)w->absmax + k * w->nb + b))
             : nf4_lane_scales(w, l, k, b);
}

static T512 void nf4_kn_m1(const qk_prod *p, int64_t s0, int64_t s1, int64_t cs, int64_t ce, float *part,
                           void *scratch) {
  (void)scratch;
  const qk_nf4w *w = &p->nf4;
  const __m512 cb = _mm512_loadu_ps(qk_nf4_codebook);
  const lane_map l = nf4_lane_map(w->bs);
  const int64_t rb = w->row_bytes, ncols = rb * 2, full = ncols / 128 * 128;
  const int f32 = w->absmax_dtype == QK_F32 && l.per_group > 1 && w->nb % l.per_group == 0;
  const __mmask16 fm = (__mmask16)((1u << l.per_group) - 1);
  const __mmask64 tm = ((__mmask64)1 << ((ncols - full) / 2)) - 1; /* bytes of the last group */
  /* column panels keep the partial sums they update in L1 (see M1_PANEL); the last group of a row
   * shorter than 128 columns is done apart, when the range reaches it */
  for (int64_t c0 = cs; c0 < ce; c0 += M1_PANEL) {
    const int64_t cend = QK_MIN(c0 + M1_PANEL, ce);
    const int64_t cfull = QK_MIN(cend, full), g0 = c0 / 128;
    const int last = full < ncols && cend > full;
    /* the rows whose codes the code prefetch reaches: the next pass's when the panel is narrower
     * than the row (see next_row), QK_PFD bytes further on otherwise */
    const int64_t ahead = S8R + (ncols > M1_PANEL ? 0 : QK_PFD / rb);
    const int64_t b0 = c0 / w->bs, b1 = (cend + w->bs - 1) / w->bs;
    int64_t k = s0;
    for (; k + S8R <= s1; k += S8R) {
      const uint8_t *row = w->packed + k * rb;
      UNROLL for (int r = 0; r < S8R; r++) { prefetch_nf4_scales(p, k + ahead + r, b0, b1); }
      __m512 xr[4];
      UNROLL for (int r = 0; r < S8R; r++) { xr[r] = _mm512_set1_ps(p->x[k + r]); }
      /* block of group g: g * per_group / groups */
      int64_t b = g0 / l.groups * l.per_group, left = l.groups - g0 % l.groups;
      for (int64_t c = c0; c < cfull; c += 128) {
        __m512i v[4];
        __m512 coef[4];
        UNROLL for (int r = 0; r < S8R; r++) {
          prefetch(row + r * rb + c / 2 + next_row(rb, ncols));
          v[r] = _mm512_loadu_si512(row + r * rb + c / 2);
          coef[r] = _mm512_mul_ps(xr[r], s8_scales(w, l, f32, fm, k + r, b));
        }
        nf4_s8_groupR(S8R, v, coef, cb, part + c);
        if (--left == 0) {
          b += l.per_group;
          left = l.groups;
        }
      }
      if (last) {
        /* last group: bytes past the row are not read; their lanes land in the padding */
        for (int r = 0; r < S8R; r++) {
          nf4_s8_group(_mm512_maskz_loadu_epi8(tm, row + r * rb + full / 2),
                       _mm512_mul_ps(_mm512_set1_ps(p->x[k + r]), nf4_lane_scales(w, l, k + r, b)), cb, part + full);
        }
      }
    }
    for (; k < s1; k++) { /* a last odd row */
      const uint8_t *row = w->packed + k * rb;
      const __m512 xk = _mm512_set1_ps(p->x[k]);
      int64_t b = g0 / l.groups * l.per_group, left = l.groups - g0 % l.groups;
      for (int64_t c = c0; c < cfull; c += 128) {
        nf4_s8_group(_mm512_loadu_si512(row + c / 2), _mm512_mul_ps(xk, s8_scales(w, l, f32, fm, k, b)), cb, part + c);
        if (--left == 0) {
          b += l.per_group;
          left = l.groups;
        }
      }
      if (last) {
        nf4_s8_group(_mm512_maskz_loadu_epi8(tm, row + full / 2), _mm512_mul_ps(xk, nf4_lane_scales(w, l, k, b)), cb,
                     part + full);
      }
    }
  }
}

/* ================= fused NF4, blocks contracted (x @ W^T) ================= */

/* Stores the MR x R sums of acc as y[i][n0+r]. */
I512 void store_sums(const int MR, const int R, __m512 acc[4][8], float *y, int64_t ldy) {
  UNROLL for (int i = 0; i < MR; i++) {
    UNROLL for (int r0 = 0; r0 < R; r0 += 4) {
      if (R - r0 >= 4) {
        _mm_storeu_ps(y + i * ldy + r0, sum4(acc[i][r0], acc[i][r0 + 1], acc[i][r0 + 2], acc[i][r0 + 3]));
      } else {
        UNROLL for (int r = r0; r < R; r++) { y[i * ldy + r] = _mm512_reduce_add_ps(acc[i][r]); }
      }
    }
  }
}

/* NK_PASSES runs output columns [n0, n1) of an nk product through ROWS(MR, R, p, n, i0, ...), the
 * arguments after n1 passed on as its last: one activation row takes R1 columns per pass; more
 * take two columns per pass for m-tiles of up to 4; the columns left over go one at a time. */
#define NK_PASSES(ROWS, R1, p, n0, n1, ...)                                                                            \
  do {                                                                                                                 \
    const int64_t M_ = (p)->m;                                                                                         \
    int64_t n_ = (n0);                                                                                                 \
    if (M_ == 1) {                                                                                                     \
      for (; n_ + (R1) <= (n1); n_ += (R1)) {                                                                          \
        ROWS(1, R1, p, n_, 0, ##__VA_ARGS__);                                                                          \
      }                                                                                                                \
    } else {                                                                                                           \
      for (; n_ + 2 <= (n1); n_ += 2) {                                                                                \
        for (int64_t i0 = 0; i0 < M_; i0 += 4) {                                                                       \
          QK_SWITCH4(QK_MIN(4, M_ - i0), ROWS, 2, p, n_, i0, ##__VA_ARGS__)                                            \
        }                                                                                                              \
      }                                                                                                                \
    }                                                                                                                  \
    for (; n_ < (n1); n_++) {                                                                                          \
      for (int64_t i0 = 0; i0 < M_; i0 += 4) {                                                                         \
        QK_SWITCH4(QK_MIN(4, M_ - i0), ROWS, 1, p, n_, i0, ##__VA_ARGS__)                                              \
      }                                                                                                                \
    }                                                                                                                  \
  } while (0)

/* R output columns from n0, all of k; x in pair order (ldx a multiple of 32, zero past k). The
 * last 32-element group masks the lanes past k (me, mo: even and odd lanes). Even and odd lanes
 * accumulate separately: two dependency chains per output even when R = 1. */
I512 void nf4_nk_rows(const int MR, const int R, const qk_prod *p, int64_t n0, int64_t i0, __mmask16 me, __mmask16 mo) {
  const qk_nf4w *w = &p->nf4;
  const int64_t G = (p->k + 31) / 32, gpb = w->bs / 32, ldx = p->ldx;
  const float *x = p->x + i0 * ldx;
  const uint8_t *rows[8];
  __m512 acc[4][8], aco[4][8], T[8];
  UNROLL for (int r = 0; r < R; r++) {
    rows[r] = w->packed + (n0 + r) * w->row_bytes;
    UNROLL for (int i = 0; i < MR; i++) {
      acc[i][r] = _mm512_setzero_ps();
      aco[i][r] = _mm512_setzero_ps();
    }
  }
  int64_t left = 0, blk = 0;
  for (int64_t g = 0; g < G; g++) {
    if (left == 0) {
      UNROLL for (int r = 0; r < R; r++) { T[r] = nf4_table(w, n0 + r, blk); }
      blk++;
      left = gpb;
    }
    left--;
    const __mmask16 ke = g == G - 1 ? me : (__mmask16)0xffff, ko = g == G - 1 ? mo : (__mmask16)0xffff;
    __m512 xe[4], xo[4];
    UNROLL for (int i = 0; i < MR; i++) {
      xe[i] = _mm512_loadu_ps(x + i * ldx + 32 * g);
      xo[i] = _mm512_loadu_ps(x + i * ldx + 32 * g + 16);
    }
    UNROLL for (int r = 0; r < R; r++) {
      const __m512i v = load_u8x16(rows[r] + 16 * g);
      const __m512 we = _mm512_maskz_permutexvar_ps(ke, _mm512_srli_epi32(v, 4), T[r]);
      const __m512 wo = _mm512_maskz_permutexvar_ps(ko, v, T[r]);
      UNROLL for (int i = 0; i < MR; i++) {
        acc[i][r] = _mm512_fmadd_ps(xe[i], we, acc[i][r]);
        aco[i][r] = _mm512_fmadd_ps(xo[i], wo, aco[i][r]);
      }
    }
  }
  UNROLL for (int i = 0; i < MR; i++) {
    UNROLL for (int r = 0; r < R; r++) { acc[i][r] = _mm512_add_ps(acc[i][r], aco[i][r]); }
  }
  store_sums(MR, R, acc, p->y + i0 * p->n + n0, p->n);
}

static T512 void nf4_nk(const qk_prod *p, int64_t n0, int64_t n1, void *scratch) {
  (void)scratch;
  /* valid lanes of the last group: element 32(G-1) + 2j (even) and + 2j+1 (odd) below k */
  const int64_t rem = p->k - 32 * ((p->k + 31) / 32 - 1); /* 1..32 */
  const __mmask16 me = tail16((rem + 1) / 2), mo = tail16(rem / 2);
  NK_PASSES(nf4_nk_rows, QK_NKR1, p, n0, n1, me, mo);
}

/* nf4_m1_dot writes to *t0 and *t1 the two halves of a 128-column group's codebook values (the
 * 32-bit words of v, nibble s of each) times x, summed in two chains. */
I512 void nf4_m1_dot(__m512i v, const float *x, __m512 cb, __m512 *t0, __m512 *t1) {
  __m512 a = _mm512_mul_ps(_mm512_loadu_ps(x), _mm512_permutexvar_ps(v, cb));
  __m512 c = _mm512_mul_ps(_mm512_loadu_ps(x + 16), _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), cb));
  UNROLL for (int s = 2; s < 8; s += 2) {
    a = _mm512_fmadd_ps(_mm512_loadu_ps(x + 16 * s), _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4 * s), cb), a);
    c = _mm512_fmadd_ps(_mm512_loadu_ps(x + 16 * s + 16), _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4 * s + 4), cb),
                        c);
  }
  *t0 = a;
  *t1 = c;
}

/* m = 1, output columns [n0, n1) one stored row at a time; x in QK_ORDER_STRIDE8 (zero past k).
 * Per 128-element group: the unscaled codebook values of the eight nibble vectors (see
 * nf4_kn_m1) times x, summed in two chains, then times the per-lane block scales. Lanes wholly
 * past k are masked out of the scales. */
static T512 void nf4_nk_m1(const qk_prod *p, int64_t n0, int64_t n1, void *scratch) {
  (void)scratch;
  const qk_nf4w *w = &p->nf4;
  const __m512 cb = _mm512_loadu_ps(qk_nf4_codebook);
  const lane_map l = nf4_lane_map(w->bs);
  const int64_t K = p->k, rb = w->row_bytes, G = (K + 127) / 128;
  const __m512i lane8 = _mm512_slli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3);
  /* the last group: bytes past the row unread, lanes at or past k masked */
  const int64_t last = 128 * (G - 1);
  const __mmask64 lastb = QK_MIN(64, rb - last / 2) >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (rb - last / 2)) - 1;
  const __mmask16 lastl = _mm512_cmplt_epi32_mask(lane8, _mm512_set1_epi32((int)(K - last)));
  /* float32 scales of blocks smaller than a group: a group before the last holds per_group whole
   * blocks, their scales one masked load (nf4_lane_scales' values without its per-group work) */
  const int f32_blocks = w->absmax_dtype == QK_F32 && l.per_group > 1;
  const __mmask16 group_blocks = (__mmask16)((1u << QK_MIN(l.per_group, 16)) - 1);
  const int64_t ahead = QK_PFD / rb + 1;
  for (int64_t n = n0; n < n1; n++) {
    const uint8_t *row = w->packed + n * rb;
    prefetch_nf4_scales(p, n + ahead, 0, w->nb);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps(), t0, t1;
    int64_t b = 0, left = l.groups, g = 0;
    if (f32_blocks) {
      const float *absmax = (const float *)w->absmax + n * w->nb;
      for (; g < G - 1; g++, b += l.per_group) {
        prefetch(row + 64 * g);
        nf4_m1_dot(_mm512_loadu_si512(row + 64 * g), p->x + 128 * g, cb, &t0, &t1);
        const __m512 sc = _mm512_permutexvar_ps(l.lane_block, _mm512_maskz_loadu_ps(group_blocks, absmax + b));
        acc0 = _mm512_fmadd_ps(sc, t0, acc0);
        acc1 = _mm512_fmadd_ps(sc, t1, acc1);
      }
    }
    for (; g < G; g++) {
      const int64_t c = 128 * g;
      const int tail = g == G - 1;
      const __m512i v = tail ? _mm512_maskz_loadu_epi8(lastb, row + c / 2) : _mm512_loadu_si512(row + c / 2);
      prefetch(row + c / 2);
      nf4_m1_dot(v, p->x + c, cb, &t0, &t1);
      __m512 sc = nf4_lane_scales(w, l, n, b);
      if (tail) {
        sc = _mm512_maskz_mov_ps(lastl, sc);
      }
      if (--left == 0) {
        b += l.per_group;
        left = l.groups;
      }
      acc0 = _mm512_fmadd_ps(sc, t0, acc0);
      acc1 = _mm512_fmadd_ps(sc, t1, acc1);
    }
    p->y[n] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  }
}

/* ================= fused int8 ================= */

/* R rows of w (k x n) from k0, columns [c0, c1), into part (natural order, ldp a multiple of 16). */
I512 void i8_kn_rows(const int MR, const int R, const qk_prod *p, int64_t k0, int64_t i0, int64_t c0, int64_t c1,
                     float *part) {
  const int64_t N = p->n, ldp = p->ldp;
  const int8_t *rows[8];
  float xs[8][8];
  part += i0 * ldp;
  UNROLL for (int r = 0; r < R; r++) {
    rows[r] = (const int8_t *)p->w + (k0 + r) * N;
    UNROLL for (int i = 0; i < MR; i++) { xs[i][r] = p->x[(i0 + i) * p->ldx + k0 + r]; }
  }
  int64_t c = c0;
  for (; c + 32 <= c1; c += 32) {
    if (MR == 1 && ((c - c0) & 63) == 0) {
      /* the next pass reads the same columns of the R rows that follow */
      UNROLL for (int r = 0; r < R; r++) { _mm_prefetch((const char *)(rows[r] + R * N + c), _MM_HINT_T0); }
    }
    __m512 a0[8], a1[8];
    UNROLL for (int i = 0; i < MR; i++) {
      a0[i] = _mm512_loadu_ps(part + i * ldp + c);
      a1[i] = _mm512_loadu_ps(part + i * ldp + c + 16);
    }
    UNROLL for (int r = 0; r < R; r++) {
      const __m512 q0 = load_i8x16(rows[r] + c), q1 = load_i8x16(rows[r] + c + 16);
      UNROLL for (int i = 0; i < MR; i++) {
        const __m512 xv = _mm512_set1_ps(xs[i][r]);
        a0[i] = _mm512_fmadd_ps(xv, q0, a0[i]);
        a1[i] = _mm512_fmadd_ps(xv, q1, a1[i]);
      }
    }
    UNROLL for (int i = 0; i < MR; i++) {
      _mm512_storeu_ps(part + i * ldp + c, a0[i]);
      _mm512_storeu_ps(part + i * ldp + c + 16, a1[i]);
    }
  }
  for (; c < c1; c += 16) {
    const __mmask16 m = tail16(c1 - c);
    __m512 a0[8];
    UNROLL for (int i = 0; i < MR; i++) { a0[i] = _mm512_loadu_ps(part + i * ldp + c); }
    UNROLL for (int r = 0; r < R; r++) {
      const __m512 q0 = load_i8x16_mask(rows[r] + c, m);
      UNROLL for (int i = 0; i < MR; i++) { a0[i] = _mm512_fmadd_ps(_mm512_set1_ps(xs[i][r]), q0, a0[i]); }
    }
    UNROLL for (int i = 0; i < MR; i++) { _mm512_storeu_ps(part + i * ldp + c, a0[i]); }
  }
}

static T512 void i8_kn(const qk_prod *p, int64_t s0, int64_t s1, int64_t c0, int64_t c1, float *part, void *scratch) {
  (void)scratch;
  KN_PASSES(i8_kn_rows, QK_I8R1, QK_I8R4, p, s0, s1, c0, c1, part);
}

/* R rows of w (n x k) from n0: y[i][n0+r] = sum_l x[i][l] * w[n0+r][l]. Two accumulators per
 * output (alternate 16-element groups) keep two dependency chains even for R = 1. */
I512 void i8_nk_rows(const int MR, const int R, const qk_prod *p, int64_t n0, int64_t i0) {
  const int64_t K = p->k, ldx = p->ldx;
  const float *x = p->x + i0 * ldx;
  const int8_t *rows[8];
  __m512 acc[4][8], acb[4][8];
  UNROLL for (int r = 0; r < R; r++) {
    rows[r] = (const int8_t *)p->w + (n0 + r) * K;
    UNROLL for (int i = 0; i < MR; i++) {
      acc[i][r] = _mm512_setzero_ps();
      acb[i][r] = _mm512_setzero_ps();
    }
  }
  int64_t l = 0;
  for (; l + 32 <= K; l += 32) {
    __m512 xa[4], xb[4];
    UNROLL for (int i = 0; i < MR; i++) {
      xa[i] = _mm512_loadu_ps(x + i * ldx + l);
      xb[i] = _mm512_loadu_ps(x + i * ldx + l + 16);
    }
    if (MR == 1) {
      /* the R rows are consecutive: ask for the next group's bytes at the pace this group is read */
      UNROLL for (int o = 0; o < 32 * R; o += 64) { _mm_prefetch((const char *)rows[0] + R * K + l * R + o, _MM_HINT_T0); }
    }
    UNROLL for (int r = 0; r < R; r++) {
      const __m512 qa = load_i8x16(rows[r] + l), qb = load_i8x16(rows[r] + l + 16);
      UNROLL for (int i = 0; i < MR; i++) {
        acc[i][r] = _mm512_fmadd_ps(xa[i], qa, acc[i][r]);
        acb[i][r] = _mm512_fmadd_ps(xb[i], qb, acb[i][r]);
      }
    }
  }
  for (; l < K; l += 16) {
    const __mmask16 m = tail16(K - l);
    __m512 xv[4];
    UNROLL for (int i = 0; i < MR; i++) { xv[i] = _mm512_maskz_loadu_ps(m, x + i * ldx + l); }
    UNROLL for (int r = 0; r < R; r++) {
      const __m512 q = load_i8x16_mask(rows[r] + l, m);
      UNROLL for (int i = 0; i < MR; i++) { acc[i][r] = _mm512_fmadd_ps(xv[i], q, acc[i][r]); }
    }
  }
  UNROLL for (int i = 0; i < MR; i++) {
    UNROLL for (int r = 0; r < R; r++) { acc[i][r] = _mm512_add_ps(acc[i][r], acb[i][r]); }
  }
  store_sums(MR, R, acc, p->y + i0 * p->n + n0, p->n);
}

static T512 void i8_nk(const qk_prod *p, int64_t n0, int64_t n1, void *scratch) {
  (void)scratch;
  NK_PASSES(i8_nk_rows, QK_I8NKR1, p, n0, n1);
}

/* ================= 2-bit and 1-bit by table lookup ================= */

/* The most activation rows the lookup kernels serve: their tables grow with m. From 129 rows the
 * 2-bit product runs faster on the generic driver (its weight decoded to float32 tiles for the
 * FMA micro-kernel): at 256 rows 1.0-1.7x on Llama-7B's, Qwen2.5-0.5B's and SmolLM2's shapes,
 * where the 1-bit lookups, two rows of eight signs a byte, stay ahead (docs/performance.md). */
#define LUT_MAX_M 512
#define LUT_MAX_M_2BIT 128

/* Stored rows processed together between loads and stores of the partial sums. */
#ifndef LUT_PG
#define LUT_PG 8
#endif

/* Columns [c0, c1) of stored rows [pg, pe) for activation rows i0..i0+MR: acc += T_lo[low nibble]
 * + T_hi[high nibble]. tab points at the tables of (pg, i0); tables of one stored row are M*32
 * floats apart. */
I512 void lut_tile(const int MR, const qk_prod *p, int64_t pg, int64_t pe, int64_t c0, int64_t c1, const float *tab,
                   float *part) {
  const int V = MR <= 2 ? 4 : 2; /* vectors of columns a pass: up to 16 accumulators */
  const int64_t N = p->n, ldp = p->ldp, tstride = p->m * 32;
  int64_t c = c0;
  for (; c + 16 * V <= c1; c += 16 * V) {
    __m512 acc[8][4];
    UNROLL for (int i = 0; i < MR; i++) {
      UNROLL for (int v = 0; v < V; v++) { acc[i][v] = _mm512_loadu_ps(part + i * ldp + c + 16 * v); }
    }
    const float *t = tab;
    for (int64_t pp = pg; pp < pe; pp++, t += tstride) {
      const uint8_t *src = p->w + pp * N + c;
      __m512i lo[4], hi[4];
      UNROLL for (int v = 0; v < V; v++) {
        lo[v] = load_u8x16(src + 16 * v);
        hi[v] = _mm512_srli_epi32(lo[v], 4);
      }
      UNROLL for (int i = 0; i < MR; i++) {
        const __m512 tl = _mm512_load_ps(t + 32 * i), th = _mm512_load_ps(t + 32 * i + 16);
        UNROLL for (int v = 0; v < V; v++) {
          acc[i][v] = _mm512_add_ps(acc[i][v], _mm512_permutexvar_ps(lo[v], tl));
          acc[i][v] = _mm512_add_ps(acc[i][v], _mm512_permutexvar_ps(hi[v], th));
        }
      }
    }
    UNROLL for (int i = 0; i < MR; i++) {
      UNROLL for (int v = 0; v < V; v++) { _mm512_storeu_ps(part + i * ldp + c + 16 * v, acc[i][v]); }
    }
  }
  /* remaining columns one vector at a time; lanes past n read no bytes and land in the partial's
   * padding, which is never output */
  for (; c < c1; c += 16) {
    const __mmask16 m = tail16(c1 - c);
    __m512 acc[8];
    UNROLL for (int i = 0; i < MR; i++) { acc[i] = _mm512_loadu_ps(part + i * ldp + c); }
    const float *t = tab;
    for (int64_t pp = pg; pp < pe; pp++, t += tstride) {
      const __m512i lo = load_u8x16_mask(p->w + pp * N + c, m), hi = _mm512_srli_epi32(lo, 4);
      UNROLL for (int i = 0; i < MR; i++) {
        acc[i] = _mm512_add_ps(acc[i], _mm512_permutexvar_ps(lo, _mm512_load_ps(t + 32 * i)));
        acc[i] = _mm512_add_ps(acc[i], _mm512_permutexvar_ps(hi, _mm512_load_ps(t + 32 * i + 16)));
      }
    }
    UNROLL for (int i = 0; i < MR; i++) { _mm512_storeu_ps(part + i * ldp + c, acc[i]); }
  }
}

/* Builds the two tables of every activation row and stored row in [s0, s1) at tab. Products with
 * the -1/0/+1/+2 factors are exact and a table entry is their sum, so an Inf activation gives NaN
 * where the dense weight is 0, as the dense product does. */
I512 void lut_build(const qk_prod *p, int64_t s0, int64_t s1, float *tab) {
  const int64_t M = p->m, S = p->srows, ldx = p->ldx;
  const __m512i idx = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i three = _mm512_set1_epi32(3), one = _mm512_set1_epi32(1);
  float *t = tab;
  if (p->fmt == QK_FMT_TB2) {
    /* entry e: x[a] * ((e & 3) - 1) + x[b] * ((e >> 2) - 1) */
    const __m512 c0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(idx, three), one));
    const __m512 c1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(idx, 2), one));
    for (int64_t pp = s0; pp < s1; pp++) {
      for (int64_t i = 0; i < M; i++, t += 32) {
        const float *x = p->x + i * ldx + pp;
        _mm512_store_ps(t, _mm512_fmadd_ps(_mm512_set1_ps(x[S]), c1, _mm512_mul_ps(_mm512_set1_ps(x[0]), c0)));
        _mm512_store_ps(t + 16,
                        _mm512_fmadd_ps(_mm512_set1_ps(x[3 * S]), c1, _mm512_mul_ps(_mm512_set1_ps(x[2 * S]), c0)));
      }
    }
  } else {
    /* entry e: sum_g x[g] * (2 * bit g of e - 1) */
    __m512 sg[4];
    for (int g = 0; g < 4; g++) {
      const __m512i bit = _mm512_and_si512(_mm512_srli_epi32(idx, (unsigned)g), one);
      sg[g] = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_add_epi32(bit, bit), one));
    }
    for (int64_t pp = s0; pp < s1; pp++) {
      for (int64_t i = 0; i < M; i++, t += 32) {
        const float *x = p->x + i * ldx + pp;
        for (int h = 0; h < 2; h++) {
          const float *xh = x + 4 * h * S;
          __m512 s = _mm512_mul_ps(_mm512_set1_ps(xh[0]), sg[0]);
          s = _mm512_fmadd_ps(_mm512_set1_ps(xh[S]), sg[1], s);
          s = _mm512_fmadd_ps(_mm512_set1_ps(xh[2 * S]), sg[2], s);
          s = _mm512_fmadd_ps(_mm512_set1_ps(xh[3 * S]), sg[3], s);
          _mm512_store_ps(t + 16 * h, s);
        }
      }
    }
  }
}

static T512 void tb_lut(const qk_prod *p, int64_t s0, int64_t s1, int64_t c0, int64_t c1, float *part,
                        void *scratch) {
  float *tab = (float *)scratch; /* (s1-s0) * m * 32 floats: the planner keeps it within the scratch */
  const int64_t M = p->m;
  lut_build(p, s0, s1, tab);
  for (int64_t pg = s0; pg < s1; pg += LUT_PG) {
    const int64_t pe = QK_MIN(pg + LUT_PG, s1);
    for (int64_t i0 = 0; i0 < M; i0 += 8) {
      const float *t = tab + ((pg - s0) * M + i0) * 32;
      float *pt = part + i0 * p->ldp;
      QK_SWITCH8(QK_MIN(8, M - i0), lut_tile, p, pg, pe, c0, c1, t, pt)
    }
  }
}

/* m = 1, one stored row at a time, into part in QK_ORDER_STRIDE4: 64 bytes read as sixteen 32-bit
 * words; byte b of word j is column 4j+b, and its nibbles, shifted down by 8b and 8b+4, index the
 * low and high tables directly (no widening shuffle). */
static T512 void tb_lut_m1(const qk_prod *p, int64_t s0, int64_t s1, int64_t cs, int64_t ce, float *part,
                           void *scratch) {
  float *tab = (float *)scratch;
  lut_build(p, s0, s1, tab);
  const int64_t N = p->n, full = N / 64 * 64;
  const __mmask64 tm = ((__mmask64)1 << (N - full)) - 1; /* bytes of the last group */
  for (int64_t c0 = cs; c0 < ce; c0 += M1_PANEL) {
    const int64_t cend = QK_MIN(c0 + M1_PANEL, ce);
    for (int64_t pp = s0; pp < s1; pp += LUT_R1) {
      /* LUT_R1 rows per pass (a last row alone): one load and store of the partial sums per pass */
      const int R = (int)QK_MIN(LUT_R1, s1 - pp);
      const uint8_t *row = p->w + pp * N;
      __m512 tl[4], th[4];
      for (int r = 0; r < R; r++) {
        tl[r] = _mm512_load_ps(tab + (pp - s0 + r) * 32);
        th[r] = _mm512_load_ps(tab + (pp - s0 + r) * 32 + 16);
      }
      for (int64_t c = c0; c < cend; c += 64) {
        float *acc = part + c;
        __m512 a[4];
        UNROLL for (int b = 0; b < 4; b++) { a[b] = _mm512_loadu_ps(acc + 16 * b); }
        for (int r = 0; r < R; r++) {
          prefetch(row + r * N + c + next_row(N, N));
          const __m512i v = c < full ? _mm512_loadu_si512(row + r * N + c) : _mm512_maskz_loadu_epi8(tm, row + r * N + c);
          UNROLL for (int b = 0; b < 4; b++) {
            const __m512i lo = b == 0 ? v : _mm512_srli_epi32(v, (unsigned)(8 * b));
            const __m512i hi = _mm512_srli_epi32(v, (unsigned)(8 * b + 4));
            a[b] = _mm512_add_ps(a[b], _mm512_permutexvar_ps(lo, tl[r]));
            a[b] = _mm512_add_ps(a[b], _mm512_permutexvar_ps(hi, th[r]));
          }
        }
        UNROLL for (int b = 0; b < 4; b++) { _mm512_storeu_ps(acc + 16 * b, a[b]); }
      }
    }
  }
}

/* ================= ggml's block types: qk_ggml_vec.h over 16 lanes ================= */

I512 float hsum16(__m512 v) { return _mm512_reduce_add_ps(v); }

#define GV_F __m512
#define GV_I __m512i
#define GV_N 16
#define GV_INLINE I512
#define GV_FN T512
#define gv_zero _mm512_setzero_ps
#define gv_set1 _mm512_set1_ps
#define gv_bcast(p) _mm512_set1_ps(*(p))
#define gv_loadu _mm512_loadu_ps
#define gv_storeu _mm512_storeu_ps
#define gv_fma _mm512_fmadd_ps
#define gv_mul _mm512_mul_ps
#define gv_add _mm512_add_ps
#define gv_cvt _mm512_cvtepi32_ps
#define gv_hsum hsum16
#define gv_xload(p) _mm_loadu_si128((const __m128i *)(p))
#define gv_u8(p) _mm512_cvtepu8_epi32(gv_xload(p))
#define gv_s8(p) _mm512_cvtepi8_epi32(gv_xload(p))
#define gv_s8x _mm512_cvtepi8_epi32
#define gv_iset1 _mm512_set1_epi32
#define gv_iloadu(p) _mm512_loadu_si512((const void *)(p))
#define gv_and _mm512_and_si512
#define gv_or _mm512_or_si512
#define gv_iadd _mm512_add_epi32
#define gv_isub _mm512_sub_epi32
#define gv_srli _mm512_srli_epi32
#define gv_slli _mm512_slli_epi32
#define gv_srlv _mm512_srlv_epi32
#define GV_LUT16
#define gv_lut16(i, t) _mm512_permutexvar_ps(i, t)
#define GV_MAX_M 8
#include "qk_ggml_vec.h"

/* Block sizes the NF4 kernels walk: the single-row kernels a multiple of 8 dividing 128, or a
 * multiple of 128 (one block per lane group or groups per block); the others whole 32-element
 * groups. */
static int nf4_bs_m1(const qk_prod *p) {
  const int64_t bs = p->nf4.bs;
  return (bs % 8 == 0 && 128 % bs == 0) || bs % 128 == 0;
}

/* The row limits: up to where each beats the tiled drivers (measured on Zen 4). */
const qk_ops qk_ops_avx512 = {
    .isa = QK_ISA_AVX512,
    .mk_kn = mk_kn,
    .mk_nk = mk_nk,
    .transpose = transpose,
    .quantize_x8 = gv_quantize_x8,
    .fmt =
        {
            [QK_FMT_F32] = {.tile = qk_f32_tile},
            [QK_FMT_NF4] = {.tile = nf4_tile,
                            .kn = {{.kn = nf4_kn_m1, .max_m = 1, .cap_m = 1, .order = QK_ORDER_STRIDE8,
                                    .takes = nf4_bs_m1},
                                   {.kn = nf4_kn, .max_m = 4, .cap_m = INT64_MAX, .order = QK_ORDER_PAIRS,
                                    .takes = qk_nf4_bs32}},
                            .nk = {{.nk = nf4_nk_m1, .max_m = 1, .cap_m = 1, .order = QK_ORDER_STRIDE8,
                                    .takes = nf4_bs_m1},
                                   {.nk = nf4_nk, .max_m = 16, .cap_m = INT64_MAX, .order = QK_ORDER_PAIRS,
                                    .takes = qk_nf4_bs32}}},
            [QK_FMT_I8] = {.tile = i8_tile,
                           .kn = {{.kn = i8_kn, .max_m = 16, .cap_m = INT64_MAX}},
                           .nk = {{.nk = i8_nk, .max_m = 16, .cap_m = INT64_MAX}}},
            [QK_FMT_TB2] = {.tile = tb_tile,
                            .kn = {{.kn = tb_lut_m1, .max_m = 1, .cap_m = 1, .order = QK_ORDER_STRIDE4},
                                   {.kn = tb_lut, .max_m = LUT_MAX_M_2BIT, .cap_m = LUT_MAX_M}}},
            [QK_FMT_TB1] = {.tile = tb_tile,
                            .kn = {{.kn = tb_lut_m1, .max_m = 1, .cap_m = 1, .order = QK_ORDER_STRIDE4},
                                   {.kn = tb_lut, .max_m = LUT_MAX_M, .cap_m = LUT_MAX_M}}},
            GV_GGML_ROWS,
        },
};

#endif /* QK_X86 */
