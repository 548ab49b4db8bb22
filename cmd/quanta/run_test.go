package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// byteAlphabet is GPT-2's byte-level alphabet: the printable bytes !..~, ¡..¬ and ®..ÿ stand for
// themselves, the others for the code points from 256 up, in byte order.
func byteAlphabet() []string {
	out := make([]string, 256)
	next := 256
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			out[b] = string(rune(b))
		} else {
			out[b] = string(rune(next))
			next++
		}
	}
	return out
}

// chatML is a ChatML chat template of the shape SmolLM2's has.
const chatML = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}" +
	"{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"

// tinyModel writes a small llama GGUF with float32 weights and a byte-level vocabulary (the 256
// bytes, <|im_start|>, <|im_end|> as EOS) to a file and returns its path. overrides replace
// metadata (a nil Value removes the key); tensorType, if not 0, is the type of the first block's
// attn_q tensor.
func tinyModel(t *testing.T, tensorType uint32, overrides ...ggufbuild.KV) string {
	t.Helper()
	const vocab, dim, layers, heads, kvHeads, ffn = 258, 16, 2, 4, 2, 24
	tokens := append(byteAlphabet(), "<|im_start|>", "<|im_end|>")
	types := make([]int32, len(tokens))
	for i := range types {
		types[i] = 1
	}
	types[256], types[257] = 3, 3
	kvs := []ggufbuild.KV{
		{Key: "general.architecture", Value: "llama"},
		{Key: "llama.block_count", Value: uint32(layers)},
		{Key: "llama.embedding_length", Value: uint32(dim)},
		{Key: "llama.feed_forward_length", Value: uint32(ffn)},
		{Key: "llama.attention.head_count", Value: uint32(heads)},
		{Key: "llama.attention.head_count_kv", Value: uint32(kvHeads)},
		{Key: "llama.context_length", Value: uint32(64)},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: float32(1e-5)},
		{Key: "tokenizer.ggml.model", Value: "gpt2"},
		{Key: "tokenizer.ggml.pre", Value: "gpt2"},
		{Key: "tokenizer.ggml.tokens", Value: tokens},
		{Key: "tokenizer.ggml.token_type", Value: types},
		{Key: "tokenizer.ggml.merges", Value: []string{"h i"}},
		{Key: "tokenizer.ggml.eos_token_id", Value: uint32(257)},
		{Key: "tokenizer.chat_template", Value: chatML},
	}
	kvs = ggufbuild.Override(kvs, overrides...)
	seed := 0
	tensor := func(name string, dims ...uint64) ggufbuild.Tensor {
		seed++
		n := 1
		for _, d := range dims {
			n *= int(d)
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(0.5 * math.Sin(float64(seed)*1.7+float64(i)*0.37))
		}
		return ggufbuild.F32Tensor(name, v, dims...)
	}
	ts := []ggufbuild.Tensor{tensor("token_embd.weight", dim, vocab), tensor("output_norm.weight", dim)}
	for l := range layers {
		blk := fmt.Sprintf("blk.%d.", l)
		q := tensor(blk+"attn_q.weight", dim, dim)
		if l == 0 && tensorType != 0 {
			q.Type, q.Data = tensorType, q.Data[:len(q.Data)/2] // a 2-byte type
		}
		ts = append(ts, tensor(blk+"attn_norm.weight", dim), q, tensor(blk+"attn_k.weight", dim, kvHeads*dim/heads),
			tensor(blk+"attn_v.weight", dim, kvHeads*dim/heads), tensor(blk+"attn_output.weight", dim, dim), tensor(blk+"ffn_norm.weight", dim),
			tensor(blk+"ffn_gate.weight", dim, ffn), tensor(blk+"ffn_up.weight", dim, ffn), tensor(blk+"ffn_down.weight", ffn, dim))
	}
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := os.WriteFile(path, ggufbuild.Build(kvs, ts), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runCmd runs quanta with args in this process and returns its exit code, stdout and stderr.
func runCmd(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestRun runs quanta run on a tiny model built here: the chat template applied or reported as
// not understood or missing, the same answer for the same seed, and errors that name what is
// accepted.
func TestRun(t *testing.T) {
	testutil.Backend(t)
	model := tinyModel(t, 0)
	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		wantStderr []string
	}{
		{"greedy", []string{"-max", "5", "-temp", "0", "-format", "f32", model, "hi"}, exitOK,
			[]string{"loaded tiny.gguf", "head f32", "prompt: ", "decoding"}},
		{"file", []string{"-max", "3", model, "hi"}, exitOK, []string{"weights file, head file"}},
		{"one token", []string{"-max", "1", "-temp", "0", model, "hi"}, exitOK, []string{"answer: 1 token, no decoding step"}},
		{"int8", []string{"-max", "3", "-format", "int8", model, "hi"}, exitOK, []string{"weights int8, head int8"}},
		{"raw", []string{"-max", "3", "-raw", model, "hi"}, exitOK, []string{"prompt: 2 tokens"}},
		{"raw with a control token", []string{"-max", "3", "-raw", model, "<|im_start|>hi"}, exitOK, []string{"prompt: 3 tokens"}},
		{"template not understood", []string{"-max", "2", tinyModel(t, 0, ggufbuild.KV{Key: "tokenizer.chat_template", Value: "### {{ prompt }}"}), "hi"},
			exitOK, []string{"chat template not understood", "using the raw prompt"}},
		{"no template", []string{"-max", "2", tinyModel(t, 0, ggufbuild.KV{Key: "tokenizer.chat_template"}), "hi"},
			exitOK, []string{"has no chat template; using the raw prompt"}},
		{"architecture", []string{tinyModel(t, 0, ggufbuild.KV{Key: "general.architecture", Value: "gpt2"}), "hi"},
			exitFailure, []string{`architecture "gpt2"; accepted: llama, gemma3, qwen2`}},
		{"tensor type", []string{tinyModel(t, 25), "hi"}, exitFailure, []string{"blk.0.attn_q.weight I16", "F32"}},
		{"format upper case", []string{"-max", "2", "-format", "F32", model, "hi"}, exitOK, []string{"head f32"}},
		{"head upper case", []string{"-max", "2", "-head", "INT8", model, "hi"}, exitOK, []string{"head int8"}},
		{"format", []string{"-format", "q3", model, "hi"}, exitUsage, []string{`-format: `, `unknown name "q3"; accepted: file, f32, nf4`}},
		{"head", []string{"-head", "ternary", model, "hi"}, exitUsage, []string{"-head (auto, or", "accepted: file, f32, int8, nf4"}},
		// Out of range, -top-p names what the command accepts (0 is not, below), not models.Sampling's 0..1.
		{"top-p", []string{"-top-p", "2", model, "hi"}, exitUsage, []string{"quanta run: -top-p 2; accepted: above 0 up to 1"}},
		{"top-p negative", []string{"-top-p", "-0.5", model, "hi"}, exitUsage, []string{"quanta run: -top-p -0.5; accepted: above 0 up to 1"}},
		{"top-p NaN greedy", []string{"-temp", "0", "-top-p", "NaN", model, "hi"}, exitUsage, []string{"quanta run: -top-p NaN; accepted: above 0 up to 1"}},
		{"top-k", []string{"-top-k", "-1", model, "hi"}, exitUsage, []string{"quanta run: -top-k: ", "TopK -1"}},
		{"temp", []string{"-temp", "NaN", model, "hi"}, exitUsage, []string{"quanta run: -temp: ", "Temperature NaN"}},
		{"repeat-penalty", []string{"-repeat-penalty", "-1", model, "hi"}, exitUsage, []string{"quanta run: -repeat-penalty: ", "RepetitionPenalty -1"}},
		// llama.cpp and transformers keep the most likely token alone for a top-p of 0; models.Sampling
		// reads 0 as every token, the opposite, so the command refuses it rather than draw from all.
		{"top-p 0", []string{"-top-p", "0", model, "hi"}, exitUsage, []string{"-top-p 0; accepted: above 0 up to 1", "-temp 0"}},
		{"top-p 0 greedy", []string{"-max", "2", "-temp", "0", "-top-p", "0", model, "hi"}, exitOK, nil},
		{"max", []string{"-max", "0", model, "hi"}, exitUsage, []string{"-max 0; accepted: >= 1"}},
		{"system on a raw prompt", []string{"-max", "2", "-raw", "-system", "be brief", model, "hi"}, exitOK,
			[]string{"-system has no effect on a raw prompt"}},
		{"maxlen reached", []string{"-max", "8", "-temp", "0", "-raw", "-maxlen", "4", model, "hi"}, exitOK,
			[]string{"the answer stopped at -maxlen 4 (a prompt of 2 tokens)"}},
		{"missing file", []string{filepath.Join(t.TempDir(), "none.gguf"), "hi"}, exitFailure, []string{"none.gguf"}},
		{"context length above the limit", []string{tinyModel(t, 0, ggufbuild.KV{Key: "llama.context_length", Value: uint64(1) << 32}), "hi"},
			exitFailure, []string{"tiny.gguf: llama.context_length = 4294967296; accepted: 0 to 2147483647"}},
		{"maxlen above the context length", []string{"-maxlen", "65", model, "hi"}, exitFailure,
			[]string{"-maxlen 65; accepted: at most llama.context_length = 64"}},
		{"load error", []string{tinyModel(t, 0, ggufbuild.KV{Key: "llama.attention.head_count", Value: uint32(0)}), "hi"}, exitFailure,
			[]string{"head_count"}},
		{"arguments", []string{model}, exitUsage, []string{"quanta run: 1 argument [", "want MODEL.gguf and the prompt, after the flags", "usage: quanta run"}},
		{"flag after the arguments", []string{model, "hi", "-max", "2"}, exitUsage, []string{"4 arguments"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(append([]string{"run"}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
			for _, want := range tc.wantStderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not contain %q:\n%s", want, stderr)
				}
			}
			if code != exitOK && strings.HasPrefix(stderr, "\n") {
				t.Errorf("stderr starts with a blank line (no progress line to end here):\n%s", stderr)
			}
			if code == exitOK && !strings.HasSuffix(stdout, "\n") {
				t.Errorf("stdout %q does not end the answer's line", stdout)
			}
		})
	}
	t.Run("seed", func(t *testing.T) {
		answer := func(seed string) string {
			code, stdout, stderr := runCmd("run", "-max", "12", "-temp", "1.5", "-top-k", "0", "-top-p", "1", "-seed", seed, model, "hi")
			if code != exitOK || !strings.Contains(stderr, "seed "+seed+"\n") {
				t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
			}
			return stdout
		}
		if a, b := answer("7"), answer("7"); a != b {
			t.Errorf("seed 7 answered %q, then %q", a, b)
		}
	})
}

// failingWriter fails every write, as a full disk or a closed file does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestRunWriteError: an answer that cannot be written is an error (exit 1, named on stderr), not a
// silent success.
func TestRunWriteError(t *testing.T) {
	testutil.Backend(t)
	model := tinyModel(t, 0)
	var stderr bytes.Buffer
	code := run([]string{"run", "-max", "3", "-temp", "0", "-format", "f32", model, "hi"}, failingWriter{}, &stderr)
	if code != exitFailure || !strings.Contains(stderr.String(), "writing the answer: no space left on device") {
		t.Errorf("exit code %d, want %d and the write error; stderr:\n%s", code, exitFailure, stderr.String())
	}
}

// TestRunGemma3 runs quanta run on the Gemma-3 file that make assets fetches, a base model's
// without a chat template: the prompt goes as it is (BOS and 7 tokens, as llama.cpp's tokenizer
// gives them), every tensor as the file stores it; stderr, not a terminal, gets no progress line.
func TestRunGemma3(t *testing.T) {
	path := assets.Require(t, assets.Gemma3)
	code, stdout, stderr := runCmd("run", "-max", "4", "-temp", "0", path, "What is the capital of France?")
	t.Logf("stdout %q\nstderr:\n%s", stdout, stderr)
	for _, want := range []string{"(gemma3)", "weights file, head file", "has no chat template; using the raw prompt", "prompt: 8 tokens", "decoding"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not contain %q", want)
		}
	}
	if code != exitOK || stdout == "\n" {
		t.Errorf("exit code %d, answer %q; want 0 and an answer", code, stdout)
	}
	if strings.Contains(stderr, "\r") || strings.Contains(stderr, "loading") {
		t.Errorf("stderr, not a terminal, has the progress line; want the final line only")
	}
}

// TestRunSmolLM2 runs quanta run on the SmolLM2 file that make assets fetches: a few greedy
// tokens of the answer to a question whose answer the model knows.
func TestRunSmolLM2(t *testing.T) {
	path := assets.Require(t, assets.SmolLM2)
	if testutil.Backend(t).String() == simplego.BackendName {
		testutil.Slow(t) // minutes on the pure-Go backend
	}
	for _, cacheDType := range []string{"float32", "float16"} {
		t.Run(cacheDType, func(t *testing.T) {
			if cacheDType == "float16" && testutil.Backend(t).String() == simplego.BackendName {
				t.Skip("the pure-Go backend has no float16")
			}
			code, stdout, stderr := runCmd("run", "-max", "8", "-temp", "0", "-cache-dtype", cacheDType, path, "What is the capital of France?")
			t.Logf("stdout %q\nstderr:\n%s", stdout, stderr)
			if code != exitOK || !strings.Contains(stdout, "Paris") {
				t.Errorf("exit code %d, answer %q; want 0 and an answer naming Paris", code, stdout)
			}
			if !strings.Contains(stderr, "decoding") {
				t.Errorf("stderr does not report the decoding speed")
			}
		})
	}
}

// TestRunNoContextLength: a file without llama.context_length and no -maxlen is an error naming
// the missing key and the flag that supplies it, not a "-maxlen 0" the user never gave.
func TestRunNoContextLength(t *testing.T) {
	testutil.Backend(t)
	model := tinyModel(t, 0, ggufbuild.KV{Key: "llama.context_length"})
	code, _, stderr := runCmd("run", "-max", "2", model, "hi")
	if code != exitFailure || !strings.Contains(stderr, "llama.context_length") || !strings.Contains(stderr, "-maxlen") {
		t.Errorf("exit code %d, stderr:\n%s\nwant a failure naming llama.context_length and -maxlen", code, stderr)
	}
	if code, _, stderr := runCmd("run", "-max", "2", "-maxlen", "32", model, "hi"); code != exitOK {
		t.Errorf("-maxlen 32: exit code %d, stderr:\n%s", code, stderr)
	}
}

// TestRunSplitCharacter: an answer cut inside a character that spans tokens is written as valid
// UTF-8, never ending with the first bytes of a character alone. The vocabulary's byte tokens all
// stand for three bytes F0 9x xx, the start of a four-byte character (each a different one: a
// vocabulary repeats no text), but h and i, the prompt's.
func TestRunSplitCharacter(t *testing.T) {
	testutil.Backend(t)
	alphabet := byteAlphabet()
	tokens := append(byteAlphabet(), "<|im_start|>", "<|im_end|>")
	for b := range 256 {
		if b != 'h' && b != 'i' {
			tokens[b] = alphabet[0xF0] + alphabet[0x90+b/64] + alphabet[0x80+b%64]
		}
	}
	model := tinyModel(t, 0, ggufbuild.KV{Key: "tokenizer.ggml.tokens", Value: tokens})
	for _, max := range []string{"1", "3"} {
		code, stdout, stderr := runCmd("run", "-max", max, "-temp", "0", "-raw", model, "hi")
		if code != exitOK {
			t.Fatalf("-max %s: exit code %d; stderr:\n%s", max, code, stderr)
		}
		if !utf8.ValidString(stdout) || !strings.Contains(stdout, "\uFFFD") {
			t.Errorf("-max %s: answer %q; want valid UTF-8, U+FFFD for the bytes that make no character", max, stdout)
		}
	}
}

// TestRunUnknownToken: an unknown-type token the model picks (<unk>) prints nothing, as
// tokenizer.BPE.Decode and llama.cpp's detokenizer omit it: its text is no part of the answer.
// Every byte token but h and i, the prompt's, is of the unknown type here.
func TestRunUnknownToken(t *testing.T) {
	testutil.Backend(t)
	types := make([]int32, 258)
	for i := range types {
		types[i] = 2 // unknown
	}
	types['h'], types['i'], types[256], types[257] = 1, 1, 3, 3
	model := tinyModel(t, 0, ggufbuild.KV{Key: "tokenizer.ggml.token_type", Value: types})
	code, stdout, stderr := runCmd("run", "-max", "3", "-temp", "0", "-raw", model, "hi")
	if code != exitOK || !strings.Contains(stderr, "answer: 3 tokens") {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
	}
	if strings.Trim(stdout, "hi\n") != "" {
		t.Errorf("answer %q; want the unknown tokens omitted", stdout)
	}
}
