package ffitest

/*
#cgo CFLAGS: -I${SRCDIR}/..
#cgo LDFLAGS: -lpthread
#include "handlers.h"
*/
import "C"

import (
	"unsafe"

	"github.com/quanta-ml/quanta/internal/xlaffi"
)

// Custom-call targets of the test handlers.
const (
	// Axpby computes y = a·x + b·z: operands x and z of one dtype (float32 or bfloat16) and size,
	// float attributes a and b, result like x.
	Axpby = "quanta_test_axpby"

	// U8Dot computes y[m,n] = Σ_k x[m,k]·(codes[k,n] − zero)·scale[n]: operands x float32 (M,K),
	// codes uint8 (K,N), scale float32 (N), integer attribute zero, result float32 (M,N). Its
	// columns are split over XLA's intra-op thread pool.
	U8Dot = "quanta_test_u8dot"

	// Attrs writes its attributes into its float32[5] result: the integer i, the float f,
	// len(s) + 1000·s[0] for the string s, the sum of the int64 array v, and 1 if an attribute
	// "missing" exists (else 0). Its operands are not read.
	Attrs = "quanta_test_attrs"
)

// Handlers returns the test handlers (Axpby, U8Dot, Attrs), for xlaffi.Plugin.Register.
func Handlers() []xlaffi.Handler {
	return []xlaffi.Handler{
		{Target: Axpby, Fn: unsafe.Pointer(C.qffi_handler(C.quanta_test_axpby))},
		{Target: U8Dot, Fn: unsafe.Pointer(C.qffi_handler(C.quanta_test_u8dot))},
		{Target: Attrs, Fn: unsafe.Pointer(C.qffi_handler(C.quanta_test_attrs))},
	}
}

// Unanswering returns a handler that ignores XLA's metadata query (written without
// QFFI_HANDLER): registering it must fail with xlaffi.ErrInvalidHandler.
func Unanswering() xlaffi.Handler {
	return xlaffi.Handler{Target: "quanta_test_unanswering", Fn: unsafe.Pointer(C.qffi_handler(C.quanta_test_unanswering))}
}

// OldABI returns a handler that answers XLA FFI API 0.3: registering it must fail with
// xlaffi.ErrVersion.
func OldABI() xlaffi.Handler {
	return xlaffi.Handler{Target: "quanta_test_old_abi", Fn: unsafe.Pointer(C.qffi_handler(C.quanta_test_old_abi))}
}

// Calls returns how many times the handler of target (Axpby, U8Dot or Attrs) executed; -1 for
// another target.
func Calls(target string) int64 {
	for i, t := range []string{Axpby, U8Dot, Attrs} {
		if t == target {
			return int64(C.ffitest_calls(C.int(i)))
		}
	}
	return -1
}

// PoolThreads returns the size of XLA's intra-op thread pool as U8Dot last saw it (1: none).
func PoolThreads() int64 { return int64(C.ffitest_threads()) }

// PoolChunks returns how many column chunks U8Dot ran on threads other than the one XLA called it
// on: more than 0 proves the kernel ran on XLA's pool.
func PoolChunks() int64 { return int64(C.ffitest_pool_chunks()) }
