/*
 * plugin.h: package xlaffi's C side (private): find a loaded PJRT plugin, its FFI extension, and
 * register typed-FFI handlers through it. Kernel authors include qffi.h, not this.
 */
#ifndef QUANTA_XLAFFI_PLUGIN_H_
#define QUANTA_XLAFFI_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

/* xf_plugin describes what xf_open found. */
typedef struct xf_plugin {
  void* api;          /* the PJRT_Api table */
  void* ffi;          /* the FFI extension, NULL when absent */
  size_t api_size;    /* PJRT_Api.struct_size */
  size_t ffi_size;    /* the FFI extension's struct_size */
  int pjrt_major, pjrt_minor;
} xf_plugin;

/* xf_open finds the plugin already loaded from path (dlopen RTLD_NOLOAD: it never loads one).
 * Returns 0, or 1 when no library of that path is loaded, or 2 when it has no GetPjrtApi; the
 * message is in err. */
int xf_open(const char* path, xf_plugin* out, char* err, size_t err_len);

/* xf_register registers handler for target on platform through the FFI extension. Returns 0, or 1
 * with the plugin's error message in err. */
int xf_register(const xf_plugin* p, const char* target, size_t target_len, const char* platform,
                size_t platform_len, void* handler, char* err, size_t err_len);

/* xf_query_metadata calls handler as XLA does at registration, with a metadata query and the
 * given XLA FFI API table, and returns the version it answered. Returns 0, or 1 when the handler
 * returned an error (message in err). */
int xf_query_metadata(void* handler, const void* ffi_api, int* major, int* minor, char* err, size_t err_len);

/* xf_probe is quanta's probe handler ("quanta_ffi_probe"): its metadata answer records the XLA
 * FFI API the plugin runs; called, it copies its one argument to its one result. */
void* xf_probe(void);

/* xf_probe_reset forgets what the probe saw, before registering it with another plugin. */
void xf_probe_reset(void);

/* xf_probe_seen reports what the probe saw when XLA asked for its metadata: returns 0 if XLA never
 * asked, else 1 with the plugin's XLA FFI API table, its size and version. */
int xf_probe_seen(const void** ffi_api, size_t* api_size, int* major, int* minor);

#endif /* QUANTA_XLAFFI_PLUGIN_H_ */
