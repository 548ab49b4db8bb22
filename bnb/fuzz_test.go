package bnb_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/bnb"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/safetensors"
)

// FuzzReadLayers reads arbitrary bytes as a safetensors state dict and asks for a Linear4bit and a
// Linear8bitLt layer in it: each read either fails with an error, or gives a layer whose Tensors
// write a state dict that reads back to a layer writing the same tensors (every layer read can be
// saved and loaded again); all of it allocating in proportion to the input, never to a number of
// the quant state (`make fuzz` runs it under a memory limit). The seeds are bitsandbytes' own
// files and layers quantized here.
func FuzzReadLayers(f *testing.F) {
	for _, name := range []string{"linear4bit_nf4_l128x64.safetensors", "linear4bit_nf4_l200x48_dq.safetensors",
		"linear8bitlt_l128x64.safetensors"} {
		if data, err := os.ReadFile(filepath.Join(refDir, name)); err == nil {
			f.Add(data)
		}
	}
	for _, c := range []struct {
		dims      []int
		blockSize int
		dq        bool
	}{{[]int{4, 64}, 64, false}, {[]int{3, 7}, 4096, true}, {[]int{2, 10}, 8, false}} {
		l := codebookLinear4bit(f, c.dims[0], c.dims[1], c.blockSize, c.dq)
		l.Bias = tensors.FromFlatDataAndDimensions(make([]float32, c.dims[0]), c.dims[0])
		f.Add(stateDict(f, l))
	}
	f.Add(stateDict(f, codebookLinear8bitLt(f, 3, 5)))
	f.Fuzz(func(t *testing.T, data []byte) {
		testutil.AllocatesAtMost(t, "bnb readers", 64*uint64(len(data))+32<<20, func() { readLayers(t, data) })
	})
}

// stateDict returns the bytes of the state dict of one layer.
func stateDict(tb testing.TB, l layer) []byte {
	list := layerTensors(tb, l)
	bnb.SortLikeTorch(list)
	var b bytes.Buffer
	if err := safetensors.Write(&b, list, map[string]string{"format": "pt"}); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

func readLayers(t *testing.T, data []byte) {
	file, err := safetensors.Read(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return
	}
	if l, err := bnb.ReadLinear4bit(file, ""); err == nil {
		again := func(f *safetensors.File) (layer, error) { return bnb.ReadLinear4bit(f, "") }
		writesAgain(t, l, again)
	}
	if l, err := bnb.ReadLinear8bitLt(file, ""); err == nil {
		again := func(f *safetensors.File) (layer, error) { return bnb.ReadLinear8bitLt(f, "") }
		writesAgain(t, l, again)
	}
}

// layer is what Linear4bit and Linear8bitLt have in common.
type layer interface {
	Tensors(prefix string) ([]safetensors.Tensor, error)
}

// writesAgain checks that a layer read from a state dict writes one that read reads back to a
// layer writing the same tensors.
func writesAgain(t *testing.T, l layer, read func(*safetensors.File) (layer, error)) {
	list, err := l.Tensors("")
	if err != nil {
		t.Fatalf("a layer read from a state dict cannot be written: %v", err)
	}
	var b bytes.Buffer
	if err := safetensors.Write(&b, list, nil); err != nil {
		t.Fatalf("the state dict of a layer read cannot be written: %v", err)
	}
	file, err := safetensors.Read(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil {
		t.Fatal(err)
	}
	back, err := read(file)
	if err != nil {
		t.Fatalf("the state dict written for a layer read does not read back: %v", err)
	}
	again, err := back.Tensors("")
	if err != nil || !reflect.DeepEqual(again, list) {
		t.Fatalf("read back, the layer writes other tensors (%v)", err)
	}
}
