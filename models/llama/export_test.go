package llama

// Argmax is the generator's argmax, for the external tests that compare its picks with the full
// pass's logits.
var Argmax = argmax[float32]
