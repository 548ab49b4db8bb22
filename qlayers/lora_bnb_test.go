package qlayers_test

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/bnb"
	"github.com/quanta-ml/quanta/conformance"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/qlayers"
	"github.com/quanta-ml/quanta/safetensors"
)

const bnbDir = "../reference/testdata/bnb"

func readF32NPY(t *testing.T, name string) []float32 {
	t.Helper()
	arr, err := conformance.ReadNPYFile(filepath.Join(bnbDir, name))
	if err != nil || arr.Descr != "<f4" {
		t.Fatalf("%s: %v %v", name, arr, err)
	}
	out := make([]float32, len(arr.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(arr.Data[4*i:]))
	}
	return out
}

// TestQLoRAOnBitsandbytesLayer is the whole loop on a layer bitsandbytes saved (NF4-DQ, in = 200,
// so its blocks straddle rows): read it, store it as a LoRA base in torch's layout (no
// re-quantization), check the forward pass against bitsandbytes' y = x·Wᵀ + b, train the
// adapters a few steps, merge them re-quantized with bitsandbytes' rule, and write the merged
// layer back as a Linear4bit state dict that reads again.
func TestQLoRAOnBitsandbytesLayer(t *testing.T) {
	backend := testutil.Backend(t)
	const in, out = 200, 48
	f, err := safetensors.Open(filepath.Join(bnbDir, "linear4bit_nf4_l200x48_dq.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	layer, err := bnb.ReadLinear4bit(f, "")
	if err != nil {
		t.Fatalf("%+v", err)
	}
	ctx := context.New()
	ctx.SetParam(context.ParamInitialSeed, int64(3))
	if err := qlayers.StoreBase(ctx, "/proj", layer.Weight, layer.Bias, qlayers.OutIn); err != nil {
		t.Fatalf("%+v", err)
	}
	lora := qlayers.LoRA{Rank: 4, Alpha: 8}
	model := func(ctx *context.Context, x *graph.Node) *graph.Node {
		return qlayers.LoRADense(ctx.In("proj").Checked(false), x, true, out, quanta.Config{}, lora)
	}
	x := tensors.FromFlatDataAndDimensions(readF32NPY(t, "l200x48.x.npy"), 4, in)
	got := flat(t, context.MustExecOnce(backend, ctx, model, x))
	want := readF32NPY(t, "linear4bit_nf4_l200x48_dq.y.npy")
	if d := maxDiff(got, want); d > 1e-5 {
		t.Errorf("forward differs from bitsandbytes' y by %g", d)
	}

	target := tensors.FromFlatDataAndDimensions(make([]float32, 4*out), 4, out)
	adam := optimizers.Adam().LearningRate(1e-2).Done()
	step := context.MustNewExec(backend, ctx, func(ctx *context.Context, x, target *graph.Node) *graph.Node {
		ctx.SetTraining(x.Graph(), true)
		loss := graph.ReduceAllMean(graph.Square(graph.Sub(model(ctx, x), target)))
		adam.UpdateGraph(ctx, x.Graph(), loss)
		return loss
	})
	first := flat(t, step.MustExec(x, target)[0])[0]
	var last float32
	for range 20 {
		last = flat(t, step.MustExec(x, target)[0])[0]
	}
	if !(last < first) {
		t.Errorf("loss %v after 20 steps, %v at first", last, first)
	}

	// The expected merged base: W + (α/r)·(A·B)ᵀ from the dense base, quantized by bitsandbytes' rule.
	dense := ctx.In("proj").In(qlayers.Scope)
	a, b := flat(t, dense.GetVariable(qlayers.LoRAAName).MustValue()), flat(t, dense.GetVariable(qlayers.LoRABName).MustValue())
	w := flat(t, testutil.Materialize(t, layer.Weight))
	for o := range out {
		for i := range in {
			var d float32
			for k := range lora.Rank {
				d += a[i*lora.Rank+k] * b[k*out+o]
			}
			w[o*in+i] += float32(lora.Scale()) * d
		}
	}
	want4, err := bnb.Quantize4bit(tensors.FromFlatDataAndDimensions(w, out, in), 64, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := qlayers.MergeLoRA(ctx, backend, qlayers.MergeOptions{Requantize: true}); err != nil {
		t.Fatalf("%+v", err)
	}
	base, layout, err := qlayers.Base(ctx, "/proj", in, out)
	if err != nil || layout != qlayers.OutIn {
		t.Fatalf("Base: %v, %v", layout, err)
	}
	merged := base.(*nf4.Array)
	if f := merged.Format(); !f.FlatBlocks || !f.DoubleQuant {
		t.Errorf("merged base format %s, want bitsandbytes' nf4-dq/64/flat", f)
	}
	gotCodes, wantCodes := tensors.MustCopyFlatData[uint8](merged.Packed().Tensor()), tensors.MustCopyFlatData[uint8](want4.Packed().Tensor())
	// The backend sums the merged weight in another order than the host: a value on a rounding
	// boundary may take the neighbouring code.
	if differ := countDiffer(gotCodes, wantCodes); differ > len(wantCodes)/100 {
		t.Errorf("merged base: %d of %d packed bytes differ from bitsandbytes' quantization of the merged weight", differ, len(wantCodes))
	}
	list, err := (&bnb.Linear4bit{Weight: merged, Bias: layer.Bias}).Tensors("")
	if err != nil {
		t.Fatalf("%+v", err)
	}
	path := filepath.Join(t.TempDir(), "merged.safetensors")
	if err := bnb.WriteFile(path, list); err != nil {
		t.Fatal(err)
	}
	g, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := bnb.ReadLinear4bit(g, ""); err != nil {
		t.Errorf("reading the merged layer back: %+v", err)
	}
}
