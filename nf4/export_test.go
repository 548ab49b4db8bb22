package nf4

// Unexported names the external tests use.
var (
	MaxCodeGap = maxCodeGap
	Nearest32  = func(v float32) uint8 {
		var cb [16]float32
		copy(cb[:], codebook[:])
		return nearest(v, &cb)
	}
	Nearest64 = func(v float64) uint8 {
		var cb [16]float64
		for i, c := range codebook {
			cb[i] = float64(c)
		}
		return nearest(v, &cb)
	}
)
