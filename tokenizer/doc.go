// Package tokenizer holds the tokenizers of the real models quanta runs: BPE built from GGUF
// metadata, byte-level (SmolLM2, GPT-2 family, Llama 3, Qwen2) or SentencePiece (Gemma), matching
// llama.cpp's tokenizer, and BERT's WordPiece (all-MiniLM-L6-v2) from a Hugging Face
// tokenizer.json or a vocab.txt, matching Hugging Face tokenizers; and the chat prompt shapes of
// GGUF chat templates.
//
// # Byte-level BPE (BPE, NewBPEFromGGUF)
//
// llama.cpp is the reference: GGUF files are its format, and its tokenizer is the one that ran
// with the weights. Encoding follows llama_tokenize for a "gpt2" vocabulary:
//
//  1. special tokens: the texts of control tokens (with EncodeOptions.ParseSpecial) and of
//     user-defined tokens (always) are cut out of the text, longest token first, and emitted as
//     their ids;
//  2. pre-tokenization, on code points, with the rules of the "tokenizer.ggml.pre" type: for
//     "smollm" (and "starcoder") every number character (\p{N}) is first isolated, so "2024" is
//     four words; then GPT-2's split ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
//     ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+) runs inside each piece ("gpt2": GPT-2's split alone).
//     Transformers' GGUF conversion omits the digit step, so it splits "0. Definitions" or
//     "a  0" differently: llama.cpp's split is the one implemented here. "llama-bpe" (Llama 3)
//     splits with Llama 3's regex instead: contractions in either case, a letter run with one
//     leading non-letter, numbers in runs of up to three, punctuation with the newlines after it,
//     whitespace up to its last newline ((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|
//     [^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+);
//     "qwen2" with the same regex, each number on its own (\p{N}). Go's regexp has no
//     look-ahead, so the splits are written by hand (see PreTokenizer.Split for the rules one by
//     one). The names llama.cpp gives the same pre-tokenizer types are read as these ("gpt-2",
//     "llama3", "falcon3", "deepseek-r1-qwen", ...; an unknown name's error lists them all);
//  3. each word's UTF-8 bytes are written in GPT-2's byte-level alphabet (a space is 'Ġ', a
//     newline 'Ċ') and merged by BPE: the adjacent pair with the lowest merge rank first, the
//     leftmost among equal ranks, until no pair is a merge; each symbol becomes its id. With
//     "llama-bpe" a word that is itself a token is that token, merges or not (llama.cpp's
//     ignore_merges: " Việt" is one token of Llama 3, three by its merges).
//
// BOS/EOS are added with EncodeOptions.AddSpecial only when the vocabulary asks
// (tokenizer.ggml.add_bos_token: false for SmolLM2; by default true for "llama-bpe" and false
// for the others, as in llama.cpp). Decode maps tokens back to bytes and drops control (and unknown
// and unused) tokens, as llama.cpp's detokenizer without its special flag; it does not remove the spaces before
// punctuation that llama.cpp's detokenizer removes for "llama-bpe" and "starcoder" (its
// clean_spaces), so that Decode(Encode(text)) is text. UTF8Writer writes a generation's tokens
// as they come as valid UTF-8, holding back a character split across tokens.
//
// # SentencePiece BPE (the same BPE type, NewBPEFromGGUF with model "llama")
//
// Gemma's vocabulary is SentencePiece's BPE, which llama.cpp tokenizes as its "SPM" session does:
// special tokens are cut out as above; each remaining fragment (after a space, with
// tokenizer.ggml.add_space_prefix, when it starts the text or follows a special token: Gemma says
// false) has its spaces written ▁ (U+2581) and is split into UTF-8 characters (by their lead
// bytes, as llama.cpp counts them); the adjacent pair whose concatenation is the token of highest
// score (tokenizer.ggml.scores) merges first, the leftmost among equal scores, until no pair is a
// token (a NaN score, which orders no merge, is an error); a final symbol that is not a token
// falls back to the byte tokens <0xXX> of its bytes.
// Decode writes ▁ as a space and byte tokens as their bytes and, with add_space_prefix, drops the
// space the first token starts with, as llama.cpp's detokenizer does (after a BOS the space stays,
// as there). A "llama" vocabulary adds BOS unless
// the file says otherwise (llama.cpp's default), and its BOS, EOS and UNK ids are 1, 2 and 0 when
// the file has no tokenizer.ggml.bos_token_id, eos_token_id or unknown_token_id (llama.cpp's
// defaults for its SPM type, each dropped where the vocabulary is too short for it). A token text
// given twice (but the empty one) is an error, as llama.cpp refuses it; so is an empty token
// beside a token "[EMPTY_<id>]" of its id, the name llama.cpp gives it.
//
// # WordPiece (WordPiece, NewWordPieceFromJSON, NewWordPieceFromVocab)
//
// Hugging Face tokenizers is the reference (sentence-transformers runs it for MiniLM): added
// special tokens first, then BertNormalizer (clean text, CJK ideographs spaced, NFD and
// non-spacing marks removed, lower case), BertPreTokenizer (whitespace and punctuation), greedy
// longest-match WordPiece with "##" continuations, [CLS] ... [SEP] and truncation to the
// tokenizer.json's max_length. See WordPiece for the steps.
//
// # Chat templates (ParseChatTemplate, ChatTemplateFromGGUF)
//
// A GGUF file's "tokenizer.chat_template" is a Jinja template; this package does not run Jinja.
// ParseChatTemplate recognizes the common shapes by the markers they write — ChatML
// (<|im_start|>, SmolLM2's), Llama 3, Llama 2 ([INST]), Gemma (<start_of_turn>), Zephyr — and a
// ChatML template's default system message; ChatTemplate.Apply renders messages in that shape
// with the generation prompt, BOS left to EncodeOptions.AddSpecial. Any other template is
// ErrChatTemplate, so that a caller can say so and fall back to the raw prompt; so does a file
// without a template (ChatTemplateFromGGUF: gguf.ErrNotFound), as llama.cpp's CLI takes a model
// without one for text completion.
//
// EncodePrompt does all of it for a generation from a GGUF file, as quanta run does: the
// user's message in the file's template (or the raw text, and why), its ids with the BOS the
// vocabulary asks for, and the ids that end the answer (EOS, the vocabulary's end-of-generation
// tokens, EndOfTurnIDs, and the template's own).
//
// # Errors
//
// Constructors return errors naming the file and what was accepted (a "gpt2" or "llama" model,
// one score per token, a supported pre-tokenizer, a WordPiece model with a BertPreTokenizer and only special added tokens, special tokens present in the
// vocabulary). Every id a tokenizer can emit is checked to be in its vocabulary when it is built:
// BOS, EOS and UNK (the error names the GGUF key, e.g. tokenizer.ggml.bos_token_id, and the
// vocabulary size), token types one per token, tokenizer.json's added tokens and post-processor
// ids. A tokenizer.json that is not UTF-8 or holds a lone UTF-16 surrogate escape is an error, as
// in Hugging Face tokenizers (encoding/json would read either as U+FFFD). Encoding never fails: text that no token covers becomes byte tokens (BPE) or
// [UNK] (WordPiece).
package tokenizer
