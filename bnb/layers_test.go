package bnb_test

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/bnb"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/safetensors"
)

// forward computes y = x·Wᵀ + b with the layer's quantized weight (lowering's fused product).
func forward(t *testing.T, x *tensors.Tensor, w implicitarray.Array, bias *tensors.Tensor) []float64 {
	t.Helper()
	e := implicitarray.MustNewExec(testutil.Backend(t), func(x *graph.Node, w implicitarray.Array, b *graph.Node) *graph.Node {
		y := implicitarray.Materialize(implicitarray.DotGeneral(x, []int{1}, nil, w, []int{1}, nil))
		return graph.Add(y, graph.InsertAxes(b, 0))
	})
	defer e.Finalize()
	y, err := e.Call1(x, w, bias)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	return testutil.Float64s(t, y.(*tensors.Tensor))
}

func openRef(t *testing.T, name string) (*safetensors.File, []byte) {
	t.Helper()
	path := filepath.Join(refDir, name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f, data
}

// writeTemp writes tensors with bnb.WriteFile and returns the file's bytes.
func writeTemp(t *testing.T, list []safetensors.Tensor) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "layer.safetensors")
	if err := bnb.WriteFile(path, list); err != nil {
		t.Fatalf("%+v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestLinear4bitFiles, for each Linear4bit state dict bitsandbytes saved (in = 128, 200 and 784,
// with and without compress_statistics; 200 and 784 are not multiples of the block size):
//   - read: the weight materializes to bitsandbytes' dequantized weight bit for bit, and
//     x·Wᵀ + b through the quantized product matches its y;
//   - write back: the file quanta writes is the file bitsandbytes wrote, byte for byte;
//   - quantize: bnb.Quantize4bit of the layer's float weight, written with its bias, is again
//     that file: quanta produces bitsandbytes' checkpoint from the float weights.
func TestLinear4bitFiles(t *testing.T) {
	layerFiles(t, "Linear4bit", func(t *testing.T, c layerCase, f *safetensors.File, data []byte) {
		l, err := bnb.ReadLinear4bit(f, "")
		if err != nil {
			t.Fatalf("%+v", err)
		}
		if got := l.Weight.Shape().Dimensions; got[0] != c.OutFeatures || got[1] != c.InFeatures {
			t.Fatalf("weight shape %v, want [%d %d]", got, c.OutFeatures, c.InFeatures)
		}
		if l.Weight.DoubleQuantized() != c.CompressStatistics || l.Weight.Format().FlatBlocks != (c.InFeatures%c.BlockSize != 0) {
			t.Errorf("format %s", l.Weight.Format())
		}
		checkRead(t, c, l.Weight, l.Bias, l.Tensors, data, func(got, want []float64) {
			equalFloats(t, "dequantized weight", got, want)
		})

		w, err := bnb.Quantize4bit(readTensor(t, c.DenseWeight, []int{c.OutFeatures, c.InFeatures}), c.BlockSize, c.CompressStatistics)
		if err != nil {
			t.Fatalf("%+v", err)
		}
		fresh := &bnb.Linear4bit{Weight: w, Bias: readTensor(t, c.Bias, []int{c.OutFeatures})}
		list, err := fresh.Tensors("")
		if err != nil {
			t.Fatalf("%+v", err)
		}
		if got := writeTemp(t, list); !bytes.Equal(got, data) {
			t.Errorf("file of the re-quantized float weight differs from bitsandbytes'")
		}
	})
}

// TestLinear8bitLtFiles: a Linear8bitLt state dict reads into an int8.Array whose values are
// bitsandbytes' dequantized weight to a float32 rounding or two and whose product gives its
// weight-only y, and writes back byte for byte.
func TestLinear8bitLtFiles(t *testing.T) {
	layerFiles(t, "Linear8bitLt", func(t *testing.T, c layerCase, f *safetensors.File, data []byte) {
		l, err := bnb.ReadLinear8bitLt(f, "")
		if err != nil {
			t.Fatalf("%+v", err)
		}
		checkRead(t, c, l.Weight, l.Bias, l.Tensors, data, func(got, want []float64) {
			testutil.Close(t, "dequantized weight", got, want, testutil.Mixed(2.5e-7))
		})
		again, err := bnb.NewLinear8bitLt(l.Weight, l.Bias)
		if err != nil {
			t.Fatalf("%+v", err)
		}
		scb, want := tensors.MustCopyFlatData[float32](again.SCB), tensors.MustCopyFlatData[float32](l.SCB)
		for i := range want {
			if math.Abs(float64(scb[i]-want[i])) > 2.5e-7*float64(want[i]) {
				t.Fatalf("SCB[%d] from the scale: %v, stored %v", i, scb[i], want[i])
			}
		}
	})
}

// layerFiles runs check, as a subtest, on every layer case of kind with bitsandbytes' file open
// (f) and its bytes (data).
func layerFiles(t *testing.T, kind string, check func(t *testing.T, c layerCase, f *safetensors.File, data []byte)) {
	for _, c := range loadIndex(t).Layers {
		if c.Kind != kind {
			continue
		}
		t.Run(c.ID, func(t *testing.T) {
			f, data := openRef(t, c.Safetensors.File)
			check(t, c, f, data)
		})
	}
}

// checkRead checks a layer read from bitsandbytes' file data: its weight materializes to
// bitsandbytes' dequantized weight (as dequantized compares them), x·Wᵀ + b through the quantized
// product matches its y, and the tensors the layer writes (tensorsOf) are the file, byte for byte.
func checkRead(t *testing.T, c layerCase, weight implicitarray.Array, bias *tensors.Tensor,
	tensorsOf func(prefix string) ([]safetensors.Tensor, error), data []byte, dequantized func(got, want []float64)) {
	t.Helper()
	dense := testutil.Materialize(t, weight)
	dequantized(testutil.Float64s(t, dense), readFloats(t, c.DequantizedWeight))
	x := readTensor(t, c.X, []int{4, c.InFeatures})
	testutil.Close(t, "y", forward(t, x, weight, bias), readFloats(t, c.Y), testutil.Mixed(1e-5))
	list, err := tensorsOf("")
	if err != nil {
		t.Fatalf("%+v", err)
	}
	if got := writeTemp(t, list); !bytes.Equal(got, data) {
		t.Errorf("written file (%d bytes) differs from bitsandbytes' (%d bytes)", len(got), len(data))
	}
}

// TestReadErrors: a state dict that is not a bitsandbytes layer, or whose tensors do not fit its
// quant state, is an error naming the tensor, and nothing is returned.
func TestReadErrors(t *testing.T) {
	f4, _ := openRef(t, "linear4bit_nf4_l200x48_dq.safetensors")
	f8, _ := openRef(t, "linear8bitlt_l200x48.safetensors")
	read4 := func(list []safetensors.Tensor) (any, error) {
		l, err := bnb.ReadLinear4bit(reopen(t, list), "")
		if l != nil {
			return l, err
		}
		return nil, err
	}
	read8 := func(list []safetensors.Tensor) (any, error) {
		l, err := bnb.ReadLinear8bitLt(reopen(t, list), "")
		if l != nil {
			return l, err
		}
		return nil, err
	}
	for _, tc := range []struct {
		name   string
		file   *safetensors.File
		read   func([]safetensors.Tensor) (any, error)
		change func([]safetensors.Tensor) []safetensors.Tensor
		want   string
	}{
		{"missing absmax", f4, read4, drop(bnb.KeyAbsmax), "weight.absmax"},
		{"missing quant state", f4, read4, drop(bnb.KeyQuantState), "not found"},
		{"fp4", f4, read4, rename(bnb.KeyQuantState, "weight.quant_state.bitsandbytes__fp4"), "FP4"},
		{"bad JSON", f4, read4, replace(bnb.KeyQuantState, []byte("{nf4")), "not JSON"},
		{"short weight", f4, read4, truncate(bnb.KeyWeight, 2), "weight"},
		{"other quant map", f4, read4, replace(bnb.KeyQuantMap, make([]byte, 64)), "quant_map"},
		{"other nested map", f4, read4, replace(bnb.KeyNestedQuantMap, make([]byte, 1024)), "nested_quant_map"},
		{"8bit missing SCB", f8, read8, drop(bnb.KeySCB), "SCB"},
		{"8bit column format", f8, read8, replace(bnb.KeyWeightFormat, []byte{1}), "weight_format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list := tc.change(tensorsOf(t, tc.file))
			got, err := tc.read(list)
			if err == nil || got != nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, %v; want nothing and an error mentioning %q", got, err, tc.want)
			}
		})
	}
	if _, err := bnb.ReadLinear4bit(f4, "model.layers.0."); !errors.Is(err, safetensors.ErrNotFound) {
		t.Errorf("wrong prefix: %v, want ErrNotFound", err)
	}
}

// tensorsOf returns every tensor of f, raw.
func tensorsOf(t *testing.T, f *safetensors.File) []safetensors.Tensor {
	t.Helper()
	var out []safetensors.Tensor
	for _, name := range f.Names() {
		info, _ := f.Info(name)
		data, err := f.ReadBytes(name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: data})
	}
	return out
}

// reopen writes list to a temporary file and opens it.
func reopen(t *testing.T, list []safetensors.Tensor) *safetensors.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edited.safetensors")
	if err := safetensors.WriteFile(path, list, nil); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func drop(name string) func([]safetensors.Tensor) []safetensors.Tensor {
	return func(list []safetensors.Tensor) []safetensors.Tensor {
		return slices.DeleteFunc(slices.Clone(list), func(x safetensors.Tensor) bool { return x.Name == name })
	}
}

func rename(name, to string) func([]safetensors.Tensor) []safetensors.Tensor {
	return func(list []safetensors.Tensor) []safetensors.Tensor {
		for i := range list {
			if list[i].Name == name {
				list[i].Name = to
			}
		}
		return list
	}
}

func replace(name string, data []byte) func([]safetensors.Tensor) []safetensors.Tensor {
	return func(list []safetensors.Tensor) []safetensors.Tensor {
		for i := range list {
			if list[i].Name == name {
				list[i].Data = data
				list[i].Shape = []int{len(data) / list[i].DType.Size()}
				if list[i].DType == safetensors.U8 && name == bnb.KeyWeightFormat {
					list[i].Shape = []int{}
				}
			}
		}
		return list
	}
}

func truncate(name string, rows int) func([]safetensors.Tensor) []safetensors.Tensor {
	return func(list []safetensors.Tensor) []safetensors.Tensor {
		for i := range list {
			if list[i].Name == name {
				list[i].Data = list[i].Data[:rows]
				list[i].Shape = []int{rows, 1}
			}
		}
		return list
	}
}
