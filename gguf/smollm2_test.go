package gguf_test

import (
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/assets"
)

// TestSmolLM2 reads the real SmolLM2-135M-Instruct GGUF: its hyper-parameters, and the float64
// sums and end values of decoded tensors compared with llama.cpp's own Python package (gguf-py
// 0.17, gguf.quants.dequantize), run on the same file:
//
//	r = gguf.GGUFReader(path); d = dequantize(t.data, t.tensor_type).astype(np.float32)
//	float(d.astype(np.float64).sum()), d.reshape(-1)[:3], d.reshape(-1)[-2:]
func TestSmolLM2(t *testing.T) {
	f, err := gguf.Open(assets.Require(t, assets.SmolLM2))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for key, want := range map[string]uint64{
		"llama.block_count": 30, "llama.embedding_length": 576, "llama.feed_forward_length": 1536,
		"llama.attention.head_count": 9, "llama.attention.head_count_kv": 3, "llama.vocab_size": 49152,
	} {
		if got, err := f.Uint(key); err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d", key, got, err, want)
		}
	}
	if n := len(f.Tensors()); n != 30*9+2 {
		t.Errorf("%d tensors, want 272", n)
	}
	tests := []struct {
		name        string
		typ         gguf.Type
		shape       []int
		sum         float64
		first, last []float32
	}{
		{"token_embd.weight", gguf.TypeQ8_0, []int{49152, 576}, -15353.04449415207,
			[]float32{-0.10654449462890625, 0.032978057861328125, 0.048198699951171875}, []float32{-0.11989402770996094, -0.0417022705078125}},
		{"blk.0.attn_q.weight", gguf.TypeQ4_1, []int{576, 576}, 59.22322082519531,
			[]float32{-0.0963134765625, 0.1573486328125, -0.0963134765625}, []float32{-0.14984130859375, -0.255859375}},
		{"blk.29.ffn_down.weight", gguf.TypeQ4_1, []int{576, 1536}, 49.83570861816406,
			[]float32{-0.2733154296875, 0.186279296875, 0.186279296875}, []float32{-0.08984375, 0.056640625}},
		{"output_norm.weight", gguf.TypeF32, []int{576}, 1038.33203125,
			[]float32{1.7578125, 1.8203125, 1.78125}, []float32{1.921875, 1.984375}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			info, ok := f.Tensor(tc.name)
			if !ok || info.Type != tc.typ || len(info.Shape()) != len(tc.shape) || info.Shape()[0] != tc.shape[0] {
				t.Fatalf("tensor %v; want %s %v", info, tc.typ, tc.shape)
			}
			values, err := f.ReadFloat32(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			sum := 0.0
			for _, v := range values {
				sum += float64(v)
			}
			if sum != tc.sum {
				t.Errorf("sum %.17g, want %.17g", sum, tc.sum)
			}
			n := len(values)
			for i, w := range tc.first {
				if values[i] != w {
					t.Errorf("value %d = %g, want %g", i, values[i], w)
				}
			}
			for i, w := range tc.last {
				if values[n-len(tc.last)+i] != w {
					t.Errorf("value %d = %g, want %g", n-len(tc.last)+i, values[n-len(tc.last)+i], w)
				}
			}
		})
	}
}
