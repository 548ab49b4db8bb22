#include "plugin.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "qffi.h"

/* ------------------------------------------------------------------------------------------
 * The PJRT C API (xla/pjrt/c/pjrt_c_api.h, pjrt_c_api_ffi_extension.h), declared from its layout
 * as far as xlaffi uses it.
 * ------------------------------------------------------------------------------------------ */

typedef struct xf_ext {
  size_t struct_size;
  int32_t type;
  struct xf_ext* next;
} xf_ext;

enum { XF_EXT_FFI = 5 }; /* PJRT_Extension_Type_FFI */

typedef struct xf_pjrt_error xf_pjrt_error;

typedef struct xf_error_destroy_args {
  size_t struct_size;
  xf_ext* ext;
  xf_pjrt_error* error;
} xf_error_destroy_args;

typedef struct xf_error_message_args {
  size_t struct_size;
  xf_ext* ext;
  const xf_pjrt_error* error;
  const char* message;
  size_t message_size;
} xf_error_message_args;

typedef struct xf_pjrt_api {
  size_t struct_size;
  xf_ext* ext;
  struct {
    size_t struct_size;
    xf_ext* ext;
    int32_t major, minor;
  } version;
  void (*error_destroy)(xf_error_destroy_args*);
  void (*error_message)(xf_error_message_args*);
} xf_pjrt_api;

/* The registration arguments since XLA dropped api_version (PJRT C API 0.115 has this layout). */
typedef struct xf_register_args {
  size_t struct_size;
  const char* target_name;
  size_t target_name_size;
  void* handler;
  const char* platform_name;
  size_t platform_name_size;
  uint32_t traits;
} xf_register_args;

typedef struct xf_ffi_extension {
  xf_ext base;
  void* type_id_register;
  void* user_data_add;
  xf_pjrt_error* (*register_handler)(xf_register_args*);
} xf_ffi_extension;

#define XF_SIZE_UPTO(type, field) (offsetof(type, field) + sizeof(((type*)0)->field))

int xf_open(const char* path, xf_plugin* out, char* err, size_t err_len) {
  memset(out, 0, sizeof *out);
  void* handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (handle == NULL) {
    const char* msg = dlerror();
    snprintf(err, err_len, "%s", msg != NULL ? msg : "not loaded in this process");
    return 1;
  }
  const xf_pjrt_api* (*get_api)(void) = (const xf_pjrt_api* (*)(void))dlsym(handle, "GetPjrtApi");
  const xf_pjrt_api* api = get_api != NULL ? get_api() : NULL;
  if (api == NULL) {
    snprintf(err, err_len, "no GetPjrtApi symbol, or it returned NULL");
    return 2;
  }
  out->api = (void*)api;
  out->api_size = api->struct_size;
  out->pjrt_major = api->version.major;
  out->pjrt_minor = api->version.minor;
  for (xf_ext* e = api->ext; e != NULL; e = e->next) {
    if (e->type == XF_EXT_FFI) {
      out->ffi = e;
      out->ffi_size = e->struct_size;
      break;
    }
  }
  return 0;
}

static void xf_take_error(const xf_pjrt_api* api, xf_pjrt_error* e, char* err, size_t err_len) {
  xf_error_message_args m = {sizeof m, NULL, e, NULL, 0};
  api->error_message(&m);
  snprintf(err, err_len, "%.*s", (int)m.message_size, m.message != NULL ? m.message : "");
  xf_error_destroy_args d = {sizeof d, NULL, e};
  api->error_destroy(&d);
}

int xf_register(const xf_plugin* p, const char* target, size_t target_len, const char* platform,
                size_t platform_len, void* handler, char* err, size_t err_len) {
  const xf_ffi_extension* ext = (const xf_ffi_extension*)p->ffi;
  xf_register_args args = {XF_SIZE_UPTO(xf_register_args, traits), target, target_len, handler, platform,
                           platform_len, 0};
  xf_pjrt_error* e = ext->register_handler(&args);
  if (e != NULL) {
    xf_take_error((const xf_pjrt_api*)p->api, e, err, err_len);
    return 1;
  }
  return 0;
}

int xf_query_metadata(void* handler, const void* ffi_api, int* major, int* minor, char* err, size_t err_len) {
  qffi_metadata md;
  memset(&md, 0, sizeof md);
  md.struct_size = QFFI_SIZE_UPTO(qffi_metadata, traits);
  md.api_version.struct_size = QFFI_SIZE_UPTO(qffi_version, minor);
  qffi_metadata_ext ext = {{QFFI_SIZE_UPTO(qffi_metadata_ext, metadata), QFFI_EXT_METADATA, NULL}, &md};
  qffi_frame frame;
  memset(&frame, 0, sizeof frame);
  frame.struct_size = QFFI_FRAME_SIZE;
  frame.ext = &ext.base;
  frame.api = (const qffi_api*)ffi_api;
  frame.stage = QFFI_STAGE_EXECUTE;
  frame.args.struct_size = QFFI_LIST_SIZE;
  frame.rets.struct_size = QFFI_LIST_SIZE;
  frame.attrs.struct_size = QFFI_ATTRS_SIZE;
  qffi_error* e = ((qffi_handler)handler)(&frame);
  *major = md.api_version.major;
  *minor = md.api_version.minor;
  if (e != NULL) {
    const qffi_api* api = (const qffi_api*)ffi_api;
    qffi_error_message_args m = {sizeof m, NULL, e, NULL};
    api->error_get_message(&m);
    snprintf(err, err_len, "%s", m.message != NULL ? m.message : "");
    qffi_error_destroy_args d = {sizeof d, NULL, e};
    api->error_destroy(&d);
    return 1;
  }
  return 0;
}

/* What the probe saw at its registration. */
static struct {
  atomic_int seen;
  const void* api;
  size_t api_size;
  int major, minor;
} xf_probe_state;

static qffi_error* xf_probe_impl(qffi_frame* frame) {
  qffi_buffer in, out;
  qffi_error* err;
  if ((err = qffi_arg(frame, 0, &in)) || (err = qffi_ret(frame, 0, &out))) return err;
  if (in.dtype != out.dtype || in.size != out.size) {
    return qffi_errorf(frame, QFFI_INVALID_ARGUMENT,
                       "quanta_ffi_probe: argument %s[%lld] and result %s[%lld] differ; accepted: the same dtype and size",
                       qffi_dtype_name(in.dtype), (long long)in.size, qffi_dtype_name(out.dtype), (long long)out.size);
  }
  size_t bytes = 0;
  switch (in.dtype) {
    case QFFI_PRED: case QFFI_S8: case QFFI_U8: bytes = 1; break;
    case QFFI_S16: case QFFI_U16: case QFFI_F16: case QFFI_BF16: bytes = 2; break;
    case QFFI_S32: case QFFI_U32: case QFFI_F32: bytes = 4; break;
    case QFFI_S64: case QFFI_U64: case QFFI_F64: bytes = 8; break;
    default:
      return qffi_errorf(frame, QFFI_INVALID_ARGUMENT, "quanta_ffi_probe: dtype %s not accepted",
                         qffi_dtype_name(in.dtype));
  }
  memcpy(out.data, in.data, bytes * (size_t)in.size);
  return NULL;
}

static qffi_error* xf_probe_handler(qffi_frame* frame) {
  if (qffi_is_metadata_query(frame)) {
    if (frame->api != NULL && atomic_load(&xf_probe_state.seen) == 0) {
      const qffi_api* api = frame->api;
      xf_probe_state.api = api;
      xf_probe_state.api_size = api->struct_size;
      xf_probe_state.major = api->api_version.major;
      xf_probe_state.minor = api->api_version.minor;
      atomic_store(&xf_probe_state.seen, 1);
    }
    return qffi_answer_metadata(frame);
  }
  if (frame->stage != QFFI_STAGE_EXECUTE) return NULL;
  qffi_error* err = qffi_check_frame(frame);
  if (err != NULL) return err;
  return xf_probe_impl(frame);
}

void* xf_probe(void) { return (void*)xf_probe_handler; }

void xf_probe_reset(void) { atomic_store(&xf_probe_state.seen, 0); }

int xf_probe_seen(const void** ffi_api, size_t* api_size, int* major, int* minor) {
  if (atomic_load(&xf_probe_state.seen) == 0) return 0;
  *ffi_api = xf_probe_state.api;
  *api_size = xf_probe_state.api_size;
  *major = xf_probe_state.major;
  *minor = xf_probe_state.minor;
  return 1;
}
