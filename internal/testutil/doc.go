// Package testutil holds the small helpers quanta's tests share.
//
// Tests never hard-code a backend: Backend returns the process-wide backend of package
// runtime, which GOMLX_BACKEND chooses (`make test` runs the suite on XLA CPU and again with
// GOMLX_BACKEND=go). Slow marks tests that only `make test-all` (QUANTA_TEST_ALL=1) runs.
// RandomTensor, RandomValues, NormalTensor and Normals build inputs (of Size elements), InDType
// puts them in a float dtype, Converted converts slices; BroadcastIndex indexes keepdims scales;
// Materialize decodes an implicit array; Float64s, Float32s, Close, SameBits, MaxAbsDiff and
// WantError check results; LazyConvertDType checks a format's convert_element_type, TableProducts
// an embedding table's lookup and tied head; RowOps are the shape ops that keep a blocked format's
// rows, ApplyOp runs one on a host array and DenseOp on its materialization; ShardedTransposeIsLazy
// checks a sharded array's transpose; RecoverError turns a graph builder's panic into an error;
// DumpHLO reruns a test in a child process (InHLOChild there) whose XLA dumps the programs it
// compiles.
package testutil
