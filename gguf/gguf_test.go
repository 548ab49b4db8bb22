package gguf_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// Hand-built blocks and the values they decode to, computed from the format definitions.
func q4_0Block() ([]byte, []float32) {
	raw := f16Bytes(0x3800) // d = 0.5
	want := make([]float32, 32)
	for j := 0; j < 16; j++ {
		lo, hi := j, 15-j
		raw = append(raw, byte(lo|hi<<4))
		want[j] = float32(lo-8) * 0.5
		want[j+16] = float32(hi-8) * 0.5
	}
	return raw, want
}

func q4_1Block() ([]byte, []float32) {
	raw := f16Bytes(0x3400, 0xBC00) // d = 0.25, m = -1
	want := make([]float32, 32)
	for j := 0; j < 16; j++ {
		lo, hi := j, 15-j
		raw = append(raw, byte(lo|hi<<4))
		want[j] = float32(lo)*0.25 - 1
		want[j+16] = float32(hi)*0.25 - 1
	}
	return raw, want
}

func q8_0Block() ([]byte, []float32) {
	raw := f16Bytes(0x4000) // d = 2
	want := make([]float32, 32)
	for j := 0; j < 32; j++ {
		q := int8(j - 16)
		raw = append(raw, byte(q))
		want[j] = float32(q) * 2
	}
	return raw, want
}

func TestDecode(t *testing.T) {
	q40, q40Want := q4_0Block()
	q41, q41Want := q4_1Block()
	q80, q80Want := q8_0Block()
	tests := []struct {
		name string
		typ  gguf.Type
		raw  []byte
		want []float32
	}{
		{"F32", gguf.TypeF32, f32Bytes(1, -2.5, 3e-8), []float32{1, -2.5, 3e-8}},
		{"F16", gguf.TypeF16, f16Bytes(0x3C00, 0xC000, 0x3800, 0x7BFF), []float32{1, -2, 0.5, 65504}},
		{"BF16", gguf.TypeBF16, f16Bytes(0x3F80, 0xC020), []float32{1, -2.5}},
		{"Q4_0", gguf.TypeQ4_0, q40, q40Want},
		{"Q4_1", gguf.TypeQ4_1, q41, q41Want},
		{"Q8_0", gguf.TypeQ8_0, q80, q80Want},
		{"Q4_1/two blocks", gguf.TypeQ4_1, append(append([]byte{}, q41...), q41...), append(append([]float32{}, q41Want...), q41Want...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := make([]float32, len(tc.want))
			if err := gguf.Decode(tc.typ, tc.raw, got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	q41, _ := q4_1Block()
	tests := []struct {
		name string
		typ  gguf.Type
		raw  []byte
		n    int
		want string
	}{
		{"unsupported type", gguf.TypeQ8_K, make([]byte, 292), 256, "accepted: F32, F16"},
		{"partial block", gguf.TypeQ4_1, q41, 16, "needs 20 bytes per 32 elements"},
		{"short source", gguf.TypeQ4_1, q41[:19], 32, "19 bytes of Q4_1"},
		{"long source", gguf.TypeF32, make([]byte, 12), 2, "12 bytes of F32"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := gguf.Decode(tc.typ, tc.raw, make([]float32, tc.n))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one containing %q", err, tc.want)
			}
		})
	}
}

// sampleFile is a small valid GGUF file: every metadata type, and one tensor of each decodable type.
func sampleFile() ([]byte, map[string][]float32) {
	q40, q40Want := q4_0Block()
	q41, q41Want := q4_1Block()
	q80, q80Want := q8_0Block()
	kvs := []kv{
		{"general.architecture", "llama"},
		{"u8", uint8(7)}, {"i8", int8(-7)}, {"u16", uint16(700)}, {"i16", int16(-700)},
		{"u32", uint32(70000)}, {"i32", int32(-70000)}, {"f32", float32(0.5)}, {"bool", true},
		{"u64", uint64(1 << 40)}, {"i64", int64(-1 << 40)}, {"f64", 0.25},
		{"tokens", []string{"a", "bc", ""}}, {"types", []int32{1, 3, 1}}, {"scores", []float32{-1, 0}},
		{"nested", []any{[]int32{1, 2}, []string{"x"}}},
	}
	f32Want := []float32{1, 2, 3, 4, 5, 6}
	tensors := []tensorSpec{
		{name: "f32", typ: gguf.TypeF32, dims: []uint64{3, 2}, data: f32Bytes(f32Want...), offset: -1},
		{name: "q4_0", typ: gguf.TypeQ4_0, dims: []uint64{32}, data: q40, offset: -1},
		{name: "q4_1", typ: gguf.TypeQ4_1, dims: []uint64{32, 1}, data: q41, offset: -1},
		{name: "q8_0", typ: gguf.TypeQ8_0, dims: []uint64{32}, data: q80, offset: -1},
	}
	return buildGGUF(kvs, tensors), map[string][]float32{"f32": f32Want, "q4_0": q40Want, "q4_1": q41Want, "q8_0": q80Want}
}

func TestRead(t *testing.T) {
	data, want := sampleFile()
	f, err := gguf.Read(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 3 || f.Alignment != 32 || f.DataOffset%32 != 0 {
		t.Errorf("version %d alignment %d data offset %d", f.Version, f.Alignment, f.DataOffset)
	}
	values := map[string]any{
		"u8": uint8(7), "i8": int8(-7), "u16": uint16(700), "i16": int16(-700), "u32": uint32(70000),
		"i32": int32(-70000), "f32": float32(0.5), "bool": true, "u64": uint64(1 << 40), "i64": int64(-1 << 40),
		"f64": 0.25, "tokens": []string{"a", "bc", ""}, "types": []int32{1, 3, 1}, "scores": []float32{-1, 0},
		"nested": []any{[]int32{1, 2}, []string{"x"}},
	}
	for key, v := range values {
		got, ok := f.Value(key)
		if !ok || !reflect.DeepEqual(got, v) {
			t.Errorf("metadata %q = %#v (found %v), want %#v", key, got, ok, v)
		}
	}
	if keys := f.Keys(); len(keys) != 16 || keys[0] != "general.architecture" || keys[15] != "nested" {
		t.Errorf("keys in file order: %v", keys)
	}
	if arch, err := f.String("general.architecture"); err != nil || arch != "llama" {
		t.Errorf("String = %q, %v", arch, err)
	}
	if u, err := f.Uint("u32"); err != nil || u != 70000 {
		t.Errorf("Uint(u32) = %d, %v", u, err)
	}
	if _, err := f.Uint("i32"); !errors.Is(err, gguf.ErrCorrupt) {
		t.Errorf("Uint of a negative value: %v", err)
	}
	if x, err := f.Float("f64"); err != nil || x != 0.25 {
		t.Errorf("Float(f64) = %g, %v", x, err)
	}
	if _, err := f.String("missing"); !errors.Is(err, gguf.ErrNotFound) {
		t.Errorf("missing key: %v", err)
	}
	if _, err := f.String("u8"); !errors.Is(err, gguf.ErrCorrupt) || !strings.Contains(err.Error(), "accepted: string") {
		t.Errorf("wrong type: %v", err)
	}
	for name, w := range want {
		got, err := f.ReadFloat32(name)
		if err != nil {
			t.Fatalf("ReadFloat32(%q): %v", name, err)
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("ReadFloat32(%q) = %v, want %v", name, got, w)
		}
	}
	tensor, _ := f.Tensor("f32")
	if !reflect.DeepEqual(tensor.Shape(), []int{2, 3}) || tensor.NumElements() != 6 || tensor.Bytes != 24 {
		t.Errorf("tensor f32: shape %v, %d elements, %d bytes", tensor.Shape(), tensor.NumElements(), tensor.Bytes)
	}
	raw, err := f.ReadRaw("q4_1")
	if q41, _ := q4_1Block(); err != nil || !bytes.Equal(raw, q41) {
		t.Errorf("ReadRaw: %v", err)
	}
	if _, err := f.ReadFloat32("nope"); !errors.Is(err, gguf.ErrNotFound) {
		t.Errorf("missing tensor: %v", err)
	}
	if err := f.DecodeInto("f32", make([]float32, 5)); err == nil {
		t.Error("DecodeInto with a short destination: no error")
	}
}

// openSample writes the sample file to a temporary folder and opens it with gguf.Open.
func openSample(t *testing.T) (*gguf.File, []byte) {
	t.Helper()
	data, _ := sampleFile()
	path := filepath.Join(t.TempDir(), "sample.gguf")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return f, data
}

func TestOpen(t *testing.T) {
	f, _ := openSample(t)
	if got, err := f.ReadFloat32("f32"); err != nil || got[5] != 6 {
		t.Errorf("ReadFloat32 = %v, %v", got, err)
	}
	if err := f.Close(); err != nil {
		t.Error(err)
	}
	if _, err := gguf.Open(filepath.Join(t.TempDir(), "missing.gguf")); err == nil {
		t.Error("opening a missing file: no error")
	}
}

// TestTruncated cuts the sample file at every length: each prefix must be rejected with
// ErrCorrupt by Read itself (before any tensor is read), never accepted and never panicking.
func TestTruncated(t *testing.T) {
	data, _ := sampleFile()
	for n := 0; n < len(data); n++ {
		_, err := gguf.Read(bytes.NewReader(data[:n]), int64(n))
		if !errors.Is(err, gguf.ErrCorrupt) {
			t.Fatalf("file cut to %d of %d bytes: error %v, want ErrCorrupt", n, len(data), err)
		}
	}
}

func TestCorrupt(t *testing.T) {
	header := func(version uint32, nTensors, nKV uint64) []byte {
		var b ggufBuilder
		b.WriteString("GGUF")
		b.u32(version)
		b.u64(nTensors)
		b.u64(nKV)
		return b.Bytes()
	}
	withKV := func(key string, vt uint32, payload ...any) []byte {
		var b ggufBuilder
		b.Write(header(3, 0, 1))
		b.str(key)
		b.u32(vt)
		for _, p := range payload {
			_ = binary.Write(&b.Buffer, binary.LittleEndian, p)
		}
		return b.Bytes()
	}
	withTensor := func(dims []uint64, typ uint32, offset uint64) []byte {
		var b ggufBuilder
		b.Write(header(3, 1, 0))
		b.str("t")
		b.u32(uint32(len(dims)))
		for _, d := range dims {
			b.u64(d)
		}
		b.u32(typ)
		b.u64(offset)
		for b.Len()%32 != 0 {
			b.WriteByte(0)
		}
		b.Write(make([]byte, 64))
		return b.Bytes()
	}
	q41, _ := q4_1Block()
	tests := []struct {
		name     string
		data     []byte
		sentinel error
		want     string
	}{
		{"magic", append([]byte("GGML"), header(3, 0, 0)[4:]...), gguf.ErrCorrupt, `magic "GGML"`},
		{"version 1", header(1, 0, 0), gguf.ErrUnsupported, "version 1; accepted: 2, 3"},
		{"big-endian", header(3<<24, 0, 0), gguf.ErrUnsupported, "big-endian"},
		{"huge tensor count", header(3, 1<<60, 0), gguf.ErrCorrupt, "tensor count is 1152921504606846976"},
		{"huge metadata count", header(3, 0, 1<<60), gguf.ErrCorrupt, "metadata count"},
		{"huge key length", append(append(header(3, 0, 1), binary.LittleEndian.AppendUint64(nil, 1<<50)...), make([]byte, 16)...), gguf.ErrCorrupt, "metadata key #0 length is 1125899906842624"},
		{"huge string", withKV("s", 8, uint64(1<<50)), gguf.ErrCorrupt, `metadata "s" length is 1125899906842624`},
		{"huge array", withKV("a", 9, uint32(4), uint64(1<<40)), gguf.ErrCorrupt, `metadata "a" array length`},
		{"bad value type", withKV("v", 13), gguf.ErrCorrupt, "value type 13"},
		{"bad element type", withKV("a", 9, uint32(42), uint64(0)), gguf.ErrCorrupt, "array element type 42"},
		{"bad bool", withKV("b", 7, uint8(2)), gguf.ErrCorrupt, "bool byte 2"},
		{"alignment", withKV("general.alignment", 4, uint32(24)), gguf.ErrCorrupt, "general.alignment is 24"},
		{"alignment type", withKV("general.alignment", 10, uint64(32)), gguf.ErrCorrupt, "general.alignment"},
		{"deep arrays", withKV("a", 9, uint32(9), uint64(1), uint32(9), uint64(1), uint32(9), uint64(1), uint32(9), uint64(1)), gguf.ErrCorrupt, "nested deeper"},
		{"too many dims", withTensor([]uint64{1, 1, 1, 1, 1}, 0, 0), gguf.ErrCorrupt, "5 dimensions"},
		{"huge dims", withTensor([]uint64{1 << 40, 1 << 40}, 0, 0), gguf.ErrCorrupt, "more elements than the file can hold"},
		{"unknown type", withTensor([]uint64{4}, 99, 0), gguf.ErrUnsupported, "GGML type 99"},
		{"partial block", withTensor([]uint64{16}, 3, 0), gguf.ErrCorrupt, "not a multiple of the Q4_1 block size 32"},
		{"unaligned offset", withTensor([]uint64{4}, 0, 4), gguf.ErrCorrupt, "not a multiple of the alignment"},
		{"data past the end", withTensor([]uint64{32}, 0, 0), gguf.ErrCorrupt, "needs bytes [0, 128)"},
		{"offset past the end", withTensor([]uint64{4}, 0, 1<<40), gguf.ErrCorrupt, "past the end"},
		{"overlap", append(buildGGUF(nil, []tensorSpec{
			{name: "a", typ: gguf.TypeQ4_1, dims: []uint64{64}, data: append(append([]byte{}, q41...), q41...), offset: 0},
			{name: "b", typ: gguf.TypeQ4_1, dims: []uint64{32}, data: q41, offset: 32},
		}), make([]byte, 32)...), gguf.ErrCorrupt, "overlap"},
		{"duplicate tensor", buildGGUF(nil, []tensorSpec{
			{name: "a", typ: gguf.TypeF32, dims: []uint64{1}, data: f32Bytes(1), offset: -1},
			{name: "a", typ: gguf.TypeF32, dims: []uint64{1}, data: f32Bytes(1), offset: -1},
		}), gguf.ErrCorrupt, `tensor "a" appears twice`},
		{"duplicate key", buildGGUF([]kv{{"k", uint8(1)}, {"k", uint8(2)}}, nil), gguf.ErrCorrupt, `"k" appears twice`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gguf.Read(bytes.NewReader(tc.data), int64(len(tc.data)))
			if !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want %v containing %q", err, tc.sentinel, tc.want)
			}
		})
	}
}

// TestNoTensorsUnpadded: a file without tensors may end right after its metadata, without the
// padding to the (empty) data section, as llama.cpp's vocabulary-only files (models/ggml-vocab-*.gguf)
// do and llama.cpp reads them: nothing is missing that a reader needs. With a tensor, the data
// section must be there (TestTruncated).
func TestNoTensorsUnpadded(t *testing.T) {
	data := buildGGUF([]kv{{"tokenizer.ggml.model", "gpt2"}}, nil)
	data = bytes.TrimRight(data, "\x00") // the metadata ends with "gpt2"
	if len(data)%32 == 0 {
		t.Fatalf("the test file is %d bytes, aligned: nothing to trim", len(data))
	}
	f, err := gguf.Read(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f.String("tokenizer.ggml.model"); err != nil || got != "gpt2" || len(f.Tensors()) != 0 {
		t.Errorf("String = %q, %v; %d tensors", got, err, len(f.Tensors()))
	}
}

// TestEmptyTensorOffsets: a tensor without elements may sit at the offset where another starts,
// in either order in the directory; it overlaps nothing, and a tensor inside another still does.
func TestEmptyTensorOffsets(t *testing.T) {
	a := tensorSpec{name: "a", typ: gguf.TypeF32, dims: []uint64{8}, data: f32Bytes(1, 2, 3, 4, 5, 6, 7, 8), offset: 0}
	b := tensorSpec{name: "b", typ: gguf.TypeF32, dims: []uint64{2}, data: f32Bytes(9, 10), offset: 32}
	for _, order := range [][]tensorSpec{
		{a, {name: "z", typ: gguf.TypeF32, dims: []uint64{0, 8}, offset: 32}, b},
		{a, b, {name: "z", typ: gguf.TypeF32, dims: []uint64{0, 8}, offset: 32}},
		{{name: "0", typ: gguf.TypeF32, dims: []uint64{8, 0}, offset: 32}, b, a},
		{b, {name: "end", typ: gguf.TypeQ4_0, dims: []uint64{0}, offset: 64}, a},
	} {
		data := append(buildGGUF(nil, order), make([]byte, 24)...)
		f, err := gguf.Read(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			var names []string
			for _, ts := range order {
				names = append(names, ts.name)
			}
			t.Errorf("tensors %v: %v", names, err)
			continue
		}
		if got, err := f.ReadFloat32("b"); err != nil || !reflect.DeepEqual(got, []float32{9, 10}) {
			t.Errorf("ReadFloat32(b) = %v, %v", got, err)
		}
	}
	inside := append(buildGGUF(nil, []tensorSpec{a, {name: "c", typ: gguf.TypeF32, dims: []uint64{1}, data: f32Bytes(0), offset: 0}}),
		make([]byte, 32)...)
	if _, err := gguf.Read(bytes.NewReader(inside), int64(len(inside))); !errors.Is(err, gguf.ErrCorrupt) {
		t.Errorf("a tensor inside another: %v, want ErrCorrupt", err)
	}
}

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

// TestReaderEOFAtEnd: the tensor that ends the file reads from a reader that returns io.EOF with
// the last bytes, as io.ReaderAt allows: that EOF is not a truncation.
func TestReaderEOFAtEnd(t *testing.T) {
	data, want := sampleFile()
	f, err := gguf.Read(ggufbuild.EOFAtEnd(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	last, _ := f.Tensor("q8_0")
	if last.Offset+last.Bytes != int64(len(data)) {
		t.Fatalf("tensor %s ends at %d, the file at %d: the test needs it to end the file", last, last.Offset+last.Bytes, len(data))
	}
	if raw, err := f.ReadRaw("q8_0"); err != nil || !bytes.Equal(raw, data[last.Offset:]) {
		t.Errorf("ReadRaw(q8_0): %v", err)
	}
	if got, err := f.ReadFloat32("q8_0"); err != nil || !reflect.DeepEqual(got, want["q8_0"]) {
		t.Errorf("ReadFloat32(q8_0) = %v, %v; want %v", got, err, want["q8_0"])
	}
}

// TestTensorBytesOverflow: a tensor's byte size can't overflow an int64 whatever size Read is
// given: with math.MaxInt64 for a short reader, an F32 tensor of 2^61 elements would otherwise
// be -2^63 bytes, and ReadRaw would panic with "makeslice: len out of range".
func TestTensorBytesOverflow(t *testing.T) {
	data := buildGGUF(nil, []tensorSpec{{name: "big", typ: gguf.TypeF32, dims: []uint64{1 << 61}, offset: 0}})
	f, err := gguf.Read(bytes.NewReader(data), math.MaxInt64)
	if err == nil {
		big, _ := f.Tensor("big")
		t.Fatalf("tensor %s accepted with %d bytes", big, big.Bytes)
	}
	if !errors.Is(err, gguf.ErrCorrupt) || !strings.Contains(err.Error(), `tensor big F32 [2305843009213693952] needs 2305843009213693952 blocks of 4 bytes`) {
		t.Errorf("error %v; want ErrCorrupt naming the tensor and its bytes", err)
	}
}

// TestReadSizeLargerThanContent: Read given a size larger than what its reader holds
// (math.MaxInt64 for a reader of unknown length) rejects a string or array whose length runs past
// the content with ErrCorrupt, allocating little: no length read from the file is allocated for
// before the reader is known to hold its bytes.
func TestReadSizeLargerThanContent(t *testing.T) {
	withKV := func(vt uint32, payload ...any) []byte {
		var b ggufBuilder
		b.WriteString("GGUF")
		b.u32(3)
		b.u64(0)
		b.u64(1)
		b.str("k")
		b.u32(vt)
		for _, p := range payload {
			_ = binary.Write(&b.Buffer, binary.LittleEndian, p)
		}
		return append(b.Bytes(), make([]byte, 64)...)
	}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"string of 1 GiB", withKV(8, uint64(1<<30)), `metadata "k" length is 1073741824`},
		{"string of 1 TiB", withKV(8, uint64(1<<40)), `metadata "k" length is 1099511627776`},
		{"uint8 array of 1 TiB", withKV(9, uint32(0), uint64(1<<40)), `metadata "k" array length is 1099511627776`},
		{"string array of 2^40 elements", withKV(9, uint32(8), uint64(1<<40)), `metadata "k" array length is 1099511627776`},
		{"array of arrays", withKV(9, uint32(9), uint64(2), uint32(4), uint64(1<<40)), `metadata "k" array length is 1099511627776`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			testutil.AllocatesAtMost(t, "gguf.Read", 4<<20, func() {
				_, err = gguf.Read(bytes.NewReader(tc.data), math.MaxInt64)
			})
			if !errors.Is(err, gguf.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want ErrCorrupt containing %q", err, tc.want)
			}
		})
	}
	// A tensor's data is checked against the size only, but ReadRaw, ReadFloat32 and TensorReader
	// (before a loader allocates for it) check that the reader holds it.
	data := buildGGUF(nil, []tensorSpec{{name: "big", typ: gguf.TypeF32, dims: []uint64{1 << 28}, offset: 0}})
	f, err := gguf.Read(bytes.NewReader(data), math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	testutil.AllocatesAtMost(t, "ReadRaw, ReadFloat32 and TensorReader", 4<<20, func() {
		_, rawErr := f.ReadRaw("big")
		_, decodeErr := f.ReadFloat32("big")
		_, readerErr := f.TensorReader("big")
		for _, err := range []error{rawErr, decodeErr, readerErr} {
			if !errors.Is(err, gguf.ErrCorrupt) || !strings.Contains(err.Error(), "big") {
				t.Errorf("reading a tensor past the reader's end: %v; want ErrCorrupt naming the tensor", err)
			}
		}
	})
}

// TestReadHugeSize: a valid file read with a size of 2^56 or more (where 256 elements per byte
// overflow uint64) is read as with its own size.
func TestReadHugeSize(t *testing.T) {
	data, want := sampleFile()
	for _, size := range []int64{1 << 56, 3 << 56, math.MaxInt64} {
		f, err := gguf.Read(bytes.NewReader(data), size)
		if err != nil {
			t.Errorf("size %d: %v", size, err)
			continue
		}
		if got, err := f.ReadFloat32("f32"); err != nil || !reflect.DeepEqual(got, want["f32"]) {
			t.Errorf("size %d: ReadFloat32 = %v, %v; want %v", size, got, err, want["f32"])
		}
	}
}

// TestReadAfterClose: reading a tensor of a closed file is an error saying so (os.ErrClosed), not
// one wrapping ErrCorrupt, since the file is not malformed; a file cut after it was opened is
// corrupt.
func TestReadAfterClose(t *testing.T) {
	f, data := openSample(t)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	_, rawErr := f.ReadRaw("f32")
	_, decodeErr := f.ReadFloat32("f32")
	for _, err := range []error{rawErr, decodeErr} {
		if !errors.Is(err, os.ErrClosed) || errors.Is(err, gguf.ErrCorrupt) || !strings.Contains(err.Error(), `"f32"`) && !strings.Contains(err.Error(), "f32 F32") {
			t.Errorf("reading a closed file: %v; want os.ErrClosed naming the tensor, not ErrCorrupt", err)
		}
	}
	cut, err := gguf.Read(bytes.NewReader(data[:len(data)-1]), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	_, rawErr = cut.ReadRaw("q8_0")
	_, decodeErr = cut.ReadFloat32("q8_0")
	for _, err := range []error{rawErr, decodeErr} {
		if !errors.Is(err, gguf.ErrCorrupt) {
			t.Errorf("reading a file cut after it was opened: %v; want ErrCorrupt", err)
		}
	}
}
