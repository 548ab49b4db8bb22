package refdata

import (
	"encoding/binary"
	"math"
	"strings"

	"github.com/pkg/errors"
)

// GGMLVectors are the vectors of one block type in reference/testdata/ggml (reference/gen_ggml.py,
// run by reference/ggml.sh): ggml's own quantize_row_*_ref and dequantize_row_*.
type GGMLVectors struct {
	// X are the inputs, Rows rows of RowLen float32 values (shared by every type).
	X []float32
	// Q is quantize_row_*_ref of X (all rows in one call), Rows rows of blocks; Deq its
	// dequantize_row_*.
	Q   []byte
	Deq []float32
	// Raw are RawRows rows of random blocks (random half scales, infinite ones in the last row);
	// RawDeq their dequantize_row_*.
	Raw    []byte
	RawDeq []float32
	// Rows and RawRows count the rows of X and Raw; RowLen is the elements of a row.
	Rows, RawRows, RowLen int
}

// GGML reads the vectors of the block type named as GGUF names it ("Q4_K", "IQ4_NL").
func GGML(typeName string) (GGMLVectors, error) {
	name := strings.ToLower(typeName)
	if strings.HasSuffix(name, "_k") {
		name = strings.TrimSuffix(name, "_k") + "_K" // the files use ggml's names: q4_K
	}
	var v GGMLVectors
	var err error
	load := func(file, descr string) ([]byte, []int) {
		if err != nil {
			return nil, nil
		}
		a, e := NPY("ggml", file)
		if e != nil {
			err = e
			return nil, nil
		}
		if a.Descr != descr || len(a.Dims) != 2 {
			err = errors.Errorf("refdata.GGML: %s holds %s %v; accepted: %s of rank 2", file, a.Descr, a.Dims, descr)
			return nil, nil
		}
		return a.Data, a.Dims
	}
	x, xDims := load("x.npy", "<f4")
	v.Q, _ = load(name+".q.npy", "|u1")
	deq, _ := load(name+".deq.npy", "<f4")
	raw, rawDims := load(name+".raw.npy", "|u1")
	rawDeq, _ := load(name+".raw_deq.npy", "<f4")
	if err != nil {
		return GGMLVectors{}, err
	}
	v.X, v.Deq, v.Raw, v.RawDeq = float32s(x), float32s(deq), raw, float32s(rawDeq)
	v.Rows, v.RowLen, v.RawRows = xDims[0], xDims[1], rawDims[0]
	return v, nil
}

func float32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}
