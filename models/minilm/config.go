package minilm

import (
	"encoding/json"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/fileio"
)

// Config holds the hyper-parameters of a BERT encoder (config.json's names in comments).
type Config struct {
	VocabSize     int     // vocab_size
	Dim           int     // hidden_size
	Layers        int     // num_hidden_layers
	Heads         int     // num_attention_heads
	FFNDim        int     // intermediate_size
	MaxPositions  int     // max_position_embeddings
	TypeVocabSize int     // type_vocab_size
	LayerNormEps  float64 // layer_norm_eps
}

// Validate reports a configuration the model cannot be built with: a size outside 1 to 2^31 − 1,
// a hidden size that is not a multiple of the heads, a layer_norm_eps that is not a finite
// positive number. The error names the field, its config.json key and the accepted range.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"VocabSize (vocab_size)", c.VocabSize}, {"Dim (hidden_size)", c.Dim}, {"Layers (num_hidden_layers)", c.Layers},
		{"Heads (num_attention_heads)", c.Heads}, {"FFNDim (intermediate_size)", c.FFNDim},
		{"MaxPositions (max_position_embeddings)", c.MaxPositions}, {"TypeVocabSize (type_vocab_size)", c.TypeVocabSize}} {
		if err := fileio.CheckInt(f.name, f.v, 1, fileio.MaxCount); err != nil {
			return errors.WithMessage(err, "minilm.Config")
		}
	}
	if c.Dim%c.Heads != 0 {
		return errors.Errorf("minilm.Config: hidden_size = %d is not a multiple of num_attention_heads = %d", c.Dim, c.Heads)
	}
	return errors.WithMessage(fileio.CheckFloatAbove("LayerNormEps (layer_norm_eps)", c.LayerNormEps, 0), "minilm.Config")
}

// HeadDim returns the width of one attention head.
func (c Config) HeadDim() int { return c.Dim / c.Heads }

// ConfigFromJSON reads a Hugging Face BERT config.json. The activation must be "gelu" (exact, erf)
// and the position embeddings "absolute"; the sizes and layer_norm_eps are checked (Validate).
func ConfigFromJSON(path string) (Config, error) {
	raw, err := fileio.ReadFile("minilm.ConfigFromJSON", path, fileio.MaxConfigBytes)
	if err != nil {
		return Config{}, err
	}
	c, err := parseConfig(raw)
	return c, errors.WithMessagef(err, "minilm.ConfigFromJSON(%q)", path)
}

// parseConfig reads the content of a config.json.
func parseConfig(raw []byte) (Config, error) {
	var j struct {
		ModelType             string  `json:"model_type"`
		VocabSize             int     `json:"vocab_size"`
		HiddenSize            int     `json:"hidden_size"`
		NumHiddenLayers       int     `json:"num_hidden_layers"`
		NumAttentionHeads     int     `json:"num_attention_heads"`
		IntermediateSize      int     `json:"intermediate_size"`
		MaxPositionEmbeddings int     `json:"max_position_embeddings"`
		TypeVocabSize         int     `json:"type_vocab_size"`
		LayerNormEps          float64 `json:"layer_norm_eps"`
		HiddenAct             string  `json:"hidden_act"`
		PositionEmbeddingType string  `json:"position_embedding_type"`
	}
	if err := json.Unmarshal(raw, &j); err != nil {
		return Config{}, errors.Wrap(err, "config.json")
	}
	if j.ModelType != "bert" {
		return Config{}, errors.Errorf("model_type %q; accepted: \"bert\"", j.ModelType)
	}
	if j.HiddenAct != "gelu" {
		return Config{}, errors.Errorf("hidden_act %q; accepted: \"gelu\"", j.HiddenAct)
	}
	if j.PositionEmbeddingType != "" && j.PositionEmbeddingType != "absolute" {
		return Config{}, errors.Errorf("position_embedding_type %q; accepted: \"absolute\"", j.PositionEmbeddingType)
	}
	c := Config{VocabSize: j.VocabSize, Dim: j.HiddenSize, Layers: j.NumHiddenLayers, Heads: j.NumAttentionHeads, FFNDim: j.IntermediateSize,
		MaxPositions: j.MaxPositionEmbeddings, TypeVocabSize: j.TypeVocabSize, LayerNormEps: j.LayerNormEps}
	return c, c.Validate()
}
