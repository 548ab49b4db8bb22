package gemma3

// DecoderOf returns the hyper-parameters of c that every GGUF decoder has, for the tests that
// write them (decodertest.Metadata).
var DecoderOf = Config.decoder
