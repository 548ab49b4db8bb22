// Package conformance checks quanta against test vectors produced by eformer itself
// (eformer.ops.quantization, run by gen_vectors.py on JAX CPU): packed bytes, absmax, int8 codes
// and scales must be identical to eformer's; materialized values and matmul results must agree
// within tolerance, except where quanta differs on purpose (see README.md, which lists every
// deliberate difference and the case ids that show it).
//
// The package itself is a small loader: LoadIndex reads testdata/index.json, and its Input and
// Output methods load a case's arrays as host tensors. ReadNPYFile reads a .npy file (C order,
// little-endian; descriptors '<f8', '<f4', '<f2', '|u1', '|i1', '<u2', '<i4', '|b1'); bfloat16
// arrays are stored as their uint16 bits, and Input and Output return them as bfloat16 tensors.
// The checks are the package's tests: `go test ./conformance/` needs only the committed vectors,
// no Python. Loading assumes a little-endian host (as GoMLX does).
//
// Errors: every loader function returns an error naming the file and what was expected; a test
// vector that does not match its index entry is an error, not a skipped case.
package conformance
