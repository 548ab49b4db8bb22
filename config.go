package quanta

import (
	"fmt"
	"strings"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
)

// Type is a quantization format. Its zero value is NF4.
type Type int

// The quantization types.
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

// ParseType reads a Type from its string form, case-insensitively and ignoring surrounding white
// space.
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

// DefaultBlockSize is the NF4 block size used when Config.BlockSize is 0.
const DefaultBlockSize = nf4.DefaultBlockSize

// Config says how to quantize. Its zero value is NF4 with blocks of DefaultBlockSize and the
// products' strategy chosen automatically.
type Config struct {
	// Type is the format; the zero value is NF4.
	Type Type
	// BlockSize is the NF4 block length along the last axis; 0 means DefaultBlockSize. The other
	// types ignore it, but a negative value is always an error.
	BlockSize int
	// Scaled, for Binary and Ternary, keeps a per-output-channel scale mean(|x|) over the first
	// axis (for a (K, N) weight used as x @ W, one scale per output column: the XNOR-Net / BitNet
	// absmean), so the ±1 values keep the weights' magnitude. Without it the values are ±1 (and 0)
	// and unscaled arrays materialize as int8. NF4 and Int8 always keep scales and ignore it.
	Scaled bool
	// BitNet selects the BitNet b1.58 rule for Ternary: scale = mean(|x|) over the first axis,
	// values = clip(round(x / scale), -1, 1). It implies Scaled. Only valid with Ternary.
	BitNet bool
	// DoubleQuant, for NF4, double-quantizes the per-block absmax as QLoRA and bitsandbytes
	// (compress_statistics=True) do: uint8 codes of nf4.DynamicMap after subtracting their mean,
	// with a float32 scale per nf4.NestedBlockSize absmax. With blocks of 64 a weight takes
	// 0.5 + 1/64 + 4/(64·256) ≈ 0.516 bytes per parameter instead of 0.5625 (float32 absmax).
	// Products decode the scales inside the graph. Only valid with NF4.
	DoubleQuant bool
	// Strategy is the strategy of the arrays' products (package lowering): lowering.Auto (the
	// zero value) lets the policy choose; lowering.Materialize builds the dense weight before the
	// product, for comparisons; any other strategy is a requirement, and a product it cannot
	// serve panics when its graph is built.
	Strategy lowering.Strategy
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
	if c.DoubleQuant && c.Type != NF4 {
		return errors.Errorf("quanta: Config.DoubleQuant double-quantizes NF4 block scales, but Config.Type is %s", c.Type)
	}
	if !c.Strategy.Valid() {
		return errors.Errorf("quanta: invalid Config.Strategy %d; accepted: lowering.Auto or one of %v", int(c.Strategy), lowering.Strategies())
	}
	return nil
}
