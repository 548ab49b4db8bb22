package int8

import "github.com/quanta-ml/quanta/internal/xlafloat"

// Unexported names the external tests use.
var (
	Tiny            = tiny
	RoundToBFloat16 = xlafloat.ToBF16
)
