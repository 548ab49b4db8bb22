package modelbase

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
)

// TestReadRowsEOFAtEnd: the rows of a kept q/k kernel that ends the file are read, un-permuted,
// from a reader that returns io.EOF with the last row, as io.ReaderAt allows: that EOF is not a
// short read.
func TestReadRowsEOFAtEnd(t *testing.T) {
	const in, out, rowBytes = 32, 4, 34 // Q8_0: one block a row
	stored := make([]byte, out*rowBytes)
	for i := range stored {
		stored[i] = byte(i / rowBytes) // each row's bytes its index (the scale a half, the codes int8)
	}
	data := ggufbuild.Build(nil, []ggufbuild.Tensor{{Name: "k", Type: uint32(gguf.TypeQ8_0), Dims: []uint64{in, out}, Data: stored}})
	data = data[:len(data)-(160-len(stored))] // the data section pads 136 bytes to 160: end the file with the tensor
	f, err := gguf.Read(ggufbuild.EOFAtEnd(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, len(stored))
	p := Tensor{Name: "k", Kind: Kernel, In: in, Out: out, UnpermuteHeads: 1}
	if err := readRows(f, p, dst); err != nil {
		t.Fatal(err)
	}
	// One head of width 4: Hugging Face's rows 0, 1, 2, 3 are the converter's 0, 2, 1, 3.
	for r, src := range []byte{0, 2, 1, 3} {
		if got := dst[r*rowBytes : (r+1)*rowBytes]; !bytes.Equal(got, bytes.Repeat([]byte{src}, rowBytes)) {
			t.Errorf("row %d = %v, want stored row %d", r, got, src)
		}
	}
}

// TestReadRowsClosed: reading the rows of a kept kernel from a closed file is an error saying so
// (os.ErrClosed), not one wrapping gguf.ErrCorrupt, in order or un-permuted.
func TestReadRowsClosed(t *testing.T) {
	f := ggufbuild.Closed(t, ggufbuild.Build(nil, []ggufbuild.Tensor{{Name: "k", Type: uint32(gguf.TypeQ8_0), Dims: []uint64{32, 4}, Data: make([]byte, 4*34)}}))
	for _, heads := range []int{0, 1} {
		err := readRows(f, Tensor{Name: "k", Kind: Kernel, In: 32, Out: 4, UnpermuteHeads: heads}, make([]byte, 4*34))
		if !errors.Is(err, os.ErrClosed) || errors.Is(err, gguf.ErrCorrupt) {
			t.Errorf("UnpermuteHeads %d: %v; want os.ErrClosed, not gguf.ErrCorrupt", heads, err)
		}
	}
}
