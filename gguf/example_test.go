package gguf_test

import (
	"bytes"
	"fmt"

	"github.com/quanta-ml/quanta/gguf"
)

// Reading metadata and decoding tensors of a (small, hand-built) GGUF file. With a file on disk,
// gguf.Open(path) replaces gguf.Read.
func Example() {
	data, _ := sampleFile()
	f, err := gguf.Read(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		panic(err)
	}
	arch, _ := f.String("general.architecture")
	tokens, _ := f.Strings("tokens")
	fmt.Println("architecture:", arch, "tokens:", len(tokens))
	for _, t := range f.Tensors() {
		values, err := f.ReadFloat32(t.Name)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-5s %-4s shape %v first values %v\n", t.Name, t.Type, t.Shape(), values[:3])
	}
	// Output:
	// architecture: llama tokens: 3
	// f32   F32  shape [2 3] first values [1 2 3]
	// q4_0  Q4_0 shape [32] first values [-4 -3.5 -3]
	// q4_1  Q4_1 shape [1 32] first values [-1 -0.75 -0.5]
	// q8_0  Q8_0 shape [32] first values [-32 -30 -28]
}
