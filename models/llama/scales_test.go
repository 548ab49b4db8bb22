package llama_test

import (
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/llama"
)

// nanScaleGGUF returns the wide tiny GGUF with blk.0.attn_v stored in Q8_0, the scale d of its block
// 3 set to a half-precision NaN (0x7E00).
func nanScaleGGUF(t *testing.T) []byte {
	t.Helper()
	data, _ := ggufOf(wide, map[string]gguf.Type{"attn_v": gguf.TypeQ8_0}, "")
	info, ok := decodertest.Open(t, data).Tensor("blk.0.attn_v.weight")
	if !ok || info.Type != gguf.TypeQ8_0 || info.Bytes < 4*34 {
		t.Fatalf("tensor %v; want Q8_0 of 4 blocks or more", info)
	}
	data[info.Offset+3*34], data[info.Offset+3*34+1] = 0x00, 0x7E
	return data
}

// TestLoadNaNScale: a block whose scale is NaN is named at load (tensor and block) under every
// converting rule set and when the tensor is kept as stored (FilePreset, quanta run's default),
// never a model whose logits are NaN.
func TestLoadNaNScale(t *testing.T) {
	data := nanScaleGGUF(t)
	for _, preset := range []string{"f32", "int8", "ternary-scaled", models.FilePreset} {
		t.Run(preset, func(t *testing.T) {
			q := decodertest.Quantizer(t, preset)
			ctx := context.New()
			m, err := llama.LoadGGUF(ctx, decodertest.Open(t, data), llama.LoadOptions{LoadOptions: models.LoadOptions{Kernel: q.Kernel, Table: q.QuantizeTable, Keep: q}})
			if err == nil {
				m.Projection, m.Table = q.Projection, q.Table
				logits := decodertest.Forward(t, testutil.Backend(t), ctx, m, []int32{1, 2, 3})
				t.Fatalf("loaded; logits[0][0] = %v (NaN: %v)", logits[0][0], math.IsNaN(float64(logits[0][0])))
			}
			if want := "blk.0.attn_v.weight"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "Q8_0 block 3: scale d is NaN") {
				t.Errorf("error %v; want one naming %s and its block 3", err, want)
			}
		})
	}
}
