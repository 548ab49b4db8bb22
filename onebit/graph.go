package onebit

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// computeDType is the float dtype graph-side arithmetic on values uses: float64 for float64,
// float32 for everything else (exact for the codes and the bytes).
func computeDType(dtype dtypes.DType) dtypes.DType {
	if dtype == dtypes.Float64 {
		return dtypes.Float64
	}
	return dtypes.Float32
}

// bytePrefixes returns, for a uint8 node b, the G floats floor(b / radix^g), g = 0..G-1, in dtype
// (a float dtype). Code g of a byte is prefix[g] - radix*prefix[g+1], with prefix[G] = 0. Written
// with convert, multiply and floor only, XLA CPU fuses it into the consumer (a reduction or a dot).
func bytePrefixes(l Layout, b *graph.Node, dtype dtypes.DType) []*graph.Node {
	f := graph.ConvertDType(b, dtype)
	prefixes := make([]*graph.Node, l.ValuesPerByte())
	prefixes[0] = f
	for g := 1; g < len(prefixes); g++ {
		prefixes[g] = graph.Floor(graph.MulScalar(f, 1/float64(int(1)<<(l.bitsPerValue()*g))))
	}
	return prefixes
}

// decodeValues unpacks a packed uint8 node (dimensions P, d1, ...) into its values (dimensions
// P*ValuesPerByte, d1, ...) as dtype: -1, 0, +1 (unsigned dtypes wrap -1, as eformer's unpack).
func decodeValues(l Layout, packed *graph.Node, dtype dtypes.DType) *graph.Node {
	g := packed.Graph()
	groups := l.ValuesPerByte()
	radix := l.radix()
	codes := make([]*graph.Node, groups)
	if dtype.IsFloat() {
		cd := computeDType(dtype)
		prefixes := bytePrefixes(l, packed, cd)
		for i := range groups {
			codes[i] = prefixes[i]
			if i+1 < groups {
				codes[i] = graph.Sub(prefixes[i], graph.MulScalar(prefixes[i+1], float64(radix)))
			}
		}
		values := valuesFromCodes(l, graph.Stack(codes, 0), cd)
		return graph.ConvertDType(reshapeGroups(values, packed), dtype)
	}
	// Integer dtypes: integer division by a power of two (XLA turns it into a shift; the pure-Go
	// backend lacks ShiftRightLogical) and a mask.
	mask := graph.Scalar(g, dtypes.Uint8, radix-1)
	for i := range groups {
		c := packed
		if i > 0 {
			c = graph.Div(c, graph.Scalar(g, dtypes.Uint8, 1<<(l.bitsPerValue()*i)))
		}
		codes[i] = graph.BitwiseAnd(c, mask)
	}
	values := valuesFromCodes(l, graph.ConvertDType(graph.Stack(codes, 0), dtype), dtype)
	return reshapeGroups(values, packed)
}

// valuesFromCodes maps codes (already in dtype) to values: code-1 (TwoBit) or 2*code-1 (OneBit).
func valuesFromCodes(l Layout, codes *graph.Node, dtype dtypes.DType) *graph.Node {
	g := codes.Graph()
	if l == OneBit {
		codes = graph.Add(codes, codes)
	}
	return graph.Sub(codes, graph.Scalar(g, dtype, 1))
}

// reshapeGroups turns (G, P, d1, ...) into (G*P, d1, ...).
func reshapeGroups(x, packed *graph.Node) *graph.Node {
	dims := x.Shape().Dimensions
	out := append([]int{dims[0] * dims[1]}, dims[2:]...)
	return graph.Reshape(x, out...)
}

// packValues packs an int8 node of values (valid for the layout) into the layout's bytes. The
// first dimension must be a multiple of ValuesPerByte (callers check).
func packValues(l Layout, values *graph.Node) *graph.Node {
	g := values.Graph()
	dims := values.Shape().Dimensions
	groups := l.ValuesPerByte()
	var codes *graph.Node
	if l == OneBit {
		codes = graph.Where(graph.GreaterThan(values, graph.Scalar(g, values.DType(), 0)),
			graph.Scalar(g, dtypes.Uint8, 1), graph.Scalar(g, dtypes.Uint8, 0))
	} else {
		codes = graph.ConvertDType(graph.Add(values, graph.Scalar(g, values.DType(), 1)), dtypes.Uint8)
	}
	split := append([]int{groups, dims[0] / groups}, dims[1:]...)
	codes = graph.Reshape(codes, split...)
	var packed *graph.Node
	for i := range groups {
		c := graph.Squeeze(graph.SliceAxis(codes, 0, graph.AxisElem(i)), 0)
		if i > 0 {
			c = graph.Mul(c, graph.Scalar(g, dtypes.Uint8, 1<<(l.bitsPerValue()*i)))
			packed = graph.Add(packed, c)
		} else {
			packed = c
		}
	}
	return packed
}
