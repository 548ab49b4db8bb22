package modelbase

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
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

// Kind is what a planned tensor becomes.
type Kind int

const (
	// Plain tensors (norm scales) are decoded to float32 into the variable Scope/VarName.
	Plain Kind = iota
	// Kernel tensors are projection kernels, GGUF [Out][In]: decoded to (In, Out) for the
	// KernelFunc, or kept as stored ([Out, In]) for the Keeper.
	Kernel
	// Table tensors are embedding tables [rows, dim]: decoded for the TableFunc or kept as stored.
	Table
	// Aux tensors are read by the architecture's loader itself (llama's rope_freqs): checked with
	// the others (presence, shape, type), never stored in the context.
	Aux
)

// Tensor is one GGUF tensor a model needs and where it goes.
type Tensor struct {
	// Name is the GGUF tensor name, e.g. "blk.0.attn_q.weight".
	Name string
	Kind Kind
	// Scope is absolute: for a kernel the Projection scope, for a table the table scope, for a
	// plain tensor the variable's scope.
	Scope string
	// VarName is the variable of a plain tensor.
	VarName string
	// Shape is the row-major shape of a plain tensor or a table.
	Shape []int
	// In and Out are a kernel's widths.
	In, Out int
	// From names the hyper-parameters the shape derives from, for errors.
	From string
	// UnpermuteHeads > 0: the kernel's output rows are q/k heads of that count in llama.cpp's
	// interleaved order (for adjacent-pair RoPE), put back in Hugging Face's order on load.
	UnpermuteHeads int
}

// Want is the tensor's row-major shape in the file.
func (p Tensor) Want() []int {
	if p.Kind == Kernel {
		return []int{p.Out, p.In}
	}
	return p.Shape
}

// Check checks that every planned tensor is in f with the planned shape and a decodable type, and
// that the plan reads every tensor of f (one it would pass over holds a feature the loader does
// not implement, or the metadata undercounts the blocks); op names the loader in errors.
func Check(f *gguf.File, plan []Tensor, op string) error {
	planned := make(map[string]bool, len(plan))
	for _, p := range plan {
		planned[p.Name] = true
	}
	for _, t := range f.Tensors() {
		if !planned[t.Name] {
			return errors.Wrapf(gguf.ErrUnsupported, "%s: tensor %s is not one the configuration reads (a feature this loader "+
				"does not implement, or a block count below the file's blocks)", op, t)
		}
	}
	for _, p := range plan {
		t, ok := f.Tensor(p.Name)
		if !ok {
			return errors.Wrapf(gguf.ErrNotFound, "%s: tensor %q", op, p.Name)
		}
		if got := t.Shape(); !slices.Equal(got, p.Want()) {
			return errors.Wrapf(gguf.ErrCorrupt, "%s: tensor %s has row-major shape %v; the configuration needs %v (%s)",
				op, t, got, p.Want(), p.From)
		}
		if !t.Type.CanDecode() {
			return errors.Wrapf(gguf.ErrUnsupported, "%s: tensor %s: accepted types: %s", op, t, DecodableTypes())
		}
	}
	return nil
}

// DecodableTypes lists the tensor types a loader reads, for errors.
func DecodableTypes() string {
	names := []string{"F32", "F16", "BF16"}
	for _, t := range gguf.BlockTypes() {
		if t.CanDecode() {
			names = append(names, t.String())
		}
	}
	return strings.Join(names, ", ")
}

// Kept reports whether tensor p is kept as stored: the Keeper keeps its scope and the file
// stores it in a block type.
func (v *Vars) Kept(f *gguf.File, p Tensor) bool {
	if v.keep == nil || p.Kind == Plain || p.Kind == Aux {
		return false
	}
	t, ok := f.Tensor(p.Name)
	return ok && t.Type.IsBlock() && v.keep.Keeps(p.Scope)
}

// Load reads the planned tensors of f one at a time (checked by Check first) and collects their
// variables: plain tensors decoded; kernels and tables kept as stored where the Keeper says so,
// otherwise decoded (a kernel through one reused buffer, transposed to (In, Out) and un-permuted)
// and passed to the KernelFunc or TableFunc.
func (v *Vars) Load(f *gguf.File, plan []Tensor) error {
	maxKernel := 0
	for _, p := range plan {
		if p.Kind == Kernel && !v.Kept(f, p) {
			maxKernel = max(maxKernel, p.In*p.Out)
		}
	}
	buf := make([]float32, maxKernel)
	for _, p := range plan {
		if err := v.load(f, p, buf); err != nil {
			return err
		}
	}
	return nil
}

func (v *Vars) load(f *gguf.File, p Tensor, buf []float32) error {
	if v.Kept(f, p) {
		if fu := v.fusions[p.Scope]; fu != nil && p.Kind == Kernel {
			return v.keepPart(f, fu, p)
		}
		a, err := v.readKept(f, p)
		if err != nil {
			return err
		}
		if p.Kind == Table {
			return v.KeepTable(p.Scope, a, p.Name)
		}
		return v.KeepKernel(p.Scope, a, p.Name)
	}
	switch p.Kind {
	case Aux:
		return nil
	case Plain:
		t, err := DecodeTensor(f, p.Name, p.Shape)
		if err != nil {
			return err
		}
		return v.Add(p.Scope, p.VarName, t)
	case Table:
		t, err := DecodeTensor(f, p.Name, p.Shape)
		if err != nil {
			return err
		}
		return v.AddTable(p.Scope, t, p.Name)
	}
	raw := buf[:p.In*p.Out]
	if err := f.DecodeInto(p.Name, raw); err != nil {
		return err
	}
	kernel := tensors.FromShape(shapes.Make(dtypes.Float32, p.In, p.Out))
	var srcRow func(int) int
	if p.UnpermuteHeads > 0 {
		srcRow = headRows(p.Out, p.UnpermuteHeads)
	}
	tensors.MustMutableFlatData(kernel, func(dst []float32) { hostdata.Transpose(raw, dst, p.Out, p.In, srcRow) })
	return v.AddKernel(p.Scope, kernel, p.Name)
}

// DecodeTensor decodes a GGUF tensor straight into a new float32 tensor of the given shape.
func DecodeTensor(f *gguf.File, name string, shape []int) (*tensors.Tensor, error) {
	t := tensors.FromShape(shapes.Make(dtypes.Float32, shape...))
	var err error
	tensors.MustMutableFlatData(t, func(dst []float32) { err = f.DecodeInto(name, dst) })
	if err != nil {
		_ = t.FinalizeAll()
		return nil, err
	}
	return t, nil
}

// headRows maps each row of a q/k kernel of rows outputs in Hugging Face's order to its row in
// llama.cpp's converter order: the converter interleaves the pairs of each head (row h·d + 2i + j
// holds Hugging Face's row h·d + j·d/2 + i, d = rows/heads).
func headRows(rows, heads int) func(int) int {
	d := rows / heads
	return func(r int) int {
		h, within := r/d, r%d
		j, i := within/(d/2), within%(d/2)
		return h*d + 2*i + j
	}
}

// readKept reads a tensor kept as stored into a new array of its block type (straight into its
// device buffer where the backend shares host memory), its rows un-permuted as it is read when
// p.UnpermuteHeads says so.
func (v *Vars) readKept(f *gguf.File, p Tensor) (*ggml.Array, error) {
	info, _ := f.Tensor(p.Name)
	dims := info.Shape() // the plan's, checked by Check
	shape := ggml.BlocksShape(info.Type, dims...)
	if dims[len(dims)-1]%info.Type.BlockSize() != 0 || int64(shape.Size()) != info.Bytes {
		return nil, errors.Wrapf(gguf.ErrCorrupt, "tensor %s holds %d bytes; its dims need %d of whole blocks", info, info.Bytes, shape.Size())
	}
	blocks, err := v.newBytes(shape)
	if err != nil {
		return nil, err
	}
	if err := readRows(f, p, blocks.bytes); err != nil {
		_ = blocks.t.FinalizeAll()
		return nil, err
	}
	return ggml.New(implicitarray.TensorComponent(blocks.t), info.Type, dtypes.Float32)
}

// readRows reads the stored rows of kernel p into dst, which holds exactly its bytes: in order,
// or, when p.UnpermuteHeads says so, row r from the stored row headRows(r) (whole rows of blocks
// move: exact). A block whose scale is NaN or infinite is an error wrapping gguf.ErrCorrupt
// (gguf.CheckScales), as DecodeInto reports it for a decoded tensor: the products over it would
// give NaN silently.
func readRows(f *gguf.File, p Tensor, dst []byte) error {
	info, _ := f.Tensor(p.Name)
	if info.Bytes != int64(len(dst)) {
		return errors.Wrapf(gguf.ErrCorrupt, "tensor %s holds %d bytes; its dims need %d", info, info.Bytes, len(dst))
	}
	r, err := f.TensorReader(p.Name)
	if err != nil {
		return err
	}
	if p.UnpermuteHeads == 0 {
		_, err := io.ReadFull(r, dst)
		if err := readError(err, "tensor %s: reading %d bytes", info, len(dst)); err != nil {
			return err
		}
		return errors.WithMessagef(gguf.CheckScales(info.Type, dst), "tensor %s", info)
	}
	n := len(dst) / p.Out
	src := headRows(p.Out, p.UnpermuteHeads)
	for row := range p.Out {
		// A reader may return io.EOF along with the whole last row of the file (io.ReaderAt).
		if k, err := r.ReadAt(dst[row*n:(row+1)*n], int64(src(row)*n)); k != n {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return readError(err, "tensor %s: reading row %d", info, src(row))
		}
		if err := gguf.CheckScales(info.Type, dst[row*n:(row+1)*n]); err != nil {
			return errors.WithMessagef(err, "tensor %s: row %d", info, src(row))
		}
	}
	return nil
}

// readError returns nil for no error, an error wrapping gguf.ErrCorrupt for a short read (the
// file cut after it was opened), and err itself (a closed file, an I/O error) otherwise, each
// with the message.
func readError(err error, format string, args ...any) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return errors.Wrapf(gguf.ErrCorrupt, "%s: %v", fmt.Sprintf(format, args...), err)
	}
	return errors.WithMessagef(err, format, args...)
}

// Group is a set of projections of one block that read the same input and may be stored as one
// (fused) projection: Parts in order, their GGUF tensors Names and output widths OutDims.
type Group struct {
	Fused   string
	Parts   []string
	Names   []string
	OutDims []int
}

// FuseGroups decides, for each kind of group (e.g. every block's q/k/v), whether it fuses: when
// fuse says yes for the group of every block and, where the Keeper keeps a part as stored, every
// part of the group is kept and stored in one block type. It registers the groups of the kinds
// that fuse with v (Fuse) and returns which kinds fuse.
func (v *Vars) FuseGroups(f *gguf.File, kinds [][]Group, fuse models.FuseFunc) []bool {
	out := make([]bool, len(kinds))
	if fuse == nil {
		return out
	}
	for k, groups := range kinds {
		all := len(groups) > 0
		for _, g := range groups {
			all = all && v.stackable(f, g) && fuse(g.Fused, g.Parts, g.OutDims)
		}
		if all {
			out[k] = true
			for _, g := range groups {
				v.Fuse(g.Fused, g.Parts, g.OutDims)
			}
		}
	}
	return out
}

// stackable reports whether the parts of g are all decoded, or all kept as stored in one block
// type.
func (v *Vars) stackable(f *gguf.File, g Group) bool {
	kept, types := 0, map[gguf.Type]bool{}
	for i, name := range g.Names {
		if v.Kept(f, Tensor{Name: name, Kind: Kernel, Scope: g.Parts[i]}) {
			kept++
		}
		if t, ok := f.Tensor(name); ok {
			types[t.Type] = true
		}
	}
	return kept == 0 || (kept == len(g.Parts) && len(types) == 1)
}

// LayerTensorNames returns the GGUF names "blk.<i>.<name>.weight" of names.
func LayerTensorNames(i int, names ...string) []string {
	out := make([]string, len(names))
	for j, n := range names {
		out[j] = fmt.Sprintf("blk.%d.%s.weight", i, n)
	}
	return out
}

// FuseQKVGateUp asks fuse whether the q/k/v kernels (GGUF's attn_q, attn_k, attn_v, of output
// widths q, kv, kv) and the gate/up kernels (ffn_gate, ffn_up, ffn wide) of every block, whose
// scopes are ctx.In(layerScope(i)), may be stored fused as attn_qkv and ffn_gate_up
// (FuseGroups), and registers the groups that may with v.
func (v *Vars) FuseQKVGateUp(ctx *context.Context, f *gguf.File, layers int, layerScope func(int) string, q, kv, ffn int,
	fuse models.FuseFunc) (qkv, gateUp bool) {
	kinds := make([][]Group, 2)
	for i := range layers {
		layer := ctx.In(layerScope(i))
		group := func(name string, parts []string, outDims ...int) Group {
			g := Group{Fused: layer.In(name).Scope(), Names: LayerTensorNames(i, parts...), OutDims: outDims}
			for _, p := range parts {
				g.Parts = append(g.Parts, layer.In(p).Scope())
			}
			return g
		}
		kinds[0] = append(kinds[0], group("attn_qkv", []string{"attn_q", "attn_k", "attn_v"}, q, kv, kv))
		kinds[1] = append(kinds[1], group("ffn_gate_up", []string{"ffn_gate", "ffn_up"}, ffn, ffn))
	}
	fused := v.FuseGroups(f, kinds, fuse)
	return fused[0], fused[1]
}
