package qarray_test

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/qarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
	"github.com/quanta-ml/quanta/sharding"
)

// array is the method set every quantized array type shares (through qarray.Base), with the
// With methods returning the interface.
type array interface {
	lowering.Quantized
	Delete()
	IsDeleted() bool
	Bytes() int64
	String() string
	IsSharded() bool
	Sharding() (sharding.Sharding, bool)
	FallbackPolicy() implicitarray.Fallback
}

type format struct {
	name         string
	make         func() array
	withStrategy func(array, lowering.Strategy) array
	withDType    func(array, dtypes.DType) array
	withSharding func(array, sharding.Sharding) array
	bytes        int64 // of the 8×16 float32 weight below
}

func weight() *tensors.Tensor { return testutil.RandomTensor(7, 8, 16) }

func formats() []format {
	return []format{
		{name: "nf4", bytes: 8*16/2 + 8*1*4, make: func() array { return nf4.MustQuantize(weight(), 16) },
			withStrategy: func(a array, s lowering.Strategy) array { return a.(*nf4.Array).WithStrategy(s) },
			withDType:    func(a array, d dtypes.DType) array { return a.(*nf4.Array).WithDType(d) },
			withSharding: func(a array, s sharding.Sharding) array { return a.(*nf4.Array).WithSharding(s) }},
		{name: "int8", bytes: 8*16 + 8*4, make: func() array { return qint8.MustQuantize(weight()) },
			withStrategy: func(a array, s lowering.Strategy) array { return a.(*qint8.Array).WithStrategy(s) },
			withDType:    func(a array, d dtypes.DType) array { return a.(*qint8.Array).WithDType(d) },
			withSharding: func(a array, s sharding.Sharding) array { return a.(*qint8.Array).WithSharding(s) }},
		{name: "ternary/scaled", bytes: 2*16 + 16*4, make: func() array {
			return onebit.MustQuantizeTernary(weight(), &onebit.Options{Scale: true, ScaleAxes: []int{0}})
		},
			withStrategy: func(a array, s lowering.Strategy) array { return a.(*onebit.Array).WithStrategy(s) },
			withDType:    func(a array, d dtypes.DType) array { return a.(*onebit.Array).WithDType(d) },
			withSharding: func(a array, s sharding.Sharding) array { return a.(*onebit.Array).WithSharding(s) }},
		{name: "binary/1bit", bytes: 1 * 16, make: func() array { return onebit.MustQuantizeBinaryBits(weight(), nil) },
			withStrategy: func(a array, s lowering.Strategy) array { return a.(*onebit.BitArray).WithStrategy(s) },
			withDType:    func(a array, d dtypes.DType) array { return a.(*onebit.BitArray).WithDType(d) },
			withSharding: func(a array, s sharding.Sharding) array { return a.(*onebit.BitArray).WithSharding(s) }},
	}
}

// TestContract: every array type has the same behaviour for the shared methods.
func TestContract(t *testing.T) {
	backend := testutil.Backend(t)
	materialize := func(a array) error {
		_, err := implicitarray.MaterializeOnHost(backend, a)
		return err
	}
	for _, f := range formats() {
		t.Run(f.name, func(t *testing.T) {
			a := f.make()
			if got := a.Bytes(); got != f.bytes {
				t.Errorf("Bytes() = %d, want %d", got, f.bytes)
			}
			if a.Strategy() != lowering.Auto || a.FallbackPolicy() != implicitarray.FallbackWarn || a.IsSharded() {
				t.Errorf("fresh array: strategy %s, fallback %d, sharded %v", a.Strategy(), a.FallbackPolicy(), a.IsSharded())
			}
			// The With methods return new arrays; the strategy is part of the metadata.
			b := f.withStrategy(a, lowering.DecodeDot)
			if b.Strategy() != lowering.DecodeDot || a.Strategy() != lowering.Auto || a.Metadata() == b.Metadata() ||
				!strings.Contains(b.Metadata(), "strategy=decode-dot") {
				t.Errorf("WithStrategy: %s / %s", a.Metadata(), b.Metadata())
			}
			c := f.withDType(a, dtypes.Float64)
			if c.Shape().DType != dtypes.Float64 || a.Shape().DType == dtypes.Float64 {
				t.Errorf("WithDType: %s / %s", a.Shape(), c.Shape())
			}
			d := f.withSharding(a, sharding.Sharding{Spec: sharding.PartitionSpec{nil, {"model"}}})
			if !d.IsSharded() || a.IsSharded() || !strings.Contains(d.Metadata(), "'model'") {
				t.Errorf("WithSharding: %s", d.Metadata())
			}
			if err := materialize(b); err != nil {
				t.Fatalf("%+v", err)
			}
			// Derived arrays share the buffers: Delete on one deletes all of them.
			b.Delete()
			b.Delete() // idempotent
			for i, x := range []array{a, b, c, d} {
				if !x.IsDeleted() || !strings.Contains(x.String(), "(deleted)") {
					t.Errorf("array #%d after Delete of a derived one: IsDeleted %v, %s", i, x.IsDeleted(), x)
				}
				if err := materialize(x); !errors.Is(err, implicitarray.ErrDeleted) {
					t.Errorf("array #%d used after Delete: %v, want implicitarray.ErrDeleted", i, err)
				}
			}
			// New components are new buffers: not deleted.
			e := f.make()
			again := e.WithComponents(e.Components()).(array)
			e.Delete()
			if again.IsDeleted() {
				t.Errorf("an array with new components is deleted with the original")
			}
		})
	}
}

// TestInvalidStrategy: a value that is not a strategy is rejected when set.
func TestInvalidStrategy(t *testing.T) {
	for _, f := range formats() {
		t.Run(f.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "WithStrategy") {
					t.Errorf("WithStrategy(99): %v, want a panic naming WithStrategy", r)
				}
			}()
			f.withStrategy(f.make(), 99)
		})
	}
}

// TestFallbackWarns: an op without a handler materializes the array, counted as a fallback, and
// gives the dense op's result.
func TestFallbackWarns(t *testing.T) {
	backend := testutil.Backend(t)
	for _, f := range formats() {
		t.Run(f.name, func(t *testing.T) {
			a := f.withDType(f.make(), dtypes.Float32)
			implicitarray.ResetStats()
			e := implicitarray.MustNewExec(backend, func(w implicitarray.Array) (*graph.Node, *graph.Node) {
				return implicitarray.Exp(w).(*graph.Node), graph.Exp(implicitarray.Materialize(w))
			})
			defer e.Finalize()
			out := e.MustCall(a)
			got, want := testutil.Float64s(t, out[0].(*tensors.Tensor)), testutil.Float64s(t, out[1].(*tensors.Tensor))
			if diff, _ := testutil.MaxAbsDiff(got, want); diff != 0 {
				t.Errorf("exp through the fallback differs from exp of the materialized array by %g", diff)
			}
			key := implicitarray.Key{Op: implicitarray.OpExp, Type: implicitarray.TypeName(a)}
			if n := implicitarray.CurrentStats().Fallbacks[key]; n != 1 {
				t.Errorf("Fallbacks[%s] = %d, want 1", key, n)
			}
		})
	}
}

// TestNormalizeAxes: negative axes count from the end; out-of-range and repeated axes are errors
// naming what is accepted.
func TestNormalizeAxes(t *testing.T) {
	for _, tc := range []struct {
		axes    []int
		want    []int
		wantErr string
	}{
		{axes: []int{-1, 0}, want: []int{2, 0}},
		{axes: []int{}, want: []int{}},
		{axes: []int{3}, wantErr: "axis 3 out of range for rank 3; accepted: -3..2"},
		{axes: []int{-4}, wantErr: "axis -4 out of range for rank 3; accepted: -3..2"},
		{axes: []int{1, -2}, wantErr: "axes [1 -2] repeat axis 1; accepted: distinct axes"},
	} {
		got, err := qarray.NormalizeAxes(tc.axes, 3)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("NormalizeAxes(%v, 3): error %v, want %q", tc.axes, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("NormalizeAxes(%v, 3) = %v, %v; want %v", tc.axes, got, err, tc.want)
		}
	}
}

// TestWithFloatDType: the arrays that materialize in float dtypes only reject another dtype,
// naming the array.
func TestWithFloatDType(t *testing.T) {
	for _, f := range formats()[:2] {
		t.Run(f.name, func(t *testing.T) {
			a := f.make()
			want := fmt.Sprintf("%s.WithDType(Int8) of %s; accepted: a float dtype", strings.SplitN(a.String(), "(", 2)[0], a)
			defer func() {
				if r := recover(); r == nil || fmt.Sprint(r) != want {
					t.Errorf("WithDType(Int8): %v, want a panic %q", r, want)
				}
			}()
			f.withDType(a, dtypes.Int8)
		})
	}
}

// forbidding is an implicit array (its one component, as it is) whose type forbids the generic
// fallback.
type forbidding struct{ c implicitarray.Component }

func (f *forbidding) Shape() shapes.Shape                    { return f.c.Shape() }
func (f *forbidding) Components() []implicitarray.Component  { return []implicitarray.Component{f.c} }
func (f *forbidding) Metadata() string                       { return "" }
func (f *forbidding) Materialize() implicitarray.Value       { return f.c.Node() }
func (f *forbidding) FallbackPolicy() implicitarray.Fallback { return implicitarray.FallbackForbid }
func (f *forbidding) WithComponents(c []implicitarray.Component) implicitarray.Array {
	return &forbidding{c[0]}
}

// TestConcatenateOtherTypes: a concatenation led by an array whose format has a concatenate
// handler leaves the implicit operands of other types to the generic fallback, under their own
// policy: one that forbids materialization is refused rather than densified silently, one that
// warns is counted as a fallback.
func TestConcatenateOtherTypes(t *testing.T) {
	backend := testutil.Backend(t)
	for name, first := range map[string]implicitarray.Array{
		"nf4":  nf4.MustQuantize(testutil.RandomTensor(1, 2, 64), 32),
		"ggml": ggml.MustQuantize(testutil.RandomTensor(1, 2, 64), gguf.TypeQ8_0),
	} {
		t.Run(name, func(t *testing.T) {
			concatenate := func(other implicitarray.Array) (err error) {
				defer testutil.RecoverError(&err)
				e := implicitarray.MustNewExec(backend, func(a, b implicitarray.Array) *graph.Node {
					return implicitarray.Materialize(implicitarray.Concatenate([]implicitarray.Value{a, b}, 0))
				})
				defer e.Finalize()
				_, err = e.Call(first, other)
				return err
			}
			err := concatenate(&forbidding{implicitarray.TensorComponent(testutil.RandomTensor(2, 2, 64))})
			if !errors.Is(err, implicitarray.ErrMaterializationForbidden) || !strings.Contains(err.Error(), "forbidding") {
				t.Errorf("with a type that forbids materialization: %v; want ErrMaterializationForbidden naming it", err)
			}
			implicitarray.ResetStats()
			if err := concatenate(qint8.MustQuantize(testutil.RandomTensor(3, 2, 64))); err != nil {
				t.Fatalf("%+v", err)
			}
			if n := implicitarray.CurrentStats().Fallbacks[implicitarray.Key{Op: implicitarray.OpConcatenate, Type: "*int8.Array"}]; n != 1 {
				t.Errorf("%d fallbacks counted for the *int8.Array operand, want 1", n)
			}
		})
	}
}

// TestWithComponentsAfterDelete: Delete releases an array's buffers, not its metadata: new
// components (e.g. the leaves of its Flatten restored from elsewhere) give a live array through
// WithComponents and TreeDef.Unflatten, with the values the array had.
func TestWithComponentsAfterDelete(t *testing.T) {
	backend := testutil.Backend(t)
	arrays := map[string]func() implicitarray.Array{
		"nf4-dq": func() implicitarray.Array { return nf4.MustDoubleQuantize(nf4.MustQuantize(weight(), 16)) },
		"ggml/Q8_0": func() implicitarray.Array {
			return ggml.MustQuantize(testutil.RandomTensor(7, 4, 32), gguf.TypeQ8_0)
		},
	}
	for _, f := range formats() {
		arrays[f.name] = func() implicitarray.Array { return f.make() }
	}
	for name, build := range arrays {
		t.Run(name, func(t *testing.T) {
			a := build()
			dense, err := implicitarray.MaterializeOnHost(backend, a)
			if err != nil {
				t.Fatal(err)
			}
			want := testutil.TensorBytes(t, dense)
			leaves, def, err := implicitarray.Flatten(a)
			if err != nil {
				t.Fatal(err)
			}
			restored := make([]any, len(leaves))
			for i, l := range leaves {
				if restored[i], err = l.(*tensors.Tensor).Clone(); err != nil {
					t.Fatal(err)
				}
			}
			a.(interface{ Delete() }).Delete()
			var back any
			func() {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("panic: %v", r)
					}
				}()
				back, err = def.Unflatten(restored)
			}()
			if err != nil {
				t.Fatalf("Unflatten after Delete: %v", err)
			}
			dense, err = implicitarray.MaterializeOnHost(backend, back.(implicitarray.Array))
			if err != nil {
				t.Fatal(err)
			}
			if got := testutil.TensorBytes(t, dense); !slices.Equal(got, want) {
				t.Errorf("restored array materializes to %x, want %x", got, want)
			}
		})
	}
}

// TestHandlersDeferToFallback: the cases a format's handlers do not keep in the format are the
// generic fallback's, as each package's doc says: counted once in Stats.Fallbacks (not as
// handled) and warned about once per op and type under the formats' FallbackWarn policy, the
// path on which a FallbackForbid policy refuses them.
func TestHandlersDeferToFallback(t *testing.T) {
	backend := testutil.Backend(t)
	type arrays = []implicitarray.Array
	nf4Tiny := func() arrays { return arrays{nf4.MustQuantize(testutil.RandomTensor(1, 1, 1), 16)} }
	nf4Weight := func() arrays { return arrays{nf4.MustQuantize(weight(), 16)} }
	int8Tiny := func() arrays { return arrays{qint8.MustQuantize(testutil.RandomTensor(1, 1, 1))} }
	ternary := func() arrays {
		return arrays{onebit.MustQuantizeTernary(weight(), &onebit.Options{Scale: true, ScaleAxes: []int{0}})}
	}
	reshape := func(dims ...int) func(arrays) implicitarray.Value {
		return func(a arrays) implicitarray.Value { return implicitarray.Reshape(a[0], dims...) }
	}
	convert := func(dtype dtypes.DType) func(arrays) implicitarray.Value {
		return func(a arrays) implicitarray.Value { return implicitarray.ConvertDType(a[0], dtype) }
	}
	concatenate := func(axis int) func(arrays) implicitarray.Value {
		return func(a arrays) implicitarray.Value {
			return implicitarray.Concatenate([]implicitarray.Value{a[0], a[1]}, axis)
		}
	}
	for _, tc := range []struct {
		name  string
		key   implicitarray.Key
		make  func() arrays
		apply func(arrays) implicitarray.Value
	}{
		{"nf4/reshape-to-scalar", implicitarray.Key{Op: implicitarray.OpReshape, Type: "*nf4.Array"}, nf4Tiny, reshape()},
		{"nf4/concatenate-last-axis", implicitarray.Key{Op: implicitarray.OpConcatenate, Type: "*nf4.Array"},
			func() arrays { return append(nf4Weight(), nf4Weight()...) }, concatenate(1)},
		{"nf4/concatenate-block-sizes", implicitarray.Key{Op: implicitarray.OpConcatenate, Type: "*nf4.Array"},
			func() arrays { return append(nf4Weight(), nf4.MustQuantize(weight(), 8)) }, concatenate(0)},
		{"nf4/convert-int32", implicitarray.Key{Op: implicitarray.OpConvertDType, Type: "*nf4.Array"}, nf4Weight, convert(dtypes.Int32)},
		{"int8/reshape-to-scalar", implicitarray.Key{Op: implicitarray.OpReshape, Type: "*int8.Array"}, int8Tiny, reshape()},
		{"int8/convert-int32", implicitarray.Key{Op: implicitarray.OpConvertDType, Type: "*int8.Array"}, int8Tiny, convert(dtypes.Int32)},
		{"ggml/reshape-last-axis", implicitarray.Key{Op: implicitarray.OpReshape, Type: "*ggml.Array"},
			func() arrays { return arrays{ggml.MustQuantize(testutil.RandomTensor(7, 2, 64), gguf.TypeQ8_0)} }, reshape(4, 32)},
		{"onebit/convert-unsigned", implicitarray.Key{Op: implicitarray.OpConvertDType, Type: "*onebit.Array"}, ternary, convert(dtypes.Uint8)},
		{"onebit/convert-int32-scaled", implicitarray.Key{Op: implicitarray.OpConvertDType, Type: "*onebit.Array"}, ternary, convert(dtypes.Int32)},
		{"onebit/reshape-scale-per-column", implicitarray.Key{Op: implicitarray.OpReshape, Type: "*onebit.Array"}, ternary, reshape(16, 8)},
		{"onebit/reshape-unpackable", implicitarray.Key{Op: implicitarray.OpReshape, Type: "*onebit.BitArray"},
			func() arrays { return arrays{onebit.MustQuantizeBinaryBits(weight(), nil)} }, reshape(4, 32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			implicitarray.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
			t.Cleanup(func() { implicitarray.SetLogger(slog.Default()) })
			implicitarray.ResetStats()
			e := implicitarray.MustNewExec(backend, func(a arrays) *graph.Node { return implicitarray.Materialize(tc.apply(a)) })
			defer e.Finalize()
			if _, err := e.Call(tc.make()); err != nil {
				t.Fatalf("%+v", err)
			}
			st := implicitarray.CurrentStats()
			if st.Fallbacks[tc.key] != 1 || st.Handled[tc.key] != 0 {
				t.Errorf("stats %+v: want %s counted once as a fallback, not as handled", st, tc.key)
			}
			warning := fmt.Sprintf("op=%s type=%s", tc.key.Op, tc.key.Type)
			if n := strings.Count(logs.String(), warning); n != 1 {
				t.Errorf("%d warnings with %q, want 1; logs:\n%s", n, warning, logs.String())
			}
		})
	}
}

// TestIntegerComponentsGetNoGradient: as implicitarray's documentation says, graph.Gradient
// reaches the float components and the integer ones (codes, packed bytes) get none: the gradient
// of a loss built from the array (materialized, or through a product) with respect to an integer
// component is zero, never the float gradient truncated to integers, which an optimizer step
// would add to the codes.
func TestIntegerComponentsGetNoGradient(t *testing.T) {
	backend := testutil.Backend(t)
	arrays := map[string]implicitarray.Array{
		"ggml/Q8_0": ggml.MustQuantize(testutil.RandomTensor(7, 8, 32), gguf.TypeQ8_0),
		"ggml/Q4_K": ggml.MustQuantize(testutil.RandomTensor(7, 8, 256), gguf.TypeQ4_K),
		"ternary":   onebit.MustQuantizeTernary(testutil.RandomTensor(7, 8, 16), nil).WithDType(dtypes.Float32),
	}
	for _, f := range formats() {
		arrays[f.name] = f.make()
	}
	for name, a := range arrays {
		for _, through := range []string{"materialize", "matmul"} {
			t.Run(name+"/"+through, func(t *testing.T) {
				var out []any
				err := func() (err error) {
					defer testutil.RecoverError(&err)
					e := implicitarray.MustNewExec(backend, func(w implicitarray.Array) []*graph.Node {
						var y *graph.Node
						if through == "materialize" {
							y = implicitarray.Materialize(w)
						} else {
							g := w.Components()[0].Node().Graph()
							x := graph.Ones(g, shapes.Make(dtypes.Float32, 2, w.Shape().Dim(0)))
							y = implicitarray.Materialize(implicitarray.MatMul(x, w))
						}
						loss := graph.ReduceAllSum(graph.MulScalar(y, 1000))
						var wrt []*graph.Node
						for _, c := range w.Components() {
							if c.IsNode() && !c.Node().DType().IsFloat() {
								wrt = append(wrt, c.Node())
							}
						}
						return graph.Gradient(loss, wrt...)
					})
					defer e.Finalize()
					out, err = e.Call(a)
					return err
				}()
				if err != nil {
					t.Fatalf("gradient: %+v", err)
				}
				for i, g := range out[0].([]*tensors.Tensor) {
					for _, v := range testutil.Float64s(t, g) {
						if v != 0 {
							t.Fatalf("gradient with respect to integer component #%d (%s) is not zero: %v", i, g.Shape(), g)
						}
					}
				}
			})
		}
	}
}

// TestReplicatedGatherKeepsFormat: a gather of whole rows from an array sharded over a mesh but
// replicated (every axis of its spec None, as WithMeshAndAxis(m, nil) gives) is handled as for an
// unsharded array, not materialized whole: an embedding table replicated on every device looks up
// its rows only. The values are the dense gather's, and the result is replicated over the same
// mesh with a spec that fits its rank (here one less than the table's).
func TestReplicatedGatherKeepsFormat(t *testing.T) {
	backend := testutil.Backend(t)
	m := sharding.MustNewMesh([]string{"model"}, []int{4})
	replicated := sharding.Sharding{Mesh: m, Spec: sharding.PartitionSpec{nil, nil, nil}}
	table := testutil.RandomTensor(11, 4, 8, 64)
	ids := tensors.FromValue([][]int32{{3, 7}, {0, 0}, {2, 5}, {3, 7}, {1, 2}})
	type gathered interface {
		implicitarray.Array
		Sharding() (sharding.Sharding, bool)
		ComponentSpecs(*sharding.Mesh, sharding.PartitionSpec) ([]sharding.PartitionSpec, error)
	}
	for _, tc := range []struct {
		name string
		key  implicitarray.Key
		a    implicitarray.Array
	}{
		{"nf4", implicitarray.Key{Op: implicitarray.OpGather, Type: "*nf4.Array"}, nf4.MustQuantize(table, 16).WithSharding(replicated)},
		{"int8", implicitarray.Key{Op: implicitarray.OpGather, Type: "*int8.Array"}, qint8.MustQuantize(table, 2).WithSharding(replicated)},
		{"ggml", implicitarray.Key{Op: implicitarray.OpGather, Type: "*ggml.Array"}, ggml.MustQuantize(table, gguf.TypeQ8_0).WithSharding(replicated)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			implicitarray.ResetStats()
			e := implicitarray.MustNewExec(backend, func(a implicitarray.Array, ids *graph.Node) implicitarray.Value {
				return implicitarray.Gather(a, ids)
			})
			defer e.Finalize()
			out, ok := e.MustCall1(tc.a, ids).(gathered)
			if !ok {
				t.Fatalf("gather of rows returned %T, want a quantized array", e.MustCall1(tc.a, ids))
			}
			if st := implicitarray.CurrentStats(); st.Fallbacks[tc.key] != 0 {
				t.Errorf("stats %+v: the replicated table was materialized for the gather", st)
			}
			s, isSharded := out.Sharding()
			if !isSharded || !s.Mesh.Equal(m) || slices.ContainsFunc(s.Spec, func(a sharding.AxisSpec) bool { return len(a) > 0 }) {
				t.Errorf("result sharding %s (%v), want replicated over %s", s, isSharded, m)
			}
			if _, err := out.ComponentSpecs(m, s.Spec); err != nil {
				t.Errorf("the result refuses its own sharding: %v", err)
			}
			want := graph.MustExecOnce(backend, func(x, ids *graph.Node) *graph.Node { return graph.Gather(x, ids) },
				testutil.Materialize(t, tc.a), ids)
			testutil.SameBits(t, "gathered rows", testutil.Float32s(t, testutil.Materialize(t, out)), testutil.Float32s(t, want))
		})
	}
}
