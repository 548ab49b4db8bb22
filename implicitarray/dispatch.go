package implicitarray

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
)

// Op names an operation that handlers can be registered for, by its XLA primitive name where one
// exists.
type Op string

// The operations with dispatch. Each has a function of the same name in this package.
const (
	OpDotGeneral     Op = "dot_general"
	OpAdd            Op = "add"
	OpSub            Op = "sub"
	OpMul            Op = "mul"
	OpDiv            Op = "div"
	OpMax            Op = "max"
	OpMin            Op = "min"
	OpPow            Op = "pow"
	OpLessThan       Op = "lt"
	OpLessOrEqual    Op = "le"
	OpGreaterThan    Op = "gt"
	OpGreaterOrEqual Op = "ge"
	OpEqual          Op = "eq"
	OpNotEqual       Op = "ne"
	OpNeg            Op = "neg"
	OpAbs            Op = "abs"
	OpExp            Op = "exp"
	OpLog            Op = "log"
	OpSqrt           Op = "sqrt"
	OpIntegerPow     Op = "integer_pow"
	OpReshape        Op = "reshape"
	OpTranspose      Op = "transpose"
	OpBroadcastInDim Op = "broadcast_in_dim"
	OpConcatenate    Op = "concatenate"
	OpGather         Op = "gather"
	OpConvGeneral    Op = "conv_general"
	OpConvertDType   Op = "convert_element_type"
	OpReduceSum      Op = "reduce_sum"
	OpReduceMax      Op = "reduce_max"
	OpReduceMin      Op = "reduce_min"
	OpReduceMultiply Op = "reduce_prod"
)

// Sentinel errors, for errors.Is on a recovered panic (graph side) or a returned error (host side).
var (
	// ErrAmbiguous: two handlers of the same precedence match and neither is more specific.
	ErrAmbiguous = errors.New("ambiguous handlers")
	// ErrNoHandler: no handler matched the operands.
	ErrNoHandler = errors.New("no handler")
	// ErrMaterializationForbidden: the generic fallback would materialize a type that forbids it.
	ErrMaterializationForbidden = errors.New("materialization forbidden")
	// ErrDeleted: an array whose buffers were released (Delete) was used.
	ErrDeleted = errors.New("array was deleted")
)

// Fallback is what the generic fallback does with an implicit operand no handler serves.
type Fallback int

const (
	// FallbackSilent materializes the operand, applies the dense op and counts it in Stats.
	FallbackSilent Fallback = iota
	// FallbackWarn does the same and also logs a warning once per op and type (see SetLogger).
	FallbackWarn
	// FallbackForbid panics with an error matching ErrNoHandler and ErrMaterializationForbidden:
	// for types that must never be silently densified.
	FallbackForbid
)

// FallbackPolicy is implemented by Array types that choose what the generic fallback does with
// them; types that do not implement it get FallbackSilent.
type FallbackPolicy interface {
	FallbackPolicy() Fallback
}

// fallbackOf returns v's fallback policy.
func fallbackOf(v Value) Fallback {
	if f, ok := v.(FallbackPolicy); ok {
		return f.FallbackPolicy()
	}
	return FallbackSilent
}

type matchKind int

const (
	matchAny matchKind = iota
	matchImplicit
	matchDense
	matchType
)

// Match says which operands a handler accepts at one position.
type Match struct {
	kind matchKind
	typ  reflect.Type
}

var (
	// Anything matches every operand.
	Anything = Match{kind: matchAny}
	// AnyImplicit matches every implicit Array.
	AnyImplicit = Match{kind: matchImplicit}
	// Dense matches a *graph.Node.
	Dense = Match{kind: matchDense}
)

// TypeOf matches the implicit array type T exactly, e.g. TypeOf[*nf4.Array]().
func TypeOf[T Array]() Match { return Match{kind: matchType, typ: reflect.TypeFor[T]()} }

func (m Match) matches(v Value) bool {
	switch m.kind {
	case matchAny:
		return true
	case matchImplicit:
		_, ok := v.(Array)
		return ok
	case matchDense:
		_, ok := v.(*graph.Node)
		return ok
	default:
		return reflect.TypeOf(v) == m.typ
	}
}

// specificity orders matches: an exact type (dense included) beats AnyImplicit, which beats Anything.
func (m Match) specificity() int {
	switch m.kind {
	case matchAny:
		return 0
	case matchImplicit:
		return 1
	}
	return 2
}

func (m Match) String() string {
	switch m.kind {
	case matchAny:
		return "Anything"
	case matchImplicit:
		return "AnyImplicit"
	case matchDense:
		return "Dense"
	}
	return m.typ.String()
}

// Handler computes an operation for operands that matched its Rule. It returns a dense node or an
// implicit Array of the op's result shape. It may call c.Next() to defer to the next matching
// handler (or the fallback) when it cannot serve these particular parameters, rather than
// answer densely by materializing its operands itself, which would escape Stats.Fallbacks, the
// warning and FallbackForbid (a handler that re-quantizes says so with Requantizing).
type Handler func(c *Call) Value

// Rule registers a Handler for an Op and a pattern of operand types.
type Rule struct {
	Op Op
	// Operands has one Match per operand. With Variadic, the last Match also applies to every
	// further operand (for Concatenate).
	Operands []Match
	Variadic bool
	// Precedence: among matching rules the highest precedence wins; among equal precedence the
	// most specific pattern wins; if neither of two is more specific the call panics (ErrAmbiguous).
	Precedence int
	Handler    Handler
	// Name identifies the rule in messages; defaults to the registering function's location.
	Name string
}

func (r *Rule) matchAt(i int) Match {
	if i < len(r.Operands) {
		return r.Operands[i]
	}
	return r.Operands[len(r.Operands)-1]
}

func (r *Rule) matches(operands []Value) bool {
	if len(operands) != len(r.Operands) && !(r.Variadic && len(operands) >= len(r.Operands)) {
		return false
	}
	for i, v := range operands {
		if !r.matchAt(i).matches(v) {
			return false
		}
	}
	return true
}

// compareSpecificity returns +1 if a is strictly more specific than b for n operands, -1 if less,
// and 0 if they are equal or incomparable (incomparable reported by the second result).
func compareSpecificity(a, b *Rule, n int) (order int, incomparable bool) {
	aWins, bWins := false, false
	for i := range n {
		sa, sb := a.matchAt(i).specificity(), b.matchAt(i).specificity()
		if sa > sb {
			aWins = true
		} else if sb > sa {
			bWins = true
		}
	}
	switch {
	case aWins && !bWins:
		return 1, false
	case bWins && !aWins:
		return -1, false
	}
	return 0, aWins && bWins
}

func totalSpecificity(r *Rule, n int) int {
	total := 0
	for i := range n {
		total += r.matchAt(i).specificity()
	}
	return total
}

func (r *Rule) patternString() string {
	parts := make([]string, len(r.Operands))
	for i, m := range r.Operands {
		parts[i] = m.String()
	}
	s := strings.Join(parts, ", ")
	if r.Variadic {
		s += "..."
	}
	return fmt.Sprintf("%s(%s) precedence %d", r.Op, s, r.Precedence)
}

var registry = struct {
	mu     sync.RWMutex
	rules  map[Op][]*Rule
	frozen atomic.Bool // set by the first dispatch: the registry is read-only afterwards
}{rules: map[Op][]*Rule{}}

// Register adds a handler rule. Format packages call it from init(). It panics on an invalid rule,
// on a duplicate (same op, pattern and precedence), as database/sql.Register does, and once an
// implicit operand has been dispatched: the registry is read-only after start-up, so a graph
// never sees different handlers than the one built before it.
func Register(rule Rule) {
	if rule.Op == "" || rule.Handler == nil || len(rule.Operands) == 0 {
		panic(errors.Errorf("implicitarray.Register: rule %q needs an Op, a Handler and at least one operand Match", rule.Name))
	}
	if rule.Name == "" {
		rule.Name = callerName(2)
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for _, old := range registry.rules[rule.Op] {
		if old.Precedence == rule.Precedence && old.Variadic == rule.Variadic &&
			slices.Equal(old.Operands, rule.Operands) {
			panic(errors.Errorf("implicitarray.Register: duplicate rule %s: %q and %q",
				rule.patternString(), old.Name, rule.Name))
		}
	}
	if registry.frozen.Load() {
		panic(errors.Errorf("implicitarray.Register: rule %s %q registered after the first dispatch; "+
			"register handlers in init()", rule.patternString(), rule.Name))
	}
	registry.rules[rule.Op] = append(registry.rules[rule.Op], &rule)
}

// RegisterOps registers, for each op of handlers, a rule with one operand matched by m and the
// name prefix.op: the shape handlers of a format, for instance. It panics as Register does.
func RegisterOps(prefix string, m Match, handlers map[Op]Handler) {
	for _, op := range slices.Sorted(maps.Keys(handlers)) {
		Register(Rule{Op: op, Operands: []Match{m}, Handler: handlers[op], Name: prefix + "." + string(op)})
	}
}

// Call is one dispatched operation, as a handler sees it.
type Call struct {
	Op Op
	// Operands are the values the op was called with (dense nodes and implicit arrays).
	Operands []Value
	// Params holds the op's static parameters: a *DotGeneralParams, *ReshapeParams, ... or nil for
	// the element-wise ops. See each op function.
	Params any

	dense      func(nodes []*graph.Node) *graph.Node
	candidates []*Rule
	next       int
	fellBack   bool
}

// Dense applies the op's dense GoMLX implementation, with the call's parameters, to nodes.
func (c *Call) Dense(nodes ...*graph.Node) *graph.Node { return c.dense(nodes) }

// materializeAndApply materializes every implicit operand and applies the dense op: the generic
// fallback's work, after its policy check and count. A handler that does not serve some
// parameters defers with Next instead, so that the densification is counted, logged and subject
// to the operands' FallbackPolicy.
func (c *Call) materializeAndApply() *graph.Node {
	nodes := make([]*graph.Node, len(c.Operands))
	for i, v := range c.Operands {
		nodes[i] = Materialize(v)
	}
	return c.dense(nodes)
}

// Requantizing is called by a handler that answers by materializing its implicit operand a and
// quantizing the op's result again (a second rounding). It counts it in Stats.Requantizations and
// logs it once per op and type where a's policy is FallbackWarn; where it is FallbackForbid it
// panics with an error matching ErrMaterializationForbidden, as the fallback would.
func (c *Call) Requantizing(a Array) {
	if fallbackOf(a) == FallbackForbid {
		panic(forbiddenError{errors.Errorf("%s of %s would re-quantize it, and %s forbids materialization",
			c.Op, describeAll(c.Operands), TypeName(a))})
	}
	stats.countRequantization(c.Op, a)
}

// Next defers to the next matching handler in dispatch order, or to the generic fallback.
func (c *Call) Next() Value {
	if c.next >= len(c.candidates) {
		return c.fallback()
	}
	r := c.candidates[c.next]
	c.next++
	deferredBefore := c.next
	out := r.Handler(c)
	if isNil(out) {
		panic(errors.Errorf("implicitarray: handler %q for %s returned nil", r.Name, r.patternString()))
	}
	if c.next == deferredBefore && !c.fellBack {
		// Counted once, by the handler that answered (not by those that deferred with Next).
		stats.countHandled(c.Op, firstImplicitType(c.Operands))
	}
	return out
}

func (c *Call) fallback() Value {
	c.fellBack = true
	for _, v := range c.Operands {
		if _, ok := v.(Array); ok && fallbackOf(v) == FallbackForbid {
			panic(forbiddenError{errors.Errorf("no handler for %s with operands %s, and %s forbids materialization",
				c.Op, describeAll(c.Operands), TypeName(v))})
		}
	}
	stats.countFallback(c.Op, c.Operands)
	return c.materializeAndApply()
}

type forbiddenError struct{ error }

func (e forbiddenError) Is(target error) bool {
	return target == ErrNoHandler || target == ErrMaterializationForbidden
}

func firstImplicitType(operands []Value) string {
	for _, v := range operands {
		if a, ok := v.(Array); ok {
			return TypeName(a)
		}
	}
	return "dense"
}

// dispatch runs op on operands: densely when none is implicit, else through the matching handlers
// in order, else through the fallback.
func dispatch(op Op, operands []Value, params any, dense func([]*graph.Node) *graph.Node) Value {
	nodes, allDense := checkOperands(op, operands)
	if allDense {
		return dense(nodes)
	}
	c := &Call{Op: op, Operands: operands, Params: params, dense: dense, candidates: candidates(op, operands)}
	return c.Next()
}

// checkOperands rejects nil and foreign operands and returns the nodes if all are dense.
func checkOperands(op Op, operands []Value) ([]*graph.Node, bool) {
	nodes := make([]*graph.Node, len(operands))
	allDense := true
	for i, v := range operands {
		switch x := v.(type) {
		case *graph.Node:
			if x != nil {
				nodes[i] = x
				continue
			}
		case Array:
			if !isNil(x) {
				allDense = false
				continue
			}
		}
		panic(errors.Errorf("operand #%d is %s; accepted: *graph.Node or an implicitarray.Array "+
			"(host tensors and host-side arrays enter a graph through implicitarray.Exec)", i, describe(v)))
	}
	return nodes, allDense
}

// mustNotBeNil panics, as dispatch would, when an operand is nil; ops call it before reading shapes.
func mustNotBeNil(operands ...Value) {
	for i, v := range operands {
		if isNil(v) {
			panic(errors.Errorf("operand #%d is nil; accepted: *graph.Node or an implicitarray.Array", i))
		}
	}
}

// candidates returns the matching rules in dispatch order, panicking on an ambiguity at the top.
func candidates(op Op, operands []Value) []*Rule {
	registry.frozen.Store(true)
	registry.mu.RLock()
	var found []*Rule
	for _, r := range registry.rules[op] {
		if r.matches(operands) {
			found = append(found, r)
		}
	}
	registry.mu.RUnlock()
	n := len(operands)
	// A total order: precedence, then total specificity, then registration order (stable).
	// Strict specificity is checked below for the winner.
	slices.SortStableFunc(found, func(a, b *Rule) int {
		if c := cmp.Compare(b.Precedence, a.Precedence); c != 0 {
			return c
		}
		return cmp.Compare(totalSpecificity(b, n), totalSpecificity(a, n))
	})
	// The winner must be strictly more specific than every other rule of its precedence.
	for _, other := range found[min(1, len(found)):] {
		if other.Precedence != found[0].Precedence {
			break
		}
		if order, _ := compareSpecificity(found[0], other, n); order <= 0 {
			panic(errors.Wrapf(ErrAmbiguous, "%s with operands %s: rules %q (%s) and %q (%s) are equally specific; "+
				"give one a higher precedence", op, describeAll(operands),
				found[0].Name, found[0].patternString(), other.Name, other.patternString()))
		}
	}
	return found
}

func describeAll(operands []Value) string {
	parts := make([]string, len(operands))
	for i, v := range operands {
		parts[i] = describe(v)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
