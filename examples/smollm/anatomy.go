package main

// -anatomy: where a decoding step's time goes. Each part of the step is compiled as its own XLA
// program on the loaded model (-format, -head, -fuse) at one token, with a cache window of
// -anatomy-window positions, and timed alone (median of -anatomy-reps runs after a warm-up).
// -anatomy-positions P times the step, the projections, the attention and the cache writes at P
// positions from position 0 instead (a prompt's chunk: the window must hold them):
//
//   - step: the whole decoding step, as the generator runs it (caches donated);
//   - empty step: a program with the step's inputs and outputs and no work (logits of zeros,
//     caches passed through): launch, argument and output handling;
//   - projections: the blocks' products alone (q/k/v or the fused qkv, output, gate/up or the
//     fused gate_up, down) and the blocks' norms, chained through the residual as in the blocks;
//   - attention and cache: every layer's RoPE, cache write and attention over the window, on
//     keys and values taken from the input (no product);
//   - cache writes: every layer's key and value write alone;
//   - head: the final norm and the output head (the tied table's product);
//   - lookup: the embedding of the step's tokens;
//   - read bandwidth: the host's streaming read of 512 MiB (cpukernels.ReadBandwidth), the limit
//     the parts are set against;
//
// and on the host, per token: copying the logits out is inside the step; greedy and sampled
// picks (models.Sampler) are timed apart. Then the decoding rate through models.Generator in
// both cache modes and at -maxlen against a cache of -anatomy-window positions, the modes
// interleaved (GrowCache and FullCache, see models.CacheMode).
//
// The bytes column is what each part reads per token (weights, cache), and "at bandwidth" the
// time those bytes take at the measured read bandwidth: a part far above it is overhead, not
// streaming. Figures are only meaningful on a quiet machine.

import (
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's house style for graph code
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/benchsuite"
	"github.com/quanta-ml/quanta/internal/cpukernels"
	"github.com/quanta-ml/quanta/internal/customcall"
	"github.com/quanta-ml/quanta/internal/modelbase"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/llama"
	"github.com/quanta-ml/quanta/qlayers"
	"github.com/quanta-ml/quanta/tokenizer"
)

var (
	flagAnatomyWindow    = flag.Int("anatomy-window", 256, "-anatomy: the attended cache window of the timed step (its position is window/2)")
	flagAnatomyReps      = flag.Int("anatomy-reps", 50, "-anatomy: timed runs of each part (median)")
	flagAnatomyTokens    = flag.Int("anatomy-tokens", 64, "-anatomy: tokens decoded per generator run (cache modes and -maxlen)")
	flagAnatomyPositions = flag.Int("anatomy-positions", 1, "-anatomy: positions of the timed step and its parts (more than 1: a prompt's chunk from position 0)")
)

// part is one timed program.
type part struct {
	name  string
	bytes int64 // read per token
	ms    float64
}

func anatomy() error {
	window, reps, positions := *flagAnatomyWindow, *flagAnatomyReps, *flagAnatomyPositions
	l, err := load()
	if err != nil {
		return err
	}
	m, ok := l.model.(*llama.Model)
	if !ok {
		return errors.Errorf("-anatomy times the parts of a Llama decoding step; %s is another architecture", *flagGGUF)
	}
	ctx := l.ctx.Reuse()
	if window > m.ContextLength || m.Heads*m.HeadDim != m.Dim {
		return errors.Errorf("-anatomy-window %d, context length %d, %d heads of %d for a width of %d: accepted: a window within the context, heads filling the width",
			window, m.ContextLength, m.Heads, m.HeadDim, m.Dim)
	}
	opts, err := generatorOptions(window)
	if err != nil {
		return err
	}
	cacheDType := opts.CacheDType
	cacheShape := shapes.Make(cacheDType, 1, m.KVHeads, window, m.HeadDim)
	newCaches := func() []*tensors.Tensor {
		out := make([]*tensors.Tensor, 2*m.Layers)
		for i := range out {
			out[i] = tensors.FromShape(cacheShape)
		}
		return out
	}
	pos := int32(window / 2)
	tokens := [][]int32{make([]int32, positions)}
	for i := range tokens[0] {
		tokens[0][i] = int32(42 + i)
	}
	if positions > 1 {
		pos = 0
	}
	hidden := func(rows int) *tensors.Tensor {
		x := tensors.FromShape(shapes.Make(dtypes.Float32, 1, rows, m.Dim))
		tensors.MustMutableFlatData(x, func(v []float32) {
			for i := range v {
				v[i] = float32(math.Sin(float64(i))) // hidden states of unit scale
			}
		})
		return x
	}
	x, x1 := hidden(positions), hidden(1)

	// timeWithCaches times a program whose inputs are head... then the caches, donated, and whose
	// outputs end with the caches (nOut outputs before them).
	timeWithCaches := func(name string, bytes int64, nOut int, fn func(ctx *context.Context, inputs []*Node) []*Node, head ...any) (part, error) {
		exec, err := context.NewExec(l.backend, ctx, func(ctx *context.Context, inputs []*Node) []*Node {
			out := fn(ctx, inputs)
			_ = customcall.AliasOutputs(inputs[len(head):], nOut) // updated in place, as the generator's caches
			return out
		})
		if err != nil {
			return part{}, err
		}
		defer exec.Finalize()
		caches := newCaches()
		run := func() error {
			args := append([]any{}, head...)
			for _, c := range caches {
				d, err := DonateTensorBuffer(c, l.backend, 0)
				if err != nil {
					return err
				}
				args = append(args, d)
			}
			out, err := exec.Exec(args...)
			if err != nil {
				return err
			}
			copy(caches, out[nOut:])
			for _, o := range out[:nOut] {
				if _, err := tensors.CopyFlatData[float32](o); err != nil { // bring the result to the host, as the generator does
					return err
				}
				_ = o.FinalizeAll()
			}
			return nil
		}
		ms, err := timeRuns(reps, run)
		return part{name, bytes, ms}, err
	}
	// timeOnce times a program without caches.
	timeOnce := func(name string, bytes int64, fn func(ctx *context.Context, x *Node) *Node, arg any) (part, error) {
		exec, err := context.NewExec(l.backend, ctx, fn)
		if err != nil {
			return part{}, err
		}
		defer exec.Finalize()
		ms, err := timeRuns(reps, func() error {
			out, err := exec.Exec(arg)
			if err != nil {
				return err
			}
			_, err = tensors.CopyFlatData[float32](out[0])
			_ = out[0].FinalizeAll()
			return err
		})
		return part{name, bytes, ms}, err
	}

	projBytes, headBytes := weightBytes(l.quantizer.Report(), m.TiedEmbeddings)
	cacheBytes := int64(2*m.Layers) * int64(m.KVHeads*(int(pos)+positions)*m.HeadDim*cacheDType.Size()) // the filled positions
	var parts []part
	add := func(p part, err error) error {
		if err == nil {
			parts = append(parts, p)
			fmt.Fprintf(os.Stderr, "%-22s %8.3f ms\n", p.name, p.ms)
		}
		return err
	}
	if err := add(timeWithCaches("step", projBytes+headBytes+cacheBytes, 1, func(ctx *context.Context, in []*Node) []*Node {
		cache := models.NewKVCache(in[1], window, in[3:])
		return append([]*Node{m.Step(ctx, in[0], in[2], cache)}, cache.Caches()...)
	}, tokens, pos, int32(positions-1))); err != nil {
		return err
	}
	if err := add(timeWithCaches("empty step", 0, 1, func(ctx *context.Context, in []*Node) []*Node {
		logits := Zeros(in[0].Graph(), shapes.Make(dtypes.Float32, 1, m.VocabSize))
		return append([]*Node{logits}, in[3:]...)
	}, tokens, pos, int32(positions-1))); err != nil {
		return err
	}
	if err := add(timeOnce("projections", projBytes, func(ctx *context.Context, x *Node) *Node {
		return projections(ctx, m, x)
	}, x)); err != nil {
		return err
	}
	if err := add(timeWithCaches("attention and cache", cacheBytes, 1, func(ctx *context.Context, in []*Node) []*Node {
		cache := models.NewKVCache(in[1], window, in[2:])
		return append([]*Node{attentionOnly(m, in[0], cache)}, cache.Caches()...)
	}, x, pos)); err != nil {
		return err
	}
	if err := add(timeWithCaches("cache writes", 0, 1, func(ctx *context.Context, in []*Node) []*Node {
		cache := models.NewKVCache(in[1], window, in[2:])
		kv := modelbase.SplitHeads(SliceAxis(in[0], -1, AxisRange(0, m.KVHeads*m.HeadDim)), m.KVHeads, m.HeadDim)
		for i := range m.Layers {
			cache.Update(i, kv, kv)
		}
		return append([]*Node{ReduceAllSum(kv)}, cache.Caches()...)
	}, x, pos)); err != nil {
		return err
	}
	if err := add(timeOnce("head", headBytes, func(ctx *context.Context, x *Node) *Node {
		return m.Logits(ctx, Reshape(x, 1, m.Dim))
	}, x1)); err != nil {
		return err
	}
	if err := add(timeOnce("lookup", 0, func(ctx *context.Context, tokens *Node) *Node {
		return m.Embed(ctx, tokens)
	}, tokens)); err != nil {
		return err
	}
	gbps := cpukernels.ReadBandwidth(512<<20) / 1e9
	fmt.Fprintf(os.Stderr, "%-22s %8.1f GB/s\n", "read bandwidth", gbps)

	host, err := hostPicks(m.VocabSize, reps)
	if err != nil {
		return err
	}
	rates, err := decodeRates(l, window)
	if err != nil {
		return err
	}

	fmt.Printf("Decode anatomy: %s, format %s, head %s, fused %v, %d position(s) from position %d, window %d, %d layers (median of %d runs; host read bandwidth %.1f GB/s)\n\n",
		l.backend.Name(), *flagFormat, headFormat(), m.FusedQKV || m.FusedGateUp, positions, pos, window, m.Layers, reps, gbps)
	fmt.Println("| part | ms per step | bytes read | at bandwidth (ms) | share of the step |")
	fmt.Println("|---|---|---|---|---|")
	step := parts[0].ms
	for _, p := range parts {
		limit := "—"
		if p.bytes > 0 {
			limit = fmt.Sprintf("%.3f", float64(p.bytes)/gbps/1e6)
		}
		fmt.Printf("| %s | %.3f | %.1f MB | %s | %.0f %% |\n", p.name, p.ms, float64(p.bytes)/1e6, limit, 100*p.ms/step)
	}
	for _, h := range host {
		fmt.Printf("| host: %s | %.3f | — | — | %.0f %% |\n", h.name, h.ms, 100*h.ms/step)
	}
	fmt.Printf("\nDecoding through models.Generator, %d tokens after \"The\" (median tokens/s of %d runs, modes interleaved):\n\n", *flagAnatomyTokens, max(3, reps/10))
	fmt.Println("| cache | maxlen | tokens/s |")
	fmt.Println("|---|---|---|")
	for _, r := range rates {
		fmt.Printf("| %s | %d | %.1f |\n", r.mode, r.maxLen, r.rate)
	}
	return nil
}

// weightBytes returns the weight bytes a decoding step's parts read per token, from the quantizer's
// report: the blocks' projections, and the output head's (the token-embedding table when tied to
// it, else the /lm_head kernel; the lookup reads a row of the table, left out).
func weightBytes(r qlayers.Report, tied bool) (projections, head int64) {
	table, lmHead := "/"+models.EmbeddingScope, "/"+models.HeadName+"/"+models.DenseScope
	for _, e := range r.Entries {
		switch {
		case e.Scope == table:
			if tied {
				head += e.BytesAfter()
			}
		case e.Scope == lmHead:
			if !tied {
				head += e.BytesAfter()
			}
		default:
			projections += e.BytesAfter()
		}
	}
	return projections, head
}

// projections chains the blocks' products as the blocks do, without norms, RoPE or attention:
// the query feeds the output projection (keys and values are summed into it, so that no product
// is left out of the program), the SwiGLU of gate and up feeds down.
func projections(ctx *context.Context, m *llama.Model, x *Node) *Node {
	project := m.Projection
	q, kv := m.Heads*m.HeadDim, m.KVHeads*m.HeadDim
	for i := range m.Layers {
		lctx := ctx.In(models.LayerScope(i))
		var qOut, kOut, vOut, gate, up *Node
		h := layers.RMSNorm(lctx.In(models.AttnNorm), x).WithEpsilon(m.RMSNormEps).Done() // without the norms the residual outgrows float32
		if m.FusedQKV {
			qkv := project(lctx, models.AttnQKV, h, q+2*kv, false)
			qOut, kOut, vOut = SliceAxis(qkv, -1, AxisRange(0, q)), SliceAxis(qkv, -1, AxisRange(q, q+kv)), SliceAxis(qkv, -1, AxisRange(q+kv, q+2*kv))
		} else {
			qOut, kOut, vOut = project(lctx, models.AttnQ, h, q, false), project(lctx, models.AttnK, h, kv, false), project(lctx, models.AttnV, h, kv, false)
		}
		qOut = Add(qOut, ExpandAxes(Add(ReduceSum(kOut, -1), ReduceSum(vOut, -1)), -1))
		x = Add(x, project(lctx, models.AttnOutput, qOut, m.Dim, false))
		h = layers.RMSNorm(lctx.In(models.FFNNorm), x).WithEpsilon(m.RMSNormEps).Done()
		if m.FusedGateUp {
			gu := project(lctx, models.FFNGateUp, h, 2*m.FFNDim, false)
			gate, up = SliceAxis(gu, -1, AxisRange(0, m.FFNDim)), SliceAxis(gu, -1, AxisRange(m.FFNDim, 2*m.FFNDim))
		} else {
			gate, up = project(lctx, models.FFNGate, h, m.FFNDim, false), project(lctx, models.FFNUp, h, m.FFNDim, false)
		}
		x = Add(x, project(lctx, models.FFNDown, Mul(Mul(gate, Sigmoid(gate)), up), m.Dim, false))
	}
	return x
}

// attentionOnly runs every layer's RoPE, cache write and attention with queries, keys and values
// taken from x [1, positions, Dim] (Heads·HeadDim = Dim), chaining the layers through x.
func attentionOnly(m *llama.Model, x *Node, cache *models.KVCache) *Node {
	hd, positions := m.HeadDim, x.Shape().Dim(1)
	mask := cache.Mask(positions)
	cos, sin := models.RoPETables(cache.Positions(positions), hd, m.RoPEBase)
	for i := range m.Layers {
		q := modelbase.SplitHeads(x, m.Heads, hd)
		k := modelbase.SplitHeads(SliceAxis(x, -1, AxisRange(0, m.KVHeads*hd)), m.KVHeads, hd)
		q, k = models.ApplyRoPE(q, cos, sin, false), models.ApplyRoPE(k, cos, sin, false)
		wk, wv := cache.Update(i, k, k)
		out := models.GroupedAttention(q, wk, wv, mask, 1/math.Sqrt(float64(hd)))
		x = Add(x, modelbase.MergeHeads(out))
	}
	return x
}

// hostPicks times the host's pick of a token from logits: greedy, and sampled with top-k 40 and
// top-p 0.95 (the repetition penalty over a 64-token history).
func hostPicks(vocab, reps int) ([]part, error) {
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(8 * math.Sin(float64(i)*0.7))
	}
	work := make([]float32, vocab)
	var out []part
	for _, tc := range []struct {
		name string
		s    models.Sampling
	}{
		{"greedy pick", models.Sampling{}},
		{"sampled pick (T 0.7, top-k 40, top-p 0.95, penalty 1.1)", models.Sampling{Temperature: 0.7, TopK: 40, TopP: 0.95, RepetitionPenalty: 1.1}},
		{"sampled pick (T 0.7, top-p 0.95)", models.Sampling{Temperature: 0.7, TopP: 0.95}},
	} {
		history := make([]int, 64)
		for i := range history {
			history[i] = i * 7
		}
		sp, err := models.NewSampler(tc.s, vocab, history)
		if err != nil {
			return nil, err
		}
		ms, err := timeRuns(reps, func() error {
			copy(work, logits)
			sp.Pick(work)
			return nil
		})
		if err != nil {
			return nil, err
		}
		out = append(out, part{name: tc.name, ms: ms})
	}
	return out, nil
}

// rateOf is one decoding-rate measurement.
type rateOf struct {
	mode   models.CacheMode
	maxLen int
	rate   float64
}

// decodeRates decodes -anatomy-tokens greedy tokens after "The" through models.Generator in both
// cache modes, at -maxlen and at a cache of window positions, the configurations interleaved,
// and returns the median decoding rate of each.
func decodeRates(l *loaded, window int) ([]rateOf, error) {
	first := l.tok.Encode("The", tokenizer.EncodeOptions{})
	maxLen := min(*flagMaxLen, l.model.DecodeSpec().ContextLength)
	opts, err := generatorOptions(maxLen)
	if err != nil {
		return nil, err
	}
	tokens := *flagAnatomyTokens
	var configs []rateOf
	for _, ml := range []int{maxLen, window} {
		if len(first)+tokens >= ml {
			return nil, errors.Errorf("-anatomy-tokens %d do not fit a cache of %d positions", tokens, ml)
		}
		for _, mode := range []models.CacheMode{models.GrowCache, models.FullCache} {
			configs = append(configs, rateOf{mode: mode, maxLen: ml})
		}
	}
	gens := make([]*models.Generator, len(configs))
	for i, c := range configs {
		opts.MaxLen, opts.Cache = c.maxLen, c.mode
		g, err := models.NewGenerator(l.backend, l.ctx, l.model, opts)
		if err != nil {
			return nil, err
		}
		defer g.Finalize()
		gens[i] = g
		if _, err := g.Generate(first, models.GenerateOptions{MaxNewTokens: tokens}); err != nil { // compiles
			return nil, err
		}
	}
	runs := max(3, *flagAnatomyReps/10)
	samples := make([][]float64, len(configs))
	for range runs {
		for i, g := range gens {
			if _, err := g.Generate(first, models.GenerateOptions{MaxNewTokens: tokens}); err != nil {
				return nil, err
			}
			samples[i] = append(samples[i], g.Stats().DecodeTokensPerSecond())
		}
	}
	for i := range configs {
		configs[i].rate = benchsuite.MedianOf(samples[i])
	}
	return configs, nil
}

// timeRuns runs f once untimed (compilation, first-touch), then reps times, and returns the
// median time in milliseconds.
func timeRuns(reps int, f func() error) (float64, error) {
	if err := f(); err != nil {
		return 0, err
	}
	times := make([]float64, reps)
	for i := range times {
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		times[i] = float64(time.Since(start).Microseconds()) / 1e3
	}
	return benchsuite.MedianOf(times), nil
}
