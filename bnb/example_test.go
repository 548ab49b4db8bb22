package bnb_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/bnb"
	"github.com/quanta-ml/quanta/safetensors"
)

// Quantize a [out, in] weight as bitsandbytes does (NF4, double-quantized absmax), save it as a
// Linear4bit state dict, and read it back.
func Example() {
	out, in := 8, 200 // in is not a multiple of 64: bitsandbytes' blocks straddle the rows
	data := make([]float32, out*in)
	for i := range data {
		data[i] = float32(i%17-8) / 8
	}
	w, err := bnb.Quantize4bit(tensors.FromFlatDataAndDimensions(data, out, in), 64, true)
	if err != nil {
		panic(err)
	}
	list, err := (&bnb.Linear4bit{Weight: w}).Tensors("")
	if err != nil {
		panic(err)
	}
	dir, _ := os.MkdirTemp("", "bnb")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "layer.safetensors")
	if err := bnb.WriteFile(path, list); err != nil {
		panic(err)
	}
	f := safetensors.MustOpen(path)
	defer f.Close()
	for _, name := range f.Names() {
		info, _ := f.Info(name)
		fmt.Println(info)
	}
	state, _ := f.ReadBytes(bnb.KeyQuantState)
	fmt.Println(string(state))
	l, err := bnb.ReadLinear4bit(f, "")
	if err != nil {
		panic(err)
	}
	fmt.Println(l.Weight, l.Weight.Format())
	// Output:
	// weight.nested_absmax F32[1]
	// weight.nested_quant_map F32[256]
	// weight.quant_map F32[16]
	// weight U8[800 1]
	// weight.absmax U8[25]
	// weight.quant_state.bitsandbytes__nf4 U8[151]
	// {"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [8, 200], "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 1.0}
	// nf4.Array(Float32)[8 200] block 64 double-quantized flat nf4-dq/64/flat
}
