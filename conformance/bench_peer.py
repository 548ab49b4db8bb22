#!/usr/bin/env python3
"""Peer benchmark: eformer's quantized matmul on JAX CPU.

Times ``jax.jit(implicit(lambda x, q: x @ q))`` for NF4, int8 and ternary (Array1B) weights, and a dense
float32 ``jax.jit(lambda x, w: x @ w)`` baseline, for x of shape (M, K) float32 and weights (K, N), at the
same shapes as quanta's ``make bench`` table (M = 1, 8, 64, 512, 2048; K = N = 4096).

Decode-size M has to stream the weights from memory, so every format (dense included) cycles through a stack
of distinct weight matrices (8 by default: 8 x 64 MiB dense f32, 8 x 8 MiB NF4, ...) whose working set
exceeds a 32 MiB last-level cache. Each point: compile, warm up once on every weight of the stack, then
time calls with ``block_until_ready`` and report the median (and min) in seconds.

Usage:
    python conformance/bench_peer.py OUT.json [--m 1,8,64,512,2048] [--k 4096] [--n 4096]
        [--formats nf4,int8,ternary,dense] [--stack 8] [--reps 20] [--budget 5] [--block-size 64]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("WARN_ON_MATTER", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from eformer.jaximus import implicit  # noqa: E402
from eformer.ops.quantization import Array8B, ArrayNF4, quantize  # noqa: E402


def make_weights(fmt: str, k: int, n: int, stack: int, block_size: int):
    ws = []
    for i in range(stack):
        key = jax.random.PRNGKey(1000 + i)
        w = jax.random.normal(key, (k, n), jnp.float32) * 0.02
        if fmt == "dense":
            q = w
        elif fmt == "nf4":
            q = ArrayNF4.quantize(w, block_size=block_size)
        elif fmt == "int8":
            q = Array8B.quantize(w)  # default axis (-1,): scale (K, 1)
        elif fmt == "ternary":
            q = quantize(w, dtype="ternary")  # Array1B, materializes as int8
        else:
            raise ValueError(fmt)
        jax.block_until_ready(jax.tree_util.tree_leaves(q))
        ws.append(q)
        del w
    return ws


def weight_bytes(q) -> int:
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(q)))


def bench_point(fn, x, ws, reps: int, budget: float, min_reps: int = 3):
    for q in ws:  # compile + warm up on every weight of the stack
        fn(x, q).block_until_ready()
    times = []
    start = time.perf_counter()
    i = 0
    while i < reps and (i < min_reps or time.perf_counter() - start < budget):
        q = ws[i % len(ws)]
        t0 = time.perf_counter()
        fn(x, q).block_until_ready()
        times.append(time.perf_counter() - t0)
        i += 1
    return times


def main():
    ap = argparse.ArgumentParser(description="eformer peer benchmark on JAX CPU")
    ap.add_argument("out", help="output JSON path")
    ap.add_argument("--m", default="1,8,64,512,2048")
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--formats", default="nf4,int8,ternary,dense")
    ap.add_argument("--stack", type=int, default=8, help="distinct weight matrices cycled per format")
    ap.add_argument("--reps", type=int, default=20, help="max timed calls per point")
    ap.add_argument("--budget", type=float, default=5.0, help="seconds per point after 3 timed calls")
    ap.add_argument("--block-size", type=int, default=64, help="NF4 block size")
    args = ap.parse_args()

    ms = [int(v) for v in args.m.split(",") if v]
    formats = [f for f in args.formats.split(",") if f]
    quant_mm = jax.jit(implicit(lambda x, q: x @ q))
    dense_mm = jax.jit(lambda x, w: x @ w)

    results = []
    for fmt in formats:
        t0 = time.perf_counter()
        ws = make_weights(fmt, args.k, args.n, args.stack, args.block_size)
        print(f"[{fmt}] {args.stack} weights quantized in {time.perf_counter() - t0:.1f}s, "
              f"{weight_bytes(ws[0]) / 2**20:.2f} MiB each", file=sys.stderr, flush=True)
        fn = dense_mm if fmt == "dense" else quant_mm
        for m in ms:
            x = jax.random.normal(jax.random.PRNGKey(m), (m, args.k), jnp.float32)
            times = bench_point(fn, x, ws, args.reps, args.budget)
            med = statistics.median(times)
            out_dtype = str(fn(x, ws[0]).dtype)
            results.append({
                "format": fmt, "M": m, "K": args.k, "N": args.n, "median_s": med, "min_s": min(times),
                "reps": len(times), "times_s": times, "x_dtype": "float32", "out_dtype": out_dtype,
                "weight_bytes": weight_bytes(ws[0]),
            })
            print(f"[{fmt}] M={m:5d} median {med * 1e3:9.3f} ms  min {min(times) * 1e3:9.3f} ms  "
                  f"({len(times)} reps, out {out_dtype})", file=sys.stderr, flush=True)
        del ws

    doc = {
        "tool": "conformance/bench_peer.py",
        "what": "jax.jit(implicit(lambda x, q: x @ q)) in eformer; dense: jax.jit(lambda x, w: x @ w)",
        "versions": {p: md.version(p) for p in ("eformer", "jax", "jaxlib", "numpy")},
        "device": str(jax.devices()[0]),
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "processor": platform.processor()},
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "config": {"M": ms, "K": args.k, "N": args.n, "formats": formats, "stack": args.stack,
                   "max_reps": args.reps, "budget_s": args.budget, "nf4_block_size": args.block_size,
                   "int8_axis": [-1], "ternary": "quantize(w, dtype='ternary') -> Array1B (int8 materialize)"},
        "results": results,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
