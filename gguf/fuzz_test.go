package gguf_test

import (
	"errors"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// FuzzRead reads arbitrary bytes as GGUF: Read either fails with an error wrapping ErrCorrupt or
// ErrUnsupported, or returns a file whose every metadata value can be asked for and every tensor
// read raw and, where decodable, decoded (or refused for a NaN or infinity); all of it allocating in proportion to the input, never
// to a number in it (`make fuzz` runs it under a memory limit).
func FuzzRead(f *testing.F) {
	sample, _ := sampleFile()
	f.Add(sample)
	f.Add(buildGGUF([]kv{{"general.alignment", uint32(64)}, {"s", "text"}}, []tensorSpec{
		{name: "a", typ: gguf.TypeF16, dims: []uint64{4, 2}, data: f16Bytes(0x3C00, 0x4000, 0, 0xBC00, 1, 2, 3, 4), offset: -1},
		{name: "e", typ: gguf.TypeQ8_0, dims: []uint64{0}, offset: -1},
		{name: "k", typ: gguf.TypeQ4_K, dims: []uint64{256}, data: make([]byte, 144), offset: -1},
	}))
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		testutil.AllocatesAtMost(t, "gguf.Read and decoding", 64*uint64(len(data))+32<<20, func() { readAll(t, data) })
	})
}

func readAll(t *testing.T, data []byte) {
	// A reader that returns io.EOF with the bytes that end the file, as io.ReaderAt allows.
	file, err := gguf.Read(ggufbuild.EOFAtEnd(data), int64(len(data)))
	if err != nil {
		if !errors.Is(err, gguf.ErrCorrupt) && !errors.Is(err, gguf.ErrUnsupported) {
			t.Fatalf("Read: an error wrapping neither ErrCorrupt nor ErrUnsupported: %v", err)
		}
		return
	}
	for _, key := range file.Keys() {
		if _, ok := file.Value(key); !ok {
			t.Fatalf("key %q listed but without a value", key)
		}
		_, _ = file.Uint(key)
		_, _ = file.Float(key)
		_, _ = file.String(key)
		_, _ = file.Strings(key)
	}
	for _, tensor := range file.Tensors() {
		raw, err := file.ReadRaw(tensor.Name)
		if err != nil || int64(len(raw)) != tensor.Bytes {
			t.Fatalf("ReadRaw(%s): %d bytes, %v", tensor, len(raw), err)
		}
		if !tensor.Type.CanDecode() {
			continue
		}
		values, err := file.ReadFloat32(tensor.Name)
		if errors.Is(err, gguf.ErrCorrupt) { // a NaN or infinite value or block scale
			continue
		}
		if err != nil || len(values) != tensor.NumElements() {
			t.Fatalf("ReadFloat32(%s): %d values, %v", tensor, len(values), err)
		}
	}
}
