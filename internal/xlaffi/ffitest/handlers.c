#include "handlers.h"

#include <pthread.h>

static atomic_llong calls[3];
static atomic_llong threads_seen, pool_chunks;

int64_t ffitest_calls(int i) { return atomic_load(&calls[i]); }
int64_t ffitest_threads(void) { return atomic_load(&threads_seen); }
int64_t ffitest_pool_chunks(void) { return atomic_load(&pool_chunks); }

/* quanta_test_axpby: y = a*x + b*z, x, z and y of one dtype (float32 or bfloat16) and size; a and
 * b are float attributes. */
static qffi_error* axpby(qffi_frame* frame) {
  atomic_fetch_add(&calls[0], 1);
  qffi_buffer x, z, y;
  double a, b;
  qffi_error* err;
  if ((err = qffi_arg(frame, 0, &x)) || (err = qffi_arg(frame, 1, &z)) || (err = qffi_ret(frame, 0, &y)) ||
      (err = qffi_attr_float(frame, "a", &a)) || (err = qffi_attr_float(frame, "b", &b))) {
    return err;
  }
  if (qffi_num_args(frame) != 2 || x.dtype != z.dtype || x.dtype != y.dtype || x.size != z.size ||
      x.size != y.size || (x.dtype != QFFI_F32 && x.dtype != QFFI_BF16)) {
    return qffi_errorf(frame, QFFI_INVALID_ARGUMENT,
                       "quanta_test_axpby: %lld operands x %s[%lld], z %s[%lld] -> %s[%lld]; accepted: two operands "
                       "of one dtype (float32 or bfloat16) and size, and a result like them",
                       (long long)qffi_num_args(frame), qffi_dtype_name(x.dtype), (long long)x.size,
                       qffi_dtype_name(z.dtype), (long long)z.size, qffi_dtype_name(y.dtype), (long long)y.size);
  }
  if (x.dtype == QFFI_F32) {
    const float *xs = x.data, *zs = z.data;
    float* ys = y.data;
    for (int64_t i = 0; i < x.size; i++) ys[i] = (float)(a * xs[i] + b * zs[i]);
  } else {
    const uint16_t *xs = x.data, *zs = z.data;
    uint16_t* ys = y.data;
    for (int64_t i = 0; i < x.size; i++) {
      ys[i] = qffi_f32_to_bf16((float)a * qffi_bf16_to_f32(xs[i]) + (float)b * qffi_bf16_to_f32(zs[i]));
    }
  }
  return NULL;
}
QFFI_HANDLER(quanta_test_axpby, axpby)

/* quanta_test_u8dot: y[m,n] = sum_k x[m,k] * (codes[k,n] - zero) * scale[n], with x float32 (M,K),
 * codes uint8 (K,N), scale float32 (N), zero an integer attribute: a packed weight's product. The
 * columns are split over XLA's intra-op pool. */
typedef struct {
  const float *x, *scale;
  const uint8_t* codes;
  float* y;
  int64_t m, k, n, zero;
  pthread_t caller;
} u8dot_job;

static void u8dot_columns(void* ctx, int64_t begin, int64_t end) {
  const u8dot_job* j = ctx;
  if (!pthread_equal(pthread_self(), j->caller)) atomic_fetch_add(&pool_chunks, 1);
  for (int64_t r = 0; r < j->m; r++) {
    for (int64_t c = begin; c < end; c++) {
      float sum = 0;
      for (int64_t i = 0; i < j->k; i++) {
        sum += j->x[r * j->k + i] * (float)((int64_t)j->codes[i * j->n + c] - j->zero);
      }
      j->y[r * j->n + c] = sum * j->scale[c];
    }
  }
}

static qffi_error* u8dot(qffi_frame* frame) {
  atomic_fetch_add(&calls[1], 1);
  qffi_buffer x, codes, scale, y;
  int64_t zero;
  qffi_error* err;
  if ((err = qffi_arg(frame, 0, &x)) || (err = qffi_arg(frame, 1, &codes)) || (err = qffi_arg(frame, 2, &scale)) ||
      (err = qffi_ret(frame, 0, &y)) || (err = qffi_expect(frame, &x, "x", QFFI_F32, 2)) ||
      (err = qffi_expect(frame, &codes, "codes", QFFI_U8, 2)) ||
      (err = qffi_expect(frame, &scale, "scale", QFFI_F32, 1)) ||
      (err = qffi_expect(frame, &y, "y", QFFI_F32, 2)) ||
      (err = qffi_attr_int(frame, "zero", &zero))) {
    return err;
  }
  int64_t m = x.dims[0], k = x.dims[1], n = codes.dims[1];
  if (codes.dims[0] != k || scale.dims[0] != n || y.dims[0] != m || y.dims[1] != n) {
    return qffi_errorf(frame, QFFI_INVALID_ARGUMENT,
                       "quanta_test_u8dot: x [%lld,%lld], codes [%lld,%lld], scale [%lld] -> y [%lld,%lld]; accepted: "
                       "x [M,K], codes [K,N], scale [N] -> y [M,N]",
                       (long long)m, (long long)k, (long long)codes.dims[0], (long long)n, (long long)scale.dims[0],
                       (long long)y.dims[0], (long long)y.dims[1]);
  }
  atomic_store(&threads_seen, qffi_num_threads(frame));
  u8dot_job job = {x.data, scale.data, codes.data, y.data, m, k, n, zero, pthread_self()};
  return qffi_parallel_for(frame, n, 4, u8dot_columns, &job);
}
QFFI_HANDLER(quanta_test_u8dot, u8dot)

/* quanta_test_attrs writes what its attributes hold into its float32[5] result: the integer i,
 * the float f, the length of the string s plus its first byte times 1000, the sum of the int64
 * array v, and whether an attribute "missing" exists. Its operand is not read. */
static qffi_error* attrs(qffi_frame* frame) {
  atomic_fetch_add(&calls[2], 1);
  qffi_buffer y;
  int64_t i;
  double f;
  const char* s;
  size_t s_len, v_len;
  const int64_t* v;
  qffi_error* err;
  if ((err = qffi_ret(frame, 0, &y)) || (err = qffi_expect(frame, &y, "result", QFFI_F32, 1)) ||
      (err = qffi_attr_int(frame, "i", &i)) || (err = qffi_attr_float(frame, "f", &f)) ||
      (err = qffi_attr_string(frame, "s", &s, &s_len)) || (err = qffi_attr_int_array(frame, "v", &v, &v_len))) {
    return err;
  }
  if (y.size != 5) {
    return qffi_errorf(frame, QFFI_INVALID_ARGUMENT, "quanta_test_attrs: result has %lld elements; accepted: 5",
                       (long long)y.size);
  }
  int64_t sum = 0;
  for (size_t j = 0; j < v_len; j++) sum += v[j];
  float* out = y.data;
  out[0] = (float)i;
  out[1] = (float)f;
  out[2] = (float)s_len + (s_len > 0 ? 1000.0f * (unsigned char)s[0] : 0);
  out[3] = (float)sum;
  out[4] = (float)qffi_has_attr(frame, "missing");
  return NULL;
}
QFFI_HANDLER(quanta_test_attrs, attrs)

/* quanta_test_unanswering is not defined with QFFI_HANDLER: it ignores XLA's metadata query. */
qffi_error* quanta_test_unanswering(qffi_frame* frame) {
  (void)frame;
  return NULL;
}

/* quanta_test_old_abi answers the metadata query with XLA FFI API 0.3. */
qffi_error* quanta_test_old_abi(qffi_frame* frame) {
  if (qffi_is_metadata_query(frame)) {
    qffi_metadata* md = ((qffi_metadata_ext*)frame->ext)->metadata;
    md->api_version.major = 0;
    md->api_version.minor = 3;
  }
  return NULL;
}
