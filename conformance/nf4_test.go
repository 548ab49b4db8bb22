package conformance

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/nf4"
)

type nf4Params struct {
	API         string `json:"api"`
	BlockSize   int    `json:"block_size"`
	DType       string `json:"dtype"`
	InputShape  []int  `json:"input_shape"`
	PaddedShape []int  `json:"padded_shape"`
	HasNaN      bool   `json:"has_nan"`
}

// checkNF4: packed bytes and absmax identical to eformer's; our materialized values equal the
// exact codebook × absmax (computed here from the index's codebook and eformer's bytes); the
// largest difference from eformer's polynomial decode goes to the summary.
func checkNF4(s *suite, t *testing.T, c *Case) {
	var p nf4Params
	mustParams(t, c, &p)
	x := s.mustInput(t, c, "x")
	q, err := nf4.Quantize(x, p.BlockSize)
	if p.HasNaN {
		if err == nil {
			t.Fatalf("nf4.Quantize accepted a NaN input")
		}
		s.differ(t, c, "NaN input: eformer quantizes it (absmax NaN, codes 0); nf4.Quantize returns an error (%v)", err)
		return
	}
	packed, absmax := s.mustOutput(t, c, "packed"), s.mustOutput(t, c, "absmax")
	if last := p.InputShape[len(p.InputShape)-1]; p.BlockSize > nf4.MaxBlockSize(last) {
		if err == nil {
			t.Fatalf("nf4.Quantize accepted block size %d for a last axis of %d (maximum %d)", p.BlockSize, last, nf4.MaxBlockSize(last))
		}
		s.differ(t, c, "block size %d longer than the last axis %d: eformer pads each row to one block of %d, "+
			"nf4.Quantize returns an error (the largest block it accepts is %d)", p.BlockSize, last, p.BlockSize, nf4.MaxBlockSize(last))
		s.checkNF4OneBlock(t, x, packed, absmax, nf4.MaxBlockSize(last))
		return
	}
	if err != nil {
		t.Fatalf("nf4.Quantize(%s, %d): %+v", x.Shape(), p.BlockSize, err)
	}
	s.checkNF4Components(t, c, q, packed, absmax, p.BlockSize)

	// Logical shape: ours is the input's, eformer's the padded one.
	if !slices.Equal(q.Shape().Dimensions, p.InputShape) || q.Shape().DType != x.DType() {
		t.Errorf("logical shape %s, want the input's %s", q.Shape(), x.Shape())
	}
	if !slices.Equal(p.InputShape, p.PaddedShape) {
		s.differ(t, c, "logical shape: eformer keeps the padded %v, quanta the input's %v", p.PaddedShape, p.InputShape)
	}

	// Materialized: exact codebook × absmax of the (checked) components.
	ours, _ := nf4Exact(s.idx.NF4Codebook, q.Packed().Tensor(), q.Absmax().Tensor(), p.BlockSize, p.InputShape, x.DType())
	s.skipFloat16OnGo(t, x.DType())
	got := s.materialize(t, q)
	if got.DType() != x.DType() {
		t.Errorf("materialized dtype %s, want %s", got.DType(), x.DType())
	}
	slack := s.convertSlack(x.DType())
	checkClose(t, "materialized = codebook[code] x absmax", got, p.InputShape, ours, func(i int) float64 {
		return slack * math.Abs(ours[i])
	})

	// eformer's polynomial decode vs the exact decode of eformer's codes, on the unpadded part.
	exact, absOf := nf4Exact(s.idx.NF4Codebook, packed, absmax, p.BlockSize, p.InputShape, x.DType())
	poly := unpad(tensorFloat64s(s.mustOutput(t, c, "materialized")), p.PaddedShape, p.InputShape)
	s.notePolyDiff(t, c, x.DType(), exact, poly, absOf)
	if p.API != "ArrayNF4.quantize" {
		// eformer's simulate=True is its materialize: check the record is consistent.
		sim := unpad(tensorFloat64s(s.mustOutput(t, c, "simulated")), p.PaddedShape, p.InputShape)
		if !slices.Equal(sim, poly) {
			t.Errorf("eformer's simulated differs from its materialized values")
		}
	}
}

// nf4FlushAbsmax: a block whose absmax exceeds it has a subnormal 1/absmax, which XLA CPU
// flushes to zero, so eformer codes every element of it as 7 (the value 0).
const nf4FlushAbsmax = 0x1p126

// checkNF4Components compares our packed codes and absmax with eformer's. Blocks with absmax
// above 2^126 may differ (eformer's flushed reciprocal, recorded as a difference).
func (s *suite) checkNF4Components(t *testing.T, c *Case, q *nf4.Array, packed, absmax *tensors.Tensor, blockSize int) {
	t.Helper()
	scales := tensorFloat64s(absmax)
	bytesPerBlock := blockSize / 2
	excused := func(flat int) bool { return scales[flat/bytesPerBlock] > nf4FlushAbsmax }
	if n := s.identicalExcept(t, "packed", q.Packed(), packed, excused); n > 0 {
		s.differ(t, c, "%d packed bytes of blocks with absmax > 2^126: eformer's XLA CPU flushes the subnormal 1/absmax "+
			"to zero and codes the whole block 0x77 (all zeros); quanta encodes them", n)
	}
	s.identical(t, "absmax", q.Absmax(), absmax)
}

// checkNF4OneBlock checks eformer's codes for a block size longer than the last axis (one block
// per row, mostly padding) against quanta's with blockSize, also one block per row: the same
// absmax, the same leading bytes, and only zero codes (0x77) in eformer's remaining padding.
func (s *suite) checkNF4OneBlock(t *testing.T, x, packed, absmax *tensors.Tensor, blockSize int) {
	t.Helper()
	q, err := nf4.Quantize(x, blockSize)
	if err != nil {
		t.Fatalf("nf4.Quantize(%s, %d): %+v", x.Shape(), blockSize, err)
	}
	s.identical(t, "absmax", q.Absmax(), absmax)
	ours, theirs := tensorBytes(q.Packed().Tensor()), tensorBytes(packed)
	rows := absmax.Shape().Size()
	if len(ours) != rows*blockSize/2 || len(theirs)%rows != 0 {
		t.Fatalf("packed: %d bytes for %d rows of block %d; eformer's %d", len(ours), rows, blockSize, len(theirs))
	}
	ourRow, theirRow := blockSize/2, len(theirs)/rows
	for r := range rows {
		o, e := ours[r*ourRow:(r+1)*ourRow], theirs[r*theirRow:(r+1)*theirRow]
		if !bytes.Equal(o, e[:ourRow]) || bytes.Count(e[ourRow:], []byte{0x77}) != theirRow-ourRow {
			t.Errorf("row %d: our packed bytes %x; eformer's %x", r, o, e)
		}
	}
}

// notePolyDiff logs the largest difference between eformer's polynomial decode and the exact
// values, relative to the block's absmax, and keeps the largest in the summary.
func (s *suite) notePolyDiff(t *testing.T, c *Case, dtype dtypes.DType, exact, poly, absOf []float64) {
	t.Helper()
	var maxRel, maxAbs float64
	for i := range exact {
		d := math.Abs(poly[i] - exact[i])
		maxAbs = max(maxAbs, d)
		if absOf[i] > 0 {
			maxRel = max(maxRel, d/absOf[i])
		}
	}
	t.Logf("eformer's polynomial decode vs the exact codebook: max %.6g x absmax (%.6g absolute)", maxRel, maxAbs)
	if maxRel > s.sum.nf4PolyRel {
		s.sum.nf4PolyRel, s.sum.nf4PolyCase = maxRel, c.ID
	}
	if dtype == dtypes.Float32 {
		s.sum.nf4PolyRelF32 = max(s.sum.nf4PolyRelF32, maxRel)
	}
}

// nf4Exact decodes eformer's packed bytes and absmax with the exact codebook: for each element of
// the unpadded logical shape, codebook[code] × absmax computed in float32 (float64 for float64)
// and rounded to dtype. It also returns each element's block absmax.
func nf4Exact(codebook []float32, packed, absmax *tensors.Tensor, blockSize int, dims []int, dtype dtypes.DType) (values, absOf []float64) {
	bytes := tensorFloat64s(packed)
	scales := tensorFloat64s(absmax)
	last := dims[len(dims)-1]
	numBlocks := (last + blockSize - 1) / blockSize
	rows := 1
	for _, d := range dims[:len(dims)-1] {
		rows *= d
	}
	values = make([]float64, 0, rows*last)
	absOf = make([]float64, 0, rows*last)
	for r := range rows {
		for i := range last {
			b, j := i/blockSize, i%blockSize
			byteVal := uint8(bytes[(r*numBlocks+b)*blockSize/2+j/2])
			code := byteVal >> 4
			if j%2 == 1 {
				code = byteVal & 0x0F
			}
			scale := scales[r*numBlocks+b]
			var v float64
			if dtype == dtypes.Float64 {
				v = float64(codebook[code]) * scale
			} else {
				v = float64(codebook[code] * float32(scale))
			}
			values = append(values, roundTo(v, dtype))
			absOf = append(absOf, scale)
		}
	}
	return values, absOf
}

// unpad keeps the part of a row-major array of dimensions padded that lies inside dims (same
// rank, only the last axis padded).
func unpad(v []float64, padded, dims []int) []float64 {
	pl, l := padded[len(padded)-1], dims[len(dims)-1]
	if pl == l {
		return v
	}
	out := make([]float64, 0, len(v)/pl*l)
	for r := 0; r < len(v); r += pl {
		out = append(out, v[r:r+l]...)
	}
	return out
}
