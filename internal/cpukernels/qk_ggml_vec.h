/* qk_ggml_vec.h: the vector kernels of ggml's block types, written once over a small set of
 * vector operations and included by each x86 ISA's file (qk_avx2.c: 8 lanes, qk_avx512.c: 16),
 * which defines them first:
 *
 *   GV_F, GV_I, GV_N    float and int32 vectors of GV_N lanes (8 or 16)
 *   GV_INLINE, GV_FN    the attributes of inline helpers and of the kernels (the ISA's target)
 *   gv_zero, gv_set1, gv_bcast (from memory), gv_loadu, gv_storeu, gv_fma, gv_mul, gv_add, gv_cvt (int32 to float), gv_hsum
 *   gv_u8(p), gv_s8(p)  GV_N bytes at p, zero- or sign-extended to int32 lanes
 *   gv_s8x(b)           the low GV_N bytes of an xmm, sign-extended; gv_xload(p) loads them
 *   gv_iset1, gv_iloadu, gv_and, gv_or, gv_iadd, gv_isub, gv_srli, gv_slli, gv_srlv  int32 lanes
 *   GV_LUT16, gv_lut16(i, t)  optional: t[i & 15] per lane, t a vector of 16 floats
 *
 * A block function decodes one block into vectors of its weights, the values of qk_ggml.c's
 * decoders bit for bit (the same operations on the same exact products), and hands each vector to
 * put: in a tile decode (MR == 0) put stores it, in a fused x @ W^T kernel it multiplies it into
 * the accumulators of MR activation rows. The accumulator a vector goes to depends only on its
 * position in the block, so an output's sum is the same whatever the chunks, threads or m. */

#define GV_UNROLL _Pragma("GCC unroll 32")

/* The accumulators of up to 4 activation rows, up to 8 each. */
typedef GV_F gv_acc[4][8];

#define GV_BLOCK_ARGS const int MR, const int NA, const uint8_t *blk, const float *x, int64_t ldx, gv_acc acc, float *out
#define GV_PASS MR, NA, x, ldx, acc, out

/* put hands over the weights of elements [off, off + GV_N) of the block. */
GV_INLINE void put(GV_F w, int off, const int MR, const int NA, const float *x, int64_t ldx, gv_acc acc, float *out) {
  if (MR == 0) {
    gv_storeu(out + off, w);
    return;
  }
  const int a = (off / GV_N) % NA;
  GV_UNROLL for (int i = 0; i < MR; i++) { acc[i][a] = gv_fma(gv_loadu(x + i * ldx + off), w, acc[i][a]); }
}

/* gv_shl shifts every lane left by s bits (right by -s). */
GV_INLINE GV_I gv_shl(GV_I v, const int s) { return s >= 0 ? gv_slli(v, s) : gv_srli(v, -s); }

/* the lane indices 0, 1, ..., GV_N-1 */
GV_INLINE GV_I gv_iota(void) {
  int32_t t[16];
  for (int i = 0; i < 16; i++) {
    t[i] = i;
  }
  return gv_iloadu(t);
}

#ifdef GV_LUT16
/* The 16 values q * f + g (q = 0..15): the decoded weights of a 4-bit code with factors f, g. */
GV_INLINE GV_F lut_affine(float f, float g) { return gv_fma(gv_cvt(gv_iota()), gv_set1(f), gv_set1(g)); }
#endif

/* gv_in_memory keeps the factors just stored in memory: the blocks broadcast them from there (a
 * load) rather than from registers (a shuffle, on the ports the widening loads need). */
#define gv_in_memory() __asm__ volatile("" ::: "memory")

/* half_at returns the little-endian half at p, as stored. */
GV_INLINE short half_at(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return (short)h;
}

/* gv_half is qk_half by F16C: exact for every half, subnormal ones converted to normal floats,
 * so a caller's DAZ mode has nothing to flush. */
GV_INLINE float gv_half(const uint8_t *p) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128((uint16_t)half_at(p))));
}

/* bytes_times writes the 8 bytes of u (first byte first) times d into out[0..8). */
GV_INLINE void bytes_times(uint64_t u, float d, float *out) {
  const __m128i b = _mm_cvtsi64_si128((long long)u);
  const __m128 dv = _mm_set1_ps(d);
  _mm_storeu_ps(out, _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepu8_epi32(b)), dv));
  _mm_storeu_ps(out + 4, _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepu8_epi32(_mm_srli_si128(b, 4))), dv));
}

/* k4_bytes returns the 8 scales (*sc) and mins (*mn) of a Q4_K or Q5_K block, byte j for
 * sub-block j (ggml's get_scale_min_k4), gathered by 32-bit masks: bytes 0-3 are the low 6 bits
 * of words 0 (scales) and 1 (mins) of the 12 bytes at 4; bytes 4-7 the nibbles of word 2 below
 * the top two bits of the bytes of words 0 and 1. */
GV_INLINE void k4_bytes(const uint8_t *blk, uint64_t *sc, uint64_t *mn) {
  uint32_t w[3];
  memcpy(w, blk + 4, 12);
  const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, top2 = 0x03030303;
  *sc = (uint64_t)(w[0] & low6) | (uint64_t)((w[2] & low4) | ((w[0] >> 6) & top2) << 4) << 32;
  *mn = (uint64_t)(w[1] & low6) | (uint64_t)(((w[2] >> 4) & low4) | ((w[1] >> 6) & top2) << 4) << 32;
}

/* k4_factors is qk_k4_factors, four at a time. */
GV_INLINE void k4_factors(const uint8_t *blk, float f[8], float g[8]) {
  uint64_t sc, mn;
  k4_bytes(blk, &sc, &mn);
  bytes_times(sc, gv_half(blk), f);
  bytes_times(mn, -gv_half(blk + 2), g); /* -(dmin * m), exactly */
  gv_in_memory();
}

/* q6k_factors is qk_q6k_factors, four scales at a time. */
GV_INLINE void q6k_factors(const uint8_t *blk, float f[16]) {
  const __m128i s = _mm_loadu_si128((const __m128i *)(blk + 192));
  const __m128 d = _mm_set1_ps(gv_half(blk + 208));
  _mm_storeu_ps(f, _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepi8_epi32(s)), d));
  _mm_storeu_ps(f + 4, _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_srli_si128(s, 4))), d));
  _mm_storeu_ps(f + 8, _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_srli_si128(s, 8))), d));
  _mm_storeu_ps(f + 12, _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_srli_si128(s, 12))), d));
  gv_in_memory();
}

/* ---- 32-element blocks ---- */

/* Q4_0 (d at 0, nibbles at 2): (q - 8) * d. */
GV_INLINE void q4_0_block(GV_BLOCK_ARGS) {
  const float d = gv_half(blk);
#ifdef GV_LUT16
  const GV_F t = gv_mul(gv_cvt(gv_isub(gv_iota(), gv_iset1(8))), gv_set1(d));
  const GV_I v = gv_u8(blk + 2);
  put(gv_lut16(v, t), 0, GV_PASS);
  put(gv_lut16(gv_srli(v, 4), t), 16, GV_PASS);
#else
  const GV_F dv = gv_set1(d);
  GV_UNROLL for (int l = 0; l < 16; l += GV_N) {
    const GV_I v = gv_u8(blk + 2 + l);
    put(gv_mul(gv_cvt(gv_isub(gv_and(v, gv_iset1(15)), gv_iset1(8))), dv), l, GV_PASS);
    put(gv_mul(gv_cvt(gv_isub(gv_srli(v, 4), gv_iset1(8))), dv), 16 + l, GV_PASS);
  }
#endif
}

/* Q4_1 (d at 0, m at 2, nibbles at 4): q * d + m. */
GV_INLINE void q4_1_block(GV_BLOCK_ARGS) {
  const float d = gv_half(blk), m = gv_half(blk + 2);
#ifdef GV_LUT16
  const GV_F t = lut_affine(d, m);
  const GV_I v = gv_u8(blk + 4);
  put(gv_lut16(v, t), 0, GV_PASS);
  put(gv_lut16(gv_srli(v, 4), t), 16, GV_PASS);
#else
  const GV_F dv = gv_set1(d), mv = gv_set1(m);
  GV_UNROLL for (int l = 0; l < 16; l += GV_N) {
    const GV_I v = gv_u8(blk + 4 + l);
    put(gv_fma(gv_cvt(gv_and(v, gv_iset1(15))), dv, mv), l, GV_PASS);
    put(gv_fma(gv_cvt(gv_srli(v, 4)), dv, mv), 16 + l, GV_PASS);
  }
#endif
}

/* The fifth bits of Q5_0 and Q5_1 as 16 in lanes [l, l + GV_N): bit `first + lane` of qh. */
GV_INLINE GV_I fifth(GV_I qh, int first) {
  return gv_slli(gv_and(gv_srlv(qh, gv_iadd(gv_iota(), gv_iset1(first))), gv_iset1(1)), 4);
}

/* Q5_0 (d at 0, fifth bits at 2, nibbles at 6): (q - 16) * d. */
GV_INLINE void q5_0_block(GV_BLOCK_ARGS) {
  const GV_F dv = gv_set1(gv_half(blk));
  uint32_t h;
  memcpy(&h, blk + 2, 4);
  const GV_I qh = gv_iset1((int32_t)h);
  GV_UNROLL for (int l = 0; l < 16; l += GV_N) {
    const GV_I v = gv_u8(blk + 6 + l);
    const GV_I lo = gv_or(gv_and(v, gv_iset1(15)), fifth(qh, l)), hi = gv_or(gv_srli(v, 4), fifth(qh, 16 + l));
    put(gv_mul(gv_cvt(gv_isub(lo, gv_iset1(16))), dv), l, GV_PASS);
    put(gv_mul(gv_cvt(gv_isub(hi, gv_iset1(16))), dv), 16 + l, GV_PASS);
  }
}

/* Q5_1 (d at 0, m at 2, fifth bits at 4, nibbles at 8): q * d + m. */
GV_INLINE void q5_1_block(GV_BLOCK_ARGS) {
  const GV_F dv = gv_set1(gv_half(blk)), mv = gv_set1(gv_half(blk + 2));
  uint32_t h;
  memcpy(&h, blk + 4, 4);
  const GV_I qh = gv_iset1((int32_t)h);
  GV_UNROLL for (int l = 0; l < 16; l += GV_N) {
    const GV_I v = gv_u8(blk + 8 + l);
    put(gv_fma(gv_cvt(gv_or(gv_and(v, gv_iset1(15)), fifth(qh, l))), dv, mv), l, GV_PASS);
    put(gv_fma(gv_cvt(gv_or(gv_srli(v, 4), fifth(qh, 16 + l))), dv, mv), 16 + l, GV_PASS);
  }
}

/* Q8_0 (d at 0, int8 at 2): q * d. */
GV_INLINE void q8_0_block(GV_BLOCK_ARGS) {
  const GV_F dv = gv_set1(gv_half(blk));
  GV_UNROLL for (int l = 0; l < 32; l += GV_N) { put(gv_mul(gv_cvt(gv_s8(blk + 2 + l)), dv), l, GV_PASS); }
}

/* IQ4_NL (d at 0, nibbles at 2): d * value[q]. */
GV_INLINE void iq4_nl_block(GV_BLOCK_ARGS) {
  const float d = gv_half(blk);
#ifdef GV_LUT16
  const GV_F t = gv_mul(gv_cvt(gv_s8x(_mm_loadu_si128((const __m128i *)qk_iq4nl_values))), gv_set1(d));
  const GV_I v = gv_u8(blk + 2);
  put(gv_lut16(v, t), 0, GV_PASS);
  put(gv_lut16(gv_srli(v, 4), t), 16, GV_PASS);
#else
  const GV_F dv = gv_set1(d);
  const __m128i values = _mm_loadu_si128((const __m128i *)qk_iq4nl_values), low = _mm_set1_epi8(15);
  GV_UNROLL for (int l = 0; l < 16; l += GV_N) {
    const __m128i b = gv_xload(blk + 2 + l);
    const __m128i lo = _mm_shuffle_epi8(values, _mm_and_si128(b, low));
    const __m128i hi = _mm_shuffle_epi8(values, _mm_and_si128(_mm_srli_epi16(b, 4), low));
    put(gv_mul(gv_cvt(gv_s8x(lo)), dv), l, GV_PASS);
    put(gv_mul(gv_cvt(gv_s8x(hi)), dv), 16 + l, GV_PASS);
  }
#endif
}

/* ---- 256-element blocks ---- */

/* Q4_K (factors at 0, nibbles at 16): chunk i of 64 elements, the low nibbles of 32 bytes with
 * sub-block 2i, the high ones with 2i+1: q * f + g. */
GV_INLINE void q4_k_block(GV_BLOCK_ARGS) {
  float f[8], g[8];
  k4_factors(blk, f, g);
  const uint8_t *q = blk + 16;
  GV_UNROLL for (int i = 0; i < 4; i++) {
#ifdef GV_LUT16
    const GV_F ta = lut_affine(f[2 * i], g[2 * i]), tb = lut_affine(f[2 * i + 1], g[2 * i + 1]);
    GV_UNROLL for (int l = 0; l < 32; l += GV_N) {
      const GV_I v = gv_u8(q + 32 * i + l);
      put(gv_lut16(v, ta), 64 * i + l, GV_PASS);
      put(gv_lut16(gv_srli(v, 4), tb), 64 * i + 32 + l, GV_PASS);
    }
#else
    const GV_F fa = gv_bcast(&f[2 * i]), ga = gv_bcast(&g[2 * i]), fb = gv_bcast(&f[2 * i + 1]), gb = gv_bcast(&g[2 * i + 1]);
    GV_UNROLL for (int l = 0; l < 32; l += GV_N) {
      const GV_I v = gv_u8(q + 32 * i + l);
      put(gv_fma(gv_cvt(gv_and(v, gv_iset1(15))), fa, ga), 64 * i + l, GV_PASS);
      put(gv_fma(gv_cvt(gv_srli(v, 4)), fb, gb), 64 * i + 32 + l, GV_PASS);
    }
#endif
  }
}

/* Q5_K (factors at 0, fifth bits at 16, nibbles at 48): Q4_K's nibbles, and bit 2i (low) or 2i+1
 * (high) of fifth-bit byte l as 16. */
GV_INLINE void q5_k_block(GV_BLOCK_ARGS) {
  float f[8], g[8];
  k4_factors(blk, f, g);
  const uint8_t *q = blk + 48;
  const GV_I sixteen = gv_iset1(16);
  GV_UNROLL for (int i = 0; i < 4; i++) {
    const GV_F fa = gv_bcast(&f[2 * i]), ga = gv_bcast(&g[2 * i]), fb = gv_bcast(&f[2 * i + 1]), gb = gv_bcast(&g[2 * i + 1]);
    GV_UNROLL for (int l = 0; l < 32; l += GV_N) {
      const GV_I v = gv_u8(q + 32 * i + l), h = gv_u8(blk + 16 + l);
      const GV_I lo = gv_or(gv_and(v, gv_iset1(15)), gv_and(gv_shl(h, 4 - 2 * i), sixteen));
      const GV_I hi = gv_or(gv_srli(v, 4), gv_and(gv_shl(h, 3 - 2 * i), sixteen));
      put(gv_fma(gv_cvt(lo), fa, ga), 64 * i + l, GV_PASS);
      put(gv_fma(gv_cvt(hi), fb, gb), 64 * i + 32 + l, GV_PASS);
    }
  }
}

/* Q6_K (ql at 0, qh at 128, factors from 192): in half h, element 32j + l takes the low (j < 2)
 * or high nibble of ql byte 64h + 32(j%2) + l and bits 2j of qh byte 32h + l: (q - 32) * f. */
GV_INLINE void q6_k_block(GV_BLOCK_ARGS) {
  float f[16];
  q6k_factors(blk, f);
  const GV_I low = gv_iset1(15), top = gv_iset1(48), bias = gv_iset1(32);
  GV_UNROLL for (int h = 0; h < 2; h++) {
    const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
    GV_UNROLL for (int l = 0; l < 32; l += GV_N) {
      const GV_I a = gv_u8(ql + l), b = gv_u8(ql + 32 + l), c = gv_u8(qh + l);
      const GV_I q0 = gv_or(gv_and(a, low), gv_and(gv_slli(c, 4), top));
      const GV_I q1 = gv_or(gv_and(b, low), gv_and(gv_slli(c, 2), top));
      const GV_I q2 = gv_or(gv_srli(a, 4), gv_and(c, top));
      const GV_I q3 = gv_or(gv_srli(b, 4), gv_and(gv_srli(c, 2), top));
      const int s = 8 * h + l / 16;
      put(gv_mul(gv_cvt(gv_isub(q0, bias)), gv_bcast(&f[s])), 128 * h + l, GV_PASS);
      put(gv_mul(gv_cvt(gv_isub(q1, bias)), gv_bcast(&f[s + 2])), 128 * h + 32 + l, GV_PASS);
      put(gv_mul(gv_cvt(gv_isub(q2, bias)), gv_bcast(&f[s + 4])), 128 * h + 64 + l, GV_PASS);
      put(gv_mul(gv_cvt(gv_isub(q3, bias)), gv_bcast(&f[s + 6])), 128 * h + 96 + l, GV_PASS);
    }
  }
}

/* ---- the kernels of each type: fused x @ W^T and the tile decode ---- */

/* Software prefetch distance (bytes) of the fused kernels, which stream their chunk's rows. */
#ifndef GV_PFD
#define GV_PFD 2048
#endif

/* gv_sum adds the NA accumulators in a fixed tree, then the lanes. */
GV_INLINE float gv_sum(const int NA, GV_F *a) {
  GV_UNROLL for (int w = 4; w >= 1; w /= 2) {
    GV_UNROLL for (int j = 0; j < w; j++) {
      if (j + w < NA) {
        a[j] = gv_add(a[j], a[j + w]);
      }
    }
  }
  return gv_hsum(a[0]);
}

/* GV_TILE(T) defines T_tile: blocks decoded into a tile. */
#define GV_TILE(T)                                                                                                     \
  static GV_FN void T##_tile(const qk_prod *p, int64_t r0, int64_t nr, int64_t c0, int64_t cnt, float *out,           \
                             int64_t ldo) {                                                                            \
    for (int64_t r = 0; r < nr; r++) {                                                                                 \
      const uint8_t *row = p->w + (r0 + r) * p->ldw;                                                                   \
      for (int64_t e = c0; e < c0 + cnt; e += QK_BS_##T) {                                                             \
        T##_block(0, 1, row + e / QK_BS_##T * QK_BB_##T, NULL, 0, NULL, out + r * ldo + (e - c0));                     \
      }                                                                                                                \
    }                                                                                                                  \
  }

/* GV_FLOAT_KERNEL(T) defines T_nk, the fused kernel of the float route: activation rows
 * four at a time, each output row of the chunk one at a time, all of k. */
#define GV_FLOAT_KERNEL(T)                                                                                             \
  GV_INLINE void T##_rows(const int MR, const qk_prod *p, int64_t n0, int64_t n1, int64_t i0) {                        \
    const int NA = MR <= 2 ? 4 : 2; /* sums per activation row: more chains when rows are few */                       \
    const int64_t nb = p->k / QK_BS_##T;                                                                               \
    const float *x = p->x + i0 * p->ldx;                                                                               \
    for (int64_t n = n0; n < n1; n++) {                                                                                \
      const uint8_t *row = p->w + n * p->ldw;                                                                          \
      gv_acc acc;                                                                                                      \
      GV_UNROLL for (int i = 0; i < MR; i++) {                                                                         \
        GV_UNROLL for (int a = 0; a < NA; a++) { acc[i][a] = gv_zero(); }                                              \
      }                                                                                                                \
      for (int64_t b = 0; b < nb; b++) {                                                                               \
        const uint8_t *blk = row + b * QK_BB_##T;                                                                      \
        GV_UNROLL for (int o = 0; o < QK_BB_##T; o += 64) { _mm_prefetch((const char *)blk + GV_PFD + o, _MM_HINT_T0); } \
        T##_block(MR, NA, blk, x + b * QK_BS_##T, p->ldx, acc, NULL);                                                  \
      }                                                                                                                \
      GV_UNROLL for (int i = 0; i < MR; i++) { p->y[(i0 + i) * p->n + n] = gv_sum(NA, acc[i]); }                       \
    }                                                                                                                  \
  }                                                                                                                    \
  static GV_FN void T##_nk(const qk_prod *p, int64_t n0, int64_t n1, void *scratch) {                                  \
    (void)scratch;                                                                                                     \
    for (int64_t i0 = 0; i0 < p->m; i0 += 4) {                                                                         \
      QK_SWITCH4(QK_MIN(4, p->m - i0), T##_rows, p, n0, n1, i0)                                                        \
    }                                                                                                                  \
  }

GV_TILE(q4_0)
GV_TILE(q4_1)
GV_TILE(q5_0)
GV_TILE(q5_1)
GV_TILE(q8_0)
GV_TILE(iq4_nl)
GV_TILE(q4_k)
GV_TILE(q5_k)
GV_TILE(q6_k)
GV_FLOAT_KERNEL(q4_0)
GV_FLOAT_KERNEL(q8_0)
GV_FLOAT_KERNEL(iq4_nl)

/* ---- the integer route: 8-bit activations (qk_x8) ----
 *
 * With the activations quantized to int8 in groups of one weight block (qk_run.c), a block's
 * product is integer arithmetic on the codes, exact in int32: u8 weight codes times s8 activation
 * codes summed in pairs (vpmaddubsw), times the sub-block scales and summed in pairs again
 * (vpmaddwd); the mins and Q6_K's offset of 32 meet the sums of the activation codes. Only the
 * block's result is float: its integer sums, lane by lane, times (d * d_x) and (-dmin * d_x). So
 * the product is that of x' (qk_x8) with the weights' exact values (f * q + g, which the decode
 * rounds once), to float32 rounding of those per-block terms. These use 256-bit integer vectors on
 * both x86 paths, but for Q6_K's 512-bit blocks on AVX-512. */

/* An activation row's codes, sums of 16 codes and scale for one block. */
typedef struct {
  const int8_t *q;
  const int16_t *s;
  float d;
} x8_blk;

GV_INLINE x8_blk x8_at(const qk_prod *p, int64_t i, int64_t b, int64_t bs) {
  const qk_x8 *a = &p->x8;
  return (x8_blk){a->q + i * a->ldq + b * bs, a->s + i * a->lds + b * bs / 16, a->d[i * a->ldd + b]};
}

#define x8_load(p) _mm256_loadu_si256((const __m256i *)(p))

/* x8_hsum adds the 8 lanes of v: halves, then pairs, then the last two. */
GV_INLINE float x8_hsum(__m256 v) {
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  t = _mm_add_ss(t, _mm_movehdup_ps(t));
  return _mm_cvtss_f32(t);
}

/* gv_quantize_x8 is qk_run.c's quantize_x8 for float32 activations, eight lanes at a time: the
 * same codes (x·(127/amax) rounded to nearest even by vroundps, as round_even does), scales and
 * sums, bit for bit, for the finite activations x8_fits admits (a NaN would reach amax here, not
 * there). It runs on the calling thread before the product's threads start, once per
 * product: a decoding step of a small model calls it a hundred times. */
static GV_FN void gv_quantize_x8(const float *x, int64_t m, int64_t k, int64_t g, int8_t *q, float *d, int16_t *s, float *ds) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t i = 0; i < m; i++) {
    for (int64_t c = 0; c < k; c += g) {
      const float *v = x + i * k + c;
      __m256 mx = _mm256_setzero_ps();
      for (int64_t l = 0; l < g; l += 8) {
        mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(v + l), magnitude));
      }
      __m128 t = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
      t = _mm_max_ps(t, _mm_movehl_ps(t, t));
      const float amax = _mm_cvtss_f32(_mm_max_ss(t, _mm_movehdup_ps(t)));
      const __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
      int total = 0;
      for (int64_t l = 0; l < g; l += 16) {
        const __m256i a = _mm256_cvtps_epi32(
            _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(v + l), id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m256i b = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(v + l + 8), id),
                                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        /* int32 to int16 packs per 128-bit lane (a0-3 b0-3 a4-7 b4-7); the permute restores order */
        const __m256i h = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);
        _mm_storeu_si128((__m128i *)(q + i * k + c + l),
                         _mm_packs_epi16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
        const __m256i ab = _mm256_add_epi32(a, b);
        __m128i u = _mm_add_epi32(_mm256_castsi256_si128(ab), _mm256_extracti128_si256(ab, 1));
        u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0x4e));
        u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0xb1));
        const int sum = _mm_cvtsi128_si32(u);
        s[(i * k + c + l) / 16] = (int16_t)sum;
        total += sum;
      }
      const float dg = amax / 127.0f;
      d[(i * k + c) / g] = dg;
      ds[(i * k + c) / g] = dg * (float)total;
    }
  }
}

/* x8_end adds the block's integer sums times factor into acc. */
GV_INLINE __m256 x8_end(__m256 acc, __m256i sums, float factor) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(factor), acc);
}

/* x8_shl shifts the 16-bit lanes of v left by s bits (right by -s). */
GV_INLINE __m256i x8_shl(__m256i v, const int s) { return s >= 0 ? _mm256_slli_epi16(v, s) : _mm256_srli_epi16(v, -s); }

/* Q4_K (Q5 = 0): chunk j's 32 bytes give sub-block 2j (low nibbles) and 2j+1 (high); the mins
 * meet the sums of the activation codes, two sums of 16 per sub-block. Q5_K (Q5 = 1): those
 * nibbles with bit 2j (low) or 2j+1 (high) of the fifth-bit bytes moved to bit 4 (16-bit shifts
 * of at most 4 bits, masked per byte: no bit crosses into the other byte's bit 4). */
GV_INLINE void k45_x8(const int MR, const int Q5, const uint8_t *blk, const x8_blk *x, __m256 *acc) {
  uint64_t sc, mn;
  k4_bytes(blk, &sc, &mn);
  const float d = gv_half(blk), dmin = gv_half(blk + 2);
  const __m128i mb = _mm_cvtsi64_si128((long long)mn);
  const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb)), low = _mm256_set1_epi8(15);
  const __m256i qh = x8_load(blk + 16), bit4 = _mm256_set1_epi8(16); /* Q5 only */
  __m256i is[4];
  GV_UNROLL for (int i = 0; i < MR; i++) { is[i] = _mm256_setzero_si256(); }
  GV_UNROLL for (int j = 0; j < 4; j++) {
    const __m256i v = x8_load(blk + (Q5 ? 48 : 16) + 32 * j);
    __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    if (Q5) {
      lo = _mm256_or_si256(lo, _mm256_and_si256(x8_shl(qh, 4 - 2 * j), bit4));
      hi = _mm256_or_si256(hi, _mm256_and_si256(x8_shl(qh, 3 - 2 * j), bit4));
    }
    const __m256i sa = _mm256_set1_epi16((short)(sc >> (16 * j) & 0xff));
    const __m256i sb = _mm256_set1_epi16((short)(sc >> (16 * j + 8) & 0xff));
    GV_UNROLL for (int i = 0; i < MR; i++) {
      is[i] = _mm256_add_epi32(is[i], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x8_load(x[i].q + 64 * j)), sa));
      is[i] = _mm256_add_epi32(is[i], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x8_load(x[i].q + 64 * j + 32)), sb));
    }
  }
  GV_UNROLL for (int i = 0; i < MR; i++) {
    acc[i] = x8_end(acc[i], is[i], d * x[i].d);
    acc[i] = x8_end(acc[i], _mm256_madd_epi16(x8_load(x[i].s), mins), -(dmin * x[i].d));
  }
}
GV_INLINE void q4_k_x8(const int MR, const uint8_t *blk, const x8_blk *x, __m256 *acc) { k45_x8(MR, 0, blk, x, acc); }
GV_INLINE void q5_k_x8(const int MR, const uint8_t *blk, const x8_blk *x, __m256 *acc) { k45_x8(MR, 1, blk, x, acc); }

/* x8_total returns a vector of the sum of v's lanes (exact: int32 sums of a block) in lane 0, zeros
 * in the others. */
GV_INLINE __m256i x8_total(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm256_zextsi128_si256(_mm_blend_epi32(_mm_setzero_si128(), s, 1));
}

/* Q6_K: the 6-bit codes unsigned (q + 32, as stored), times the activation codes, times the scale
 * of each 16 (lanes 0-7 of a product take sub-block t, lanes 8-15 t+1: the 32-bit lane holding
 * scales t and t+1, broadcast, then split by a byte shuffle); minus 32 times the scales times the
 * sums of the activation codes. Lane l of the products holds elements 4l..4l+3 of every 32, lane
 * l of the offset sub-blocks 2l and 2l+1: neither is the other's part, and an outlier's large
 * terms would cancel only across lanes, after the float scale had rounded the block's other
 * terms away; so the block's integer difference is summed before it meets the scale. */
#if GV_N == 16
/* x8_fold adds the two 256-bit halves of v. */
GV_INLINE __m256i x8_fold(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/* 512 bits: codes q[0]|q[1] and q[2]|q[3] of each half as two vectors (64 activation codes each,
 * in element order), the int16 lanes' scales (one per 16 codes: t .. t+3) by one permute; the
 * int32 sums of the two halves, added, are the 256-bit path's lane for lane (integer sums,
 * exact), so the float work and the results are its own, bit for bit (Q4_K and Q5_K keep their
 * 256-bit blocks: the 512-bit form did not pay for them, docs/ggml.md). */
GV_INLINE void q6_k_x8(const int MR, const uint8_t *blk, const x8_blk *x, __m256 *acc) {
  const float d = gv_half(blk + 208);
  const __m128i sb = _mm_loadu_si128((const __m128i *)(blk + 192));
  const __m256i scales = _mm256_cvtepi8_epi16(sb);
  const __m512i scales512 = _mm512_castsi256_si512(scales);
  const __m512i low = _mm512_set1_epi8(15), top = _mm512_set1_epi8(48);
  /* int16 lane l of a product of 64 codes takes scale (l / 8) past the first */
  const __m512i quarter = _mm512_srli_epi16(
      _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6,
                       5, 4, 3, 2, 1, 0),
      3);
  __m512i is[4];
  GV_UNROLL for (int i = 0; i < MR; i++) { is[i] = _mm512_setzero_si512(); }
  GV_UNROLL for (int h = 0; h < 2; h++) {
    const __m512i ab = _mm512_loadu_si512(blk + 64 * h);
    const __m256i c = x8_load(blk + 128 + 32 * h);
    const __m512i c01 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_slli_epi16(c, 4)), _mm256_slli_epi16(c, 2), 1);
    const __m512i c23 = _mm512_inserti64x4(_mm512_castsi256_si512(c), _mm256_srli_epi16(c, 2), 1);
    __m512i q[2];
    q[0] = _mm512_or_si512(_mm512_and_si512(ab, low), _mm512_and_si512(c01, top));
    q[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ab, 4), low), _mm512_and_si512(c23, top));
    GV_UNROLL for (int j = 0; j < 2; j++) {
      const int t = 8 * h + 4 * j;
      const __m512i st = _mm512_permutexvar_epi16(_mm512_add_epi16(quarter, _mm512_set1_epi16((short)t)), scales512);
      GV_UNROLL for (int i = 0; i < MR; i++) {
        const __m512i p = _mm512_maddubs_epi16(q[j], _mm512_loadu_si512(x[i].q + 128 * h + 64 * j));
        is[i] = _mm512_add_epi32(is[i], _mm512_madd_epi16(p, st));
      }
    }
  }
  GV_UNROLL for (int i = 0; i < MR; i++) {
    const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(x8_load(x[i].s), scales), 5);
    acc[i] = x8_end(acc[i], x8_total(_mm256_sub_epi32(x8_fold(is[i]), offset)), d * x[i].d);
  }
}
#else
GV_INLINE void q6_k_x8(const int MR, const uint8_t *blk, const x8_blk *x, __m256 *acc) {
  const float d = gv_half(blk + 208);
  const __m256i scales = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
  const __m256i split = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
                                         2, 3, 2, 3, 2, 3);
  const __m256i low = _mm256_set1_epi8(15), top = _mm256_set1_epi8(48);
  __m256i is[4];
  GV_UNROLL for (int i = 0; i < MR; i++) { is[i] = _mm256_setzero_si256(); }
  GV_UNROLL for (int h = 0; h < 2; h++) {
    const __m256i a = x8_load(blk + 64 * h), b = x8_load(blk + 64 * h + 32), c = x8_load(blk + 128 + 32 * h);
    __m256i q[4];
    q[0] = _mm256_or_si256(_mm256_and_si256(a, low), _mm256_and_si256(_mm256_slli_epi16(c, 4), top));
    q[1] = _mm256_or_si256(_mm256_and_si256(b, low), _mm256_and_si256(_mm256_slli_epi16(c, 2), top));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), low), _mm256_and_si256(c, top));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), low),
                           _mm256_and_si256(_mm256_srli_epi16(c, 2), top));
    GV_UNROLL for (int j = 0; j < 4; j++) {
      const int t = 8 * h + 2 * j;
      const __m256i st = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(scales, _mm256_set1_epi32(t / 2)), split);
      GV_UNROLL for (int i = 0; i < MR; i++) {
        const __m256i p = _mm256_maddubs_epi16(q[j], x8_load(x[i].q + 128 * h + 32 * j));
        is[i] = _mm256_add_epi32(is[i], _mm256_madd_epi16(p, st));
      }
    }
  }
  GV_UNROLL for (int i = 0; i < MR; i++) {
    const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(x8_load(x[i].s), scales), 5);
    acc[i] = x8_end(acc[i], x8_total(_mm256_sub_epi32(is[i], offset)), d * x[i].d);
  }
}
#endif

/* GV_X8_NK(T) defines T_x8_nk, the chunk kernel over T_x8_rows(MR, ...): activation rows four
 * at a time. */
#define GV_X8_NK(T)                                                                                                    \
  static GV_FN void T##_x8_nk(const qk_prod *p, int64_t n0, int64_t n1, void *scratch) {                               \
    (void)scratch;                                                                                                     \
    for (int64_t i0 = 0; i0 < p->m; i0 += 4) {                                                                         \
      QK_SWITCH4(QK_MIN(4, p->m - i0), T##_x8_rows, p, n0, n1, i0)                                                     \
    }                                                                                                                  \
  }

/* GV_X8_KERNEL(T) defines T_x8_nk: the fused kernel of the integer route, activation rows
 * four at a time, each output row of the chunk one at a time. */
#define GV_X8_KERNEL(T)                                                                                                \
  GV_INLINE void T##_x8_rows(const int MR, const qk_prod *p, int64_t n0, int64_t n1, int64_t i0) {                     \
    const int64_t nb = p->k / QK_BS_##T;                                                                               \
    for (int64_t n = n0; n < n1; n++) {                                                                                \
      const uint8_t *row = p->w + n * p->ldw;                                                                          \
      __m256 acc[4];                                                                                                   \
      GV_UNROLL for (int i = 0; i < MR; i++) { acc[i] = _mm256_setzero_ps(); }                                         \
      for (int64_t b = 0; b < nb; b++) {                                                                               \
        const uint8_t *blk = row + b * QK_BB_##T;                                                                      \
        GV_UNROLL for (int o = 0; o < QK_BB_##T; o += 64) { _mm_prefetch((const char *)blk + GV_PFD + o, _MM_HINT_T0); } \
        x8_blk x[4];                                                                                                   \
        GV_UNROLL for (int i = 0; i < MR; i++) { x[i] = x8_at(p, i0 + i, b, QK_BS_##T); }                              \
        T##_x8(MR, blk, x, acc);                                                                                       \
      }                                                                                                                \
      GV_UNROLL for (int i = 0; i < MR; i++) { p->y[(i0 + i) * p->n + n] = x8_hsum(acc[i]); }                          \
    }                                                                                                                  \
  }                                                                                                                    \
  GV_X8_NK(T)

GV_X8_KERNEL(q4_k)
GV_X8_KERNEL(q5_k)
GV_X8_KERNEL(q6_k)

/* ---- the integer route of the blocks of 32 ----
 *
 * A block's 32 codes as bytes in element order meet the 32 activation codes of its group in one
 * vpmaddubsw (unsigned times signed, in pairs) and one vpmaddwd (pairs again, to 8 int32 lanes):
 * the codes as stored, unsigned, their offset (Q4_0's -8d, Q5_0's -16d, Q4_1's and Q5_1's m) met
 * apart. Q8_0 keeps the float route: it streams near the bandwidth limit there already, and its
 * exact products keep a Q8_0 head's greedy choices. Blocks go two a step, each with its own accumulators (per activation row, one
 * for the even blocks of the row, one for the odd), so consecutive blocks' float work does not
 * wait on one chain. The offset m of Q4_1 and Q5_1 meets the sum of the group's activation codes
 * (its two sums of 16), m * d_x * sum, in a lane of its own per block parity. */

/* nibbles32 returns the 32 4-bit codes of the 16 bytes at q: low nibbles (elements 0-15), then
 * the high ones (16-31): the bytes in both halves, the upper half shifted by 4, then masked. */
GV_INLINE __m256i nibbles32(const uint8_t *q) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q));
  return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(15));
}

#if GV_N == 16
/* with_fifth32 returns c plus 16 in byte j where bit j of the little-endian 32 bits at p is set:
 * the word is a byte mask (AVX-512BW; a saturating add, as SIMDe offers, the sums below 32). */
GV_INLINE __m256i with_fifth32(__m256i c, const uint8_t *p) {
  uint32_t h;
  memcpy(&h, p, 4);
  return _mm256_mask_adds_epi8(c, (__mmask32)h, c, _mm256_set1_epi8(16));
}
#else
/* with_fifth32 returns c with 16 added in byte j where bit j of the little-endian 32 bits at p is
 * set: the word broadcast, byte j taking its byte j/8, tested against bit j%8. */
GV_INLINE __m256i with_fifth32(__m256i c, const uint8_t *p) {
  uint32_t h;
  memcpy(&h, p, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32((int32_t)h), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2,
                                                      2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
  return _mm256_or_si256(c, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                                             _mm256_set1_epi8(16)));
}
#endif

/* The codes of a block of 32 for the integer route, as stored, unsigned (the offsets -8d, m, -16d,
 * m of Q4_0, Q4_1, Q5_0 and Q5_1 apart). The scale d is the half at 0, the offset m of Q4_1 and
 * Q5_1 that at 2. */
GV_INLINE __m256i q4_0_c32(const uint8_t *b) { return nibbles32(b + 2); }
GV_INLINE __m256i q5_0_c32(const uint8_t *b) { return with_fifth32(nibbles32(b + 6), b + 2); }
GV_INLINE __m256i q4_1_c32(const uint8_t *b) { return nibbles32(b + 4); }
GV_INLINE __m256i q5_1_c32(const uint8_t *b) { return with_fifth32(nibbles32(b + 8), b + 4); }

/* dot32 returns the products of the unsigned codes c (< 32) with the 32 activation codes at xq,
 * summed to 8 int32 lanes: exact (no pair of vpmaddubsw saturates). */
GV_INLINE __m256i dot32(__m256i c, const int8_t *xq) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(c, x8_load(xq)), _mm256_set1_epi16(1));
}

/* halves_at returns the halves at p, p + BB, ..., of cnt (up to 8) consecutive blocks of BB bytes
 * as floats, zeros beyond cnt: F16C converts them exactly, subnormal halves to normal floats, so
 * a caller's DAZ mode has nothing to flush. Full chunks load them into lanes directly (a gather is
 * slower on AMD's cores, and half stores read back as one vector stall the store forwarding). */
GV_INLINE __m256 halves_at(const uint8_t *p, const int BB, int cnt) {
  if (cnt == 8) {
    return _mm256_cvtph_ps(_mm_setr_epi16(half_at(p), half_at(p + BB), half_at(p + 2 * BB), half_at(p + 3 * BB),
                                          half_at(p + 4 * BB), half_at(p + 5 * BB), half_at(p + 6 * BB),
                                          half_at(p + 7 * BB)));
  }
  __m128i h = _mm_setzero_si128();
  for (int j = cnt - 1; j >= 0; j--) { /* the last block first: each shift moves the others up a lane */
    h = _mm_insert_epi16(_mm_bslli_si128(h, 2), half_at(p + j * BB), 0);
  }
  return _mm256_cvtph_ps(h);
}

/* GV_X32_KERNEL(T, OFF) defines T_x8_nk for a type of 32 (QK_BB_T bytes a block; OFF the offset
 * of its codes: 1 the stored m, -8 or -16 that many times d): activation rows up to four at a time, each output row of
 * the chunk one at a time, its blocks eight at a time (the last chunk shorter): their scales (and
 * offsets) gathered and converted together, times the activations' scales (d * d_x per block and
 * row), then the blocks two a step. */
#define GV_X32_KERNEL(T, OFF)                                                                                          \
  GV_INLINE void T##_x8_pair(const int MR, const int TWO, const uint8_t *blk, int64_t b, const int8_t **xq,            \
                             const float (*sc)[8], int j, __m256 (*acc)[2]) {                                          \
    _mm_prefetch((const char *)blk + GV_PFD, _MM_HINT_T0);                                                             \
    if (TWO && 2 * QK_BB_##T > 64) {                                                                                   \
      _mm_prefetch((const char *)blk + GV_PFD + 64, _MM_HINT_T0);                                                      \
    }                                                                                                                  \
    const __m256i c0 = T##_c32(blk), c1 = TWO ? T##_c32(blk + QK_BB_##T) : c0;                                         \
    GV_UNROLL for (int i = 0; i < MR; i++) {                                                                           \
      const int8_t *q = xq[i] + 32 * b;                                                                                \
      const __m256 p0 = _mm256_cvtepi32_ps(dot32(c0, q));                                                  \
      acc[i][0] = _mm256_fmadd_ps(p0, _mm256_broadcast_ss(&sc[i][j]), acc[i][0]);                                      \
      if (TWO) {                                                                                                       \
        const __m256 p1 = _mm256_cvtepi32_ps(dot32(c1, q + 32));                                           \
        acc[i][1] = _mm256_fmadd_ps(p1, _mm256_broadcast_ss(&sc[i][j + 1]), acc[i][1]);                                \
      }                                                                                                                \
    }                                                                                                                  \
  }                                                                                                                    \
  GV_INLINE void T##_x8_chunk(const int MR, const int CNT, int cnt, const uint8_t *blk, int64_t b,                     \
                              const int8_t **xq, const float **xd, const float **xds, __m256 (*acc)[2], __m256 *accm) {\
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);                                                    \
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(CNT ? CNT : cnt), lane);                                 \
    const __m256 dw = halves_at(blk, QK_BB_##T, CNT ? CNT : cnt);                                                      \
    const __m256 mw =                                                                                                  \
        (OFF) == 1 ? halves_at(blk + 2, QK_BB_##T, CNT ? CNT : cnt) : _mm256_mul_ps(dw, _mm256_set1_ps((float)(OFF))); \
    float sc[4][8] __attribute__((aligned(32)));                                                                       \
    GV_UNROLL for (int i = 0; i < MR; i++) {                                                                           \
      _mm256_store_ps(sc[i], _mm256_mul_ps(dw, _mm256_maskload_ps(xd[i] + b, mask)));                                  \
      accm[i] = _mm256_fmadd_ps(mw, _mm256_maskload_ps(xds[i] + b, mask), accm[i]);                                    \
    }                                                                                                                  \
    gv_in_memory();                                                                                                    \
    if (CNT) {                                                                                                         \
      GV_UNROLL for (int j = 0; j < CNT; j += 2) { T##_x8_pair(MR, 1, blk + j * QK_BB_##T, b + j, xq, sc, j, acc); }   \
      return;                                                                                                          \
    }                                                                                                                  \
    int j = 0;                                                                                                         \
    for (; j + 2 <= cnt; j += 2) {                                                                                     \
      T##_x8_pair(MR, 1, blk + j * QK_BB_##T, b + j, xq, sc, j, acc);                                                  \
    }                                                                                                                  \
    if (j < cnt) {                                                                                                     \
      T##_x8_pair(MR, 0, blk + j * QK_BB_##T, b + j, xq, sc, j, acc);                                                  \
    }                                                                                                                  \
  }                                                                                                                    \
  GV_INLINE void T##_x8_rows(const int MR, const qk_prod *p, int64_t n0, int64_t n1, int64_t i0) {                     \
    const int64_t nb = p->k / 32;                                                                                      \
    const qk_x8 *a = &p->x8;                                                                                           \
    const int8_t *xq[4];                                                                                               \
    const float *xd[4], *xds[4];                                                                                       \
    GV_UNROLL for (int i = 0; i < MR; i++) {                                                                           \
      xq[i] = a->q + (i0 + i) * a->ldq;                                                                                \
      xd[i] = a->d + (i0 + i) * a->ldd;                                                                                \
      xds[i] = a->ds + (i0 + i) * a->ldd;                                                                              \
    }                                                                                                                  \
    for (int64_t n = n0; n < n1; n++) {                                                                                \
      const uint8_t *row = p->w + n * p->ldw;                                                                          \
      __m256 acc[4][2], accm[4];                                                                                       \
      GV_UNROLL for (int i = 0; i < MR; i++) { acc[i][0] = acc[i][1] = accm[i] = _mm256_setzero_ps(); }                \
      int64_t b = 0;                                                                                                   \
      for (; b + 8 <= nb; b += 8) {                                                                                    \
        T##_x8_chunk(MR, 8, 8, row + b * QK_BB_##T, b, xq, xd, xds, acc, accm);                                        \
      }                                                                                                                \
      if (b < nb) {                                                                                                    \
        T##_x8_chunk(MR, 0, (int)(nb - b), row + b * QK_BB_##T, b, xq, xd, xds, acc, accm);                            \
      }                                                                                                                \
      GV_UNROLL for (int i = 0; i < MR; i++) {                                                                         \
        p->y[(i0 + i) * p->n + n] = x8_hsum(_mm256_add_ps(acc[i][0], acc[i][1])) + x8_hsum(accm[i]);                 \
      }                                                                                                                \
    }                                                                                                                  \
  }                                                                                                                    \
  GV_X8_NK(T)

GV_X32_KERNEL(q4_0, -8)
GV_X32_KERNEL(q4_1, 1)
GV_X32_KERNEL(q5_0, -16)
GV_X32_KERNEL(q5_1, 1)

/* The fused kernels serve up to GV_MAX_M activation rows by default (the ISA's file sets it). */
#define GV_ROW(F, T)                                                                                                   \
  [F] = {.tile = T##_tile, .nk = {{.nk = T##_nk, .max_m = GV_MAX_M, .cap_m = INT64_MAX}}}
#define GV_ROW_X8(F, T)                                                                                                \
  [F] = {.tile = T##_tile, .nk = {{.nk = T##_x8_nk, .max_m = GV_MAX_M, .cap_m = INT64_MAX, .x8 = QK_BS_##T}}}

/* GV_ROW_X32(F, T, XM): a type of 32 by the integer route up to XM activation rows, by the float
 * route beyond (each where it measured the faster, docs/ggml.md). */
#define GV_ROW_X32(F, T, XM)                                                                                           \
  [F] = {.tile = T##_tile,                                                                                             \
         .nk = {{.nk = T##_x8_nk, .max_m = (XM), .cap_m = (XM), .x8 = QK_BS_##T},                                      \
                {.nk = T##_nk, .max_m = GV_MAX_M, .cap_m = INT64_MAX}}}

/* The GGML rows of the ISA's table: the integer route for the K-quants Q4_K, Q5_K and Q6_K and for
 * Q4_1, Q5_0 and Q5_1; for Q4_0 up to 2 rows, the float route beyond (its float route is the
 * lighter, the integer one gains only from sharing the weights' decode among few rows); Q8_0 by
 * the float route;
 * IQ4_NL by the float route; Q2_K and Q3_K through the generic driver, with the plain C tile. */
#define GV_GGML_ROWS                                                                                                   \
  GV_ROW_X32(QK_FMT_Q4_0, q4_0, 2), GV_ROW_X8(QK_FMT_Q4_1, q4_1), GV_ROW_X8(QK_FMT_Q5_0, q5_0),                        \
      GV_ROW_X8(QK_FMT_Q5_1, q5_1), GV_ROW(QK_FMT_Q8_0, q8_0), [QK_FMT_Q2_K] = {.tile = qk_ggml_tile},                 \
      [QK_FMT_Q3_K] = {.tile = qk_ggml_tile}, GV_ROW_X8(QK_FMT_Q4_K, q4_k), GV_ROW_X8(QK_FMT_Q5_K, q5_k),              \
      GV_ROW_X8(QK_FMT_Q6_K, q6_k), GV_ROW(QK_FMT_IQ4_NL, iq4_nl)
