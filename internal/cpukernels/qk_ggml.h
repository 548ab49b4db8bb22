/* qk_ggml.h: ggml's block types as rows of the kernel table. Not part of the public API.
 *
 * A weight of n rows of k elements is stored as GGUF stores it: row j is k/bs blocks of `bytes`
 * bytes (ggml-common.h's layouts; package gguf's blocks.go spells out where each element's bits
 * lie), and the products are x @ W^T (the nk driver, one stored row per output). Every decode
 * gives the values of ggml's dequantize_row_* bit for bit: each value is formed with ggml's
 * operations in ggml's order, every product among them is exact in float32 (a half scale has 11
 * significant bits and the integers it meets at most 12 bits together), so the one rounding is
 * that of ggml's final addition (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K), and a fused multiply-add gives
 * the same bits. The helpers below compute the per-block factors every ISA shares; the decodes
 * use them as `q * f + g` (g = -min, or the offset of Q4_1 and Q5_1) or `q * f`. */
#ifndef QK_GGML_H
#define QK_GGML_H

#include "qk_internal.h"

/* One block type: ggml's type id, elements and bytes per block, name. */
typedef struct {
  int type, bs, bytes;
  const char *name;
} qk_ggml_block;

#define QK_NGGML (QK_FMT_IQ4_NL - QK_FMT_Q4_0 + 1)

/* QK_BS_t and QK_BB_t are the elements and the bytes of a block of type t (named as the kernels'
 * functions are), as ggml-common.h lays it out: the table below and the vector kernels'
 * instantiations (qk_ggml_vec.h) read them. */
#define QK_BS_q4_0 32
#define QK_BB_q4_0 18
#define QK_BS_q4_1 32
#define QK_BB_q4_1 20
#define QK_BS_q5_0 32
#define QK_BB_q5_0 22
#define QK_BS_q5_1 32
#define QK_BB_q5_1 24
#define QK_BS_q8_0 32
#define QK_BB_q8_0 34
#define QK_BS_q2_k 256
#define QK_BB_q2_k 84
#define QK_BS_q3_k 256
#define QK_BB_q3_k 110
#define QK_BS_q4_k 256
#define QK_BB_q4_k 144
#define QK_BS_q5_k 256
#define QK_BB_q5_k 176
#define QK_BS_q6_k 256
#define QK_BB_q6_k 210
#define QK_BS_iq4_nl 32
#define QK_BB_iq4_nl 18

/* The block types by format: qk_ggml_blocks[fmt - QK_FMT_Q4_0] (qk_ggml.c). */
extern const qk_ggml_block qk_ggml_blocks[QK_NGGML];

QK_INLINE const qk_ggml_block *qk_ggml_of(int fmt) { return &qk_ggml_blocks[fmt - QK_FMT_Q4_0]; }

/* qk_ggml_fmt returns the format of ggml type id type, or -1 if it is not a block type here. */
int qk_ggml_fmt(int type);


/* The tile decode of every block type, plain C (columns c0 and cnt whole blocks). */
void qk_ggml_tile(const qk_prod *p, int64_t r0, int64_t nr, int64_t c0, int64_t cnt, float *out, int64_t ldo);

/* The GGML rows of a table whose every type decodes with qk_ggml_tile. */
#define QK_GGML_PLAIN_ROWS                                                                                             \
  [QK_FMT_Q4_0] = {.tile = qk_ggml_tile}, [QK_FMT_Q4_1] = {.tile = qk_ggml_tile},                                     \
  [QK_FMT_Q5_0] = {.tile = qk_ggml_tile}, [QK_FMT_Q5_1] = {.tile = qk_ggml_tile},                                     \
  [QK_FMT_Q8_0] = {.tile = qk_ggml_tile}, [QK_FMT_Q2_K] = {.tile = qk_ggml_tile},                                     \
  [QK_FMT_Q3_K] = {.tile = qk_ggml_tile}, [QK_FMT_Q4_K] = {.tile = qk_ggml_tile},                                     \
  [QK_FMT_Q5_K] = {.tile = qk_ggml_tile}, [QK_FMT_Q6_K] = {.tile = qk_ggml_tile},                                     \
  [QK_FMT_IQ4_NL] = {.tile = qk_ggml_tile}

/* qk_half reads the little-endian IEEE half at p, exactly. */
QK_INLINE float qk_half(const uint8_t *p) { return qk_f16_f32((uint16_t)(p[0] | p[1] << 8)); }

/* Q4_K and Q5_K (d at 0, dmin at 2, 12 bytes of 6-bit scales and mins at 4; ggml's
 * get_scale_min_k4): f[j] = d * scale_j and g[j] = -(dmin * min_j) for the 8 sub-blocks of 32. */
QK_INLINE void qk_k4_factors(const uint8_t *blk, float f[8], float g[8]) {
  const float d = qk_half(blk), dmin = qk_half(blk + 2);
  const uint8_t *s = blk + 4;
  for (int j = 0; j < 8; j++) {
    int sc, mn;
    if (j < 4) {
      sc = s[j] & 63;
      mn = s[j + 4] & 63;
    } else {
      sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
      mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
    f[j] = d * (float)sc;
    g[j] = -(dmin * (float)mn);
  }
}

/* Q6_K (int8 scales at 192, d at 208): f[j] = d * scale_j for the 16 sub-blocks of 16. */
QK_INLINE void qk_q6k_factors(const uint8_t *blk, float f[16]) {
  const float d = qk_half(blk + 208);
  for (int j = 0; j < 16; j++) {
    f[j] = d * (float)(int8_t)blk[192 + j];
  }
}

/* Q3_K (12 bytes of 6-bit scales at 96, d at 108): f[j] = d * (scale_j - 32); scale j has its
 * low nibble in byte j%8 (low nibble for j < 8) and its two high bits in byte 8 + j%4, bits
 * 2*(j/4). */
QK_INLINE void qk_q3k_factors(const uint8_t *blk, float f[16]) {
  const float d = qk_half(blk + 108);
  const uint8_t *s = blk + 96;
  for (int j = 0; j < 16; j++) {
    const int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    f[j] = d * (float)((lo | hi << 4) - 32);
  }
}

/* Q2_K (scale bytes at 0: low nibble scale, high nibble min; d at 80, dmin at 82): f[j] = d *
 * scale_j and g[j] = -(dmin * min_j) for the 16 sub-blocks of 16. */
QK_INLINE void qk_q2k_factors(const uint8_t *blk, float f[16], float g[16]) {
  const float d = qk_half(blk + 80), dmin = qk_half(blk + 82);
  for (int j = 0; j < 16; j++) {
    f[j] = d * (float)(blk[j] & 15);
    g[j] = -(dmin * (float)(blk[j] >> 4));
  }
}

/* IQ4_NL's 16 values (ggml's kvalues_iq4nl). */
extern const int8_t qk_iq4nl_values[16];

#endif /* QK_GGML_H */
