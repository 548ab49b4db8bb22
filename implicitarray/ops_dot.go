package implicitarray

import (
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
)

// DotGeneralParams are the parameters of DotGeneral, normalized to non-negative axes.
type DotGeneralParams struct {
	LhsContractingAxes, LhsBatchAxes []int
	RhsContractingAxes, RhsBatchAxes []int
}

// DotGeneral is GoMLX's DotGeneral on values that may be implicit: it contracts the contracting
// axes, aligns the batch axes, and crosses the rest. The output axes are the batch axes, then lhs's
// free axes, then rhs's free axes. Negative axes are accepted.
func DotGeneral(lhs Value, lhsContractingAxes, lhsBatchAxes []int, rhs Value, rhsContractingAxes, rhsBatchAxes []int) Value {
	defer annotate(OpDotGeneral, lhs, rhs)
	mustNotBeNil(lhs, rhs)
	ls, rs := lhs.Shape(), rhs.Shape()
	p := &DotGeneralParams{
		LhsContractingAxes: normalizeAxes(lhsContractingAxes, ls.Rank(), "lhsContractingAxes"),
		LhsBatchAxes:       normalizeAxes(lhsBatchAxes, ls.Rank(), "lhsBatchAxes"),
		RhsContractingAxes: normalizeAxes(rhsContractingAxes, rs.Rank(), "rhsContractingAxes"),
		RhsBatchAxes:       normalizeAxes(rhsBatchAxes, rs.Rank(), "rhsBatchAxes"),
	}
	if len(p.LhsContractingAxes) != len(p.RhsContractingAxes) || len(p.LhsBatchAxes) != len(p.RhsBatchAxes) {
		panic(errors.Errorf("contracting axes %v/%v or batch axes %v/%v differ in count; accepted: as many lhs as rhs axes of each kind",
			lhsContractingAxes, rhsContractingAxes, lhsBatchAxes, rhsBatchAxes))
	}
	for _, pair := range [][2][]int{{p.LhsContractingAxes, p.RhsContractingAxes}, {p.LhsBatchAxes, p.RhsBatchAxes}} {
		for i := range pair[0] {
			if ld, rd := ls.Dimensions[pair[0][i]], rs.Dimensions[pair[1][i]]; ld != rd {
				panic(errors.Errorf("lhs axis %d (dim %d) and rhs axis %d (dim %d) are paired but differ; accepted: paired axes of equal dimensions",
					pair[0][i], ld, pair[1][i], rd))
			}
		}
	}
	for _, a := range p.LhsContractingAxes {
		if slices.Contains(p.LhsBatchAxes, a) {
			panic(errors.Errorf("lhs axis %d is both contracting and batch; accepted: an axis in one of the two lists", a))
		}
	}
	for _, a := range p.RhsContractingAxes {
		if slices.Contains(p.RhsBatchAxes, a) {
			panic(errors.Errorf("rhs axis %d is both contracting and batch; accepted: an axis in one of the two lists", a))
		}
	}
	return dispatch(OpDotGeneral, []Value{lhs, rhs}, p, func(n []*graph.Node) *graph.Node {
		return graph.DotGeneral(n[0], p.LhsContractingAxes, p.LhsBatchAxes, n[1], p.RhsContractingAxes, p.RhsBatchAxes)
	})
}

// MatMul is graph.MatMul (numpy's matmul) on values that may be implicit, expressed as one
// DotGeneral: a rank-1 or rank-2 operand contracts its last (lhs) or first-of-last-two (rhs)
// axis; the axes before the last two of operands of rank > 2 are batch axes, broadcast against
// each other by numpy's rules (aligned from the right, each pair equal or one of them 1). An
// operand whose batch axes need broadcasting goes through BroadcastInDim first; "activations @
// weight" with a rank-2 weight needs none.
func MatMul(lhs, rhs Value) Value {
	defer annotate("matmul", lhs, rhs)
	mustNotBeNil(lhs, rhs)
	ls, rs := lhs.Shape(), rhs.Shape()
	lr, rr := ls.Rank(), rs.Rank()
	switch {
	case lr == 0 || rr == 0:
		panic(errors.New("MatMul needs operands of rank >= 1"))
	case rr <= 2:
		return DotGeneral(lhs, []int{-1}, nil, rhs, []int{0}, nil)
	case lr == 1:
		return DotGeneral(lhs, []int{0}, nil, rhs, []int{-2}, nil)
	}
	lb, rb := ls.Dimensions[:lr-2], rs.Dimensions[:rr-2]
	batch := make([]int, max(len(lb), len(rb)))
	for i := range batch {
		l, r := 1, 1
		if j := i - len(batch) + len(lb); j >= 0 {
			l = lb[j]
		}
		if j := i - len(batch) + len(rb); j >= 0 {
			r = rb[j]
		}
		if l != r && l != 1 && r != 1 {
			panic(errors.Errorf("batch dimensions %v of %s and %v of %s do not broadcast; accepted: batch "+
				"dimensions (all but the last two) that are equal or 1, aligned from the right", lb, ls, rb, rs))
		}
		batch[i] = max(l, r)
	}
	lhs, rhs = broadcastBatch(lhs, batch), broadcastBatch(rhs, batch)
	axes := make([]int, len(batch))
	for i := range axes {
		axes[i] = i
	}
	return DotGeneral(lhs, []int{-1}, axes, rhs, []int{-2}, axes)
}

// broadcastBatch broadcasts the axes of x before its last two to the batch dimensions batch,
// aligned from the right; x itself if they are already batch.
func broadcastBatch(x Value, batch []int) Value {
	s := x.Shape()
	dims := append(slices.Clone(batch), s.Dimensions[s.Rank()-2:]...)
	axes := make([]int, s.Rank())
	for i := range axes {
		axes[i] = i + len(dims) - s.Rank()
	}
	return BroadcastInDim(x, dims, axes)
}

// Einsum computes a two-operand Einstein summation such as "bk,kn->bn" or "bk,nk->bn" with one
// DotGeneral and, if needed, a transpose of its result. Every letter must appear in the output or
// in both operands (no single-operand reductions), and no letter may repeat within an operand.
func Einsum(equation string, lhs, rhs Value) Value {
	defer annotate("einsum", lhs, rhs)
	mustNotBeNil(lhs, rhs)
	inputs, output, ok := strings.Cut(strings.ReplaceAll(equation, " ", ""), "->")
	lhsSpec, rhsSpec, ok2 := strings.Cut(inputs, ",")
	if !ok || !ok2 || len(lhsSpec) != lhs.Shape().Rank() || len(rhsSpec) != rhs.Shape().Rank() {
		panic(errors.Errorf("equation %q does not fit operands of ranks %d and %d; accepted: \"lhs,rhs->out\" with one letter per axis",
			equation, lhs.Shape().Rank(), rhs.Shape().Rank()))
	}
	for _, spec := range []string{lhsSpec, rhsSpec, output} {
		for i, r := range spec {
			if strings.ContainsRune(spec[i+1:], r) {
				panic(errors.Errorf("equation %q repeats %q within %q", equation, r, spec))
			}
		}
	}
	var lc, rc, lb, rb []int
	var batchLetters, lhsFree, rhsFree []rune
	for i, r := range lhsSpec {
		j := strings.IndexRune(rhsSpec, r)
		inOut := strings.ContainsRune(output, r)
		switch {
		case j >= 0 && inOut:
			lb, rb = append(lb, i), append(rb, j)
			batchLetters = append(batchLetters, r)
		case j >= 0:
			lc, rc = append(lc, i), append(rc, j)
		case inOut:
			lhsFree = append(lhsFree, r)
		default:
			panic(errors.Errorf("equation %q: %q appears only in lhs and not in the output (single-operand sums are not supported)", equation, r))
		}
	}
	for _, r := range rhsSpec {
		if strings.ContainsRune(lhsSpec, r) {
			continue
		}
		if !strings.ContainsRune(output, r) {
			panic(errors.Errorf("equation %q: %q appears only in rhs and not in the output (single-operand sums are not supported)", equation, r))
		}
		rhsFree = append(rhsFree, r)
	}
	dotOrder := string(batchLetters) + string(lhsFree) + string(rhsFree)
	if len(dotOrder) != len(output) {
		panic(errors.Errorf("equation %q: output %q has letters that are in no operand", equation, output))
	}
	result := DotGeneral(lhs, lc, lb, rhs, rc, rb)
	if dotOrder == output {
		return result
	}
	perm := make([]int, len(output))
	for i, r := range output {
		perm[i] = strings.IndexRune(dotOrder, r)
	}
	return TransposeAllAxes(result, perm...)
}

// ConvParams are the parameters of ConvGeneral, as GoMLX's ConvGeneral takes them.
type ConvParams struct {
	Axes                               graph.ConvolveAxesConfig
	Strides                            []int
	Paddings                           [][2]int
	InputDilations, KernelDilations    []int
	ChannelGroupCount, BatchGroupCount int
}

// ConvGeneral is GoMLX's ConvGeneral (XLA's conv_general_dilated) on values that may be implicit.
func ConvGeneral(input, kernel Value, axes graph.ConvolveAxesConfig, strides []int, paddings [][2]int,
	inputDilations, kernelDilations []int, channelGroupCount, batchGroupCount int) Value {
	defer annotate(OpConvGeneral, input, kernel)
	p := &ConvParams{axes, strides, paddings, inputDilations, kernelDilations, channelGroupCount, batchGroupCount}
	return dispatch(OpConvGeneral, []Value{input, kernel}, p, func(n []*graph.Node) *graph.Node {
		return graph.ConvGeneral(n[0], n[1], p.Axes, p.Strides, p.Paddings, p.InputDilations, p.KernelDilations,
			p.ChannelGroupCount, p.BatchGroupCount)
	})
}
