package models_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/x448/float16"
)

// TestApplyRoPE checks one rotation by hand: head width 4, base 100, position 1, so the angles
// are θ0 = 1 and θ1 = 100^(-1/2) = 0.1.
func TestApplyRoPE(t *testing.T) {
	backend := testutil.Backend(t)
	c1, s1, c2, s2 := math.Cos(1), math.Sin(1), math.Cos(0.1), math.Sin(0.1)
	tests := []struct {
		adjacent bool
		want     []float64
	}{
		// pairs (x0, x2) at θ0 and (x1, x3) at θ1
		{false, []float64{c1 - 3*s1, 2*c2 - 4*s2, s1 + 3*c1, 2*s2 + 4*c2}},
		// pairs (x0, x1) at θ0 and (x2, x3) at θ1
		{true, []float64{c1 - 2*s1, s1 + 2*c1, 3*c2 - 4*s2, 3*s2 + 4*c2}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("adjacent=%v", tc.adjacent), func(t *testing.T) {
			out := graph.MustExecOnce(backend, func(x, pos *graph.Node) *graph.Node {
				cos, sin := models.RoPETables(pos, 4, 100)
				return models.ApplyRoPE(x, cos, sin, tc.adjacent)
			}, [][][][]float32{{{{1, 2, 3, 4}}}}, []int32{1})
			got := out.Value().([][][][]float32)[0][0][0]
			for i, w := range tc.want {
				if math.Abs(float64(got[i])-w) > 1e-6 {
					t.Errorf("element %d = %g, want %g", i, got[i], w)
				}
			}
		})
	}
}

// TestRoPETablesWithFactors checks the frequency factors by hand: head width 4, base 100,
// position 3, factors 2 and 0.5, so the angles are 3/2 and 3·0.1/0.5 = 0.6; factors that
// llama.cpp would not run, or below MinRoPEFactor (angles +Inf in float32), panic, naming the
// factor or the count.
func TestRoPETablesWithFactors(t *testing.T) {
	backend := testutil.Backend(t)
	out := graph.MustExecOnceN(backend, func(pos *graph.Node) []*graph.Node {
		cos, sin := models.RoPETablesWithFactors(pos, 4, 100, []float32{2, 0.5})
		return []*graph.Node{cos, sin}
	}, []int32{3})
	for i, want := range []float64{1.5, 0.6} {
		c, s := out[0].Value().([][]float32)[0][i], out[1].Value().([][]float32)[0][i]
		if math.Abs(float64(c)-math.Cos(want)) > 1e-6 || math.Abs(float64(s)-math.Sin(want)) > 1e-6 {
			t.Errorf("pair %d: cos %g, sin %g; want the angle %g: %g, %g", i, c, s, want, math.Cos(want), math.Sin(want))
		}
	}
	// The smallest factor accepted keeps the angle of the last int32 position finite.
	least := float32(models.MinRoPEFactor)
	if float64(least) < models.MinRoPEFactor {
		least = math.Nextafter32(least, 1)
	}
	out = graph.MustExecOnceN(backend, func(pos *graph.Node) []*graph.Node {
		cos, sin := models.RoPETablesWithFactors(pos, 4, 100, []float32{least, 1})
		return []*graph.Node{cos, sin}
	}, []int32{math.MaxInt32})
	for i, o := range out {
		for _, v := range o.Value().([][]float32)[0] {
			if math.IsNaN(float64(v)) {
				t.Errorf("factor %g at position 2^31 - 1: table %d holds NaN", least, i)
			}
		}
	}
	for _, tc := range []struct {
		factors []float32
		want    string
	}{
		{[]float32{1}, "1 frequency factors for headDim 4; accepted: headDim/2 = 2, or nil"},
		{[]float32{1, 0}, "factors[1] = 0; accepted: finite and positive"},
		{[]float32{-2, 1}, "factors[0] = -2"},
		{[]float32{1, float32(math.NaN())}, "factors[1] = NaN"},
		{[]float32{float32(math.Inf(1)), 1}, "factors[0] = +Inf"},
		{[]float32{1, 1e-39}, "factors[1] = 1e-39; accepted: at least 6.311e-30"},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), tc.want) {
					t.Errorf("factors %v: panic %v; want one containing %q", tc.factors, r, tc.want)
				}
			}()
			graph.MustExecOnce(backend, func(pos *graph.Node) *graph.Node {
				cos, _ := models.RoPETablesWithFactors(pos, 4, 100, tc.factors)
				return cos
			}, []int32{3})
		}()
	}
}

// TestNewKVCacheErrors: the cache view names what it accepts.
func TestNewKVCacheErrors(t *testing.T) {
	backend := testutil.Backend(t)
	c := shapes.Make(dtypes.Float32, 1, 2, 8, 4)
	for _, tc := range []struct {
		name   string
		caches []shapes.Shape
		window int
		want   string
	}{
		{"odd", []shapes.Shape{c}, 8, "keys and values"},
		{"rank", []shapes.Shape{shapes.Make(dtypes.Float32, 2, 8, 4), shapes.Make(dtypes.Float32, 2, 8, 4)}, 8, "[batch, kvHeads, length, headDim]"},
		{"mixed", []shapes.Shape{c, shapes.Make(dtypes.Float32, 1, 2, 9, 4)}, 8, "one shape"},
		{"window", []shapes.Shape{c, c}, 9, "window 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := catch(func() {
				graph.MustExecOnce(backend, func(g *graph.Graph) *graph.Node {
					var nodes []*graph.Node
					for _, s := range tc.caches {
						nodes = append(nodes, graph.Zeros(g, s))
					}
					models.NewKVCache(graph.Const(g, int32(0)), tc.window, nodes)
					return graph.Const(g, 0)
				})
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one naming %q", err, tc.want)
			}
		})
	}
}

// TestSlidingCausalMask: a query at position q sees the keys q−window+1..q, by hand.
func TestSlidingCausalMask(t *testing.T) {
	backend := testutil.Backend(t)
	out := graph.MustExecOnce(backend, func(pos *graph.Node) *graph.Node {
		return models.SlidingCausalMask(pos, 6, 3)
	}, []int32{0, 2, 5})
	want := [][]bool{
		{true, false, false, false, false, false},
		{true, true, true, false, false, false},
		{false, false, false, true, true, true},
	}
	if got := out.Value().([][]bool); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("mask %v, want %v", got, want)
	}
}

// TestGroupedAttention checks the attention against its definition in float64, over caches
// longer than the attended keys (their tail NaN, so reading it would show): decoding rows (the
// CPU kernel where the backend has it) and a prompt's chunk (the kernel's prompt path), with a
// float32 cache and with a float16 one (its values the halves nearest the
// drawn ones, which the definition then reads).
func TestGroupedAttention(t *testing.T) {
	backend := testutil.Backend(t)
	const batch, heads, kvHeads, length, hd = 1, 6, 2, 64, 8
	for _, tc := range []struct {
		seq  int
		half bool
	}{{1, false}, {4, false}, {19, false}, {40, false}, {1, true}, {40, true}} {
		seq := tc.seq
		t.Run(fmt.Sprintf("seq=%d/half=%v", seq, tc.half), func(t *testing.T) {
			if tc.half && runtime.IsGo(backend) {
				t.Skipf("backend %s has no float16", backend.Name())
			}
			keys := seq + 9
			r := rand.New(rand.NewPCG(uint64(seq), 5))
			draw := func(n int, tail func(i int) bool) []float32 {
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(r.NormFloat64())
					if tail != nil && tail(i) {
						v[i] = float32(math.NaN())
					}
				}
				return v
			}
			unfilled := func(i int) bool { return (i/hd)%length >= keys }
			q := draw(batch*heads*seq*hd, nil)
			k, v := draw(batch*kvHeads*length*hd, unfilled), draw(batch*kvHeads*length*hd, unfilled)
			kt, vt := tensorOf(k, batch, kvHeads, length, hd), tensorOf(v, batch, kvHeads, length, hd)
			if tc.half {
				kt, vt = halvesOf(k, batch, kvHeads, length, hd), halvesOf(v, batch, kvHeads, length, hd)
			}
			start := keys - seq
			out := graph.MustExecOnce(backend, func(q, k, v, pos *graph.Node) *graph.Node {
				return models.GroupedAttention(q, k, v, models.CausalMask(pos, keys), 0.3)
			}, tensorOf(q, batch, heads, seq, hd), kt, vt, iotaFrom(start, seq))
			got := tensors.MustCopyFlatData[float32](out)
			for h := range heads {
				kv := h / (heads / kvHeads)
				for s := range seq {
					p := make([]float64, start+s+1)
					best, total := math.Inf(-1), 0.0
					for j := range p {
						for d := range hd {
							p[j] += float64(q[(h*seq+s)*hd+d]) * float64(k[(kv*length+j)*hd+d])
						}
						p[j] *= 0.3
						best = math.Max(best, p[j])
					}
					for j := range p {
						p[j] = math.Exp(p[j] - best)
						total += p[j]
					}
					for d := range hd {
						want := 0.0
						for j := range p {
							want += p[j] / total * float64(v[(kv*length+j)*hd+d])
						}
						if g := float64(got[(h*seq+s)*hd+d]); !(math.Abs(g-want) <= 1e-5) {
							t.Fatalf("head %d row %d element %d = %g, want %g", h, s, d, g, want)
						}
					}
				}
			}
		})
	}
}

func tensorOf(v []float32, dims ...int) *tensors.Tensor {
	return tensors.FromFlatDataAndDimensions(v, dims...)
}

// halvesOf rounds v to the nearest halves in place and returns them as a float16 tensor.
func halvesOf(v []float32, dims ...int) *tensors.Tensor {
	h := make([]float16.Float16, len(v))
	for i, x := range v {
		h[i] = float16.Fromfloat32(x)
		v[i] = h[i].Float32()
	}
	return tensors.FromFlatDataAndDimensions(h, dims...)
}

func iotaFrom(start, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(start + i)
	}
	return out
}

// TestGroupedAttentionScale: a scale that is not finite (as the float32 the kernel reads) panics at
// graph build naming it; 0 (uniform attention over the visible keys) and negative scales run.
func TestGroupedAttentionScale(t *testing.T) {
	backend := testutil.Backend(t)
	q := tensorOf([]float32{1, 2}, 1, 1, 1, 2)
	k := tensorOf([]float32{1, 0, 0, 1}, 1, 1, 2, 2)
	v := tensorOf([]float32{2, 4, 6, 8}, 1, 1, 2, 2)
	attend := func(scale float64) []float32 {
		out := graph.MustExecOnce(backend, func(q, k, v, pos *graph.Node) *graph.Node {
			return models.GroupedAttention(q, k, v, models.CausalMask(pos, 2), scale)
		}, q, k, v, []int32{1})
		return tensors.MustCopyFlatData[float32](out)
	}
	for _, tc := range []struct {
		scale float64
		want  string
	}{
		{math.NaN(), "models.GroupedAttention: scale NaN; accepted: finite"},
		{math.Inf(1), "scale +Inf"},
		{math.Inf(-1), "scale -Inf"},
		{1e39, "scale 1e+39"},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), tc.want) {
					t.Errorf("scale %g: panic %v; want one containing %q", tc.scale, r, tc.want)
				}
			}()
			attend(tc.scale)
		}()
	}
	// Scores q·k = 1 and 2: scale 0 weighs the values equally, scale -ln 2 as 2/3 and 1/3.
	for _, tc := range []struct {
		scale float64
		want  [2]float64
	}{
		{0, [2]float64{4, 6}},
		{-math.Ln2, [2]float64{2*2.0/3 + 6.0/3, 4*2.0/3 + 8.0/3}},
	} {
		got := attend(tc.scale)
		for i := range got {
			if math.Abs(float64(got[i])-tc.want[i]) > 1e-5 {
				t.Errorf("scale %g: got %v, want %v", tc.scale, got, tc.want)
				break
			}
		}
	}
}
