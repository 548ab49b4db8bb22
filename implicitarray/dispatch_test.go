package implicitarray_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	. "github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// Handlers of the toy types used by these tests. Registered once for the whole test binary.
func init() {
	// Mul of a plain toy by a dense value on either side stays implicit: the payload is scaled.
	mulKeep := func(c *Call) Value {
		var s *toy[plainTag]
		var d *graph.Node
		for _, v := range c.Operands {
			switch x := v.(type) {
			case *toy[plainTag]:
				s = x
			case *graph.Node:
				d = x
			}
		}
		return &toy[plainTag]{payload: NodeComponent(graph.Mul(Materialize(s.payload.Value()), d)), scale: s.scale}
	}
	Register(Rule{Op: OpMul, Operands: []Match{TypeOf[*toy[plainTag]](), Dense}, Handler: mulKeep, Name: "mul(toy, dense)"})
	Register(Rule{Op: OpMul, Operands: []Match{Dense, TypeOf[*toy[plainTag]]()}, Handler: mulKeep, Name: "mul(dense, toy)"})
	// Neg keeps the toy implicit by negating its scale: used by the nesting test.
	Register(Rule{Op: OpNeg, Operands: []Match{TypeOf[*toy[plainTag]]()}, Name: "neg(toy)",
		Handler: func(c *Call) Value {
			s := c.Operands[0].(*toy[plainTag])
			return &toy[plainTag]{payload: s.payload, scale: NodeComponent(graph.Neg(s.scale.Node()))}
		}})

	// Precedence beats specificity: both rules match sub(precToy, dense); precedence 5 wins.
	marker := func(v float32) Handler {
		return func(c *Call) Value { return graph.Const(c.Operands[1].(*graph.Node).Graph(), v) }
	}
	precToy := TypeOf[*toy[precTag]]()
	Register(Rule{Op: OpSub, Operands: []Match{precToy, Dense}, Handler: marker(1), Name: "specific"})
	Register(Rule{Op: OpSub, Operands: []Match{precToy, Anything}, Precedence: 5, Handler: marker(5), Name: "high"})
	// Within one precedence the more specific rule runs first; Next reaches the less specific one.
	deferToNext := func(c *Call) Value { return c.Next() }
	Register(Rule{Op: OpDiv, Operands: []Match{precToy, Dense}, Handler: deferToNext, Name: "div defers"})
	Register(Rule{Op: OpDiv, Operands: []Match{precToy, Anything}, Handler: marker(7), Name: "div general"})
	// Next with no further rule reaches the generic fallback.
	Register(Rule{Op: OpPow, Operands: []Match{precToy, Dense}, Handler: deferToNext, Name: "pow defers"})

	// A transpose that answers by re-quantizing (here: wrapping the transposed dense value again).
	requantize := func(c *Call) Value {
		a := c.Operands[0].(Array)
		c.Requantizing(a)
		d := c.Dense(Materialize(a))
		return &toy[warnTag]{payload: NodeComponent(d), scale: NodeComponent(graph.Const(d.Graph(), float32(1))), warn: true}
	}
	Register(Rule{Op: OpTranspose, Operands: []Match{TypeOf[*toy[warnTag]]()}, Handler: requantize, Name: "transpose(warn toy)"})
	Register(Rule{Op: OpTranspose, Operands: []Match{TypeOf[*toy[forbidTag]]()}, Handler: requantize, Name: "transpose(forbid toy)"})

	// Ambiguity: both rules match max(ambToy, ambToy) with equal precedence.
	Register(Rule{Op: OpMax, Operands: []Match{TypeOf[*toy[ambiguousTag]](), Anything}, Handler: marker(1), Name: "left"})
	Register(Rule{Op: OpMax, Operands: []Match{Anything, TypeOf[*toy[ambiguousTag]]()}, Handler: marker(2), Name: "right"})
}

const plainType = "*implicitarray_test.toy[github.com/quanta-ml/quanta/implicitarray_test.plainTag]"

// recoverError runs fn and returns the error it panicked with (nil if it did not panic).
func recoverError(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(error)
			if !ok {
				panic(r)
			}
			err = e
		}
	}()
	fn()
	return nil
}

func TestDispatchEitherSide(t *testing.T) {
	backend := newBackend(t)
	ResetStats()
	out := run(t, backend, func(g *graph.Graph) []*graph.Node {
		x := graphToy[plainTag](graph.Const(g, []float32{1, 2, 3}), 10)
		d := graph.Const(g, []float32{2, 2, 2})
		left, right := Mul(x, d), Mul(d, x)
		for _, v := range []Value{left, right} {
			if _, ok := v.(*toy[plainTag]); !ok {
				t.Errorf("handler result is %T, want the toy type (kept implicit)", v)
			}
		}
		return []*graph.Node{Materialize(left), Materialize(right)}
	})
	for _, o := range out {
		if got := testutil.Float64s(t, o); got[0] != 20 || got[1] != 40 || got[2] != 60 {
			t.Errorf("got %v, want [20 40 60]", got)
		}
	}
	st := CurrentStats()
	if st.Handled[Key{OpMul, plainType}] != 2 || len(st.Fallbacks) != 0 {
		t.Errorf("want 2 handled calls and no fallback, got %+v", st)
	}
}

func TestDispatchPrecedenceAndNext(t *testing.T) {
	backend := newBackend(t)
	ResetStats()
	out := run(t, backend, func(g *graph.Graph) []*graph.Node {
		x := graphToy[precTag](graph.Const(g, []float32{1, 2}), 1)
		d := graph.Const(g, []float32{4, 2})
		return []*graph.Node{Materialize(Sub(x, d)), Materialize(Div(x, d)), Materialize(Pow(x, d))}
	})
	if got := testutil.Float64s(t, out[0]); len(got) != 1 || got[0] != 5 {
		t.Errorf("sub: got %v, want the precedence-5 marker [5]", got)
	}
	if got := testutil.Float64s(t, out[1]); len(got) != 1 || got[0] != 7 {
		t.Errorf("div: got %v, want the less specific rule's marker [7] reached by Next", got)
	}
	if got := testutil.Float64s(t, out[2]); got[0] != 1 || got[1] != 4 {
		t.Errorf("pow: got %v, want the dense power [1 4] after Next fell back", got)
	}
	st := CurrentStats()
	precType := "*implicitarray_test.toy[github.com/quanta-ml/quanta/implicitarray_test.precTag]"
	if st.Fallbacks[Key{OpPow, precType}] != 1 || st.Fallbacks[Key{OpDiv, precType}] != 0 {
		t.Errorf("want one fallback for pow and none for div, got %+v", st.Fallbacks)
	}
	// Handled counts the handler that answered: div once (after the first deferred), pow never.
	if st.Handled[Key{OpDiv, precType}] != 1 || st.Handled[Key{OpPow, precType}] != 0 {
		t.Errorf("want div handled once and pow not at all, got %+v", st.Handled)
	}
}

func TestDispatchAmbiguous(t *testing.T) {
	g := graph.NewGraph(newBackend(t), "ambiguous")
	x := graphToy[ambiguousTag](graph.Const(g, []float32{1}), 1)
	err := recoverError(func() { Max(x, x) })
	if !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("want ErrAmbiguous, got %v", err)
	}
	for _, want := range []string{"max", "ambiguousTag", `"left"`, `"right"`, "[1]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// With one implicit operand only the left rule matches: no ambiguity.
	if err := recoverError(func() { Max(x, graph.Const(g, []float32{1})) }); err != nil {
		t.Errorf("unexpected error %v", err)
	}
}

// TestTransposeErrorNamedOnce: an error of Transpose, from its axes or from the dispatch, carries
// one "implicitarray.transpose" prefix naming the op and the operand (Transpose runs
// TransposeAllAxes' work, not its annotation).
func TestTransposeErrorNamedOnce(t *testing.T) {
	g := graph.NewGraph(newBackend(t), "transpose")
	for _, tc := range []struct {
		name string
		fn   func()
	}{
		{"bad axis", func() { Transpose(graphToy[plainTag](graph.Const(g, [][]float32{{1, 2}}), 1), 0, 5) }},
		{"dispatch", func() { Transpose(graphToy[forbidTag](graph.Const(g, [][]float32{{1}}), 1), 0, 1) }},
	} {
		if err := recoverError(tc.fn); err == nil || strings.Count(err.Error(), "implicitarray.transpose") != 1 {
			t.Errorf("%s: error = %v; want one implicitarray.transpose prefix", tc.name, err)
		}
	}
}

func TestRegisterRejects(t *testing.T) {
	h := func(c *Call) Value { return nil }
	// Run after other tests dispatched: a new, valid rule is refused as late.
	g := graph.NewGraph(newBackend(t), "freeze")
	Exp(graphToy[plainTag](graph.Const(g, []float32{1}), 1))
	type lateTag struct{}
	for _, tc := range []struct {
		name string
		rule Rule
		want string
	}{
		{"duplicate", Rule{Op: OpMul, Operands: []Match{TypeOf[*toy[plainTag]](), Dense}, Handler: h}, "duplicate"},
		{"no op", Rule{Operands: []Match{Dense}, Handler: h}, "needs an Op"},
		{"no handler", Rule{Op: OpMul, Operands: []Match{Dense}}, "needs an Op"},
		{"no operands", Rule{Op: OpMul, Handler: h}, "needs an Op"},
		{"after the first dispatch", Rule{Op: OpMul, Operands: []Match{TypeOf[*toy[lateTag]]()}, Handler: h}, "after the first dispatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := recoverError(func() { Register(tc.rule) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Register: got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

// captureWarnings sends the package's warnings to the returned buffer for the rest of the test
// and zeroes the counters.
func captureWarnings(t *testing.T) *bytes.Buffer {
	logs := &bytes.Buffer{}
	SetLogger(slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(func() { SetLogger(slog.Default()) })
	ResetStats()
	return logs
}

func TestFallbackCountsAndWarnsOnce(t *testing.T) {
	logs := captureWarnings(t)
	backend := newBackend(t)
	out := run(t, backend, func(g *graph.Graph) []*graph.Node {
		x := graphToy[warnTag](graph.Const(g, []float32{0, 1}), 2)
		x.warn = true
		return []*graph.Node{Materialize(Exp(x)), Materialize(Exp(x))}
	})
	if got := testutil.Float64s(t, out[0]); got[0] != 1 || got[1] < 7.38 || got[1] > 7.39 {
		t.Errorf("exp: got %v", got)
	}
	key := Key{OpExp, "*implicitarray_test.toy[github.com/quanta-ml/quanta/implicitarray_test.warnTag]"}
	if n := CurrentStats().Fallbacks[key]; n != 2 {
		t.Errorf("fallbacks = %d, want 2", n)
	}
	if n := strings.Count(logs.String(), "no handler matched"); n != 1 {
		t.Errorf("want exactly one warning, got %d:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "op=exp") || !strings.Contains(logs.String(), "warnTag") {
		t.Errorf("warning does not name op and type: %s", logs.String())
	}

	// Silenced: no output at all.
	logs.Reset()
	SetLogger(nil)
	ResetStats()
	run(t, backend, func(g *graph.Graph) []*graph.Node {
		x := graphToy[warnTag](graph.Const(g, []float32{0, 1}), 2)
		x.warn = true
		return []*graph.Node{Materialize(Exp(x))}
	})
	if logs.Len() != 0 {
		t.Errorf("silenced logger wrote %q", logs.String())
	}
}

// TestFallbackCountsCalls: Stats.Fallbacks counts calls, once per implicit type of the operands:
// a call with two operands of one type counts one, as it materializes through one fallback.
func TestFallbackCountsCalls(t *testing.T) {
	ResetStats()
	run(t, newBackend(t), func(g *graph.Graph) []*graph.Node {
		x := graphToy[plainTag](graph.Const(g, []float32{0, 1}), 2)
		y := graphToy[plainTag](graph.Const(g, []float32{3, 4}), 1)
		return []*graph.Node{Materialize(Add(x, y))}
	})
	key := Key{OpAdd, "*implicitarray_test.toy[github.com/quanta-ml/quanta/implicitarray_test.plainTag]"}
	if st := CurrentStats(); st.Fallbacks[key] != 1 || st.Materializations[key.Type] != 2 {
		t.Errorf("fallbacks %v, materializations %v: want one fallback of add, two materializations", st.Fallbacks, st.Materializations)
	}
}

func TestFallbackForbidden(t *testing.T) {
	g := graph.NewGraph(newBackend(t), "forbidden")
	x := graphToy[forbidTag](graph.Const(g, []float32{1}), 1)
	err := recoverError(func() { Exp(x) })
	if !errors.Is(err, ErrMaterializationForbidden) || !errors.Is(err, ErrNoHandler) {
		t.Fatalf("want ErrMaterializationForbidden and ErrNoHandler, got %v", err)
	}
}

// TestRequantizingCountsAndWarnsOnce: a handler that re-quantizes is counted apart from the
// fallback, warned once per op and type under FallbackWarn, and refused under FallbackForbid.
func TestRequantizingCountsAndWarnsOnce(t *testing.T) {
	logs := captureWarnings(t)
	backend := newBackend(t)
	out := run(t, backend, func(g *graph.Graph) []*graph.Node {
		x := graphToy[warnTag](graph.Const(g, [][]float32{{1, 2}}), 2)
		x.warn = true
		return []*graph.Node{Materialize(Transpose(x, 0, 1)), Materialize(Transpose(x, 0, 1))}
	})
	if got := testutil.Float64s(t, out[0]); len(got) != 2 || got[0] != 2 || got[1] != 4 {
		t.Errorf("transpose: got %v, want [2 4]", got)
	}
	st := CurrentStats()
	key := Key{OpTranspose, "*implicitarray_test.toy[github.com/quanta-ml/quanta/implicitarray_test.warnTag]"}
	if n := st.Requantizations[key]; n != 2 || len(st.Fallbacks) != 0 {
		t.Errorf("requantizations = %d, want 2; fallbacks %v, want none", n, st.Fallbacks)
	}
	if n := strings.Count(logs.String(), "second rounding"); n != 1 || !strings.Contains(logs.String(), "op=transpose") {
		t.Errorf("want exactly one warning naming the op, got %d:\n%s", n, logs.String())
	}

	g := graph.NewGraph(backend, "forbidden")
	y := graphToy[forbidTag](graph.Const(g, [][]float32{{1}}), 1)
	err := recoverError(func() { Transpose(y, 0, 1) })
	if !errors.Is(err, ErrMaterializationForbidden) || !strings.Contains(err.Error(), "re-quantize") {
		t.Fatalf("want ErrMaterializationForbidden naming the re-quantization, got %v", err)
	}
}

func TestNesting(t *testing.T) {
	backend := newBackend(t)
	ResetStats()
	out := run(t, backend, func(g *graph.Graph) []*graph.Node {
		inner := graphToy[plainTag](graph.Const(g, []float32{1, -2}), 3)
		outer := &toy[plainTag]{payload: ArrayComponent(inner), scale: NodeComponent(graph.Const(g, float32(2)))}
		// One level: the outer's Materialize materializes its nested payload fully, so the result is dense.
		one := MaterializeNested(outer, false)
		if _, ok := one.(*graph.Node); !ok {
			t.Errorf("one level of outer: got %T", one)
		}
		// A value whose materialization is itself implicit: Neg keeps the toy implicit.
		lazy := &lazyNeg{inner: inner}
		level1 := MaterializeNested(lazy, false)
		if _, ok := level1.(*toy[plainTag]); !ok {
			t.Errorf("one level of lazyNeg: got %T, want the toy type", level1)
		}
		return []*graph.Node{Materialize(outer), MaterializeNested(lazy, true).(*graph.Node)}
	})
	if got := testutil.Float64s(t, out[0]); got[0] != 6 || got[1] != -12 {
		t.Errorf("nested materialize: got %v, want [6 -12]", got)
	}
	if got := testutil.Float64s(t, out[1]); got[0] != -3 || got[1] != 6 {
		t.Errorf("lazyNeg materialize: got %v, want [-3 6]", got)
	}
}

// TestIntegerPowNegativeExponentOfIntegers: a negative exponent of an integer operand (an unscaled
// 1-bit array materializes as int8) panics naming the op, as JAX's integer_pow raises; it gave
// truncated integer results silently (0^-2 = 0, 2^-2 = 0). Floats still accept it.
func TestIntegerPowNegativeExponentOfIntegers(t *testing.T) {
	g := graph.NewGraph(newBackend(t), "integer_pow")
	for _, x := range []*graph.Node{graph.Const(g, []int32{2, 1, -1, 0}), graph.Const(g, []int8{1, 0, -1, 1})} {
		err := recoverError(func() { IntegerPow(x, -2) })
		if err == nil || !strings.Contains(err.Error(), "implicitarray.integer_pow") || !strings.Contains(err.Error(), "exponent -2") {
			t.Errorf("IntegerPow(%s, -2): error = %v; want one naming integer_pow and the exponent", x.Shape(), err)
		}
	}
	if err := recoverError(func() { IntegerPow(graph.Const(g, []float32{2, 4}), -2) }); err != nil {
		t.Errorf("IntegerPow(float32, -2): %v", err)
	}
	if err := recoverError(func() { IntegerPow(graph.Const(g, []int32{2, 3}), 2) }); err != nil {
		t.Errorf("IntegerPow(int32, 2): %v", err)
	}
}

// TestConvertDTypeRejectsInvalidDType: a target dtype GoMLX cannot convert to panics in
// ConvertDType, naming the op, the operand and the accepted dtypes, for dense and implicit
// operands alike (not from deep inside GoMLX, nor after a fallback's materialization).
func TestConvertDTypeRejectsInvalidDType(t *testing.T) {
	g := graph.NewGraph(newBackend(t), "convert")
	dense := graph.Const(g, [][]float32{{1, 2}})
	for name, x := range map[string]Value{"dense": dense, "implicit": graphToy[plainTag](dense, 2)} {
		for _, dtype := range []dtypes.DType{dtypes.InvalidDType, dtypes.DType(1000)} {
			err := recoverError(func() { ConvertDType(x, dtype) })
			if err == nil {
				t.Errorf("%s to %s: no panic", name, dtype)
				continue
			}
			msg := err.Error()
			for _, want := range []string{"implicitarray.convert_element_type", "(Float32)[1 2]", dtype.String(), "accepted:", "Float32"} {
				if !strings.Contains(msg, want) {
					t.Errorf("%s to %s: error %q does not mention %q", name, dtype, msg, want)
				}
			}
			if strings.Count(msg, "implicitarray.convert_element_type") != 1 {
				t.Errorf("%s to %s: error %q: want one implicitarray.convert_element_type prefix", name, dtype, msg)
			}
		}
	}
}
