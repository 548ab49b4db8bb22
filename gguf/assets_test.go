package gguf_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"math"
	"slices"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/refdata"
)

// tensorDigests is reference/testdata/ggml/<file>_tensors.json (reference/gen_ggml.py digests):
// per tensor, its type, GGML dims and the sha256 of gguf-py's dequantization (float32,
// little-endian, row-major), which ggml's own dequantize_row_* matched on every block tensor.
type tensorDigests struct {
	Tensors map[string]struct {
		Type   string `json:"type"`
		Dims   []int  `json:"dims"`
		SHA256 string `json:"sha256"`
	} `json:"tensors"`
}

// TestRealFilesDecodeAsGGUFPy decodes every tensor of the real GGUF files of the assets (SmolLM2
// in Q4_1 and Q8_0, Gemma-3 in Q4_K_M: Q4_K, Q5_0, Q6_K, Q8_0) and compares the sha256 of the
// values with gguf-py's.
func TestRealFilesDecodeAsGGUFPy(t *testing.T) {
	for _, tc := range []struct{ asset, digests string }{
		{assets.SmolLM2, "smollm2_tensors.json"},
		{assets.Gemma3, "gemma3_tensors.json"},
	} {
		t.Run(tc.digests, func(t *testing.T) {
			path := assets.Require(t, tc.asset)
			var want tensorDigests
			if err := refdata.JSON(&want, "ggml", tc.digests); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if len(f.Tensors()) != len(want.Tensors) {
				t.Errorf("%d tensors, want %d", len(f.Tensors()), len(want.Tensors))
			}
			for _, info := range f.Tensors() {
				w, ok := want.Tensors[info.Name]
				if !ok {
					t.Errorf("tensor %s is not in %s", info, tc.digests)
					continue
				}
				if info.Type.String() != w.Type || !slices.Equal(info.Dims, w.Dims) {
					t.Errorf("tensor %s; want %s %v", info, w.Type, w.Dims)
					continue
				}
				if got := decodedDigest(t, f, info); got != w.SHA256 {
					t.Errorf("tensor %s: decoded sha256 %s, want %s", info, got, w.SHA256)
				}
			}
		})
	}
}

// decodedDigest streams a tensor through Decode a few rows at a time and hashes the values.
func decodedDigest(t *testing.T, f *gguf.File, info *gguf.Tensor) string {
	t.Helper()
	r, err := f.TensorReader(info.Name)
	if err != nil {
		t.Fatal(err)
	}
	rowElems := 1
	if len(info.Dims) > 0 {
		rowElems = info.Dims[0]
	}
	rowBytes := rowElems / info.Type.BlockSize() * info.Type.BlockBytes()
	rows := max(1, (1<<20)/rowBytes)
	raw := make([]byte, rows*rowBytes)
	values := make([]float32, rows*rowElems)
	out := make([]byte, 4*len(values))
	h := sha256.New()
	for left := info.NumElements() / rowElems; left > 0; left -= rows {
		n := min(rows, left)
		if _, err := io.ReadFull(r, raw[:n*rowBytes]); err != nil {
			t.Fatal(err)
		}
		if err := gguf.Decode(info.Type, raw[:n*rowBytes], values[:n*rowElems]); err != nil {
			t.Fatal(err)
		}
		for i, v := range values[:n*rowElems] {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
		h.Write(out[:4*n*rowElems])
	}
	return hex.EncodeToString(h.Sum(nil))
}
