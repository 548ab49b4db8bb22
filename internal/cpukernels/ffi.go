package cpukernels

/*
#cgo CFLAGS: -I${SRCDIR}/../xlaffi
#include "qk_internal.h"
#include "qk_targets.h"
*/
import "C"

import (
	"unsafe"

	"github.com/quanta-ml/quanta/internal/xlaffi"
)

// Handlers returns the kernels as typed XLA FFI handlers, one per target of the kernel table
// (kernelreg.Targets), in its order.
func Handlers() []xlaffi.Handler {
	var count C.int
	table := unsafe.Slice(C.qk_targets(&count), int(count))
	out := make([]xlaffi.Handler, len(table))
	for i, e := range table {
		out[i] = xlaffi.Handler{Target: C.GoString(e.target), Fn: e.fn}
	}
	return out
}

// NF4Codebook returns the 16 code values the NF4 kernels decode.
func NF4Codebook() [16]float32 {
	var cb [16]float32
	for i := range cb {
		cb[i] = float32(C.qk_nf4_codebook[i])
	}
	return cb
}
