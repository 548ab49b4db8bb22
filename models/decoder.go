package models

import (
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/fileio"
)

// DecoderConfig holds the hyper-parameters that every GGUF decoder architecture has and reads
// the same way: llama.Config is one, gemma3.Config embeds one beside its own.
type DecoderConfig struct {
	// VocabSize is the number of tokens; Dim the width of the residual stream.
	VocabSize, Dim int
	// Layers is the number of decoder blocks.
	Layers int
	// Heads and KVHeads are the query and key/value head counts (KVHeads divides Heads: grouped-
	// query attention); HeadDim is the width of one head (Dim/Heads for Llama, not for Gemma-3).
	Heads, KVHeads, HeadDim int
	// FFNDim is the hidden width of the gated feed-forward block.
	FFNDim int
	// ContextLength is the longest sequence the model was trained for (0: unknown).
	ContextLength int
	// RMSNormEps is the epsilon of every RMSNorm; RoPEBase the base θ of the rotary embedding.
	RMSNormEps, RoPEBase float64
	// TiedEmbeddings: the output head is the token-embedding table (no separate output kernel).
	TiedEmbeddings bool
}

// DecoderHooks are what a GGUF decoder's graph calls for its linear layers and its embedding
// table, and which of its projections the loader fused: an architecture's Model embeds them
// beside its Config.
type DecoderHooks struct {
	// Projection computes every linear layer: attn_q/k/v/output and ffn_gate/up/down of each
	// block (or attn_qkv and ffn_gate_up when fused), and lm_head when the embeddings are not
	// tied. Nil means Dense.
	Projection Projection
	// Table gives the token-embedding table, for the lookup and the tied head. Nil means
	// DenseTable.
	Table Table
	// FusedQKV: each block's query, key and value projections are one projection, attn_qkv,
	// whose kernel is theirs concatenated along the output axis (q, then k, then v); FusedGateUp
	// likewise ffn_gate_up (gate, then up). LoadGGUF sets them when it fuses.
	FusedQKV, FusedGateUp bool
}

// Validate checks the fields of a configuration built in code: counts and widths from 1 to
// 2^31 − 1, ContextLength from 0 (unknown) to 2^31 − 1, HeadDim even, KVHeads dividing Heads,
// RMSNormEps a finite positive number, RoPEBase a finite number above 1. The error names the
// field and the accepted range; an architecture's Config prefixes its own name.
func (d DecoderConfig) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"VocabSize", d.VocabSize}, {"Dim", d.Dim}, {"Layers", d.Layers}, {"Heads", d.Heads}, {"KVHeads", d.KVHeads},
		{"HeadDim", d.HeadDim}, {"FFNDim", d.FFNDim}} {
		if err := fileio.CheckInt(f.name, f.v, 1, fileio.MaxCount); err != nil {
			return err
		}
	}
	if err := fileio.CheckInt("ContextLength", d.ContextLength, 0, fileio.MaxCount); err != nil {
		return err
	}
	switch {
	case d.HeadDim%2 != 0:
		return errors.Errorf("HeadDim = %d; accepted: an even width (rotary pairs)", d.HeadDim)
	case d.Heads%d.KVHeads != 0:
		return errors.Errorf("%d query heads, %d key/value heads; the latter must divide the former", d.Heads, d.KVHeads)
	}
	if err := fileio.CheckFloatAbove("RMSNormEps", d.RMSNormEps, 0); err != nil {
		return err
	}
	return fileio.CheckFloatAbove("RoPEBase", d.RoPEBase, 1)
}

// DecodeSpec describes a decoder of these hyper-parameters to a Generator.
func (d DecoderConfig) DecodeSpec() DecodeSpec {
	return DecodeSpec{VocabSize: d.VocabSize, ContextLength: d.ContextLength, Layers: d.Layers, KVHeads: d.KVHeads, HeadDim: d.HeadDim}
}
