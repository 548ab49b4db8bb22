package tokenizer

import (
	"regexp"
	"slices"
	"strings"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
)

// ChatTemplateKey is the GGUF metadata key of a model's chat template (a Jinja template).
const ChatTemplateKey = "tokenizer.chat_template"

// ErrChatTemplate is the error of a chat template whose shape ParseChatTemplate does not
// recognize.
var ErrChatTemplate = errors.New("chat template not understood")

// Message is one turn of a chat: Role "system", "user" or "assistant", and its text.
type Message struct {
	Role, Content string
}

// ChatFormat is one of the chat prompt shapes ParseChatTemplate recognizes.
type ChatFormat int

// The recognized chat formats, by the markers their templates write.
const (
	// ChatML: <|im_start|>role\ncontent<|im_end|>\n per turn, then <|im_start|>assistant\n
	// (Qwen, SmolLM2, and many others).
	ChatML ChatFormat = iota + 1
	// Llama3: <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> per turn, then the
	// assistant's header.
	Llama3
	// Llama2: [INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ..., the
	// system text inside the first instruction (Llama 2; Mistral's [INST] without a system).
	Llama2
	// Gemma: <start_of_turn>role\ncontent<end_of_turn>\n per turn with the assistant called
	// "model", then <start_of_turn>model\n; a system text is put before the first user turn.
	Gemma
	// Zephyr: <|role|>\ncontent</s>\n per turn, then <|assistant|>\n.
	Zephyr
)

// String returns the format's name.
func (f ChatFormat) String() string {
	switch f {
	case ChatML:
		return "ChatML"
	case Llama3:
		return "Llama 3"
	case Llama2:
		return "Llama 2"
	case Gemma:
		return "Gemma"
	case Zephyr:
		return "Zephyr"
	}
	return "unknown"
}

// ChatFormats lists the recognized formats, for messages.
func ChatFormats() []ChatFormat { return []ChatFormat{ChatML, Llama3, Llama2, Gemma, Zephyr} }

// ChatTemplate renders chat messages as a recognized template of a model writes them.
type ChatTemplate struct {
	// Format is the recognized shape.
	Format ChatFormat
	// DefaultSystem is the system message the template writes when the messages have none
	// (SmolLM2's "You are a helpful AI assistant named SmolLM, ..."), or "".
	DefaultSystem string
}

// chatMarkers recognizes a format by the markers its template must contain, most specific first.
var chatMarkers = []struct {
	format  ChatFormat
	markers []string
}{
	{Llama3, []string{"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}},
	{ChatML, []string{"<|im_start|>", "<|im_end|>"}},
	{Gemma, []string{"<start_of_turn>", "<end_of_turn>"}},
	{Llama2, []string{"[INST]", "[/INST]"}},
	{Zephyr, []string{"<|user|>", "<|assistant|>"}},
}

// chatMLSystem finds a default system message written by a ChatML template:
// '<|im_start|>system\n' + text + '<|im_end|>' inside a string literal.
var chatMLSystem = regexp.MustCompile(`<\|im_start\|>system\n([^'"{}<]*)<\|im_end\|>`)

// ParseChatTemplate recognizes the shape of a Jinja chat template by the markers it writes
// (ChatFormats), and a ChatML template's default system message. It does not run Jinja: a
// template of another shape is ErrChatTemplate, naming the shapes accepted.
func ParseChatTemplate(template string) (ChatTemplate, error) {
	for _, c := range chatMarkers {
		all := true
		for _, m := range c.markers {
			all = all && strings.Contains(template, m)
		}
		if !all {
			continue
		}
		t := ChatTemplate{Format: c.format}
		if c.format == ChatML {
			if m := chatMLSystem.FindStringSubmatch(template); m != nil {
				t.DefaultSystem = m[1]
			}
		}
		return t, nil
	}
	names := make([]string, 0, len(chatMarkers))
	for _, f := range ChatFormats() {
		names = append(names, f.String())
	}
	return ChatTemplate{}, errors.Wrapf(ErrChatTemplate, "tokenizer.ParseChatTemplate: no shape recognized; accepted: %s", strings.Join(names, ", "))
}

// ChatTemplateFromGGUF reads and parses a GGUF file's chat template (ChatTemplateKey),
// ErrChatTemplate when it is not understood. A file without one (a base model's, as a rule) is an
// error wrapping gguf.ErrNotFound: its model continues text and is not given turns.
func ChatTemplateFromGGUF(f *gguf.File) (ChatTemplate, error) {
	s, err := f.String(ChatTemplateKey)
	if err != nil {
		return ChatTemplate{}, errors.WithMessage(err, "tokenizer.ChatTemplateFromGGUF")
	}
	return ParseChatTemplate(s)
}

// EndOfTurnIDs returns the ids of t's end-of-generation tokens, in id order: where a generation
// stops whether or not a template was applied, as llama.cpp stops at every end-of-generation token
// of the vocabulary. They are llama.cpp's (src/llama-vocab.cpp, special_eog_ids), found by their
// texts whatever their token types: the tokens that end a turn in the chat formats (the texts
// EndOfTurn gives), the other end-of-text tokens (<|endoftext|>, Llama 3's <|end_of_text|> and
// <|eom_id|>, ...) and the fill-in-the-middle pad, repository and file-separator tokens (SmolLM2's
// <reponame>, Qwen's <|fim_pad|>, ...); as llama.cpp, not <|end|> beside <|return|> and <|call|>
// (or <|calls|> and <|flush|>), nor </s> beside <|tool_response>. EOS is not among them unless
// its text is.
func EndOfTurnIDs(t *BPE) []int {
	present := map[string]int{}
	for _, text := range endOfGeneration {
		if id, ok := t.ID(text); ok {
			present[text] = id
		}
	}
	has := func(text string) bool { _, ok := present[text]; return ok }
	if has("<|end|>") && (has("<|call|>") || has("<|calls|>")) && (has("<|return|>") || has("<|flush|>")) {
		delete(present, "<|end|>")
	}
	if has("</s>") && has("<|tool_response>") {
		delete(present, "</s>")
	}
	var ids []int
	for _, id := range present {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// endOfGeneration are the texts of llama.cpp's end-of-generation tokens: its list, then the
// fill-in-the-middle pad, repository and file-separator texts it recognizes.
var endOfGeneration = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
	"<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
	"<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[",
	"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
	"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
	"<|file_sep|>",
}

// EndOfTurn is the text of the token that ends a turn in the format, where a generation stops:
// ChatML "<|im_end|>", Llama 3 "<|eot_id|>", Gemma "<end_of_turn>", Llama 2 and Zephyr "</s>".
func (t ChatTemplate) EndOfTurn() string {
	switch t.Format {
	case ChatML:
		return "<|im_end|>"
	case Llama3:
		return "<|eot_id|>"
	case Gemma:
		return "<end_of_turn>"
	}
	return "</s>"
}

// Apply renders messages as the template writes them, followed by the start of the assistant's
// turn (the generation prompt). Without a system message, DefaultSystem (when set) is put first.
// The result holds control-token texts: encode it with EncodeOptions.ParseSpecial, and with
// AddSpecial for the BOS token (which Apply leaves to the vocabulary, as llama.cpp's templates
// do).
func (t ChatTemplate) Apply(messages []Message) string {
	if t.DefaultSystem != "" && (len(messages) == 0 || messages[0].Role != "system") {
		messages = append([]Message{{Role: "system", Content: t.DefaultSystem}}, messages...)
	}
	var b strings.Builder
	switch t.Format {
	case ChatML:
		for _, m := range messages {
			b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
		}
		b.WriteString("<|im_start|>assistant\n")
	case Llama3:
		for _, m := range messages {
			b.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n" + strings.TrimSpace(m.Content) + "<|eot_id|>")
		}
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	case Llama2:
		system, first := "", true
		for _, m := range messages {
			switch m.Role {
			case "system":
				system = "<<SYS>>\n" + m.Content + "\n<</SYS>>\n\n"
			case "user":
				if !first {
					b.WriteString("<s>")
				}
				b.WriteString("[INST] " + system + strings.TrimSpace(m.Content) + " [/INST]")
				system, first = "", false
			default:
				b.WriteString(" " + strings.TrimSpace(m.Content) + " </s>")
			}
		}
	case Gemma:
		system := ""
		for _, m := range messages {
			switch m.Role {
			case "system":
				system = m.Content + "\n\n"
			case "assistant":
				b.WriteString("<start_of_turn>model\n" + strings.TrimSpace(m.Content) + "<end_of_turn>\n")
			default:
				b.WriteString("<start_of_turn>" + m.Role + "\n" + system + strings.TrimSpace(m.Content) + "<end_of_turn>\n")
				system = ""
			}
		}
		b.WriteString("<start_of_turn>model\n")
	case Zephyr:
		for _, m := range messages {
			b.WriteString("<|" + m.Role + "|>\n" + m.Content + "</s>\n")
		}
		b.WriteString("<|assistant|>\n")
	}
	return b.String()
}
