package fileio

import (
	"math"

	"github.com/pkg/errors"
)

// MaxCount bounds the integer hyper-parameters of the model configurations (layer, head and
// vocabulary counts, widths): 2^31 − 1, so that the products of a few of them never overflow.
const MaxCount = math.MaxInt32

// integer is the integer types numbers are read as from files and configurations.
type integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// Elements returns the number of elements of a tensor of dimensions dims read from a file, and
// whether it is acceptable: every dimension non-negative, the product of the non-zero dimensions
// within an int64 (so that no product of some of them overflows either), and the number of
// elements at most limit. A tensor with a zero dimension has no elements, whatever the others.
func Elements[T integer](dims []T, limit uint64) (uint64, bool) {
	nonZero, empty := uint64(1), false
	for _, d := range dims {
		if d < 0 {
			return 0, false
		}
		n := uint64(d)
		if n == 0 {
			empty = true
			continue
		}
		if nonZero > math.MaxInt64/n {
			return 0, false
		}
		nonZero *= n
	}
	if empty {
		return 0, true
	}
	return nonZero, nonZero <= limit
}

// CheckInt checks an integer hyper-parameter read from a file or a configuration: key = v must
// lie in [lo, hi]. The error names the key, the value and the accepted range.
func CheckInt[T integer](key string, v T, lo, hi int64) error {
	var inRange bool
	if v < 0 {
		inRange = int64(v) >= lo && int64(v) <= hi
	} else {
		inRange = uint64(v) <= math.MaxInt64 && int64(v) >= lo && int64(v) <= hi
	}
	if !inRange {
		return errors.Errorf("%s = %d; accepted: %d to %d", key, v, lo, hi)
	}
	return nil
}

// CheckFloatAbove checks a float hyper-parameter read from a file or a configuration: key = v
// must be finite and above lo (an epsilon above 0, a RoPE base above 1), and stay so as a
// float32, the dtype the models compute in (a float64 epsilon of 1e-300 is 0 there), subnormals
// counted as 0: XLA's CPU backend flushes them to zero (an RMSNorm epsilon of 1e-40 is 0 there,
// and a row of zeros normalizes to NaN). The error names the key, the value and the accepted
// range.
func CheckFloatAbove(key string, v, lo float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || !(v > lo) {
		return errors.Errorf("%s = %g; accepted: a finite number above %g", key, v, lo)
	}
	f := float64(float32(v))
	if math.Abs(f) < 0x1p-126 {
		f = 0 // flushed
	}
	if math.IsInf(f, 0) || !(f > lo) {
		return errors.Errorf("%s = %g, %g as float32 (the models' dtype, subnormals flushed to zero); accepted: a finite number above %g as float32",
			key, v, f, lo)
	}
	return nil
}

// CheckSoftcap checks a logit softcap: 0 (none), or a finite positive number that stays finite
// and positive as a float32, subnormals counted as 0 as CheckFloatAbove counts them (the logits
// are divided by it there: 0 or +Inf gives NaN or zeros).
func CheckSoftcap(key string, v float64) error {
	if f := float64(float32(v)); math.IsNaN(v) || math.IsInf(f, 0) || v < 0 || (v > 0 && f < 0x1p-126) {
		return errors.Errorf("%s = %g; accepted: 0 (none) or a finite positive number (as float32 too, not subnormal there)", key, v)
	}
	return nil
}
