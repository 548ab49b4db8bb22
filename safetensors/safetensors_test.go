package safetensors_test

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

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/safetensors"
)

// file builds safetensors bytes by hand from a header string and data.
func file(header string, data []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, data...)
}

func f32LE(values ...float32) []byte {
	var out []byte
	for _, v := range values {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
	}
	return out
}

// TestWriteBytes compares Write with a file written out by hand from the format's definition.
func TestWriteBytes(t *testing.T) {
	list := []safetensors.Tensor{
		{Name: "b", DType: safetensors.F32, Shape: []int{2}, Data: f32LE(1, 2)},
		{Name: "a", DType: safetensors.U8, Shape: []int{1, 3}, Data: []byte{7, 8, 9}},
		{Name: "s", DType: safetensors.I8, Shape: []int{}, Data: []byte{0xFF}},
	}
	header := `{"__metadata__":{"format":"pt","quant":"nf4"},` +
		`"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},` +
		`"a":{"dtype":"U8","shape":[1,3],"data_offsets":[8,11]},` +
		`"s":{"dtype":"I8","shape":[],"data_offsets":[11,12]}}`
	for len(header)%8 != 0 {
		header += " "
	}
	want := file(header, append(append(f32LE(1, 2), 7, 8, 9), 0xFF))
	var got bytes.Buffer
	if err := safetensors.Write(&got, list, map[string]string{"quant": "nf4", "format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("Write:\n%q\nwant\n%q", got.Bytes(), want)
	}
}

func TestRoundTrip(t *testing.T) {
	list := []safetensors.Tensor{
		{Name: "weight", DType: safetensors.F32, Shape: []int{2, 2}, Data: f32LE(1, -2, 3.5, 0)},
		{Name: "bf16", DType: safetensors.BF16, Shape: []int{2}, Data: []byte{0x80, 0x3F, 0x20, 0xC0}},
		{Name: "f16", DType: safetensors.F16, Shape: []int{1}, Data: []byte{0x00, 0x3C}},
		{Name: "packed", DType: safetensors.U8, Shape: []int{4}, Data: []byte{0, 1, 254, 255}},
		{Name: "codes", DType: safetensors.I8, Shape: []int{2}, Data: []byte{0x80, 0x7F}},
		{Name: "fp8", DType: safetensors.F8E4M3, Shape: []int{1}, Data: []byte{0x38}},
		{Name: "empty", DType: safetensors.F32, Shape: []int{0, 3}, Data: []byte{}},
	}
	meta := map[string]string{"format": "pt", "a \"quoted\" key": "ünïcode"}
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := safetensors.WriteFile(path, list, meta); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil {
		t.Error(err)
	} else if st.Mode().Perm() != 0o644 {
		t.Errorf("the written file's mode is %v; want -rw-r--r--", st.Mode())
	}
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !reflect.DeepEqual(f.Metadata, meta) {
		t.Errorf("metadata %v, want %v", f.Metadata, meta)
	}
	wantNames := []string{"weight", "bf16", "f16", "packed", "codes", "fp8", "empty"}
	if got := f.Names(); !reflect.DeepEqual(got, wantNames) {
		t.Errorf("names %v, want %v", got, wantNames)
	}
	for _, w := range list {
		info, ok := f.Info(w.Name)
		if !ok || info.DType != w.DType || !reflect.DeepEqual(info.Shape, w.Shape) {
			t.Errorf("info %v; want %s %v", info, w.DType, w.Shape)
		}
		data, err := f.ReadBytes(w.Name)
		if err != nil || !bytes.Equal(data, w.Data) {
			t.Errorf("ReadBytes(%q) = %v, %v; want %v", w.Name, data, err, w.Data)
		}
	}
	checks := []struct {
		name  string
		dtype dtypes.DType
		want  any
	}{
		{"weight", dtypes.Float32, [][]float32{{1, -2}, {3.5, 0}}},
		{"packed", dtypes.Uint8, []uint8{0, 1, 254, 255}},
		{"codes", dtypes.Int8, []int8{-128, 127}},
	}
	for _, c := range checks {
		tensor, err := f.ReadTensor(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if tensor.DType() != c.dtype || !reflect.DeepEqual(tensor.Value(), c.want) {
			t.Errorf("ReadTensor(%q) = %s %v, want %s %v", c.name, tensor.DType(), tensor.Value(), c.dtype, c.want)
		}
		// And back: FromTensor gives the same bytes.
		back, err := safetensors.FromTensor(c.name, tensor)
		if want, _ := f.ReadBytes(c.name); err != nil || !bytes.Equal(back.Data, want) {
			t.Errorf("FromTensor(%q): %v", c.name, err)
		}
	}
	if tensor, err := f.ReadTensor("bf16"); err != nil || tensor.DType() != dtypes.BFloat16 || tensor.Shape().Dim(0) != 2 {
		t.Errorf("ReadTensor(bf16): %v %v", tensor, err)
	}
	if tensor, err := f.ReadTensor("empty"); err != nil || tensor.Size() != 0 {
		t.Errorf("ReadTensor(empty): %v %v", tensor, err)
	}
	if _, err := f.ReadTensor("fp8"); !errors.Is(err, safetensors.ErrUnsupported) {
		t.Errorf("ReadTensor of F8_E4M3: %v, want ErrUnsupported", err)
	}
	if _, err := f.ReadTensor("nope"); !errors.Is(err, safetensors.ErrNotFound) {
		t.Errorf("missing tensor: %v", err)
	}
	if err := f.ReadInto("weight", make([]byte, 3)); err == nil {
		t.Error("ReadInto a short buffer: no error")
	}
}

func TestWriteErrors(t *testing.T) {
	tests := []struct {
		name string
		list []safetensors.Tensor
		want string
	}{
		{"duplicate", []safetensors.Tensor{{Name: "a", DType: safetensors.U8, Shape: []int{1}, Data: []byte{1}},
			{Name: "a", DType: safetensors.U8, Shape: []int{1}, Data: []byte{1}}}, `"a" appears twice`},
		{"empty name", []safetensors.Tensor{{DType: safetensors.U8, Shape: []int{1}, Data: []byte{1}}}, "tensor name"},
		{"metadata name", []safetensors.Tensor{{Name: "__metadata__", DType: safetensors.U8, Shape: []int{1}, Data: []byte{1}}}, "tensor name"},
		{"dtype", []safetensors.Tensor{{Name: "a", DType: "F5", Shape: []int{1}, Data: []byte{1}}}, `dtype "F5"`},
		{"size", []safetensors.Tensor{{Name: "a", DType: safetensors.F32, Shape: []int{2}, Data: []byte{1}}}, "needs 8"},
		{"negative", []safetensors.Tensor{{Name: "a", DType: safetensors.F32, Shape: []int{-1}}}, "negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			err := safetensors.Write(&b, tc.list, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || b.Len() != 0 {
				t.Errorf("error %v (wrote %d bytes); want one containing %q, nothing written", err, b.Len(), tc.want)
			}
			path := filepath.Join(t.TempDir(), "x.safetensors")
			if err := safetensors.WriteFile(path, tc.list, nil); err == nil {
				t.Error("WriteFile: no error")
			}
			if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 0 {
				t.Errorf("WriteFile left %d files", len(entries))
			}
		})
	}
}

// TestWriteInvalidUTF8: a tensor name or a metadata string that is not valid UTF-8 is an error,
// nothing written: JSON would write U+FFFD in place of the invalid bytes, so the tensor would not
// read back under its name, and two such names could become one, a file Read rejects.
func TestWriteInvalidUTF8(t *testing.T) {
	tensor := func(name string) safetensors.Tensor {
		return safetensors.Tensor{Name: name, DType: safetensors.U8, Shape: []int{1}, Data: []byte{1}}
	}
	for _, tc := range []struct {
		name     string
		list     []safetensors.Tensor
		metadata map[string]string
		want     string
	}{
		{"name", []safetensors.Tensor{tensor("a\xff")}, nil, `tensor name "a\xff"`},
		{"names that would collide", []safetensors.Tensor{tensor("a\xff"), tensor("a\xfe")}, nil, `tensor name "a\xff"`},
		{"metadata key", []safetensors.Tensor{tensor("a")}, map[string]string{"k\xff": "v"}, `metadata "k\xff"`},
		{"metadata value", []safetensors.Tensor{tensor("a")}, map[string]string{"k": "v\xff"}, `metadata "k"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			err := safetensors.Write(&b, tc.list, tc.metadata)
			if err == nil || !strings.Contains(err.Error(), tc.want) || b.Len() != 0 {
				t.Errorf("error %v (wrote %d bytes); want one containing %q, nothing written", err, b.Len(), tc.want)
			}
		})
	}
}

func TestCorrupt(t *testing.T) {
	entry := `"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`
	data := f32LE(1, 2)
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"short", []byte{1, 2, 3}, "truncated: 3 bytes"},
		{"header past end", binary.LittleEndian.AppendUint64(nil, 1<<40), "header length is 1099511627776"},
		{"not an object", file(`["a"]   `, nil), "not a JSON object"},
		{"bad json", file(`{"a":{`, nil), "header JSON"},
		{"invalid UTF-8", file("{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", []byte{0}), "not valid UTF-8"},
		{"bad metadata", file(`{"__metadata__":{"k":1}}`, nil), "__metadata__"},
		{"null metadata value", file(`{"__metadata__":{"k":"v","n":null}}`, nil), `__metadata__: "n" is null; accepted: an object of strings`},
		// The reference (serde_json) refuses these; encoding/json would keep the last map, or
		// read the escape as U+FFFD, renaming the tensor or altering the metadata.
		{"duplicate metadata", file(`{"__metadata__":{"k":"1"},"__metadata__":{"k":"2"}}`, nil), `"__metadata__" appears twice`},
		{"duplicate escaped metadata", file(`{"__metadata__":{},"\u005f_metadata__":{}}`, nil), `"__metadata__" appears twice`},
		{"lone high surrogate in a name", file(`{"a\ud800":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, data), `lone UTF-16 surrogate escape \ud800 in "a\ud800"`},
		{"lone low surrogate in metadata", file(`{"__metadata__":{"k":"x\uDC00y"}}`, nil), `lone UTF-16 surrogate escape \uDC00 in "x\uDC00y"`},
		{"high surrogate then not a low one", file(`{"__metadata__":{"k":"\ud800\u0041"}}`, nil), `\ud800`},
		{"two high surrogates", file(`{"__metadata__":{"\ud800\ud800":""}}`, nil), `\ud800`},
		{"missing shape", file(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, data[:4]), `tensor "a": missing field "shape"`},
		{"null shape", file(`{"a":{"dtype":"F32","shape":null,"data_offsets":[0,4]}}`, data[:4]), `tensor "a": field "shape" is null`},
		{"missing dtype", file(`{"a":{"shape":[2],"data_offsets":[0,8]}}`, data), `tensor "a": missing field "dtype"`},
		{"missing offsets", file(`{"a":{"dtype":"F32","shape":[0]}}`, nil), `tensor "a": missing field "data_offsets"`},
		{"field case", file(`{"a":{"DType":"F32","Shape":[2],"data_offsets":[0,8]}}`, data), `tensor "a": missing field "dtype"`},
		{"duplicate field", file(`{"a":{"dtype":"F32","shape":[2],"shape":[2],"data_offsets":[0,8]}}`, data), `tensor "a": field "shape" appears twice`},
		{"entry not an object", file(`{"a":[1]}`, nil), `tensor "a": [1]; accepted: an object`},
		{"shape type", file(`{"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}`, data), `tensor "a": field "shape"`},
		{"dtype", file(`{"a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}}`, data), `dtype "F31"`},
		{"offsets", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}}`, data), "accepted: [begin, end]"},
		{"reversed offsets", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}`, data), "data_offsets [8, 0]"},
		{"shape mismatch", file(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, data), "needs 12 bytes"},
		{"negative dim", file(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, data), "shape [-2]"},
		{"huge shape", file(`{"a":{"dtype":"F32","shape":[4,4611686018427387904],"data_offsets":[0,8]}}`, data), "shape"},
		{"overflowing shape", file(`{"a":{"dtype":"U8","shape":[8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8],"data_offsets":[0,8]}}`, data), "product fits an int64"},
		{"truncated data", file("{"+entry+"}", data[:6]), "truncated or corrupt"},
		{"trailing bytes", file("{"+entry+"}", append(data, 0)), "the data section has 9 bytes"},
		{"gap", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, []byte{0, 0}), "gap before tensor a"},
		{"overlap", file(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, []byte{0, 0}), "overlaps"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := safetensors.Read(bytes.NewReader(tc.file), int64(len(tc.file)))
			if !errors.Is(err, safetensors.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want ErrCorrupt containing %q", err, tc.want)
			}
		})
	}
}

// TestHeaderStrings: what the reference reads as it does: a surrogate pair escape is its
// character, an escaped backslash before "u" is no escape, a metadata key given twice keeps its
// last value, and a tensor name given twice its last entry (the other's data must then belong to
// another tensor: the data section is checked after).
func TestHeaderStrings(t *testing.T) {
	data := file(`{"__metadata__":{"k":"1","k":"2","\\ud800":"\ud83d\ude00"},`+
		`"a":{"dtype":"I32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},`+
		`"b\uD83D\uDE00":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, f32LE(1, 2))
	f := testutil.FromBytes(t, safetensors.Read, data)
	if want := map[string]string{"k": "2", `\ud800`: "😀"}; !reflect.DeepEqual(f.Metadata, want) {
		t.Errorf("metadata %q; want %q", f.Metadata, want)
	}
	if got := f.Names(); !reflect.DeepEqual(got, []string{"a", "b😀"}) {
		t.Errorf("names %q; want [a b😀]", got)
	}
	if info, _ := f.Info("a"); info == nil || info.DType != safetensors.F32 {
		t.Errorf("Info(a) = %v; want the last entry, F32", info)
	}
}

// TestUnknownEntryFields: keys of a tensor entry other than dtype, shape and data_offsets are
// ignored, as the reference implementation ignores them.
func TestUnknownEntryFields(t *testing.T) {
	data := file(`{"a":{"x":{"y":[1]},"dtype":"F32","shape":[2],"data_offsets":[0,8],"dtype_":"U8"}}`, f32LE(1, 2))
	f := testutil.FromBytes(t, safetensors.Read, data)
	if info, ok := f.Info("a"); !ok || info.DType != safetensors.F32 || len(info.Shape) != 1 || info.Shape[0] != 2 {
		t.Errorf("Info(a) = %v, %v; want a F32[2]", info, ok)
	}
}

// TestWriteHeaderLimit: a header over MaxHeaderBytes, which Read refuses, is not written.
func TestWriteHeaderLimit(t *testing.T) {
	list := []safetensors.Tensor{{Name: "a", DType: safetensors.U8, Shape: []int{1}, Data: []byte{1}}}
	metadata := map[string]string{"k": strings.Repeat("x", safetensors.MaxHeaderBytes)}
	var b bytes.Buffer
	if err := safetensors.Write(&b, list, metadata); err == nil || !strings.Contains(err.Error(), "over the limit") || b.Len() != 0 {
		t.Errorf("Write: error %v (wrote %d bytes); want one saying the header is over the limit, nothing written", err, b.Len())
	}
}

// TestTruncated cuts a valid file at every length: each prefix must be rejected by Read.
func TestTruncated(t *testing.T) {
	var b bytes.Buffer
	err := safetensors.Write(&b, []safetensors.Tensor{
		{Name: "a", DType: safetensors.F32, Shape: []int{2}, Data: f32LE(1, 2)},
		{Name: "b", DType: safetensors.U8, Shape: []int{3}, Data: []byte{1, 2, 3}},
	}, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	full := b.Bytes()
	for n := 0; n < len(full); n++ {
		if _, err := safetensors.Read(bytes.NewReader(full[:n]), int64(n)); !errors.Is(err, safetensors.ErrCorrupt) {
			t.Fatalf("file cut to %d of %d bytes: %v, want ErrCorrupt", n, len(full), err)
		}
	}
}

// TestMiniLM reads the header of the real all-MiniLM-L6-v2 checkpoint (written by the reference
// implementation) and one tensor of it.
func TestMiniLM(t *testing.T) {
	path := assets.Require(t, assets.MiniLMWeights)
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, ok := f.Info("embeddings.word_embeddings.weight")
	if !ok || info.DType != safetensors.F32 || !reflect.DeepEqual(info.Shape, []int{30522, 384}) {
		t.Fatalf("embeddings.word_embeddings.weight: %v", info)
	}
	gamma, err := f.ReadTensor("embeddings.LayerNorm.weight")
	if err != nil {
		t.Fatal(err)
	}
	if gamma.Shape().Dim(0) != 384 {
		t.Errorf("LayerNorm weight shape %s", gamma.Shape())
	}
	var sum float64
	tensors.MustConstFlatData(gamma, func(flat []float32) {
		for _, v := range flat {
			sum += float64(v)
		}
	})
	if math.IsNaN(sum) || sum == 0 {
		t.Errorf("LayerNorm weight sums to %g", sum)
	}
}
