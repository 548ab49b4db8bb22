// Package cpukernels holds quanta's CPU kernels for products of float activations with quantized
// weights (NF4, int8, 2-bit and 1-bit), as a C library with Go wrappers.
package cpukernels
