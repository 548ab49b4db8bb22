package minilm

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/quanta-ml/quanta/internal/modelbase"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/safetensors"
)

// LoadOptions are the options of LoadSafetensors.
type LoadOptions struct {
	// Kernel receives each projection kernel in (inDim, outDim) layout and returns the variables
	// to store for it; nil means models.DenseKernel. Biases are stored as Dense's "biases".
	Kernel models.KernelFunc
	// Backend, if set, receives each tensor as soon as it is converted (models.Place).
	Backend backends.Backend
}

// LoadDir loads a model directory holding config.json and model.safetensors (all-MiniLM-L6-v2's
// layout) into ctx.
func LoadDir(ctx *context.Context, dir string, opts LoadOptions) (*Model, error) {
	cfg, err := ConfigFromJSON(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return nil, errors.WithMessage(err, "minilm.LoadDir")
	}
	defer f.Close()
	return LoadSafetensors(ctx, f, cfg, opts)
}

// LoadSafetensors reads the weights of a Hugging Face BertModel checkpoint (names with or without
// the "bert." prefix) into ctx: the three embedding tables and their LayerNorm, and per layer the
// query/key/value/output, intermediate and output projections (PyTorch's [out, in] weights
// transposed to (inDim, outDim) kernels) with their biases and LayerNorms. The pooler is not used
// (mean pooling). Weights stored as F16, BF16 or F64 are converted to float32 as they are read
// (safetensors.File.ReadFloat32); other dtypes are an error wrapping safetensors.ErrUnsupported.
//
// The configuration is checked first (Validate; its layers against the tensors the checkpoint
// has, 16 a layer; a checkpoint with layers beyond num_hidden_layers is an error wrapping
// safetensors.ErrCorrupt), then every tensor's presence, dtype and shape, and nothing is stored
// unless all load: on error ctx is unchanged.
func LoadSafetensors(ctx *context.Context, f *safetensors.File, cfg Config, opts LoadOptions) (*Model, error) {
	if ctx == nil || f == nil {
		return nil, errors.Errorf("minilm.LoadSafetensors: nil context or file; accepted: a context and an opened file")
	}
	if err := cfg.Validate(); err != nil {
		return nil, errors.WithMessage(err, "minilm.LoadSafetensors")
	}
	prefix := ""
	if _, ok := f.Info("bert.embeddings.word_embeddings.weight"); ok {
		prefix = "bert."
	}
	// The layers are bounded by the tensors the file has before any plan is made for them.
	if n := len(f.Names()); cfg.Layers > (n-embeddingTensors)/tensorsPerLayer {
		fits := max(0, (n-embeddingTensors)/tensorsPerLayer)
		short := cfg
		short.Layers = fits + 1 // the first missing tensor is among these
		for _, p := range planTensors(short, prefix) {
			if _, ok := f.Info(p.name); !ok {
				return nil, errors.Wrapf(safetensors.ErrNotFound, "minilm.LoadSafetensors: tensor %q (num_hidden_layers = %d; the "+
					"checkpoint has the tensors of at most %d layers)", p.name, cfg.Layers, fits)
			}
		}
		return nil, errors.Wrapf(safetensors.ErrNotFound, "minilm.LoadSafetensors: num_hidden_layers = %d, but the checkpoint "+
			"has %d tensors; accepted: at most %d layers (%d tensors a layer, plus %d)", cfg.Layers, n, fits, tensorsPerLayer,
			embeddingTensors)
	}
	// Nor may the checkpoint hold layers beyond the count: the encoder would silently run only the
	// first num_hidden_layers of them.
	for _, name := range f.Names() {
		if layer, ok := layerOf(strings.TrimPrefix(name, prefix)); ok && layer >= cfg.Layers {
			return nil, errors.Wrapf(safetensors.ErrCorrupt, "minilm.LoadSafetensors: tensor %q is of layer %d, but num_hidden_layers = %d; "+
				"accepted: a checkpoint of exactly num_hidden_layers layers", name, layer, cfg.Layers)
		}
	}
	plan := planTensors(cfg, prefix)
	for _, p := range plan {
		info, ok := f.Info(p.name)
		if !ok {
			return nil, errors.Wrapf(safetensors.ErrNotFound, "minilm.LoadSafetensors: tensor %q", p.name)
		}
		switch info.DType {
		case safetensors.F32, safetensors.F16, safetensors.BF16, safetensors.F64:
		default:
			return nil, errors.Wrapf(safetensors.ErrUnsupported, "minilm.LoadSafetensors: tensor %s; accepted: F32, F16, BF16 or "+
				"F64 (converted to float32)", info)
		}
		if fmt.Sprint(info.Shape) != fmt.Sprint(p.shape) {
			return nil, errors.Wrapf(safetensors.ErrCorrupt, "minilm.LoadSafetensors: tensor %s; the configuration needs %v",
				info, p.shape)
		}
	}
	if ctx.InspectVariable("/"+EmbeddingsScope+"/"+WordScope, TableName) != nil {
		return nil, errors.New("minilm.LoadSafetensors: the context already holds the embeddings; load into a fresh context")
	}
	vars := modelbase.NewVars(models.LoadOptions{Kernel: opts.Kernel, Backend: opts.Backend})
	fail := func(err error) (*Model, error) {
		vars.Release()
		return nil, errors.WithMessage(err, "minilm.LoadSafetensors")
	}
	for _, p := range plan {
		t, err := f.ReadFloat32(p.name)
		if err != nil {
			return fail(err)
		}
		if !p.kernel {
			if err := vars.Add(p.scope, p.varName, t); err != nil {
				return fail(err)
			}
			continue
		}
		kernel := hostdata.Transposed(t)
		_ = t.FinalizeAll()
		if err := vars.AddKernel(p.scope, kernel, p.name); err != nil {
			return fail(err)
		}
	}
	if err := vars.Store(ctx); err != nil {
		return fail(err)
	}
	return &Model{Config: cfg}, nil
}

// layerOf returns the layer of an encoder tensor "encoder.layer.<i>.<...>" (name without the
// "bert." prefix).
func layerOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "encoder.layer.")
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(digits)
	return i, err == nil && i >= 0
}

// The tensors of the checkpoint: three embedding tables and a LayerNorm's two, then 16 a layer
// (four projections and two intermediate ones with their biases, two LayerNorms).
const (
	embeddingTensors = 5
	tensorsPerLayer  = 16
)

// plannedTensor is one checkpoint tensor and where it goes; a kernel's scope is its Projection's.
type plannedTensor struct {
	name           string
	shape          []int
	kernel         bool
	scope, varName string
}

func planTensors(cfg Config, prefix string) []plannedTensor {
	d := cfg.Dim
	emb := "/" + EmbeddingsScope
	plan := []plannedTensor{
		{name: "embeddings.word_embeddings.weight", shape: []int{cfg.VocabSize, d}, scope: emb + "/" + WordScope, varName: TableName},
		{name: "embeddings.position_embeddings.weight", shape: []int{cfg.MaxPositions, d}, scope: emb + "/" + PositionScope, varName: TableName},
		{name: "embeddings.token_type_embeddings.weight", shape: []int{cfg.TypeVocabSize, d}, scope: emb + "/" + TokenTypeScope, varName: TableName},
		{name: "embeddings.LayerNorm.weight", shape: []int{d}, scope: emb + "/layer_normalization", varName: "gain"},
		{name: "embeddings.LayerNorm.bias", shape: []int{d}, scope: emb + "/layer_normalization", varName: "offset"},
	}
	for i := 0; i < cfg.Layers; i++ {
		hf := fmt.Sprintf("encoder.layer.%d.", i)
		layer := "/" + models.LayerScope(i)
		linear := func(hfName, name string, in, out int) {
			plan = append(plan,
				plannedTensor{name: hf + hfName + ".weight", shape: []int{out, in}, kernel: true, scope: layer + "/" + name},
				plannedTensor{name: hf + hfName + ".bias", shape: []int{out}, scope: layer + "/" + name + "/" + models.DenseScope, varName: models.DenseBiases})
		}
		norm := func(hfName, name string) {
			plan = append(plan,
				plannedTensor{name: hf + hfName + ".weight", shape: []int{d}, scope: layer + "/" + name + "/layer_normalization", varName: "gain"},
				plannedTensor{name: hf + hfName + ".bias", shape: []int{d}, scope: layer + "/" + name + "/layer_normalization", varName: "offset"})
		}
		linear("attention.self.query", Query, d, d)
		linear("attention.self.key", Key, d, d)
		linear("attention.self.value", Value, d, d)
		linear("attention.output.dense", models.AttnOutput, d, d)
		norm("attention.output.LayerNorm", models.AttnNorm)
		linear("intermediate.dense", models.FFNUp, d, cfg.FFNDim)
		linear("output.dense", models.FFNDown, cfg.FFNDim, d)
		norm("output.LayerNorm", models.FFNNorm)
	}
	for i := range plan {
		plan[i].name = prefix + plan[i].name
	}
	return plan
}
