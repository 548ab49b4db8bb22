package cpukernels

/*
#cgo CFLAGS: -I${SRCDIR}/../xlaffi
#include "qffi.h"
#include "qk_internal.h"

qffi_error* quanta_nf4_kn(qffi_frame* frame);
qffi_error* quanta_nf4_nk(qffi_frame* frame);
qffi_error* quanta_int8_kn(qffi_frame* frame);
qffi_error* quanta_int8_nk(qffi_frame* frame);
qffi_error* quanta_twobit_kn(qffi_frame* frame);
qffi_error* quanta_onebit_kn(qffi_frame* frame);
*/
import "C"

import (
	"unsafe"

	"github.com/quanta-ml/quanta/internal/xlaffi"
)

// Handlers returns the kernels as typed XLA FFI handlers, by custom-call target: the targets
// package lowering emits (see its kernel.go for each one's operands and attributes).
func Handlers() []xlaffi.Handler {
	return []xlaffi.Handler{
		{Target: "quanta_nf4_kn", Fn: unsafe.Pointer(C.quanta_nf4_kn)},
		{Target: "quanta_nf4_nk", Fn: unsafe.Pointer(C.quanta_nf4_nk)},
		{Target: "quanta_int8_kn", Fn: unsafe.Pointer(C.quanta_int8_kn)},
		{Target: "quanta_int8_nk", Fn: unsafe.Pointer(C.quanta_int8_nk)},
		{Target: "quanta_twobit_kn", Fn: unsafe.Pointer(C.quanta_twobit_kn)},
		{Target: "quanta_onebit_kn", Fn: unsafe.Pointer(C.quanta_onebit_kn)},
	}
}

// NF4Codebook returns the 16 code values the NF4 kernels decode.
func NF4Codebook() [16]float32 {
	var cb [16]float32
	for i := range cb {
		cb[i] = float32(C.qk_nf4_codebook[i])
	}
	return cb
}
