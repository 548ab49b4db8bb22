/* qk_simde.h: the AVX-512 intrinsics qk_avx512.c uses that SIMDe 0.8.2 lacks, written over SIMDe's
 * types, for the QK_SIMDE test build only (the AVX-512 path tested on CPUs without AVX-512). Masked
 * loads read no byte whose mask bit is clear and masked stores write none, as the hardware's (SIMDe's
 * own 512-bit masked store writes zeros in the cleared lanes: the next row's first elements). */
#ifndef QK_SIMDE_H
#define QK_SIMDE_H

#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>

typedef simde__mmask8 __mmask8;

#ifndef _MM_FROUND_NO_EXC
#define _MM_FROUND_NO_EXC SIMDE_MM_FROUND_NO_EXC
#endif

/* qk_simde_widen8 widens the 16 bytes of a, signed or not, to 32-bit lanes. */
static inline simde__m512i qk_simde_widen8(simde__m128i a, int is_signed) {
  uint8_t b[16];
  int32_t r[16];
  memcpy(b, &a, 16);
  for (int i = 0; i < 16; i++) {
    r[i] = is_signed ? (int8_t)b[i] : b[i];
  }
  return simde_mm512_loadu_si512(r);
}
static inline simde__m512i qk_simde_cvtepu8_epi32(simde__m128i a) { return qk_simde_widen8(a, 0); }
static inline simde__m512i qk_simde_cvtepi8_epi32(simde__m128i a) { return qk_simde_widen8(a, 1); }
#define _mm512_cvtepu8_epi32 qk_simde_cvtepu8_epi32
#define _mm512_cvtepi8_epi32 qk_simde_cvtepi8_epi32

/* qk_simde_maskz copies the n lanes of size bytes at p whose bit of k is set into out, zeroing the
 * others: a masked load's lanes. */
static inline void qk_simde_maskz(uint64_t k, const void *p, void *out, int n, size_t size) {
  memset(out, 0, (size_t)n * size);
  for (int i = 0; i < n; i++) {
    if ((k >> i) & 1) {
      memcpy((char *)out + i * size, (const char *)p + i * size, size);
    }
  }
}

static inline simde__m128i qk_simde_mm_maskz_loadu_epi8(simde__mmask16 k, const void *p) {
  uint8_t b[16];
  qk_simde_maskz(k, p, b, 16, 1);
  return simde_mm_loadu_si128(b);
}
#define _mm_maskz_loadu_epi8 qk_simde_mm_maskz_loadu_epi8

static inline simde__m512i qk_simde_mm512_maskz_loadu_epi8(simde__mmask64 k, const void *p) {
  uint8_t b[64];
  qk_simde_maskz(k, p, b, 64, 1);
  return simde_mm512_loadu_si512(b);
}
#define _mm512_maskz_loadu_epi8 qk_simde_mm512_maskz_loadu_epi8

static inline simde__m128 qk_simde_mm_maskz_loadu_ps(simde__mmask8 k, const float *p) {
  float f[4];
  qk_simde_maskz(k, p, f, 4, sizeof(float));
  return simde_mm_loadu_ps(f);
}
#define _mm_maskz_loadu_ps qk_simde_mm_maskz_loadu_ps

/* qk_simde_mask_store writes the lanes of f whose bit of k is set, n lanes, to p. */
static inline void qk_simde_mask_store(uint32_t k, const float *f, float *p, int n) {
  for (int i = 0; i < n; i++) {
    if ((k >> i) & 1) {
      p[i] = f[i];
    }
  }
}

static inline void qk_simde_mm_mask_storeu_ps(float *p, simde__mmask8 k, simde__m128 a) {
  float f[4];
  simde_mm_storeu_ps(f, a);
  qk_simde_mask_store(k, f, p, 4);
}
#define _mm_mask_storeu_ps qk_simde_mm_mask_storeu_ps

static inline void qk_simde_mm512_mask_storeu_ps(float *p, simde__mmask16 k, simde__m512 a) {
  float f[16];
  simde_mm512_storeu_ps(f, a);
  qk_simde_mask_store(k, f, p, 16);
}
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps qk_simde_mm512_mask_storeu_ps

/* The halving order of GCC's _mm512_reduce_add_ps. */
static inline float qk_simde_mm512_reduce_add_ps(simde__m512 a) {
  float f[16];
  simde_mm512_storeu_ps(f, a);
  for (int w = 8; w >= 1; w /= 2) {
    for (int i = 0; i < w; i++) {
      f[i] += f[i + w];
    }
  }
  return f[0];
}
#define _mm512_reduce_add_ps qk_simde_mm512_reduce_add_ps

#define _mm512_cmplt_epi32_mask(a, b) simde_mm512_cmpgt_epi32_mask(b, a)

#endif /* QK_SIMDE_H */
