// Package xlaffi registers quanta's CPU kernels, written in C, with a loaded XLA PJRT plugin as
// typed XLA FFI handlers, so that a stablehlo.custom_call with api_version = 4 can call them from
// an XLA-compiled program (package customcall emits the call from a GoMLX graph).
//
// # How
//
// The XLA CPU PJRT plugin lists an FFI extension (PJRT_Extension_Type_FFI) in its PJRT_Api's
// extension chain; its register_handler puts a handler in the plugin's own XLA FFI registry for a
// platform ("Host" on CPU), which XLA reads when it compiles a custom call. Open finds the plugin
// that go-xla already loaded (dlopen RTLD_NOLOAD of the same path returns the same library, and
// its GetPjrtApi the same PJRT_Api table; xlaffi never loads a library and never reaches into
// go-xla), checks it and returns a Plugin; Plugin.Register registers handlers. Registering after
// GoMLX created its PJRT client works: XLA looks the target up at compile time. A target that is
// not registered makes the compile fail with XLA's "No FFI handler registered for <target>"
// error, never a crash.
//
// # Checks
//
// The ABI structs are quanta's own declarations (qffi.h for the XLA FFI side, plugin.c for the
// PJRT side), written from the layouts of xla/ffi/api/c_api.h and
// xla/pjrt/c/pjrt_c_api_ffi_extension.h; no XLA header is copied. Open checks, in order:
//
//   - the library is loaded (ErrPluginNotLoaded) and exports GetPjrtApi (ErrNotPJRT);
//   - PJRT C API 0.MinPJRTMinor or later (ErrVersion): the registration arguments lost their
//     api_version field in XLA (plugins that still have it would read quanta's handler pointer as
//     a version and abort), and 0.115 is the version verified with the new layout;
//   - an FFI extension (ErrNoFFIExtension) large enough to hold register_handler (ErrLayout);
//   - the XLA FFI API the plugin runs is ABIVersion (ErrVersion): XLA asks every handler for its
//     metadata when it registers it (a call with a metadata extension in the frame, and XLA's API
//     table), so Open registers ProbeTarget, whose answer records the plugin's version; and XLA's
//     function table holds the entries qffi.h calls (ErrLayout).
//
// The plugin's register_handler returns success even when XLA's registry refuses a handler (it
// drops XLA's error), so Register checks beforehand what XLA would: it calls each handler with a
// metadata query and requires the answer ABIVersion (ErrInvalidHandler for a handler that does
// not answer, ErrVersion for another version); it refuses a target already taken by another
// function (ErrDuplicate; XLA would keep the first one) and invalid names (ErrInvalidHandler).
//
// # Writing a handler
//
// qffi.h is the layer kernel authors use: QFFI_HANDLER(name, impl) defines a handler that answers
// the metadata query and checks the call frame's struct sizes, then calls impl, which reads its
// buffers (qffi_arg, qffi_ret: data, dtype, dims, size; qffi_expect), its attributes — the
// call's backend_config dictionary — (qffi_attr_int, qffi_attr_float, qffi_attr_string,
// qffi_attr_int_array), splits loops over XLA's intra-op thread pool (qffi_parallel_for) and
// returns NULL or qffi_errorf(...): the error reaches the Go caller of the execution as an
// error. The header's comment states the contract; package ffitest has examples.
//
// # Other plugins
//
// XLA's CUDA PJRT plugin builds the same FFI extension into its chain (pjrt_c_api_gpu_internal.cc
// calls CreateFfiExtension), so the registration path is the same with platform "CUDA"; but its
// handlers receive device buffers and must launch work on the stream XLA_FFI_Stream_Get returns,
// so quanta's host kernels do not apply there and xlaffi registers for HostPlatform only.
//
// # Errors
//
// ErrPluginNotLoaded, ErrNotPJRT, ErrNoFFIExtension, ErrVersion, ErrLayout from Open;
// ErrInvalidHandler, ErrVersion, ErrDuplicate, ErrRegister from Register (joined, one per refused
// handler). MustOpen and MustRegister panic instead.
package xlaffi
