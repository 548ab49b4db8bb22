package bnb_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/conformance"
	"github.com/x448/float16"
)

// refDir holds the vectors bitsandbytes 0.50.2 produced (reference/gen_bnb.py, run for real).
const refDir = "../reference/testdata/bnb"

// arrayRef is an array of the reference index: its file, the dtype it stands for and the dtype
// it is stored in (bfloat16 as its uint16 bits; big float32 inputs as float16-exact values).
type arrayRef struct {
	File        string `json:"file"`
	DType       string `json:"dtype"`
	StoredDType string `json:"stored_dtype"`
	Shape       []int  `json:"shape"`
}

type quantCase struct {
	ID                 string              `json:"id"`
	Shape              []int               `json:"shape"`
	DType              string              `json:"dtype"`
	BlockSize          int                 `json:"blocksize"`
	CompressStatistics bool                `json:"compress_statistics"`
	NBlocks            int                 `json:"n_blocks"`
	Input              arrayRef            `json:"input"`
	Outputs            map[string]arrayRef `json:"outputs"`
}

type layerCase struct {
	ID                 string         `json:"id"`
	Kind               string         `json:"kind"`
	InFeatures         int            `json:"in_features"`
	OutFeatures        int            `json:"out_features"`
	BlockSize          int            `json:"blocksize"`
	CompressStatistics bool           `json:"compress_statistics"`
	QuantState         map[string]any `json:"quant_state_json"`
	Safetensors        struct {
		File string `json:"file"`
	} `json:"safetensors"`
	DenseWeight       arrayRef `json:"dense_weight"`
	Bias              arrayRef `json:"bias"`
	X                 arrayRef `json:"x"`
	DequantizedWeight arrayRef `json:"dequantized_weight"`
	Y                 arrayRef `json:"y"`
}

type refIndex struct {
	NF4QuantMap  arrayRef    `json:"nf4_quant_map"`
	QuantizeCase []quantCase `json:"quantize_4bit"`
	Layers       []layerCase `json:"layers"`
}

func loadIndex(t *testing.T) *refIndex {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(refDir, "index.json"))
	if err != nil {
		t.Fatalf("reading the bitsandbytes reference index: %v", err)
	}
	var idx refIndex
	if err := json.Unmarshal(data, &idx); err != nil {
		t.Fatalf("parsing the bitsandbytes reference index: %v", err)
	}
	if len(idx.QuantizeCase) == 0 || len(idx.Layers) == 0 {
		t.Fatalf("reference index lists %d quantize cases and %d layers", len(idx.QuantizeCase), len(idx.Layers))
	}
	return &idx
}

// readRaw returns a reference array's file.
func readRaw(t *testing.T, ref arrayRef) *conformance.NPY {
	t.Helper()
	arr, err := conformance.ReadNPYFile(filepath.Join(refDir, ref.File))
	if err != nil {
		t.Fatalf("%v", err)
	}
	return arr
}

// readBytes returns the raw element bytes of a uint8 or int8 reference array.
func readBytes(t *testing.T, ref arrayRef) []byte {
	t.Helper()
	arr := readRaw(t, ref)
	if arr.Descr != "|u1" && arr.Descr != "|i1" {
		t.Fatalf("%s: descriptor %s, want bytes", ref.File, arr.Descr)
	}
	return arr.Data
}

// readFloats returns a reference float array's values as float64 (exact), decoding the stored
// form (float32, float16, or bfloat16 bits in uint16).
func readFloats(t *testing.T, ref arrayRef) []float64 {
	t.Helper()
	arr := readRaw(t, ref)
	var out []float64
	switch arr.Descr {
	case "<f4":
		for i := 0; i < len(arr.Data); i += 4 {
			out = append(out, float64(math.Float32frombits(binary.LittleEndian.Uint32(arr.Data[i:]))))
		}
	case "<f2":
		for i := 0; i < len(arr.Data); i += 2 {
			out = append(out, float64(float16.Frombits(binary.LittleEndian.Uint16(arr.Data[i:])).Float32()))
		}
	case "<u2":
		for i := 0; i < len(arr.Data); i += 2 {
			out = append(out, float64(bfloat16.BFloat16(binary.LittleEndian.Uint16(arr.Data[i:])).Float32()))
		}
	default:
		t.Fatalf("%s: descriptor %s, want a float array", ref.File, arr.Descr)
	}
	return out
}

// readTensor returns a reference float array as a tensor of the dtype it stands for (ref.DType),
// with the given dimensions.
func readTensor(t *testing.T, ref arrayRef, dims []int) *tensors.Tensor {
	t.Helper()
	values := readFloats(t, ref)
	switch ref.DType {
	case "float32":
		data := make([]float32, len(values))
		for i, v := range values {
			data[i] = float32(v)
		}
		return tensors.FromFlatDataAndDimensions(data, dims...)
	case "bfloat16":
		data := make([]bfloat16.BFloat16, len(values))
		for i, v := range values {
			data[i] = bfloat16.FromFloat32(float32(v)) // exact: the values are bfloat16
		}
		return tensors.FromFlatDataAndDimensions(data, dims...)
	case "float16":
		data := make([]float16.Float16, len(values))
		for i, v := range values {
			data[i] = float16.Fromfloat32(float32(v)) // exact: the values are float16
		}
		return tensors.FromFlatDataAndDimensions(data, dims...)
	}
	t.Fatalf("%s: dtype %q", ref.File, ref.DType)
	return nil
}

// dtypeOf maps the index's dtype names.
func dtypeOf(t *testing.T, name string) dtypes.DType {
	t.Helper()
	switch name {
	case "float32":
		return dtypes.Float32
	case "bfloat16":
		return dtypes.BFloat16
	case "float16":
		return dtypes.Float16
	}
	t.Fatalf("dtype %q", name)
	return dtypes.InvalidDType
}
