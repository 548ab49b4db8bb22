package tokenizer_test

import (
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/ggufbuild"
)

// TestAddSpecialWithoutID: add_bos_token (or a "llama" vocabulary's default) without a BOS id,
// or add_eos_token without an EOS id, is an error naming the keys, as every other metadata error
// of NewBPEFromGGUF (it said "AddBOS/AddEOS without a BOS/EOS token", NewBPE's field names).
func TestAddSpecialWithoutID(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want []string
	}{
		{"llama default BOS", toySPMGGUF(ggufbuild.KV{Key: "tokenizer.ggml.bos_token_id"}),
			[]string{"tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id"}},
		{"add_eos_token", toyBPEGGUF(ggufbuild.KV{Key: "tokenizer.ggml.eos_token_id"}, ggufbuild.KV{Key: "tokenizer.ggml.add_eos_token", Value: true}),
			[]string{"tokenizer.ggml.add_eos_token", "tokenizer.ggml.eos_token_id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bpeFromGGUF(t, tc.data)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v; want one naming %s", err, w)
				}
			}
		})
	}
}
