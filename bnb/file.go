package bnb

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/safetensors"
)

// Metadata is the safetensors metadata torch's save_file writes beside a state dict, and
// WriteFile too.
var metadata = map[string]string{"format": "pt"}

// dtypeRank orders safetensors dtypes as the safetensors library declares them; save_file
// writes the tensors by dtype, last declared first, then by name.
var dtypeRank = map[safetensors.DType]int{
	safetensors.Bool: 0, safetensors.F4: 1, safetensors.F6E2M3: 2, safetensors.F6E3M2: 3, safetensors.U8: 4,
	safetensors.I8: 5, safetensors.F8E5M2: 6, safetensors.F8E4M3: 7, safetensors.F8E8M0: 8,
	safetensors.F8E4M3FNUZ: 9, safetensors.F8E5M2FNUZ: 10, safetensors.I16: 11, safetensors.U16: 12,
	safetensors.F16: 13, safetensors.BF16: 14, safetensors.I32: 15, safetensors.U32: 16, safetensors.F32: 17,
	safetensors.C64: 18, safetensors.F64: 19, safetensors.I64: 20, safetensors.U64: 21,
}

// sortLikeTorch orders tensors as safetensors.torch.save_file lays them out: by dtype (F32 before
// I8 before U8, ...), then by name. Written in this order with WriteFile, a state dict gives the
// same file, byte for byte, as torch's save_file(state_dict, path, metadata={"format": "pt"}).
func sortLikeTorch(list []safetensors.Tensor) {
	slices.SortStableFunc(list, func(a, b safetensors.Tensor) int {
		if ra, rb := dtypeRank[a.DType], dtypeRank[b.DType]; ra != rb {
			return rb - ra
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// WriteFile writes tensors (the Tensors of one or more layers, each under its own prefix, and
// any float tensors) to a safetensors file at path as torch's save_file does: sorted by
// sortLikeTorch, with metadata {"format": "pt"}. Nothing is written on error (see
// safetensors.WriteFile).
func WriteFile(path string, list []safetensors.Tensor) error {
	list = slices.Clone(list)
	sortLikeTorch(list)
	return errors.WithMessage(safetensors.WriteFile(path, list, metadata), "bnb.WriteFile")
}

// pyFloat formats a float64 as Python's repr (and json.dumps) does: the shortest digits that
// round-trip, in fixed notation for decimal exponents -4..15 (with ".0" when integral), else in
// exponent notation with at least two exponent digits ("1e-05", "1.5e+16").
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mantissa, expText, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expText)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		e := strconv.Itoa(exp)
		if len(e) < 2 {
			e = "0" + e
		}
		return mantissa + "e" + sign + e
	}
	fixed := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(fixed, ".") {
		fixed += ".0"
	}
	return fixed
}

// dtypeNames maps the torch dtype names bitsandbytes records ("float32", ...) to GoMLX dtypes.
var dtypeNames = map[string]dtypes.DType{
	"float32": dtypes.Float32, "bfloat16": dtypes.BFloat16, "float16": dtypes.Float16, "float64": dtypes.Float64,
}

func dtypeName(d dtypes.DType) (string, error) {
	for name, dt := range dtypeNames {
		if dt == d {
			return name, nil
		}
	}
	return "", errors.Errorf("dtype %s; accepted: float32, bfloat16, float16 or float64", d)
}
