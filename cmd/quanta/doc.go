// Command quanta is quanta's command-line tool.
//
// Usage:
//
//	quanta doctor   print the backend quanta runs on: name, description, PJRT plugin file and
//	                API version, devices, and whether the pure-Go fallback is in use; then run
//	                a small matmul graph on it, and, where quanta's kernels register with it,
//	                one custom call (the kernel probe)
//
//	quanta run [flags] MODEL.gguf "prompt"
//	                run a GGUF model ("llama": SmolLM2, Llama, ...; "gemma3"; "qwen2": Qwen2,
//	                Qwen2.5) on a prompt: every tensor as the file stores it (-format file, the
//	                default: its block types as they are, embedding table and head included),
//	                or the projections converted
//	                as the file loads (-format, a models.Preset; the tied head -head, by
//	                default int8 for the converted formats, float32 for -format f32), q/k/v and
//	                gate/up fused where exact (-fuse), the prompt in the model's chat template
//	                when the file has one of a shape tokenizer.ParseChatTemplate recognizes (a
//	                file without one, a base model's, gets the raw prompt; -raw sends it as it
//	                is; -system sets the system message), the answer streamed to stdout until
//	                EOS or an end-of-generation token (tokenizer.EndOfTurnIDs, template or
//	                not), then the prompt and decoding rates on stderr. Sampling: -temp (0: greedy), -top-k,
//	                -top-p, -repeat-penalty, -seed (printed at the end; the same seed gives the
//	                same answer); -max bounds the answer, -maxlen the sequence (default: the
//	                model's context length; attention follows the filled positions, not -maxlen).
//
// Exit codes of doctor: 0 when XLA is in use (or the backend that GOMLX_BACKEND asked for); 3 when
// the pure-Go fallback is in use because no XLA plugin could start; 1 when the backend fails to
// start or to run the check graph, when the kernels registered with it fail their probe (the
// products would call them), or when the report cannot be written. run exits 2 on a command line
// it refuses (an unknown format, a sampling flag out of range, each named with what is accepted),
// before any file is read, and 1 on an error of the run (an architecture other than "llama",
// "gemma3" and "qwen2", a tensor type it cannot decode). An unknown subcommand prints the usage and
// exits 2. Help asked for (quanta -h, quanta help [command], quanta run -h) goes to stdout and
// exits 0, or 1 when it cannot be written.
package main
