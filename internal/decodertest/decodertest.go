// Package decodertest holds what the tests of the GGUF decoders (models/llama, models/gemma3,
// models/qwen2) share: small GGUF files written from values (Values, Metadata, Override, Tensor,
// Open) and loaded (Load), the real ones (OpenFile) loaded through a preset's quantizer (Quantizer), the
// reference's arrays (Reference, ReferenceLogits, ReferenceIDs) with the tiny models llama.cpp
// ran for them (TinyIndex, FormulaValues), a model's logits (Forward, MaxAbsDiff,
// RelativeDiff, SameLogits) and scores (NLL), and the checks every decoder passes: a failed load
// (WantLoadError), bad hyper-parameters (DecoderBadKeys, CheckBadKeys), a fuzzed load
// (CheckFuzzed, CheckFuzzedLoad), an invalid configuration (CheckInvalidConfigs), a chunked Step
// against Forward (StepMatchesForward) and greedy decoding against Forward
// (GreedyMatchesForward). It is apart from internal/testutil, which the tests of the packages
// below models use: it imports models and refdata.
package decodertest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/refdata"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
)

// Values returns n deterministic values in [-0.5, 0.5].
func Values(seed, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(0.5 * math.Sin(float64(seed)*1.7+float64(i)*0.37))
	}
	return out
}

// Metadata returns the GGUF metadata of a decoder of architecture arch with the hyper-parameters
// d (modelbase.ReadDecoder's keys; the vocabulary size as arch.vocab_size), then extra.
func Metadata(arch string, d models.DecoderConfig, extra ...ggufbuild.KV) []ggufbuild.KV {
	return append([]ggufbuild.KV{
		{Key: "general.architecture", Value: arch},
		{Key: arch + ".block_count", Value: uint32(d.Layers)},
		{Key: arch + ".embedding_length", Value: uint32(d.Dim)},
		{Key: arch + ".feed_forward_length", Value: uint32(d.FFNDim)},
		{Key: arch + ".attention.head_count", Value: uint32(d.Heads)},
		{Key: arch + ".attention.head_count_kv", Value: uint32(d.KVHeads)},
		{Key: arch + ".context_length", Value: uint32(d.ContextLength)},
		{Key: arch + ".vocab_size", Value: uint32(d.VocabSize)},
		{Key: arch + ".rope.freq_base", Value: float32(d.RoPEBase)},
		{Key: arch + ".attention.layer_norm_rms_epsilon", Value: float32(d.RMSNormEps)},
	}, extra...)
}

// Tensor returns the GGUF tensor name of GGML dims holding v: float32 when typ is gguf.TypeF32
// (the zero Type), otherwise quantized to the block type typ.
func Tensor(name string, typ gguf.Type, v []float32, dims ...uint64) ggufbuild.Tensor {
	if typ == gguf.TypeF32 {
		return ggufbuild.F32Tensor(name, v, dims...)
	}
	data := make([]byte, len(v)/typ.BlockSize()*typ.BlockBytes())
	if err := gguf.Quantize(typ, v, data); err != nil {
		panic(err)
	}
	return ggufbuild.Tensor{Name: name, Type: uint32(typ), Dims: dims, Data: data}
}

// Open reads a GGUF file from its bytes.
func Open(t testing.TB, data []byte) *gguf.File {
	t.Helper()
	return testutil.FromBytes(t, gguf.Read, data)
}

// Load loads the GGUF file data with load (the package's LoadGGUF) and opts into a fresh context,
// failing the test on an error; it returns the context and the model.
func Load[O, M any](t testing.TB, load func(ctx *context.Context, f *gguf.File, opts O) (M, error), data []byte, opts O) (*context.Context, M) {
	t.Helper()
	ctx := context.New()
	m, err := load(ctx, Open(t, data), opts)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, m
}

// OpenFile opens the GGUF file at path, closed when the test ends.
func OpenFile(t testing.TB, path string) *gguf.File {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// Quantizer returns a quantizer of the rules of models.Preset(preset).
func Quantizer(t testing.TB, preset string) *models.Quantizer {
	t.Helper()
	rules, err := models.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	return models.MustNewQuantizer(rules)
}

// Reference loads an array of the reference directory (refdata.Load), e.g.
// Reference(t, "smollm2", "nll_f32.npy").
func Reference(t testing.TB, elem ...string) refdata.Array {
	t.Helper()
	a, err := refdata.Load(elem...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// ReferenceLogits reads the logits [seq][vocab] of the reference set's file, e.g.
// ReferenceLogits(t, "llamacpp_qwen2", "logits.npy").
func ReferenceLogits(t testing.TB, set, file string) [][]float32 {
	t.Helper()
	l := Reference(t, set, file)
	logits := make([][]float32, l.Dims[0])
	for p := range logits {
		logits[p] = make([]float32, l.Dims[1])
		for j, v := range l.Row(p) {
			logits[p][j] = float32(v)
		}
	}
	return logits
}

// ReferenceIDs reads the token ids of the reference set's file (e.g. "ids.npy").
func ReferenceIDs(t testing.TB, set, file string) []int32 {
	t.Helper()
	a, err := refdata.Ints(set, file)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, len(a))
	for i, v := range a {
		ids[i] = int32(v)
	}
	return ids
}

// splitmix64 is the generator of reference/tiny_gguf.py.
func splitmix64(x uint64) uint64 {
	z := x + 0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// FormulaValues are reference/tiny_gguf.py's values(name, n, scale, offset), the weights of
// the tiny models that llama.cpp ran for the references (gen_rope_freqs.py, gen_qwen2.py):
// offset + scale·u, u = (the top 24 bits of splitmix64(crc32(name) << 32 | i) − 2^23) / 2^24;
// scale a power of two, so that every operation is exact and both sides give the same bits.
func FormulaValues(name string, n int, scale, offset float64) []float32 {
	seed := uint64(crc32.ChecksumIEEE([]byte(name))) << 32
	out := make([]float32, n)
	for i := range out {
		u := float64(int64(splitmix64(seed|uint64(i))>>40)-1<<23) / (1 << 24)
		out[i] = float32(offset + scale*u)
	}
	return out
}

// TinyIndex is the part of a tiny-model reference's index.json (reference/tiny_gguf.py) the tests
// read: the model's configuration and, in the file's order, each tensor's name, numpy shape and
// the sha256 of its float32 data.
type TinyIndex struct {
	Config struct {
		Vocab   int     `json:"vocab_size"`
		Dim     int     `json:"embedding_length"`
		Layers  int     `json:"block_count"`
		Heads   int     `json:"head_count"`
		KVHeads int     `json:"head_count_kv"`
		HeadDim int     `json:"head_dim"`
		FFN     int     `json:"feed_forward_length"`
		Context int     `json:"context_length"`
		Eps     float64 `json:"layer_norm_rms_epsilon"`
		Base    float64 `json:"rope_freq_base"`
	} `json:"config"`
	Tensors []struct {
		Name   string `json:"name"`
		Shape  []int  `json:"shape"`
		SHA256 string `json:"sha256"`
	} `json:"tensors"`
}

// LoadTinyIndex reads the index of the reference set, skipping the test when it is absent.
func LoadTinyIndex(t testing.TB, set string) TinyIndex {
	t.Helper()
	var index TinyIndex
	if err := refdata.JSON(&index, set, "index.json"); err != nil {
		t.Skip(err)
	}
	return index
}

// DecoderConfig is the index's configuration.
func (x TinyIndex) DecoderConfig() models.DecoderConfig {
	c := x.Config
	return models.DecoderConfig{VocabSize: c.Vocab, Dim: c.Dim, Layers: c.Layers, Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim,
		FFNDim: c.FFN, ContextLength: c.Context, RMSNormEps: c.Eps, RoPEBase: c.Base}
}

// TinyTensors builds the tensors the index lists, in its order, but those skip names: each from
// FormulaValues by tiny_gguf.py's rule (the embedding table and biases scale 1; norms scale 0.5
// offset 1; the kernels scale 0.5), checked against the sha256 the reference recorded, the
// kernels then stored in block type kernels (F32: as llama.cpp ran them).
func (x TinyIndex) TinyTensors(t testing.TB, kernels gguf.Type, skip func(name string) bool) []ggufbuild.Tensor {
	t.Helper()
	var ts []ggufbuild.Tensor
	for _, ref := range x.Tensors {
		if skip != nil && skip(ref.Name) {
			continue
		}
		n := 1
		dims := make([]uint64, len(ref.Shape))
		for i, d := range ref.Shape {
			n *= d
			dims[len(dims)-1-i] = uint64(d)
		}
		scale, offset, kernel := 0.5, 0.0, false
		switch {
		case ref.Name == "token_embd.weight" || strings.HasSuffix(ref.Name, ".bias"):
			scale = 1
		case strings.HasSuffix(ref.Name, "norm.weight"):
			offset = 1
		default:
			kernel = true
		}
		v := FormulaValues(ref.Name, n, scale, offset)
		tensor := ggufbuild.F32Tensor(ref.Name, v, dims...)
		if sum := sha256.Sum256(tensor.Data); hex.EncodeToString(sum[:]) != ref.SHA256 {
			t.Fatalf("tensor %s: sha256 %x, the reference's %s: not the weights llama.cpp ran", ref.Name, sum, ref.SHA256)
		}
		if kernel && kernels != gguf.TypeF32 {
			tensor = Tensor(ref.Name, kernels, v, dims...)
		}
		ts = append(ts, tensor)
	}
	return ts
}

// RelativeDiff returns the largest difference of got from want [seq][vocab] relative to the
// largest magnitude of want's row, and the largest absolute difference.
func RelativeDiff(got, want [][]float32) (rel, abs float64) {
	for p := range want {
		scale := 0.0
		for _, v := range want[p] {
			scale = math.Max(scale, math.Abs(float64(v)))
		}
		d := MaxAbsDiff(got[p], want[p])
		rel, abs = math.Max(rel, d/scale), math.Max(abs, d)
	}
	return rel, abs
}

// Forward returns m.Forward's logits for one sequence, [seq][vocab].
func Forward(t testing.TB, backend backends.Backend, ctx *context.Context, m models.LanguageModel, tokens []int32) [][]float32 {
	t.Helper()
	out := context.MustExecOnce(backend, ctx.Reuse(), func(ctx *context.Context, tokens *graph.Node) *graph.Node {
		return m.Forward(ctx, tokens)
	}, [][]int32{tokens})
	return out.Value().([][][]float32)[0]
}

// NLL scores ids over windows with m (models.Evaluator): the negative log-likelihood of each
// target.
func NLL(t testing.TB, backend backends.Backend, ctx *context.Context, m models.LanguageModel, ids []int, windows []models.Window) []float64 {
	t.Helper()
	e, err := models.NewEvaluator(backend, ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Finalize()
	nll, err := e.NLL(ids, windows)
	if err != nil {
		t.Fatal(err)
	}
	return nll
}

// MaxAbsDiff returns the largest |a[i] − b[i]|.
func MaxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// SameLogits reports each position where the logits got differ from want by more than 1e-4, as
// "position p: <differs> by <d>".
func SameLogits(t testing.TB, differs string, got, want [][]float32) {
	t.Helper()
	for p := range want {
		if d := MaxAbsDiff(got[p], want[p]); d > 1e-4 {
			t.Errorf("position %d: %s by %g", p, differs, d)
		}
	}
}

// WantLoadError runs load, which loads into the context it is given, on a new context within
// 16 MiB of allocations, and checks that it fails with an error containing want that wraps
// gguf.ErrNotFound exactly when notFound, leaving the context without variables; it returns the
// error.
func WantLoadError(t *testing.T, load func(ctx *context.Context) error, want string, notFound bool) error {
	t.Helper()
	ctx := context.New()
	var err error
	testutil.AllocatesAtMost(t, "LoadGGUF", 16<<20, func() { err = load(ctx) })
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v; want one containing %q", err, want)
	}
	if notFound != errors.Is(err, gguf.ErrNotFound) {
		t.Errorf("errors.Is(%v, gguf.ErrNotFound) = %v, want %v", err, !notFound, notFound)
	}
	if ctx.NumVariables() != 0 {
		t.Errorf("the failed load left %d variables", ctx.NumVariables())
	}
	return err
}

// BadKey is a hyper-parameter of a small GGUF file set to a hostile or broken value, and the
// error it must give: one containing Want, wrapping gguf.ErrNotFound exactly when NotFound.
type BadKey struct {
	Name     string
	KV       ggufbuild.KV
	Want     string
	NotFound bool
}

// Bad returns the BadKey called name: key set to v, an error containing want.
func Bad(name, key string, v any, want string) BadKey {
	return BadKey{Name: name, KV: ggufbuild.KV{Key: key, Value: v}, Want: want}
}

// DecoderBadKeys returns the bad values of the keys every decoder of architecture arch reads
// (modelbase.ReadDecoder) whose errors do not depend on the file's other values.
func DecoderBadKeys(arch string) []BadKey {
	nan32 := float32(math.NaN())
	count := func(name string, v uint32) BadKey {
		key := arch + "." + name
		return Bad(fmt.Sprintf("%s %d", name, v), key, v, fmt.Sprintf("%s = %d; accepted: 1 to 2147483647", key, v))
	}
	float := func(name, short string, v float32, accepted string) BadKey {
		key := arch + "." + name
		return Bad(fmt.Sprintf("%s %g", short, v), key, v, fmt.Sprintf("%s = %g; accepted: %s", key, v, accepted))
	}
	const eps, positive, aboveOne = "attention.layer_norm_rms_epsilon", "a finite number above 0", "a finite number above 1"
	return []BadKey{
		count("block_count", 1<<31), count("block_count", 0),
		count("attention.head_count", 0), count("attention.head_count_kv", 0),
		count("embedding_length", 0), count("feed_forward_length", 0),
		count("vocab_size", math.MaxUint32), count("context_length", 0),
		float(eps, "epsilon", nan32, positive), float(eps, "epsilon", float32(math.Inf(1)), positive),
		float(eps, "epsilon", 0, positive),
		float("rope.freq_base", "freq_base", nan32, aboveOne), float("rope.freq_base", "freq_base", 1, aboveOne),
	}
}

// CheckBadKeys checks each case on the file that file writes with the case's key: the load (the
// package's LoadGGUF, given its zero options) fails as WantLoadError checks, and config (its
// ConfigFromGGUF) with an error containing the same text.
func CheckBadKeys[O, M, C any](t *testing.T, cases []BadKey, file func(kv ggufbuild.KV) []byte,
	load func(ctx *context.Context, f *gguf.File, opts O) (M, error), config func(f *gguf.File) (C, error)) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			f := Open(t, file(tc.KV))
			WantLoadError(t, func(ctx *context.Context) error {
				var opts O
				_, err := load(ctx, f, opts)
				return err
			}, tc.Want, tc.NotFound)
			if _, err := config(f); err == nil || !strings.Contains(err.Error(), tc.Want) {
				t.Errorf("ConfigFromGGUF: error %v; want one containing %q", err, tc.Want)
			}
		})
	}
}

// Validator is a configuration, or a model that has one.
type Validator interface{ Validate() error }

// CheckFuzzed reads arbitrary bytes as a GGUF file and, where that succeeds, checks that the
// configuration (config) and each load either fail with an error, a load leaving its context
// without variables, or give a valid configuration. Callers bound its allocations
// (testutil.AllocatesAtMost).
func CheckFuzzed(t *testing.T, data []byte, config func(f *gguf.File) (Validator, error),
	loads ...func(ctx *context.Context, f *gguf.File) (Validator, error)) {
	file, err := gguf.Read(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return
	}
	if cfg, err := config(file); err == nil {
		if err := cfg.Validate(); err != nil {
			t.Fatalf("ConfigFromGGUF returned an invalid configuration: %v", err)
		}
	}
	for _, load := range loads {
		ctx := context.New()
		m, err := load(ctx, file)
		if err != nil {
			if ctx.NumVariables() != 0 {
				t.Fatalf("a failed load (%v) left %d variables", err, ctx.NumVariables())
			}
			continue
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("LoadGGUF returned an invalid configuration: %v", err)
		}
	}
}

// CheckFuzzedLoad is CheckFuzzed for a decoder loaded with models.LoadOptions (models/gemma3,
// models/qwen2): the configuration, then the load as the file says (no options) and with every
// tensor kept as stored (the "file" preset's quantizer, fusing).
func CheckFuzzedLoad[C, M Validator](t *testing.T, data []byte, config func(f *gguf.File) (C, error),
	load func(ctx *context.Context, f *gguf.File, opts models.LoadOptions) (M, error)) {
	loadWith := func(keep bool) func(ctx *context.Context, f *gguf.File) (Validator, error) {
		return func(ctx *context.Context, f *gguf.File) (Validator, error) {
			opts := models.LoadOptions{}
			if keep {
				q := Quantizer(t, models.FilePreset)
				opts = models.LoadOptions{Kernel: q.Kernel, Table: q.QuantizeTable, Keep: q, Fuse: q.Fuse}
			}
			return load(ctx, f, opts)
		}
	}
	CheckFuzzed(t, data, func(f *gguf.File) (Validator, error) { return config(f) }, loadWith(false), loadWith(true))
}

// InvalidConfig is a change that makes a valid configuration of type C invalid, and the text
// its error must contain.
type InvalidConfig[C any] struct {
	Name   string
	Modify func(c *C)
	Want   string
}

// CheckInvalidConfigs checks, for each case, that valid changed by the case fails Validate with
// an error containing the case's text, and that newModel (the package's New) refuses it.
func CheckInvalidConfigs[C Validator](t *testing.T, valid C, newModel func(C) error, cases []InvalidConfig[C]) {
	t.Helper()
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			c := valid
			tc.Modify(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.Want) {
				t.Errorf("error %v; want one containing %q", err, tc.Want)
			}
			if err := newModel(c); err == nil {
				t.Error("New accepted the configuration")
			}
		})
	}
}

// StepMatchesForward runs tokens through m.Step in the chunks given ([start, end) each, in
// order) against a cache of maxLen positions, the attention over its leading window, and checks
// that each chunk's logits (of its last token) are within 1e-4 of the full-sequence pass's at
// the same position.
func StepMatchesForward(t *testing.T, backend backends.Backend, ctx *context.Context, m models.LanguageModel, tokens []int32,
	chunks [][2]int, maxLen, window int) {
	t.Helper()
	full := Forward(t, backend, ctx, m, tokens)
	exec := context.MustNewExec(backend, ctx.Reuse(), func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		cache := models.NewKVCache(inputs[1], window, inputs[3:])
		logits := m.Step(ctx, inputs[0], inputs[2], cache)
		return append([]*graph.Node{logits}, cache.Caches()...)
	})
	spec := m.DecodeSpec()
	caches := make([]any, 2*spec.Layers)
	for i := range caches {
		caches[i] = tensors.FromShape(shapes.Make(dtypes.Float32, 1, spec.KVHeads, maxLen, spec.HeadDim))
	}
	for _, c := range chunks {
		args := append([]any{[][]int32{tokens[c[0]:c[1]]}, int32(c[0]), int32(c[1] - c[0] - 1)}, caches...)
		out := exec.MustExec(args...)
		for i := range caches {
			caches[i] = out[1+i]
		}
		if d := MaxAbsDiff(out[0].Value().([][]float32)[0], full[c[1]-1]); d > 1e-4 {
			t.Errorf("tokens %d..%d: logits of position %d differ from the full pass by %g", c[0], c[1], c[1]-1, d)
		}
	}
}

// GreedyMatchesForward generates up to maxNew tokens after prompt with gen (greedy) and checks
// that each is the argmax of the full pass's logits at the position before it (teacher-forced);
// it returns those argmaxes.
func GreedyMatchesForward(t *testing.T, backend backends.Backend, ctx *context.Context, m models.LanguageModel, gen *models.Generator,
	prompt []int, maxNew int) []int {
	t.Helper()
	got, err := gen.Generate(prompt, models.GenerateOptions{MaxNewTokens: maxNew})
	if err != nil {
		t.Fatal(err)
	}
	var seq []int32
	for _, id := range append(append([]int(nil), prompt...), got[:len(got)-1]...) {
		seq = append(seq, int32(id))
	}
	logits := Forward(t, backend, ctx, m, seq)
	var want []int
	for p := len(prompt) - 1; p < len(seq); p++ {
		want = append(want, models.Argmax(logits[p]))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Generate = %v, argmax of Forward = %v", got, want)
	}
	return want
}
