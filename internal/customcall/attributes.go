package customcall

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pkg/errors"
)

// Attributes is a custom call's backend_config dictionary, which reaches a typed-FFI handler as
// its attributes (qffi.h's qffi_attr_*). Names are identifiers ([A-Za-z_][A-Za-z0-9_]*); values
// are int, int64 (written as i64), int32 (i32), float32 (f32), float64 (f64), bool, string or
// []int64 (a dense i64 array).
type Attributes map[string]any

var reAttributeName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// literal is an attribute value already written in StableHLO's syntax (go-xla writes a value with
// a ToStableHLO method as it returns).
type literal string

// ToStableHLO returns the literal.
func (l literal) ToStableHLO() string { return string(l) }

// dictionary writes the attributes as an MLIR dictionary, names sorted:
// {a = 2.0e+00 : f32, name = "x", zero = 128 : i64}.
func (a Attributes) dictionary() (literal, error) {
	var sb strings.Builder
	sb.WriteString("{")
	for i, name := range slices.Sorted(maps.Keys(a)) {
		if !reAttributeName.MatchString(name) {
			return "", errors.Errorf("attribute name %q: accepted: [A-Za-z_][A-Za-z0-9_]*", name)
		}
		value, err := attributeValue(a[name])
		if err != nil {
			return "", errors.WithMessagef(err, "attribute %s", name)
		}
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%s = %s", name, value)
	}
	sb.WriteString("}")
	return literal(sb.String()), nil
}

// attributeValue writes one attribute value.
func attributeValue(v any) (string, error) {
	switch v := v.(type) {
	case int:
		return fmt.Sprintf("%d : i64", v), nil
	case int64:
		return fmt.Sprintf("%d : i64", v), nil
	case int32:
		return fmt.Sprintf("%d : i32", v), nil
	case float32:
		return floatLiteral(float64(v), 32) + " : f32", nil
	case float64:
		return floatLiteral(v, 64) + " : f64", nil
	case bool:
		return strconv.FormatBool(v), nil
	case string:
		return stringLiteral(v), nil
	case []int64:
		if len(v) == 0 {
			return "array<i64>", nil
		}
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = strconv.FormatInt(x, 10)
		}
		return "array<i64: " + strings.Join(parts, ", ") + ">", nil
	}
	return "", errors.Errorf("value %v of type %T: accepted: int, int64, int32, float32, float64, bool, string, []int64", v, v)
}

// floatLiteral writes f as an MLIR float literal: the shortest decimal that reads back as the same
// float of that many bits, always with a '.', or the bit pattern in hex when not finite.
func floatLiteral(f float64, bits int) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		if bits == 32 {
			return fmt.Sprintf("0x%08X", math.Float32bits(float32(f)))
		}
		return fmt.Sprintf("0x%016X", math.Float64bits(f))
	}
	s := strconv.FormatFloat(f, 'e', -1, bits)
	mantissa, exponent, _ := strings.Cut(s, "e")
	if !strings.Contains(mantissa, ".") {
		mantissa += ".0"
	}
	return mantissa + "e" + exponent
}

// stringLiteral writes s as an MLIR string literal: printable ASCII kept, '"' and '\' escaped,
// every other byte as \XX.
func stringLiteral(s string) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			sb.WriteByte(c)
		default:
			fmt.Fprintf(&sb, "\\%02X", c)
		}
	}
	sb.WriteByte('"')
	return sb.String()
}
