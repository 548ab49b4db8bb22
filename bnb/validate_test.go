package bnb_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/bnb"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/safetensors"
)

// codebookWeight returns an [out, in] weight whose element i is 2·codebook[i mod 16]: its absmax
// over any block holding the 16 values is 2, each value divided by it is a codebook value
// exactly, so the codes are i mod 16 and the weight decodes to itself (hand-computed from the
// quantization rule: no rounding anywhere).
func codebookWeight(out, in int) *tensors.Tensor {
	cb := nf4.Codebook()
	v := make([]float32, out*in)
	for i := range v {
		v[i] = 2 * cb[i%16]
	}
	return tensors.FromFlatDataAndDimensions(v, out, in)
}

// codebookLinear4bit returns a Linear4bit layer of codebookWeight(out, in) quantized in blocks of
// blockSize, double-quantized with dq.
func codebookLinear4bit(tb testing.TB, out, in, blockSize int, dq bool) *bnb.Linear4bit {
	tb.Helper()
	a, err := bnb.Quantize4bit(codebookWeight(out, in), blockSize, dq)
	if err != nil {
		tb.Fatal(err)
	}
	return &bnb.Linear4bit{Weight: a}
}

// codebookLinear8bitLt returns a Linear8bitLt layer of codebookWeight(out, in) quantized to int8.
func codebookLinear8bitLt(tb testing.TB, out, in int) *bnb.Linear8bitLt {
	tb.Helper()
	w, err := qint8.Quantize(codebookWeight(out, in))
	if err != nil {
		tb.Fatal(err)
	}
	l, err := bnb.NewLinear8bitLt(w, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// layerTensors returns the tensors of l's state dict (l.Tensors("")), failing the test on an
// error.
func layerTensors(tb testing.TB, l layer) []safetensors.Tensor {
	tb.Helper()
	list, err := l.Tensors("")
	if err != nil {
		tb.Fatal(err)
	}
	return list
}

// TestOneShortBlock: a block size larger than the weight (4096 for a [10, 100] weight, valid in
// bitsandbytes, whose largest block size it is) quantizes as one short block, writes the state
// dict bitsandbytes would (1000 codes, one absmax, blocksize 4096), reads back and decodes.
func TestOneShortBlock(t *testing.T) {
	for _, dims := range [][]int{{10, 100}, {1, 100}, {3, 7}} {
		for _, dq := range []bool{false, true} {
			w := codebookWeight(dims[0], dims[1])
			n := dims[0] * dims[1]
			a, err := bnb.Quantize4bit(w, 4096, dq)
			if err != nil {
				t.Fatalf("Quantize4bit(%v, 4096, %v): %v", dims, dq, err)
			}
			if f := a.Format(); f.BlockSize != 4096 || !f.FlatBlocks || a.NumBlocks() != 1 {
				t.Errorf("%v: format %s, %d blocks; want one flattened block of 4096", dims, f, a.NumBlocks())
			}
			list, err := (&bnb.Linear4bit{Weight: a}).Tensors("")
			if err != nil {
				t.Fatal(err)
			}
			f := reopen(t, list)
			packed, _ := f.ReadBytes(bnb.KeyWeight)
			want := make([]byte, (n+1)/2)
			for j := range want {
				want[j] = byte((2*j)%16)<<4 | byte((2*j+1)%16)
			}
			if n%2 == 1 {
				want[len(want)-1] = want[len(want)-1]&0xF0 | 7 // the pad code: zero
			}
			if !bytes.Equal(packed, want) {
				t.Errorf("%v: packed codes differ from i mod 16", dims)
			}
			var qs bnb.QuantState
			state, _ := f.ReadBytes(bnb.KeyQuantState)
			if err := json.Unmarshal(state, &qs); err != nil || qs.BlockSize != 4096 || !reflect.DeepEqual(qs.Shape, dims) {
				t.Errorf("%v: quant state %s (%v)", dims, state, err)
			}
			l, err := bnb.ReadLinear4bit(f, "")
			if err != nil {
				t.Fatalf("ReadLinear4bit of the written file: %v", err)
			}
			again, err := l.Tensors("")
			if err != nil || !reflect.DeepEqual(again, list) {
				t.Errorf("%v: read and written again, the state dict differs (%v)", dims, err)
			}
			if dq {
				continue // the double-quantized absmax is 2 within the dynamic map's rounding
			}
			got := testutil.Materialize(t, l.Weight)
			if !reflect.DeepEqual(tensors.MustCopyFlatData[float32](got), tensors.MustCopyFlatData[float32](w)) {
				t.Errorf("%v: the decoded weight differs from 2·codebook[i mod 16]", dims)
			}
		}
	}
}

// TestBlockSizeBounds: block sizes beyond the bound (4096, or the weight's size when larger)
// are errors before anything is sized by them, from Quantize4bit and from a state dict's quant
// state.
func TestBlockSizeBounds(t *testing.T) {
	w := codebookWeight(4, 64)
	for _, bs := range []int{1 << 40, 4098, 0, -64, 3} {
		var err error
		testutil.AllocatesAtMost(t, "Quantize4bit", 16<<20, func() { _, err = bnb.Quantize4bit(w, bs, false) })
		if err == nil || !strings.Contains(err.Error(), "accepted: an even number from 2 to 4096") {
			t.Errorf("Quantize4bit(w[4,64], %d): %v; want an error giving the range 2 to 4096", bs, err)
		}
	}
	if _, err := bnb.Quantize4bit(codebookWeight(3, 2000), 6000, false); err != nil {
		t.Errorf("block size 6000 for 6000 elements: %v", err)
	}
	list := layerTensors(t, codebookLinear4bit(t, 4, 64, 64, false))
	for _, bs := range []int{1 << 40, 8192} {
		edited := setQuantState(t, list, func(qs map[string]any) { qs["blocksize"] = bs })
		var err error
		testutil.AllocatesAtMost(t, "ReadLinear4bit", 16<<20, func() { _, err = bnb.ReadLinear4bit(edited, "") })
		if err == nil || !strings.Contains(err.Error(), "quant state blocksize") {
			t.Errorf("ReadLinear4bit with blocksize %d: %v", bs, err)
		}
	}
}

// setQuantState returns list written with its quant state JSON changed by edit.
func setQuantState(t *testing.T, list []safetensors.Tensor, edit func(map[string]any)) *safetensors.File {
	t.Helper()
	out := make([]safetensors.Tensor, len(list))
	copy(out, list)
	for i, x := range out {
		if x.Name != bnb.KeyQuantState {
			continue
		}
		var qs map[string]any
		if err := json.Unmarshal(x.Data, &qs); err != nil {
			t.Fatal(err)
		}
		edit(qs)
		data, err := json.Marshal(qs)
		if err != nil {
			t.Fatal(err)
		}
		out[i].Data, out[i].Shape = data, []int{len(data)}
	}
	return reopen(t, out)
}

// TestQuantStateErrors: quant states that do not fit the tensors are errors naming what is wrong,
// not panics or messages about another tensor.
func TestQuantStateErrors(t *testing.T) {
	list := layerTensors(t, codebookLinear4bit(t, 4, 64, 64, true))
	empty := func(names ...string) func([]safetensors.Tensor) []safetensors.Tensor {
		return func(list []safetensors.Tensor) []safetensors.Tensor {
			for i := range list {
				for _, name := range names {
					if list[i].Name == name {
						list[i].Data, list[i].Shape = []byte{}, []int{0}
					}
				}
			}
			return list
		}
	}
	for _, tc := range []struct {
		name string
		file *safetensors.File
		want string
	}{
		{"huge shape, empty weight and absmax", setQuantState(t, empty(bnb.KeyWeight, bnb.KeyAbsmax)(append([]safetensors.Tensor(nil), list...)),
			func(qs map[string]any) { qs["shape"] = []int64{1 << 32, 1 << 32} }), "quant state shape [4294967296 4294967296] for weight U8[0]"},
		{"overflowing shape", setQuantState(t, list, func(qs map[string]any) { qs["shape"] = []int64{1 << 62, 1 << 62} }),
			"quant state shape [4611686018427387904 4611686018427387904] for weight U8[128 1]"},
		{"shape of another size", setQuantState(t, list, func(qs map[string]any) { qs["shape"] = []int{4, 65} }),
			"quant state shape [4 65] for weight U8[128 1]"},
		{"missing nested_offset", setQuantState(t, list, func(qs map[string]any) { delete(qs, "nested_offset") }),
			"has no nested_offset, but the weight is double-quantized"},
		{"nested_blocksize", setQuantState(t, list, func(qs map[string]any) { qs["nested_blocksize"] = 128 }),
			"nested_blocksize 128"},
		{"unknown key", setQuantState(t, list, func(qs map[string]any) { qs["scale"] = 2 }), `quant state key "scale"; accepted:`},
		{"key case", setQuantState(t, list, func(qs map[string]any) { qs["BlockSize"] = qs["blocksize"]; delete(qs, "blocksize") }),
			`quant state key "BlockSize"; accepted:`},
		{"mistyped blocksize", setQuantState(t, list, func(qs map[string]any) { qs["blocksize"] = "64" }), "blocksize"},
		{"missing blocksize", setQuantState(t, list, func(qs map[string]any) { delete(qs, "blocksize") }), "blocksize"},
		{"missing dtype", setQuantState(t, list, func(qs map[string]any) { delete(qs, "dtype") }), "dtype"},
		{"missing shape", setQuantState(t, list, func(qs map[string]any) { delete(qs, "shape") }), "shape"},
		{"missing quant_type", setQuantState(t, list, func(qs map[string]any) { delete(qs, "quant_type") }), "quant_type"},
		// 1e39 is finite in float64 but beyond float32's largest (3.4028235e38): the offset would be +Inf.
		{"nested_offset beyond float32", setQuantState(t, list, func(qs map[string]any) { qs["nested_offset"] = 1e39 }),
			"nested_offset 1e+39; accepted: a finite float32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := bnb.ReadLinear4bit(tc.file, "")
			if err == nil || l != nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, %v; want nothing and an error containing %q", l, err, tc.want)
			}
		})
	}
}

// TestFloat64Absmax: an NF4 array with float64 absmax (nf4.Quantize of a float64 weight) writes
// when float32 holds its absmax exactly, and is refused otherwise, rather than written with
// absmax rounded to float32 (bitsandbytes' dtype) and values other than the array's.
func TestFloat64Absmax(t *testing.T) {
	for _, tc := range []struct {
		scale float64
		ok    bool
	}{{0.5, true}, {0.1, false}} {
		v := make([]float64, 128)
		for i := range v {
			v[i] = tc.scale * float64(i%64-32)
		}
		w, err := nf4.Quantize(tensors.FromFlatDataAndDimensions(v, 2, 64), 64)
		if err != nil {
			t.Fatal(err)
		}
		list, err := (&bnb.Linear4bit{Weight: w}).Tensors("")
		if tc.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "holds exactly")) {
			t.Fatalf("scale %v: Tensors error %v; want ok = %v", tc.scale, err, tc.ok)
		}
		if !tc.ok {
			continue
		}
		l, err := bnb.ReadLinear4bit(reopen(t, list), "")
		if err != nil {
			t.Fatal(err)
		}
		got, want := tensors.MustCopyFlatData[float32](l.Weight.Components()[1].Tensor()), tensors.MustCopyFlatData[float64](w.Components()[1].Tensor())
		for i := range want {
			if float64(got[i]) != want[i] {
				t.Errorf("scale %v: absmax %d read back %v; want %v", tc.scale, i, got[i], want[i])
			}
		}
	}
}

// TestBias: a bias that is not a float vector of out elements is refused where the layer is made
// or written, so that every state dict written reads back.
func TestBias(t *testing.T) {
	w, err := qint8.Quantize(tensors.FromFlatDataAndDimensions(make([]float32, 12*40), 12, 40))
	if err != nil {
		t.Fatal(err)
	}
	bad := tensors.FromFlatDataAndDimensions(make([]float32, 5), 5)
	if _, err := bnb.NewLinear8bitLt(w, bad); err == nil || !strings.Contains(err.Error(), "bias (Float32)[5]; accepted: nil or a float vector of 12") {
		t.Errorf("NewLinear8bitLt(w[12,40], bias[5]): %v", err)
	}
	if _, err := bnb.NewLinear8bitLt(w, tensors.FromFlatDataAndDimensions(make([]int32, 12), 12)); err == nil {
		t.Error("NewLinear8bitLt accepted an int32 bias")
	}
	good := tensors.FromFlatDataAndDimensions([]float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 12)
	l, err := bnb.NewLinear8bitLt(w, good)
	if err != nil {
		t.Fatal(err)
	}
	list, err := l.Tensors("")
	if err != nil {
		t.Fatal(err)
	}
	back, err := bnb.ReadLinear8bitLt(reopen(t, list), "")
	if err != nil || !reflect.DeepEqual(tensors.MustCopyFlatData[float32](back.Bias), tensors.MustCopyFlatData[float32](good)) {
		t.Errorf("ReadLinear8bitLt of the written layer: %v", err)
	}
	l.Bias = bad
	if _, err := l.Tensors(""); err == nil {
		t.Error("Linear8bitLt.Tensors wrote a bias of 5 for 12 outputs")
	}
	a, err := bnb.Quantize4bit(codebookWeight(12, 64), 64, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&bnb.Linear4bit{Weight: a, Bias: bad}).Tensors(""); err == nil {
		t.Error("Linear4bit.Tensors wrote a bias of 5 for 12 outputs")
	}
}

// TestNewLinear8bitLtOneScale: an int8.Array [out, in] quantized along its last axis may hold
// one scale for every row (scale [1, 1], which int8.New accepts); its SCB is that scale·127 for
// each of the out rows (0.5·127 = 63.5, by hand), so the state dict is written and reads back.
func TestNewLinear8bitLtOneScale(t *testing.T) {
	w, err := qint8.New(implicitarray.TensorComponent(tensors.FromFlatDataAndDimensions([]int8{1, -2, 3, -4, 5, -6}, 3, 2)),
		implicitarray.TensorComponent(tensors.FromFlatDataAndDimensions([]float32{0.5}, 1, 1)), 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := bnb.NewLinear8bitLt(w, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{63.5, 63.5, 63.5}
	if got := tensors.MustCopyFlatData[float32](l.SCB); !reflect.DeepEqual(got, want) {
		t.Errorf("SCB %v; want %v", got, want)
	}
	list, err := l.Tensors("")
	if err != nil {
		t.Fatalf("Tensors: %v", err)
	}
	back, err := bnb.ReadLinear8bitLt(reopen(t, list), "")
	if err != nil {
		t.Fatalf("ReadLinear8bitLt of the written layer: %v", err)
	}
	if got := tensors.MustCopyFlatData[float32](back.SCB); !reflect.DeepEqual(got, want) {
		t.Errorf("SCB read back %v; want %v", got, want)
	}
}

// TestLinear8bitLtDeleted: a deleted int8 weight is an error wrapping implicitarray.ErrDeleted from
// NewLinear8bitLt and Linear8bitLt.Tensors (as from Linear4bit.Tensors), not a panic.
func TestLinear8bitLtDeleted(t *testing.T) {
	w, err := qint8.Quantize(tensors.FromFlatDataAndDimensions(make([]float32, 12), 3, 4))
	if err != nil {
		t.Fatal(err)
	}
	l, err := bnb.NewLinear8bitLt(w, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Delete()
	for name, call := range map[string]func() error{
		"NewLinear8bitLt":      func() error { _, err := bnb.NewLinear8bitLt(w, nil); return err },
		"Linear8bitLt.Tensors": func() error { _, err := l.Tensors(""); return err },
	} {
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s of a deleted weight panicked: %v", name, r)
				}
			}()
			err = call()
		}()
		if !errors.Is(err, implicitarray.ErrDeleted) {
			t.Errorf("%s of a deleted weight: %v; want an error wrapping implicitarray.ErrDeleted", name, err)
		}
	}
}

// TestLinear8bitLtTensorsShape: Linear8bitLt.Tensors refuses, as NewLinear8bitLt does, a weight
// that is not a rank-2 [out, in] array quantized along its last axis: ReadLinear8bitLt would not
// read the state dict back (it accepts I8 [out, in] only).
func TestLinear8bitLtTensorsShape(t *testing.T) {
	w, err := qint8.Quantize(tensors.FromFlatDataAndDimensions(make([]float32, 24), 2, 3, 4))
	if err != nil {
		t.Fatal(err)
	}
	l := &bnb.Linear8bitLt{Weight: w, SCB: tensors.FromFlatDataAndDimensions([]float32{1, 2}, 2)}
	_, err = l.Tensors("")
	if err == nil || !strings.Contains(err.Error(), "accepted: a rank-2 [out, in] array quantized along its last axis") {
		t.Errorf("Linear8bitLt.Tensors of a weight [2, 3, 4]: %v; want an error naming the rank-2 [out, in] weight accepted", err)
	}
}

// TestNonFiniteScales: an absmax, nested absmax or SCB that is NaN, infinite or negative (a
// corrupt file: bitsandbytes writes absolute maxima) is an error naming the tensor, not a layer
// whose weight decodes to NaN or flipped signs.
func TestNonFiniteScales(t *testing.T) {
	set := func(list []safetensors.Tensor, name string, v float32) *safetensors.File {
		out := slices.Clone(list)
		for i := range out {
			if out[i].Name == name {
				out[i].Data = slices.Clone(out[i].Data)
				binary.LittleEndian.PutUint32(out[i].Data, math.Float32bits(v))
			}
		}
		return reopen(t, out)
	}
	list8 := layerTensors(t, codebookLinear8bitLt(t, 12, 40))
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(1)), -1} {
		for _, dq := range []bool{false, true} {
			list := layerTensors(t, codebookLinear4bit(t, 4, 64, 64, dq))
			name := bnb.KeyAbsmax
			if dq {
				name = "weight.nested_absmax"
			}
			l, err := bnb.ReadLinear4bit(set(list, name, v), "")
			if want := fmt.Sprintf("tensor %q holds %v at index 0", name, v); err == nil || l != nil ||
				!strings.Contains(err.Error(), want) || !errors.Is(err, safetensors.ErrCorrupt) {
				t.Errorf("%s = %v: got %v, %v; want nothing and an ErrCorrupt containing %q", name, v, l, err, want)
			}
		}
		l, err := bnb.ReadLinear8bitLt(set(list8, bnb.KeySCB, v), "")
		if want := fmt.Sprintf("tensor \"SCB\" holds %v at index 0", v); err == nil || l != nil ||
			!strings.Contains(err.Error(), want) || !errors.Is(err, safetensors.ErrCorrupt) {
			t.Errorf("SCB = %v: got %v, %v; want nothing and an ErrCorrupt containing %q", v, l, err, want)
		}
	}
}
