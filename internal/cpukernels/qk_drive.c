/* qk_drive.c: the generic tiled drivers. They decode a small tile of the weight to float32 in the
 * thread's scratch (L1/L2 sized) with the format's tile function and hand it to the ISA's float32
 * micro-kernel, which reuses it for every activation row: each weight byte is read and decoded
 * once per call whatever m is. Every format and ISA can run through them; the fused chunk kernels
 * of the table replace them where a decode in registers is faster (small m, table lookups). */
#include "qk_internal.h"

/* Columns of one kn tile. For a few activation rows a tile is 32 x 128 float32 (16 KiB, in L1);
 * for more, 128 x 64 (32 KiB): the micro-kernel then sweeps every activation row over it, and the
 * deeper tile halves the loads and stores of the partial sums per multiply-add (faster on Zen 4
 * than 32 x 128 or 64 x 64). */
#define KN_TILE_COLS 128
#define KN_TILE_COLS_LARGE_M 64

int64_t qk_kn_tile_rows(int64_t m) { return m > 4 ? 128 : 32; }
/* nk tiles: NK_ROWS output columns by up to NK_KB contracted elements (or all of k for few
 * activation rows, so each stored row streams once from start to end). The activation rows go
 * over the tiles in blocks whose panel (rows × tile elements) is at most NK_PANEL_BYTES, so it
 * stays in L2 while the tiles stream past it: at 512 rows the whole panel (2 MiB) fell out of it
 * and the products ran 1.1-1.9x slower than in blocks (docs/performance.md). */
#define NK_ROWS 4
#define NK_KB 1024
#define NK_PANEL_BYTES (1 << 20)

void qk_f32_tile(const qk_prod *p, int64_t r0, int64_t nr, int64_t c0, int64_t cnt, float *out, int64_t ldo) {
  for (int64_t r = 0; r < nr; r++) {
    memcpy(out + r * ldo, (const float *)(p->w + (r0 + r) * p->ldw) + c0, (size_t)cnt * sizeof(float));
  }
}

/* prefetch_next asks for the bytes of the next tile (stored rows [sb, sb+ns), columns [c0, c0+pc))
 * while this one is decoded and multiplied: the tiles walk dozens of rows in short segments, which
 * the hardware prefetchers do not follow. */
static void prefetch_next(const qk_prod *p, int64_t sb, int64_t ns, int64_t c0, int64_t pc) {
  const int64_t first = c0 * p->elem_bits / 8, bytes = (pc * p->elem_bits + 7) / 8;
  for (int64_t r = 0; r < ns; r++) {
    const char *row = (const char *)p->w + (sb + r) * p->ldw + first;
    for (int64_t b = 0; b < bytes; b += 64) {
      __builtin_prefetch(row + b);
    }
  }
}

void qk_kn_generic(const qk_ops *ops, const qk_prod *p, int64_t s0, int64_t s1, int64_t c0, int64_t c1, float *C,
                   void *scratch) {
  const int64_t M = p->m;
  const int rps = p->rps;
  const qk_tile_fn tile_fn = ops->fmt[p->fmt].tile;
  float *tile = (float *)scratch;
  int64_t tile_rows = qk_kn_tile_rows(M);
  int64_t P = M > 4 ? KN_TILE_COLS_LARGE_M : KN_TILE_COLS;
  const int direct = p->fmt == QK_FMT_F32 && M <= 4;
  if (direct) {
    /* A gemv streams whole rows of its panel, a few at a time: the activations need no reuse. */
    tile_rows = 8;
    P = c1 - c0;
  }
  const int64_t SB = QK_MAX(1, tile_rows / rps);
  for (int64_t sb = s0; sb < s1; sb += SB) {
    const int64_t ns = QK_MIN(SB, s1 - sb);
    const float *A = p->x + sb * rps;
    for (int64_t c = c0; c < c1; c += P) {
      const int64_t pc = QK_MIN(P, c1 - c);
      if (c + P < c1) {
        prefetch_next(p, sb, ns, c + P, QK_MIN(P, c1 - c - P));
      }
      const float *B = tile;
      int64_t ldb = P;
      if (direct) {
        B = (const float *)(p->w + sb * p->ldw) + c;
        ldb = p->n;
      } else {
        tile_fn(p, sb, ns, c, pc, tile, P);
      }
      ops->mk_kn(M, ns * rps, pc, A, p->ldx, B, ldb, C + c, p->ldp);
    }
  }
}

void qk_post_apply(const qk_prod *p, int64_t n0, int64_t n1) {
  if (p->post.kind == QK_SCALE_NONE) {
    return;
  }
  for (int64_t i = 0; i < p->m; i++) {
    float *y = p->y + i * p->n;
    if (p->post.kind == QK_SCALE_TENSOR) {
      const float s = p->post.tensor;
      for (int64_t j = n0; j < n1; j++) {
        y[j] *= s;
      }
    } else {
      const float *s = p->post.col;
      for (int64_t j = n0; j < n1; j++) {
        y[j] *= s[j];
      }
    }
  }
}

/* From NK_T_MIN_M activation rows (compute-bound) the nk driver turns its tiles over: NK_T_ROWS
 * stored rows by NK_T_KB elements (whole blocks of every GGML type; an NF4 tile may start and end
 * inside a block) are decoded, transposed into a kn panel and multiplied by the ISA's mk_kn,
 * which keeps more sums in registers a step than the dot-product tiles of mk_nk and needs no
 * reduction across lanes. With fewer rows the transposition costs more than it saves
 * (docs/performance.md). Every sum then runs over k in order, whatever the chunks. Each tile is
 * decoded and transposed once a product, all the activation rows going over it (blocks of rows
 * kept in L2 measured no faster at 2048 rows). */
#define NK_T_MIN_M 128
#define NK_T_ROWS 64
#define NK_T_KB 256

static int nk_turned(const qk_ops *ops, const qk_prod *p) { return p->m >= NK_T_MIN_M && ops->transpose != NULL; }

int64_t qk_nk_generic_chunk(const qk_ops *ops, const qk_prod *p, int threads) {
  if (!nk_turned(ops, p)) {
    return 0;
  }
  /* whole panels, in the size that spreads them most evenly over the threads */
  int64_t best = NK_T_ROWS, most = INT64_MAX;
  for (int64_t rows = NK_T_ROWS; rows >= NK_T_ROWS / 2; rows -= 16) {
    const int64_t per_thread = ((p->srows + rows - 1) / rows + threads - 1) / threads * rows;
    if (per_thread < most) {
      best = rows;
      most = per_thread;
    }
  }
  return best;
}

static void nk_turned_tiles(const qk_ops *ops, const qk_prod *p, int64_t n0, int64_t n1, float *tile) {
  const int64_t M = p->m, K = p->k, N = p->n;
  const qk_tile_fn tile_fn = ops->fmt[p->fmt].tile;
  float *panel = tile + NK_T_ROWS * NK_T_KB;
  for (int64_t i = 0; i < M; i++) {
    memset(p->y + i * N + n0, 0, (size_t)(n1 - n0) * sizeof(float));
  }
  for (int64_t r = n0; r < n1; r += NK_T_ROWS) {
    const int64_t nr = QK_MIN(NK_T_ROWS, n1 - r);
    for (int64_t k0 = 0; k0 < K; k0 += NK_T_KB) {
      const int64_t kc = QK_MIN(NK_T_KB, K - k0);
      tile_fn(p, r, nr, k0, kc, tile, NK_T_KB);
      ops->transpose(tile, NK_T_KB, nr, kc, panel, NK_T_ROWS);
      ops->mk_kn(M, kc, nr, p->x + k0, p->ldx, panel, NK_T_ROWS, p->y + r, N);
    }
  }
}

void qk_nk_generic(const qk_ops *ops, const qk_prod *p, int64_t n0, int64_t n1, void *scratch) {
  const int64_t M = p->m, K = p->k, N = p->n;
  const qk_tile_fn tile_fn = ops->fmt[p->fmt].tile;
  float *tile = (float *)scratch;
  if (nk_turned(ops, p)) {
    nk_turned_tiles(ops, p, n0, n1, tile);
    return;
  }
  int64_t KB = NK_KB;
  if (M <= 4 && (int64_t)NK_ROWS * K * 4 <= QK_CHUNK_SCRATCH) {
    KB = K;
  }
  for (int64_t i = 0; i < M; i++) {
    memset(p->y + i * N + n0, 0, (size_t)(n1 - n0) * sizeof(float));
  }
  if (p->fmt == QK_FMT_F32 && M <= 4) {
    /* A gemv streams its stored rows as they are, a few in step: nothing to decode or reuse. */
    const int64_t ldb = p->ldw / (int64_t)sizeof(float);
    for (int64_t r = n0; r < n1; r += NK_ROWS) {
      ops->mk_nk(M, QK_MIN(NK_ROWS, n1 - r), K, p->x, p->ldx, (const float *)(p->w + r * p->ldw), ldb, p->y + r, N);
    }
    return;
  }
  /* a row's sum is the same in any block: the micro-kernel keeps one set of sums per row */
  const int64_t most = QK_MAX(4, NK_PANEL_BYTES / (QK_MIN(KB, K) * (int64_t)sizeof(float)));
  const int64_t blocks = (M + most - 1) / most;
  const int64_t MB = ((M + blocks - 1) / blocks + 3) / 4 * 4; /* even blocks of whole micro-tiles */
  for (int64_t i0 = 0; i0 < M; i0 += MB) {
    const int64_t mb = QK_MIN(MB, M - i0);
    const float *x = p->x + i0 * p->ldx;
    float *y = p->y + i0 * N;
    for (int64_t k0 = 0; k0 < K; k0 += KB) {
      const int64_t kc = QK_MIN(KB, K - k0);
      for (int64_t r = n0; r < n1; r += NK_ROWS) {
        const int64_t nr = QK_MIN(NK_ROWS, n1 - r);
        tile_fn(p, r, nr, k0, kc, tile, KB);
        ops->mk_nk(mb, nr, kc, x + k0, p->ldx, tile, KB, y + r, N);
      }
    }
  }
}
