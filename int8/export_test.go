package int8

// Unexported names the external tests use.
var (
	Tiny            = tiny
	RoundToBFloat16 = roundToBFloat16
)
