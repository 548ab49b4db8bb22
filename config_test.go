package quanta_test

import (
	"strings"
	"testing"

	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/lowering"
)

func TestParseType(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want quanta.Type
	}{
		{"nf4", quanta.NF4}, {"NF4", quanta.NF4}, {"int8", quanta.Int8}, {"Int8", quanta.Int8},
		{"binary", quanta.Binary}, {"BINARY", quanta.Binary}, {"ternary", quanta.Ternary}, {" Ternary ", quanta.Ternary},
	} {
		got, err := quanta.ParseType(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseType(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if strings.TrimSpace(strings.ToLower(tc.in)) != got.String() {
			t.Errorf("String() = %q for %q", got.String(), tc.in)
		}
	}
	_, err := quanta.ParseType("int4")
	if err == nil || !strings.Contains(err.Error(), "int4") || !strings.Contains(err.Error(), "nf4, int8, binary, ternary") {
		t.Errorf("unknown type: got %v, want an error listing the supported types", err)
	}
	var typ quanta.Type
	if err := typ.UnmarshalText([]byte("ternary")); err != nil || typ != quanta.Ternary {
		t.Errorf("UnmarshalText: %v %v", typ, err)
	}
}

func TestConfigZeroValue(t *testing.T) {
	var c quanta.Config
	if c.Type != quanta.NF4 || c.EffectiveBlockSize() != 64 || c.Strategy != lowering.Auto {
		t.Errorf("zero Config = %+v, want NF4, block 64, strategy auto", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("zero Config invalid: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  quanta.Config
		want string // substring of the error, "" for valid
	}{
		{"nf4 block 32", quanta.Config{BlockSize: 32}, ""},
		{"nf4 odd block", quanta.Config{BlockSize: 33}, "odd"},
		{"negative block", quanta.Config{Type: quanta.Int8, BlockSize: -1}, "negative"},
		{"int8 ignores odd block", quanta.Config{Type: quanta.Int8, BlockSize: 33}, ""},
		{"bad type", quanta.Config{Type: 7}, "invalid Config.Type"},
		{"bad strategy", quanta.Config{Strategy: 99}, "Strategy"},
		{"explicit strategy", quanta.Config{Strategy: lowering.SlicedSum}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}
