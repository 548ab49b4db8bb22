package models

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/quanta-ml/quanta/qlayers"
)

// Rule chooses how the projections whose scope matches are stored. It is qlayers.Rule with a
// kernel layout: Scope is a regular expression fully matched against the projection's scope
// (e.g. "/layer_[0-9]+/ffn_.*"), the first matching rule of a list wins, Skip keeps the matching
// projections float (in Layout), and a projection that matches no rule stays float in Dense's
// layout (inDim, outDim). A rule other than Skip that no scope was first matched by converted
// nothing: Quantizer.CheckMatched names it after a load.
//
// Keep stores the matching projections and tables in the format their file stores them: a
// tensor the file holds in a quantized block type (GGML's Q4_K, Q8_0, ...) is read as it is
// stored, never decoded or converted (see Keeper), and a float kernel stays float, stored (outDim,
// inDim) as a file stores a linear weight (as a Skip rule in qlayers.OutIn). Config and Layout
// are then unused.
//
// Layout decides the axis the format's blocks and scales run along. qlayers.InOut stores the
// kernel as layers.Dense does, (inDim, outDim), and computes x·W: NF4 blocks and int8 scales run
// along out (one int8 scale per input channel); binary and ternary pack along in and keep one
// scale per output channel. qlayers.OutIn stores Wᵀ (outDim, inDim), PyTorch's and bitsandbytes'
// Linear.weight, and computes x·Wᵀ: NF4 blocks run along in, as bitsandbytes' quantize_4bit of a
// Linear weight, and int8 keeps one scale per output channel (the usual weight-only int8);
// binary and ternary pack along out, so outDim must be a multiple of 4, with a scale per input
// channel. A float kernel (Skip) in qlayers.OutIn is stored transposed (the variable
// DenseWeightsTransposed, which Dense reads) and multiplied by lowering.DenseMatMulTransposed,
// whose one-row products read each stored row as one stream: on CPU the faster layout for
// decoding.
type Rule struct {
	Scope  string
	Config quanta.Config
	Skip   bool
	Keep   bool
	Layout qlayers.KernelLayout
}

// Quantizer stores the projections of a model quantized as its rules say, while a loader reads
// it, and computes them: its Kernel method is the loader's KernelFunc, its Projection method the
// model's Projection. Kernel quantizes each float kernel on the host as soon as the loader has
// decoded it and lets it go, so that the float model is never whole in memory; the quantized
// components are stored as qlayers stores them (non-trainable variables "weights.q0",
// "weights.q1", ... in the projection's "dense" scope, biases unchanged), and the format and
// layout of each scope are kept in the Quantizer. Projection rebuilds the implicit array from the
// variables and multiplies by it with the format's product (package lowering), never building a
// dense weight; projections stored float go through Dense.
//
// Under a Keep rule it is the loader's Keeper instead: the tensors its file stores in block types
// are stored as they are (KeepKernel, KeepTable) and computed by Projection and Table the same way.
//
// A Quantizer serves the contexts loaded through it (one is usual). After a failed load, discard
// it with the context. Its methods are safe for concurrent use.
type Quantizer struct {
	rules   []Rule
	regexps []*regexp.Regexp

	mu      sync.Mutex
	decided []bool                      // by rule: the first rule to match some scope asked of
	kernels map[string]*quantizedKernel // by projection scope
	tables  map[string]*quantizedKernel // by table scope
	fused   map[string]int              // fused projection scope -> index of its parts' rule (-1: none)
	entries map[string]qlayers.ReportEntry
}

type quantizedKernel struct {
	cfg      quanta.Config
	layout   qlayers.KernelLayout
	template implicitarray.Array
	// stored names the format of a kernel or table kept as its file stores it (Keeper), which
	// cfg does not describe; "" for one Kernel or QuantizeTable quantized.
	stored string
	// shapes are the template's component shapes, noted by record: the template's tensors are
	// the stored variables' values, which the context may finalize (Variable.SetValue, e.g. when a
	// checkpoint is attached).
	shapes []shapes.Shape
}

// format names the kernel's format for messages.
func (k *quantizedKernel) format() string {
	if k.stored != "" {
		return k.stored
	}
	return k.cfg.Type.String()
}

// fromVariables rebuilds k's array from its component variables name(0), name(1), ... in ctx's
// scope, as nodes of g. It panics, naming op, the scope and what the array is, when one is
// missing or does not have its component's shape.
func (k *quantizedKernel) fromVariables(ctx *context.Context, g *graph.Graph, name func(i int) string, op, what string) implicitarray.Array {
	nodes := make([]implicitarray.Component, len(k.shapes))
	for i, want := range k.shapes {
		v := ctx.GetVariable(name(i))
		if v == nil || !v.Shape().Equal(want) {
			panic(errors.Errorf("%s in scope %q: component %s is %v; the %s %s stored by this Quantizer needs %s (load the context through it)",
				op, ctx.Scope(), name(i), variableShape(v), k.format(), what, want))
		}
		v.SetTrainable(false)
		nodes[i] = implicitarray.NodeComponent(v.ValueGraph(g))
	}
	return k.template.WithComponents(nodes)
}

// NewQuantizer returns a Quantizer for the rules, checking their patterns and configurations.
func NewQuantizer(rules []Rule) (*Quantizer, error) {
	q := &Quantizer{rules: rules, decided: make([]bool, len(rules)), kernels: map[string]*quantizedKernel{},
		tables: map[string]*quantizedKernel{}, fused: map[string]int{},
		entries: map[string]qlayers.ReportEntry{}}
	for i, rule := range rules {
		re, err := regexp.Compile("^(?:" + rule.Scope + ")$")
		if err != nil {
			return nil, errors.Wrapf(err, "models.NewQuantizer: rule %d: scope pattern %q", i, rule.Scope)
		}
		q.regexps = append(q.regexps, re)
		if rule.Skip && rule.Keep {
			return nil, errors.Errorf("models.NewQuantizer: rule %d (%q) has both Skip and Keep; accepted: one of them", i, rule.Scope)
		}
		if rule.Keep {
			continue
		}
		if !rule.Skip {
			if err := rule.Config.Validate(); err != nil {
				return nil, errors.WithMessagef(err, "models.NewQuantizer: rule %d (%q)", i, rule.Scope)
			}
		}
		if rule.Layout != qlayers.InOut && rule.Layout != qlayers.OutIn {
			return nil, errors.Errorf("models.NewQuantizer: rule %d (%q): layout %d; accepted: qlayers.InOut, qlayers.OutIn", i, rule.Scope, int(rule.Layout))
		}
	}
	return q, nil
}

// MustNewQuantizer is NewQuantizer that panics on error.
func MustNewQuantizer(rules []Rule) *Quantizer {
	q, err := NewQuantizer(rules)
	if err != nil {
		panic(err)
	}
	return q
}

// match returns the rule for a projection or table scope, or nil when none matches; a fused scope
// takes its parts' rule (Fuse). Skip and Keep rules are returned as they are: the callers that
// convert float tensors treat a Keep rule as float.
func (q *Quantizer) match(scope string) *Rule {
	q.mu.Lock()
	i, fused := q.fused[scope]
	q.mu.Unlock()
	if !fused {
		i = q.ruleIndex(scope)
	}
	if i < 0 {
		return nil
	}
	return &q.rules[i]
}

// ruleIndex returns the index of the first rule matching scope, or -1 when none does.
func (q *Quantizer) ruleIndex(scope string) int {
	for i, re := range q.regexps {
		if re.MatchString(scope) {
			q.mu.Lock()
			q.decided[i] = true
			q.mu.Unlock()
			return i
		}
	}
	return -1
}

// storage names how the rule at index i (-1: none) stores a float kernel, for Fuse: parts stored
// alike fuse. Float kernels are alike in one layout, whichever rule (or none) keeps them float.
func (q *Quantizer) storage(i int) string {
	switch {
	case i < 0:
		return "float " + qlayers.InOut.String()
	case q.rules[i].Skip:
		return "float " + q.rules[i].Layout.String()
	}
	return strconv.Itoa(i)
}

// Fuse is a FuseFunc: it reports whether the projections at the scopes parts, of the given output
// widths, can be stored as one kernel concatenated along the output axis, at scope fused, with
// the values they would have apart, and if so remembers that Kernel(fused, ...) quantizes with
// their rule. They can when one rule (or none: float) covers them all and its format quantizes
// every output channel on its own: float; NF4 without DoubleQuant in the qlayers.OutIn layout (blocks
// along in), or in qlayers.InOut when every width is a multiple of the block size; int8 in qlayers.OutIn (a
// scale per output channel); binary in qlayers.InOut (packed along in, a scale per output column). The
// quantized products are then the separate ones bit for bit; a float product of another width
// may round differently in XLA's dense dot (a few ulps). Ternary thresholds at the whole
// tensor's deviation, and int8 in qlayers.InOut scales across the outputs: those never fuse. A Keep rule
// fuses: a loader fuses kept parts only when the file stores them all in one block type (their
// rows of blocks are then stacked as they are, exact), and float parts as float.
func (q *Quantizer) Fuse(fused string, parts []string, outDims []int) bool {
	if len(parts) < 2 || len(parts) != len(outDims) {
		return false
	}
	index := q.ruleIndex(parts[0])
	for _, p := range parts[1:] {
		if q.storage(q.ruleIndex(p)) != q.storage(index) {
			return false
		}
	}
	if index >= 0 && !q.rules[index].Skip && !q.rules[index].Keep && !fusable(q.rules[index], outDims) {
		return false
	}
	q.mu.Lock()
	q.fused[fused] = index
	q.mu.Unlock()
	return true
}

// fusable reports whether rule's format quantizes each output channel of a kernel on its own, so
// that a kernel concatenated along out from parts of widths outDims quantizes to the parts'
// components concatenated (exact).
func fusable(rule Rule, outDims []int) bool {
	c := rule.Config
	switch c.Type {
	case quanta.NF4:
		if c.DoubleQuant {
			return false
		}
		if rule.Layout == qlayers.OutIn {
			return true
		}
		for _, d := range outDims {
			if d%c.EffectiveBlockSize() != 0 {
				return false
			}
		}
		return true
	case quanta.Int8:
		return rule.Layout == qlayers.OutIn
	case quanta.Binary:
		return rule.Layout == qlayers.InOut
	}
	return false
}

// Kernel is a KernelFunc: it quantizes the float32 kernel (inDim, outDim) of the projection at
// scope as the first matching rule says (transposed first for qlayers.OutIn) and returns its
// components as variables, finalizing the float kernel. Without a rule it returns DenseKernel's
// variable; with a Skip rule, the float kernel in the rule's layout (DenseKernel's variable, or
// for qlayers.OutIn the kernel transposed as the variable DenseWeightsTransposed), and with a
// Keep rule (the file stores the kernel float) in qlayers.OutIn.
func (q *Quantizer) Kernel(scope string, kernel *tensors.Tensor) ([]Variable, error) {
	shape := kernel.Shape()
	entry := qlayers.ReportEntry{Scope: scope + "/" + DenseScope, Shape: shape, FloatBytes: int64(shape.Memory())}
	rule := q.match(scope)
	float := rule == nil || rule.Skip || rule.Keep
	transposed := rule != nil && (rule.Keep || rule.Skip && rule.Layout == qlayers.OutIn)
	if float && !transposed {
		q.record(q.kernels, scope, nil, entry)
		return DenseKernel(scope, kernel)
	}
	if shape.Rank() != 2 || shape.DType != dtypes.Float32 {
		return nil, errors.Errorf("models.Quantizer.Kernel(%q): kernel %s; accepted: float32 (inDim, outDim)", scope, shape)
	}
	w := kernel
	if transposed || rule.Layout == qlayers.OutIn {
		w = hostdata.Transposed(kernel)
		_ = kernel.FinalizeAll()
	}
	if float {
		q.record(q.kernels, scope, nil, entry)
		return []Variable{{Scope: entry.Scope, Name: DenseWeightsTransposed, Value: w}}, nil
	}
	a, err := quanta.Quantize(w, rule.Config)
	_ = w.FinalizeAll()
	if err != nil {
		return nil, errors.WithMessagef(err, "models.Quantizer.Kernel(%q, layout %s)", scope, rule.Layout)
	}
	vars, err := componentVariables(entry.Scope, a, componentName, &entry)
	if err != nil {
		return nil, errors.WithMessagef(err, "models.Quantizer.Kernel(%q), format %s", scope, rule.Config.Type)
	}
	entry.Quantized, entry.Config = true, rule.Config
	q.record(q.kernels, scope, &quantizedKernel{cfg: rule.Config, layout: rule.Layout, template: a}, entry)
	return vars, nil
}

func componentName(i int) string { return qlayers.ComponentPrefix + strconv.Itoa(i) }

func tableComponentName(i int) string { return qlayers.TableComponentPrefix + strconv.Itoa(i) }

// record notes the report entry of the kernel or table at scope and, in stored (q.kernels or
// q.tables), its quantized form k (nil: stored float).
func (q *Quantizer) record(stored map[string]*quantizedKernel, scope string, k *quantizedKernel, entry qlayers.ReportEntry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if k == nil {
		delete(stored, scope)
	} else {
		for _, c := range k.template.Components() {
			k.shapes = append(k.shapes, c.Shape())
		}
		stored[scope] = k
	}
	q.entries[scope] = entry
}

// Projection is a Projection: the projection called name in ctx, on the quantized kernel Kernel
// stored for its scope (in its layout), or through Dense when the scope was stored float, in
// either layout. It panics, naming the scope, when the stored components are missing or do not
// fit the recorded format, or when x does not fit the kernel.
func (q *Quantizer) Projection(ctx *context.Context, name string, x *graph.Node, outDim int, useBias bool) *graph.Node {
	pctx := ctx.In(name)
	q.mu.Lock()
	k := q.kernels[pctx.Scope()]
	q.mu.Unlock()
	if k == nil {
		unrecorded("models.Quantizer.Projection", pctx.In(DenseScope), componentName(0), DenseWeights, "kernel")
		return Dense(ctx, name, x, outDim, useBias)
	}
	dctx := pctx.In(DenseScope)
	g := x.Graph()
	dims := k.template.Shape().Dimensions
	in, out := dims[0], dims[1]
	if k.layout == qlayers.OutIn {
		in, out = out, in
	}
	shape := x.Shape()
	if shape.Rank() < 1 || shape.Dim(-1) != in || outDim != out || shape.DType != dtypes.Float32 {
		panic(errors.Errorf("models.Quantizer.Projection in scope %q: input %s with %d outputs; the stored %s kernel (layout %s) needs float32 [..., %d] and %d outputs",
			dctx.Scope(), shape, outDim, k.format(), k.layout, in, out))
	}
	w := k.fromVariables(dctx, g, componentName, "models.Quantizer.Projection", "kernel")
	flat := x
	if shape.Rank() != 2 {
		flat = graph.Reshape(x, -1, in)
	}
	contracting := 0
	if k.layout == qlayers.OutIn {
		contracting = 1
	}
	y := implicitarray.Materialize(implicitarray.DotGeneral(flat, []int{-1}, nil, w, []int{contracting}, nil))
	if shape.Rank() != 2 {
		y = graph.Reshape(y, append(shape.Clone().Dimensions[:shape.Rank()-1], out)...)
	}
	if useBias {
		b := dctx.GetVariable(DenseBiases)
		if b == nil || !b.Shape().Equal(shapes.Make(dtypes.Float32, out)) {
			panic(errors.Errorf("models.Quantizer.Projection in scope %q: biases are %v; accepted: float32 [%d]", dctx.Scope(), variableShape(b), out))
		}
		y = graph.Add(y, graph.ExpandLeftToRank(b.ValueGraph(g), y.Rank()))
	}
	return y
}

// QuantizeTable is a TableFunc: it quantizes the float32 embedding table [rows, dim] at scope as
// the first matching rule says and returns its components as variables (TableName + ".q0", ...),
// finalizing the float table; without a rule, or with a Keep rule (the file stores the table
// float), it returns DenseTableVariables' variable. A table is looked up by rows, so its rule
// must keep each row apart: NF4 (without DoubleQuant: blocks along dim) or int8 (a scale per
// row), in the qlayers.OutIn layout, which for a table [rows, dim] is the layout of a tied head's
// x·tableᵀ.
func (q *Quantizer) QuantizeTable(scope string, table *tensors.Tensor) ([]Variable, error) {
	shape := table.Shape()
	entry := qlayers.ReportEntry{Scope: scope, Shape: shape, FloatBytes: int64(shape.Memory())}
	rule := q.match(scope)
	if rule == nil || rule.Keep || rule.Skip {
		q.record(q.tables, scope, nil, entry)
		return DenseTableVariables(scope, table)
	}
	if shape.Rank() != 2 || shape.DType != dtypes.Float32 {
		return nil, errors.Errorf("models.Quantizer.QuantizeTable(%q): table %s; accepted: float32 [rows, dim]", scope, shape)
	}
	if err := qlayers.TableFormatError(rule.Config); err != nil || rule.Layout != qlayers.OutIn {
		return nil, errors.Errorf("models.Quantizer.QuantizeTable(%q): rule %s; accepted for a table: nf4 (without DoubleQuant) or int8, layout qlayers.OutIn",
			scope, rule.Describe())
	}
	a, err := quanta.Quantize(table, rule.Config)
	_ = table.FinalizeAll()
	if err != nil {
		return nil, errors.WithMessagef(err, "models.Quantizer.QuantizeTable(%q)", scope)
	}
	vars, err := componentVariables(scope, a, tableComponentName, &entry)
	if err != nil {
		return nil, errors.WithMessagef(err, "models.Quantizer.QuantizeTable(%q), format %s", scope, rule.Config.Type)
	}
	entry.Quantized, entry.Config = true, rule.Config
	q.record(q.tables, scope, &quantizedKernel{cfg: rule.Config, layout: qlayers.OutIn, template: a}, entry)
	return vars, nil
}

// Table is a Table: the embedding table called name in ctx as QuantizeTable stored it (an
// implicit array rebuilt from the variables), or DenseTable's float table. It panics, naming the
// scope, when the stored components are missing or do not fit the recorded format or [rows, dim].
func (q *Quantizer) Table(ctx *context.Context, name string, g *graph.Graph, rows, dim int) implicitarray.Value {
	tctx := ctx.In(name)
	q.mu.Lock()
	k := q.tables[tctx.Scope()]
	q.mu.Unlock()
	if k == nil {
		unrecorded("models.Quantizer.Table", tctx, tableComponentName(0), TableName, "table")
		return DenseTable(ctx, name, g, rows, dim)
	}
	if want := shapes.Make(dtypes.Float32, rows, dim); !k.template.Shape().Equal(want) {
		panic(errors.Errorf("models.Quantizer.Table in scope %q: the stored %s table is %s; the model needs %s",
			tctx.Scope(), k.format(), k.template.Shape(), want))
	}
	return k.fromVariables(tctx, g, tableComponentName, "models.Quantizer.Table", "table")
}

// unrecorded panics, naming op and the scope, when ctx holds a stored component (component) and
// no float variable (float) for a kernel or table the Quantizer has no record of: the components
// of another Quantizer (a checkpoint loaded in a fresh process), whose format only that one
// recorded. Without it the float fallback would fail on the float variable that does not exist.
func unrecorded(op string, ctx *context.Context, component, float, what string) {
	if ctx.GetVariable(component) != nil && ctx.GetVariable(float) == nil {
		panic(errors.Errorf("%s in scope %q: the context holds the stored component %q but this Quantizer stored no %s there; "+
			"accepted: a %s stored through this Quantizer (its Kernel, QuantizeTable, Keep or Fuse hooks, as a loader calls them), "+
			"which records its format (a checkpoint does not)", op, ctx.Scope(), component, what, what))
	}
}

func variableShape(v *context.Variable) string {
	if v == nil {
		return "missing"
	}
	return v.Shape().String()
}

// Report lists the projections Kernel and the tables QuantizeTable have seen, by scope, each
// quantized or float, with its bytes before and after (qlayers' report, whose format column does
// not show the layout).
func (q *Quantizer) Report() qlayers.Report {
	q.mu.Lock()
	defer q.mu.Unlock()
	var r qlayers.Report
	for _, e := range q.entries {
		r.Entries = append(r.Entries, e)
	}
	sort.Slice(r.Entries, func(i, j int) bool { return r.Entries[i].Scope < r.Entries[j].Scope })
	return r
}

// CheckMatched returns an error naming the first rule, other than a Skip rule, that was the first
// to match none of the scopes the loaders asked of the Quantizer so far (through Kernel,
// QuantizeTable, Keeps, KeepKernel, KeepTable and Fuse), with the scopes it stored: such a rule
// (a misspelt scope, or a rule put after a broader one) converted nothing. Call it after loading;
// nil when every such rule applied. Skip rules may match nothing: the presets skip "/lm_head",
// which a model whose head is tied to its table does not have.
func (q *Quantizer) CheckMatched() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, rule := range q.rules {
		if rule.Skip || q.decided[i] {
			continue
		}
		scopes := make([]string, 0, len(q.entries))
		for scope := range q.entries {
			scopes = append(scopes, strconv.Quote(scope))
		}
		sort.Strings(scopes)
		if len(scopes) > 20 {
			scopes = append(scopes[:20], fmt.Sprintf("... (%d in all)", len(q.entries)))
		}
		seen := strings.Join(scopes, ", ")
		if seen == "" {
			seen = "none (nothing was loaded through this Quantizer)"
		}
		return errors.Errorf("models.Quantizer.CheckMatched: rule %d (%q, %s) was the first to match no scope the loaders asked of; "+
			"the scopes stored are: %s", i, rule.Scope, rule.Describe(), seen)
	}
	return nil
}

// Describe returns the rule's format in words, e.g. "nf4/64 (out_in)", "float" or "as stored".
func (r Rule) Describe() string {
	if r.Skip {
		return "float"
	}
	if r.Keep {
		return "as stored"
	}
	c := r.Config
	s := c.Type.String()
	switch {
	case c.Type == quanta.NF4:
		s = fmt.Sprintf("nf4/%d", c.EffectiveBlockSize())
	case c.BitNet:
		s += "/bitnet"
	case c.Scaled && (c.Type == quanta.Binary || c.Type == quanta.Ternary):
		s += "/scaled"
	}
	return s + " (" + r.Layout.String() + ")"
}
