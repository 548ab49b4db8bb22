//go:build !qk_simde

package cpukernels

// avx512Emulated: the AVX-512 path runs on the hardware (see emulation_simde_test.go).
const avx512Emulated = false
