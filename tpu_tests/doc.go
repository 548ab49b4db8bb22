// Package tpu_tests is the accelerator suite: it checks quanta's formats on whatever accelerator
// backend runs (a TPU or a GPU through its PJRT plugin, see package runtime), against the dense
// computation on the same device.
//
// The suite is two tests, TestAccelerator and TestAcceleratorGGML, with a subtest per check:
//
//   - every format (NF4 with blocks of 64, int8, ternary and binary with a per-column scale),
//     quantized on the host: its materialization on the device equals the one computed by
//     GoMLX's pure-Go backend, and the fused product x @ W (implicitarray.MatMul inside
//     implicitarray.NewExec) matches the dense product x @ Materialize(W) on the device, for
//     float32 and bfloat16 activations, without the generic materialize fallback;
//   - each format with every strategy a GPU uses forced (Auto, PrologueDot, MulReduce, and
//     SlicedSum and CodesDot for ternary and binary), at 1 and 32 bfloat16 activation rows: the
//     product matches the dense bfloat16 product on the device, and the log says which strategy
//     each built (lowering.Built);
//   - quanta.Quantize gives the same arrays as the format packages;
//   - the straight-through estimator: the gradient of sum(StraightThrough(w)·c) is c, exactly;
//   - the GGML block types of GGUF files (Q4_0 to Q8_0 and the K-quants Q2_K to Q6_K), each as a
//     file holds a linear weight, (n, k) with the blocks along k, in TestAcceleratorGGML: its
//     materialization equals the pure-Go backend's bit for bit, and the fused product x·Wᵀ
//     matches the dense one on the device at 1 and 32 rows of float32 and bfloat16 activations;
//   - a sharded product (mesh.NewExec, the weight column-parallel over 2 or 4 devices) equals the
//     single-device one, when the backend has 2 devices or more.
//
// BenchmarkAcceleratorCall separates what a call of a product graph costs on the device from its
// products, and times copying a result to the host.
//
// Without an accelerator (XLA CPU, the pure-Go backend) the test is skipped with a one-line
// reason, so `make test` runs it everywhere. QUANTA_ACCEL_ANY=1 runs it on any backend, to check
// the suite itself on a machine without an accelerator.
//
// On an accelerator machine without a Go toolchain, `make accel-binaries` builds this suite as a
// test binary, with the benchmark, the quanta command and bitsandbytes' wheel;
// tpu_tests/run-on-device.sh runs them there (with bnb_bench.py, bitsandbytes' NF4 beside
// PyTorch's dense bfloat16 product) and writes the results to a folder (docs/backends.md).
package tpu_tests
