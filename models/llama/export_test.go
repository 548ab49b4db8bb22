package llama

import "github.com/quanta-ml/quanta/models"

// Argmax is the generator's greedy pick, for the external tests that compare its picks with the
// full pass's logits.
var Argmax = models.Argmax[float32]
