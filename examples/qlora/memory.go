package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	goruntime "runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/qlayers"
	"github.com/quanta-ml/quanta/runtime"
)

// The memory measurement (-memory): a stack of memLayers LoRA layers of memDim×memDim (tanh
// between them) trains on random data with Adam, batch memBatch, rank memRank. Each
// configuration runs in its own child process, which warms up (compiles and runs two steps),
// then resets the kernel's peak-RSS counter (/proc/self/clear_refs, 5) and runs memSteps steps:
// the peak RSS above the RSS before them is what a training step holds on top of what persists
// (base, adapters, optimizer state, the compiled program).
//
// Configurations:
//   - nf4-dq: qlayers.LoRADense on NF4-DQ bases (its base product recomputes the decode in the
//     backward pass);
//   - nf4-dq-autodiff: the same product left to autodiff (implicitarray.MatMul on the base
//     inside the gradient): XLA keeps each layer's decoded float weight from the forward pass
//     for the backward pass;
//   - float: qlayers.LoRADense on float bases.
var (
	flagMemDim    = flag.Int("memory-dim", 2048, "-memory: width of the layers of the measurement")
	flagMemLayers = flag.Int("memory-layers", 4, "-memory: number of layers of the measurement")
)

const (
	memBatch = 64
	memRank  = 16
	memSteps = 3
)

var memModes = []string{"nf4-dq", "nf4-dq-autodiff", "float"}

// measureMemory runs one child process per configuration and prints their figures.
func measureMemory() error {
	d, l := *flagMemDim, *flagMemLayers
	fmt.Printf("memory of a LoRA training step: %d layers %d×%d, batch %d, rank %d, Adam\n", l, d, d, memBatch, memRank)
	fmt.Printf("%-16s %12s %12s %12s %14s %16s\n", "base", "base bytes", "adapters", "Adam state", "RSS before", "step peak above")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for _, mode := range memModes {
		cmd := exec.Command(self, "-memory-mode", mode, "-memory-dim", strconv.Itoa(d), "-memory-layers", strconv.Itoa(l))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return errors.Wrapf(err, "measuring %s", mode)
		}
		fmt.Print(string(out))
	}
	fmt.Printf("one layer's weight decoded to float32: %d bytes; activations of one layer (batch × width × 4): %d bytes\n",
		d*d*4, memBatch*d*4)
	return nil
}

// measureChild measures one configuration and prints one row.
func measureChild(mode string) error {
	backend, err := runtime.Backend()
	if err != nil {
		return err
	}
	d, layersN := *flagMemDim, *flagMemLayers
	ctx := context.New()
	ctx.SetParam(context.ParamInitialSeed, int64(1))
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(scale float64, dims ...int) *tensors.Tensor {
		n := 1
		for _, x := range dims {
			n *= x
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * scale)
		}
		return tensors.FromFlatDataAndDimensions(v, dims...)
	}
	scope := func(i int) string { return fmt.Sprintf("/layer_%d", i) }
	for i := range layersN {
		ctx.InAbsPath(scope(i)).In(qlayers.Scope).VariableWithValue(qlayers.WeightsName, random(1/math.Sqrt(float64(d)), d, d))
	}
	if mode != "float" {
		if _, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: ".*", Config: nf4DQ}}, qlayers.Options{}); err != nil {
			return err
		}
	}
	lora := qlayers.LoRA{Rank: memRank, Alpha: 2 * memRank}
	layer := func(ctx *context.Context, x *graph.Node, i int) *graph.Node {
		lctx := ctx.InAbsPath(scope(i)).Checked(false)
		if mode != "nf4-dq-autodiff" {
			return qlayers.LoRADense(lctx, x, false, d, nf4DQ, lora)
		}
		return autodiffLoRA(lctx, x, scope(i), d, lora)
	}
	model := func(ctx *context.Context, x *graph.Node) *graph.Node {
		for i := range layersN {
			x = layer(ctx, x, i)
			if i+1 < layersN {
				x = graph.Tanh(x)
			}
		}
		return x
	}
	opt := optimizers.Adam().LearningRate(1e-3).Done()
	step, err := context.NewExec(backend, ctx, func(ctx *context.Context, x, target *graph.Node) *graph.Node {
		ctx.SetTraining(x.Graph(), true)
		loss := graph.ReduceAllMean(graph.Square(graph.Sub(model(ctx, x), target)))
		opt.UpdateGraph(ctx, x.Graph(), loss)
		return loss
	})
	if err != nil {
		return err
	}
	x, target := random(1, memBatch, d), random(1, memBatch, d)
	for range 2 {
		if _, err := step.Exec(x, target); err != nil {
			return err
		}
	}
	goruntime.GC()
	debug.FreeOSMemory()
	before, _ := fileio.ProcStatus("VmRSS")
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return errors.Wrap(err, "resetting the peak RSS (Linux >= 4.0)")
	}
	for range memSteps {
		if _, err := step.Exec(x, target); err != nil {
			return err
		}
	}
	peak, _ := fileio.ProcStatus("VmHWM")
	var base, adapters, adam int64
	for v := range ctx.IterVariables() {
		n := int64(v.Shape().Memory())
		switch {
		case strings.HasPrefix(v.Scope(), "/"+optimizers.AdamDefaultScope):
			adam += n
		case v.Name() == qlayers.LoRAAName || v.Name() == qlayers.LoRABName:
			adapters += n
		case v.Scope() != "/":
			base += n
		}
	}
	fmt.Printf("%-16s %12d %12d %12d %14d %16d\n", mode, base, adapters, adam, before, peak-before)
	return nil
}

// autodiffLoRA is LoRADense's computation with the base product left to autodiff: the
// comparison of the memory measurement.
func autodiffLoRA(ctx *context.Context, x *graph.Node, scope string, d int, lora qlayers.LoRA) *graph.Node {
	g := x.Graph()
	base, _, err := qlayers.Base(ctx, scope, d, d)
	if err != nil {
		panic(err)
	}
	dense := ctx.In(qlayers.Scope)
	comps := base.Components()
	for i := range comps {
		v := dense.GetVariable(fmt.Sprintf("%s%d", qlayers.ComponentPrefix, i))
		v.SetTrainable(false)
		comps[i] = implicitarray.NodeComponent(v.ValueGraph(g))
	}
	y := implicitarray.Materialize(implicitarray.MatMul(x, base.WithComponents(comps)))
	bound := 1 / math.Sqrt(float64(d))
	a := dense.WithInitializer(initializers.RandomUniformFn(ctx, -bound, bound)).VariableWithShape(qlayers.LoRAAName,
		shapes.Make(x.DType(), d, lora.Rank))
	b := dense.WithInitializer(initializers.Zero).VariableWithShape(qlayers.LoRABName, shapes.Make(x.DType(), lora.Rank, d))
	return graph.Add(y, graph.MulScalar(graph.Dot(graph.Dot(x, a.ValueGraph(g)), b.ValueGraph(g)), lora.Scale()))
}
