package llama

import "github.com/quanta-ml/quanta/models"

// Argmax is the generator's greedy pick, for the external tests that compare its picks with the
// full pass's logits.
var Argmax = models.Argmax[float32]

// DecoderOf returns the hyper-parameters of c that every GGUF decoder has, for the tests that
// write them (decodertest.Metadata).
var DecoderOf = Config.decoder
