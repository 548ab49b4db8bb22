package qlayers_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/qlayers"
	"github.com/quanta-ml/quanta/safetensors"
)

// fuzzLayer returns a context with one float layer, "/layer" (8 inputs, 4 outputs), that adapter
// files may name as module "layer".
func fuzzLayer() *context.Context {
	ctx := context.New()
	ctx.In("layer").In(qlayers.Scope).VariableWithValue(qlayers.WeightsName, matrix(1, 8, 4))
	return ctx
}

// FuzzLoadAdapters loads arbitrary bytes as adapter_config.json and adapter_model.safetensors
// into a context with one layer: the load either fails with an error, leaving the context as it
// was, or sets adapters of the config's rank that fit the layer; all of it allocating in proportion to the input,
// never to r or a dimension (`make fuzz` runs it under a memory limit). The seed is what
// SaveAdapters writes for that layer.
func FuzzLoadAdapters(f *testing.F) {
	ctx := fuzzLayer()
	dense := ctx.In("layer").In(qlayers.Scope)
	dense.VariableWithValue(qlayers.LoRAAName, matrix(2, 8, 2))
	dense.VariableWithValue(qlayers.LoRABName, matrix(3, 2, 4))
	dense.SetParam(qlayers.LoRAScaleParam, 1.5)
	dir := savedAdapters(f, ctx)
	config, err := os.ReadFile(filepath.Join(dir, qlayers.AdapterConfigFile))
	if err != nil {
		f.Fatal(err)
	}
	weights, err := os.ReadFile(filepath.Join(dir, qlayers.AdapterWeightsFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(config, weights)
	f.Add([]byte(`{"r": 2, "lora_alpha": 4}`), weights)
	f.Fuzz(func(t *testing.T, config, weights []byte) {
		testutil.AllocatesAtMost(t, "qlayers.LoadAdapters", 64*uint64(len(config)+len(weights))+32<<20, func() {
			loadAdapters(t, config, weights)
		})
	})
}

func loadAdapters(t *testing.T, config, weights []byte) {
	file, err := safetensors.Read(bytes.NewReader(weights), int64(len(weights)))
	if err != nil {
		return
	}
	ctx := fuzzLayer()
	if err := qlayers.LoadAdaptersFrom(ctx, config, file, qlayers.AdapterOptions{}); err != nil {
		if ctx.NumVariables() != 1 {
			t.Fatalf("a failed load (%v) left %d variables", err, ctx.NumVariables())
		}
		return
	}
	dense := ctx.In("layer").In(qlayers.Scope)
	a, b := dense.GetVariable(qlayers.LoRAAName), dense.GetVariable(qlayers.LoRABName)
	if a == nil || b == nil || a.Shape().Rank() != 2 || b.Shape().Rank() != 2 || a.Shape().Dim(1) != b.Shape().Dim(0) ||
		a.Shape().Dim(0) != 8 || b.Shape().Dim(1) != 4 {
		t.Fatalf("a successful load left adapters %v and %v", a, b)
	}
}
