// Package mesh describes how arrays, quantized ones included, are laid out over a mesh of devices,
// in eformer's (JAX's) vocabulary: a Mesh has named axes with sizes, and a PartitionSpec says, for
// each axis of an array, which mesh axes shard it (none: replicated).
//
// The quantized array types keep a Sharding as static metadata (eformer's with_sharding, reshard,
// with_mesh_and_axis and is_sharded).
package mesh
