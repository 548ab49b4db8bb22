package models

import (
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's house style for graph code
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/kernelreg"
)

// KVCache is a key/value cache as the graph of one decoding step sees it: for each layer a keys
// and a values tensor [batch, kvHeads, length, headDim] (float32, or float16 to read half the
// bytes a step, as llama.cpp keeps its cache by default) holding the positions before
// Start, the step's chunk written at Start.. by Update, and attention over the first Window
// positions only, so that a step's cost follows the filled part of the cache, not its length.
// A Generator builds it; a model's Step reads it.
type KVCache struct {
	start  *Node
	window int
	caches []*Node
}

// NewKVCache returns the cache view of one step: start is the scalar position of the step's
// first token, caches holds each layer's keys then values [batch, kvHeads, length, headDim]
// float32 or float16 (all of one shape and dtype), and window (1..length) is the number of
// leading positions the
// step attends over. It panics, naming the shapes, when they do not fit.
func NewKVCache(start *Node, window int, caches []*Node) *KVCache {
	if len(caches) == 0 || len(caches)%2 != 0 {
		panic(errors.Errorf("models.NewKVCache: %d cache tensors; accepted: keys and values for each layer (an even, positive count)", len(caches)))
	}
	want := caches[0].Shape()
	if want.Rank() != 4 || (want.DType != dtypes.Float32 && want.DType != dtypes.Float16) {
		panic(errors.Errorf("models.NewKVCache: cache %s; accepted: float32 or float16 [batch, kvHeads, length, headDim]", want))
	}
	for _, c := range caches {
		if !c.Shape().Equal(want) {
			panic(errors.Errorf("models.NewKVCache: caches %s and %s; accepted: one shape for all", want, c.Shape()))
		}
	}
	if window < 1 || window > want.Dim(2) {
		panic(errors.Errorf("models.NewKVCache: window %d over caches %s; accepted: 1..%d", window, want, want.Dim(2)))
	}
	if !start.Shape().IsScalar() || !start.DType().IsInt() {
		panic(errors.Errorf("models.NewKVCache: start %s; accepted: a scalar integer", start.Shape()))
	}
	return &KVCache{start: ConvertDType(start, dtypes.Int32), window: window, caches: append([]*Node(nil), caches...)}
}

// Layers is the number of layers the cache holds.
func (c *KVCache) Layers() int { return len(c.caches) / 2 }

// Start is the position of the step's first token (scalar int32).
func (c *KVCache) Start() *Node { return c.start }

// Window is the number of leading cache positions the step attends over.
func (c *KVCache) Window() int { return c.window }

// Positions returns the positions [seq] (int32) of a chunk of seq tokens starting at Start.
func (c *KVCache) Positions(seq int) *Node {
	return Add(Iota(c.start.Graph(), shapes.Make(dtypes.Int32, seq), 0), c.start)
}

// Mask returns which of the Window cache positions each of seq queries sees, [seq, Window]
// (bool): query i, at position Start+i, sees positions <= Start+i.
func (c *KVCache) Mask(seq int) *Node {
	return CausalMask(c.Positions(seq), c.window)
}

// SlidingMask returns which of the Window cache positions each of seq queries sees under
// sliding-window attention of width window: [seq, Window] (bool), query i (at position Start+i)
// seeing positions p with Start+i − window < p <= Start+i (SlidingCausalMask).
func (c *KVCache) SlidingMask(seq, window int) *Node {
	return SlidingCausalMask(c.Positions(seq), c.window, window)
}

// Update writes the chunk's keys and values [batch, kvHeads, seq, headDim] (float32; rounded to
// the nearest half for a float16 cache) into layer's cache at Start.. and returns both caches,
// whose first Window positions the attention reads
// (GroupedAttention with a mask of Window keys: Mask, SlidingMask). The caller keeps Start+seq
// within the cache's length (a Generator does).
func (c *KVCache) Update(layer int, keys, values *Node) (windowKeys, windowValues *Node) {
	if layer < 0 || layer >= c.Layers() {
		panic(errors.Errorf("models.KVCache.Update: layer %d; accepted: 0..%d", layer, c.Layers()-1))
	}
	cache := c.caches[2*layer].Shape()
	for _, x := range []*Node{keys, values} {
		s := x.Shape()
		if s.Rank() != 4 || s.DType != dtypes.Float32 || s.Dim(0) != cache.Dim(0) || s.Dim(1) != cache.Dim(1) || s.Dim(3) != cache.Dim(3) || s.Dim(2) > cache.Dim(2) {
			panic(errors.Errorf("models.KVCache.Update: keys %s, values %s into caches %s; accepted: float32 [%d, %d, seq <= %d, %d]",
				keys.Shape(), values.Shape(), cache, cache.Dim(0), cache.Dim(1), cache.Dim(2), cache.Dim(3)))
		}
	}
	c.caches[2*layer] = writeCache(c.caches[2*layer], ConvertDType(keys, cache.DType), c.start)
	c.caches[2*layer+1] = writeCache(c.caches[2*layer+1], ConvertDType(values, cache.DType), c.start)
	return c.caches[2*layer], c.caches[2*layer+1]
}

// Caches returns the caches with the step's writes, in NewKVCache's order (a layer not updated
// is returned as given).
func (c *KVCache) Caches() []*Node { return append([]*Node(nil), c.caches...) }

// writeCache writes update [batch, kv, seq, hd] into cache [batch, kv, length, hd] at positions
// start..start+seq-1: DynamicUpdateSlice (in place, with the cache buffer donated) where the
// backend has it, otherwise a one-hot placement (exact: products by 0 and 1).
func writeCache(cache, update, start *Node) *Node {
	g := cache.Graph()
	if g.Backend().Capabilities().Operations[backends.OpTypeDynamicUpdateSlice] {
		zero := ScalarZero(g, dtypes.Int32)
		return DynamicUpdateSlice(cache, update, []*Node{zero, zero, start, zero})
	}
	length, seq := cache.Shape().Dim(2), update.Shape().Dim(2)
	target := Add(Iota(g, shapes.Make(dtypes.Int32, seq), 0), start)
	oneHot := ConvertDType(Equal(Iota(g, shapes.Make(dtypes.Int32, length, seq), 0), ExpandAxes(target, 0)), cache.DType())
	placed := Einsum("ts,bksd->bktd", oneHot, update)
	kept := Reshape(OneMinus(ReduceSum(oneHot, -1)), 1, 1, length, 1)
	return Add(Mul(cache, kept), placed)
}

// CausalMask returns which of keys positions 0..keys-1 each query at positions [seq] (int32)
// sees: [seq, keys] (bool), true where the key's position is at most the query's.
func CausalMask(positions *Node, keys int) *Node {
	seq := positions.Shape().Dim(0)
	return LessOrEqual(Iota(positions.Graph(), shapes.Make(dtypes.Int32, seq, keys), 1), ExpandAxes(ConvertDType(positions, dtypes.Int32), -1))
}

// SlidingCausalMask returns which of keys positions 0..keys-1 each query at positions [seq]
// (int32) sees under sliding-window attention of width window (>= 1): [seq, keys] (bool), true
// where the key's position p satisfies position − window < p <= position, the query and the
// window − 1 positions before it (llama.cpp's standard sliding window, Hugging Face's
// sliding_window). It panics for a window below 1.
func SlidingCausalMask(positions *Node, keys, window int) *Node {
	if window < 1 {
		panic(errors.Errorf("models.SlidingCausalMask: window %d; accepted: >= 1", window))
	}
	seq := positions.Shape().Dim(0)
	p := Iota(positions.Graph(), shapes.Make(dtypes.Int32, seq, keys), 1)
	q := ExpandAxes(ConvertDType(positions, dtypes.Int32), -1)
	return And(LessOrEqual(p, q), GreaterThan(p, SubScalar(q, window)))
}

// GroupedAttention is the scaled dot-product attention of grouped-query heads: queries q
// [batch, heads, seq, headDim] over keys k and values v [batch, kvHeads, length, headDim] (q's
// dtype, or both float16: a half cache, read as its float32 values), query head h reading
// key/value head h/(heads/kvHeads) (Hugging Face's repeat_kv order), the scores
// multiplied by scale and masked where visible [seq, keys] is false, softmax over the keys. Only
// the first keys (<= length) positions of k and v are read: a key/value cache goes in whole,
// attended over its filled window. It returns [batch, heads, seq, headDim]; it panics, naming the
// shapes, when they do not fit, and, naming the value, for a scale that is not finite as a float32
// (0, uniform attention over the visible keys, and negative scales are accepted).
//
// On XLA CPU with quanta's kernels (package kernels), float32 queries run as one call of the
// attention kernel, which reads the cache in place: a decoding step's few rows as one pass over
// the keys per row, a prompt's as products of blocks of positions by the keys they see (faster
// than XLA's products and softmax at every length measured, docs/performance.md).
func GroupedAttention(q, k, v, visible *Node, scale float64) *Node {
	qs, ks := q.Shape(), k.Shape()
	vs := visible.Shape()
	if qs.Rank() != 4 || ks.Rank() != 4 || !v.Shape().Equal(ks) || (ks.DType != qs.DType && ks.DType != dtypes.Float16) ||
		qs.Dim(0) != ks.Dim(0) || qs.Dim(3) != ks.Dim(3) ||
		ks.Dim(1) < 1 || qs.Dim(1)%ks.Dim(1) != 0 || vs.DType != dtypes.Bool || vs.Rank() != 2 || vs.Dim(0) != qs.Dim(2) ||
		vs.Dim(1) < 1 || vs.Dim(1) > ks.Dim(2) {
		panic(errors.Errorf("models.GroupedAttention: q %s, k %s, v %s, visible %s; accepted: q [batch, heads, seq, headDim], k and v "+
			"[batch, kvHeads, length, headDim] (q's dtype or float16) with kvHeads dividing heads, visible bool [seq, keys] with 1 <= keys <= length",
			qs, ks, v.Shape(), vs))
	}
	if f := float64(float32(scale)); math.IsNaN(f) || math.IsInf(f, 0) {
		panic(errors.Errorf("models.GroupedAttention: scale %g; accepted: finite, at most %g in magnitude (a float32)",
			scale, math.MaxFloat32))
	}
	batch, heads, seq, hd := qs.Dim(0), qs.Dim(1), qs.Dim(2), qs.Dim(3)
	kvHeads, keys := ks.Dim(1), vs.Dim(1)
	groups := heads / kvHeads
	kernels := attentionKernels(q, k, v, keys)
	cache := [2]*Node{k, v}
	if keys < ks.Dim(2) {
		k, v = SliceAxis(k, 2, AxisRange(0, keys)), SliceAxis(v, 2, AxisRange(0, keys))
	}
	k, v = ConvertDType(k, qs.DType), ConvertDType(v, qs.DType)
	qg := Reshape(q, batch, kvHeads, groups, seq, hd)
	scores := Einsum("bkgsd,bktd->bkgst", qg, k)
	scores = MulScalar(scores, scale)
	mask := BroadcastToDims(Reshape(visible, 1, 1, 1, seq, keys), batch, kvHeads, groups, seq, keys)
	scores = Where(mask, scores, BroadcastToDims(Scalar(q.Graph(), scores.DType(), math.Inf(-1)), scores.Shape().Dimensions...))
	probs := Softmax(scores, -1)
	out := Reshape(Einsum("bkgst,bktd->bkgsd", probs, v), batch, heads, seq, hd)
	if kernels != nil {
		if err := kernels.Emit(out, kernelreg.AttentionTarget, []*Node{q, cache[0], cache[1], visible}, map[string]any{"scale": scale}); err != nil {
			panic(errors.WithMessagef(err, "models.GroupedAttention: emitting the attention kernel for q %s, k %s", qs, ks))
		}
	}
	return out
}

// attentionKernels returns the kernels that run this attention, or nil where the formulation
// runs: another backend, no kernels, other dtypes, or more keys than the kernel takes.
func attentionKernels(q, k, v *Node, keys int) *kernelreg.Kernels {
	if q.DType() != dtypes.Float32 || (k.DType() != dtypes.Float32 && k.DType() != dtypes.Float16) ||
		keys > kernelreg.AttentionMaxKeys {
		return nil
	}
	kernels := kernelreg.For(q.Graph().Backend())
	if kernels == nil || !kernels.Targets[kernelreg.AttentionTarget] {
		return nil
	}
	return kernels
}

// RoPETables returns cos and sin [seq, headDim/2] of the rotary angles positions[p]·θ_i with
// θ_i = base^(-2i/headDim), computed in float32 from inverse frequencies computed in float64.
func RoPETables(positions *Node, headDim int, base float64) (cos, sin *Node) {
	return RoPETablesWithFactors(positions, headDim, base, nil)
}

// MinRoPEFactor is the smallest rotary frequency factor RoPETablesWithFactors accepts: 2^31 /
// float32's largest value, about 6.3e-30. A smaller factor makes the angle of a position (int32,
// up to 2^31 as float32) +Inf in float32, and its cos and sin NaN.
const MinRoPEFactor = (1 << 31) / math.MaxFloat32

// RoPETablesWithFactors is RoPETables with each pair's frequency divided by its factor:
// θ_i = base^(-2i/headDim) / factors[i], llama.cpp's rope frequency factors (the rope_freqs
// tensor of Llama 3.1 and later). nil factors are all 1 (RoPETables); otherwise there must be
// headDim/2 of them, each finite and at least MinRoPEFactor, or it panics naming the factor.
func RoPETablesWithFactors(positions *Node, headDim int, base float64, factors []float32) (cos, sin *Node) {
	if factors != nil {
		if len(factors) != headDim/2 {
			panic(errors.Errorf("models.RoPETablesWithFactors: %d frequency factors for headDim %d; accepted: headDim/2 = %d, or nil",
				len(factors), headDim, headDim/2))
		}
		for i, f := range factors {
			if !(f > 0) || math.IsInf(float64(f), 1) {
				panic(errors.Errorf("models.RoPETablesWithFactors: factors[%d] = %g; accepted: finite and positive", i, f))
			}
			if float64(f) < MinRoPEFactor {
				panic(errors.Errorf("models.RoPETablesWithFactors: factors[%d] = %g; accepted: at least %.4g (MinRoPEFactor: the "+
					"angles of positions up to 2^31 then stay finite in float32)", i, f, MinRoPEFactor))
			}
		}
	}
	g := positions.Graph()
	inv := make([]float32, headDim/2)
	for i := range inv {
		f := 1.0
		if factors != nil {
			f = float64(factors[i])
		}
		inv[i] = float32(1 / math.Pow(base, float64(2*i)/float64(headDim)) / f)
	}
	angles := Mul(ExpandAxes(ConvertDType(positions, dtypes.Float32), -1), ExpandAxes(Const(g, inv), 0))
	return computedOnce(Cos(angles)), computedOnce(Sin(angles))
}

// computedOnce returns the table t [..., n] times the n×n identity: the same values, which XLA
// computes once, where it fuses an element-wise table into every fusion that reads it and computes
// it again per element there (docs/performance.md, "The rotary tables computed once").
func computedOnce(t *Node) *Node {
	n := t.Shape().Dim(-1)
	return DotGeneral(t, []int{t.Rank() - 1}, nil, DiagonalWithValue(ScalarOne(t.Graph(), t.DType()), n), []int{0}, nil)
}

// ApplyRoPE rotates x [batch, heads, seq, headDim] by the angles whose cos and sin
// [seq, headDim/2] RoPETables gives. With adjacent false the pairs are (x[i], x[i+headDim/2])
// (Hugging Face's rotate_half); with adjacent true (x[2i], x[2i+1]) (llama.cpp's normal mode, for
// q/k kernels in GGUF's permuted row order). Each pair (a, b) becomes
// (a·cos − b·sin, a·sin + b·cos).
func ApplyRoPE(x, cos, sin *Node, adjacent bool) *Node {
	dims := x.Shape().Dimensions
	hd := dims[len(dims)-1]
	if hd%2 != 0 || !cos.Shape().Equal(sin.Shape()) || cos.Shape().Dim(-1) != hd/2 || cos.Shape().Dim(0) != dims[len(dims)-2] {
		panic(errors.Errorf("models.ApplyRoPE: x %s, cos %s, sin %s; accepted: x [..., seq, headDim] with headDim even, cos and sin [seq, headDim/2]",
			x.Shape(), cos.Shape(), sin.Shape()))
	}
	cos = ExpandLeftToRank(cos, len(dims))
	sin = ExpandLeftToRank(sin, len(dims))
	if adjacent {
		pairs := Reshape(x, append(append([]int{}, dims[:len(dims)-1]...), hd/2, 2)...)
		a := Squeeze(SliceAxis(pairs, -1, AxisRange(0, 1)), -1)
		b := Squeeze(SliceAxis(pairs, -1, AxisRange(1, 2)), -1)
		ra := Sub(Mul(a, cos), Mul(b, sin))
		rb := Add(Mul(a, sin), Mul(b, cos))
		return Reshape(Concatenate([]*Node{ExpandAxes(ra, -1), ExpandAxes(rb, -1)}, -1), dims...)
	}
	a := SliceAxis(x, -1, AxisRange(0, hd/2))
	b := SliceAxis(x, -1, AxisRange(hd/2, hd))
	return Concatenate([]*Node{Sub(Mul(a, cos), Mul(b, sin)), Add(Mul(a, sin), Mul(b, cos))}, -1)
}
