#!/usr/bin/env python3
"""The Python half of the bitsandbytes <-> quanta round trip (run by bnb/internal/roundtrip/run.sh with
the reference virtualenv, never in CI).

    python roundtrip.py make DIR     bitsandbytes saves layers: DIR/b_*.safetensors, and its own
                                     dequantized weights (pure-PyTorch backend): DIR/b_*.bnb.npy
    python roundtrip.py check DIR    loads quanta's DIR/q_*.safetensors in bitsandbytes (as
                                     reference/bnb_load.py: Params4bit.from_prequantized, or
                                     Linear8bitLt.load_state_dict), compares bnb's dequantized weight
                                     with DIR/q_*.quanta.npy, re-saves the layer's state_dict and
                                     compares it with the file; compares DIR/b_*.quanta.npy (what
                                     quanta read) with DIR/b_*.bnb.npy. One JSON line per file.
"""
import json
import os
import sys

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
import numpy as np
import torch
from safetensors.torch import load_file, save_file

import bitsandbytes as bnb
import bitsandbytes.functional as F
from bitsandbytes.backends.default import ops as default_ops

torch.set_num_threads(1)
torch.set_grad_enabled(False)


def dequant(weight):
    """bnb's pure-PyTorch dequantization of a Params4bit (its native CPU kernel is wrong for ragged rows)."""
    qs = weight.quant_state
    absmax = qs.absmax
    if qs.nested:
        absmax = F.dequantize_blockwise(qs.absmax, qs.state2) + qs.offset
        q = qs.absmax.reshape(-1).to(torch.int64)
        vals = qs.state2.code[q]
        n, bs2 = q.numel(), qs.state2.blocksize
        out = torch.empty(n, dtype=torch.float32)
        full = n - n % bs2
        if full:
            out[:full] = (vals[:full].view(-1, bs2) * qs.state2.absmax[: full // bs2].view(-1, 1)).reshape(-1)
        if n % bs2:
            out[full:] = vals[full:] * qs.state2.absmax[full // bs2]
        absmax = out + qs.offset
    fn = getattr(default_ops._dequantize_4bit_compute, "__wrapped__", default_ops._dequantize_4bit_compute)
    code = F.get_4bit_type("nf4", device="cpu")
    return fn(weight.data.reshape(-1).view(torch.uint8), absmax, code, qs.blocksize, tuple(qs.shape), qs.dtype).float()


def load(path):
    sd = load_file(path)
    if "SCB" in sd:
        out_f, in_f = sd["weight"].shape
        layer = bnb.nn.Linear8bitLt(in_f, out_f, bias="bias" in sd, has_fp16_weights=False, threshold=0.0).to("cpu")
        layer.load_state_dict(sd)
        w = F.int8_vectorwise_dequant(layer.weight.data, layer.weight.SCB).float()
        return layer, sd, w
    qs_key = "weight.quant_state.bitsandbytes__nf4"
    shape = json.loads(bytes(sd[qs_key].tolist()).decode())["shape"]
    quantized = {k[len("weight."):]: v for k, v in sd.items() if k.startswith("weight.")}
    param = bnb.nn.Params4bit.from_prequantized(sd["weight"], quantized, requires_grad=False, device="cpu")
    layer = bnb.nn.Linear4bit(shape[1], shape[0], bias="bias" in sd, compute_dtype=torch.float32, quant_type="nf4")
    layer.weight = param
    if "bias" in sd:
        layer.bias = torch.nn.Parameter(sd["bias"], requires_grad=False)
    return layer, sd, dequant(layer.weight)


def make(d):
    rng = np.random.default_rng(17)
    cases = [  # name, in, out, dtype, compress_statistics
        ("b_nf4dq_96x40_bf16", 96, 40, torch.bfloat16, True),
        ("b_nf4dq_100x17", 100, 17, torch.float32, True),
        ("b_nf4_64x64_f16", 64, 64, torch.float16, False),
        ("b_nf4dq_4097x3", 4097, 3, torch.float32, True),
        ("b_nf4_130x9", 130, 9, torch.float32, False),
    ]
    for name, n_in, n_out, dtype, dq in cases:
        lin = torch.nn.Linear(n_in, n_out).to(dtype)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(rng.standard_normal((n_out, n_in)).astype(np.float32) / np.sqrt(n_in)))
        layer = bnb.nn.Linear4bit(n_in, n_out, compute_dtype=dtype, compress_statistics=dq, quant_type="nf4")
        layer.load_state_dict(lin.state_dict())
        layer = layer.to(dtype).to("cpu")  # quantized from the weight in dtype: the quant state records it
        save_file({k: v.contiguous() for k, v in layer.state_dict().items()}, os.path.join(d, name + ".safetensors"),
                  metadata={"format": "pt"})
        np.save(os.path.join(d, name + ".bnb.npy"), dequant(layer.weight).numpy())
    lin = torch.nn.Linear(50, 30)
    layer = bnb.nn.Linear8bitLt(50, 30, has_fp16_weights=False, threshold=0.0)
    layer.load_state_dict(lin.state_dict())
    layer = layer.to("cpu")
    save_file({k: v.contiguous() for k, v in layer.state_dict().items()}, os.path.join(d, "b_int8_50x30.safetensors"),
              metadata={"format": "pt"})
    np.save(os.path.join(d, "b_int8_50x30.bnb.npy"), F.int8_vectorwise_dequant(layer.weight.data, layer.weight.SCB).numpy())


def check(d):
    ok = True
    for f in sorted(os.listdir(d)):
        path = os.path.join(d, f)
        if f.startswith("q_") and f.endswith(".safetensors"):
            layer, sd, w = load(path)
            mine = np.load(path[: -len(".safetensors")] + ".quanta.npy")
            diff = float(np.abs(w.numpy() - mine).max())
            resaved = {k: v for k, v in layer.state_dict().items()}
            same = set(resaved) == set(sd) and all(torch.equal(resaved[k].cpu(), sd[k]) for k in sd)
            exact = bool(np.array_equal(w.numpy(), mine))
            print(json.dumps({"file": f, "direction": "quanta->bnb", "dequantized_identical": exact,
                              "max_abs_diff": diff, "resave_identical": same}))
            ok &= same and (exact or "int8" in f and diff < 1e-6)
        elif f.startswith("b_") and f.endswith(".safetensors"):
            ref = np.load(path[: -len(".safetensors")] + ".bnb.npy").astype(np.float32)
            mine = np.load(path[: -len(".safetensors")] + ".quanta.npy")
            diff = float(np.abs(ref - mine).max())
            exact = bool(np.array_equal(ref, mine))
            print(json.dumps({"file": f, "direction": "bnb->quanta", "dequantized_identical": exact, "max_abs_diff": diff}))
            ok &= exact or "int8" in f and diff < 1e-6
    print(json.dumps({"all_ok": bool(ok)}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(make(sys.argv[2]) if sys.argv[1] == "make" else check(sys.argv[2]))
