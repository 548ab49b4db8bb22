/* qk_ggml.c: ggml's block types: their table and the plain C decode of every type, which each
 * ISA's table uses where it has no vector decode of its own. Each decoder writes one block's
 * elements with ggml's arithmetic (qk_ggml.h), in the element order of gguf/blocks.go. */
#include "qk_ggml.h"

/* BLOCK(T, t): the row of type T (QK_FMT_T, QK_GGML_T), t its name in QK_BS_t and QK_BB_t. */
#define BLOCK(T, t) [QK_FMT_##T - QK_FMT_Q4_0] = {QK_GGML_##T, QK_BS_##t, QK_BB_##t, #T}
const qk_ggml_block qk_ggml_blocks[QK_NGGML] = {
    BLOCK(Q4_0, q4_0), BLOCK(Q4_1, q4_1), BLOCK(Q5_0, q5_0), BLOCK(Q5_1, q5_1),
    BLOCK(Q8_0, q8_0), BLOCK(Q2_K, q2_k), BLOCK(Q3_K, q3_k), BLOCK(Q4_K, q4_k),
    BLOCK(Q5_K, q5_k), BLOCK(Q6_K, q6_k), BLOCK(IQ4_NL, iq4_nl),
};

const int8_t qk_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

int qk_ggml_fmt(int type) {
  for (int f = QK_FMT_Q4_0; f <= QK_FMT_IQ4_NL; f++) {
    if (qk_ggml_of(f)->type == type) {
      return f;
    }
  }
  return -1;
}

int qk_ggml_block_info(int type, int64_t *block_size, int64_t *block_bytes) {
  const int f = qk_ggml_fmt(type);
  if (f < 0) {
    return QK_ERR_TYPE;
  }
  *block_size = qk_ggml_of(f)->bs;
  *block_bytes = qk_ggml_of(f)->bytes;
  return QK_OK;
}

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Q4_0: d, 16 bytes; byte j holds element j (low nibble) and j+16 (high): (q-8)*d. */
static void dec_q4_0(const uint8_t *b, float *o) {
  const float d = qk_half(b);
  for (int j = 0; j < 16; j++) {
    o[j] = (float)((b[2 + j] & 15) - 8) * d;
    o[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
  }
}

/* Q4_1: d, m, nibbles as Q4_0: q*d + m. */
static void dec_q4_1(const uint8_t *b, float *o) {
  const float d = qk_half(b), m = qk_half(b + 2);
  for (int j = 0; j < 16; j++) {
    o[j] = (float)(b[4 + j] & 15) * d + m;
    o[j + 16] = (float)(b[4 + j] >> 4) * d + m;
  }
}

/* Q5_0: d, fifth bits (bit j of the little-endian uint32 for element j), nibbles: (q-16)*d. */
static void dec_q5_0(const uint8_t *b, float *o) {
  const float d = qk_half(b);
  const uint32_t qh = le32(b + 2);
  for (int j = 0; j < 16; j++) {
    o[j] = (float)((int)((b[6 + j] & 15) | ((qh >> j) & 1) << 4) - 16) * d;
    o[j + 16] = (float)((int)((b[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16) * d;
  }
}

/* Q5_1: d, m, fifth bits and nibbles as Q5_0: q*d + m. */
static void dec_q5_1(const uint8_t *b, float *o) {
  const float d = qk_half(b), m = qk_half(b + 2);
  const uint32_t qh = le32(b + 4);
  for (int j = 0; j < 16; j++) {
    o[j] = (float)((b[8 + j] & 15) | ((qh >> j) & 1) << 4) * d + m;
    o[j + 16] = (float)((b[8 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4) * d + m;
  }
}

/* Q8_0: d, 32 int8: q*d. */
static void dec_q8_0(const uint8_t *b, float *o) {
  const float d = qk_half(b);
  for (int j = 0; j < 32; j++) {
    o[j] = (float)(int8_t)b[2 + j] * d;
  }
}

/* Q2_K: element 128h + 32s + l (l < 32) is bits 2s of byte 32h + l of the codes at 16, in
 * sub-block 8h + 2s + l/16: q*f + g. */
static void dec_q2_k(const uint8_t *b, float *o) {
  float f[16], g[16];
  qk_q2k_factors(b, f, g);
  for (int h = 0; h < 2; h++) {
    for (int s = 0; s < 4; s++) {
      for (int l = 0; l < 32; l++) {
        const int j = 8 * h + 2 * s + l / 16;
        o[128 * h + 32 * s + l] = (float)((b[16 + 32 * h + l] >> (2 * s)) & 3) * f[j] + g[j];
      }
    }
  }
}

/* Q3_K: the codes as Q2_K's (at 32), minus 4 where bit 4h + s of byte l of the high-bit mask (at
 * 0) is clear: q*f. */
static void dec_q3_k(const uint8_t *b, float *o) {
  float f[16];
  qk_q3k_factors(b, f);
  for (int h = 0; h < 2; h++) {
    for (int s = 0; s < 4; s++) {
      for (int l = 0; l < 32; l++) {
        int q = (b[32 + 32 * h + l] >> (2 * s)) & 3;
        if (((b[l] >> (4 * h + s)) & 1) == 0) {
          q -= 4;
        }
        o[128 * h + 32 * s + l] = (float)q * f[8 * h + 2 * s + l / 16];
      }
    }
  }
}

/* Q4_K: chunk i of 64 elements reads bytes 32i..32i+31 of the nibbles at 16: the low nibbles
 * with sub-block 2i, the high ones with 2i+1: q*f + g. */
static void dec_q4_k(const uint8_t *b, float *o) {
  float f[8], g[8];
  qk_k4_factors(b, f, g);
  for (int i = 0; i < 4; i++) {
    for (int l = 0; l < 32; l++) {
      const uint8_t q = b[16 + 32 * i + l];
      o[64 * i + l] = (float)(q & 15) * f[2 * i] + g[2 * i];
      o[64 * i + 32 + l] = (float)(q >> 4) * f[2 * i + 1] + g[2 * i + 1];
    }
  }
}

/* Q5_K: the nibbles (at 48) as Q4_K's, and bit 2i (low) or 2i+1 (high) of byte l of the fifth
 * bits (at 16) as 16. */
static void dec_q5_k(const uint8_t *b, float *o) {
  float f[8], g[8];
  qk_k4_factors(b, f, g);
  for (int i = 0; i < 4; i++) {
    for (int l = 0; l < 32; l++) {
      const uint8_t q = b[48 + 32 * i + l], h = b[16 + l];
      o[64 * i + l] = (float)((q & 15) | ((h >> (2 * i)) & 1) << 4) * f[2 * i] + g[2 * i];
      o[64 * i + 32 + l] = (float)((q >> 4) | ((h >> (2 * i + 1)) & 1) << 4) * f[2 * i + 1] + g[2 * i + 1];
    }
  }
}

/* Q6_K: element 128h + 32j + l (l < 32) takes the low (j < 2) or high nibble of byte 64h +
 * 32(j%2) + l of ql (at 0) and bits 2j of byte 32h + l of qh (at 128), in sub-block 8h + 2j + l/16:
 * (q-32)*f. */
static void dec_q6_k(const uint8_t *b, float *o) {
  float f[16];
  qk_q6k_factors(b, f);
  for (int h = 0; h < 2; h++) {
    for (int j = 0; j < 4; j++) {
      for (int l = 0; l < 32; l++) {
        const uint8_t ql = b[64 * h + 32 * (j % 2) + l];
        const int lo = j < 2 ? ql & 15 : ql >> 4;
        const int q = (lo | ((b[128 + 32 * h + l] >> (2 * j)) & 3) << 4) - 32;
        o[128 * h + 32 * j + l] = (float)q * f[8 * h + 2 * j + l / 16];
      }
    }
  }
}

/* IQ4_NL: d, nibbles as Q4_0, each a code of qk_iq4nl_values: d*value. */
static void dec_iq4_nl(const uint8_t *b, float *o) {
  const float d = qk_half(b);
  for (int j = 0; j < 16; j++) {
    o[j] = d * (float)qk_iq4nl_values[b[2 + j] & 15];
    o[j + 16] = d * (float)qk_iq4nl_values[b[2 + j] >> 4];
  }
}

typedef void (*block_decoder)(const uint8_t *blk, float *out);

static const block_decoder decoders[QK_NGGML] = {
    [QK_FMT_Q4_0 - QK_FMT_Q4_0] = dec_q4_0, [QK_FMT_Q4_1 - QK_FMT_Q4_0] = dec_q4_1,
    [QK_FMT_Q5_0 - QK_FMT_Q4_0] = dec_q5_0, [QK_FMT_Q5_1 - QK_FMT_Q4_0] = dec_q5_1,
    [QK_FMT_Q8_0 - QK_FMT_Q4_0] = dec_q8_0, [QK_FMT_Q2_K - QK_FMT_Q4_0] = dec_q2_k,
    [QK_FMT_Q3_K - QK_FMT_Q4_0] = dec_q3_k, [QK_FMT_Q4_K - QK_FMT_Q4_0] = dec_q4_k,
    [QK_FMT_Q5_K - QK_FMT_Q4_0] = dec_q5_k, [QK_FMT_Q6_K - QK_FMT_Q4_0] = dec_q6_k,
    [QK_FMT_IQ4_NL - QK_FMT_Q4_0] = dec_iq4_nl,
};

void qk_ggml_tile(const qk_prod *p, int64_t r0, int64_t nr, int64_t c0, int64_t cnt, float *out, int64_t ldo) {
  const qk_ggml_block *t = qk_ggml_of(p->fmt);
  const block_decoder dec = decoders[p->fmt - QK_FMT_Q4_0];
  for (int64_t r = 0; r < nr; r++) {
    const uint8_t *row = p->w + (r0 + r) * p->ldw;
    for (int64_t e = c0; e < c0 + cnt; e += t->bs) {
      dec(row + e / t->bs * t->bytes, out + r * ldo + (e - c0));
    }
  }
}
