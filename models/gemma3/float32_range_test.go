package gemma3_test

import (
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/models/gemma3"
)

// TestConfigFloat32Range: the model computes in float32, so a float hyper-parameter that passes
// as a finite positive float64 but is 0 or ±Inf as float32 (a float64 GGUF value of 1e-300, the
// reciprocal of a tiny scaling factor) must be refused by its key, not give silent garbage (an
// epsilon or softcap of 0) or NaN logits.
func TestConfigFloat32Range(t *testing.T) {
	linear := ggufbuild.KV{Key: "gemma3.rope.scaling.type", Value: "linear"}
	for _, tc := range []struct {
		name string
		kvs  []ggufbuild.KV
		want string
	}{
		{"softcap 1e-300", []ggufbuild.KV{{Key: "gemma3.final_logit_softcapping", Value: 1e-300}}, "gemma3.final_logit_softcapping"},
		{"epsilon 1e-300", []ggufbuild.KV{{Key: "gemma3.attention.layer_norm_rms_epsilon", Value: 1e-300}}, "gemma3.attention.layer_norm_rms_epsilon"},
		{"freq_base 1e300", []ggufbuild.KV{{Key: "gemma3.rope.freq_base", Value: 1e300}}, "gemma3.rope.freq_base"},
		{"scaling factor 1e-44", []ggufbuild.KV{linear, {Key: "gemma3.rope.scaling.factor", Value: float32(1e-44)}}, "gemma3.rope.scaling.factor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := decodertest.Open(t, tinyGGUF(nil, "", tc.kvs...))
			c, err := gemma3.ConfigFromGGUF(f)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ConfigFromGGUF: %+v, error %v; want one naming %s", c, err, tc.want)
			}
		})
	}
}
