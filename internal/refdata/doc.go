// Package refdata reads the vectors of the reference harness (reference/testdata/: token ids,
// logits, per-token NLLs, embeddings and accuracies produced by transformers, bitsandbytes and
// llama.cpp run for real; reference/README.md defines each set) for tests and examples.
//
// Dir finds reference/testdata from the working directory (a package directory in tests, the
// repository root for commands) by walking up to the module root, or takes $QUANTA_REFERENCE.
// The .npy readers accept the dtypes the harness writes ('<f4', '<f8', '<i4') and convert to one
// Go type (NPY returns any dtype as stored; GGML the block vectors of one GGML type); the JSON
// index files are decoded by the caller into its own structs.
//
// # Errors
//
// Every function returns an error naming the file: ErrMissing (wrapped) when a file or the
// directory is absent, so that tests can skip with one line (Require), and a plain error for a
// file that does not hold what was asked (another dtype, a bad header).
package refdata
