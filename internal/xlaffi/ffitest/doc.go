// Package ffitest holds small typed XLA FFI handlers, written in C with qffi.h, that the tests of
// xlaffi, customcall and runtime register with the XLA CPU plugin and call from GoMLX graphs.
//
// It exists because Go test files cannot use cgo. Only tests import it: its handlers prove the
// mechanism (attributes arrive, several operands, uint8/float32/bfloat16 buffers, errors come
// back as errors, XLA's thread pool is reachable), they are not kernels.
//
// Targets: Axpby (y = a·x + b·z), U8Dot (a uint8-coded weight's product, split over XLA's
// thread pool) and Attrs (echoes its attributes); Unanswering and OldABI are handlers that
// registration must refuse. Calls counts executions.
package ffitest
