/* qk_portable.c: plain C primitives for the generic drivers; they build and run on any
 * architecture (the compiler may vectorize them for its baseline ISA). */
#include "qk_ggml.h"

static void mk_kn(int64_t M, int64_t kb, int64_t P, const float *A, int64_t lda, const float *B, int64_t ldb,
                  float *C, int64_t ldc) {
  for (int64_t i = 0; i < M; i++) {
    float *c = C + i * ldc;
    const float *a = A + i * lda;
    for (int64_t l = 0; l < kb; l++) {
      const float av = a[l];
      const float *b = B + l * ldb;
      for (int64_t j = 0; j < P; j++) {
        c[j] += av * b[j];
      }
    }
  }
}

static void mk_nk(int64_t M, int64_t R, int64_t kb, const float *A, int64_t lda, const float *B, int64_t ldb,
                  float *C, int64_t ldc) {
  for (int64_t i = 0; i < M; i++) {
    const float *a = A + i * lda;
    for (int64_t r = 0; r < R; r++) {
      const float *b = B + r * ldb;
      /* four partial sums, as a vector unit would keep */
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t l = 0;
      for (; l + 4 <= kb; l += 4) {
        s0 += a[l] * b[l];
        s1 += a[l + 1] * b[l + 1];
        s2 += a[l + 2] * b[l + 2];
        s3 += a[l + 3] * b[l + 3];
      }
      for (; l < kb; l++) {
        s0 += a[l] * b[l];
      }
      C[i * ldc + r] += (s0 + s1) + (s2 + s3);
    }
  }
}

/* Elements [e, bend) of one block of an NF4 row at src, of scale s, into o. */
QK_INLINE void nf4_run(const uint8_t *src, float s, int64_t e, int64_t bend, float *o) {
  float t[16];
  for (int c = 0; c < 16; c++) {
    t[c] = qk_nf4_codebook[c] * s; /* the dense weight's value, rounded once */
  }
  for (int64_t i = e; i < bend; i++) {
    const uint8_t b = src[i >> 1];
    o[i - e] = t[(i & 1) ? (b & 15) : (b >> 4)];
  }
}

QK_NF4_TILE(, nf4_run)

static void i8_tile(const qk_prod *p, int64_t r0, int64_t nr, int64_t c0, int64_t cnt, float *out, int64_t ldo) {
  for (int64_t r = 0; r < nr; r++) {
    const int8_t *src = (const int8_t *)(p->w + (r0 + r) * p->ldw) + c0;
    for (int64_t i = 0; i < cnt; i++) {
      out[r * ldo + i] = (float)src[i];
    }
  }
}

static void tb_tile(const qk_prod *p, int64_t r0, int64_t nr, int64_t c0, int64_t cnt, float *out, int64_t ldo) {
  const int rps = p->rps, bits = 8 / rps;
  const unsigned mask = (1u << bits) - 1;
  for (int64_t r = 0; r < nr; r++) {
    const uint8_t *src = p->w + (r0 + r) * p->ldw + c0;
    for (int g = 0; g < rps; g++) {
      float *o = out + (r * rps + g) * ldo;
      for (int64_t j = 0; j < cnt; j++) {
        const unsigned code = (src[j] >> (bits * g)) & mask;
        /* 2-bit: value = code - 1 (code 3 reads as +2); 1-bit: value = 2*bit - 1 */
        o[j] = bits == 2 ? (float)code - 1.0f : (float)(2 * (int)code - 1);
      }
    }
  }
}

const qk_ops qk_ops_portable = {
    .isa = QK_ISA_PORTABLE,
    .mk_kn = mk_kn,
    .mk_nk = mk_nk,
    .fmt =
        {
            [QK_FMT_F32] = {.tile = qk_f32_tile},
            [QK_FMT_NF4] = {.tile = nf4_tile},
            [QK_FMT_I8] = {.tile = i8_tile},
            [QK_FMT_TB2] = {.tile = tb_tile},
            [QK_FMT_TB1] = {.tile = tb_tile},
            QK_GGML_PLAIN_ROWS,
        },
};
