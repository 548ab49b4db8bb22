package quanta

import (
	"fmt"
	"strings"

	"github.com/pkg/errors"
)

// Type is a quantization format. Its zero value is NF4, eformer's default.
type Type int

// The quantization types, as eformer's QuantizationType.
const (
	NF4 Type = iota
	Int8
	Binary
	Ternary
)

var typeNames = []string{"nf4", "int8", "binary", "ternary"}

// Types lists every Type, in the order of their string forms in errors.
func Types() []Type { return []Type{NF4, Int8, Binary, Ternary} }

// String returns "nf4", "int8", "binary" or "ternary".
func (t Type) String() string {
	if t < 0 || int(t) >= len(typeNames) {
		return fmt.Sprintf("Type(%d)", int(t))
	}
	return typeNames[t]
}

// ParseType reads a Type from its string form, case-insensitively.
func ParseType(s string) (Type, error) {
	for i, name := range typeNames {
		if strings.EqualFold(strings.TrimSpace(s), name) {
			return Type(i), nil
		}
	}
	return 0, errors.Errorf("quanta: unknown quantization type %q; supported: %s", s, strings.Join(typeNames, ", "))
}

// MarshalText implements encoding.TextMarshaler.
func (t Type) MarshalText() ([]byte, error) {
	if t < 0 || int(t) >= len(typeNames) {
		return nil, errors.Errorf("quanta: invalid Type %d", int(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler (for flags and JSON).
func (t *Type) UnmarshalText(text []byte) error {
	parsed, err := ParseType(string(text))
	if err != nil {
		return err
	}
	*t = parsed
	return nil
}

// Toggle is an on/off setting whose zero value means "the default".
type Toggle int8

// Toggle values.
const (
	Default Toggle = iota
	Enabled
	Disabled
)

// DefaultBlockSize is the NF4 block size used when Config.BlockSize is 0 (eformer's default).
const DefaultBlockSize = 64

// Config says how to quantize. Its zero value equals eformer's QuantizationConfig defaults: NF4,
// block size 64, no simulation, kernels on.
type Config struct {
	// Type is the format; the zero value is NF4.
	Type Type
	// BlockSize is the NF4 block length along the last axis; 0 means DefaultBlockSize. It is
	// ignored by the other types (as in eformer), but a negative value is always an error.
	BlockSize int
	// Simulate makes Quantize return the materialized (fake-quantized) dense value instead of the
	// implicit array, as eformer's simulate=True. It is not a straight-through estimator: use
	// StraightThrough for training.
	Simulate bool
	// Scaled, for Binary and Ternary, keeps a per-output-channel scale mean(|x|) over the first
	// axis (for a (K, N) weight used as x @ W, one scale per output column: the XNOR-Net / BitNet
	// absmean), so the ±1 values keep the weights' magnitude. eformer keeps no scale, which is the
	// default. Ignored by NF4 and Int8, which always keep scales.
	Scaled bool
	// BitNet selects the BitNet b1.58 rule for Ternary: scale = mean(|x|) over the first axis,
	// values = clip(round(x / scale), -1, 1). It implies Scaled. Only valid with Ternary.
	BitNet bool
	// UseKernel: Disabled forces the materialize-then-dot path for products with the quantized
	// array (to compare against, or to work around a lowering); Default and Enabled use the fused
	// lowering. eformer has this field but never reads it.
	UseKernel Toggle
}

// EffectiveBlockSize is BlockSize with the default applied.
func (c Config) EffectiveBlockSize() int {
	if c.BlockSize == 0 {
		return DefaultBlockSize
	}
	return c.BlockSize
}

// Validate returns an error describing the first invalid field.
func (c Config) Validate() error {
	if c.Type < 0 || int(c.Type) >= len(typeNames) {
		return errors.Errorf("quanta: invalid Config.Type %d; supported: %s", int(c.Type), strings.Join(typeNames, ", "))
	}
	if c.BlockSize < 0 {
		return errors.Errorf("quanta: Config.BlockSize %d is negative; accepted: 0 (default %d) or a positive even number",
			c.BlockSize, DefaultBlockSize)
	}
	if c.Type == NF4 && c.EffectiveBlockSize()%2 != 0 {
		return errors.Errorf("quanta: Config.BlockSize %d is odd; NF4 packs two codes per byte, so it must be even", c.BlockSize)
	}
	if c.BitNet && c.Type != Ternary {
		return errors.Errorf("quanta: Config.BitNet is a ternary rule, but Config.Type is %s", c.Type)
	}
	if c.UseKernel < Default || c.UseKernel > Disabled {
		return errors.Errorf("quanta: invalid Config.UseKernel %d", int(c.UseKernel))
	}
	return nil
}
