package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/safetensors"
	"github.com/x448/float16"
)

// TestEmptyTensors: a tensor with a zero dimension, whatever its other dimensions, is written
// and read back with its shape, as PyTorch and the reference library save and load them.
func TestEmptyTensors(t *testing.T) {
	for _, shape := range [][]int{{2, 0}, {100, 0}, {0, 2}, {0}, {3, 0, 5}, {1 << 40, 0}} {
		t.Run(fmt.Sprint(shape), func(t *testing.T) {
			list := []safetensors.Tensor{
				{Name: "before", DType: safetensors.F32, Shape: []int{2}, Data: f32LE(1, 2)},
				{Name: "empty", DType: safetensors.F32, Shape: shape, Data: []byte{}},
				{Name: "after", DType: safetensors.U8, Shape: []int{3}, Data: []byte{7, 8, 9}},
			}
			var b bytes.Buffer
			if err := safetensors.Write(&b, list, nil); err != nil {
				t.Fatal(err)
			}
			f := testutil.FromBytes(t, safetensors.Read, b.Bytes())
			info, ok := f.Info("empty")
			if !ok || !reflect.DeepEqual(info.Shape, shape) || info.Bytes != 0 || info.NumElements() != 0 {
				t.Fatalf("Info(empty) = %v, %v; want shape %v, no bytes", info, ok, shape)
			}
			x, err := f.ReadTensor("empty")
			if err != nil || !reflect.DeepEqual(x.Shape().Dimensions, shape) || x.Size() != 0 {
				t.Errorf("ReadTensor(empty) = %v, %v", x, err)
			}
			if got, err := f.ReadBytes("after"); err != nil || !bytes.Equal(got, []byte{7, 8, 9}) {
				t.Errorf("ReadBytes(after) = %v, %v", got, err)
			}
		})
	}
	if err := safetensors.Write(&bytes.Buffer{}, []safetensors.Tensor{{Name: "x", DType: safetensors.F32,
		Shape: []int{1 << 40, 1 << 40, 0}, Data: []byte{}}}, nil); err == nil {
		t.Error("Write accepted a shape whose non-zero dimensions overflow")
	}
}

// TestEmptyTensorOffsets: an empty tensor may sit at the offset where another starts (PyTorch
// writes them so), whatever the names; the reference library accepts both orders. Its Names place
// it before the tensor that starts there.
func TestEmptyTensorOffsets(t *testing.T) {
	data := append(f32LE(1, 2), 1, 2, 3, 4)
	for _, tc := range []struct {
		header string
		names  []string
	}{
		{`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"F32","shape":[0,8],"data_offsets":[8,8]},` +
			`"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}`, []string{"a", "z", "b"}},
		{`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"0":{"dtype":"F32","shape":[0,8],"data_offsets":[8,8]},` +
			`"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}`, []string{"a", "0", "b"}},
		{`{"z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},` +
			`"y":{"dtype":"U8","shape":[0],"data_offsets":[8,8]},"x":{"dtype":"U8","shape":[0],"data_offsets":[8,8]},` +
			`"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]},"e":{"dtype":"I64","shape":[0,3],"data_offsets":[12,12]}}`,
			[]string{"z", "a", "x", "y", "b", "e"}},
	} {
		f, err := safetensors.Read(bytes.NewReader(file(tc.header, data)), int64(len(file(tc.header, data))))
		if err != nil {
			t.Errorf("%s: %v", tc.header, err)
			continue
		}
		if got := f.Names(); !reflect.DeepEqual(got, tc.names) {
			t.Errorf("Names() = %v, want %v", got, tc.names)
		}
		if got, err := f.ReadBytes("b"); err != nil || !bytes.Equal(got, []byte{1, 2, 3, 4}) {
			t.Errorf("ReadBytes(b) = %v, %v", got, err)
		}
	}
	// A non-empty tensor inside another still overlaps.
	overlap := `{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},` +
		`"c":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}`
	if _, err := safetensors.Read(bytes.NewReader(file(overlap, data)), int64(len(file(overlap, data)))); !errors.Is(err, safetensors.ErrCorrupt) {
		t.Errorf("overlap: %v", err)
	}
}

// TestReadFloat32: F16, BF16 and F64 tensors convert to float32, through the conversion buffer
// several times for a tensor over 1 MiB; integers are unsupported.
func TestReadFloat32(t *testing.T) {
	const n = 700_001 // 1.4 MB of F16: two chunks and a part, an odd count
	want := make([]float32, n)
	for i := range want {
		want[i] = float32(i%512-256) / 4 // exact in F16, BF16 and F64
	}
	var f16, bf16, f64 []byte
	for _, v := range want {
		f16 = binary.LittleEndian.AppendUint16(f16, float16.Fromfloat32(v).Bits())
		bf16 = binary.LittleEndian.AppendUint16(bf16, uint16(math.Float32bits(v)>>16))
		f64 = binary.LittleEndian.AppendUint64(f64, math.Float64bits(float64(v)))
	}
	list := []safetensors.Tensor{
		{Name: "f16", DType: safetensors.F16, Shape: []int{n, 1}, Data: f16},
		{Name: "bf16", DType: safetensors.BF16, Shape: []int{1, n}, Data: bf16},
		{Name: "f64", DType: safetensors.F64, Shape: []int{n}, Data: f64},
		{Name: "f32", DType: safetensors.F32, Shape: []int{2}, Data: f32LE(0.5, -3)},
		{Name: "big", DType: safetensors.F64, Shape: []int{2}, Data: binary.LittleEndian.AppendUint64(
			binary.LittleEndian.AppendUint64(nil, math.Float64bits(1e300)), math.Float64bits(1+1.0/(1<<30)))},
		{Name: "empty", DType: safetensors.BF16, Shape: []int{0, 4}, Data: []byte{}},
		{Name: "i32", DType: safetensors.I32, Shape: []int{1}, Data: []byte{1, 0, 0, 0}},
	}
	var b bytes.Buffer
	if err := safetensors.Write(&b, list, nil); err != nil {
		t.Fatal(err)
	}
	f := testutil.FromBytes(t, safetensors.Read, b.Bytes())
	for _, name := range []string{"f16", "bf16", "f64"} {
		x, err := f.ReadFloat32(name)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := f.Info(name)
		got := tensors.MustCopyFlatData[float32](x)
		if !reflect.DeepEqual(x.Shape().Dimensions, info.Shape) || !reflect.DeepEqual(got, want) {
			t.Errorf("ReadFloat32(%s): shape %s, values differ from the stored ones", name, x.Shape())
		}
	}
	for name, want := range map[string][]float32{"f32": {0.5, -3}, "big": {float32(math.Inf(1)), 1}} {
		if got := tensors.MustCopyFlatData[float32](f.MustReadFloat32(name)); !reflect.DeepEqual(got, want) {
			t.Errorf("ReadFloat32(%s) = %v, want %v", name, got, want)
		}
	}
	if x := f.MustReadFloat32("empty"); !reflect.DeepEqual(x.Shape().Dimensions, []int{0, 4}) {
		t.Errorf("ReadFloat32(empty) has shape %s", x.Shape())
	}
	if _, err := f.ReadFloat32("i32"); !errors.Is(err, safetensors.ErrUnsupported) {
		t.Errorf("ReadFloat32(i32): %v, want ErrUnsupported", err)
	}
}

// TestErrorNamesFirstBadTensor: of several bad header entries, the error always names the first
// by name, whatever the order the JSON object gives them in.
func TestErrorNamesFirstBadTensor(t *testing.T) {
	header := []byte(`{"zeta":{"dtype":"X1","shape":[1],"data_offsets":[0,1]},` +
		`"beta":{"dtype":"X2","shape":[1],"data_offsets":[0,1]},` +
		`"alpha":{"dtype":"X3","shape":[1],"data_offsets":[0,1]},` +
		`"gamma":{"dtype":"X4","shape":[1],"data_offsets":[0,1]}}`)
	data := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	data = append(append(data, header...), 0)
	for range 20 {
		_, err := safetensors.Read(bytes.NewReader(data), int64(len(data)))
		if err == nil || !strings.Contains(err.Error(), `"alpha"`) {
			t.Fatalf("Read error = %v; want one naming tensor \"alpha\", the first bad one by name", err)
		}
	}
}

// TestReadSizeLargerThanContent: Read trusts the size its caller gives (the file's, where a reader
// was cut short since); a tensor the reader does not hold is an error wrapping ErrCorrupt from
// every reading method, before memory in proportion to the tensor is allocated.
func TestReadSizeLargerThanContent(t *testing.T) {
	header := []byte(`{"big":{"dtype":"F16","shape":[1073741824],"data_offsets":[0,2147483648]}}`)
	data := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	data = append(append(data, header...), 0, 0)
	claimed := int64(8+len(header)) + 1<<31 // what the header says the file holds
	f, err := safetensors.Read(bytes.NewReader(data), claimed)
	if err != nil {
		t.Fatal(err)
	}
	for name, read := range map[string]func() error{
		"ReadBytes":   func() error { _, err := f.ReadBytes("big"); return err },
		"ReadTensor":  func() error { _, err := f.ReadTensor("big"); return err },
		"ReadFloat32": func() error { _, err := f.ReadFloat32("big"); return err },
	} {
		testutil.AllocatesAtMost(t, name, 1<<20, func() {
			if err := read(); !errors.Is(err, safetensors.ErrCorrupt) {
				t.Errorf("%s of a tensor past the reader's content: %v; want an error wrapping ErrCorrupt", name, err)
			}
		})
	}
}

// TestNewerDTypes: the types the reference implementation added in 0.6 read as it reads them:
// the 8-bit floats as raw bytes, C64 as GoMLX complex64 tensors (two float32, real part first).
func TestNewerDTypes(t *testing.T) {
	c64 := f32LE(1, -2, 0.5, 3)
	data := file(`{"c":{"dtype":"C64","shape":[2],"data_offsets":[0,16]},`+
		`"e8m0":{"dtype":"F8_E8M0","shape":[2],"data_offsets":[16,18]},`+
		`"e4m3fnuz":{"dtype":"F8_E4M3FNUZ","shape":[1],"data_offsets":[18,19]},`+
		`"e5m2fnuz":{"dtype":"F8_E5M2FNUZ","shape":[1],"data_offsets":[19,20]}}`,
		append(c64, 127, 130, 0x40, 0x3c))
	f := testutil.FromBytes(t, safetensors.Read, data)
	for name, want := range map[string][]byte{"e8m0": {127, 130}, "e4m3fnuz": {0x40}, "e5m2fnuz": {0x3c}} {
		if got, err := f.ReadBytes(name); err != nil || !bytes.Equal(got, want) {
			t.Errorf("ReadBytes(%s) = %v, %v; want %v", name, got, err, want)
		}
		if _, err := f.ReadTensor(name); !errors.Is(err, safetensors.ErrUnsupported) {
			t.Errorf("ReadTensor(%s): error %v; want ErrUnsupported", name, err)
		}
	}
	x, err := f.ReadTensor("c")
	if err != nil {
		t.Fatal(err)
	}
	if got := tensors.MustCopyFlatData[complex64](x); !reflect.DeepEqual(got, []complex64{complex(1, -2), complex(0.5, 3)}) {
		t.Errorf("ReadTensor(c) = %v; want [(1-2i) (0.5+3i)]", got)
	}
	st, err := safetensors.FromTensor("c", x)
	if err != nil || st.DType != safetensors.C64 || !bytes.Equal(st.Data, c64) {
		t.Errorf("FromTensor(complex64) = %v %v, %v; want C64 with the bytes read", st.DType, st.Shape, err)
	}
}

// TestSubByteDTypes: F4 and F6 tensors read and write as packed raw bytes when their bits fill
// whole bytes (an F4[2] is one byte, an F6[4] three), and are refused otherwise, as the reference
// implementation refuses them.
func TestSubByteDTypes(t *testing.T) {
	data := file(`{"f4":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]},`+
		`"f6":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[3,6]},"g6":{"dtype":"F6_E3M2","shape":[0,3],"data_offsets":[6,6]}}`,
		[]byte{1, 2, 3, 4, 5, 6})
	f := testutil.FromBytes(t, safetensors.Read, data)
	for name, want := range map[string][]byte{"f4": {1, 2, 3}, "f6": {4, 5, 6}, "g6": {}} {
		if got, err := f.ReadBytes(name); err != nil || !bytes.Equal(got, want) {
			t.Errorf("ReadBytes(%s) = %v, %v; want %v", name, got, err, want)
		}
		if _, err := f.ReadTensor(name); !errors.Is(err, safetensors.ErrUnsupported) {
			t.Errorf("ReadTensor(%s): error %v; want ErrUnsupported", name, err)
		}
	}
	list := []safetensors.Tensor{{Name: "f4", DType: safetensors.F4, Shape: []int{2, 3}, Data: []byte{1, 2, 3}},
		{Name: "f6", DType: safetensors.F6E2M3, Shape: []int{4}, Data: []byte{4, 5, 6}},
		{Name: "g6", DType: safetensors.F6E3M2, Shape: []int{0, 3}, Data: []byte{}}}
	var b bytes.Buffer
	if err := safetensors.Write(&b, list, nil); err != nil {
		t.Fatal(err)
	}
	if got := b.Bytes()[len(b.Bytes())-6:]; !bytes.Equal(got, []byte{1, 2, 3, 4, 5, 6}) {
		t.Errorf("Write: data %v", got)
	}
	for _, tc := range []struct{ dtype, shape, offsets string }{{"F4", "[3]", "[0,2]"}, {"F6_E2M3", "[2]", "[0,2]"}} {
		bad := file(fmt.Sprintf(`{"a":{"dtype":%q,"shape":%s,"data_offsets":%s}}`, tc.dtype, tc.shape, tc.offsets), []byte{0, 0})
		if _, err := safetensors.Read(bytes.NewReader(bad), int64(len(bad))); !errors.Is(err, safetensors.ErrCorrupt) ||
			!strings.Contains(err.Error(), "of whole bytes") {
			t.Errorf("%s%s: error %v; want ErrCorrupt saying the bits must fill whole bytes", tc.dtype, tc.shape, err)
		}
	}
	if err := safetensors.Write(&b, []safetensors.Tensor{{Name: "a", DType: safetensors.F4, Shape: []int{3}, Data: []byte{0, 0}}}, nil); err == nil ||
		!strings.Contains(err.Error(), "of whole bytes") {
		t.Errorf("Write of F4[3]: error %v; want one saying the bits must fill whole bytes", err)
	}
}
