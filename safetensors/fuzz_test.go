package safetensors_test

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/safetensors"
)

// FuzzRead reads arbitrary bytes as safetensors: Read either fails with an error wrapping
// ErrCorrupt, or returns a file whose every tensor reads (as bytes, as a GoMLX tensor, as float32
// where it is a float) and which Write writes back to a file Read gives the same tensors from;
// all of it allocating in proportion to the input (`make fuzz` runs it under a memory limit).
func FuzzRead(f *testing.F) {
	f.Add(file(`{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},`+
		`"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]}}`, append(f32LE(1, 2), 0x80, 0x3F, 0, 0x40)))
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"F32","shape":[0,8],"data_offsets":[8,8]},`+
		`"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}`, append(f32LE(1, 2), 1, 2, 3, 4)))
	f.Add(file(`{"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"d":{"dtype":"F64","shape":[],"data_offsets":[4,12]},`+
		`"e":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[12,13]},"i":{"dtype":"I64","shape":[100,0],"data_offsets":[13,13]}}`,
		[]byte{0, 0x3C, 0, 0xC0, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F, 7}))
	f.Fuzz(func(t *testing.T, data []byte) {
		testutil.AllocatesAtMost(t, "safetensors.Read and reading", 64*uint64(len(data))+32<<20, func() { readAndRewrite(t, data) })
	})
}

func readAndRewrite(t *testing.T, data []byte) {
	st, err := safetensors.Read(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		if !errors.Is(err, safetensors.ErrCorrupt) {
			t.Fatalf("Read: an error not wrapping ErrCorrupt: %v", err)
		}
		return
	}
	var list []safetensors.Tensor
	for _, name := range st.Names() {
		info, _ := st.Info(name)
		raw, err := st.ReadBytes(name)
		if err != nil || int64(len(raw)) != info.Bytes {
			t.Fatalf("ReadBytes(%s): %d bytes, %v", info, len(raw), err)
		}
		list = append(list, safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: raw})
		if _, ok := info.DType.GoMLX(); ok {
			x, err := st.ReadTensor(name)
			if err != nil || x.Size() != info.NumElements() {
				t.Fatalf("ReadTensor(%s): %v", info, err)
			}
		}
		switch info.DType {
		case safetensors.F32, safetensors.F16, safetensors.BF16, safetensors.F64:
			if x, err := st.ReadFloat32(name); err != nil || x.Size() != info.NumElements() {
				t.Fatalf("ReadFloat32(%s): %v", info, err)
			}
		}
	}
	var b bytes.Buffer
	if err := safetensors.Write(&b, list, st.Metadata); err != nil {
		t.Fatalf("Write of the tensors read: %v", err)
	}
	again, err := safetensors.Read(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil {
		t.Fatalf("Read of the file Write wrote: %v", err)
	}
	if !reflect.DeepEqual(again.Names(), st.Names()) || !reflect.DeepEqual(again.Metadata, st.Metadata) {
		t.Fatalf("written again: names %v, metadata %v; read %v, %v", again.Names(), again.Metadata, st.Names(), st.Metadata)
	}
	for _, x := range list {
		info, _ := again.Info(x.Name)
		raw, err := again.ReadBytes(x.Name)
		if err != nil || info.DType != x.DType || !reflect.DeepEqual(info.Shape, x.Shape) || !bytes.Equal(raw, x.Data) {
			t.Fatalf("tensor %q written again: %v, %v", x.Name, info, err)
		}
	}
}
