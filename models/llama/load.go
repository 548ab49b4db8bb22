package llama

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/quanta-ml/quanta/internal/modelbase"
	"github.com/quanta-ml/quanta/models"
)

// LoadOptions are the options of LoadGGUF; the zero value loads the float model as the GGUF
// stores it, q/k rows un-permuted to Hugging Face's order.
type LoadOptions struct {
	// Kernel receives each projection kernel, decoded to float32 in (inDim, outDim) layout, and
	// returns the variables to store for it; nil means models.DenseKernel (the float kernel).
	Kernel models.KernelFunc
	// Table receives the token-embedding table [VocabSize, Dim] (float32) and returns the
	// variables to store for it; nil means models.DenseTableVariables (the float table). With
	// Quantizer.QuantizeTable, run the model with Model.Table = Quantizer.Table.
	Table models.TableFunc
	// Fuse, if set, is asked whether each block's q/k/v kernels (as attn_qkv) and gate/up kernels
	// (as ffn_gate_up) may be stored as one kernel concatenated along the output axis; a group
	// fuses when it says yes for every block, and the model's FusedQKV or FusedGateUp is set.
	// With Quantizer.Fuse the products give the values of the separate ones.
	Fuse models.FuseFunc
	// UntieHead stores, for a model with tied embeddings, a separate "lm_head" kernel (the
	// transposed embedding table, passed through Kernel like the others) and sets
	// TiedEmbeddings false, so that the output head goes through the Projection.
	UntieHead bool
	// Backend, if set, receives each tensor as soon as it is converted (models.Place): with the
	// host memory shared (XLA CPU), the host then holds one copy of the model during and after
	// loading; without it the tensors stay local until their first execution.
	Backend backends.Backend
	// RotateAdjacent keeps attn_q/attn_k rows in GGUF's order and sets Model.RotateAdjacent, so
	// that the rotary embedding rotates adjacent pairs as llama.cpp does.
	RotateAdjacent bool
}

// LoadGGUF reads the hyper-parameters and weights of a "llama" GGUF file into ctx and returns the
// model. Tensors are decoded one at a time (F32, F16, BF16, Q4_0, Q4_1, Q8_0): the embedding
// table and norms straight into their tensors, each projection kernel through one reused buffer
// into its (inDim, outDim) tensor, transposed from GGUF's [out][in] rows and, for attn_q and
// attn_k, with the rows of each head taken back from llama.cpp's converter order (pairs
// interleaved for adjacent-pair RoPE) to Hugging Face's (halves), unless RotateAdjacent.
//
// Every tensor's presence, type and shape is checked before anything is decoded, and nothing is
// stored in ctx until all are converted: on error ctx is unchanged. ctx must not already hold the
// model's variables.
func LoadGGUF(ctx *context.Context, f *gguf.File, opts LoadOptions) (*Model, error) {
	if ctx == nil || f == nil {
		return nil, errors.New("llama.LoadGGUF: nil context or file; accepted: a context and an opened file")
	}
	cfg, err := ConfigFromGGUF(f)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, RotateAdjacent: opts.RotateAdjacent}
	plan, err := planTensors(f, cfg)
	if err != nil {
		return nil, err
	}
	embScope := ctx.In(EmbeddingScope).Scope()
	if ctx.InspectVariable(embScope, EmbeddingName) != nil {
		return nil, errors.Errorf("llama.LoadGGUF: the context already holds %s/%s; load into a fresh context", embScope, EmbeddingName)
	}
	vars := modelbase.NewVars(opts.Kernel, opts.Table, opts.Backend)
	var embedding *tensors.Tensor // held here for an untied head until the head is built
	fail := func(err error) (*Model, error) {
		vars.Release()
		if embedding != nil {
			_ = embedding.FinalizeAll()
		}
		return nil, errors.WithMessage(err, "llama.LoadGGUF")
	}
	m.FusedQKV, m.FusedGateUp = fuseGroups(ctx, vars, cfg, opts.Fuse)
	maxKernel := 0
	for _, p := range plan {
		if p.kind == kernelTensor {
			maxKernel = max(maxKernel, p.in*p.out)
		}
	}
	buf := make([]float32, maxKernel)
	for _, p := range plan {
		switch p.kind {
		case plainTensor:
			t, err := decodeTensor(f, p.name, p.shape)
			if err != nil {
				return fail(err)
			}
			switch {
			case p.scope == embScope && opts.UntieHead && cfg.TiedEmbeddings:
				embedding = t // the untied head is built from the local table below
			case p.scope == embScope:
				err = vars.AddTable(p.scope, t, p.name)
			default:
				err = vars.Add(p.scope, p.varName, t)
			}
			if err != nil {
				return fail(err)
			}
		case kernelTensor:
			heads := p.unpermuteHeads
			if opts.RotateAdjacent {
				heads = 0
			}
			raw := buf[:p.in*p.out]
			if err := f.DecodeInto(p.name, raw); err != nil {
				return fail(err)
			}
			kernel := tensors.FromShape(shapes.Make(dtypes.Float32, p.in, p.out))
			tensors.MustMutableFlatData(kernel, func(dst []float32) {
				transposeRows(raw, dst, p.out, p.in, heads)
			})
			if err := vars.AddKernel(p.scope, kernel, p.name); err != nil {
				return fail(err)
			}
		}
	}
	if opts.UntieHead && cfg.TiedEmbeddings {
		if err := vars.AddKernel(ctx.In(HeadName).Scope(), hostdata.Transposed(embedding), "the untied head"); err != nil {
			return fail(err)
		}
		table := embedding
		embedding = nil
		if err := vars.AddTable(embScope, table, "token_embd.weight"); err != nil {
			return fail(err)
		}
		m.TiedEmbeddings = false
	}
	if err := vars.Store(ctx); err != nil {
		return fail(err)
	}
	return m, nil
}

// MustLoadGGUF is LoadGGUF that panics on error.
func MustLoadGGUF(ctx *context.Context, f *gguf.File, opts LoadOptions) *Model {
	m, err := LoadGGUF(ctx, f, opts)
	if err != nil {
		panic(err)
	}
	return m
}

type tensorKind int

const (
	plainTensor tensorKind = iota
	kernelTensor
)

// plannedTensor is one GGUF tensor and where it goes.
type plannedTensor struct {
	name    string
	kind    tensorKind
	scope   string // absolute; for a kernel the Projection scope
	varName string
	shape   []int // plain tensors: row-major shape
	in, out int   // kernels
	// from names the hyper-parameters of the row-major shape, for errors.
	from string
	// unpermuteHeads > 0: the kernel's output rows are q/k heads of that count in GGUF's
	// interleaved order.
	unpermuteHeads int
}

// planTensors lists the tensors the model needs and checks their presence, types and shapes.
func planTensors(f *gguf.File, cfg Config) ([]plannedTensor, error) {
	q, kv := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	const (
		vocab  = "vocabulary size"
		width  = "llama.embedding_length"
		ffn    = "llama.feed_forward_length"
		qWidth = "llama.attention.head_count × head width"
		kWidth = "llama.attention.head_count_kv × head width"
	)
	plan := []plannedTensor{
		{name: "token_embd.weight", scope: "/" + EmbeddingScope, varName: EmbeddingName, shape: []int{cfg.VocabSize, cfg.Dim},
			from: vocab + ", " + width},
		{name: "output_norm.weight", scope: "/" + OutputNorm + "/rms_norm", varName: "scale", shape: []int{cfg.Dim}, from: width},
	}
	if !cfg.TiedEmbeddings {
		plan = append(plan, plannedTensor{name: "output.weight", kind: kernelTensor, scope: "/" + HeadName, in: cfg.Dim,
			out: cfg.VocabSize, from: vocab + ", " + width})
	}
	for i := 0; i < cfg.Layers; i++ {
		layer := "/" + LayerScope(i)
		blk := fmt.Sprintf("blk.%d.", i)
		norm := func(name string) plannedTensor {
			return plannedTensor{name: blk + name + ".weight", scope: layer + "/" + name + "/rms_norm", varName: "scale",
				shape: []int{cfg.Dim}, from: width}
		}
		kernel := func(name string, in, out, heads int, from string) plannedTensor {
			return plannedTensor{name: blk + name + ".weight", kind: kernelTensor, scope: layer + "/" + name, in: in, out: out,
				unpermuteHeads: heads, from: from}
		}
		plan = append(plan, norm(AttnNorm),
			kernel(AttnQ, cfg.Dim, q, cfg.Heads, qWidth+", "+width), kernel(AttnK, cfg.Dim, kv, cfg.KVHeads, kWidth+", "+width),
			kernel(AttnV, cfg.Dim, kv, 0, kWidth+", "+width), kernel(AttnOutput, q, cfg.Dim, 0, width+", "+qWidth), norm(FFNNorm),
			kernel(FFNGate, cfg.Dim, cfg.FFNDim, 0, ffn+", "+width), kernel(FFNUp, cfg.Dim, cfg.FFNDim, 0, ffn+", "+width),
			kernel(FFNDown, cfg.FFNDim, cfg.Dim, 0, width+", "+ffn))
	}
	for i := range plan {
		p := &plan[i]
		t, ok := f.Tensor(p.name)
		if !ok {
			return nil, errors.Wrapf(gguf.ErrNotFound, "llama.LoadGGUF: tensor %q", p.name)
		}
		want := p.shape
		if p.kind == kernelTensor {
			want = []int{p.out, p.in}
		}
		if got := t.Shape(); fmt.Sprint(got) != fmt.Sprint(want) {
			return nil, errors.Wrapf(gguf.ErrCorrupt, "llama.LoadGGUF: tensor %s has row-major shape %v; the configuration needs %v (%s)",
				t, got, want, p.from)
		}
		if !t.Type.CanDecode() {
			return nil, errors.Wrapf(gguf.ErrUnsupported, "llama.LoadGGUF: tensor %s: decodable types are F32, F16, BF16, Q4_0, Q4_1, Q8_0", t)
		}
	}
	return plan, nil
}

// decodeTensor decodes a GGUF tensor straight into a new float32 tensor of the given shape.
func decodeTensor(f *gguf.File, name string, shape []int) (*tensors.Tensor, error) {
	t := tensors.FromShape(shapes.Make(dtypes.Float32, shape...))
	var err error
	tensors.MustMutableFlatData(t, func(dst []float32) { err = f.DecodeInto(name, dst) })
	if err != nil {
		_ = t.FinalizeAll()
		return nil, err
	}
	return t, nil
}

// transposeRows writes src, row-major [rows][cols], into dst as [cols][rows]. With heads > 0 the
// rows are heads blocks of pairs interleaved by llama.cpp's converter (row h·d + 2i + j holds
// Hugging Face's row h·d + j·d/2 + i, d = rows/heads); they are put back in Hugging Face's order.
func transposeRows(src, dst []float32, rows, cols, heads int) {
	var srcRow func(int) int
	if heads > 0 {
		d := rows / heads
		srcRow = func(r int) int {
			h, within := r/d, r%d
			j, i := within/(d/2), within%(d/2)
			return h*d + 2*i + j
		}
	}
	hostdata.Transpose(src, dst, rows, cols, srcRow)
}
