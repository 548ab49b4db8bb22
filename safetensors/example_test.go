package safetensors_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/safetensors"
)

// Writing a checkpoint with a float tensor, packed bytes and metadata, then reading it back
// lazily by name.
func Example() {
	dir, _ := os.MkdirTemp("", "safetensors")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "adapter.safetensors")

	weight, err := safetensors.FromTensor("lora_A", tensors.FromValue([][]float32{{1, 2}, {3, 4}}))
	if err != nil {
		panic(err)
	}
	packed := safetensors.Tensor{Name: "weight.packed", DType: safetensors.U8, Shape: []int{4}, Data: []byte{0x0F, 0xF0, 0x12, 0x34}}
	if err := safetensors.WriteFile(path, []safetensors.Tensor{weight, packed}, map[string]string{"format": "pt"}); err != nil {
		panic(err)
	}

	f, err := safetensors.Open(path)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	fmt.Println("metadata:", f.Metadata)
	for _, name := range f.Names() {
		info, _ := f.Info(name)
		t, err := f.ReadTensor(name)
		if err != nil {
			panic(err)
		}
		fmt.Println(info, t.Value())
	}
	// Output:
	// metadata: map[format:pt]
	// lora_A F32[2 2] [[1 2] [3 4]]
	// weight.packed U8[4] [15 240 18 52]
}
