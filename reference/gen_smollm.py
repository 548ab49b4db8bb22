#!/usr/bin/env python3
"""SmolLM2-135M reference: perplexity per quantization, logits, hidden states, greedy tokens.

Usage: python reference/gen_smollm.py --out reference/testdata/smollm2 [--investigate]

Model: transformers ``LlamaForCausalLM.from_pretrained(dir, gguf_file=..., dtype=float32)``.
transformers dequantizes every GGUF tensor with the ``gguf`` package (Q4_1 linears, Q8_0
token_embd, F32 norms) and un-permutes attn_q/attn_k back to Hugging Face's rotary layout; the
script checks some tensors against ``gguf.quants.dequantize`` (index: ``weights_check``).
lm_head is tied to embed_tokens.

Token ids: llama.cpp's tokenization of GPL-3 (``gen_tokens.py``; no BOS, as llama.cpp does for
this GGUF). Evaluation (the rule in README.md and index.json ``eval``), Hugging Face's strided
perplexity recipe with max_length 513 and stride 512 over the first 1024 ids t[0..1023]:
W0 = t[0:513] and W1 = t[512:1024] (512 ids), each run from an empty context; W0 scores its 512
predictions of t[1..512], W1 its 511 predictions of t[513..1023]: 1023 predictions, every t[i],
i >= 1, once. NLL = -log_softmax(logits.double())[target]; perplexity = exp(mean NLL). This is the
rule that reproduces the independent run's figures (see ``--investigate``).

Variants (every decoder-layer linear q,k,v,o,gate,up,down of all 30 layers; embeddings, the tied
lm_head and the norms stay float32; all products in float32 unless said):
  f32               the dequantized GGUF weights as they are
  nf4               bnb.functional.quantize_4bit(W[out,in], blocksize=64, nf4): blocks along `in`
                    (the contracted axis of x @ W^T), dequantized with bnb's pure-PyTorch backend
  nf4_dq            the same with compress_statistics=True (double-quantized absmax)
  nf4_out           quantize_4bit(W^T contiguous [in,out]) : blocks along `out`, transposed back
  nf4_bnb_layer     bnb.nn.Linear4bit(compute_dtype=float32, compress_statistics=False) modules in
                    eval mode: bnb's own CPU forward (machine dependent: bf16 kernel with AVX512-BF16)
  int8_bnb          bnb.nn.Linear8bitLt(has_fp16_weights=False, threshold=0.0) in eval mode:
                    LLM.int8() on CPU, weights cast to f16 then per-row int8 (SCB); activations
                    cast to f16 and quantized per token (row absmax); int8 x int8 -> int32 product
  int8_bnb_trainmode  the same modules left in training mode (as freshly built modules are): on CPU
                    bnb.matmul then takes MatMul8bitFp, W' = CB * (SCB/127) in float32 and
                    F.linear: weight-only, activations not quantized
  int8_wo           weight-only int8: per output row s = absmax/127, q = round_half_even(W/s)
                    clamped to [-127,127], W' = q*s in float32 (quanta's int8 like for like)
  ternary           eformer: thr = 0.5*std(W) (whole tensor, population), W' = +1/-1/0, no scale
  ternary_scaled    ternary pattern * per-output-row mean|W|
  binary            eformer: sign(W), 0 -> +1, no scale
  binary_scaled     binary pattern * per-output-row mean|W|
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

N_IDS = 1024
WIN = 513
LOGIT_POSITIONS = [0, 1, 100, 511]
TOPK = 20
TOPK_POSITIONS = 64
PROMPT = "The GNU General Public License is"
N_GREEDY = 32
LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def log(*a):
    print("smollm:", *a, file=sys.stderr, flush=True)


def llama_ids(text: str) -> list[int]:
    from llama_cpp import Llama

    llm = Llama(common.smollm_gguf(), vocab_only=True, verbose=False)
    return list(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))


def detok(ids: list[int]) -> str:
    from llama_cpp import Llama

    llm = Llama(common.smollm_gguf(), vocab_only=True, verbose=False)
    return llm.detokenize(ids).decode("utf-8", errors="replace")


def load_model():
    from transformers import LlamaForCausalLM

    g = common.require(common.smollm_gguf())
    model = LlamaForCausalLM.from_pretrained(os.path.dirname(g), gguf_file=os.path.basename(g), dtype=torch.float32)
    model.eval()
    return model


def weights_check(model) -> dict:
    """Compare transformers' weights with the gguf package's own dequantization."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    r = GGUFReader(common.smollm_gguf())
    t = {x.name: x for x in r.tensors}
    m = model.model

    def deq(name):
        x = t[name]
        return torch.from_numpy(np.ascontiguousarray(dequantize(x.data, x.tensor_type)).astype(np.float32))

    out = {}
    pairs = [("blk.0.ffn_down.weight", m.layers[0].mlp.down_proj.weight),
             ("blk.29.attn_v.weight", m.layers[29].self_attn.v_proj.weight),
             ("blk.3.ffn_gate.weight", m.layers[3].mlp.gate_proj.weight),
             ("token_embd.weight", m.embed_tokens.weight),
             ("output_norm.weight", m.norm.weight)]
    for name, p in pairs:
        out[name] = bool(torch.equal(deq(name).reshape(p.shape), p.detach()))
    # attn_q/attn_k are stored permuted for llama.cpp's rotary layout: compare as multisets of rows.
    q = deq("blk.0.attn_q.weight").reshape(576, 576)
    hq = m.layers[0].self_attn.q_proj.weight.detach()
    out["blk.0.attn_q.weight (same rows, permuted)"] = bool(torch.equal(q.sort(0).values, hq.sort(0).values))
    out["lm_head tied to embed_tokens"] = model.lm_head.weight.data_ptr() == m.embed_tokens.weight.data_ptr()
    return out


# ---------------------------------------------------------------------------------------------
# Evaluation


def windows(ids: list[int]) -> list[tuple[list[int], int]]:
    """(window ids, number of leading predictions to drop)."""
    t = ids[:N_IDS]
    assert len(t) == N_IDS
    return [(t[0:WIN], 0), (t[WIN - 1:N_IDS], 0)]


@torch.no_grad()
def window_nll(model, win: list[int]) -> tuple[np.ndarray, torch.Tensor]:
    x = torch.tensor([win], dtype=torch.long)
    logits = model(input_ids=x, use_cache=False).logits[0]  # [T, V] float32
    lp = torch.log_softmax(logits[:-1].double(), dim=-1)
    tgt = x[0, 1:]
    nll = -lp.gather(1, tgt[:, None])[:, 0]
    return nll.numpy(), logits


def evaluate(model, ids) -> tuple[np.ndarray, list[torch.Tensor]]:
    nlls, logits = [], []
    for win, drop in windows(ids):
        n, lg = window_nll(model, win)
        nlls.append(n[drop:])
        logits.append(lg)
    return np.concatenate(nlls), logits


def ppl(nll: np.ndarray) -> float:
    return float(math.exp(float(np.mean(nll))))


def topk_arrays(logits: torch.Tensor):
    v, i = torch.topk(logits[:TOPK_POSITIONS], TOPK, dim=-1)
    return i.to(torch.int32).numpy(), v.numpy()


# ---------------------------------------------------------------------------------------------
# Weight transforms


def bnb_nf4(w: torch.Tensor, compress: bool = False) -> torch.Tensor:
    import bitsandbytes.functional as F
    from gen_bnb import dequant_default, nested_absmax_default

    packed, qs = F.quantize_4bit(w.contiguous(), blocksize=64, compress_statistics=compress, quant_type="nf4")
    absmax = nested_absmax_default(qs) if compress else qs.absmax
    return dequant_default(packed, absmax, 64, tuple(w.shape), torch.float32)


def nf4_in(w):
    return bnb_nf4(w)


def nf4_in_dq(w):
    return bnb_nf4(w, compress=True)


def nf4_out(w):
    return bnb_nf4(w.t().contiguous()).t().contiguous()


def int8_wo(w):
    s = w.abs().amax(dim=1, keepdim=True) / 127.0
    q = torch.clamp(torch.round(w / s), -127, 127)
    return q * s


def ternary_pattern(w):
    thr = 0.5 * w.std(correction=0)
    return torch.where(w > thr, 1.0, torch.where(w < -thr, -1.0, 0.0)).to(torch.float32)


def binary_pattern(w):
    return torch.where(w >= 0, 1.0, -1.0).to(torch.float32)  # sign with 0 -> +1


def row_mean_abs(w):
    return w.abs().mean(dim=1, keepdim=True)


TRANSFORMS = {
    "nf4": nf4_in,
    "nf4_dq": nf4_in_dq,
    "nf4_out": nf4_out,
    "int8_wo": int8_wo,
    "ternary": ternary_pattern,
    "ternary_scaled": lambda w: ternary_pattern(w) * row_mean_abs(w),
    "binary": binary_pattern,
    "binary_scaled": lambda w: binary_pattern(w) * row_mean_abs(w),
}


def linears(model):
    for layer in model.model.layers:
        for name in LINEARS:
            parent, attr = name.split(".")
            yield getattr(layer, parent), attr


def make_linear8bit(lin):
    import bitsandbytes as bnb

    m = bnb.nn.Linear8bitLt(lin.in_features, lin.out_features, bias=lin.bias is not None,
                            has_fp16_weights=False, threshold=0.0)
    m.load_state_dict(lin.state_dict())
    m = m.to("cpu")
    m.eval()
    return m


def make_linear8bit_trainmode(lin):
    m = make_linear8bit(lin)
    m.train()  # bnb.matmul on CPU in training mode: MatMul8bitFp, weight-only dequantize + F.linear
    return m


def make_linear4bit(lin):
    import bitsandbytes as bnb

    m = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=lin.bias is not None,
                          compute_dtype=torch.float32, compress_statistics=False, quant_type="nf4")
    m.load_state_dict(lin.state_dict())
    m = m.to("cpu")
    m.eval()
    return m


# bitsandbytes' own layers, each made from the Linear it replaces.
BNB_LAYERS = {
    "int8_bnb": make_linear8bit,
    "int8_bnb_trainmode": make_linear8bit_trainmode,
    "nf4_bnb_layer": make_linear4bit,
}


def variants(transforms):
    """The variants that replace a model's Linear layers, in order: each weight transform of
    ``transforms`` (name: fn), then each of bitsandbytes' layers (BNB_LAYERS), as (name, replaced),
    where ``with replaced(pairs):`` runs its block with the Linears of the (parent, attr) pairs so
    replaced (common.weights_transformed, common.modules_replaced)."""
    return ([(name, functools.partial(common.weights_transformed, fn=fn)) for name, fn in transforms.items()]
            + [(name, functools.partial(common.modules_replaced, make=make)) for name, make in BNB_LAYERS.items()])


# ---------------------------------------------------------------------------------------------


@torch.no_grad()
def greedy(model, prompt_ids: list[int]) -> dict:
    ids = list(prompt_ids)
    out, top, margin = [], [], []
    for _ in range(N_GREEDY):
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
        v, i = torch.topk(logits, 2)
        out.append(int(i[0]))
        top.append(float(v[0]))
        margin.append(float(v[0] - v[1]))
        ids.append(int(i[0]))
    return {"ids": out, "top_logit": top, "margin_to_second": margin}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--investigate", action="store_true",
                    help="also print f32 perplexity under other window rules (not written)")
    ap.add_argument("--skip", default="", help="comma-separated variants to skip (for quick runs)")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    common.torch_inference()

    text = open(common.require(common.GPL3), encoding="utf-8").read()
    ids = llama_ids(text)
    log(f"{len(ids)} llama.cpp ids")
    t0 = time.time()
    model = load_model()
    log(f"model loaded in {time.time() - t0:.1f}s")
    w = common.Writer(args.out)
    index = {"format": 1,
             "versions": common.versions("torch", "transformers", "gguf", "bitsandbytes", "llama_cpp_python", "numpy"),
             "weights_check": weights_check(model)}
    eval_ids = ids[:N_IDS]
    index["eval"] = {
        "ids": w.npy("eval_ids", np.array(eval_ids, dtype=np.int32)),
        "rule": "t = first 1024 llama.cpp ids of GPL-3 (no BOS); W0 = t[0:513] (513 ids), W1 = t[512:1024] (512 ids), "
                "each from an empty context (Hugging Face's strided recipe, max_length 513, stride 512); logits at "
                "window position j predict window[j+1]; W0 scores t[1..512] (512), W1 scores t[513..1023] (511): "
                "1023 predictions, nll[k] is the NLL of t[k+1]; NLL = -log_softmax(float64(logits))[target]; "
                "perplexity = exp(mean NLL)",
        "windows": [[0, WIN], [WIN - 1, N_IDS]],
        "n_predictions": N_IDS - 1,
    }

    results = {}

    def record(name, nll, seconds):
        assert nll.shape == (N_IDS - 1,)
        results[name] = {"perplexity": ppl(nll), "mean_nll": float(np.mean(nll)),
                         "nll": w.npy(f"nll_{name}", nll.astype(np.float64))}
        log(f"{name}: perplexity {results[name]['perplexity']:.4f} ({seconds:.0f}s)")

    # f32, with logits and hidden states of the first window.
    t0 = time.time()
    nll, logits = evaluate(model, ids)
    record("f32", nll, time.time() - t0)
    out = model(input_ids=torch.tensor([eval_ids[:WIN]]), use_cache=False, output_hidden_states=True)
    assert torch.equal(out.logits[0], logits[0])
    hs = out.hidden_states
    pos = LOGIT_POSITIONS
    ti, tv = topk_arrays(logits[0])
    index["f32_window0"] = {
        "positions": pos,
        "logits_rows": w.npy("f32_w0_logits_rows", logits[0][pos].numpy()),
        "top20_ids": w.npy("f32_w0_top20_ids", ti),
        "top20_logits": w.npy("f32_w0_top20_logits", tv),
        "embeddings_rows": w.npy("f32_w0_embeddings_rows", hs[0][0, pos].numpy()),
        "hidden_after_layer0_rows": w.npy("f32_w0_hidden_layer0_rows", hs[1][0, pos].numpy()),
        "hidden_final_norm_rows": w.npy("f32_w0_hidden_final_norm_rows", hs[-1][0, pos].numpy()),
        "def": "window W0 = eval_ids[0:513] from an empty context; rows at `positions`; top20 over positions 0..63 "
               "(torch.topk, descending); embeddings = hidden_states[0]; hidden_after_layer0 = hidden_states[1] "
               "(output of decoder layer 0, before any norm); hidden_final_norm = hidden_states[-1] (after the final "
               "RMSNorm, the lm_head input)",
    }
    if args.investigate:
        inv = {}
        t = ids
        for name, wins in {
            "1026 ids, 2 disjoint windows of 513 (1024 predictions)": [(t[0:513], 0), (t[513:1026], 0)],
            "1025 ids, windows [0:513] [512:1025] (1024 predictions)": [(t[0:513], 0), (t[512:1025], 0)],
            "1024 ids, windows [0:513] [511:1024], W1 drops its first prediction (1023)": [(t[0:513], 0), (t[511:1024], 1)],
            "BOS + 1024 ids, windows [BOS]+t[0:512], [BOS]+t[512:1024] (1024)": [([1] + t[0:512], 0), ([1] + t[512:1024], 0)],
        }.items():
            n = np.concatenate([window_nll(model, win)[0][d:] for win, d in wins])
            inv[name] = {"perplexity": ppl(n), "n": int(n.size)}
            log(f"investigate: {name}: {ppl(n):.4f}")
        index["window_rule_investigation"] = inv

    # Greedy generation in f32.
    p_ids = llama_ids(PROMPT)
    g = greedy(model, p_ids)
    g.update(prompt=PROMPT, prompt_ids=p_ids, text=detok(g["ids"]), n=N_GREEDY)
    g["def"] = "f32, no BOS, full recompute each step (no cache), argmax of the last position's logits"
    index["greedy"] = g

    # Weight-transform variants, then bitsandbytes' own layers.
    for name, replaced in variants(TRANSFORMS):
        if name in skip:
            continue
        t0 = time.time()
        with replaced(linears(model)):
            nll, lg = evaluate(model, ids)
            record(name, nll, time.time() - t0)
            if name in ("nf4", "int8_wo", "nf4_out"):
                ti, tv = topk_arrays(lg[0])
                results[name]["window0_top20_ids"] = w.npy(f"{name}_w0_top20_ids", ti)
                results[name]["window0_top20_logits"] = w.npy(f"{name}_w0_top20_logits", tv)
                if name == "nf4":
                    results[name]["window0_logits_rows"] = w.npy(f"{name}_w0_logits_rows", lg[0][pos].numpy())

    # llama.cpp on the same ids and windows, as a cross-check (not byte-deterministic across builds).
    if "llamacpp" not in skip:
        import llamacpp_util

        lc = {}
        for t in ("F32", "Q4_1"):
            t0 = time.time()
            n = llamacpp_util.window_nll(llamacpp_util.gguf_of_type(t), windows(ids), n_threads=1)
            lc[t] = {"perplexity": ppl(n), "n": int(n.size),
                     "max_abs_nll_diff_to_f32": float(np.max(np.abs(n - np.load(
                         os.path.join(args.out, results["f32"]["nll"]["file"])))))}
            log(f"llama.cpp {t}: perplexity {lc[t]['perplexity']:.4f} ({time.time() - t0:.0f}s)")
        index["llama_cpp"] = lc

    index["results"] = results
    index["variants_doc"] = __doc__.split("Variants")[1]
    w.json("index", index)
    log("done")


if __name__ == "__main__":
    main()
