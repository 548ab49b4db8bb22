package minilm

import (
	"encoding/json"
	"os"

	"github.com/pkg/errors"
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

// Validate reports a configuration the model cannot be built with.
func (c Config) Validate() error {
	if c.VocabSize < 1 || c.Dim < 1 || c.Layers < 1 || c.Heads < 1 || c.FFNDim < 1 || c.MaxPositions < 1 || c.TypeVocabSize < 1 {
		return errors.Errorf("minilm.Config %+v: every size must be positive", c)
	}
	if c.Dim%c.Heads != 0 {
		return errors.Errorf("minilm.Config: hidden size %d is not a multiple of %d heads", c.Dim, c.Heads)
	}
	if c.LayerNormEps <= 0 {
		return errors.Errorf("minilm.Config: layer_norm_eps %g must be positive", c.LayerNormEps)
	}
	return nil
}

// HeadDim returns the width of one attention head.
func (c Config) HeadDim() int { return c.Dim / c.Heads }

// ConfigFromJSON reads a Hugging Face BERT config.json. The activation must be "gelu" (exact, erf)
// and the position embeddings "absolute".
func ConfigFromJSON(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, errors.Wrap(err, "minilm.ConfigFromJSON")
	}
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
		return Config{}, errors.Wrapf(err, "minilm.ConfigFromJSON(%q)", path)
	}
	if j.ModelType != "bert" {
		return Config{}, errors.Errorf("minilm.ConfigFromJSON(%q): model_type %q; accepted: \"bert\"", path, j.ModelType)
	}
	if j.HiddenAct != "gelu" {
		return Config{}, errors.Errorf("minilm.ConfigFromJSON(%q): hidden_act %q; accepted: \"gelu\"", path, j.HiddenAct)
	}
	if j.PositionEmbeddingType != "" && j.PositionEmbeddingType != "absolute" {
		return Config{}, errors.Errorf("minilm.ConfigFromJSON(%q): position_embedding_type %q; accepted: \"absolute\"", path, j.PositionEmbeddingType)
	}
	c := Config{VocabSize: j.VocabSize, Dim: j.HiddenSize, Layers: j.NumHiddenLayers, Heads: j.NumAttentionHeads, FFNDim: j.IntermediateSize,
		MaxPositions: j.MaxPositionEmbeddings, TypeVocabSize: j.TypeVocabSize, LayerNormEps: j.LayerNormEps}
	return c, errors.WithMessagef(c.Validate(), "minilm.ConfigFromJSON(%q)", path)
}
