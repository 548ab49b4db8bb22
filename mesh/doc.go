// Package mesh runs graph functions over a mesh of devices on XLA, with their arguments — dense
// tensors and quantized arrays — sharded as package sharding describes.
//
// # Sharded execution
//
// Exec compiles a graph function with XLA's automatic SPMD partitioning (GoMLX's AutoSharding
// strategy): the function sees logical shapes, each argument's components are cut into shards on
// the host and each device receives only its own (Exec.Place; Placed.ShardShapes reads the shapes
// back from the device buffers); XLA inserts the collectives the shardings imply, e.g. the
// all-reduce of a matmul whose contracting axis is sharded. Results come back replicated. Dense
// arguments are sharded by Exec.WithArgSpecs; implicit arrays by their own Sharding (or
// WithArgSpecs when they have none).
//
// Placement changes what is computed in two ways only: a sharded contracting axis sums its
// partial products in another order (float rounding), and a sharded graph never calls quanta's
// CPU kernels (package lowering), so the products the kernels would serve take a graph
// formulation instead. For most formats that is the same arithmetic; for the GGML types whose
// kernels multiply 8-bit activations at a few rows (Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants, see
// lowering.Kernel) the sharded product keeps float activations and differs from the unsharded
// one by that quantization. What the rules below decide is how much each device stores and how
// much XLA must communicate.
//
// # Errors
//
// NewExec fails, before anything runs, when the backend has fewer devices than the mesh
// (sharding.Mesh.CheckDevices): on XLA CPU, QUANTA_CPU_DEVICES=N (package runtime) gives N
// virtual devices and must be set before the backend starts; the pure-Go backend has one device.
// Place and Call return errors naming the argument, the spec and the mesh when a spec does not fit
// (see package sharding), a leaf is empty (GoMLX cannot shard it) or an array type cannot place
// its components. CallPlaced returns an error for arguments placed by an Exec of another function
// type or over another mesh.
package mesh
