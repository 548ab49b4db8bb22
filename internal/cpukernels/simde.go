//go:build qk_simde

package cpukernels

// The qk_simde build tag compiles the AVX-512 kernels over SIMDe's portable implementations of
// the intrinsics and reports the AVX-512 path as supported, so that the tests run that path on
// any x86-64 CPU (`make test` does when the CPU lacks AVX-512). CGO_CFLAGS must name SIMDe's
// include folder (scripts/simde.sh fetches it).

/*
#cgo CFLAGS: -DQK_SIMDE -Wno-psabi -O1
*/
import "C"
