/*
 * qffi.h: quanta's helper layer for CPU kernels called from XLA as typed-FFI
 * custom calls (stablehlo.custom_call with api_version = 4).
 *
 * Header only: include it from any cgo package (#cgo CFLAGS: -I${SRCDIR}/../xlaffi)
 * and register the handlers with package xlaffi (or runtime.RegisterKernels).
 *
 * Writing a kernel:
 *
 *   static qffi_error* scale_impl(qffi_frame* frame) {
 *     qffi_buffer x, y;
 *     double a;
 *     qffi_error* err;
 *     if ((err = qffi_arg(frame, 0, &x)) || (err = qffi_ret(frame, 0, &y)) ||
 *         (err = qffi_expect(frame, &x, "x", QFFI_F32, -1)) ||
 *         (err = qffi_attr_float(frame, "a", &a)))
 *       return err;
 *     float* in = x.data; float* out = y.data;
 *     for (int64_t i = 0; i < x.size; i++) out[i] = (float)a * in[i];
 *     return NULL;                       // NULL is success
 *   }
 *   QFFI_HANDLER(quanta_scale, scale_impl) // defines qffi_error* quanta_scale(qffi_frame*)
 *
 * and from Go, with `qffi_error* quanta_scale(qffi_frame*);` declared in the cgo preamble:
 *   xlaffi.Handler{Target: "quanta_scale", Fn: unsafe.Pointer(C.qffi_handler(C.quanta_scale))}
 *
 * Contract (what XLA guarantees and what a kernel must do):
 *   - Arguments are the custom call's operands in order, results its outputs in order; buffers
 *     are dense, row-major (XLA's default layout), never aliased with each other.
 *   - Attributes are the entries of the call's backend_config dictionary, by name: integers
 *     (qffi_attr_int), floats (qffi_attr_float), strings (qffi_attr_string), int64 arrays
 *     (qffi_attr_int_array).
 *   - A kernel returns NULL on success, or an error made with qffi_errorf: XLA turns it into the
 *     failed status of the execution (the Go caller gets an error, the process does not abort).
 *   - A kernel must not keep pointers to buffers, attributes or the frame after it returns, and
 *     must write every element of its results.
 *   - qffi_parallel_for runs a loop on XLA's intra-op thread pool (the one XLA CPU computes on).
 *
 * ABI: the structs below are quanta's own declarations of the XLA FFI C ABI, API version
 * QFFI_ABI_MAJOR.QFFI_ABI_MINOR (xla/ffi/api/c_api.h, read for its layout; nothing copied). A handler
 * tells XLA this version when asked at registration (the metadata query that QFFI_HANDLER answers);
 * package xlaffi refuses a plugin whose XLA FFI API is any other version, and qffi_check_frame
 * checks the frame's struct sizes on every call.
 */
#ifndef QUANTA_QFFI_H_
#define QUANTA_QFFI_H_

#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QFFI_ABI_MAJOR 0
#define QFFI_ABI_MINOR 4

/* ------------------------------------------------------------------------------------------
 * The XLA FFI C ABI (API 0.4), as far as quanta uses it.
 * ------------------------------------------------------------------------------------------ */

typedef struct qffi_ext {
  size_t struct_size;
  int32_t type;
  struct qffi_ext* next;
} qffi_ext;

enum { QFFI_EXT_METADATA = 1 };

typedef struct qffi_version {
  size_t struct_size;
  qffi_ext* ext;
  int32_t major;
  int32_t minor;
} qffi_version;

typedef struct qffi_error qffi_error;     /* opaque: owned by XLA once returned */
typedef struct qffi_context qffi_context; /* opaque: the execution context */

/* Element types: the values of xla::PrimitiveType. */
typedef enum qffi_dtype {
  QFFI_INVALID = 0,
  QFFI_PRED = 1,
  QFFI_S8 = 2,
  QFFI_S16 = 3,
  QFFI_S32 = 4,
  QFFI_S64 = 5,
  QFFI_U8 = 6,
  QFFI_U16 = 7,
  QFFI_U32 = 8,
  QFFI_U64 = 9,
  QFFI_F16 = 10,
  QFFI_F32 = 11,
  QFFI_F64 = 12,
  QFFI_BF16 = 16
} qffi_dtype;

/* Error codes: absl status codes. */
typedef enum qffi_code {
  QFFI_INVALID_ARGUMENT = 3,
  QFFI_RESOURCE_EXHAUSTED = 8,
  QFFI_FAILED_PRECONDITION = 9,
  QFFI_UNIMPLEMENTED = 12,
  QFFI_INTERNAL = 13
} qffi_code;

enum { QFFI_STAGE_EXECUTE = 3 };
enum { QFFI_ARG_BUFFER = 1, QFFI_RET_BUFFER = 1 };
enum { QFFI_ATTR_ARRAY = 1, QFFI_ATTR_DICTIONARY = 2, QFFI_ATTR_SCALAR = 3, QFFI_ATTR_STRING = 4 };

typedef struct qffi_bytes {
  const char* ptr;
  size_t len;
} qffi_bytes;

typedef struct qffi_scalar {
  int32_t dtype;
  void* value;
} qffi_scalar;

typedef struct qffi_array {
  int32_t dtype;
  size_t size;
  void* data;
} qffi_array;

typedef struct qffi_raw_buffer {
  size_t struct_size;
  qffi_ext* ext;
  int32_t dtype;
  void* data;
  int64_t rank;
  int64_t* dims;
} qffi_raw_buffer;

/* Arguments and results share one layout. */
typedef struct qffi_list {
  size_t struct_size;
  qffi_ext* ext;
  int64_t size;
  int32_t* types;
  void** items;
} qffi_list;

typedef struct qffi_attrs {
  size_t struct_size;
  qffi_ext* ext;
  int64_t size;
  int32_t* types; /* sorted by name */
  qffi_bytes** names;
  void** attrs;
} qffi_attrs;

typedef struct qffi_api qffi_api;

typedef struct qffi_frame {
  size_t struct_size;
  qffi_ext* ext;
  const qffi_api* api;
  qffi_context* ctx;
  int32_t stage;
  qffi_list args;
  qffi_list rets;
  qffi_attrs attrs;
  void* future;
} qffi_frame;

typedef struct qffi_metadata {
  size_t struct_size;
  qffi_version api_version;
  uint32_t traits;
} qffi_metadata;

typedef struct qffi_metadata_ext {
  qffi_ext base;
  qffi_metadata* metadata;
} qffi_metadata_ext;

typedef struct qffi_error_create_args {
  size_t struct_size;
  qffi_ext* ext;
  const char* message;
  int32_t code;
} qffi_error_create_args;

typedef struct qffi_error_message_args {
  size_t struct_size;
  qffi_ext* ext;
  qffi_error* error;
  const char* message;
} qffi_error_message_args;

typedef struct qffi_error_destroy_args {
  size_t struct_size;
  qffi_ext* ext;
  qffi_error* error;
} qffi_error_destroy_args;

typedef void qffi_task(void* data);

typedef struct qffi_schedule_args {
  size_t struct_size;
  qffi_ext* ext;
  qffi_context* ctx;
  qffi_task* task;
  void* data;
} qffi_schedule_args;

typedef struct qffi_num_threads_args {
  size_t struct_size;
  qffi_ext* ext;
  qffi_context* ctx;
  int64_t* num_threads;
} qffi_num_threads_args;

/* The head of XLA's function table: entries are in API order and never move. */
struct qffi_api {
  size_t struct_size;
  qffi_ext* ext;
  qffi_version api_version;
  void* internal_api;
  qffi_error* (*error_create)(qffi_error_create_args*);
  void (*error_get_message)(qffi_error_message_args*);
  void (*error_destroy)(qffi_error_destroy_args*);
  void* handler_register;
  void* stream_get;
  void* type_id_register;
  void* execution_context_get;
  void* state_set;
  void* state_get;
  void* device_memory_allocate;
  void* device_memory_free;
  qffi_error* (*thread_pool_schedule)(qffi_schedule_args*);
  qffi_error* (*thread_pool_num_threads)(qffi_num_threads_args*);
};

/* The sizes XLA's struct_size fields are compared with: up to and including the last field
 * quanta reads. */
#define QFFI_SIZE_UPTO(type, field) (offsetof(type, field) + sizeof(((type*)0)->field))
#define QFFI_FRAME_SIZE QFFI_SIZE_UPTO(qffi_frame, attrs)
#define QFFI_LIST_SIZE QFFI_SIZE_UPTO(qffi_list, items)
#define QFFI_ATTRS_SIZE QFFI_SIZE_UPTO(qffi_attrs, attrs)
#define QFFI_BUFFER_SIZE QFFI_SIZE_UPTO(qffi_raw_buffer, dims)
#define QFFI_API_ERRORS_SIZE QFFI_SIZE_UPTO(qffi_api, error_destroy)
#define QFFI_API_POOL_SIZE QFFI_SIZE_UPTO(qffi_api, thread_pool_num_threads)

/* qffi_handler is a pointer to a handler: in Go, unsafe.Pointer(C.qffi_handler(C.quanta_scale)) is
 * what xlaffi.Handler.Fn takes (the handler declared in the cgo preamble). */
typedef qffi_error* (*qffi_handler)(qffi_frame* frame);

/* ------------------------------------------------------------------------------------------
 * Errors.
 * ------------------------------------------------------------------------------------------ */

/* qffi_target returns the name of the handler QFFI_HANDLER is running on this thread ("quanta FFI"
 * elsewhere): the helpers' messages start with it. */
static _Thread_local const char* qffi__target = "quanta FFI";
static inline const char* qffi_target(void) { return qffi__target; }

/* qffi_errorf returns an error with a printf-formatted message (truncated to 1 KiB), to be
 * returned by the handler. Start the message with qffi_target(), the handler's name. */
static inline qffi_error* qffi_errorf(const qffi_frame* frame, qffi_code code, const char* format, ...)
    __attribute__((format(printf, 3, 4)));

static inline qffi_error* qffi_errorf(const qffi_frame* frame, qffi_code code, const char* format, ...) {
  char message[1024];
  va_list ap;
  va_start(ap, format);
  vsnprintf(message, sizeof message, format, ap);
  va_end(ap);
  qffi_error_create_args args = {sizeof args, NULL, message, (int32_t)code};
  return frame->api->error_create(&args);
}

/* ------------------------------------------------------------------------------------------
 * The frame: the metadata query, checks.
 * ------------------------------------------------------------------------------------------ */

/* qffi_is_metadata_query reports whether XLA calls the handler to ask for its API version (at
 * registration), not to run it. */
static inline int qffi_is_metadata_query(const qffi_frame* frame) {
  return frame->ext != NULL && frame->ext->type == QFFI_EXT_METADATA;
}

/* qffi_answer_metadata tells XLA the FFI API version the handler was written against. */
static inline qffi_error* qffi_answer_metadata(qffi_frame* frame) {
  qffi_metadata* md = ((qffi_metadata_ext*)frame->ext)->metadata;
  md->api_version.major = QFFI_ABI_MAJOR;
  md->api_version.minor = QFFI_ABI_MINOR;
  md->traits = 0;
  return NULL;
}

/* qffi_check_frame checks that the frame and its lists are at least as large as quanta's
 * declarations. QFFI_HANDLER calls it before the kernel. */
static inline qffi_error* qffi_check_frame(const qffi_frame* frame) {
  if (frame->api == NULL || frame->api->struct_size < QFFI_API_ERRORS_SIZE) {
    return NULL; /* cannot even report: XLA would not have accepted the handler */
  }
  if (frame->struct_size < QFFI_FRAME_SIZE || frame->args.struct_size < QFFI_LIST_SIZE ||
      frame->rets.struct_size < QFFI_LIST_SIZE || frame->attrs.struct_size < QFFI_ATTRS_SIZE) {
    return qffi_errorf(frame, QFFI_FAILED_PRECONDITION,
                       "%s: call frame smaller than XLA FFI API %d.%d's (frame %zu, args %zu, rets %zu, "
                       "attrs %zu bytes)",
                       qffi_target(), QFFI_ABI_MAJOR, QFFI_ABI_MINOR, frame->struct_size, frame->args.struct_size,
                       frame->rets.struct_size, frame->attrs.struct_size);
  }
  return NULL;
}

/* QFFI_HANDLER(name, impl) defines the XLA FFI handler `qffi_error* name(qffi_frame*)`: it answers
 * XLA's metadata query, ignores stages other than execution, checks the frame and calls
 * `qffi_error* impl(qffi_frame*)`. */
#define QFFI_HANDLER(name, impl)                                   \
  qffi_error* name(qffi_frame* frame) {                            \
    if (qffi_is_metadata_query(frame)) {                           \
      return qffi_answer_metadata(frame);                          \
    }                                                              \
    if (frame->stage != QFFI_STAGE_EXECUTE) {                      \
      return NULL;                                                 \
    }                                                              \
    qffi__target = #name;                                          \
    qffi_error* qffi_err_ = qffi_check_frame(frame);               \
    if (qffi_err_ == NULL) {                                       \
      qffi_err_ = impl(frame);                                     \
    }                                                              \
    qffi__target = "quanta FFI";                                   \
    return qffi_err_;                                              \
  }

/* ------------------------------------------------------------------------------------------
 * Buffers.
 * ------------------------------------------------------------------------------------------ */

/* qffi_buffer is a view of an argument or result: data, element type, dimensions, and size (the
 * number of elements, 1 for a scalar). */
typedef struct qffi_buffer {
  qffi_dtype dtype;
  void* data;
  int64_t rank;
  const int64_t* dims;
  int64_t size;
} qffi_buffer;

/* qffi_dtype_name returns the GoMLX spelling of a dtype ("float32"), for messages. */
static inline const char* qffi_dtype_name(qffi_dtype dtype) {
  switch (dtype) {
    case QFFI_PRED: return "bool";
    case QFFI_S8: return "int8";
    case QFFI_S16: return "int16";
    case QFFI_S32: return "int32";
    case QFFI_S64: return "int64";
    case QFFI_U8: return "uint8";
    case QFFI_U16: return "uint16";
    case QFFI_U32: return "uint32";
    case QFFI_U64: return "uint64";
    case QFFI_F16: return "float16";
    case QFFI_F32: return "float32";
    case QFFI_F64: return "float64";
    case QFFI_BF16: return "bfloat16";
    default: return "unknown dtype";
  }
}

static inline qffi_error* qffi__buffer(const qffi_frame* frame, const qffi_list* list, const char* kind, int i,
                                       qffi_buffer* out) {
  if (i < 0 || i >= list->size) {
    return qffi_errorf(frame, QFFI_INVALID_ARGUMENT, "%s: %s #%d requested, the call has %lld", qffi_target(), kind, i,
                       (long long)list->size);
  }
  if (list->types[i] != QFFI_ARG_BUFFER) {
    return qffi_errorf(frame, QFFI_INVALID_ARGUMENT, "%s: %s #%d is not a buffer (type %d)", qffi_target(), kind, i,
                       (int)list->types[i]);
  }
  const qffi_raw_buffer* raw = (const qffi_raw_buffer*)list->items[i];
  if (raw->struct_size < QFFI_BUFFER_SIZE) {
    return qffi_errorf(frame, QFFI_FAILED_PRECONDITION, "%s: %s #%d buffer struct is %zu bytes, want >= %zu", qffi_target(),
                       kind, i, raw->struct_size, (size_t)QFFI_BUFFER_SIZE);
  }
  out->dtype = (qffi_dtype)raw->dtype;
  out->data = raw->data;
  out->rank = raw->rank;
  out->dims = raw->dims;
  out->size = 1;
  for (int64_t d = 0; d < raw->rank; d++) out->size *= raw->dims[d];
  return NULL;
}

/* qffi_num_args and qffi_num_rets return the number of arguments and results. */
static inline int64_t qffi_num_args(const qffi_frame* frame) { return frame->args.size; }
static inline int64_t qffi_num_rets(const qffi_frame* frame) { return frame->rets.size; }

/* qffi_arg reads argument i (the custom call's operand i). */
static inline qffi_error* qffi_arg(const qffi_frame* frame, int i, qffi_buffer* out) {
  return qffi__buffer(frame, &frame->args, "argument", i, out);
}

/* qffi_ret reads result i, the buffer the kernel writes. */
static inline qffi_error* qffi_ret(const qffi_frame* frame, int i, qffi_buffer* out) {
  return qffi__buffer(frame, &frame->rets, "result", i, out);
}

/* qffi_expect checks a buffer's dtype and rank (rank < 0: any rank), naming it `what` ("x"). */
static inline qffi_error* qffi_expect(const qffi_frame* frame, const qffi_buffer* b, const char* what, qffi_dtype dtype,
                                      int rank) {
  if (b->dtype != dtype || (rank >= 0 && b->rank != rank)) {
    return qffi_errorf(frame, QFFI_INVALID_ARGUMENT, "%s: %s has dtype %s and rank %lld; accepted: %s of rank %d",
                       qffi_target(), what, qffi_dtype_name(b->dtype), (long long)b->rank, qffi_dtype_name(dtype),
                       rank);
  }
  return NULL;
}

/* ------------------------------------------------------------------------------------------
 * Attributes: the call's backend_config dictionary.
 * ------------------------------------------------------------------------------------------ */

static inline int qffi__attr_index(const qffi_frame* frame, const char* name) {
  size_t len = strlen(name);
  for (int64_t i = 0; i < frame->attrs.size; i++) {
    const qffi_bytes* n = frame->attrs.names[i];
    if (n->len == len && memcmp(n->ptr, name, len) == 0) return (int)i;
  }
  return -1;
}

/* qffi_has_attr reports whether the call has the attribute. */
static inline int qffi_has_attr(const qffi_frame* frame, const char* name) {
  return qffi__attr_index(frame, name) >= 0;
}

static inline qffi_error* qffi__attr(const qffi_frame* frame, const char* name, int32_t type, const char* want,
                                     void** out) {
  int i = qffi__attr_index(frame, name);
  if (i < 0) {
    return qffi_errorf(frame, QFFI_INVALID_ARGUMENT, "%s: attribute %s missing from backend_config", qffi_target(), name);
  }
  if (frame->attrs.types[i] != type) {
    return qffi_errorf(frame, QFFI_INVALID_ARGUMENT, "%s: attribute %s has attribute type %d; accepted: %s", qffi_target(),
                       name, (int)frame->attrs.types[i], want);
  }
  *out = frame->attrs.attrs[i];
  return NULL;
}

/* qffi_attr_int reads an integer (or boolean) attribute of any width. */
static inline qffi_error* qffi_attr_int(const qffi_frame* frame, const char* name, int64_t* out) {
  void* raw = NULL;
  qffi_error* err = qffi__attr(frame, name, QFFI_ATTR_SCALAR, "an integer scalar", &raw);
  if (err) return err;
  const qffi_scalar* s = (const qffi_scalar*)raw;
  switch (s->dtype) {
    case QFFI_PRED: *out = *(const uint8_t*)s->value != 0; return NULL;
    case QFFI_S8: *out = *(const int8_t*)s->value; return NULL;
    case QFFI_S16: *out = *(const int16_t*)s->value; return NULL;
    case QFFI_S32: *out = *(const int32_t*)s->value; return NULL;
    case QFFI_S64: *out = *(const int64_t*)s->value; return NULL;
    case QFFI_U8: *out = *(const uint8_t*)s->value; return NULL;
    case QFFI_U16: *out = *(const uint16_t*)s->value; return NULL;
    case QFFI_U32: *out = *(const uint32_t*)s->value; return NULL;
    case QFFI_U64: *out = (int64_t) * (const uint64_t*)s->value; return NULL;
    default:
      return qffi_errorf(frame, QFFI_INVALID_ARGUMENT, "%s: attribute %s has dtype %s; accepted: an integer", qffi_target(),
                         name, qffi_dtype_name((qffi_dtype)s->dtype));
  }
}

/* qffi_attr_float reads a float32 or float64 attribute. */
static inline qffi_error* qffi_attr_float(const qffi_frame* frame, const char* name, double* out) {
  void* raw = NULL;
  qffi_error* err = qffi__attr(frame, name, QFFI_ATTR_SCALAR, "a float scalar", &raw);
  if (err) return err;
  const qffi_scalar* s = (const qffi_scalar*)raw;
  switch (s->dtype) {
    case QFFI_F32: *out = *(const float*)s->value; return NULL;
    case QFFI_F64: *out = *(const double*)s->value; return NULL;
    default:
      return qffi_errorf(frame, QFFI_INVALID_ARGUMENT,
                         "%s: attribute %s has dtype %s; accepted: float32 or float64", qffi_target(), name,
                         qffi_dtype_name((qffi_dtype)s->dtype));
  }
}

/* qffi_attr_string reads a string attribute: len bytes at *ptr, not NUL-terminated. */
static inline qffi_error* qffi_attr_string(const qffi_frame* frame, const char* name, const char** ptr, size_t* len) {
  void* raw = NULL;
  qffi_error* err = qffi__attr(frame, name, QFFI_ATTR_STRING, "a string", &raw);
  if (err) return err;
  const qffi_bytes* b = (const qffi_bytes*)raw;
  *ptr = b->ptr;
  *len = b->len;
  return NULL;
}

/* qffi_attr_int_array reads an int64 array attribute (customcall's []int64). */
static inline qffi_error* qffi_attr_int_array(const qffi_frame* frame, const char* name, const int64_t** data,
                                              size_t* n) {
  void* raw = NULL;
  qffi_error* err = qffi__attr(frame, name, QFFI_ATTR_ARRAY, "an int64 array", &raw);
  if (err) return err;
  const qffi_array* a = (const qffi_array*)raw;
  if (a->dtype != QFFI_S64) {
    return qffi_errorf(frame, QFFI_INVALID_ARGUMENT, "%s: attribute %s is an array of %s; accepted: int64", qffi_target(),
                       name, qffi_dtype_name((qffi_dtype)a->dtype));
  }
  *data = (const int64_t*)a->data;
  *n = a->size;
  return NULL;
}

/* ------------------------------------------------------------------------------------------
 * XLA's intra-op thread pool.
 * ------------------------------------------------------------------------------------------ */

/* qffi_num_threads returns the number of threads of XLA's intra-op pool, 1 when there is none. */
static inline int64_t qffi_num_threads(const qffi_frame* frame) {
  if (frame->api->struct_size < QFFI_API_POOL_SIZE || frame->ctx == NULL) return 1;
  int64_t n = 0;
  qffi_num_threads_args args = {sizeof args, NULL, frame->ctx, &n};
  qffi_error* err = frame->api->thread_pool_num_threads(&args);
  if (err != NULL) {
    qffi_error_destroy_args d = {sizeof d, NULL, err};
    frame->api->error_destroy(&d);
    return 1;
  }
  return n > 0 ? n : 1;
}

/* qffi_range_fn computes the iterations [begin, end) of a loop. */
typedef void qffi_range_fn(void* ctx, int64_t begin, int64_t end);

typedef struct qffi__pfor {
  atomic_llong next, done;
  atomic_int refs;
  int64_t n, chunk, chunks;
  qffi_range_fn* body;
  void* ctx;
} qffi__pfor;

static inline void qffi__pfor_work(qffi__pfor* s) {
  for (;;) {
    int64_t c = atomic_fetch_add(&s->next, 1);
    if (c >= s->chunks) return;
    int64_t begin = c * s->chunk, end = begin + s->chunk;
    s->body(s->ctx, begin, end < s->n ? end : s->n);
    atomic_fetch_add(&s->done, 1);
  }
}

static inline void qffi__pfor_release(qffi__pfor* s) {
  if (atomic_fetch_sub(&s->refs, 1) == 1) free(s);
}

static inline void qffi__pfor_task(void* data) {
  qffi__pfor* s = (qffi__pfor*)data;
  qffi__pfor_work(s);
  qffi__pfor_release(s);
}

/* qffi_parallel_for runs body over [0, n) in chunks of at least min_chunk iterations, on XLA's
 * intra-op pool and the calling thread, and returns when every iteration is done. The calling
 * thread takes chunks too, so it never waits on a pool that is busy (or is itself): tasks that
 * start late find no work. body runs concurrently on disjoint ranges. */
static inline qffi_error* qffi_parallel_for(const qffi_frame* frame, int64_t n, int64_t min_chunk, qffi_range_fn* body,
                                            void* ctx) {
  if (n <= 0) return NULL;
  if (min_chunk < 1) min_chunk = 1;
  int64_t threads = qffi_num_threads(frame);
  int64_t chunks = (n + min_chunk - 1) / min_chunk;
  if (chunks > 4 * threads) chunks = 4 * threads;
  if (threads <= 1 || chunks <= 1) {
    body(ctx, 0, n);
    return NULL;
  }
  qffi__pfor* s = (qffi__pfor*)malloc(sizeof *s);
  if (s == NULL) {
    return qffi_errorf(frame, QFFI_RESOURCE_EXHAUSTED, "%s: parallel_for: out of memory", qffi_target());
  }
  s->n = n;
  s->chunk = (n + chunks - 1) / chunks;
  s->chunks = (n + s->chunk - 1) / s->chunk;
  s->body = body;
  s->ctx = ctx;
  int64_t tasks = (threads < s->chunks ? threads : s->chunks) - 1;
  atomic_init(&s->next, 0);
  atomic_init(&s->done, 0);
  atomic_init(&s->refs, (int)(1 + tasks));
  for (int64_t t = 0; t < tasks; t++) {
    qffi_schedule_args args = {sizeof args, NULL, frame->ctx, qffi__pfor_task, s};
    qffi_error* err = frame->api->thread_pool_schedule(&args);
    if (err != NULL) { /* the caller does the work this task would have done */
      qffi_error_destroy_args d = {sizeof d, NULL, err};
      frame->api->error_destroy(&d);
      qffi__pfor_release(s);
    }
  }
  qffi__pfor_work(s);
  while (atomic_load(&s->done) < s->chunks) sched_yield(); /* chunks other threads already took */
  qffi__pfor_release(s);
  return NULL;
}

/* ------------------------------------------------------------------------------------------
 * bfloat16.
 * ------------------------------------------------------------------------------------------ */

static inline float qffi_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* qffi_f32_to_bf16 rounds to nearest even (NaN stays NaN). */
static inline uint16_t qffi_f32_to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

#endif /* QUANTA_QFFI_H_ */
