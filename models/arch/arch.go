// Package arch loads a GGUF decoder of any architecture quanta implements, chosen by the file's
// "general.architecture": "llama" (models/llama: SmolLM2, Llama, ...), "gemma3" (models/gemma3)
// or "qwen2" (models/qwen2: Qwen2, Qwen2.5). Each architecture is a package of its own over the
// shared blocks of package models (its Config starts with a models.DecoderConfig, its Model
// embeds models.DecoderHooks) and the GGUF decoders' common reading, plan and load
// (internal/modelbase: ReadDecoder, OuterTensors, BlockTensors, LoadDecoder), so that it holds
// only what sets it apart — qwen2 only its keys and tensors, its model a llama.Model with biases
// on q, k and v; adding one is a row of the table here.
//
//	rules, _ := models.Preset(models.FilePreset) // every tensor in the file's own format
//	q := models.MustNewQuantizer(rules)
//	m, err := arch.LoadGGUF(ctx, f, arch.QuantizerOptions(q, backend))
//	gen, err := models.NewGenerator(backend, ctx, m, models.GeneratorOptions{MaxLen: 512})
//
// # Errors
//
// LoadGGUF returns the architecture loader's errors, and for a file of another architecture an
// error naming it and those accepted (Names).
package arch

import (
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/gemma3"
	"github.com/quanta-ml/quanta/models/llama"
	"github.com/quanta-ml/quanta/models/qwen2"
)

// Options are the options of LoadGGUF: the loader's (models.LoadOptions) and the hooks the
// loaded model's graph calls for its linear layers and its embedding table (nil: float,
// models.Dense and models.DenseTable).
type Options struct {
	models.LoadOptions
	Projection models.Projection
	Table      models.Table
}

// QuantizerOptions returns the Options that load and run a model through q: its Kernel,
// QuantizeTable, Keep (the tensors its Keep rules match stay as the file stores them) and Fuse
// hooks, its Projection and Table; tensors placed on backend (nil: left local).
func QuantizerOptions(q *models.Quantizer, backend backends.Backend) Options {
	return Options{
		LoadOptions: models.LoadOptions{Kernel: q.Kernel, Table: q.QuantizeTable, Keep: q, Fuse: q.Fuse, Backend: backend},
		Projection:  q.Projection, Table: q.Table,
	}
}

// architectures is the table of LoadGGUF: each architecture's name and loader.
var architectures = []struct {
	name string
	load func(ctx *context.Context, f *gguf.File, opts Options) (models.LanguageModel, error)
}{
	{"llama", func(ctx *context.Context, f *gguf.File, opts Options) (models.LanguageModel, error) {
		m, err := llama.LoadGGUF(ctx, f, llama.LoadOptions{LoadOptions: opts.LoadOptions})
		if err != nil {
			return nil, err
		}
		m.Projection, m.Table = opts.Projection, opts.Table
		return m, nil
	}},
	{gemma3.Architecture, func(ctx *context.Context, f *gguf.File, opts Options) (models.LanguageModel, error) {
		m, err := gemma3.LoadGGUF(ctx, f, opts.LoadOptions)
		if err != nil {
			return nil, err
		}
		m.Projection, m.Table = opts.Projection, opts.Table
		return m, nil
	}},
	{qwen2.Architecture, func(ctx *context.Context, f *gguf.File, opts Options) (models.LanguageModel, error) {
		m, err := qwen2.LoadGGUF(ctx, f, opts.LoadOptions)
		if err != nil {
			return nil, err
		}
		m.Projection, m.Table = opts.Projection, opts.Table
		return m, nil
	}},
}

// Names lists the architectures LoadGGUF accepts.
func Names() []string {
	names := make([]string, len(architectures))
	for i, a := range architectures {
		names[i] = a.name
	}
	return names
}

// Of returns the file's "general.architecture", checked to be one of Names (an error wrapping
// gguf.ErrUnsupported, naming them, otherwise).
func Of(f *gguf.File) (string, error) {
	i, err := lookup(f)
	if err != nil {
		return "", errors.WithMessage(err, "arch.Of")
	}
	return architectures[i].name, nil
}

func lookup(f *gguf.File) (int, error) {
	if f == nil {
		return 0, errors.New("nil file; accepted: an opened GGUF file")
	}
	name, err := f.String("general.architecture")
	if err != nil {
		return 0, err
	}
	for i, a := range architectures {
		if a.name == name {
			return i, nil
		}
	}
	return 0, errors.Wrapf(gguf.ErrUnsupported, "architecture %q; accepted: %s", name, strings.Join(Names(), ", "))
}

// LoadGGUF loads the model of f with the loader of its architecture (llama.LoadGGUF,
// gemma3.LoadGGUF, qwen2.LoadGGUF) into ctx and sets its Projection and Table hooks from opts.
// The model is a *llama.Model (for "llama" and "qwen2") or a *gemma3.Model.
func LoadGGUF(ctx *context.Context, f *gguf.File, opts Options) (models.LanguageModel, error) {
	i, err := lookup(f)
	if err != nil {
		return nil, errors.WithMessage(err, "arch.LoadGGUF")
	}
	return architectures[i].load(ctx, f, opts)
}
