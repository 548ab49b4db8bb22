// Command qlora fine-tunes a Fashion-MNIST classifier through LoRA adapters on an NF4 base with
// double-quantized absmax (QLoRA), and compares it with full-precision LoRA on the same data,
// adapters and steps.
//
// The task is a transfer: an MLP (784→H→H→5) is pre-trained in float on the first five classes
// (T-shirt, trouser, pullover, dress, coat), then fine-tuned on the other five (sandal, shirt,
// sneaker, bag, ankle boot), relabelled 0..4. The fine-tuning trains rank-r adapters on all three
// layers and nothing else; the base stays frozen, its two hidden kernels in NF4-DQ for QLoRA
// (the small output layer stays float, as QLoRA keeps its output head), float for LoRA. Both
// runs start from the same adapters and see the same batches. The program prints the test
// accuracy on the new classes before and after, the memory of the base and of the adapters,
// writes a PNG of the loss and accuracy curves, and saves the QLoRA adapters in PEFT's format.
//
//	go run ./examples/qlora              # pre-train 1500 steps, fine-tune 800 steps per run
//	go run ./examples/qlora -quick       # 500 + 300 steps, a shorter run
//	go run ./examples/qlora -memory      # the memory of a QLoRA training step (see memory.go)
//	go run ./examples/qlora -dropout 0.05 # the adapters' input dropped while training, as PEFT's lora_dropout
//
// Batches, initialization and the dropout's draws are seeded (-seed): a run is reproducible on
// one backend.
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/cmdflags"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/qlayers"
	"github.com/quanta-ml/quanta/runtime"
)

var (
	flagQuick    = flag.Bool("quick", false, "shorter run: 500 + 300 steps")
	flagSeed     = flag.Uint64("seed", 7, "random seed of the initialization and the batches")
	flagHidden   = flag.Int("hidden", 512, "width of the hidden layers")
	flagRank     = flag.Int("rank", 8, "LoRA rank")
	flagAlpha    = flag.Float64("alpha", 16, "LoRA alpha (the adapters' product is scaled by alpha/rank)")
	flagDropout  = flag.Float64("dropout", 0, "LoRA dropout: the probability of dropping each element of the adapters' input while training (PEFT's lora_dropout)")
	flagPlot     = flag.String("plot", filepath.Join(os.TempDir(), "quanta_qlora_curves.png"), "PNG file for the curves; empty: none")
	flagAdapters = flag.String("adapters", filepath.Join(os.TempDir(), "quanta_qlora_adapters"), "directory for the QLoRA adapters; empty: not saved")
	flagData     = flag.String("data", assets.FashionMNISTDir, "directory of the Fashion-MNIST .gz files")
	flagMemory   = flag.Bool("memory", false, "measure the memory of training steps instead (see memory.go), on its own model sized by -memory-dim and -memory-layers; the training flags (-quick, -seed, -hidden, -rank, -alpha, -dropout, -plot, -adapters, -data) are refused with it")
	flagMemMode  = flag.String("memory-mode", "", "internal: the configuration one -memory child process measures")
)

// numClasses is the size of each task: five classes.
const numClasses = 5

// nf4DQ is the base's format: NF4, blocks of 64, double-quantized absmax.
var nf4DQ = quanta.Config{DoubleQuant: true}

// hiddenLayers selects the kernels QLoRA quantizes.
const hiddenLayers = `/hidden_[0-9]+/dense`

type settings struct {
	pretrainSteps, finetuneSteps, evalEvery, batchSize int
	pretrainLR, finetuneLR                             float64
}

func main() {
	flag.Parse()
	cmdflags.Exit("qlora", cmdflags.ExitUsage, checkFlags())
	var err error
	switch {
	case *flagMemMode != "":
		err = measureChild(*flagMemMode)
	case *flagMemory:
		err = measureMemory()
	default:
		err = run()
	}
	cmdflags.Exit("qlora", cmdflags.ExitFailure, err)
}

// checkFlags checks the flags' values before anything runs, naming the one out of range, that no
// argument follows the flags, and that the training's -plot and -adapters can be written.
func checkFlags() error {
	if err := cmdflags.First(
		cmdflags.NoArguments(),
		cmdflags.AtLeast("-hidden", *flagHidden, 1, "the width of the hidden layers"),
	); err != nil {
		return err
	}
	switch {
	case *flagRank < 1 || *flagRank > math.MaxInt32:
		return errors.Errorf("-rank %d; accepted: 1 to %d (the LoRA rank)", *flagRank, math.MaxInt32)
	case *flagAlpha < 0 || math.IsNaN(*flagAlpha) || math.IsInf(*flagAlpha, 0):
		return errors.Errorf("-alpha %v; accepted: 0 (meaning the rank) or a positive finite number", *flagAlpha)
	case !(*flagDropout >= 0 && *flagDropout <= 1):
		return errors.Errorf("-dropout %v; accepted: 0 to 1 (a probability)", *flagDropout)
	}
	if err := cmdflags.First(
		cmdflags.AtLeast("-memory-dim", *flagMemDim, 1, "the width"),
		cmdflags.AtLeast("-memory-layers", *flagMemLayers, 1, "layers"),
	); err != nil {
		return err
	}
	switch {
	case *flagMemMode != "" && !slices.Contains(memModes, *flagMemMode):
		return errors.Errorf("-memory-mode %q; accepted: one of %s", *flagMemMode, strings.Join(memModes, ", "))
	}
	// The training run and the memory measurement read disjoint flags: one given for the other
	// would be ignored.
	var training, memory []string
	flag.Visit(func(f *flag.Flag) {
		switch {
		case slices.Contains(trainingFlags, f.Name):
			training = append(training, "-"+f.Name)
		case f.Name == "memory-dim" || f.Name == "memory-layers":
			memory = append(memory, "-"+f.Name)
		}
	})
	measuring := *flagMemory || *flagMemMode != ""
	switch {
	case measuring && len(training) > 0:
		return errors.Errorf("-memory with %s; accepted: -memory-dim and -memory-layers (the measurement trains its own model: "+
			"rank %d, batch %d, seed 1)", strings.Join(training, ", "), memRank, memBatch)
	case !measuring && len(memory) > 0:
		return errors.Errorf("%s without -memory; accepted: with -memory (the training run does not read them: -hidden sets its width)",
			strings.Join(memory, ", "))
	}
	if measuring { // it writes neither the plot nor the adapters
		return nil
	}
	// The plot and the adapters are written after the training: check now that they can be.
	if *flagPlot != "" {
		if err := fileio.CheckOutput("-plot", *flagPlot); err != nil {
			return err
		}
	}
	if *flagAdapters != "" {
		if err := fileio.CheckOutput("-adapters", filepath.Join(*flagAdapters, qlayers.AdapterWeightsFile)); err != nil {
			return err
		}
	}
	return nil
}

// trainingFlags are the flags of the training run, which the memory measurement does not read.
var trainingFlags = []string{"quick", "seed", "hidden", "rank", "alpha", "dropout", "plot", "adapters", "data"}

func run() error {
	start := time.Now()
	s := settings{pretrainSteps: 1500, finetuneSteps: 800, evalEvery: 40, batchSize: 128, pretrainLR: 1e-3, finetuneLR: 2e-3}
	if *flagQuick {
		s = settings{pretrainSteps: 500, finetuneSteps: 300, evalEvery: 30, batchSize: 128, pretrainLR: 2e-3, finetuneLR: 3e-3}
	}
	backend, err := runtime.Backend()
	if err != nil {
		return err
	}
	fmt.Printf("backend: %s\n", backend.Description())
	train, err := loadFashionMNIST(*flagData, true)
	if err != nil {
		return err
	}
	test, err := loadFashionMNIST(*flagData, false)
	if err != nil {
		return err
	}
	oldTrain, oldTest := train.subset(0, numClasses), test.subset(0, numClasses)
	newTrain, newTest := train.subset(numClasses, numClasses), test.subset(numClasses, numClasses)
	h := *flagHidden
	fmt.Printf("data: Fashion-MNIST; pre-training on classes 0-4 (%d images), fine-tuning on classes 5-9 (%d images, "+
		"test %d); MLP 784→%d→%d→%d\n", len(oldTrain.labels), len(newTrain.labels), len(newTest.labels), h, h, numClasses)

	// 1. Pre-train the float base on the old classes (every variable trainable: layers.Dense).
	base := context.New()
	base.SetParam(context.ParamInitialSeed, int64(*flagSeed))
	preModel := func(ctx *context.Context, x *graph.Node) *graph.Node {
		return mlp(ctx, x, func(ctx *context.Context, x *graph.Node, out int) *graph.Node { return layers.Dense(ctx, x, true, out) })
	}
	if _, err := trainRun(backend, base, preModel, oldTrain, nil, s.pretrainSteps, s.pretrainLR, 0, s, *flagSeed); err != nil {
		return err
	}
	oldAcc, err := accuracy(backend, base, preModel, oldTest)
	if err != nil {
		return err
	}
	fmt.Printf("base: test accuracy %.2f%% on classes 0-4 after %d steps (%s)\n", 100*oldAcc, s.pretrainSteps, since(start))

	// 2. Two copies of the base: QLoRA's with its hidden kernels in NF4-DQ, LoRA's in float.
	lora := qlayers.LoRA{Rank: *flagRank, Alpha: *flagAlpha, Dropout: *flagDropout}
	loraModel := func(ctx *context.Context, x *graph.Node) *graph.Node {
		return mlp(ctx, x, func(ctx *context.Context, x *graph.Node, out int) *graph.Node {
			return qlayers.LoRADense(ctx, x, true, out, nf4DQ, lora)
		})
	}
	qloraCtx, err := cloneVariables(base)
	if err != nil {
		return err
	}
	report, err := qlayers.QuantizeContext(qloraCtx, []qlayers.Rule{{Scope: hiddenLayers, Config: nf4DQ}}, qlayers.Options{})
	if err != nil {
		return err
	}
	floatCtx, err := cloneVariables(base)
	if err != nil {
		return err
	}
	beforeAcc, err := accuracy(backend, qloraCtx, loraModel, newTest) // creates the adapters (B = 0: the base's output)
	if err != nil {
		return err
	}
	if err := copyAdapters(qloraCtx, floatCtx); err != nil {
		return err
	}

	// 3. Fine-tune both on the new classes: same adapters at the start, same batches, same dropout masks.
	qCurve, err := trainRun(backend, qloraCtx, loraModel, newTrain, newTest, s.finetuneSteps, s.finetuneLR, s.evalEvery, s, *flagSeed+1)
	if err != nil {
		return err
	}
	fmt.Printf("QLoRA (NF4-DQ base): fine-tuned %d steps (%s)\n", s.finetuneSteps, since(start))
	fCurve, err := trainRun(backend, floatCtx, loraModel, newTrain, newTest, s.finetuneSteps, s.finetuneLR, s.evalEvery, s, *flagSeed+1)
	if err != nil {
		return err
	}
	fmt.Printf("LoRA (float base): fine-tuned %d steps (%s)\n", s.finetuneSteps, since(start))
	qAcc, fAcc := qCurve.acc[len(qCurve.acc)-1].y, fCurve.acc[len(fCurve.acc)-1].y

	// 4. Results.
	fmt.Printf("\ntest accuracy on classes 5-9 (%d images)\n", len(newTest.labels))
	fmt.Printf("  base, before fine-tuning (NF4-DQ):  %6.2f%%\n", 100*beforeAcc)
	fmt.Printf("  QLoRA, NF4-DQ base:                 %6.2f%%\n", 100*qAcc)
	fmt.Printf("  LoRA, float base:                   %6.2f%%\n", 100*fAcc)
	fmt.Printf("  difference:                         %+6.2f points (within 1 point: %v)\n", 100*(qAcc-fAcc),
		math.Abs(qAcc-fAcc) <= 0.01)
	fmt.Println()
	fmt.Print(report)
	printMemory(qloraCtx, floatCtx)
	if *flagPlot != "" {
		if err := plotCurves(*flagPlot, []named{{"QLoRA, NF4-DQ base", qCurve}, {"LoRA, float base", fCurve}}); err != nil {
			return err
		}
		fmt.Printf("curves written to %s\n", *flagPlot)
	}
	if *flagAdapters != "" {
		if err := qlayers.SaveAdapters(qloraCtx, *flagAdapters, qlayers.AdapterOptions{}); err != nil {
			return err
		}
		info, err := os.Stat(filepath.Join(*flagAdapters, qlayers.AdapterWeightsFile))
		if err != nil {
			return err
		}
		fmt.Printf("QLoRA adapters saved in PEFT's format to %s (%d bytes)\n", *flagAdapters, info.Size())
	}
	fmt.Printf("total time: %s\n", since(start))
	return nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Second) }

// mlp is the model: dense(784→H)+ReLU, dense(H→H)+ReLU, dense(H→5), with the given layer
// function, in scopes hidden_0, hidden_1 and output.
func mlp(ctx *context.Context, x *graph.Node, dense func(ctx *context.Context, x *graph.Node, out int) *graph.Node) *graph.Node {
	h := *flagHidden
	x = activations.Relu(dense(ctx.In("hidden_0"), x, h))
	x = activations.Relu(dense(ctx.In("hidden_1"), x, h))
	return dense(ctx.In("output"), x, numClasses)
}

// point is one value of a curve.
type point struct{ x, y float64 }

// curves are the training loss (per step) and the test accuracy (every evalEvery steps) of a run.
type curves struct {
	loss, acc []point
}

// trainRun trains the trainable variables of ctx with Adam for steps batches drawn with seed,
// evaluating the test accuracy every evalEvery steps (and at the end) when test is not nil.
func trainRun(backend backends.Backend, ctx *context.Context, model func(*context.Context, *graph.Node) *graph.Node,
	data, test *dataset, steps int, lr float64, evalEvery int, s settings, seed uint64) (curves, error) {
	var c curves
	opt := optimizers.Adam().LearningRate(lr).Done()
	step, err := context.NewExec(backend, ctx.Checked(false), func(ctx *context.Context, x, labels *graph.Node) *graph.Node {
		g := x.Graph()
		ctx.SetTraining(g, true)
		loss := crossEntropy(model(ctx, x), labels)
		opt.UpdateGraph(ctx, g, loss)
		return loss
	})
	if err != nil {
		return c, err
	}
	defer step.Finalize()
	rng := rand.New(rand.NewPCG(seed, 2))
	idx := make([]int, s.batchSize)
	for i := range steps {
		for j := range idx {
			idx[j] = rng.IntN(len(data.labels))
		}
		x, y := data.batch(idx)
		out, err := step.Exec(x, y)
		if err != nil {
			return c, err
		}
		c.loss = append(c.loss, point{float64(i + 1), float64(out[0].Value().(float32))})
		if test != nil && ((i+1)%evalEvery == 0 || i+1 == steps) {
			acc, err := accuracy(backend, ctx, model, test)
			if err != nil {
				return c, err
			}
			c.acc = append(c.acc, point{float64(i + 1), acc})
		}
	}
	return c, nil
}

// crossEntropy is the mean softmax cross-entropy of logits (batch, classes) for int32 labels.
func crossEntropy(logits, labels *graph.Node) *graph.Node {
	oneHot := graph.OneHot(labels, logits.Shape().Dim(-1), logits.DType())
	return graph.Neg(graph.ReduceAllMean(graph.ReduceSum(graph.Mul(oneHot, graph.LogSoftmax(logits, -1)), -1)))
}

// accuracy is the fraction of data the model (in inference) classifies right.
func accuracy(backend backends.Backend, ctx *context.Context, model func(*context.Context, *graph.Node) *graph.Node,
	data *dataset) (float64, error) {
	e, err := context.NewExec(backend, ctx.Checked(false), func(ctx *context.Context, x, labels *graph.Node) *graph.Node {
		pred := graph.ArgMax(model(ctx, x), -1, dtypes.Int32)
		return graph.ReduceAllSum(graph.ConvertDType(graph.Equal(pred, labels), dtypes.Int32))
	})
	if err != nil {
		return 0, err
	}
	defer e.Finalize()
	const chunk = 1000
	right := 0
	for from := 0; from < len(data.labels); from += chunk {
		idx := make([]int, 0, chunk)
		for i := from; i < min(from+chunk, len(data.labels)); i++ {
			idx = append(idx, i)
		}
		x, y := data.batch(idx)
		out, err := e.Exec(x, y)
		if err != nil {
			return 0, err
		}
		right += int(out[0].Value().(int32))
	}
	return float64(right) / float64(len(data.labels)), nil
}

// cloneVariables returns a new context holding copies of ctx's model variables (not the
// optimizer's) and its initial seed.
func cloneVariables(ctx *context.Context) (*context.Context, error) {
	out := context.New()
	out.SetParam(context.ParamInitialSeed, int64(*flagSeed))
	for v := range ctx.IterVariables() {
		if strings.HasPrefix(v.Scope(), "/"+optimizers.AdamDefaultScope) || v.Scope() == "/" {
			continue // optimizer state and the global step
		}
		clone, err := clonedValue(v)
		if err != nil {
			return nil, err
		}
		out.InAbsPath(v.Scope()).VariableWithValue(v.Name(), clone)
	}
	return out, nil
}

// clonedValue returns a local copy of v's value.
func clonedValue(v *context.Variable) (*tensors.Tensor, error) {
	value, err := v.Value()
	if err != nil {
		return nil, err
	}
	return value.LocalClone()
}

// copyAdapters gives to the layers of dst the adapters of src, and dst the random state of src,
// so that both runs start alike and draw the same dropout masks (-dropout).
func copyAdapters(src, dst *context.Context) error {
	n := 0
	for v := range src.IterVariables() {
		if v.Name() != qlayers.LoRAAName && v.Name() != qlayers.LoRABName {
			continue
		}
		clone, err := clonedValue(v)
		if err != nil {
			return err
		}
		dense := dst.InAbsPath(v.Scope()).Checked(false)
		dense.VariableWithValue(v.Name(), clone)
		if s, ok := src.InAbsPath(v.Scope()).GetParam(qlayers.LoRAScaleParam); ok {
			dense.SetParam(qlayers.LoRAScaleParam, s)
		}
		n++
	}
	if n == 0 {
		return errors.New("no adapters to copy")
	}
	if rng := src.GetVariableByScopeAndName(context.RootScope, context.RNGStateVariableName); rng != nil {
		clone, err := clonedValue(rng)
		if err != nil {
			return err
		}
		if own := dst.GetVariableByScopeAndName(context.RootScope, context.RNGStateVariableName); own != nil {
			return own.SetValue(clone)
		}
		dst.InAbsPath(context.RootScope).Checked(false).VariableWithValue(context.RNGStateVariableName, clone).SetTrainable(false)
	}
	return nil
}

// printMemory prints the memory of the frozen bases and of the adapters and their optimizer
// state.
func printMemory(qlora, float *context.Context) {
	bytesOf := func(ctx *context.Context, keep func(*context.Variable) bool) (n int64, params int64) {
		for v := range ctx.IterVariables() {
			if keep(v) {
				n += int64(v.Shape().Memory())
				params += int64(v.Shape().Size())
			}
		}
		return n, params
	}
	isAdapter := func(v *context.Variable) bool { return v.Name() == qlayers.LoRAAName || v.Name() == qlayers.LoRABName }
	isMoment := func(v *context.Variable) bool {
		return strings.HasPrefix(v.Scope(), "/"+optimizers.AdamDefaultScope) && v.Shape().Rank() > 0
	}
	isBase := func(v *context.Variable) bool {
		return !isAdapter(v) && !isMoment(v) && v.Scope() != "/" && !strings.HasPrefix(v.Scope(), "/"+optimizers.AdamDefaultScope)
	}
	qBase, _ := bytesOf(qlora, isBase)
	fBase, fParams := bytesOf(float, isBase)
	adapters, aParams := bytesOf(qlora, isAdapter)
	moments, _ := bytesOf(qlora, isMoment)
	fmt.Printf("\nmemory (bytes)\n")
	fmt.Printf("  base, float32 (LoRA):                %9d  (%d parameters, %.3f bytes/param)\n", fBase, fParams,
		float64(fBase)/float64(fParams))
	fmt.Printf("  base, NF4-DQ hidden + float head:    %9d  (%.3f bytes/param; %.1fx smaller)\n", qBase,
		float64(qBase)/float64(fParams), float64(fBase)/float64(qBase))
	var kernelBytes, kernelParams int64
	for v := range qlora.IterVariables() {
		if strings.HasPrefix(v.Name(), qlayers.ComponentPrefix) {
			kernelBytes += int64(v.Shape().Memory())
		}
	}
	for v := range float.IterVariables() {
		if v.Name() == qlayers.WeightsName && regexp.MustCompile(hiddenLayers).MatchString(v.Scope()) {
			kernelParams += int64(v.Shape().Size())
		}
	}
	fmt.Printf("  hidden kernels in NF4-DQ:            %9d  (%d parameters, %.4f bytes/param)\n", kernelBytes, kernelParams,
		float64(kernelBytes)/float64(kernelParams))
	fmt.Printf("  adapters A and B (trainable):        %9d  (%d parameters, %.2f%% of the base's)\n", adapters, aParams,
		100*float64(aParams)/float64(fParams))
	fmt.Printf("  Adam moments (adapters only):        %9d\n", moments)
}
