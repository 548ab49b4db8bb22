// Package quanta holds quantized arrays for GoMLX: weights in NF4, int8, or 1-bit
// (binary/ternary) form that behave like arrays in GoMLX graphs, with fused dequant+matmul
// lowerings compiled by XLA, and training with quantization in the loop.
//
// This root package is the unified entry point, the Go analogue of eformer's
// ops.quantization: a Config (see its fields) and Quantize, QuantizeNode and StraightThrough,
// which dispatch to the format packages nf4, int8 and onebit. The implicit-array machinery they build on is in
// implicitarray; the straight-through estimator in ste.
package quanta
