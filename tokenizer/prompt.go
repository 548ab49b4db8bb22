package tokenizer

import (
	"slices"

	"github.com/quanta-ml/quanta/gguf"
)

// Prompt is a prompt encoded for a generation: the ids to feed the model and the ids that end
// its answer.
type Prompt struct {
	// IDs are the prompt's tokens, the BOS token first when the vocabulary asks for it (as
	// llama.cpp encodes a prompt; Gemma-3's does, SmolLM2's does not), control-token texts read
	// as their tokens.
	IDs []int
	// Stops are EOS (when the vocabulary has one), the vocabulary's end-of-generation tokens
	// (EndOfTurnIDs) and the template's own end-of-turn token, each once: the answer ends at any
	// of them, template or not, as llama.cpp ends at every end-of-generation token (an instruct
	// model given a raw prompt still ends its turn).
	Stops []int
	// Templated says whether the chat template was applied.
	Templated bool
	// Raw is why a chat prompt was sent as it is, nil otherwise: the file has no template
	// (errors.Is gguf.ErrNotFound: a base model's, which continues text) or one whose shape
	// ParseChatTemplate does not recognize (ErrChatTemplate).
	Raw error
}

// EncodePrompt encodes text as the prompt of a generation by the model of the GGUF file f, whose
// vocabulary is tok. With chat, text is the user's message, after system when system is not ""
// (else the template's own system message, if it has one), in the file's chat template; without a
// template it is sent as it is and Prompt.Raw says why. Without chat it is sent as it is.
func EncodePrompt(f *gguf.File, tok *BPE, text, system string, chat bool) Prompt {
	var p Prompt
	if eos := tok.EOS(); eos >= 0 {
		p.Stops = append(p.Stops, eos)
	}
	for _, id := range EndOfTurnIDs(tok) {
		if !slices.Contains(p.Stops, id) {
			p.Stops = append(p.Stops, id)
		}
	}
	if chat {
		ct, err := ChatTemplateFromGGUF(f)
		if err != nil {
			p.Raw = err
		} else {
			var messages []Message
			if system != "" {
				messages = append(messages, Message{Role: "system", Content: system})
			}
			text = ct.Apply(append(messages, Message{Role: "user", Content: text}))
			p.Templated = true
			if id, ok := tok.ID(ct.EndOfTurn()); ok && !slices.Contains(p.Stops, id) {
				p.Stops = append(p.Stops, id)
			}
		}
	}
	p.IDs = tok.Encode(text, EncodeOptions{AddSpecial: true, ParseSpecial: true})
	return p
}
