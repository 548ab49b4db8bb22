package lowering

import "github.com/gomlx/gomlx/pkg/core/graph"

// PolyPairs exposes the arithmetic nibble decode to the external tests.
var PolyPairs = polyPairs

// BitField, AsInt8 and PluginPlatform expose PrologueDot's byte fields, its int8 view of bytes and
// the plugin classification to the external tests.
var (
	BitField       = bitField
	AsInt8         = asInt8
	PluginPlatform = pluginPlatform
)

// DecodeKernels returns how many decode kernels DecodeDot has emitted.
func DecodeKernels() int64 { return decodeKernels.Load() }

// DotGeneralAs builds DotGeneral as for platform (without Kernels): a GPU's or a TPU's program on
// the test backend.
func DotGeneralAs(platform Platform, x *graph.Node, a Quantized, axes Axes) *graph.Node {
	return dotGeneral(x, a, axes, &platform)
}
