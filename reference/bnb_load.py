#!/usr/bin/env python3
"""Load a bitsandbytes Linear4bit / Linear8bitLt state dict written by anyone (bnb, transformers,
quanta) from a safetensors file into a real bnb layer, and write what bnb makes of it.

Usage:
    python reference/bnb_load.py FILE.safetensors OUT.npy [--prefix P] [--x X.npy]

Writes
    OUT.npy         the layer's dequantized weight, float32 [out, in]
    OUT.x.npy       the input used (X.npy, else numpy default_rng(0).standard_normal((4, in)) as float32)
    OUT.y.npy       x @ OUT.T + bias, float32 (torch.nn.functional.linear)
    OUT.y_bnb.npy   the bnb layer's own forward on x (see below)
and prints one JSON line describing the layer.

How the file is loaded is how transformers loads a pre-quantized bnb checkpoint:
* Linear4bit (a ``<prefix>weight.quant_state.bitsandbytes__nf4`` or ``__fp4`` key):
  ``bnb.nn.Params4bit.from_prequantized(weight, {weight.absmax, weight.quant_map,
  [weight.nested_absmax, weight.nested_quant_map], weight.quant_state.bitsandbytes__*}, device='cpu')``
  in a ``bnb.nn.Linear4bit`` whose shape comes from the quant state's ``shape``.
  The dequantized weight uses bnb's pure-PyTorch default backend (bnb's native CPU
  ``dequantize_4bit`` kernel is wrong when the last dimension is not a multiple of the block size;
  its result is compared and reported as ``native_dequantize_equal``). ``y_bnb`` is the layer's
  forward in train mode under no_grad, which is bnb's CPU path with that native kernel.
* Linear8bitLt (a ``<prefix>SCB`` key): ``bnb.nn.Linear8bitLt(in, out, has_fp16_weights=False,
  threshold=0.0)``, moved to CPU (which allocates SCB), then ``load_state_dict`` (its
  ``weight_format`` must be 0 = row). Dequantized weight: ``int8_vectorwise_dequant(weight, SCB)``.
  ``y_bnb`` is the eval-mode LLM.int8() forward (x cast to float16 and quantized per row).

The script also re-serialises the loaded layer's ``state_dict`` and reports whether every tensor
is identical to the file's (``resave_identical``): a quanta-written file that bnb reads and
writes back unchanged is interoperable byte for byte.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402,F401  (offline environment)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

import bitsandbytes as bnb  # noqa: E402
import bitsandbytes.functional as F  # noqa: E402
from gen_bnb import dequant_default, nested_absmax_default  # noqa: E402


def find_prefix(keys: list[str], want: str | None) -> str:
    if want is not None:
        return want
    cands = set()
    for k in keys:
        for suffix in (".weight.quant_state.bitsandbytes__nf4", ".weight.quant_state.bitsandbytes__fp4", ".SCB"):
            full = "x." + k
            if full.endswith(suffix):
                cands.add(full[2 : len(full) - len(suffix) + 1])
    if len(cands) != 1:
        sys.exit(f"bnb_load: expected exactly one bnb layer in the file, found prefixes {sorted(cands)} "
                 "(choose one with --prefix)")
    return cands.pop()


def stem(out: str) -> str:
    return out[:-4] if out.endswith(".npy") else out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("out")
    ap.add_argument("--prefix", default=None, help="key prefix of the layer, e.g. 'model.layers.0.mlp.up_proj.'")
    ap.add_argument("--x", default=None, help="input .npy [..., in_features] (default: seeded [4, in])")
    args = ap.parse_args()
    torch.set_num_threads(1)

    sd_all = load_file(args.file)
    prefix = find_prefix(list(sd_all), args.prefix)
    sd = {k[len(prefix):]: v for k, v in sd_all.items() if k.startswith(prefix)}
    has_bias = "bias" in sd
    info = {"file": args.file, "prefix": prefix, "keys": sorted(sd)}

    qs_keys = [k for k in sd if k.startswith("weight.quant_state.bitsandbytes__")]
    if qs_keys:
        qs_json = json.loads(bytes(sd[qs_keys[0]].tolist()).decode())
        n_out, n_in = qs_json["shape"]
        stats = {k: v for k, v in sd.items() if k.startswith("weight.") }
        layer = bnb.nn.Linear4bit(n_in, n_out, bias=has_bias, compute_dtype=torch.float32,
                                  quant_type=qs_json["quant_type"], device="meta")
        layer.weight = bnb.nn.Params4bit.from_prequantized(sd["weight"], stats, device="cpu", module=layer)
        if has_bias:
            layer.bias = torch.nn.Parameter(sd["bias"].to(torch.float32), requires_grad=False)
        qs = layer.weight.quant_state
        absmax = nested_absmax_default(qs) if qs.nested else qs.absmax.float()
        w = dequant_default(layer.weight.data, absmax, qs.blocksize, qs.shape, torch.float32)
        native = F.dequantize_4bit(layer.weight.data, qs).float()
        info.update(kind="Linear4bit", quant_state=qs_json, nested=qs.nested,
                    native_dequantize_equal=bool(torch.equal(native, w)))
        layer.train()
    elif "SCB" in sd:
        n_out, n_in = sd["weight"].shape
        layer = bnb.nn.Linear8bitLt(n_in, n_out, bias=has_bias, has_fp16_weights=False, threshold=0.0)
        layer = layer.to("cpu")
        layer.load_state_dict(sd)
        w = F.int8_vectorwise_dequant(layer.weight.data, layer.weight.SCB).float()
        info.update(kind="Linear8bitLt")
        layer.eval()
    else:
        sys.exit("bnb_load: no Linear4bit quant_state or Linear8bitLt SCB key under prefix " + repr(prefix))

    resaved = layer.state_dict()
    same = set(resaved) == set(sd) and all(
        resaved[k].dtype == sd[k].dtype and torch.equal(resaved[k].cpu(), sd[k]) for k in sd)
    info["resave_identical"] = bool(same)

    if args.x:
        x = torch.from_numpy(np.load(args.x).astype(np.float32))
    else:
        x = torch.from_numpy(np.random.default_rng(0).standard_normal((4, n_in)).astype(np.float32))
    bias = layer.bias.detach().float() if has_bias else None
    with torch.no_grad():
        y = torch.nn.functional.linear(x, w, bias)
        y_bnb = layer(x).float()
    s = stem(args.out)
    np.save(s + ".npy", w.numpy())
    np.save(s + ".x.npy", x.numpy())
    np.save(s + ".y.npy", y.numpy())
    np.save(s + ".y_bnb.npy", y_bnb.numpy())
    info.update(in_features=n_in, out_features=n_out, bias=has_bias,
                y_bnb_max_abs_diff=float((y_bnb - y).abs().max()))
    print(json.dumps(info, sort_keys=True))


if __name__ == "__main__":
    main()
