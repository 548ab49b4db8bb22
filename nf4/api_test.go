package nf4_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/sharding"
)

func TestQuantizeBadInput(t *testing.T) {
	good := tensors.FromValue([][]float32{{1, 2}, {3, 4}})
	for _, tc := range []struct {
		name      string
		in        *tensors.Tensor
		blockSize int
		want      string
	}{
		{"odd block", good, 3, "block size 3"},
		{"zero block", good, 0, "block size 0"},
		{"negative block", good, -2, "block size -2"},
		{"block longer than the axis", good, 66, "from 2 to 64"},
		{"block 2^30", good, 1 << 30, "block size 1073741824"},
		{"block MaxInt-1", good, math.MaxInt - 1, "from 2 to 64"},
		{"block 2^44", good, 1 << 44, "from 2 to 64"},
		{"empty", tensors.FromShape(shapes.Make(dtypes.Float32, 4, 0)), 2, "empty"},
		{"rank 0", tensors.FromValue(float32(1)), 2, "scalar"},
		{"integer dtype", tensors.FromValue([]int32{1, 2}), 2, "dtype Int32"},
		{"NaN", tensors.FromValue([]float32{1, float32(math.NaN())}), 2, "NaN"},
		{"Inf", tensors.FromValue([]float64{math.Inf(-1), 1}), 2, "-Inf"},
		{"nil", nil, 2, "nil tensor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := nf4.Quantize(tc.in, tc.blockSize)
			if err == nil || a != nil {
				t.Fatalf("got %v, %v; want an error", a, err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nf4.Quantize") {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
	t.Run("QuantizeNode panics", func(t *testing.T) {
		for _, bs := range []int{0, 3, -4, 66, 1 << 44} {
			func() {
				defer func() {
					if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "nf4.QuantizeNode") {
						t.Errorf("block %d: recovered %v, want a QuantizeNode panic", bs, r)
					}
				}()
				g := graph.NewGraph(testutil.Backend(t), "bad")
				nf4.QuantizeNode(graph.Const(g, []float32{1, 2}), bs)
			}()
		}
	})
}

// TestMaxBlockSize: a block is at most the last axis rounded up to even, or the default.
func TestMaxBlockSize(t *testing.T) {
	for _, tc := range []struct{ dim, want int }{{1, 64}, {40, 64}, {64, 64}, {65, 66}, {100, 100}, {4097, 4098}} {
		if got := nf4.MaxBlockSize(tc.dim); got != tc.want {
			t.Errorf("MaxBlockSize(%d) = %d, want %d", tc.dim, got, tc.want)
		}
		x := tensors.FromShape(shapes.Make(dtypes.Float32, 2, tc.dim))
		if _, err := nf4.Quantize(x, tc.want); err != nil {
			t.Errorf("block %d on %d columns: %v", tc.want, tc.dim, err)
		}
		if _, err := nf4.Quantize(x, tc.want+2); err == nil {
			t.Errorf("block %d on %d columns accepted", tc.want+2, tc.dim)
		}
	}
}

// TestQuantizeNodeMatchesHost: the in-graph quantizer writes the same bytes and absmax as the
// host one, padding, ties and dtypes included.
func TestQuantizeNodeMatchesHost(t *testing.T) {
	backend := testutil.Backend(t)
	values := testutil.RandomValues(11, 5*70)
	values[3], values[4] = refCodebook[8]/2*3, 3 // a tie, scaled
	for _, dtype := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16, dtypes.Float64, dtypes.Float16} {
		t.Run(dtype.String(), func(t *testing.T) {
			if dtype == dtypes.Float16 && runtime.IsGo(backend) {
				t.Skip("the pure-Go backend has no float16")
			}
			in := testutil.InDType(dtype, values, 5, 70)
			host := nf4.MustQuantize(in, 16)
			e := implicitarray.MustNewExec(backend, func(x *graph.Node) *nf4.Array { return nf4.QuantizeNode(x, 16) })
			defer e.Finalize()
			got := e.MustCall1(in).(*nf4.Array)
			if got.Shape().String() != host.Shape().String() {
				t.Fatalf("shape %s, want %s", got.Shape(), host.Shape())
			}
			if g, w := tensors.MustCopyFlatData[uint8](got.Packed().Tensor()), tensors.MustCopyFlatData[uint8](host.Packed().Tensor()); !slices.Equal(g, w) {
				t.Errorf("packed bytes differ from the host quantizer")
			}
			if g, w := testutil.Float32s(t, got.Absmax().Tensor()), testutil.Float32s(t, host.Absmax().Tensor()); !slices.Equal(g, w) {
				t.Errorf("absmax differs from the host quantizer")
			}
		})
	}
}

func TestSharding(t *testing.T) {
	a := nf4.MustQuantize(testutil.RandomTensor(1, 8, 128), 64) // two blocks per row: one per 'model' shard.
	if a.IsSharded() {
		t.Fatal("fresh array is sharded")
	}
	m := sharding.MustNewMesh([]string{"data", "model"}, []int{2, 2})
	b, err := a.WithMeshAndAxis(m, []any{nil, "model"})
	if err != nil {
		t.Fatal(err)
	}
	s, ok := b.Sharding()
	if !ok || !b.IsSharded() || s.Mesh != m || s.Spec.String() != "P(None, 'model')" || a.IsSharded() {
		t.Errorf("sharding %v (%v), original sharded %v", s, ok, a.IsSharded())
	}
	if !strings.Contains(b.Metadata(), "P(None, 'model')") {
		t.Errorf("metadata %q does not carry the spec", b.Metadata())
	}
	if c := b.WithSharding(sharding.Sharding{}); c.IsSharded() {
		t.Errorf("WithSharding(zero) kept a sharding")
	}
	if _, err := a.WithMeshAndAxis(m, "expert"); err == nil {
		t.Errorf("unknown mesh axis accepted")
	}
	if _, err := a.WithMeshAndAxis(m, []any{"data", "model", nil}); err == nil {
		t.Errorf("spec longer than the rank accepted")
	}
	if r, _ := a.WithMeshAndAxis(m, nil); !r.IsSharded() {
		t.Errorf("replicated over a mesh should count as sharded")
	}
}

// TestComponentSpecs checks the component specs of a sharded (8, 256) array with blocks of 64 over
// 4 devices (Array.ComponentSpecs): a sharded last axis shards the block axis of packed and absmax.
func TestComponentSpecs(t *testing.T) {
	a := nf4.MustQuantize(testutil.RandomTensor(2, 8, 256), 64)
	m := sharding.MustNewMesh([]string{"model"}, []int{4})
	for _, tc := range []struct {
		name    string
		spec    sharding.PartitionSpec
		want    []string // packed, absmax
		wantErr string
	}{
		{"columns", sharding.PartitionSpec{nil, {"model"}}, []string{"P(None, 'model', None)", "P(None, 'model')"}, ""},
		{"rows", sharding.PartitionSpec{{"model"}}, []string{"P('model', None, None)", "P('model', None)"}, ""},
		{"replicated", nil, []string{"P(None, None, None)", "P(None, None)"}, ""},
		{"unknown axis", sharding.PartitionSpec{{"data"}}, nil, "unknown mesh axis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			specs, err := a.ComponentSpecs(m, tc.spec)
			if testutil.WantError(t, err, tc.wantErr) {
				return
			}
			if len(specs) != 2 || specs[0].String() != tc.want[0] || specs[1].String() != tc.want[1] {
				t.Errorf("specs %v, want %v", specs, tc.want)
			}
		})
	}
	// Blocks of 128 over 4 shards of 64 columns would straddle shards: rejected by both.
	b := nf4.MustQuantize(testutil.RandomTensor(2, 8, 256), 128)
	if _, err := b.ComponentSpecs(m, sharding.PartitionSpec{nil, {"model"}}); err == nil || !strings.Contains(err.Error(), "straddle") {
		t.Errorf("ComponentSpecs with straddling blocks: %v", err)
	}
	if _, err := b.WithMeshAndAxis(m, []any{nil, "model"}); err == nil || !strings.Contains(err.Error(), "straddle") {
		t.Errorf("WithMeshAndAxis with straddling blocks: %v", err)
	}
	// 3 rows over 4 shards: rejected early.
	c := nf4.MustQuantize(testutil.RandomTensor(2, 3, 64), 64)
	if _, err := c.WithMeshAndAxis(m, "model"); err == nil || !strings.Contains(err.Error(), "not divisible by 4") {
		t.Errorf("WithMeshAndAxis with 3 rows over 4 shards: %v", err)
	}
}

func TestStrategyInMetadata(t *testing.T) {
	a := nf4.MustQuantize(testutil.RandomTensor(1, 8, 64), 64)
	b := a.WithStrategy(lowering.Materialize)
	if a.Strategy() != lowering.Auto || b.Strategy() != lowering.Materialize || a.Metadata() == b.Metadata() {
		t.Errorf("strategies %s/%s, metadata %q / %q", a.Strategy(), b.Strategy(), a.Metadata(), b.Metadata())
	}
}
