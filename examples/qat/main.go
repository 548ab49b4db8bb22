// Command qat trains a small MLP classifier on a synthetic three-armed spiral, then compares, for
// each quantization type (nf4, int8, binary, ternary): the float model's accuracy, the accuracy
// after post-training quantization (PTQ) of its dense kernels, and the accuracy after a few
// hundred steps of quantization-aware training (QAT, straight-through estimator) started from the
// float weights. It prints a table and writes a PNG plot of the test accuracy during training.
//
//	go run ./examples/qat            # 3000 float steps, then 1500 QAT steps per type (under a minute on 2 CPU cores, XLA)
//	go run ./examples/qat -quick     # 1000 + 4×400 steps on less data, for make demo (about 10 s)
//
// The model is Dense(2→H)+ReLU, two Dense(H→H)+ReLU, Dense(H→3) (H = -hidden, 64). The first layer
// stays float (its two inputs are not worth quantizing, and binary/ternary pack four rows a
// byte); the other three are quantized, chosen by a qlayers.Rule. PTQ and the final QAT accuracy
// run on the quantized kernels that qlayers.QuantizeContext stores in the context, through
// qlayers.Dense's inference path; the curves during QAT use the fake-quantized forward (the same
// values). Binary and ternary kernels keep a per-output-column mean|w| scale (quanta.Config.Scaled)
// unless -unscaled.
// Batches and initialization are seeded (-seed): a run is reproducible on one backend.
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/datasets"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/internal/cmdflags"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/internal/trainctx"
	"github.com/quanta-ml/quanta/qlayers"
	"github.com/quanta-ml/quanta/runtime"
)

var (
	flagQuick    = flag.Bool("quick", false, "shorter run (fewer points and steps), for make demo")
	flagPlot     = flag.String("plot", filepath.Join(os.TempDir(), "quanta_qat_curves.png"), "PNG file for the training curves; empty: no plot")
	flagTypes    = flag.String("types", "nf4,int8,binary,ternary", "comma-separated quantization types to compare")
	flagSeed     = flag.Uint64("seed", 7, "random seed of the data, the initialization and the batches")
	flagHidden   = flag.Int("hidden", 64, "width of the hidden layers")
	flagUnscaled = flag.Bool("unscaled", false, "binary and ternary without the per-channel scale (the plain sign and threshold rules)")
)

// settings of one run.
type settings struct {
	pointsPerClass, testPerClass int
	floatSteps, qatSteps         int
	floatEvalEvery, qatEvalEvery int
	batchSize                    int
	floatLR, qatLR               float64
}

func main() {
	flag.Parse()
	cmdflags.Exit("qat", cmdflags.ExitUsage, checkFlags())
	cmdflags.Exit("qat", cmdflags.ExitFailure, run())
}

const numClasses = 3

// quantizedLayers selects the kernels QAT and PTQ quantize: all but the input layer.
const quantizedLayers = `/model/(hidden_[0-9]+|output)/dense`

// checkFlags checks the command line before anything runs: no argument, -hidden, -types (see
// parseTypes) and that -plot, written after the training, can be written.
func checkFlags() error {
	if err := cmdflags.First(
		cmdflags.NoArguments(),
		cmdflags.AtLeast("-hidden", *flagHidden, 1, "the width of the hidden layers"),
	); err != nil {
		return err
	}
	if _, err := parseTypes(); err != nil {
		return err
	}
	if *flagPlot != "" {
		return fileio.CheckOutput("-plot", *flagPlot)
	}
	return nil
}

// parseTypes returns the types of -types: each known, listed once, and binary and ternary only
// with a -hidden their kernels can pack.
func parseTypes() ([]quanta.Type, error) {
	var types []quanta.Type
	for _, name := range strings.Split(*flagTypes, ",") {
		t, err := quanta.ParseType(name)
		if err != nil {
			return nil, errors.WithMessage(err, "-types")
		}
		if slices.Contains(types, t) { // it would be trained and reported twice
			return nil, errors.Errorf("-types: %q listed twice (as %s); accepted: each type once", strings.TrimSpace(name), t)
		}
		types = append(types, t)
		if (t == quanta.Binary || t == quanta.Ternary) && *flagHidden%4 != 0 {
			// The quantized kernels are (H, H) and (H, 3): binary and ternary pack 4 input rows a byte.
			return nil, errors.Errorf("-hidden %d with %s; accepted: a multiple of 4 (binary and ternary kernels pack 4 rows a byte)",
				*flagHidden, t)
		}
	}
	return types, nil
}

func run() error {
	start := time.Now()
	s := settings{pointsPerClass: 2000, testPerClass: 500, floatSteps: 3000, qatSteps: 1500, floatEvalEvery: 100, qatEvalEvery: 25,
		batchSize: 128, floatLR: 3e-3, qatLR: 1e-3}
	if *flagQuick {
		s = settings{pointsPerClass: 1000, testPerClass: 300, floatSteps: 1000, qatSteps: 400, floatEvalEvery: 50, qatEvalEvery: 20,
			batchSize: 128, floatLR: 5e-3, qatLR: 1e-3}
	}
	types, _ := parseTypes() // checkFlags refused a bad list

	backend, err := runtime.Backend()
	if err != nil {
		return err
	}
	fmt.Printf("backend: %s\n", backend.Description())
	rng := rand.New(rand.NewPCG(*flagSeed, 1))
	trainX, trainY := spirals(rng, s.pointsPerClass)
	testX, testY := spirals(rng, s.testPerClass)
	fmt.Printf("data: %d-class spirals, %d training and %d test points; MLP 2→%d→%d→%d→%d\n",
		numClasses, len(trainY), len(testY), *flagHidden, *flagHidden, *flagHidden, numClasses)

	// 1. Float baseline.
	floatCtx := trainctx.New(*flagSeed)
	floatCurve, err := trainModel(backend, floatCtx, nil, s, s.floatSteps, s.floatLR, s.floatEvalEvery, trainX, trainY, testX, testY, rng)
	if err != nil {
		return err
	}
	floatAcc, err := accuracy(backend, floatCtx, nil, testX, testY)
	if err != nil {
		return err
	}
	fmt.Printf("float: test accuracy %.2f%% after %d steps (%s)\n", 100*floatAcc, s.floatSteps, time.Since(start).Round(time.Second))

	curves := []curve{{name: "float", points: floatCurve}}
	var rows []row
	for _, t := range types {
		cfg := quanta.Config{Type: t, Scaled: !*flagUnscaled} // Scaled matters to binary and ternary only
		r := row{cfg: cfg, floatAcc: floatAcc}

		// 2. Post-training quantization: convert a copy of the float context.
		ptqCtx, err := trainctx.CloneModel(floatCtx, *flagSeed)
		if err != nil {
			return err
		}
		report, err := qlayers.QuantizeContext(ptqCtx, []qlayers.Rule{{Scope: quantizedLayers, Config: cfg}}, qlayers.Options{})
		if err != nil {
			return err
		}
		r.floatBytes, r.quantBytes = report.BytesBefore(), report.BytesAfter()
		if r.ptqAcc, err = accuracy(backend, ptqCtx, &cfg, testX, testY); err != nil {
			return err
		}

		// 3. Quantization-aware training from the float weights, then the same conversion.
		qatCtx, err := trainctx.CloneModel(floatCtx, *flagSeed)
		if err != nil {
			return err
		}
		qatCurve, err := trainModel(backend, qatCtx, &cfg, s, s.qatSteps, s.qatLR, s.qatEvalEvery, trainX, trainY, testX, testY, rng)
		if err != nil {
			return err
		}
		if _, err := qlayers.QuantizeContext(qatCtx, []qlayers.Rule{{Scope: quantizedLayers, Config: cfg}}, qlayers.Options{}); err != nil {
			return err
		}
		if r.qatAcc, err = accuracy(backend, qatCtx, &cfg, testX, testY); err != nil {
			return err
		}
		// Place the QAT curve after the float steps it continues.
		for i := range qatCurve {
			qatCurve[i].step += s.floatSteps
		}
		qatCurve = append([]point{{step: s.floatSteps, acc: r.ptqAcc}}, qatCurve...)
		curves = append(curves, curve{name: "QAT " + t.String(), points: qatCurve})
		rows = append(rows, r)
		fmt.Printf("%s: PTQ %.2f%%, QAT %.2f%% (%s)\n", t, 100*r.ptqAcc, 100*r.qatAcc, time.Since(start).Round(time.Second))
	}

	fmt.Println()
	fmt.Print(table(rows))
	for _, r := range rows {
		if r.cfg.Type != quanta.Binary && r.cfg.Type != quanta.Ternary {
			continue
		}
		verdict := "yes"
		if loss := r.floatAcc - r.ptqAcc; loss > 0 && r.qatAcc-r.ptqAcc < loss/2 {
			verdict = "NO"
		}
		fmt.Printf("%s: QAT recovers at least half of the PTQ accuracy loss: %s\n", r.cfg.Type, verdict)
	}
	if *flagPlot != "" {
		if err := plotCurves(*flagPlot, curves, s.floatSteps); err != nil {
			return err
		}
		fmt.Printf("training curves written to %s\n", *flagPlot)
	}
	fmt.Printf("total time: %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// spirals returns perClass points of each of numClasses interleaved spiral arms (1.5 turns, with
// Gaussian noise), as [n][2] float32 inputs and [n][1] int32 labels.
func spirals(rng *rand.Rand, perClass int) ([][]float32, [][]int32) {
	var xs [][]float32
	var ys [][]int32
	for c := range numClasses {
		for range perClass {
			t := rng.Float64()
			r := 0.1 + t
			angle := t*3*math.Pi + float64(c)*2*math.Pi/numClasses
			x := r*math.Cos(angle) + 0.03*rng.NormFloat64()
			y := r*math.Sin(angle) + 0.03*rng.NormFloat64()
			xs = append(xs, []float32{float32(x), float32(y)})
			ys = append(ys, []int32{int32(c)})
		}
	}
	return xs, ys
}

// model returns the logits of the MLP. cfg nil is the float model (layers.Dense); otherwise the
// quantized layers use qlayers.Dense with cfg (same variables).
func model(ctx *context.Context, x *graph.Node, cfg *quanta.Config) *graph.Node {
	ctx = ctx.In("model")
	hidden := *flagHidden
	dense := func(ctx *context.Context, x *graph.Node, outDim int) *graph.Node {
		if cfg == nil {
			return layers.Dense(ctx, x, true, outDim)
		}
		return qlayers.Dense(ctx, x, true, outDim, *cfg)
	}
	h := activations.Relu(layers.Dense(ctx.In("input"), x, true, hidden))
	for i := range 2 {
		h = activations.Relu(dense(ctx.Inf("hidden_%d", i), h, hidden))
	}
	return dense(ctx.In("output"), h, numClasses)
}

type point struct {
	step int
	acc  float64
}

type curve struct {
	name   string
	points []point
}

// trainModel trains the model (float if cfg is nil, QAT otherwise) for steps steps with Adam,
// evaluating the test accuracy every evalEvery steps.
func trainModel(backend backends.Backend, ctx *context.Context, cfg *quanta.Config, s settings, steps int, lr float64, evalEvery int,
	trainX [][]float32, trainY [][]int32, testX [][]float32, testY [][]int32, rng *rand.Rand) ([]point, error) {
	ds, err := datasets.InMemoryFromData(backend, "spirals", []any{trainX}, []any{trainY})
	if err != nil {
		return nil, err
	}
	// Batches are sampled with replacement from a seeded generator: reproducible (GoMLX v0.26's
	// Shuffle draws from the global math/rand source, whatever WithRand says).
	ds.Infinite(true).RandomWithReplacement().BatchSize(s.batchSize, true).WithRand(randV1(rng))
	modelFn := func(ctx *context.Context, _ any, inputs []*graph.Node) []*graph.Node {
		return []*graph.Node{model(ctx, inputs[0], cfg)}
	}
	trainer := train.NewTrainer(backend, ctx, modelFn, losses.SparseCategoricalCrossEntropyLogits,
		optimizers.Adam().LearningRate(lr).Done(), nil, nil)
	loop := train.NewLoop(trainer)
	eval, err := newEvaluator(backend, ctx, cfg, testX, testY)
	if err != nil {
		return nil, err
	}
	var curve []point
	var evalErr error
	loop.OnStep("test accuracy", train.Priority(0), func(loop *train.Loop, _ []*tensors.Tensor) error {
		step := loop.LoopStep - loop.StartStep + 1
		if step%evalEvery != 0 {
			return nil
		}
		acc, err := eval()
		if err != nil {
			evalErr = err
			return err
		}
		curve = append(curve, point{step: step, acc: acc})
		return nil
	})
	if _, err := loop.RunSteps(ds, steps); err != nil {
		if evalErr != nil {
			return nil, evalErr
		}
		return nil, err
	}
	return curve, nil
}

// newEvaluator returns a function that computes the test accuracy of the model in ctx (inference
// mode), reading the variables' current values at each call.
func newEvaluator(backend backends.Backend, ctx *context.Context, cfg *quanta.Config, testX [][]float32, testY [][]int32) (func() (float64, error), error) {
	exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, x *graph.Node) *graph.Node {
		return graph.ArgMax(model(ctx, x, cfg), -1)
	})
	if err != nil {
		return nil, err
	}
	x := tensors.FromValue(testX)
	return func() (float64, error) {
		out, err := exec.Exec1(x)
		if err != nil {
			return 0, err
		}
		predictions := out.Value().([]int32)
		correct := 0
		for i, p := range predictions {
			if p == testY[i][0] {
				correct++
			}
		}
		return float64(correct) / float64(len(testY)), nil
	}, nil
}

// accuracy is the test accuracy of the model in ctx, once.
func accuracy(backend backends.Backend, ctx *context.Context, cfg *quanta.Config, testX [][]float32, testY [][]int32) (float64, error) {
	eval, err := newEvaluator(backend, ctx, cfg, testX, testY)
	if err != nil {
		return 0, err
	}
	return eval()
}

type row struct {
	cfg                      quanta.Config
	floatBytes, quantBytes   int64
	floatAcc, ptqAcc, qatAcc float64
}

// table formats the results: recovered is the share of the PTQ accuracy loss that QAT won back.
func table(rows []row) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "| type    | kernel bytes (float → quantized) | float acc | PTQ acc | QAT acc | PTQ loss recovered |\n")
	fmt.Fprintf(&sb, "|---------|----------------------------------|-----------|---------|---------|--------------------|\n")
	for _, r := range rows {
		recovered := "n/a (no PTQ loss)"
		if loss := r.floatAcc - r.ptqAcc; loss > 0 {
			recovered = fmt.Sprintf("%.0f%%", 100*(r.qatAcc-r.ptqAcc)/loss)
		}
		bytes := fmt.Sprintf("%d → %d (%.1fx)", r.floatBytes, r.quantBytes, float64(r.floatBytes)/float64(r.quantBytes))
		fmt.Fprintf(&sb, "| %-7s | %-32s | %8.2f%% | %6.2f%% | %6.2f%% | %-18s |\n",
			r.cfg.Type, bytes, 100*r.floatAcc, 100*r.ptqAcc, 100*r.qatAcc, recovered)
	}
	return sb.String()
}
