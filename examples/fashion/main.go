// Command fashion trains an MLP on Fashion-MNIST in float32, then compares per quantization format
// the test accuracy after post-training quantization (PTQ) and after quantization-aware training
// (QAT, straight-through estimator) started from the float weights: the setting of the reference
// harness's reference/fashion_mnist.py, whose figures it prints beside its own (read from
// reference/testdata, or from $QUANTA_REFERENCE outside the repository; without them stderr says
// why).
//
//	go run ./examples/fashion                   # 784-512-512-10, 5 epochs, then 2 QAT epochs per format
//	go run ./examples/fashion -quick            # 8000 training images, 1 + 1 epochs, for a smoke run
//
// Model: Dense(784→512)+ReLU, Dense(512→512)+ReLU, Dense(512→10), every layer through
// qlayers.Dense; Adam (learning rate 1e-3), batch 128, each epoch a seeded permutation of the
// training set, cross-entropy. Formats (the reference's names): fp32 (2 more float epochs), int8
// (one scale per input row of the (in, out) kernel), nf4 (blocks of 64 along out), ternary and
// binary without scale, and their _scaled variants (mean|w| per output channel). PTQ converts a
// copy of the float context with qlayers.QuantizeContext (one rule for all three kernels) and
// evaluates on the stored quantized kernels; QAT trains a copy for the QAT epochs with a fresh Adam
// through qlayers.Dense's straight-through forward (quanta.StraightThrough), then converts and
// evaluates the same way. The results go to a markdown table, a JSON file and a PNG of the test
// accuracy during training (-out directory).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
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
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/cmdflags"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/internal/refdata"
	"github.com/quanta-ml/quanta/internal/trainctx"
	"github.com/quanta-ml/quanta/qlayers"
	"github.com/quanta-ml/quanta/runtime"
)

var (
	flagData    = flag.String("data", assets.FashionMNISTDir, "the directory of the four Fashion-MNIST .gz files")
	flagOut     = flag.String("out", filepath.Join(os.TempDir(), "quanta-fashion"), "the directory for fashion.md, fashion.json and fashion.png")
	flagQuick   = flag.Bool("quick", false, "a smoke run: 8000 training images, 1 float epoch, 1 QAT epoch")
	flagFormats = flag.String("formats", strings.Join(formatNames(), ","), "comma-separated formats")
	flagEpochs  = flag.Int("epochs", 5, "float epochs")
	flagQAT     = flag.Int("qat-epochs", 2, "QAT epochs per format")
	flagSeed    = flag.Uint64("seed", 1, "seed of the initialization and of the epochs' permutations")
)

// format is one row of the table: a name of the reference's and the Config (nil: float32).
type format struct {
	name string
	cfg  *quanta.Config
}

var formats = []format{
	{"fp32", nil},
	{"int8", &quanta.Config{Type: quanta.Int8}},
	{"nf4", &quanta.Config{Type: quanta.NF4}},
	{"ternary", &quanta.Config{Type: quanta.Ternary}},
	{"ternary_scaled", &quanta.Config{Type: quanta.Ternary, Scaled: true}},
	{"binary", &quanta.Config{Type: quanta.Binary}},
	{"binary_scaled", &quanta.Config{Type: quanta.Binary, Scaled: true}},
}

func formatNames() []string {
	var names []string
	for _, f := range formats {
		names = append(names, f.name)
	}
	return names
}

// parseFormats reads -formats: names of formats, each once (one listed twice would be trained
// and reported twice).
func parseFormats(list string) ([]format, error) {
	var out []format
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(formats, func(f format) bool { return f.name == name })
		switch {
		case i < 0:
			return nil, errors.Errorf("-formats: unknown format %q; accepted: %s", name, strings.Join(formatNames(), ", "))
		case slices.ContainsFunc(out, func(f format) bool { return f.name == name }):
			return nil, errors.Errorf("-formats: %q listed twice; accepted: each format once", name)
		}
		out = append(out, formats[i])
	}
	return out, nil
}

// settings of one experiment.
type settings struct {
	dataDir               string
	trainLimit, testLimit int // 0: all
	hidden                int
	epochs, qatEpochs     int
	batch                 int
	learningRate          float64
	evalsPerEpoch         int
	formats               []format
	seed                  uint64
}

// checkFlags checks the epoch counts, naming the flag out of range, the list of formats, that
// -quick comes without the epoch counts, and that no argument follows the flags.
func checkFlags() error {
	if err := cmdflags.First(
		cmdflags.NoArguments(),
		cmdflags.AtLeast("-epochs", *flagEpochs, 0, "float epochs"),
		cmdflags.AtLeast("-qat-epochs", *flagQAT, 0, "QAT epochs"),
	); err != nil {
		return err
	}
	if _, err := parseFormats(*flagFormats); err != nil {
		return err
	}
	if *flagQuick { // -quick sets the epochs: an epoch count given with it would be ignored
		var err error
		flag.Visit(func(f *flag.Flag) {
			if err == nil && (f.Name == "epochs" || f.Name == "qat-epochs") {
				err = errors.Errorf("-quick with -%s; accepted: one of them (-quick runs 1 float and 1 QAT epoch)", f.Name)
			}
		})
		return err
	}
	return nil
}

func main() {
	flag.Parse()
	cmdflags.Exit("fashion", cmdflags.ExitUsage, checkFlags())
	s := settings{dataDir: *flagData, hidden: 512, epochs: *flagEpochs, qatEpochs: *flagQAT, batch: 128, learningRate: 1e-3,
		evalsPerEpoch: 4, seed: *flagSeed}
	if *flagQuick {
		s.trainLimit, s.epochs, s.qatEpochs = 8000, 1, 1
	}
	s.formats, _ = parseFormats(*flagFormats) // checkFlags refused a bad list
	cmdflags.Exit("fashion", cmdflags.ExitUsage, outputDir(*flagOut))
	backend, err := runtime.Backend()
	if err == nil {
		var r *results
		if r, err = experiment(backend, s, os.Stdout); err == nil {
			err = r.write(*flagOut)
		}
	}
	cmdflags.Exit("fashion", cmdflags.ExitFailure, err)
}

// point is the test accuracy after a number of epochs (fractional).
type point struct {
	Epoch    float64 `json:"epoch"`
	Accuracy float64 `json:"accuracy"`
}

// row is one format's result.
type row struct {
	Format string `json:"format"`
	// PTQ is the test accuracy of the float model quantized (for fp32: the float model).
	PTQ float64 `json:"ptq"`
	// QAT is the test accuracy after the QAT epochs, quantized.
	QAT float64 `json:"qat"`
	// QATLoss is the mean training loss of each QAT epoch.
	QATLoss []float64 `json:"qat_train_loss"`
	// Recovered is the share of the PTQ loss (float − PTQ) won back by QAT; 0 without a loss.
	Recovered float64 `json:"recovered"`
	// KernelBytes is the bytes of the three kernels in this format.
	KernelBytes int64 `json:"kernel_bytes"`
	// RefPTQ and RefQAT are the reference harness's figures for the same format (0: none).
	RefPTQ float64 `json:"reference_ptq,omitempty"`
	RefQAT float64 `json:"reference_qat,omitempty"`
	Curve  []point `json:"curve"`
}

// results of an experiment.
type results struct {
	Backend     string    `json:"backend"`
	Environment string    `json:"environment"` // runtime.Environment: plugin, quanta's kernels, XLA_FLAGS
	Config      string    `json:"config"`
	QATEpochs   int       `json:"qat_epochs"`
	FloatAcc    float64   `json:"float_accuracy"`
	FloatLoss   []float64 `json:"float_train_loss"`
	FloatCurve  []point   `json:"float_curve"`
	Rows        []row     `json:"rows"`
	WallSeconds float64   `json:"wall_seconds"`
}

// quantizedKernels is the rule's scope: the three kernels.
const quantizedKernels = "/model/layer_[0-9]+/dense"

func experiment(backend backends.Backend, s settings, log io.Writer) (*results, error) {
	start := time.Now()
	trainSet, err := loadSplit(s.dataDir, "train", s.trainLimit)
	if err != nil {
		return nil, err
	}
	testSet, err := loadSplit(s.dataDir, "t10k", s.testLimit)
	if err != nil {
		return nil, err
	}
	env, err := runtime.Environment()
	if err != nil {
		return nil, err
	}
	r := &results{Backend: backend.Description(), Environment: env, QATEpochs: s.qatEpochs, Config: fmt.Sprintf("784-%d-%d-10 ReLU MLP, Adam(%g), batch %d, %d float epochs, %d QAT epochs, %d training and %d test images, seed %d",
		s.hidden, s.hidden, s.learningRate, s.batch, s.epochs, s.qatEpochs, trainSet.len(), testSet.len(), s.seed)}
	fmt.Fprintf(log, "%s\n%s\n", r.Backend, r.Config)
	var ref struct {
		Accuracy map[string]struct {
			PTQ float64 `json:"ptq"`
			QAT float64 `json:"qat"`
		} `json:"accuracy"`
	}
	// Optional: without them the reference column stays empty, and stderr says why (refdata's error
	// names the file or, outside the repository, QUANTA_REFERENCE, which locates them).
	if err := refdata.JSON(&ref, "fmnist", "accuracy.json"); err != nil {
		fmt.Fprintf(os.Stderr, "fashion: the reference figures are left out: %v\n", err)
	}

	floatCtx := trainctx.New(s.seed)
	rng := rand.New(rand.NewPCG(s.seed, 1000))
	if r.FloatCurve, r.FloatLoss, err = trainModel(backend, floatCtx, nil, s, s.epochs, 0, trainSet, testSet, rng, log); err != nil {
		return nil, err
	}
	if r.FloatAcc, err = accuracy(backend, floatCtx, nil, s, testSet); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "float: test accuracy %.4f after %d epochs (%s)\n", r.FloatAcc, s.epochs, time.Since(start).Round(time.Second))

	for _, f := range s.formats {
		rw := row{Format: f.name, RefPTQ: ref.Accuracy[f.name].PTQ, RefQAT: ref.Accuracy[f.name].QAT}
		ptqCtx, err := trainctx.CloneModel(floatCtx, s.seed)
		if err != nil {
			return nil, err
		}
		if rw.KernelBytes, err = quantize(ptqCtx, f); err != nil {
			return nil, err
		}
		if rw.PTQ, err = accuracy(backend, ptqCtx, f.cfg, s, testSet); err != nil {
			return nil, err
		}
		qatCtx, err := trainctx.CloneModel(floatCtx, s.seed)
		if err != nil {
			return nil, err
		}
		qatRng := rand.New(rand.NewPCG(s.seed, 2000))
		curve, losses, err := trainModel(backend, qatCtx, f.cfg, s, s.qatEpochs, float64(s.epochs), trainSet, testSet, qatRng, log)
		if err != nil {
			return nil, err
		}
		rw.QATLoss = losses
		rw.Curve = append([]point{{Epoch: float64(s.epochs), Accuracy: rw.PTQ}}, curve...)
		if _, err := quantize(qatCtx, f); err != nil {
			return nil, err
		}
		if rw.QAT, err = accuracy(backend, qatCtx, f.cfg, s, testSet); err != nil {
			return nil, err
		}
		if loss := r.FloatAcc - rw.PTQ; loss > 0 {
			rw.Recovered = (rw.QAT - rw.PTQ) / loss
		}
		r.Rows = append(r.Rows, rw)
		reference := "no reference" // the table's "—"
		if rw.RefPTQ > 0 {
			reference = fmt.Sprintf("reference %.4f / %.4f", rw.RefPTQ, rw.RefQAT)
		}
		fmt.Fprintf(log, "%-15s PTQ %.4f  QAT %.4f  (%s)  (%s)\n", f.name, rw.PTQ, rw.QAT, reference, time.Since(start).Round(time.Second))
	}
	r.WallSeconds = time.Since(start).Seconds()
	fmt.Fprint(log, "\n"+r.table())
	return r, nil
}

// quantize converts the kernels of ctx to f's format (nothing for fp32) and returns their bytes.
func quantize(ctx *context.Context, f format) (int64, error) {
	if f.cfg == nil {
		var n int64
		for v := range ctx.In("model").IterVariablesInScope() {
			if v.Name() == qlayers.WeightsName {
				n += int64(v.Shape().Memory())
			}
		}
		return n, nil
	}
	report, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: quantizedKernels, Config: *f.cfg}}, qlayers.Options{})
	return report.BytesAfter(), err
}

// model returns the logits of the MLP: layers.Dense for the float model (cfg nil), qlayers.Dense
// with cfg otherwise (same variables).
func model(ctx *context.Context, x *graph.Node, cfg *quanta.Config, hidden int) *graph.Node {
	ctx = ctx.In("model")
	dense := func(i int, x *graph.Node, outDim int) *graph.Node {
		c := ctx.Inf("layer_%d", i)
		if cfg == nil {
			return layers.Dense(c, x, true, outDim)
		}
		return qlayers.Dense(c, x, true, outDim, *cfg)
	}
	h := activations.Relu(dense(0, x, hidden))
	h = activations.Relu(dense(1, h, hidden))
	return dense(2, h, 10)
}

// trainModel trains for epochs epochs (each a permutation drawn from rng, the last batch
// smaller), evaluating the test accuracy evalsPerEpoch times an epoch; the curve's epochs start
// at offset. It returns the curve and each epoch's mean training loss.
func trainModel(backend backends.Backend, ctx *context.Context, cfg *quanta.Config, s settings, epochs int, offset float64,
	trainSet, testSet *dataset, rng *rand.Rand, log io.Writer) ([]point, []float64, error) {
	start := time.Now()
	step := newTrainStep(backend, ctx, cfg, s)
	eval, err := newEvaluator(backend, ctx, cfg, s, testSet)
	if err != nil {
		return nil, nil, err
	}
	n := trainSet.len()
	batches := (n + s.batch - 1) / s.batch
	evalAfter := make([]bool, batches) // the batches after which the test accuracy is measured
	for k := 1; k <= s.evalsPerEpoch; k++ {
		evalAfter[max(0, k*batches/s.evalsPerEpoch-1)] = true
	}
	var curve []point
	var epochLoss []float64
	for epoch := range epochs {
		perm := rng.Perm(n)
		total := 0.0
		for b := range batches {
			idx := perm[b*s.batch : min((b+1)*s.batch, n)]
			x := make([]float32, len(idx)*pixels)
			y := make([]int32, len(idx))
			for i, j := range idx {
				copy(x[i*pixels:(i+1)*pixels], trainSet.images[j*pixels:(j+1)*pixels])
				y[i] = trainSet.labels[j]
			}
			loss, err := step(tensors.FromFlatDataAndDimensions(x, len(idx), pixels), tensors.FromFlatDataAndDimensions(y, len(idx), 1))
			if err != nil {
				return nil, nil, err
			}
			total += loss * float64(len(idx))
			if evalAfter[b] {
				acc, err := eval()
				if err != nil {
					return nil, nil, err
				}
				curve = append(curve, point{Epoch: offset + float64(epoch) + float64(b+1)/float64(batches), Accuracy: acc})
			}
		}
		epochLoss = append(epochLoss, total/float64(n))
		fmt.Fprintf(log, "  epoch %g: training loss %.4f, test accuracy %.4f (%s)\n", offset+float64(epoch+1), total/float64(n),
			curve[len(curve)-1].Accuracy, time.Since(start).Round(time.Second))
	}
	return curve, epochLoss, nil
}

// newTrainStep returns one training step on a batch (train.Trainer: cross-entropy, Adam; the
// graph in training mode, so qlayers.Dense's forward is the straight-through one), returning the
// batch's mean loss.
func newTrainStep(backend backends.Backend, ctx *context.Context, cfg *quanta.Config, s settings) func(x, y *tensors.Tensor) (float64, error) {
	modelFn := func(ctx *context.Context, _ any, inputs []*graph.Node) []*graph.Node {
		return []*graph.Node{model(ctx, inputs[0], cfg, s.hidden)}
	}
	trainer := train.NewTrainer(backend, ctx, modelFn, losses.SparseCategoricalCrossEntropyLogits,
		optimizers.Adam().LearningRate(s.learningRate).Done(), nil, nil)
	return func(x, y *tensors.Tensor) (float64, error) {
		metrics, err := trainer.TrainStep(nil, []*tensors.Tensor{x}, []*tensors.Tensor{y})
		if err != nil {
			return 0, err
		}
		loss := float64(tensors.ToScalar[float32](metrics[0]))
		for _, m := range metrics {
			_ = m.FinalizeAll()
		}
		return loss, nil
	}
}

// newEvaluator returns a function computing the test accuracy of the model in ctx (inference
// mode) with the variables' current values.
func newEvaluator(backend backends.Backend, ctx *context.Context, cfg *quanta.Config, s settings, testSet *dataset) (func() (float64, error), error) {
	exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, x *graph.Node) *graph.Node {
		return graph.ArgMax(model(ctx, x, cfg, s.hidden), -1)
	})
	if err != nil {
		return nil, err
	}
	x := tensors.FromFlatDataAndDimensions(testSet.images, testSet.len(), pixels)
	return func() (float64, error) {
		out, err := exec.Exec1(x)
		if err != nil {
			return 0, err
		}
		predictions, err := tensors.CopyFlatData[int32](out)
		_ = out.FinalizeAll()
		if err != nil {
			return 0, err
		}
		correct := 0
		for i, p := range predictions {
			if p == testSet.labels[i] {
				correct++
			}
		}
		return float64(correct) / float64(len(predictions)), nil
	}, nil
}

// accuracy is the test accuracy of the model in ctx, once.
func accuracy(backend backends.Backend, ctx *context.Context, cfg *quanta.Config, s settings, testSet *dataset) (float64, error) {
	eval, err := newEvaluator(backend, ctx, cfg, s, testSet)
	if err != nil {
		return 0, err
	}
	return eval()
}

// table formats the results as markdown.
func (r *results) table() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Fashion-MNIST, %s; float32 test accuracy %.4f\n\n", r.Config, r.FloatAcc)
	sb.WriteString("| format | kernels (KB) | PTQ | QAT | PTQ loss (points) | recovered by QAT | reference PTQ / QAT |\n")
	sb.WriteString("|---|---|---|---|---|---|---|\n")
	for _, rw := range r.Rows {
		recovered := "—"
		if loss := r.FloatAcc - rw.PTQ; loss >= 0.005 && rw.Format != "fp32" { // from half a point of loss
			recovered = fmt.Sprintf("%.0f %%", 100*rw.Recovered)
		}
		ref := "—"
		if rw.RefPTQ > 0 {
			ref = fmt.Sprintf("%.4f / %.4f", rw.RefPTQ, rw.RefQAT)
		}
		fmt.Fprintf(&sb, "| %s | %.0f | %.4f | %.4f | %.2f | %s | %s |\n", rw.Format, float64(rw.KernelBytes)/1024, rw.PTQ, rw.QAT,
			100*(r.FloatAcc-rw.PTQ), recovered, ref)
	}
	fmt.Fprintf(&sb, "\n(fp32's QAT column: %d more float epochs. Wall time %.0f s.)\n", r.QATEpochs, r.WallSeconds)
	return sb.String()
}

// outputDir creates -out's directory before the experiment, so that a path that cannot hold the
// results is an error naming -out before the training, not after it.
func outputDir(dir string) error {
	return errors.Wrapf(os.MkdirAll(dir, 0o755), "-out %s: the directory of the results", dir)
}

// write stores fashion.json, fashion.md and fashion.png in dir: all are encoded before any is
// written, the JSON first (an error leaves no table without its data), and each is replaced whole
// (fileio.WriteAtomic), so that an interrupted run leaves no truncated file.
func (r *results) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return errors.Wrap(err, "the output directory")
	}
	raw, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	png, err := r.plot()
	if err != nil {
		return err
	}
	var pngData bytes.Buffer
	if _, err := png.WriteTo(&pngData); err != nil {
		return errors.Wrap(err, "encoding fashion.png")
	}
	if err := fileio.WriteOutputs(
		fileio.Output{Name: "writing", Path: filepath.Join(dir, "fashion.json"), Data: append(raw, '\n')},
		fileio.Output{Name: "writing", Path: filepath.Join(dir, "fashion.md"), Data: []byte(r.table())},
		fileio.Output{Name: "writing", Path: filepath.Join(dir, "fashion.png"), Data: pngData.Bytes()},
	); err != nil {
		return err
	}
	fmt.Printf("wrote %s/fashion.{md,json,png}\n", dir)
	return nil
}
