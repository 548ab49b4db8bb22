#!/usr/bin/env python3
"""bitsandbytes vectors for QLoRA interop: quantize_4bit (NF4) and bnb-saved layer state dicts.

Usage: python reference/gen_bnb.py --out reference/testdata/bnb

Runs bitsandbytes' own code on CPU. Two facts of bitsandbytes 0.50.2 on CPU shape this script:

* ``quantize_4bit`` has no native CPU kernel: the op runs bnb's pure-PyTorch default backend
  (``backends/default/ops.py``).
* ``dequantize_4bit`` does have a native CPU kernel (``cdequantize_blockwise_cpu_nf4_*``), used when
  the last dimension is even. That kernel treats each row separately (it is called with
  ``m = prod(shape[:-1])`` rows of ``n = shape[-1]``), while ``quantize_4bit`` blocks the
  flattened tensor; so whenever ``shape[-1]`` is not a multiple of the block size a block straddles
  two rows and the native result is wrong (e.g. [512,784], [3,224]). The reference values here come
  from bnb's pure-PyTorch default backend on the same bytes: we call
  ``bitsandbytes.backends.default.ops._dequantize_4bit_compute`` directly (the function bnb's CPU
  backend itself falls back to for odd last dimensions). For every case the index records whether
  the native kernel agrees.

``TORCHDYNAMO_DISABLE=1`` is set so that bnb's ``torch.compile`` wrappers run eagerly (same
arithmetic: a table gather and one float32 multiply per value).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zlib

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import bitsandbytes as bnb  # noqa: E402
import bitsandbytes.functional as F  # noqa: E402
from bitsandbytes.backends.default import ops as default_ops  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def seed_of(name: str) -> int:
    return zlib.crc32(name.encode())


def make_input(case_id: str, shape, kind: str) -> np.ndarray:
    rng = np.random.default_rng(seed_of(case_id))
    x = rng.standard_normal(shape).astype(np.float32)
    if kind == "weights":
        x *= np.float32(0.02)
    elif kind == "zero_block":
        x.reshape(-1)[:64] = 0.0  # a whole first block of zeros (absmax 0)
    return x


def dequant_default(packed: torch.Tensor, absmax_f32: torch.Tensor, blocksize: int, shape, dtype) -> torch.Tensor:
    """bnb's pure-PyTorch NF4 dequantization (backends/default/ops.py), forced."""
    code = F.get_4bit_type("nf4", device="cpu")
    fn = getattr(default_ops._dequantize_4bit_compute, "__wrapped__", default_ops._dequantize_4bit_compute)
    return fn(packed.reshape(-1).view(torch.uint8), absmax_f32, code, blocksize, tuple(shape), dtype)


def nested_absmax_default(qs) -> torch.Tensor:
    """Double-quantized absmax decoded with the pure-PyTorch rule: code[q] * nested_absmax[i//256] + offset."""
    q = qs.absmax.reshape(-1).to(torch.int64)
    n = q.numel()
    vals = qs.state2.code[q]
    bs2 = qs.state2.blocksize
    full = n - n % bs2
    out = torch.empty(n, dtype=torch.float32)
    nb = full // bs2
    if full:
        out[:full] = (vals[:full].view(nb, bs2) * qs.state2.absmax[:nb].view(-1, 1)).reshape(-1)
    if n % bs2:
        out[full:] = vals[full:] * qs.state2.absmax[nb]
    return out + qs.offset


def arr(t: torch.Tensor, dtype_name: str | None = None) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return common.bf16_bits(t)
    return t.detach().cpu().contiguous().numpy()


QUANT_CASES = [
    # id, shape, blocksize, dtype, input kind
    ("q4_64x64_bs64_f32", [64, 64], 64, "float32", "zero_block"),
    ("q4_3x224_bs64_f32", [3, 224], 64, "float32", "normal"),
    ("q4_512x784_bs64_f32", [512, 784], 64, "float32", "weights"),
    ("q4_7x33_bs64_f32", [7, 33], 64, "float32", "normal"),
    ("q4_1x4097_bs64_f32", [1, 4097], 64, "float32", "normal"),
    ("q4_256x256_bs64_f32", [256, 256], 64, "float32", "weights"),
    ("q4_128x1000_bs64_f32", [128, 1000], 64, "float32", "weights"),
    ("q4_128x1000_bs128_f32", [128, 1000], 128, "float32", "weights"),
    ("q4_3x224_bs64_bf16", [3, 224], 64, "bfloat16", "normal"),
    ("q4_7x33_bs64_f16", [7, 33], 64, "float16", "normal"),
]

# Full dequantized arrays are committed only up to this many elements; above it only the first
# HEAD_ROWS rows (where blocks already straddle rows) are, besides absmax (decoded absmax for double
# quantization): dequantized = quant_map[code] * absmax[block] is one float32 product, so the rest
# is recomputable exactly. This keeps the committed data small.
FULL_LIMIT = 20000
HEAD_ROWS = 16


def quant_vectors(w: common.Writer) -> list[dict]:
    cases = []
    code = F.get_4bit_type("nf4", device="cpu")
    for cid, shape, bs, dtn, kind in QUANT_CASES:
        # Inputs are drawn per (shape, kind) so that the bs128 case reuses the bs64 input file.
        input_id = f"in_{'x'.join(map(str, shape))}_{kind}"
        x32 = make_input(input_id, shape, kind)
        big = x32.size > FULL_LIMIT
        if big:
            # Large float32 inputs hold values exactly representable in float16 and are stored as
            # float16 (half the bytes); widening them back to float32 is exact.
            x32 = x32.astype(np.float16).astype(np.float32)
        x = torch.from_numpy(x32).to(DTYPES[dtn])
        if big and dtn == "float32":
            x_info = dict(w.npy(f"{input_id}_{dtn}_as_f16", x32.astype(np.float16)), dtype=dtn, stored_dtype="float16")
        else:
            x_info = w.npy(f"{input_id}_{dtn}", arr(x))
            x_info = dict(x_info, dtype=dtn, stored_dtype="uint16" if dtn == "bfloat16" else dtn)
        for dq in (False, True):
            case_id = cid + ("_dq" if dq else "")
            packed, qs = F.quantize_4bit(x, blocksize=bs, compress_statistics=dq, quant_type="nf4")
            n = int(np.prod(shape))
            nblocks = -(-n // bs)
            assert packed.shape == ((n + 1) // 2, 1), packed.shape
            outs = {"packed": w.npy(f"{case_id}.packed", arr(packed))}
            if dq:
                absmax_f32 = nested_absmax_default(qs)
                # bnb's own path (native CPU dequantize_blockwise + offset) for comparison.
                bnb_absmax = F.dequantize_blockwise(qs.absmax, qs.state2) + qs.offset
                outs["absmax"] = w.npy(f"{case_id}.absmax_codes", arr(qs.absmax))
                outs["nested_absmax"] = w.npy(f"{case_id}.nested_absmax", arr(qs.state2.absmax))
                outs["nested_quant_map"] = w.npy(f"{case_id}.nested_quant_map", arr(qs.state2.code))
                outs["offset"] = w.npy(f"{case_id}.offset", arr(qs.offset.reshape(())))
                outs["absmax_decoded"] = w.npy(f"{case_id}.absmax_decoded", arr(absmax_f32))
                nested = {
                    "nested_blocksize": qs.state2.blocksize,
                    "native_absmax_equal": bool(torch.equal(bnb_absmax.float(), absmax_f32)),
                }
            else:
                absmax_f32 = qs.absmax
                outs["absmax"] = w.npy(f"{case_id}.absmax", arr(qs.absmax))
                nested = {}
            assert absmax_f32.numel() == nblocks
            deq = dequant_default(packed, absmax_f32, bs, shape, x.dtype)
            native = F.dequantize_4bit(packed, qs, quant_type="nf4")
            diff = (native.float() - deq.float()).abs()
            if n <= FULL_LIMIT:
                key, val = "dequantized", deq
            else:
                key, val = "dequantized_rows", deq[:HEAD_ROWS]
            outs[key] = w.npy(f"{case_id}.{key}", arr(val))
            outs[key]["stored_dtype"] = outs[key]["dtype"]
            outs[key]["dtype"] = dtn
            cases.append(
                {
                    "id": case_id,
                    "call": f"bitsandbytes.functional.quantize_4bit(x, blocksize={bs}, "
                    f"compress_statistics={dq}, quant_type='nf4')",
                    "shape": shape,
                    "dtype": dtn,
                    "blocksize": bs,
                    "compress_statistics": dq,
                    "n_blocks": nblocks,
                    "input": x_info,
                    "outputs": outs,
                    "native_cpu_dequantize_equal": bool(torch.equal(native, deq)),
                    "native_cpu_dequantize_max_abs_diff": float(diff.max()),
                    "native_cpu_dequantize_wrong_values": int((diff > 0).sum()),
                    **nested,
                }
            )
    w.npy("nf4_quant_map", arr(code))
    return cases


LAYER_CASES = [
    # id, in_features, out_features
    ("l128x64", 128, 64),
    ("l200x48", 200, 48),
    ("l784x32", 784, 32),
]


def layer_input(case_id: str, n_in: int) -> torch.Tensor:
    rng = np.random.default_rng(seed_of(case_id + ":x"))
    return torch.from_numpy(rng.standard_normal((4, n_in)).astype(np.float32))


def dense_layer(case_id: str, n_in: int, n_out: int) -> torch.nn.Linear:
    rng = np.random.default_rng(seed_of(case_id + ":w"))
    lin = torch.nn.Linear(n_in, n_out, bias=True)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy((rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)))
        lin.bias.copy_(torch.from_numpy((0.1 * rng.standard_normal(n_out)).astype(np.float32)))
    return lin


def save_safetensors(w: common.Writer, name: str, sd: dict) -> dict:
    from safetensors.torch import save_file

    path = os.path.join(w.out, name)
    sd = {k: v.detach().contiguous().clone() for k, v in sd.items()}
    save_file(sd, path, metadata={"format": "pt"})
    w.files.append(name)
    keys = {}
    for k, v in sorted(sd.items()):
        keys[k] = {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
    return {"file": name, "keys": keys}


def layer_vectors(w: common.Writer) -> list[dict]:
    cases = []
    for cid, n_in, n_out in LAYER_CASES:
        lin = dense_layer(cid, n_in, n_out)
        x = layer_input(cid, n_in)
        x_info = w.npy(f"{cid}.x", x.numpy())
        dense_info = w.npy(f"{cid}.dense_weight", lin.weight.detach().numpy())
        bias_info = w.npy(f"{cid}.bias", lin.bias.detach().numpy())

        for dq in (False, True):
            case_id = f"linear4bit_nf4_{cid}" + ("_dq" if dq else "")
            layer = bnb.nn.Linear4bit(n_in, n_out, bias=True, compute_dtype=torch.float32,
                                      compress_statistics=dq, quant_type="nf4")
            layer.load_state_dict(lin.state_dict())
            layer = layer.to("cpu")  # quantization happens here
            assert layer.weight.bnb_quantized
            sd = layer.state_dict()
            st = save_safetensors(w, f"{case_id}.safetensors", sd)
            qs = layer.weight.quant_state
            absmax = nested_absmax_default(qs) if dq else qs.absmax
            wdq = dequant_default(layer.weight.data, absmax, qs.blocksize, qs.shape, torch.float32)
            y = torch.nn.functional.linear(x, wdq, lin.bias)
            layer.train()  # the training path dequantizes and runs F.linear (no bf16 CPU repacking)
            with torch.no_grad():
                y_bnb = layer(x)
            bnb_diff = float((y_bnb - y).abs().max())
            cases.append({
                "id": case_id,
                "kind": "Linear4bit",
                "construct": f"bnb.nn.Linear4bit({n_in}, {n_out}, bias=True, compute_dtype=torch.float32, "
                             f"compress_statistics={dq}, quant_type='nf4').to('cpu')",
                "in_features": n_in, "out_features": n_out, "blocksize": qs.blocksize,
                "compress_statistics": dq,
                "quant_state_json": json.loads(bytes(sd["weight.quant_state.bitsandbytes__nf4"].tolist()).decode()),
                "safetensors": st,
                "dense_weight": dense_info, "bias": bias_info, "x": x_info,
                "dequantized_weight": w.npy(f"{case_id}.dequantized_weight", wdq.numpy()),
                "y": w.npy(f"{case_id}.y", y.detach().numpy()),
                "y_def": "x @ dequantized_weight.T + bias in float32 (torch.nn.functional.linear)",
                "bnb_forward_max_abs_diff": bnb_diff,
                "bnb_forward_note": "layer(x) in train mode under no_grad: bnb's own CPU path (native "
                                    "dequantize_4bit kernel + F.linear); differs from y where that kernel is "
                                    "wrong (in_features not a multiple of the block size)",
            })

        case_id = f"linear8bitlt_{cid}"
        layer = bnb.nn.Linear8bitLt(n_in, n_out, bias=True, has_fp16_weights=False, threshold=0.0)
        layer.load_state_dict(lin.state_dict())
        layer = layer.to("cpu")  # quantization happens here (weights cast to float16 first)
        assert layer.weight.dtype == torch.int8
        sd = layer.state_dict()
        st = save_safetensors(w, f"{case_id}.safetensors", sd)
        cb, scb = layer.weight.data, layer.weight.SCB
        wdq = F.int8_vectorwise_dequant(cb, scb)
        y = torch.nn.functional.linear(x, wdq, lin.bias)
        layer.eval()
        with torch.no_grad():
            y_bnb = layer(x)
        cases.append({
            "id": case_id,
            "kind": "Linear8bitLt",
            "construct": f"bnb.nn.Linear8bitLt({n_in}, {n_out}, bias=True, has_fp16_weights=False, "
                         "threshold=0.0).to('cpu')",
            "in_features": n_in, "out_features": n_out,
            "safetensors": st,
            "dense_weight": dense_info, "bias": bias_info, "x": x_info,
            "dequantized_weight": w.npy(f"{case_id}.dequantized_weight", wdq.numpy()),
            "dequantized_def": "weight(int8) * SCB[:, None] * 7.874015718698502e-3 (float32, in that order)",
            "y": w.npy(f"{case_id}.y", y.detach().numpy()),
            "y_def": "x @ dequantized_weight.T + bias in float32 (weight-only)",
            "y_bnb": w.npy(f"{case_id}.y_bnb", y_bnb.detach().numpy()),
            "y_bnb_def": "layer(x) in eval mode: bnb's LLM.int8() path, x cast to float16, per-row int8 "
                         "absmax quantization of x, int8 matmul, dequantized with SCA*SCB/127^2",
            "y_bnb_max_abs_diff_to_y": float((y_bnb - y).abs().max()),
        })
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    common.torch_inference()
    w = common.Writer(args.out)
    quant = quant_vectors(w)
    layers = layer_vectors(w)
    index = {
        "format": 1,
        "versions": common.versions("torch", "bitsandbytes", "safetensors", "numpy"),
        "nf4_quant_map": {"file": "nf4_quant_map.npy", "shape": [16], "dtype": "float32"},
        "quantize_4bit": quant,
        "layers": layers,
        "notes": {
            "seeds": "inputs: numpy default_rng(crc32(input id)).standard_normal(shape) as float32 "
                     "(x0.02 for 'weights'; 'zero_block': the first 64 values set to 0); inputs of more than "
                     f"{FULL_LIMIT} values are then rounded to float16 and stored as float16 (stored_dtype), "
                     "their float32 widening being the input; "
                     "bf16/f16 inputs are the float32 draw converted with torch .to(dtype) (round to nearest even)",
            "bfloat16": "bfloat16 arrays are stored as their raw bits in uint16 (stored_dtype)",
            "dequantized": "bnb's pure-PyTorch default backend (_dequantize_4bit_compute), not the native CPU kernel",
        },
    }
    w.json("index", index)


if __name__ == "__main__":
    main()
