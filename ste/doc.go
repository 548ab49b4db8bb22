// Package ste is the straight-through estimator: the forward pass uses a quantized (fake-quantized)
// value, the backward pass hands the incoming gradient unchanged to the float input. It makes
// training with quantization in the loop possible: the float master weights learn, the forward
// pass sees what inference will see.
//
// Apply takes any quantize function; the root package quanta offers StraightThrough(x, cfg) for
// every quantization type on top of it.
//
// The forward value is exactly quantize(x) converted to x's dtype: Apply computes
// StopGradient(quantize(x)) + (x - StopGradient(x)), whose second term is exactly zero for finite
// x and carries the identity gradient. (A NaN or infinite x makes the output NaN, as the weights
// are broken anyway.) Only x receives a gradient; the other parameters of a quantize function are
// Go values captured by the closure, so they are compile-time constants of the graph.
package ste
