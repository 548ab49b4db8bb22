/* ffi.c: the kernels as typed XLA FFI handlers (internal/xlaffi's qffi.h), one per custom-call
 * target of the kernel table (internal/kernelreg; its operand indices in the generated
 * qk_targets.h). Each handler checks the operands' dtypes and shapes against the call's contract,
 * then runs the kernel; a mismatch or a kernel error is an error of the XLA execution, never a
 * crash. */
#include <stdatomic.h>
#include <string.h>

#include "qffi.h"
#include "qk_internal.h"
#include "qk_targets.h"
#include "quanta_kernels.h"

_Static_assert((int)QK_ATTR_SCALE_NONE == (int)QK_SCALE_NONE && (int)QK_ATTR_SCALE_TENSOR == (int)QK_SCALE_TENSOR &&
                   (int)QK_ATTR_SCALE_K == (int)QK_SCALE_K && (int)QK_ATTR_SCALE_N == (int)QK_SCALE_N,
               "the scale_kind attribute values are the kernels' scale kinds");
_Static_assert((int)QK_ARG_NF4_KN_PACKED == (int)QK_ARG_NF4_NK_PACKED &&
                   (int)QK_ARG_NF4_KN_ABSMAX == (int)QK_ARG_NF4_NK_ABSMAX &&
                   (int)QK_ARG_INT8_KN_CODES == (int)QK_ARG_INT8_NK_CODES &&
                   (int)QK_ARG_INT8_KN_SCALE == (int)QK_ARG_INT8_NK_SCALE &&
                   (int)QK_ARG_TWOBIT_KN_PACKED == (int)QK_ARG_ONEBIT_KN_PACKED &&
                   (int)QK_ARG_TWOBIT_KN_SCALE == (int)QK_ARG_ONEBIT_KN_SCALE,
               "the two layouts of a format share one handler, so one operand order");

/* ---- XLA's intra-op pool as the kernels' scheduler (QK_TUNE_XLA_POOL) ---- */

typedef struct {
  qk_task task;
  void *ctx;
  _Atomic int no_scratch; /* a thread could not allocate its scratch: its chunks did not run */
} xla_chunks;

static void xla_range(void *arg, int64_t begin, int64_t end) {
  xla_chunks *c = (xla_chunks *)arg;
  void *scratch = qk_thread_scratch();
  if (scratch == NULL) {
    atomic_store(&c->no_scratch, 1);
    return;
  }
  for (int64_t i = begin; i < end; i++) {
    c->task(c->ctx, i, 0, scratch);
  }
}

static int xla_scheduler(void *frame, int64_t nchunks, int nthreads, qk_task task, void *ctx) {
  (void)nthreads;
  xla_chunks c = {task, ctx, 0};
  qffi_error *err = qffi_parallel_for((qffi_frame *)frame, nchunks, 1, xla_range, &c);
  return err == NULL && atomic_load(&c.no_scratch) == 0 ? QK_OK : QK_ERR_NOMEM;
}

/* QK_HANDLER defines the handler of target name over impl, whose kernels run on XLA's intra-op pool
 * when QK_TUNE_XLA_POOL is on (else on quanta's). */
#define QK_HANDLER(name, impl)                                                                                         \
  static qffi_error *name##_pooled(qffi_frame *frame) {                                                                \
    const int xla = qk_tuned(QK_TUNE_XLA_POOL) != 0;                                                                   \
    if (xla) {                                                                                                         \
      qk_set_scheduler(xla_scheduler, frame);                                                                         \
    }                                                                                                                  \
    qffi_error *err = impl(frame);                                                                                     \
    if (xla) {                                                                                                         \
      qk_set_scheduler(NULL, NULL);                                                                                    \
    }                                                                                                                  \
    return err;                                                                                                        \
  }                                                                                                                    \
  QFFI_HANDLER(name, name##_pooled)

/* qk_dtype maps a float buffer's dtype to the kernels' element types, -1 if none. */
static int qk_dtype(qffi_dtype d) {
  switch (d) {
    case QFFI_F32: return QK_F32;
    case QFFI_BF16: return QK_BF16;
    case QFFI_F16: return QK_F16;
    default: return -1;
  }
}

/* kernel_status is the handler's result for the kernel's status: NULL for QK_OK, else an error. */
static qffi_error* kernel_status(qffi_frame* frame, int status) {
  if (status == QK_OK) {
    return NULL;
  }
  return qffi_errorf(frame, QFFI_INVALID_ARGUMENT, "%s: the kernel refused its arguments: %s", qffi_target(),
                     qk_status_string(status));
}

static qffi_error* bad_shapes(qffi_frame* frame, const char* contract) {
  return qffi_errorf(frame, QFFI_INVALID_ARGUMENT, "%s: operand shapes do not fit the call; accepted: %s", qffi_target(),
                     contract);
}

/* activations reads x (M, K) float32 or bfloat16 and the result y (M, N) float32. */
static qffi_error* activations(qffi_frame* frame, qffi_buffer* x, qffi_buffer* y) {
  qffi_error* err;
  if ((err = qffi_arg(frame, 0, x)) || (err = qffi_ret(frame, 0, y)) || (err = qffi_expect(frame, y, "y", QFFI_F32, 2))) {
    return err;
  }
  if (x->rank != 2 || (x->dtype != QFFI_F32 && x->dtype != QFFI_BF16) || y->dims[0] != x->dims[0]) {
    return qffi_errorf(frame, QFFI_INVALID_ARGUMENT, "%s: activations %s of rank %lld for a result (%lld, %lld); accepted: "
                       "x (M, K) float32 or bfloat16 and y (M, N) float32", qffi_target(), qffi_dtype_name(x->dtype),
                       (long long)x->rank, (long long)y->dims[0], (long long)y->dims[1]);
  }
  return NULL;
}

/* weight_operands reads x and y (activations) and the weight, operand i of rank 2 named what,
 * whose dtype must be dtype. */
static qffi_error* weight_operands(qffi_frame* frame, qffi_buffer* x, qffi_buffer* y, int i, const char* what,
                                   qffi_dtype dtype, qffi_buffer* w) {
  qffi_error* err = activations(frame, x, y);
  if (!err) err = qffi_arg(frame, i, w);
  return err ? err : qffi_expect(frame, w, what, dtype, 2);
}

/* nf4 runs both NF4 layouts: args x, packed (rows, nb, bs/2), absmax (rows, nb). */
static qffi_error* nf4(qffi_frame* frame, int contracted) {
  qffi_buffer x = {0}, packed = {0}, absmax = {0}, y = {0};
  qffi_error* err;
  if ((err = activations(frame, &x, &y)) || (err = qffi_arg(frame, QK_ARG_NF4_KN_PACKED, &packed)) ||
      (err = qffi_arg(frame, QK_ARG_NF4_KN_ABSMAX, &absmax)) || (err = qffi_expect(frame, &packed, "packed", QFFI_U8, 3))) {
    return err;
  }
  const int64_t m = x.dims[0], k = x.dims[1], n = y.dims[1], bs = 2 * packed.dims[2];
  const int64_t rows = contracted ? n : k, span = contracted ? k : n;
  const int ad = qk_dtype(absmax.dtype);
  if (qffi_num_args(frame) != QK_ARG_NF4_KN_ABSMAX + 1 || ad < 0 || absmax.rank != 2 || packed.dims[0] != rows || absmax.dims[0] != rows ||
      bs <= 0 || absmax.dims[1] != packed.dims[1] || packed.dims[1] != (span + bs - 1) / bs) {
    return bad_shapes(frame, contracted ? "x (M, K), packed uint8 (N, ceil(K/bs), bs/2), absmax float (N, ceil(K/bs))"
                                        : "x (M, K), packed uint8 (K, ceil(N/bs), bs/2), absmax float (K, ceil(N/bs))");
  }
  const int x_dtype = qk_dtype(x.dtype);
  int st = contracted ? qk_nf4_nk(x.data, x_dtype, packed.data, absmax.data, ad, m, k, n, bs, y.data)
                      : qk_nf4_kn(x.data, x_dtype, packed.data, absmax.data, ad, m, k, n, bs, y.data);
  return kernel_status(frame, st);
}

static qffi_error* nf4_kn(qffi_frame* frame) { return nf4(frame, 0); }
static qffi_error* nf4_nk(qffi_frame* frame) { return nf4(frame, 1); }
QK_HANDLER(quanta_nf4_kn, nf4_kn)
QK_HANDLER(quanta_nf4_nk, nf4_nk)

/* scale reads the scale_kind attribute and, unless it is QK_SCALE_NONE, the scale operand i,
 * whose size must fit the kind: for the packed signs (signs != 0), float32 and no per-K kind. */
static qffi_error* scale(qffi_frame* frame, int i, int64_t k, int64_t n, int signs, int64_t* kind, qffi_buffer* s) {
  qffi_error* err;
  if ((err = qffi_attr_int(frame, QK_ATTR_SCALE_KIND, kind))) return err;
  memset(s, 0, sizeof(*s));
  if (*kind == QK_SCALE_NONE) {
    return qffi_num_args(frame) == i ? NULL : bad_shapes(frame, "no scale operand with scale_kind 0 (none)");
  }
  if ((err = qffi_arg(frame, i, s))) return err;
  const int64_t want = *kind == QK_SCALE_TENSOR ? 1 : *kind == QK_SCALE_K && !signs ? k : *kind == QK_SCALE_N ? n : -1;
  if (qffi_num_args(frame) != i + 1 || s->size != want || qk_dtype(s->dtype) < 0 || (signs && s->dtype != QFFI_F32)) {
    return bad_shapes(frame, signs ? "scale_kind 0 (none) and no scale operand, or a float32 scale of 1 (scale_kind 1) "
                                     "or N (scale_kind 3) values"
                                   : "scale_kind 0 (none) and no scale operand, or a float scale of 1 (scale_kind 1), K "
                                     "(scale_kind 2) or N (scale_kind 3) values");
  }
  return NULL;
}

/* int8 runs both int8 layouts: args x, w (K, N) or (N, K) int8, scale. */
static qffi_error* int8(qffi_frame* frame, int contracted) {
  qffi_buffer x = {0}, w = {0}, s = {0}, y = {0};
  int64_t kind;
  qffi_error* err;
  if ((err = weight_operands(frame, &x, &y, QK_ARG_INT8_KN_CODES, "codes", QFFI_S8, &w))) return err;
  const int64_t m = x.dims[0], k = x.dims[1], n = y.dims[1];
  if (w.dims[0] != (contracted ? n : k) || w.dims[1] != (contracted ? k : n)) {
    return bad_shapes(frame, contracted ? "x (M, K), w int8 (N, K)" : "x (M, K), w int8 (K, N)");
  }
  if ((err = scale(frame, QK_ARG_INT8_KN_SCALE, k, n, 0, &kind, &s))) return err;
  const int sd = kind == QK_SCALE_NONE ? QK_F32 : qk_dtype(s.dtype);
  int st = contracted ? qk_int8_nk(x.data, qk_dtype(x.dtype), w.data, s.data, sd, (int)kind, m, k, n, y.data)
                      : qk_int8_kn(x.data, qk_dtype(x.dtype), w.data, s.data, sd, (int)kind, m, k, n, y.data);
  return kernel_status(frame, st);
}

static qffi_error* int8_kn(qffi_frame* frame) { return int8(frame, 0); }
static qffi_error* int8_nk(qffi_frame* frame) { return int8(frame, 1); }
QK_HANDLER(quanta_int8_kn, int8_kn)
QK_HANDLER(quanta_int8_nk, int8_nk)

/* signs runs the packed-signs layouts: args x, packed (K/per, N) uint8, scale (float32). */
static qffi_error* signs(qffi_frame* frame, int per) {
  qffi_buffer x = {0}, packed = {0}, s = {0}, y = {0};
  int64_t kind;
  qffi_error* err;
  if ((err = weight_operands(frame, &x, &y, QK_ARG_TWOBIT_KN_PACKED, "packed", QFFI_U8, &packed))) return err;
  const int64_t m = x.dims[0], k = x.dims[1], n = y.dims[1];
  if (k % per != 0 || packed.dims[0] != k / per || packed.dims[1] != n) {
    return bad_shapes(frame, per == 4 ? "x (M, K), packed uint8 (K/4, N)" : "x (M, K), packed uint8 (K/8, N)");
  }
  if ((err = scale(frame, QK_ARG_TWOBIT_KN_SCALE, k, n, 1, &kind, &s))) return err;
  int st = per == 4 ? qk_twobit_kn(x.data, qk_dtype(x.dtype), packed.data, s.data, (int)kind, m, k, n, y.data)
                    : qk_onebit_kn(x.data, qk_dtype(x.dtype), packed.data, s.data, (int)kind, m, k, n, y.data);
  return kernel_status(frame, st);
}

static qffi_error* twobit_kn(qffi_frame* frame) { return signs(frame, 4); }
static qffi_error* onebit_kn(qffi_frame* frame) { return signs(frame, 8); }
QK_HANDLER(quanta_twobit_kn, twobit_kn)
QK_HANDLER(quanta_onebit_kn, onebit_kn)

/* ggml_type reads the ggml_type attribute and its block's elements and bytes. */
static qffi_error* ggml_type(qffi_frame* frame, int64_t* type, int64_t* bs, int64_t* bb) {
  qffi_error* err = qffi_attr_int(frame, QK_ATTR_GGML_TYPE, type);
  if (err) return err;
  if (*type < 0 || *type > 255 || qk_ggml_block_info((int)*type, bs, bb) != QK_OK) {
    return qffi_errorf(frame, QFFI_INVALID_ARGUMENT, "%s: ggml_type %lld; accepted: Q4_0 (2), Q4_1 (3), Q5_0 (6), Q5_1 (7), "
                       "Q8_0 (8), Q2_K (10), Q3_K (11), Q4_K (12), Q5_K (13), Q6_K (14), IQ4_NL (20)", qffi_target(),
                       (long long)*type);
  }
  return NULL;
}

/* ggml_nk runs x @ W^T of a GGML block type: args x, blocks (N, K/bs*blockBytes) uint8; attribute
 * ggml_type (ggml's type id). */
static qffi_error* ggml_nk(qffi_frame* frame) {
  qffi_buffer x = {0}, blocks = {0}, y = {0};
  int64_t type = -1, bs, bb;
  qffi_error* err;
  if ((err = weight_operands(frame, &x, &y, QK_ARG_GGML_NK_BLOCKS, "blocks", QFFI_U8, &blocks)) ||
      (err = ggml_type(frame, &type, &bs, &bb))) {
    return err;
  }
  const int64_t m = x.dims[0], k = x.dims[1], n = y.dims[1];
  if (qffi_num_args(frame) != QK_ARG_GGML_NK_BLOCKS + 1 || k % bs != 0 || blocks.dims[0] != n || blocks.dims[1] != k / bs * bb) {
    return bad_shapes(frame, "x (M, K), blocks uint8 (N, K/bs*blockBytes) with K a multiple of the type's block size bs "
                             "(blockBytes bytes a block)");
  }
  int st = qk_ggml_nk(x.data, qk_dtype(x.dtype), (int)type, blocks.data, m, k, n, y.data);
  return kernel_status(frame, st);
}
QK_HANDLER(quanta_ggml_nk, ggml_nk)

/* nf4_decode writes an NF4 weight in float32: args packed (rows, nb, bs/2), absmax (rows, nb);
 * result (rows, span) float32. */
static qffi_error* nf4_decode(qffi_frame* frame) {
  qffi_buffer packed = {0}, absmax = {0}, out = {0};
  qffi_error* err;
  if ((err = qffi_arg(frame, 0, &packed)) || (err = qffi_arg(frame, QK_ARG_NF4_DECODE_ABSMAX, &absmax)) ||
      (err = qffi_ret(frame, 0, &out)) || (err = qffi_expect(frame, &packed, "packed", QFFI_U8, 3)) ||
      (err = qffi_expect(frame, &out, "out", QFFI_F32, 2))) {
    return err;
  }
  const int64_t rows = out.dims[0], span = out.dims[1], bs = 2 * packed.dims[2];
  const int ad = qk_dtype(absmax.dtype);
  if (qffi_num_args(frame) != QK_ARG_NF4_DECODE_ABSMAX + 1 || ad < 0 || absmax.rank != 2 || packed.dims[0] != rows ||
      absmax.dims[0] != rows || bs <= 0 || absmax.dims[1] != packed.dims[1] || packed.dims[1] != (span + bs - 1) / bs) {
    return bad_shapes(frame, "packed uint8 (rows, ceil(span/bs), bs/2), absmax float (rows, ceil(span/bs)), result float32 "
                             "(rows, span)");
  }
  int st = qk_nf4_decode(packed.data, absmax.data, ad, rows, span, bs, out.data);
  return kernel_status(frame, st);
}
QK_HANDLER(quanta_nf4_decode, nf4_decode)

/* ggml_decode writes a GGML weight in float32: args blocks (rows, K/bs*blockBytes) uint8;
 * attribute ggml_type; result (rows, K) float32. */
static qffi_error* ggml_decode(qffi_frame* frame) {
  qffi_buffer blocks = {0}, out = {0};
  int64_t type = -1, bs, bb;
  qffi_error* err;
  if ((err = qffi_arg(frame, 0, &blocks)) || (err = qffi_ret(frame, 0, &out)) ||
      (err = qffi_expect(frame, &blocks, "blocks", QFFI_U8, 2)) || (err = qffi_expect(frame, &out, "out", QFFI_F32, 2)) ||
      (err = ggml_type(frame, &type, &bs, &bb))) {
    return err;
  }
  const int64_t rows = out.dims[0], k = out.dims[1];
  if (qffi_num_args(frame) != 1 || k % bs != 0 || blocks.dims[0] != rows || blocks.dims[1] != k / bs * bb) {
    return bad_shapes(frame, "blocks uint8 (rows, K/bs*blockBytes), result float32 (rows, K) with K a multiple of the "
                             "type's block size bs (blockBytes bytes a block)");
  }
  int st = qk_ggml_decode((int)type, blocks.data, rows, k, out.data);
  return kernel_status(frame, st);
}
QK_HANDLER(quanta_ggml_decode, ggml_decode)

_Static_assert((int)QK_ARG_F32_KN_W == (int)QK_ARG_F32_NK_W, "both dense products take w as operand 1");

/* dense runs x @ W of a dense weight: args x (M, K) float32, w float32 (K, N), or (N, K) for
 * x @ Wᵀ (transposed). */
static qffi_error* dense(qffi_frame* frame, int transposed) {
  qffi_buffer x = {0}, w = {0}, y = {0};
  qffi_error* err;
  if ((err = weight_operands(frame, &x, &y, QK_ARG_F32_KN_W, "w", QFFI_F32, &w))) return err;
  const int64_t m = x.dims[0], k = x.dims[1], n = y.dims[1];
  const int64_t rows = transposed ? n : k, cols = transposed ? k : n;
  if (qffi_num_args(frame) != QK_ARG_F32_KN_W + 1 || x.dtype != QFFI_F32 || w.dims[0] != rows || w.dims[1] != cols) {
    return bad_shapes(frame, transposed ? "x (M, K) float32, w float32 (N, K)" : "x (M, K) float32, w float32 (K, N)");
  }
  int st = (transposed ? qk_f32_nk : qk_f32_kn)(x.data, w.data, m, k, n, y.data);
  return kernel_status(frame, st);
}
static qffi_error* f32_kn(qffi_frame* frame) { return dense(frame, 0); }
static qffi_error* f32_nk(qffi_frame* frame) { return dense(frame, 1); }
QK_HANDLER(quanta_f32_kn, f32_kn)
QK_HANDLER(quanta_f32_nk, f32_nk)

_Static_assert(QK_ATTENTION_MAX_KEYS == QK_ATTENTION_MAX_KEYS_TABLE, "one bound on an attention call's keys");

/* attention runs grouped-query attention: args q (batch, heads, seq, hd) float32, keys and values
 * (batch, kv, length, hd) both float32 or both float16, visible (seq, keys) bool (the first keys
 * positions are read); attribute scale. */
static qffi_error* attention(qffi_frame* frame) {
  qffi_buffer q = {0}, k = {0}, v = {0}, vis = {0}, out = {0};
  double scale = 0;
  qffi_error* err;
  if ((err = qffi_arg(frame, 0, &q)) || (err = qffi_arg(frame, QK_ARG_ATTENTION_KEYS, &k)) ||
      (err = qffi_arg(frame, QK_ARG_ATTENTION_VALUES, &v)) || (err = qffi_arg(frame, QK_ARG_ATTENTION_VISIBLE, &vis)) ||
      (err = qffi_ret(frame, 0, &out)) || (err = qffi_expect(frame, &q, "q", QFFI_F32, 4)) ||
      (err = qffi_expect(frame, &k, "keys", k.dtype == QFFI_F16 ? QFFI_F16 : QFFI_F32, 4)) ||
      (err = qffi_expect(frame, &v, "values", k.dtype, 4)) || (err = qffi_expect(frame, &vis, "visible", QFFI_PRED, 2)) ||
      (err = qffi_expect(frame, &out, "out", QFFI_F32, 4)) || (err = qffi_attr_float(frame, QK_ATTR_SCALE, &scale))) {
    return err;
  }
  const int64_t batch = q.dims[0], heads = q.dims[1], seq = q.dims[2], hd = q.dims[3], kv = k.dims[1];
  const int64_t length = k.dims[2], keys = vis.dims[1];
  int same = qffi_num_args(frame) == QK_ARG_ATTENTION_VISIBLE + 1 && k.dims[0] == batch && k.dims[3] == hd &&
             kv >= 1 && heads % kv == 0 && keys >= 1 && keys <= length && keys <= QK_ATTENTION_MAX_KEYS &&
             vis.dims[0] == seq;
  for (int i = 0; i < 4; i++) {
    same = same && v.dims[i] == k.dims[i] && out.dims[i] == q.dims[i];
  }
  if (!same) {
    return bad_shapes(frame, "q (batch, heads, seq, hd), keys and values float32 or float16 (batch, kv, length, hd) with "
                             "kv dividing heads, visible bool (seq, keys) with 1 <= keys <= min(length, 2^18)");
  }
  int st = qk_attention(q.data, k.data, v.data, qk_dtype(k.dtype), vis.data, batch, heads, kv, seq, length, keys, hd, (float)scale, out.data);
  return kernel_status(frame, st);
}
QK_HANDLER(quanta_attention, attention)

/* The handlers, in the table's order (qk_targets.h): ffi.go registers them by these names. */
#define QK_ENTRY(name) {#name, (void *)name},
static const qk_target_entry table[] = {QK_TARGETS(QK_ENTRY)};

const qk_target_entry *qk_targets(int *count) {
  *count = (int)(sizeof table / sizeof table[0]);
  return table;
}
