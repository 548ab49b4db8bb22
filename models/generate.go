package models

import (
	"fmt"
	"iter"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/xla"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"

	"github.com/quanta-ml/quanta/internal/customcall"
	"github.com/quanta-ml/quanta/internal/fileio"
)

// DecodeSpec is what a Generator needs to know of a decoder.
type DecodeSpec struct {
	// VocabSize is the number of tokens (the logits' width).
	VocabSize int
	// ContextLength is the longest sequence the model takes (0: no bound known).
	ContextLength int
	// Layers, KVHeads and HeadDim shape the key/value cache: per layer, keys and values
	// [batch, KVHeads, length, HeadDim].
	Layers, KVHeads, HeadDim int
}

// Decoder is a model that a Generator drives: a decoder with a key/value cache.
type Decoder interface {
	// DecodeSpec describes the model.
	DecodeSpec() DecodeSpec
	// Step runs tokens [batch, seq] (integer ids) at positions cache.Start().. against the cache,
	// writing their keys and values through cache.Update, and returns the logits
	// [batch, VocabSize] (float32) of the token at index last (a scalar int32 node, 0..seq-1).
	Step(ctx *context.Context, tokens, last *graph.Node, cache *KVCache) *graph.Node
}

// CacheMode is how a Generator keeps the key/value cache. In both modes a step attends over a
// window of the cache — the smallest of the windows MinWindow, 2·MinWindow, 4·MinWindow, ...,
// MaxLen that holds the filled positions — with one compiled step graph per window, so that a
// step's cost follows the filled positions, not MaxLen.
type CacheMode int

const (
	// GrowCache keeps cache tensors as long as the window, copied into the next window's when
	// they are full: memory follows the filled positions too.
	GrowCache CacheMode = iota
	// FullCache allocates cache tensors of MaxLen positions at the start of each generation; a
	// step writes in place and reads the window's leading positions.
	FullCache
)

// String returns "grow" or "full".
func (m CacheMode) String() string {
	switch m {
	case GrowCache:
		return "grow"
	case FullCache:
		return "full"
	}
	return fmt.Sprintf("CacheMode(%d)", int(m))
}

// ParseCacheMode returns the CacheMode named "grow" or "full".
func ParseCacheMode(s string) (CacheMode, error) {
	for _, m := range []CacheMode{GrowCache, FullCache} {
		if strings.EqualFold(strings.TrimSpace(s), m.String()) {
			return m, nil
		}
	}
	return 0, errors.Errorf("models.ParseCacheMode(%q): accepted: grow, full", s)
}

// ParseCacheDType returns the cache element type (GeneratorOptions.CacheDType) named "float32"
// or "float16" (also "f32", "f16").
func ParseCacheDType(s string) (dtypes.DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "float32", "f32":
		return dtypes.Float32, nil
	case "float16", "f16":
		return dtypes.Float16, nil
	}
	return dtypes.InvalidDType, errors.Errorf("models.ParseCacheDType(%q): accepted: float32 (f32), float16 (f16)", s)
}

// DefaultMinWindow is the smallest attention window of a Generator unless GeneratorOptions say.
const DefaultMinWindow = 64

// GeneratorOptions are the options of NewGenerator.
type GeneratorOptions struct {
	// MaxLen is the longest sequence (prompt and generated tokens), 2 (a prompt token and a
	// generated one)..the model's ContextLength, and small enough that the caches of MaxLen
	// positions have a byte count within int64.
	MaxLen int
	// MinWindow is the smallest attention window (0: DefaultMinWindow); the windows double from
	// it up to MaxLen.
	MinWindow int
	// Cache is how the cache is kept (the zero value: GrowCache).
	Cache CacheMode
	// CacheDType is the cache's element type: dtypes.Float32 (the zero value) or dtypes.Float16
	// (on a backend that has it: XLA), which halves the bytes a step's attention reads (llama.cpp's
	// default cache type) and rounds each key and value to the nearest half.
	CacheDType dtypes.DType
}

// GenerateOptions are the options of Generate and Stream.
type GenerateOptions struct {
	// MaxNewTokens bounds the generated tokens (0: until MaxLen).
	MaxNewTokens int
	// Stop lists token ids that end the generation (e.g. the EOS token), each in
	// 0..VocabSize-1; the stop token is produced.
	Stop []int
	// Sampling picks each token (the zero value: greedy).
	Sampling Sampling
}

// GenerateStats are the timings of a generation: the prompt step, the decoding steps (one per
// token after the first, each with its host work: sampling, and in GrowCache mode the copies into
// a longer cache) and the compilations, timed apart from both.
type GenerateStats struct {
	PromptTokens   int
	PromptSeconds  float64
	DecodeSteps    int
	DecodeSeconds  float64
	Compilations   int
	CompileSeconds float64
}

// PromptTokensPerSecond is PromptTokens / PromptSeconds (0 without a prompt step).
func (s GenerateStats) PromptTokensPerSecond() float64 { return rate(s.PromptTokens, s.PromptSeconds) }

// DecodeTokensPerSecond is DecodeSteps / DecodeSeconds (0 without a decoding step).
func (s GenerateStats) DecodeTokensPerSecond() float64 { return rate(s.DecodeSteps, s.DecodeSeconds) }

func rate(n int, seconds float64) float64 {
	if n == 0 || seconds <= 0 {
		return 0
	}
	return float64(n) / seconds
}

// Generator decodes with a Decoder and a key/value cache: the prompt in one step (its length
// rounded up to a power of two from 16, or to MaxLen below it, so that few prompt lengths
// compile), then one step per
// token, the cache buffers donated from step to step. Step graphs are compiled once per window
// (see CacheMode) and prompt length, and kept. A Generator is not safe for concurrent use.
type Generator struct {
	backend backends.Backend
	ctx     *context.Context
	model   Decoder
	spec    DecodeSpec
	opts    GeneratorOptions
	windows []int

	steps    map[int]*context.Exec // by window
	grows    map[int]*graph.Exec   // GrowCache: by new length
	empties  map[int]*graph.Exec   // the caches' zeros: by length
	compiled map[[3]int]bool       // step shapes compiled: tokens, window, cache length
	stats    GenerateStats
}

// NewGenerator prepares decoding with model, whose parameters are in ctx (used as ctx.Reuse()).
func NewGenerator(backend backends.Backend, ctx *context.Context, model Decoder, opts GeneratorOptions) (*Generator, error) {
	spec := model.DecodeSpec()
	if spec.VocabSize < 1 || spec.Layers < 1 || spec.KVHeads < 1 || spec.HeadDim < 1 {
		return nil, errors.Errorf("models.NewGenerator: decoder %+v; accepted: a positive vocabulary, layers, key/value heads and head width", spec)
	}
	limit, what := spec.ContextLength, "the context length"
	if limit <= 0 {
		// Unknown: bounded as a context length read from a file is, so that the windows, doubling
		// up to MaxLen, cannot overflow int (an endless loop).
		limit, what = fileio.MaxCount, "the context length is unknown"
	}
	if opts.MaxLen < 2 || opts.MaxLen > limit {
		return nil, errors.Errorf("models.NewGenerator: MaxLen %d; accepted: 2 (a prompt token and a generated one)..%d (%s)",
			opts.MaxLen, limit, what)
	}
	if opts.MinWindow == 0 {
		opts.MinWindow = DefaultMinWindow
	}
	if opts.MinWindow < 1 {
		return nil, errors.Errorf("models.NewGenerator: MinWindow %d; accepted: >= 1 (0: %d)", opts.MinWindow, DefaultMinWindow)
	}
	if opts.Cache != GrowCache && opts.Cache != FullCache {
		return nil, errors.Errorf("models.NewGenerator: Cache %s; accepted: GrowCache, FullCache", opts.Cache)
	}
	if opts.CacheDType == dtypes.InvalidDType {
		opts.CacheDType = dtypes.Float32
	}
	if opts.CacheDType != dtypes.Float32 && opts.CacheDType != dtypes.Float16 {
		return nil, errors.Errorf("models.NewGenerator: CacheDType %s; accepted: Float32 (the zero value), Float16", opts.CacheDType)
	}
	if !hasDType(backend, opts.CacheDType) {
		return nil, errors.Errorf("models.NewGenerator: CacheDType %s on backend %s, which has no %s; accepted: Float32",
			opts.CacheDType, backend.Name(), opts.CacheDType)
	}
	// The caches of MaxLen positions must have a byte count: XLA aborts the process, past any
	// recover, on a shape whose element count overflows int64.
	if _, ok := fileio.Elements([]int{2, spec.Layers, spec.KVHeads, opts.MaxLen, spec.HeadDim},
		math.MaxInt64/uint64(opts.CacheDType.Size())); !ok {
		return nil, errors.Errorf("models.NewGenerator: MaxLen %d: caches of 2 × %d layers × %d key/value heads × %d positions × %d "+
			"values of %s overflow int64 bytes; accepted: a MaxLen that keeps them within it", opts.MaxLen, spec.Layers, spec.KVHeads,
			opts.MaxLen, spec.HeadDim, opts.CacheDType)
	}
	g := &Generator{backend: backend, ctx: ctx.Reuse(), model: model, spec: spec, opts: opts,
		steps: map[int]*context.Exec{}, grows: map[int]*graph.Exec{}, empties: map[int]*graph.Exec{}, compiled: map[[3]int]bool{}}
	for w := opts.MinWindow; w < opts.MaxLen; w *= 2 {
		g.windows = append(g.windows, w)
	}
	g.windows = append(g.windows, opts.MaxLen)
	return g, nil
}

// hasDType reports whether backend runs dtype: its capabilities say so, or it is XLA, which runs
// float16 though GoMLX's capabilities omit it.
func hasDType(backend backends.Backend, dtype dtypes.DType) bool {
	_, isXLA := backend.(*xla.Backend)
	return backend.Capabilities().DTypes[dtype] || (isXLA && dtype == dtypes.Float16)
}

// MaxLen returns the longest sequence (prompt and generated tokens) the generator holds.
func (g *Generator) MaxLen() int { return g.opts.MaxLen }

// Windows returns the attention windows, increasing (the last is MaxLen).
func (g *Generator) Windows() []int { return append([]int(nil), g.windows...) }

// Stats returns the timings of the last generation (Generate or Stream).
func (g *Generator) Stats() GenerateStats { return g.stats }

// Finalize releases the compiled graphs.
func (g *Generator) Finalize() {
	for _, e := range g.steps {
		e.Finalize()
	}
	for _, e := range g.grows {
		e.Finalize()
	}
	for _, e := range g.empties {
		e.Finalize()
	}
	g.steps, g.grows, g.empties, g.compiled = map[int]*context.Exec{}, map[int]*graph.Exec{}, map[int]*graph.Exec{}, map[[3]int]bool{}
}

// Generate returns the continuation of prompt (ids without the prompt) as opts say.
func (g *Generator) Generate(prompt []int, opts GenerateOptions) ([]int, error) {
	var out []int
	for id, err := range g.Stream(prompt, opts) {
		if err != nil {
			return out, err
		}
		out = append(out, id)
	}
	return out, nil
}

// Stream yields the continuation of prompt token by token as each is chosen (before the next
// step runs); breaking out of the loop ends the generation. An error is yielded once, last.
func (g *Generator) Stream(prompt []int, opts GenerateOptions) iter.Seq2[int, error] {
	return func(yield func(int, error) bool) {
		if err := g.stream(prompt, opts, yield); err != nil {
			yield(0, err)
		}
	}
}

// decodeState is one generation's cache.
type decodeState struct {
	caches []*tensors.Tensor
	window int
}

func (st *decodeState) release() {
	for _, c := range st.caches {
		if c != nil && c.Ok() {
			_ = c.FinalizeAll()
		}
	}
}

func (g *Generator) stream(prompt []int, opts GenerateOptions, yield func(int, error) bool) error {
	g.stats = GenerateStats{}
	n, maxLen := len(prompt), g.opts.MaxLen
	if n == 0 || n >= maxLen {
		return errors.Errorf("models.Generator: prompt of %d tokens; accepted: 1..%d (MaxLen-1)", n, maxLen-1)
	}
	for _, id := range prompt {
		if id < 0 || id >= g.spec.VocabSize {
			return errors.Errorf("models.Generator: token id %d outside the vocabulary of %d", id, g.spec.VocabSize)
		}
	}
	if opts.MaxNewTokens < 0 {
		return errors.Errorf("models.Generator: MaxNewTokens %d; accepted: >= 0 (0: until MaxLen)", opts.MaxNewTokens)
	}
	if err := opts.Sampling.Validate(); err != nil {
		return errors.WithMessage(err, "models.Generator")
	}
	stop := map[int]bool{}
	for _, id := range opts.Stop {
		if id < 0 || id >= g.spec.VocabSize {
			return errors.Errorf("models.Generator: stop id %d outside the vocabulary of %d (it could never end the generation)", id, g.spec.VocabSize)
		}
		stop[id] = true
	}
	// The prompt, padded to a bucket: the padding's keys land after the prompt in the cache and
	// are overwritten by the generated tokens before any query can see them.
	bucket := 16
	for bucket < n {
		bucket *= 2
	}
	if bucket > maxLen {
		bucket = maxLen // one graph for every prompt past the last power of two
	}
	st := &decodeState{window: g.windowFor(bucket)}
	defer st.release()
	length := st.window
	if g.opts.Cache == FullCache {
		length = maxLen
	}
	caches, err := g.emptyCaches(length)
	if err != nil {
		return err
	}
	st.caches = caches
	tokens := make([]int32, bucket)
	for i, id := range prompt {
		tokens[i] = int32(id)
	}
	start, compiled := time.Now(), g.stats.CompileSeconds
	logits, err := g.step(st, tokens, 0, n-1)
	if err != nil {
		return err
	}
	g.stats.PromptTokens, g.stats.PromptSeconds = n, time.Since(start).Seconds()-(g.stats.CompileSeconds-compiled)
	limit := maxLen - n
	if opts.MaxNewTokens > 0 {
		limit = min(limit, opts.MaxNewTokens)
	}
	sp, err := NewSampler(opts.Sampling, g.spec.VocabSize, prompt)
	if err != nil {
		return errors.WithMessage(err, "models.Generator")
	}
	for pos, produced := n, 0; ; pos++ {
		if slices.ContainsFunc(logits, func(l float32) bool { return l != l }) {
			why := "the model's weights or activations are not finite"
			if g.opts.CacheDType == dtypes.Float16 {
				why += ", or a key or value beyond float16's ±65504 (CacheDType float16; float32 holds it)"
			}
			return errors.Errorf("models.Generator: the logits at position %d hold a NaN: %s", pos, why)
		}
		next := sp.Pick(logits)
		produced++
		if !yield(next, nil) || stop[next] || produced == limit {
			return nil
		}
		start, compiled := time.Now(), g.stats.CompileSeconds
		if pos+1 > st.window {
			if err := g.widen(st, g.windowFor(pos+1)); err != nil {
				return err
			}
		}
		if logits, err = g.step(st, []int32{int32(next)}, pos, 0); err != nil {
			return err
		}
		g.stats.DecodeSteps++
		g.stats.DecodeSeconds += time.Since(start).Seconds() - (g.stats.CompileSeconds - compiled)
	}
}

// windowFor returns the smallest window that holds n positions.
func (g *Generator) windowFor(n int) int {
	for _, w := range g.windows {
		if w >= n {
			return w
		}
	}
	return g.opts.MaxLen
}

// emptyCaches returns the key/value caches of length positions, zeros made by the backend: zeros
// made on the host are copied to the device, and both copies stay until the garbage collector
// frees the first (twice a full cache's memory).
func (g *Generator) emptyCaches(length int) ([]*tensors.Tensor, error) {
	exec := g.empties[length]
	if exec == nil {
		shape := shapes.Make(g.opts.CacheDType, 1, g.spec.KVHeads, length, g.spec.HeadDim)
		var err error
		exec, err = graph.NewExec(g.backend, func(gr *graph.Graph) []*graph.Node {
			out := make([]*graph.Node, 2*g.spec.Layers)
			for i := range out {
				out[i] = graph.Zeros(gr, shape)
			}
			return out
		})
		if err != nil {
			return nil, errors.WithMessage(err, "models.Generator: the empty cache")
		}
		exec = exec.WithName(fmt.Sprintf("models.Generator.empty%d", length))
		if err := g.compile(exec.PreCompile); err != nil {
			return nil, err
		}
		g.empties[length] = exec
	}
	caches, err := exec.Exec()
	return caches, errors.WithMessage(err, "models.Generator: the empty cache")
}

// compile runs precompile with args, counted and timed as a compilation.
func (g *Generator) compile(precompile func(...any) error, args ...any) error {
	start := time.Now()
	if err := precompile(args...); err != nil {
		return errors.WithMessage(err, "models.Generator: compiling")
	}
	g.stats.Compilations++
	g.stats.CompileSeconds += time.Since(start).Seconds()
	return nil
}

// widen moves st to a larger window: in GrowCache mode the caches are copied into tensors of the
// new window's length.
func (g *Generator) widen(st *decodeState, window int) error {
	st.window = window
	if g.opts.Cache == FullCache {
		return nil
	}
	exec := g.grows[window]
	if exec == nil {
		var err error
		exec, err = graph.NewExec(g.backend, func(caches []*graph.Node) []*graph.Node {
			out := make([]*graph.Node, len(caches))
			for i, c := range caches {
				dims := c.Shape().Clone().Dimensions
				dims[2] = window - dims[2]
				out[i] = graph.Concatenate([]*graph.Node{c, graph.Zeros(c.Graph(), shapes.Make(c.DType(), dims...))}, 2)
			}
			return out
		})
		if err != nil {
			return errors.WithMessage(err, "models.Generator: the cache copy")
		}
		g.grows[window] = exec.WithName(fmt.Sprintf("models.Generator.grow%d", window))
	}
	args, err := g.cacheArgs(st, exec.PreCompile)
	if err != nil {
		return err
	}
	out, err := exec.Exec(args...)
	if err != nil {
		return errors.WithMessage(err, "models.Generator: the cache copy")
	}
	copy(st.caches, out)
	return nil
}

// cacheArgs compiles (when first seen, timed as compilation) with the cache tensors as they
// are, then returns them donated.
func (g *Generator) cacheArgs(st *decodeState, precompile func(...any) error, head ...any) ([]any, error) {
	key := [3]int{-1, st.window, st.caches[0].Shape().Dim(2)}
	if len(head) > 0 {
		key[0] = len(head[0].([][]int32)[0])
	}
	if !g.compiled[key] {
		if err := g.compile(precompile, append(append([]any{}, head...), tensorsAsAny(st.caches)...)...); err != nil {
			return nil, err
		}
		g.compiled[key] = true
	}
	args := append([]any{}, head...)
	for _, c := range st.caches {
		d, err := graph.DonateTensorBuffer(c, g.backend, 0)
		if err != nil {
			return nil, errors.WithMessage(err, "models.Generator: donating the cache")
		}
		args = append(args, d)
	}
	return args, nil
}

func tensorsAsAny(ts []*tensors.Tensor) []any {
	out := make([]any, len(ts))
	for i, t := range ts {
		out[i] = t
	}
	return out
}

// step runs one Step graph on tokens at positions start.., returning the logits of index last;
// the cache buffers are donated and replaced with the outputs.
func (g *Generator) step(st *decodeState, tokens []int32, start, last int) ([]float32, error) {
	exec := g.steps[st.window]
	if exec == nil {
		window := st.window
		var err error
		exec, err = context.NewExec(g.backend, g.ctx, func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
			cache := NewKVCache(inputs[1], window, inputs[3:])
			logits := g.model.Step(ctx, inputs[0], inputs[2], cache)
			_ = customcall.AliasOutputs(inputs[3:], 1) // caches updated in place (other backends copy them)
			return append([]*graph.Node{logits}, cache.Caches()...)
		})
		if err != nil {
			return nil, errors.WithMessage(err, "models.Generator")
		}
		g.steps[window] = exec.WithName(fmt.Sprintf("models.Generator.step%d", window))
	}
	args, err := g.cacheArgs(st, exec.PreCompile, [][]int32{tokens}, int32(start), int32(last))
	if err != nil {
		return nil, err
	}
	outputs, err := exec.Exec(args...)
	if err != nil {
		return nil, errors.WithMessage(err, "models.Generator")
	}
	copy(st.caches, outputs[1:])
	logits, err := tensors.CopyFlatData[float32](outputs[0])
	_ = outputs[0].FinalizeAll()
	if err == nil && len(logits) != g.spec.VocabSize {
		err = errors.Errorf("the step returned %d logits for a vocabulary of %d", len(logits), g.spec.VocabSize)
	}
	return logits, errors.WithMessage(err, "models.Generator")
}
