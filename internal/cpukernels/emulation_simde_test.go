//go:build qk_simde

package cpukernels

// avx512Emulated: this build runs the AVX-512 path over SIMDe, whose fused multiply-adds and
// conversions need not round as the hardware's do.
const avx512Emulated = true
