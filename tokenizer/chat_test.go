package tokenizer_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/tokenizer"
)

// TestChatTemplates: each shape is recognized from a template that writes its markers, and
// renders a system message, a user turn, an answer and a second user turn as the format's
// documentation writes them (worked out by hand).
func TestChatTemplates(t *testing.T) {
	chat := []tokenizer.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}, {Role: "assistant", Content: "Hello"}, {Role: "user", Content: "Bye"}}
	for _, tc := range []struct {
		template string
		format   tokenizer.ChatFormat
		want     string
	}{
		{"{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n'}}{% endfor %}",
			tokenizer.ChatML,
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"},
		{"{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + m['content'] | trim + '<|eot_id|>' }}{% endfor %}",
			tokenizer.Llama3,
			"<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"{% for m in messages %}{% if m['role'] == 'user' %}{{ bos_token + '[INST] ' + m['content'] + ' [/INST]' }}{% endif %}{% endfor %}",
			tokenizer.Llama2,
			"[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Bye [/INST]"},
		{"{% for m in messages %}{{ '<start_of_turn>' + role + '\n' + m['content'] | trim + '<end_of_turn>\n' }}{% endfor %}",
			tokenizer.Gemma,
			"<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"},
		{"{% for m in messages %}{% if m['role'] == 'user' %}{{ '<|user|>\n' + m['content'] + eos_token }}{% else %}{{ '<|assistant|>\n' + m['content'] + eos_token }}{% endif %}{% endfor %}",
			tokenizer.Zephyr,
			"<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello</s>\n<|user|>\nBye</s>\n<|assistant|>\n"},
	} {
		t.Run(tc.format.String(), func(t *testing.T) {
			ct, err := tokenizer.ParseChatTemplate(tc.template)
			if err != nil || ct.Format != tc.format || ct.DefaultSystem != "" {
				t.Fatalf("ParseChatTemplate = %+v, %v; want format %s", ct, err, tc.format)
			}
			if got := ct.Apply(chat); got != tc.want {
				t.Errorf("Apply =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	_, err := tokenizer.ParseChatTemplate("{% for m in messages %}### {{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")
	if !errors.Is(err, tokenizer.ErrChatTemplate) || !strings.Contains(err.Error(), "ChatML") {
		t.Errorf("an unknown template: %v; want ErrChatTemplate naming the accepted shapes", err)
	}
}

// TestChatMLDefaultSystem: a ChatML template that writes a system message when the chat has
// none gives it as DefaultSystem; Apply puts it first unless the chat has its own.
func TestChatMLDefaultSystem(t *testing.T) {
	ct, err := tokenizer.ParseChatTemplate("{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a fox.<|im_end|>\n' }}{% endif %}" +
		"{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}")
	if err != nil || ct.DefaultSystem != "You are a fox." {
		t.Fatalf("ParseChatTemplate = %+v, %v; want the default system message", ct, err)
	}
	if got, want := ct.Apply([]tokenizer.Message{{Role: "user", Content: "Hi"}}),
		"<|im_start|>system\nYou are a fox.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"; got != want {
		t.Errorf("Apply = %q, want %q", got, want)
	}
	if got := ct.Apply([]tokenizer.Message{{Role: "system", Content: "Be a cat."}, {Role: "user", Content: "Hi"}}); strings.Contains(got, "fox") {
		t.Errorf("Apply with a system message kept the default: %q", got)
	}
}

// TestSmolLM2ChatTemplate: SmolLM2's GGUF template is ChatML with its default system message,
// and renders the prompt the model card shows for a user question.
func TestSmolLM2ChatTemplate(t *testing.T) {
	ct, err := tokenizer.ChatTemplateFromGGUF(openAsset(t, assets.SmolLM2))
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n" +
		"<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
	if got := ct.Apply([]tokenizer.Message{{Role: "user", Content: "What is the capital of France?"}}); ct.Format != tokenizer.ChatML || got != want {
		t.Errorf("format %s, Apply = %q; want ChatML, %q", ct.Format, got, want)
	}
}

// TestEndOfTurnIDs: the tokens a generation ends at are llama.cpp's end-of-generation tokens
// (llama-cpp-python 0.3.36, llama_vocab_is_eog over each vocabulary): SmolLM2's <|endoftext|>,
// <|im_end|> and <reponame> (0, 2, 4), Gemma-3's <eos>, <end_of_turn> and </s> (1, 106, 212),
// Llama 3's <|end_of_text|> and <|eot_id|>, Qwen2's </s>, <|endoftext|> and <|im_end|>.
func TestEndOfTurnIDs(t *testing.T) {
	for _, tc := range []struct {
		asset string
		want  []int
	}{
		{assets.SmolLM2, []int{0, 2, 4}},
		{assets.Gemma3, []int{1, 106, 212}},
		{assets.LlamaBPEVocab, []int{128001, 128009}},
		{assets.Qwen2Vocab, []int{128247, 151643, 151645}},
	} {
		t.Run(tc.asset, func(t *testing.T) {
			tok, _ := assetBPE(t, tc.asset)
			if got := tokenizer.EndOfTurnIDs(tok); !slices.Equal(got, tc.want) {
				t.Errorf("EndOfTurnIDs = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestEndOfGenerationControl: as llama.cpp's loader, NewBPEFromGGUF makes the end-of-generation
// tokens control tokens whatever type the file gives them, so that Gemma-3's </s> (212,
// user-defined in the file) is not matched without ParseSpecial and Qwen2's (128247, normal in the
// file) is matched with it, and neither is written in an answer. The ids are llama-cpp-python
// 0.3.36's tokenize(add_bos=True, special=...) of "<s>hi</s>".
func TestEndOfGenerationControl(t *testing.T) {
	for _, tc := range []struct {
		asset   string
		special bool
		want    []int
		eog     int
	}{
		{assets.Gemma3, false, []int{2, 203, 2202, 954, 236751, 236813}, 212},
		{assets.Gemma3, true, []int{2, 203, 2202, 212}, 212},
		{assets.Qwen2Vocab, true, []int{44047, 29, 6023, 128247}, 128247},
		{assets.Qwen2Vocab, false, []int{44047, 29, 6023, 522, 82, 29}, 128247},
	} {
		tok, _ := assetBPE(t, tc.asset)
		if got := tok.Encode("<s>hi</s>", tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: tc.special}); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Encode(\"<s>hi</s>\", ParseSpecial %v) = %v, want %v", tc.asset, tc.special, got, tc.want)
		}
		if tok.Type(tc.eog) != tokenizer.Control || tok.Piece(tc.eog) != nil {
			t.Errorf("%s: token %d type %d, piece %q; want a control token, no piece", tc.asset, tc.eog, tok.Type(tc.eog), tok.Piece(tc.eog))
		}
	}
}

// TestEndOfTurnIDsExceptions: as llama.cpp, <|end|> is no end of generation beside <|return|>
// and <|call|> (gpt-oss's vocabulary), nor </s> beside <|tool_response>; each is one otherwise.
func TestEndOfTurnIDsExceptions(t *testing.T) {
	for _, tc := range []struct {
		tokens []string
		want   []int
	}{
		{[]string{"a", "<|end|>"}, []int{1}},
		{[]string{"a", "<|end|>", "<|return|>", "<|call|>"}, []int{2, 3}},
		{[]string{"a", "<|end|>", "<|flush|>", "<|calls|>"}, []int{2, 3}},
		{[]string{"a", "</s>"}, []int{1}},
		{[]string{"a", "</s>", "<|tool_response>"}, []int{2}},
	} {
		tok, err := tokenizer.NewBPE(tokenizer.BPEConfig{Tokens: tc.tokens, Pre: tokenizer.PreGPT2, BOS: -1, EOS: -1, UNK: -1})
		if err != nil {
			t.Fatal(err)
		}
		if got := tokenizer.EndOfTurnIDs(tok); !slices.Equal(got, tc.want) {
			t.Errorf("vocabulary %q: EndOfTurnIDs = %v, want %v", tc.tokens, got, tc.want)
		}
	}
}

// TestEncodePrompt compares the ids a generation sends with llama.cpp's (llama-cpp-python 0.3.36,
// tokenize(add_bos=True, special=True) of the same text): Gemma-3's vocabulary asks for its BOS,
// without which the model's continuation is a repetition ("France of France of ..."); SmolLM2's
// does not. Gemma-3's file is a base model's, without a chat template: a chat prompt goes raw and
// says why. The stops are EOS and the end-of-generation tokens (SmolLM2's EOS is its <|im_end|>,
// 2, then <|endoftext|> and <reponame>, 0 and 4; Gemma-3's are 1, <end_of_turn> and </s>, 106
// and 212).
func TestEncodePrompt(t *testing.T) {
	for _, tc := range []struct {
		name, file, prompt, system string
		chat, templated            bool
		want, stops                []int
	}{
		{"smollm2/chat", assets.SmolLM2, "What is the capital of France?", "", true, true, []int{1, 9690, 198, 2683, 359, 253, 5356, 5646,
			11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649,
			47, 2, 198, 1, 520, 9531, 198}, []int{2, 0, 4}},
		{"smollm2/raw", assets.SmolLM2, "What is the capital of France?", "", false, false, []int{1780, 314, 260, 3575, 282, 4649, 47}, []int{2, 0, 4}},
		{"gemma3/raw", assets.Gemma3, "The capital of France is", "", false, false, []int{2, 818, 5279, 529, 7001, 563}, []int{1, 106, 212}},
		{"gemma3/chat", assets.Gemma3, "The capital of France is", "Be brief.", true, false, []int{2, 818, 5279, 529, 7001, 563}, []int{1, 106, 212}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, f := assetBPE(t, tc.file)
			p := tokenizer.EncodePrompt(f, tok, tc.prompt, tc.system, tc.chat)
			if !slices.Equal(p.IDs, tc.want) || !slices.Equal(p.Stops, tc.stops) || p.Templated != tc.templated {
				t.Errorf("EncodePrompt(%q, chat %v) = ids %v, stops %v, templated %v; want %v, %v, %v", tc.prompt, tc.chat, p.IDs, p.Stops, p.Templated,
					tc.want, tc.stops, tc.templated)
			}
			if wantRaw := tc.chat && !tc.templated; wantRaw != (p.Raw != nil) || wantRaw && !errors.Is(p.Raw, gguf.ErrNotFound) {
				t.Errorf("Raw = %v; want an error wrapping gguf.ErrNotFound: %v", p.Raw, wantRaw)
			}
		})
	}
}

// TestEncodePromptWithoutEOS: a vocabulary without an EOS token gives stops that are all ids of
// the vocabulary, without -1, EOS's "none".
func TestEncodePromptWithoutEOS(t *testing.T) {
	// A byte-level vocabulary has no default EOS; its one end-of-generation text renamed.
	data := toyBPEGGUF(ggufbuild.KV{Key: "tokenizer.ggml.eos_token_id"}, ggufbuild.KV{Key: "tokenizer.ggml.tokens",
		Value: []string{"<|begin|>", "a", "b", "c", "Ġ", "ab", "Ġa", "Ġab", "1", "<|im_start|>"}})
	f := testutil.FromBytes(t, gguf.Read, data)
	tok, err := tokenizer.NewBPEFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if tok.EOS() != -1 {
		t.Fatalf("EOS %d; want none", tok.EOS())
	}
	for _, chat := range []bool{false, true} {
		if p := tokenizer.EncodePrompt(f, tok, "ab", "", chat); len(p.Stops) != 0 {
			t.Errorf("chat %v: stops %v; want none (no EOS, no end-of-turn token)", chat, p.Stops)
		}
	}
}
