package nf4

// Unexported names the external tests use.
var (
	MaxCodeGap = maxCodeGap
)
