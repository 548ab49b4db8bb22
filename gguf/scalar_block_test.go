package gguf_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
)

// TestScalarBlockTensor: a tensor of no dimensions is a scalar, one element (as in llama.cpp,
// whose missing dimensions are 1). Of a block type it is a partial block: without the check it
// was accepted with one element and zero bytes, and ReadFloat32 returned [0] without an error.
func TestScalarBlockTensor(t *testing.T) {
	data := append(buildGGUF(nil, []tensorSpec{{name: "s", typ: gguf.TypeQ4_0, dims: nil, offset: 0}}), make([]byte, 32)...)
	f, err := gguf.Read(bytes.NewReader(data), int64(len(data)))
	if err == nil {
		v, rerr := f.ReadFloat32("s")
		t.Fatalf("a scalar Q4_0 tensor read: %d elements, %d bytes; ReadFloat32 = %v, %v; want an error naming the block size",
			f.Tensors()[0].NumElements(), f.Tensors()[0].Bytes, v, rerr)
	}
	if !errors.Is(err, gguf.ErrCorrupt) || !strings.Contains(err.Error(), "block size") {
		t.Errorf("error %v; want gguf.ErrCorrupt naming the block size", err)
	}
}
