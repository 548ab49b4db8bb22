package minilm_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models/minilm"
	"github.com/quanta-ml/quanta/safetensors"
	"github.com/x448/float16"
)

// configJSON is the tiny configuration as a Hugging Face config.json, with changes.
func configJSON(t testing.TB, changes map[string]any) []byte {
	t.Helper()
	j := map[string]any{
		"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute",
		"vocab_size": tiny.VocabSize, "hidden_size": tiny.Dim, "num_hidden_layers": tiny.Layers,
		"num_attention_heads": tiny.Heads, "intermediate_size": tiny.FFNDim,
		"max_position_embeddings": tiny.MaxPositions, "type_vocab_size": tiny.TypeVocabSize, "layer_norm_eps": tiny.LayerNormEps,
	}
	for k, v := range changes {
		j[k] = v
	}
	data, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// writeDir writes a model directory: config.json and model.safetensors.
func writeDir(t *testing.T, config, checkpoint []byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string][]byte{"config.json": config, "model.safetensors": checkpoint} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestLoadDirHyperParameters: a hostile or broken config.json is an error naming its key and
// what is accepted, found before anything is sized by it, and the context is left unchanged.
func TestLoadDirHyperParameters(t *testing.T) {
	checkpoint, _ := tinyCheckpoint(t, "", nil)
	tests := []struct {
		name    string
		changes map[string]any
		want    string
	}{
		{"layers 2^24", map[string]any{"num_hidden_layers": 1 << 24},
			`tensor "encoder.layer.2.attention.self.query.weight" (num_hidden_layers = 16777216; the checkpoint has the tensors of at most 2 layers)`},
		{"layers 2^40", map[string]any{"num_hidden_layers": int64(1) << 40}, "Layers (num_hidden_layers) = 1099511627776; accepted: 1 to 2147483647"},
		{"layers 0", map[string]any{"num_hidden_layers": 0}, "Layers (num_hidden_layers) = 0; accepted: 1 to 2147483647"},
		{"heads 0", map[string]any{"num_attention_heads": 0}, "Heads (num_attention_heads) = 0; accepted: 1 to 2147483647"},
		{"heads 3", map[string]any{"num_attention_heads": 3}, "hidden_size = 8 is not a multiple of num_attention_heads = 3"},
		{"vocabulary -1", map[string]any{"vocab_size": -1}, "VocabSize (vocab_size) = -1; accepted: 1 to 2147483647"},
		{"epsilon 0", map[string]any{"layer_norm_eps": 0}, "LayerNormEps (layer_norm_eps) = 0; accepted: a finite number above 0"},
		{"epsilon negative", map[string]any{"layer_norm_eps": -1e-12}, "LayerNormEps (layer_norm_eps) = -1e-12; accepted: a finite number above 0"},
		// Subnormal in float32, flushed to zero by XLA's CPU backend: a constant row normalizes to NaN.
		{"epsilon 1e-40", map[string]any{"layer_norm_eps": 1e-40}, "LayerNormEps (layer_norm_eps) = 1e-40, 0 as float32"},
		{"width 2^20", map[string]any{"hidden_size": 1 << 20}, "F32[30 8]; the configuration needs [30 1048576]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeDir(t, configJSON(t, tc.changes), checkpoint)
			ctx := context.New()
			var err error
			testutil.AllocatesAtMost(t, "LoadDir", 16<<20, func() { _, err = minilm.LoadDir(ctx, dir, minilm.LoadOptions{}) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one containing %q", err, tc.want)
			}
			if ctx.NumVariables() != 0 {
				t.Errorf("the failed load left %d variables", ctx.NumVariables())
			}
		})
	}
}

// TestLoadSafetensorsConfig: a Config built in code is checked as config.json is: a NaN epsilon
// (which JSON cannot spell) and a layer count beyond the checkpoint's tensors.
func TestLoadSafetensorsConfig(t *testing.T) {
	checkpoint, _ := tinyCheckpoint(t, "", nil)
	for _, tc := range []struct {
		name     string
		modify   func(c *minilm.Config)
		want     string
		notFound bool
	}{
		{"NaN epsilon", func(c *minilm.Config) { c.LayerNormEps = math.NaN() }, "LayerNormEps (layer_norm_eps) = NaN; accepted: a finite number above 0", false},
		{"Inf epsilon", func(c *minilm.Config) { c.LayerNormEps = math.Inf(1) }, "LayerNormEps (layer_norm_eps) = +Inf", false},
		{"layers 2^24", func(c *minilm.Config) { c.Layers = 1 << 24 }, "num_hidden_layers = 16777216", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tiny
			tc.modify(&c)
			ctx := context.New()
			var err error
			testutil.AllocatesAtMost(t, "LoadSafetensors", 16<<20, func() {
				_, err = minilm.LoadSafetensors(ctx, testutil.FromBytes(t, safetensors.Read, checkpoint), c, minilm.LoadOptions{})
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, safetensors.ErrNotFound) != tc.notFound {
				t.Errorf("error %v; want one containing %q (not found: %v)", err, tc.want, tc.notFound)
			}
			if _, err := minilm.New(c); tc.name != "layers 2^24" && err == nil {
				t.Error("New accepted the configuration")
			}
		})
	}
	if _, err := minilm.LoadSafetensors(nil, testutil.FromBytes(t, safetensors.Read, checkpoint), tiny, minilm.LoadOptions{}); err == nil {
		t.Error("LoadSafetensors accepted a nil context")
	}
}

// TestLoadDirDTypes: a checkpoint saved in F16, BF16 or F64 loads as the float32 checkpoint of
// the same values. The values are multiples of 1/256 in [-1, 1], which every one of these types
// holds exactly, so the float32 variables must be equal bit for bit.
func TestLoadDirDTypes(t *testing.T) {
	round := func(st *safetensors.Tensor) []float32 {
		v := make([]float32, len(st.Data)/4)
		for i := range v {
			x := math.Float32frombits(binary.LittleEndian.Uint32(st.Data[4*i:]))
			v[i] = float32(math.Round(float64(x)*256) / 256)
		}
		return v
	}
	encode := map[safetensors.DType]func(v []float32) []byte{
		safetensors.F32: func(v []float32) []byte {
			var b []byte
			for _, x := range v {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
			}
			return b
		},
		safetensors.F16: func(v []float32) []byte {
			var b []byte
			for _, x := range v {
				b = binary.LittleEndian.AppendUint16(b, float16.Fromfloat32(x).Bits())
			}
			return b
		},
		safetensors.BF16: func(v []float32) []byte {
			var b []byte
			for _, x := range v {
				b = binary.LittleEndian.AppendUint16(b, uint16(math.Float32bits(x)>>16))
			}
			return b
		},
		safetensors.F64: func(v []float32) []byte {
			var b []byte
			for _, x := range v {
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(x)))
			}
			return b
		},
	}
	load := func(dtype safetensors.DType) *context.Context {
		checkpoint, _ := tinyCheckpoint(t, "", func(st *safetensors.Tensor) {
			st.DType, st.Data = dtype, encode[dtype](round(st))
		})
		ctx := context.New()
		if _, err := minilm.LoadDir(ctx, writeDir(t, configJSON(t, nil), checkpoint), minilm.LoadOptions{}); err != nil {
			t.Fatalf("%s checkpoint: %+v", dtype, err)
		}
		return ctx
	}
	want := load(safetensors.F32)
	for _, dtype := range []safetensors.DType{safetensors.F16, safetensors.BF16, safetensors.F64} {
		t.Run(string(dtype), func(t *testing.T) {
			got := load(dtype)
			if got.NumVariables() != want.NumVariables() {
				t.Fatalf("%d variables, want %d", got.NumVariables(), want.NumVariables())
			}
			for v := range want.IterVariables() {
				g := got.InspectVariable(v.Scope(), v.Name())
				if g == nil {
					t.Fatalf("variable %s missing", v.ScopeAndName())
				}
				gv, wv := g.MustValue(), v.MustValue()
				if !gv.Shape().Equal(wv.Shape()) || !bytes.Equal(testutil.TensorBytes(t, gv), testutil.TensorBytes(t, wv)) {
					t.Errorf("variable %s: %s differs from the float32 checkpoint's %s", v.ScopeAndName(), gv.Shape(), wv.Shape())
				}
			}
		})
	}
}

// TestLoadSafetensorsExtraLayers: a checkpoint with more layers than num_hidden_layers is refused,
// naming the first tensor beyond them (loaded, the encoder would silently skip its last layers),
// with or without the "bert." prefix; the context is left unchanged.
func TestLoadSafetensorsExtraLayers(t *testing.T) {
	for _, prefix := range []string{"", "bert."} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			checkpoint, _ := tinyCheckpoint(t, "", func(st *safetensors.Tensor) { st.Name = prefix + st.Name })
			c := tiny
			c.Layers = tiny.Layers - 1
			ctx := context.New()
			_, err := minilm.LoadSafetensors(ctx, testutil.FromBytes(t, safetensors.Read, checkpoint), c, minilm.LoadOptions{})
			want := `tensor "` + prefix + `encoder.layer.1.`
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "num_hidden_layers = 1") ||
				!errors.Is(err, safetensors.ErrCorrupt) {
				t.Errorf("error %v; want one wrapping safetensors.ErrCorrupt naming %s... and num_hidden_layers = 1", err, want)
			}
			if ctx.NumVariables() != 0 {
				t.Errorf("the failed load left %d variables", ctx.NumVariables())
			}
		})
	}
}
