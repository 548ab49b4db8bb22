// Package quanta holds quantized arrays for GoMLX: weights in NF4, int8, or binary/ternary form
// that behave like arrays in GoMLX graphs, with products that read the packed bytes directly, and
// training with quantization in the loop.
//
// This root package is the entry point: a Config (format, block size, scales, product strategy)
// and Quantize (host tensor → implicit array), Simulate (the fake-quantized tensor), QuantizeNode
// (the same inside a graph) and StraightThrough (quantization-aware training), which dispatch to
// the format packages:
//
//	package        format                                     import as
//	nf4            4-bit NormalFloat, blocks along the last axis
//	int8           int8 codes with per-slice scales            qint8 "github.com/quanta-ml/quanta/int8"
//	onebit         binary/ternary, 2 bits (or 1) a value
//
// The implicit-array machinery they build on is package implicitarray; every product of a
// quantized weight is built by package lowering; sharding and mesh place arrays on several
// devices; qlayers holds layers for GoMLX contexts; ste is the straight-through estimator;
// runtime (imported as is by programs, or aliased where it meets the standard library's runtime)
// picks and starts the backend.
package quanta
