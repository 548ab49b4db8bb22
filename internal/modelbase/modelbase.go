// Package modelbase holds what the model packages (llama, gemma3, qwen2, minilm) share beyond
// package models' API: the default projection of a model whose Projection is nil, and the
// variables of a load in progress, each placed on the backend as soon as it is converted and all
// released when a later tensor fails, so that a loader writes the context only once everything is
// converted; kernels of fused projections are concatenated there before they are converted
// (float) or stored (kept as their file stores them: rows of blocks stacked). The GGUF loaders
// describe the tensors they need as a plan (Tensor), checked against the file (Check) before Load
// reads them one at a time, keeping or decoding each.
//
// The GGUF decoders (llama, gemma3, qwen2) share more: the hyper-parameters every such file has,
// read and checked by ReadDecoder into a models.DecoderConfig (DecoderSpec says how an
// architecture differs; CheckNoRoPEScaling refuses RoPE scaling for those without it), the plan
// of the tensors outside the blocks and of each block's projections, biases and norms
// (OuterTensors, BlockTensors), the load itself (LoadDecoder), and the embedding table and output
// head of the graph (EmbeddingTable, Head). A further architecture is then its Config, its
// block's graph and its plan of a block.
package modelbase

import (
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/quanta-ml/quanta/models"
)

// Project computes the linear layer called name through p, or through models.Dense when p is
// nil.
func Project(p models.Projection, ctx *context.Context, name string, x *graph.Node, outDim int, useBias bool) *graph.Node {
	if p == nil {
		return models.Dense(ctx, name, x, outDim, useBias)
	}
	return p(ctx, name, x, outDim, useBias)
}

// Vars collects the variables of a load in progress.
type Vars struct {
	kernel  models.KernelFunc
	table   models.TableFunc
	keep    models.Keeper
	backend backends.Backend
	list    []models.Variable
	fusions map[string]*fusion // by part scope
}

// fusion is a group of projections stored as one: the parts' float kernels wait in held until
// all have arrived; kept parts are read straight into their rows of one blocks tensor, stacked.
type fusion struct {
	scope   string
	parts   []string
	outDims []int
	held    []*tensors.Tensor
	names   []string
	// blocks holds the stacked rows of blocks of kept parts ([Σ outDims, in] of type typ), once
	// the first part is read; read marks the parts read into it.
	blocks hostBytes
	typ    gguf.Type
	read   []bool
}

// NewVars returns an empty collection for the options' hooks: kernels go through opts.Kernel
// (nil: models.DenseKernel), embedding tables through opts.Table (nil:
// models.DenseTableVariables), tensors kept as stored through opts.Keep (nil: none is kept), and
// values are placed on opts.Backend (nil: left local; see models.Place).
func NewVars(opts models.LoadOptions) *Vars {
	v := &Vars{kernel: opts.Kernel, table: opts.Table, keep: opts.Keep, backend: opts.Backend, fusions: map[string]*fusion{}}
	if v.kernel == nil {
		v.kernel = models.DenseKernel
	}
	if v.table == nil {
		v.table = models.DenseTableVariables
	}
	return v
}

// Fuse makes the kernels of the projections at the scopes parts (of output widths outDims) one
// kernel at scope, theirs concatenated along the output axis in the order of parts: AddKernel
// holds each float part until the last arrives, then passes the concatenation through the
// KernelFunc; kept parts are read into their rows of one array, passed to the Keeper when the
// last is read.
func (v *Vars) Fuse(scope string, parts []string, outDims []int) {
	f := &fusion{scope: scope, parts: parts, outDims: outDims, held: make([]*tensors.Tensor, len(parts)), names: make([]string, len(parts)),
		read: make([]bool, len(parts))}
	for _, p := range parts {
		v.fusions[p] = f
	}
}

// AddTable passes the embedding table [rows, dim] at scope through the TableFunc and collects and
// places the variables it returns. An error of the TableFunc, after which the table is finalized,
// names it as "table of <what>".
func (v *Vars) AddTable(scope string, table *tensors.Tensor, what string) error {
	tv, err := v.table(scope, table)
	return v.collect(tv, err, func() { _ = table.FinalizeAll() }, "table of "+what)
}

// KeepTable passes the embedding table [rows, dim] at scope, as its file stores it, to the
// Keeper and collects and places the variables it returns. An error of the Keeper, after which
// the array is deleted, names the table as "table of <what>".
func (v *Vars) KeepTable(scope string, table *ggml.Array, what string) error {
	tv, err := v.keep.KeepTable(scope, table)
	return v.collect(tv, err, table.Delete, "table of "+what)
}

// KeepKernel passes the kernel [outDim, inDim] of the projection at scope, as its file stores it,
// to the Keeper and collects and places the variables it returns. An error of the Keeper, after
// which the array is deleted, names the kernel as "kernel of <what>".
func (v *Vars) KeepKernel(scope string, w *ggml.Array, what string) error {
	kv, err := v.keep.KeepKernel(scope, w)
	return v.collect(kv, err, w.Delete, "kernel of "+what)
}

// keepPart reads the kept kernel p, a part of fusion fu, into its rows of the fusion's blocks
// (allocated at the first part read: FuseGroups checked that every part has one block type and
// width), and passes the stacked array to the Keeper once every part is read.
func (v *Vars) keepPart(f *gguf.File, fu *fusion, p Tensor) error {
	info, _ := f.Tensor(p.Name)
	i := slices.Index(fu.parts, p.Scope)
	fu.names[i] = p.Name
	if fu.blocks.t == nil {
		rows := 0
		for _, d := range fu.outDims {
			rows += d
		}
		blocks, err := v.newBytes(ggml.BlocksShape(info.Type, rows, p.In))
		if err != nil {
			return err
		}
		fu.blocks, fu.typ = blocks, info.Type
	}
	if info.Type != fu.typ || p.Out != fu.outDims[i] {
		return errors.Errorf("fusing %s: tensor %s; accepted: type %s, %d rows", strings.Join(fu.parts, ", "), info, fu.typ, fu.outDims[i])
	}
	first := 0
	for _, d := range fu.outDims[:i] {
		first += d
	}
	rowBytes := p.In / info.Type.BlockSize() * info.Type.BlockBytes()
	if err := readRows(f, p, fu.blocks.bytes[first*rowBytes:(first+p.Out)*rowBytes]); err != nil {
		return err
	}
	fu.read[i] = true
	if slices.Contains(fu.read, false) {
		return nil
	}
	blocks := fu.blocks.t
	fu.blocks = hostBytes{}
	w, err := ggml.New(implicitarray.TensorComponent(blocks), fu.typ, dtypes.Float32)
	if err != nil {
		_ = blocks.FinalizeAll()
		return err
	}
	return v.KeepKernel(fu.scope, w, strings.Join(fu.names, ", "))
}

// Add collects the variable and places its value on the backend.
func (v *Vars) Add(scope, name string, value *tensors.Tensor) error {
	vr := models.Variable{Scope: scope, Name: name, Value: value}
	v.list = append(v.list, vr)
	return models.Place(v.backend, []models.Variable{vr})
}

// AddKernel passes the float kernel (inDim, outDim) of the projection at scope through the
// KernelFunc and collects and places the variables it returns. An error of the KernelFunc, after
// which the kernel is finalized, names the kernel as "kernel of <what>".
//
// A kernel that is a part of a fusion (Fuse) is held instead; the part that completes the fusion
// passes the concatenated kernel, named by all the parts' names.
func (v *Vars) AddKernel(scope string, kernel *tensors.Tensor, what string) error {
	if f := v.fusions[scope]; f != nil {
		i := slices.Index(f.parts, scope)
		f.held[i], f.names[i] = kernel, what
		if slices.Contains(f.held, nil) {
			return nil
		}
		fused, err := hostdata.ConcatenateColumns(f.held)
		for j, t := range f.held {
			_ = t.FinalizeAll()
			f.held[j] = nil
		}
		if err != nil {
			return errors.WithMessagef(err, "fusing %s", strings.Join(f.names, ", "))
		}
		scope, kernel, what = f.scope, fused, strings.Join(f.names, ", ")
	}
	kv, err := v.kernel(scope, kernel)
	return v.collect(kv, err, func() { _ = kernel.FinalizeAll() }, "kernel of "+what)
}

// collect collects and places the variables a hook returned; after the hook's error, it calls
// release (which frees the input the hook was given) and returns the error naming the input as
// what.
func (v *Vars) collect(vars []models.Variable, err error, release func(), what string) error {
	if err != nil {
		release()
		return errors.WithMessage(err, what)
	}
	v.list = append(v.list, vars...)
	return models.Place(v.backend, vars)
}

// Store stores the collected variables in ctx (models.Store).
func (v *Vars) Store(ctx *context.Context) error { return models.Store(ctx, v.list) }

// Release finalizes the collected values and the kernels held for a fusion, for a load that
// failed.
func (v *Vars) Release() {
	models.Release(v.list)
	for _, f := range v.fusions {
		for j, t := range f.held {
			if t != nil {
				_ = t.FinalizeAll()
				f.held[j] = nil
			}
		}
		if f.blocks.t != nil {
			_ = f.blocks.t.FinalizeAll()
			f.blocks = hostBytes{}
		}
	}
}

// ProjectSplit computes the projections parts (of output widths outDims) of x through p, each
// adding its bias when useBias: through the fused projection name when fused (one product, its
// output sliced; its bias is then the parts' concatenated), otherwise one by one.
func ProjectSplit(p models.Projection, ctx *context.Context, fused bool, name string, parts []string, x *graph.Node, useBias bool,
	outDims ...int) []*graph.Node {
	out := make([]*graph.Node, len(parts))
	if !fused {
		for i, part := range parts {
			out[i] = Project(p, ctx, part, x, outDims[i], useBias)
		}
		return out
	}
	total := 0
	for _, d := range outDims {
		total += d
	}
	y := Project(p, ctx, name, x, total, useBias)
	at := 0
	for i, d := range outDims {
		out[i] = graph.SliceAxis(y, -1, graph.AxisRange(at, at+d))
		at += d
	}
	return out
}

// CheckTokens panics, naming the op (e.g. "llama.Forward"), unless tokens is an integer
// [batch, seq] node.
func CheckTokens(op string, tokens *graph.Node) {
	if tokens.Rank() != 2 || !tokens.DType().IsInt() {
		panic(errors.Errorf("%s: tokens %s; accepted: integer token ids of shape [batch, sequence]", op, tokens.Shape()))
	}
}

// PickRow returns x[:, last, :] of hidden states x [batch, seq, dim] at the scalar integer index
// last, by a one-hot sum (the pure-Go backend has no DynamicSlice): [batch, dim]. A last outside
// 0..seq-1 gives a row of NaN (a row of zeros would pass for hidden states); a constant one, or
// x or last of another shape or type, panics naming op (e.g. "llama.Step").
func PickRow(op string, x, last *graph.Node) *graph.Node {
	if x.Rank() != 3 || !x.DType().IsFloat() {
		panic(errors.Errorf("%s: x %s; accepted: float hidden states [batch, sequence, dim]", op, x.Shape()))
	}
	if !last.IsScalar() || !last.DType().IsInt() {
		panic(errors.Errorf("%s: last %s; accepted: a scalar integer index into the sequence of %d", op, last.Shape(), x.Shape().Dim(1)))
	}
	seq := x.Shape().Dim(1)
	if c := last.ConstantValue(); c != nil {
		if v := reflect.ValueOf(c.Value()); v.CanInt() && (v.Int() < 0 || v.Int() >= int64(seq)) || v.CanUint() && v.Uint() >= uint64(seq) {
			panic(errors.Errorf("%s: last %v outside the sequence of %d (x %s)", op, v, seq, x.Shape()))
		}
	}
	g := x.Graph()
	// The positions counted in int64: in a narrower type of last (uint8 into 300 positions) they
	// would wrap; a uint64 past int64's range becomes negative, outside as it is.
	last = graph.ConvertDType(last, dtypes.Int64)
	pick := graph.ConvertDType(graph.Equal(graph.Iota(g, shapes.Make(dtypes.Int64, seq), 0), last), x.DType())
	row := graph.ReduceSum(graph.Mul(x, graph.Reshape(pick, 1, seq, 1)), 1)
	inside := graph.LogicalAnd(graph.GreaterOrEqual(last, graph.ScalarZero(g, dtypes.Int64)),
		graph.LessThan(last, graph.Scalar(g, dtypes.Int64, seq)))
	return graph.Add(row, graph.Where(inside, graph.ScalarZero(g, x.DType()), graph.Scalar(g, x.DType(), math.NaN())))
}

// SplitHeads reshapes y [batch, seq, heads·headDim] to [batch, heads, seq, headDim].
func SplitHeads(y *graph.Node, heads, headDim int) *graph.Node {
	batch, seq := y.Shape().Dim(0), y.Shape().Dim(1)
	return graph.TransposeAllDims(graph.Reshape(y, batch, seq, heads, headDim), 0, 2, 1, 3)
}

// MergeHeads reshapes y [batch, heads, seq, headDim] to [batch, seq, heads·headDim].
func MergeHeads(y *graph.Node) *graph.Node {
	s := y.Shape()
	return graph.Reshape(graph.TransposeAllDims(y, 0, 2, 1, 3), s.Dim(0), s.Dim(2), s.Dim(1)*s.Dim(3))
}
