package models

import (
	"strings"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/qlayers"
)

// presets are the named rule sets of the examples and the evaluation table: every tensor as its
// file stores it ("file"), or every projection of the model quantized the same way (a separate
// output head, "/lm_head", and the token-embedding table, "/token_embd", stay float; norms are
// not projections and stay float). The names of the latter follow the reference harness's
// variants (reference/README.md), whose like-for-like layouts they use.
var presets = []struct {
	name, doc string
	rule      Rule
}{
	{FilePreset, "every tensor as the file stores it: GGML block types as they are (embedding table and head included), float tensors float32",
		Rule{Keep: true}},
	{"f32", "every projection float32 (out,in layout, x·Wᵀ)", Rule{Skip: true, Layout: qlayers.OutIn}},
	{"nf4", "NF4, blocks of 64 along in (out,in layout, x·Wᵀ): bitsandbytes' quantize_4bit of a Linear weight",
		Rule{Config: quanta.Config{Type: quanta.NF4}, Layout: qlayers.OutIn}},
	{"nf4-out", "NF4, blocks of 64 along out (in,out layout, x·W)", Rule{Config: quanta.Config{Type: quanta.NF4}, Layout: qlayers.InOut}},
	{"int8", "int8, one scale per output channel (out,in layout): weight-only int8",
		Rule{Config: quanta.Config{Type: quanta.Int8}, Layout: qlayers.OutIn}},
	{"int8-in", "int8, one scale per input channel (in,out layout)", Rule{Config: quanta.Config{Type: quanta.Int8}, Layout: qlayers.InOut}},
	{"ternary", "ternary {-1, 0, +1} at ±0.5·std, no scale", Rule{Config: quanta.Config{Type: quanta.Ternary}, Layout: qlayers.InOut}},
	{"ternary-scaled", "ternary times mean|w| per output channel",
		Rule{Config: quanta.Config{Type: quanta.Ternary, Scaled: true}, Layout: qlayers.InOut}},
	{"binary", "binary sign (0 → +1), no scale", Rule{Config: quanta.Config{Type: quanta.Binary}, Layout: qlayers.InOut}},
	{"binary-scaled", "binary times mean|w| per output channel",
		Rule{Config: quanta.Config{Type: quanta.Binary, Scaled: true}, Layout: qlayers.InOut}},
}

// FilePreset names the rule set that keeps every tensor in its file's format (a Keep rule for
// every scope, tables and heads included): the default of quanta run and the examples.
const FilePreset = "file"

// PresetNames lists the named rule sets Preset accepts, in table order: file, f32, nf4, nf4-out,
// int8, int8-in, ternary, ternary-scaled, binary, binary-scaled.
func PresetNames() []string {
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.name
	}
	return names
}

// Preset returns the rules of a named rule set (see PresetNames): for FilePreset one Keep rule
// for every scope; for the others Skip rules for "/lm_head" (float in qlayers.OutIn, the layout
// of the fastest float one-row product) and "/token_embd", then one rule for every other
// projection.
func Preset(name string) ([]Rule, error) {
	for _, p := range presets {
		if p.name == presetKey(name) {
			all := p.rule
			all.Scope = ".*"
			if all.Keep {
				return []Rule{all}, nil
			}
			return []Rule{{Scope: "/lm_head", Skip: true, Layout: qlayers.OutIn}, {Scope: "/token_embd", Skip: true}, all}, nil
		}
	}
	return nil, errors.Errorf("models.Preset: unknown name %q; accepted: %s", name, strings.Join(PresetNames(), ", "))
}

// TableFormats lists the formats TableRule accepts: file (as the file stores it), f32 (the table
// stays float), int8 (a scale per row) and nf4 (blocks of 64 along the row).
func TableFormats() []string { return []string{FilePreset, "f32", "int8", "nf4"} }

// DefaultTableFormat is the table format (of TableFormats) that goes with the preset named
// format: the file's own for FilePreset, float32 for "f32", int8 for every conversion (on SmolLM2
// an int8 head moves the perplexity by under 0.25 %, an NF4 one by 16-19 %; docs/real-models.md).
func DefaultTableFormat(format string) string {
	if format = strings.ToLower(strings.TrimSpace(format)); format == FilePreset || format == "f32" {
		return format
	}
	return "int8"
}

// TableRule returns the rule that stores the embedding table at scope (e.g. "/token_embd") in a
// format of TableFormats, for Quantizer.QuantizeTable; put it before a preset's rules. A tied
// output head reads the same table, so the format is the head's too.
func TableRule(scope, format string) (Rule, error) {
	switch strings.ToLower(strings.TrimSpace(format)) {
	case FilePreset:
		return Rule{Scope: scope, Keep: true}, nil
	case "f32":
		return Rule{Scope: scope, Skip: true}, nil
	case "int8":
		return Rule{Scope: scope, Config: quanta.Config{Type: quanta.Int8}, Layout: qlayers.OutIn}, nil
	case "nf4":
		return Rule{Scope: scope, Config: quanta.Config{Type: quanta.NF4}, Layout: qlayers.OutIn}, nil
	}
	return Rule{}, errors.Errorf("models.TableRule: format %q; accepted: %s", format, strings.Join(TableFormats(), ", "))
}

// PresetDoc returns the one-line description of a named rule set ("" for an unknown name); it
// reads names as Preset does.
func PresetDoc(name string) string {
	for _, p := range presets {
		if p.name == presetKey(name) {
			return p.doc
		}
	}
	return ""
}

// presetKey is a preset's name as the presets list it: case and surrounding spaces ignored.
func presetKey(name string) string { return strings.ToLower(strings.TrimSpace(name)) }
