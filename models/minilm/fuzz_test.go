package minilm_test

import (
	"bytes"
	"testing"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models/minilm"
	"github.com/quanta-ml/quanta/safetensors"
)

// FuzzLoadSafetensors loads arbitrary bytes as a config.json and a model.safetensors: the
// configuration and the load either fail with an error, leaving the context without variables,
// or give a model whose configuration is valid; all of it allocating in proportion to the input,
// never to a hyper-parameter (`make fuzz` runs it under a memory limit).
func FuzzLoadSafetensors(f *testing.F) {
	checkpoint, _ := tinyCheckpoint(f, "", nil)
	f.Add(configJSON(f, nil), checkpoint)
	f.Add(configJSON(f, map[string]any{"num_hidden_layers": 3}), checkpoint)
	f.Add(configJSON(f, map[string]any{"layer_norm_eps": 1e-300}), checkpoint)
	missing, _ := tinyCheckpoint(f, "encoder.layer.1.output.dense.bias", nil)
	f.Add(configJSON(f, nil), missing)
	f.Fuzz(func(t *testing.T, config, data []byte) {
		testutil.AllocatesAtMost(t, "minilm.LoadSafetensors", 64*uint64(len(config)+len(data))+32<<20, func() {
			loadSafetensors(t, config, data)
		})
	})
}

func loadSafetensors(t *testing.T, config, data []byte) {
	cfg, err := minilm.ParseConfig(config)
	if err != nil {
		return
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("ParseConfig returned an invalid configuration: %v", err)
	}
	file, err := safetensors.Read(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return
	}
	ctx := context.New()
	if _, err := minilm.LoadSafetensors(ctx, file, cfg, minilm.LoadOptions{}); err != nil && ctx.NumVariables() != 0 {
		t.Fatalf("a failed load (%v) left %d variables", err, ctx.NumVariables())
	}
}
