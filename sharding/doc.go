// Package sharding is the vocabulary of how arrays, quantized ones included, are laid out over a
// mesh of devices, in JAX's terms, on top of GoMLX's distributed types. It has no execution code:
// formats use it to describe their components' placement, and package mesh runs graphs with it.
//
// # Vocabulary
//
//   - Mesh: a grid of devices with named axes, e.g. Mesh{data:2, model:2} (NewMesh). Devices are
//     numbered row-major: device d has coordinates (d/2, d%2) on that mesh. Mesh.DeviceMesh is
//     the GoMLX distributed.DeviceMesh with the same axes.
//   - PartitionSpec: one AxisSpec per array axis, written P(None, 'model') as in JAX. An AxisSpec
//     lists the mesh axes that shard that array axis: none (replicated), one, or several (the
//     axis is cut into the product of their sizes). Missing trailing axes are replicated.
//     SpecFrom builds one from a name, a list of names, or a PartitionSpec.
//   - Sharding: a PartitionSpec over a Mesh. The quantized array types (nf4.Array, int8.Array,
//     onebit.Array, onebit.BitArray) keep one as static metadata (WithSharding,
//     WithMeshAndAxis, IsSharded); mesh.Exec places them by it. WithMeshAndAxis checks the spec
//     against the shape, the mesh and the format's layout at once (ComponentSpecs).
//   - Shard: the piece of an array one device holds: along each sharded axis of size D in n
//     shards, the device with index i along those mesh axes holds [i·D/n, (i+1)·D/n).
//
// Validate, ShardShape and ShardingSpec check a spec against a shape and a mesh, and convert it
// to GoMLX's distributed.ShardingSpec.
//
// # Component rules
//
// An implicit array is stored as its components; package mesh gives each component its spec from the
// logical array's spec through the type's ComponentSpecs method (interface ComponentSharder),
// which formats implement with these rules:
//
//   - NF4 (nf4.Array), logical (…, F), packed (…, F/bs, bs/2) uint8, absmax (…, F/bs): leading axes
//     keep their spec in both components; a sharded last axis shards the block axis F/bs of both;
//     the byte axis of packed is replicated. A block must not straddle two shards, so with the last
//     axis in n shards, F/n must be a multiple of the block size bs (this also excludes a
//     zero-padded last block). The materialized array then has exactly the logical placement.
//   - GGML block types (ggml.Array), logical (…, F), blocks (…, F/bs, block bytes) uint8: the
//     NF4 rule with one component; a sharded last axis needs F/n a multiple of the type's block
//     size (32, or 256 for the K-quants).
//   - int8 (int8.Array), weight of the logical shape, scale with size 1 on the quantized axes: the
//     weight has the logical spec; the scale too, except its size-1 axes, which are replicated
//     (every shard of that axis shares the one scale): ScaleSpec, also used for onebit's scale.
//   - 2-bit binary/ternary (onebit.Array, PackedRowsSpec), logical (d0, …), packed (d0/4, …) uint8 with row p
//     holding logical rows p, Q+p, 2Q+p, 3Q+p (Q = d0/4, quarter-strided): the packed component
//     has the logical spec axis by axis. Sharding axes other than the first keeps the logical
//     placement exactly. Sharding the first axis in n shards needs Q % n == 0 and does not keep
//     it: shard s holds, of each quarter g, the rows g·Q + s·Q/n … g·Q + (s+1)·Q/n − 1
//     (onebit.ShardRows), not the block [s·d0/n, (s+1)·d0/n). Each logical row is still stored
//     exactly once (1/n of the bytes per device) and results are exact, but the unpacked weight
//     reaches the logical placement only through XLA's communication: in a row-parallel matmul
//     x @ W with x's columns sharded as blocks, XLA exchanges data so that matching rows and
//     columns meet. Sharding the output (second) axis instead — column parallel — needs no
//     exchange for the weight. A scaled array's scale follows ScaleSpec.
//   - 1-bit binary (onebit.BitArray, PackedRowsSpec), packed (d0/8, …), eighth-strided: the same
//     rule with 8 rows a byte; a sharded first axis needs (d0/8) % n == 0.
//
// A replicated array needs no rule; a sharded array whose type does not implement
// ComponentSharder is an error.
//
// # Errors
//
// Functions return errors that name the spec, the shape and the mesh: an unknown mesh axis, a mesh
// axis used twice (in one array axis or across axes), a spec with more axes than the array
// (NumShards, Validate); an array axis not divisible by its number of shards (Validate); packed
// rows not divisible by the shards, a scale that does not fit its array (PackedRowsSpec,
// ScaleSpec); a mesh of more than MaxDevices devices (NewMesh); a mesh with more devices than the
// backend has (Mesh.CheckDevices). A Mesh method called on a nil mesh names the method: an error
// where it returns one, a panic otherwise (String gives "<nil>").
package sharding
