package qlayers

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta"
)

// Rule chooses how the dense kernels whose scope matches Scope are quantized. QuantizeContext
// tries the rules in order and the first match wins (as Qwix's rules); a kernel that matches no
// rule stays float. Every rule must be the first to match some kernel: QuantizeContext refuses a
// rule that matches none (a misspelt scope) or only kernels an earlier rule takes.
type Rule struct {
	// Scope is a regular expression matched against the whole scope of the kernel, e.g.
	// "/model/hidden_[0-9]+/dense" or ".*" (as Qwix's module_path, fully matched).
	Scope string

	// Config is the quantization of the matching kernels.
	Config quanta.Config

	// Skip keeps the matching kernels float: it excludes them ahead of a broader rule.
	Skip bool
}

// Options of QuantizeContext.
type Options struct {
	// KeepFloat keeps the float kernels and tables (and their optimizer state) beside the
	// quantized components, for more QAT later or to compare; Dense's and Embedding's inference
	// then quantize the float kernel or table in the graph, in the stored format, so training after
	// the conversion is never ignored. By default the float kernels and their optimizer state are
	// deleted, and the context is inference-only for those layers.
	KeepFloat bool
	// Tables also converts the embedding tables (rank-2 float variables named "embeddings", as
	// layers.Embedding and Embedding keep them) whose scope a rule matches, for Embedding and
	// TiedHead; their format must keep rows apart (TableFormatError: NF4 without DoubleQuant, or
	// int8). By default tables are left float.
	Tables bool
}

// Report lists what QuantizeContext did, one Entry per dense kernel it found, quantized or not.
type Report struct {
	Entries []ReportEntry
}

// ReportEntry is one dense kernel in a Report.
type ReportEntry struct {
	// Scope of the kernel variable, e.g. "/model/hidden_0/dense".
	Scope string
	// Shape of the float kernel.
	Shape shapes.Shape
	// Quantized is false for kernels no rule quantized (no match, or a Skip rule).
	Quantized bool
	// Config is the quantization applied (meaningful when Quantized and Format is "").
	Config quanta.Config
	// Format, when set, names the format of a kernel stored as its file stores it (e.g. "ggml
	// Q4_K"), which Config does not describe.
	Format string
	// FloatBytes is the memory of the float kernel.
	FloatBytes int64
	// QuantizedBytes is the memory of the stored components (0 when not Quantized).
	QuantizedBytes int64
	// KeptFloat reports whether the float kernel is still in the context.
	KeptFloat bool
}

// BytesAfter is the memory this kernel takes in the context after the conversion.
func (e ReportEntry) BytesAfter() int64 {
	if !e.Quantized {
		return e.FloatBytes
	}
	if e.KeptFloat {
		return e.FloatBytes + e.QuantizedBytes
	}
	return e.QuantizedBytes
}

// BytesBefore is the total memory of the dense kernels before the conversion.
func (r Report) BytesBefore() int64 {
	var n int64
	for _, e := range r.Entries {
		n += e.FloatBytes
	}
	return n
}

// BytesAfter is the total memory of the dense kernels after the conversion (float kernels that
// were kept or left unquantized count in full).
func (r Report) BytesAfter() int64 {
	var n int64
	for _, e := range r.Entries {
		n += e.BytesAfter()
	}
	return n
}

// String formats the report as a table, one kernel per line, then the totals.
func (r Report) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-32s %-14s %-10s %12s %12s\n", "scope", "shape", "format", "bytes before", "bytes after")
	for _, e := range r.Entries {
		format := "float"
		switch {
		case e.Quantized && e.Format != "":
			format = e.Format
		case e.Quantized:
			format = formatString(e.Config)
		}
		dims := fmt.Sprint(e.Shape.Dimensions)
		fmt.Fprintf(&sb, "%-32s %-14s %-10s %12d %12d\n", e.Scope, dims, format, e.FloatBytes, e.BytesAfter())
	}
	before, after := r.BytesBefore(), r.BytesAfter()
	ratio := 0.0
	if after > 0 {
		ratio = float64(before) / float64(after)
	}
	fmt.Fprintf(&sb, "%-32s %-14s %-10s %12d %12d  (%.1fx smaller)\n", "total", "", "", before, after, ratio)
	return sb.String()
}

// QuantizeContext converts the dense kernels of a trained float context into quantized ones, in
// place: for every variable named "weights" of rank 2 and float dtype (the kernels of Dense and
// layers.Dense), the first rule whose Scope fully matches the variable's scope decides: its
// Config quantizes the kernel on the host, the components are stored as non-trainable variables
// "weights.q0", "weights.q1", ... of that scope, and the format is recorded in the scope's
// FormatParam parameter, so GoMLX checkpoints save and load both. The float kernel is deleted
// unless opts.KeepFloat. Dense then runs those layers on the quantized kernels in inference.
//
// A checkpoint attached the GoMLX way loads variables lazily, as a graph first uses them:
// QuantizeContext first asks a loader that lists its variables (GoMLX's checkpoints.Handler) for
// the kernels (and tables) it holds, so a float model loaded from a checkpoint, Immediate or not,
// is converted whole. Converting an already converted kernel (kept with Options.KeepFloat) replaces
// its components; when no rule quantizes it now (no match, or a Skip rule), its components are
// deleted, so the layer is float again as after a first conversion by the same rules.
//
// It returns an error, leaving the context untouched, for a nil context, an invalid rule (bad
// regular expression, invalid Config), a rule that decides no kernel (its pattern matches none,
// the error then listing the scopes there are, or only kernels an earlier rule matches) or a
// kernel its format cannot hold; the error names the rule or the scope.
// Every kernel is quantized before the context changes; only a failure of GoMLX's DeleteVariable
// while writing the results could leave it partly converted.
func QuantizeContext(ctx *context.Context, rules []Rule, opts Options) (Report, error) {
	if ctx == nil {
		return Report{}, errors.New("qlayers.QuantizeContext: nil context")
	}
	compiled := make([]*regexp.Regexp, len(rules))
	for i, rule := range rules {
		re, err := regexp.Compile("^(?:" + rule.Scope + ")$")
		if err != nil {
			return Report{}, errors.Wrapf(err, "qlayers.QuantizeContext: rule %d: scope pattern %q", i, rule.Scope)
		}
		compiled[i] = re
		if !rule.Skip {
			if err := rule.Config.Validate(); err != nil {
				return Report{}, errors.WithMessagef(err, "qlayers.QuantizeContext: rule %d (%q)", i, rule.Scope)
			}
		}
	}

	// The kernels and tables with their optimizer state and components (named after them), so
	// that a pending optimizer state does not escape deleteFloat and get saved again.
	loadPending(ctx, func(name string) bool {
		return strings.HasPrefix(name, WeightsName) || (opts.Tables && strings.HasPrefix(name, TableName))
	})
	var kernels []*context.Variable
	for v := range ctx.IterVariables() {
		if (v.Name() == WeightsName || (opts.Tables && v.Name() == TableName)) && v.Shape().Rank() == 2 && v.DType().IsFloat() {
			kernels = append(kernels, v)
		}
	}
	slices.SortFunc(kernels, func(a, b *context.Variable) int { return strings.Compare(a.Scope(), b.Scope()) })
	ruleOf, err := decideRules(compiled, rules, kernels, opts)
	if err != nil {
		return Report{}, err
	}

	// Quantize everything first, so that an error leaves the context untouched.
	type conversion struct {
		kernel *context.Variable
		entry  ReportEntry
		comps  []any
	}
	var report Report
	var todo []conversion
	for k, v := range kernels {
		entry := ReportEntry{Scope: v.Scope(), Shape: v.Shape(), FloatBytes: int64(v.Shape().Memory()), KeptFloat: true}
		rule := ruleOf[k]
		if rule < 0 || rules[rule].Skip {
			report.Entries = append(report.Entries, entry)
			// Components of an earlier conversion kept with the float kernel (KeepFloat) would
			// still decide the layer's format: the kernel is float now, so they go.
			scoped := ctx.InAbsPath(v.Scope()).Checked(false)
			if (v.Name() == WeightsName && len(storedComponents(scoped)) > 0) || (v.Name() == TableName && len(tableComponents(scoped)) > 0) {
				todo = append(todo, conversion{kernel: v, entry: entry})
			}
			continue
		}
		cfg := rules[rule].Config
		if v.Name() == TableName {
			if err := TableFormatError(cfg); err != nil {
				return Report{}, errors.WithMessagef(err, "qlayers.QuantizeContext: table %s with rule %d (%q)", v.ScopeAndName(), rule, rules[rule].Scope)
			}
		}
		value, err := v.Value()
		if err != nil {
			return Report{}, errors.WithMessagef(err, "qlayers.QuantizeContext: reading %s", v.ScopeAndName())
		}
		q, err := quanta.Quantize(value, cfg)
		if err != nil {
			return Report{}, errors.WithMessagef(err, "qlayers.QuantizeContext: %s %s with rule %d (%q)",
				v.ScopeAndName(), v.Shape(), rule, rules[rule].Scope)
		}
		entry.Quantized, entry.Config, entry.KeptFloat = true, cfg, opts.KeepFloat
		var comps []any
		for _, c := range q.Components() {
			if !c.IsTensor() {
				return Report{}, errors.Errorf("qlayers.QuantizeContext: %s: the %s format has a nested component %s; "+
					"accepted: formats whose components are tensors", v.ScopeAndName(), cfg.Type, c)
			}
			entry.QuantizedBytes += int64(c.Shape().Memory())
			comps = append(comps, c.Tensor())
		}
		report.Entries = append(report.Entries, entry)
		todo = append(todo, conversion{kernel: v, entry: entry, comps: comps})
	}

	for _, c := range todo {
		scoped := ctx.InAbsPath(c.entry.Scope).Checked(false)
		stored, name := storedComponents(scoped), componentName
		if c.kernel.Name() == TableName {
			stored, name = tableComponents(scoped), tableComponentName
		}
		for _, v := range stored {
			if err := ctx.DeleteVariable(c.entry.Scope, v.Name()); err != nil {
				return report, errors.WithMessagef(err, "qlayers.QuantizeContext: replacing %s", v.ScopeAndName())
			}
		}
		if !c.entry.Quantized {
			continue
		}
		for i, t := range c.comps {
			scoped.VariableWithValue(name(i), t).SetTrainable(false)
		}
		scoped.SetParam(FormatParam, formatString(c.entry.Config))
		if !opts.KeepFloat {
			if err := deleteFloat(ctx, c.entry.Scope, c.kernel.Name()); err != nil {
				return report, errors.WithMessagef(err, "qlayers.QuantizeContext: deleting %s", c.kernel.ScopeAndName())
			}
		}
	}
	return report, nil
}

// loadPending brings into ctx the variables that its checkpoint loader holds but the context has
// not asked for yet, of the names wanted accepts: GoMLX's checkpoints load variables lazily, as a
// graph first uses them, so a model loaded without Immediate has none of them in IterVariables,
// which the host-side functions here search for layers. Asking for a variable by scope and name
// loads it (the loader hands its value over); a loader that cannot list its variables is left as
// it is.
func loadPending(ctx *context.Context, wanted func(name string) bool) {
	lister, ok := ctx.Loader().(interface {
		LoadedVariables() map[string]*tensors.Tensor
	})
	if !ok {
		return
	}
	var pending [][2]string
	for key := range lister.LoadedVariables() {
		if scope, name := context.VariableScopeAndNameFromParameterName(key); wanted(name) {
			pending = append(pending, [2]string{scope, name})
		}
	}
	for _, p := range pending { // not while ranging over the loader's map, which loading edits
		ctx.GetVariableByScopeAndName(p[0], p[1])
	}
}

// decideRules returns the index of the first rule whose pattern matches each kernel's scope (-1
// for none), or an error naming a rule that decides no kernel: one whose pattern matches none
// (a typo would otherwise convert nothing, silently), or one every kernel it matches takes an
// earlier rule (it could never apply).
func decideRules(compiled []*regexp.Regexp, rules []Rule, kernels []*context.Variable, opts Options) ([]int, error) {
	ruleOf := make([]int, len(kernels))
	shadowedBy := make([]int, len(rules)) // for a rule that matches only decided kernels, the first
	decides := make([]bool, len(rules))
	for i := range shadowedBy {
		shadowedBy[i] = -1
	}
	for k, v := range kernels {
		ruleOf[k] = -1
		for i, re := range compiled {
			if !re.MatchString(v.Scope()) {
				continue
			}
			if ruleOf[k] < 0 {
				ruleOf[k], decides[i] = i, true
			} else if shadowedBy[i] < 0 {
				shadowedBy[i] = k
			}
		}
	}
	for i, rule := range rules {
		if decides[i] {
			continue
		}
		if k := shadowedBy[i]; k >= 0 {
			return nil, errors.Errorf("qlayers.QuantizeContext: rule %d (%q) decides no kernel: the kernels it matches are decided by "+
				"earlier rules (%s by rule %d); accepted: a rule that is the first to match some kernel (put it before the broader rule)",
				i, rule.Scope, kernels[k].ScopeAndName(), ruleOf[k])
		}
		what := "kernel (tables are seen only with Options.Tables)"
		if opts.Tables {
			what = "kernel or table"
		}
		return nil, errors.Errorf("qlayers.QuantizeContext: rule %d (%q) matches no %s; the scopes are: %s",
			i, rule.Scope, what, kernelScopes(kernels))
	}
	return ruleOf, nil
}

// kernelScopes lists the scopes of kernels for a message, the first 20 of them.
func kernelScopes(kernels []*context.Variable) string {
	if len(kernels) == 0 {
		return "none (no rank-2 float variable named " + strconv.Quote(WeightsName) + " is loaded)"
	}
	const most = 20
	var names []string
	for i, v := range kernels {
		if i == most {
			names = append(names, fmt.Sprintf("... (%d in all)", len(kernels)))
			break
		}
		names = append(names, strconv.Quote(v.Scope()))
	}
	return strings.Join(names, ", ")
}

// deleteFloat deletes the float variable name (a kernel or a table) of scope and its optimizer
// state: the variables GoMLX's optimizers keep per trainable variable, named after it
// ("weights_1st_moment", ...) in the variable's scope under one top-level optimizer scope
// ("/AdamOptimizer" + scope).
func deleteFloat(ctx *context.Context, scope, name string) error {
	var state [][2]string
	for v := range ctx.IterVariables() {
		prefix, isUnder := strings.CutSuffix(v.Scope(), scope)
		optimizerScope := isUnder && strings.HasPrefix(prefix, context.ScopeSeparator) &&
			strings.Count(prefix, context.ScopeSeparator) == 1
		if optimizerScope && strings.HasPrefix(v.Name(), name+"_") {
			state = append(state, [2]string{v.Scope(), v.Name()})
		}
	}
	for _, s := range state {
		if err := ctx.DeleteVariable(s[0], s[1]); err != nil {
			return err
		}
	}
	return ctx.DeleteVariable(scope, name)
}
