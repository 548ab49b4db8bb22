// Package bnb exchanges quantized weights with bitsandbytes, the library of QLoRA and of Hugging
// Face's 4-bit and 8-bit checkpoints, byte for byte: it quantizes as bitsandbytes does, and reads
// and writes the safetensors state dicts of its Linear4bit (NF4, with or without double
// quantization) and Linear8bitLt layers. Everything is checked against vectors bitsandbytes 0.50.2
// produced (reference/testdata/bnb; reference/README.md says how they were made).
//
// # Using it
//
//	f, _ := safetensors.Open("layer.safetensors")         // a state dict bitsandbytes saved
//	l, _ := bnb.ReadLinear4bit(f, "model.layers.0.mlp.up_proj.")
//	y := implicitarray.DotGeneral(x, []int{1}, nil, l.Weight, []int{1}, nil) // x·Wᵀ, fused
//
//	w, _ := bnb.Quantize4bit(dense, 64, true)             // [out, in] float weight → NF4-DQ
//	list, _ := (&bnb.Linear4bit{Weight: w, Bias: b}).Tensors("")
//	_ = bnb.WriteFile("layer.safetensors", list)          // the file bitsandbytes would save
//
// Example shows a round trip.
//
// # Layouts
//
// A Linear4bit weight W is torch's [out, in] (y = x·Wᵀ + b). bitsandbytes blocks the flattened
// weight: blocks of blocksize consecutive values that straddle rows when in is not a multiple of
// blocksize. When in is a multiple (or out is 1) these are exactly nf4's blocks along the last
// axis, the contracted one, with the same bytes: the array is an ordinary nf4.Array and its
// products use every lowering strategy. Otherwise the array keeps the flattened blocks
// (nf4.Format.FlatBlocks, lowering.FlatBlockwise4): no re-quantization, so the bytes written back
// are the bytes read, and the products decode the weight (a block-per-row layout cannot hold these
// blocks without re-quantizing: a block's absmax covers values of two rows).
//
// Keys, after the layer's prefix (Linear4bit): weight (uint8 [(n+1)/2, 1], two codes a byte, the
// first in the high nibble), weight.absmax (float32 [blocks], or uint8 codes with double
// quantization), weight.quant_map (NF4's 16 values), weight.nested_absmax (float32
// [ceil(blocks/256)]), weight.nested_quant_map (the 256-value dynamic map),
// weight.quant_state.bitsandbytes__nf4 (the JSON quant state as uint8: quant_type, blocksize,
// dtype, shape, nested_blocksize, nested_dtype, nested_offset), bias. Linear8bitLt: weight (int8
// [out, in]), SCB (float32 [out], the rows' absmax), weight_format (uint8 0), bias.
//
// WriteFile orders the tensors as torch's save_file does (by dtype, then name) with metadata
// {"format": "pt"}, and the quant state JSON is written as Python's json.dumps writes it, so the
// files are bitsandbytes' byte for byte (TestLinear4bitFiles, TestLinear8bitLtFiles).
//
// # Numerics
//
// Quantize4bit is bitsandbytes' rule (see its documentation), which differs from nf4.Quantize's
// (eformer's) in rare rounding cases; double quantization is nf4.DoubleQuantize (bitsandbytes'
// offset and 8-bit lookup). An NF4 weight materializes to bitsandbytes' pure-PyTorch dequantized
// values bit for bit on the XLA and pure-Go backends. bitsandbytes' native CPU dequantize_4bit
// kernel returns wrong values for weights whose blocks straddle rows (e.g. [512, 784]): the
// references are its pure-PyTorch backend. A Linear8bitLt weight materializes codes × (SCB/127),
// within a float32 rounding or two of bitsandbytes' (codes × SCB)/127; weight-only, as
// bitsandbytes' training-mode CPU path (its eval-mode LLM.int8() also quantizes activations).
//
// bnb/internal/roundtrip runs the round trip with bitsandbytes itself (by hand, with the reference
// virtualenv): files quanta writes load in bitsandbytes with identical dequantized values and
// re-save identically, and files bitsandbytes writes read in quanta with identical values.
//
// # Errors
//
// Readers return an error, and nothing, for a missing key (wrapping safetensors.ErrNotFound), an
// FP4 weight, a quant state that is not JSON or has a key bitsandbytes does not write (wrapping
// safetensors.ErrCorrupt), quant maps other than NF4's and the dynamic map, tensors whose dtypes or
// sizes do not fit the quant state, and absmax, nested absmax or SCB values that are NaN, infinite
// or negative (wrapping safetensors.ErrCorrupt); the message names the tensor and what is accepted.
// The quant state is checked before anything is sized by it: its shape against the packed codes the
// weight holds (two a byte), its block size against the bound Quantize4bit applies too (even, from
// 2 to 4096, bitsandbytes' largest, or the weight's size rounded up to even when larger: a weight
// smaller than a block is one short block), its nested fields (nested_blocksize, nested_dtype,
// nested_offset) all present with the nested absmax, or none. Tensors returns an error for an NF4
// array whose blocks bitsandbytes cannot hold (rows padded to whole blocks) or that holds graph
// nodes, and Tensors and NewLinear8bitLt for a bias that is not a float vector of out elements, so
// that every state dict written reads back.
package bnb
