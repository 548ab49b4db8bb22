#!/usr/bin/env python3
"""all-MiniLM-L6-v2 reference: token ids and sentence embeddings per quantization.

Usage: python reference/gen_minilm.py --out reference/testdata/minilm

Tokenizer: ``tokenizers.Tokenizer.from_file(tokenizer.json)`` (BertNormalizer lowercase, BERT
pre-tokenizer, WordPiece, template [CLS] A [SEP]); the file asks for fixed padding to 128, which we
switch off (``no_padding()``); its truncation at 128 stays (no sentence here comes near it).

Model: ``transformers.BertModel.from_pretrained(minilm dir)`` in float32, eval mode. Each sentence
runs alone (batch 1, no padding, attention mask all ones, token_type_ids 0). Sentence embedding
as sentence-transformers builds it for this model (modules.json of the same package:
Transformer -> Pooling(mean) -> Normalize): the mean of last_hidden_state over the attention mask,
then ``torch.nn.functional.normalize`` (L2, eps 1e-12).

Variants (every encoder linear: attention query/key/value/output.dense, intermediate.dense,
output.dense of the 6 layers; embeddings, LayerNorms and the unused pooler stay float32):
  f32, nf4 (bnb quantize_4bit blocksize 64, blocks along `in`, dequantized by bnb's pure-PyTorch
  backend, float32 products), nf4_dq (double-quantized absmax), nf4_out (blocks along `out`),
  int8_bnb (bnb.nn.Linear8bitLt, has_fp16_weights=False, threshold=0.0, eval mode: LLM.int8() with
  float16 per-token int8 activations), int8_bnb_trainmode (the same modules in training mode:
  weight-only MatMul8bitFp on CPU), int8_wo (per-row absmax/127, round half even, float32),
  nf4_bnb_layer (bnb.nn.Linear4bit modules, eval mode: bnb's own CPU forward).
Cosine: embeddings are unit vectors; cos = dot(e_variant, e_f32) in float64.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import gen_smollm as sm  # noqa: E402  (the variants: weight transforms and bnb layers)

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A monkey is playing drums.",
    "The quick brown fox jumps over the lazy dog.",
    "This program is free software: you can redistribute it and/or modify it.",
    "The GNU General Public License is a free, copyleft license for software and other kinds of works.",
    "Quantization maps floating-point weights to a small set of levels.",
    "NF4 stores each weight in four bits with one absmax scale per block of 64.",
    "How do I bake sourdough bread at home?",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "The stock market fell 3.5% on Tuesday, its worst day since 2020.",
    "I don't think that's what she meant, but I'll ask her tomorrow.",
    "HELLO WORLD!!! THIS IS SHOUTING.",
    "Ünïcödé çharacters, naïve café résumé.",
    "東京は日本の首都です。",
    "Das ist ein deutscher Satz über maschinelles Lernen.",
    "¿Dónde está la biblioteca?",
    "Email me at someone@example.com or visit https://example.org/path?q=1.",
    "x = 42; y = x * 2 + 1",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism.",
    "Cats",
    "ok",
    "A very long sentence that keeps going, adding clause after clause, describing the rain, the wind, "
    "the grey morning light over the harbour, and the small boats that rock quietly at their moorings "
    "while the town slowly wakes up.",
    "The weather is lovely today.",
    "It is raining heavily outside.",
    "Neural networks learn representations from data.",
    "Deep learning models are trained with gradient descent.",
]

LINEARS = ["attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
           "intermediate.dense", "output.dense"]
STORE = ("f32", "nf4", "nf4_out", "int8_bnb", "int8_wo")


def log(*a):
    print("minilm:", *a, file=sys.stderr, flush=True)


def linears(model):
    for layer in model.encoder.layer:
        for name in LINEARS:
            *path, attr = name.split(".")
            parent = layer
            for p in path:
                parent = getattr(parent, p)
            yield parent, attr


@torch.no_grad()
def embed(model, enc_ids: list[list[int]]) -> np.ndarray:
    out = []
    for ids in enc_ids:
        x = torch.tensor([ids])
        mask = torch.ones_like(x)
        h = model(input_ids=x, attention_mask=mask, token_type_ids=torch.zeros_like(x)).last_hidden_state
        m = mask[..., None].to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        out.append(torch.nn.functional.normalize(pooled, p=2, dim=1)[0])
    return torch.stack(out).numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    common.torch_inference()
    from tokenizers import Tokenizer
    from transformers import BertModel

    d = common.minilm_dir()
    tok = Tokenizer.from_file(common.require(os.path.join(d, "tokenizer.json")))
    tok.no_padding()
    encs = [tok.encode(s) for s in SENTENCES]
    ids = [e.ids for e in encs]
    model = BertModel.from_pretrained(d, dtype=torch.float32)
    model.eval()

    w = common.Writer(args.out)
    w.json("sentences", {"sentences": [{"text": s, "ids": e.ids, "tokens": e.tokens} for s, e in zip(SENTENCES, encs)]})

    # One token-level check for a Go port: sentence 0's last hidden state.
    h0 = model(input_ids=torch.tensor([ids[0]]), attention_mask=torch.ones(1, len(ids[0]), dtype=torch.long),
               token_type_ids=torch.zeros(1, len(ids[0]), dtype=torch.long)).last_hidden_state[0]

    results = {}
    ref = embed(model, ids)

    def record(name, e):
        cos = (e.astype(np.float64) * ref.astype(np.float64)).sum(1)
        results[name] = {"mean_cosine_to_f32": float(cos.mean()), "min_cosine_to_f32": float(cos.min()),
                         "cosine_to_f32": w.npy(f"cos_{name}", cos)}
        if name in STORE:
            results[name]["embeddings"] = w.npy(f"emb_{name}", e)
        log(f"{name}: mean cosine {cos.mean():.6f} (min {cos.min():.6f})")

    record("f32", ref)
    for name, replaced in sm.variants({name: sm.TRANSFORMS[name] for name in ("nf4", "nf4_dq", "nf4_out", "int8_wo")}):
        with replaced(linears(model)):
            record(name, embed(model, ids))

    index = {
        "format": 1,
        "versions": common.versions("torch", "transformers", "tokenizers", "bitsandbytes", "safetensors", "numpy"),
        "n_sentences": len(SENTENCES),
        "sentences": "sentences.json",
        "sentence0_last_hidden_state": w.npy("f32_sentence0_last_hidden_state", h0.numpy()),
        "embedding_def": "mean of last_hidden_state over the attention mask (all ones: batch 1, no padding), then "
                         "L2-normalised (torch.nn.functional.normalize, eps 1e-12); float32",
        "results": results,
        "variants_doc": __doc__.split("Variants")[1],
    }
    w.json("index", index)


if __name__ == "__main__":
    main()
