#!/usr/bin/env python3
"""llama.cpp CPU speed on SmolLM2-135M: prompt and decode tokens per second, per weight type.

Usage: reference/run.sh speed [--types Q4_1,F32,Q8_0,Q4_0 | --files A.gguf,B.gguf] [--threads 2] [--reps 3] [--quick]

Run it on a quiet machine: every other process on the cores shows up in the figures.

For each type: the shipped Q4_1 GGUF, and F32 / Q8_0 / Q4_0 files made from it once with llama.cpp's
own quantizer (``llama_cpp.llama_model_quantize``, allow_requantize; cached outside git under
$QUANTA_REF_CACHE, default <assets>/reference-cache). F32 holds exactly the Q4_1/Q8_0 values; Q8_0
and Q4_0 are re-quantizations of them, fine for timing only. --files times the given GGUF files
instead (any architecture llama.cpp runs), each reported under the type its name ends with
(``SmolLM2-135M-Instruct.Q4_K_M.gguf``: Q4_K_M).

  prompt   the first N (512) llama.cpp ids of GPL-3 evaluated as one batch (n_batch = N) from an
           empty KV cache: prompt_tok_s = N / seconds
  decode   from an empty cache, the 1-token prompt "The" then 128 greedy steps, one token per
           llama_decode (argmax of the last logits): decode_tok_s = 128 / seconds (the prompt and
           the argmax are included in neither/both: argmax of 49152 floats is ~20 us); and the
           same 128 steps after the N-token prompt (decode_after_prompt_tok_s)
Each is repeated --reps times after one untimed warm-up run; the JSON reports the median and the
best. One JSON line per type on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import llamacpp_util  # noqa: E402
import numpy as np  # noqa: E402


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def file_type(path: str) -> str:
    """The type a GGUF file's name ends with: "model.Q4_K_M.gguf" gives "Q4_K_M"."""
    stem = os.path.basename(path).removesuffix(".gguf")
    return stem.rsplit(".", 1)[-1] if "." in stem else stem


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--types", default="Q4_1,F32,Q8_0,Q4_0")
    ap.add_argument("--files", default="", help="comma-separated GGUF files to time instead of --types")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--quick", action="store_true", help="8-token prompt, 8 decode steps, 1 rep: a smoke test")
    args = ap.parse_args()
    if args.quick:
        args.prompt, args.decode, args.reps = 8, 8, 1
    import llama_cpp
    from llama_cpp import Llama

    text = open(common.require(common.GPL3), encoding="utf-8").read()
    if args.files:
        runs = [(file_type(p), p) for p in args.files.split(",")]
    else:
        runs = [(t, llamacpp_util.gguf_of_type(t, nthread=args.threads)) for t in args.types.split(",")]
    for t, path in runs:
        n_ctx = args.prompt + args.decode + 8
        llm = Llama(path, n_ctx=n_ctx, n_batch=args.prompt, n_ubatch=args.prompt, n_threads=args.threads,
                    n_threads_batch=args.threads, verbose=False)
        ids = list(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))[: args.prompt]
        first = list(llm.tokenize(b"The", add_bos=False, special=False))
        n_vocab = llm.n_vocab()

        def prompt_run() -> float:
            llm.reset()
            t0 = time.perf_counter()
            llm.eval(ids)
            return time.perf_counter() - t0

        def decode_run(start: list[int]) -> tuple[float, list[int]]:
            llm.reset()
            llm.eval(start)
            out = []
            t0 = time.perf_counter()
            for _ in range(args.decode):
                logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))
                tok = int(np.argmax(logits))
                out.append(tok)
                llm.eval([tok])
            return time.perf_counter() - t0, out

        prompt_run()
        decode_run(ids)
        decode_run(first)
        p, a, d = [], [], []
        for _ in range(args.reps):
            p.append(prompt_run())
            a.append(decode_run(ids))
            d.append(decode_run(first))
        row = {
            "type": t,
            "file": os.path.basename(path),
            "file_bytes": os.path.getsize(path),
            "threads": args.threads,
            "prompt_tokens": len(ids),
            "prompt_tok_s_median": len(ids) / statistics.median(p),
            "prompt_tok_s_best": len(ids) / min(p),
            "decode_tokens": args.decode,
            "decode_tok_s_median": args.decode / statistics.median(x for x, _ in d),
            "decode_tok_s_best": args.decode / min(x for x, _ in d),
            "decode_after_prompt_tok_s_median": args.decode / statistics.median(x for x, _ in a),
            "decode_after_prompt_tok_s_best": args.decode / min(x for x, _ in a),
            "decode_text": llm.detokenize(d[0][1]).decode("utf-8", errors="replace"),
            "reps": args.reps,
            "llama_cpp_python": llama_cpp.__version__,
            "system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
            "cpu": cpu_name(),
            "quick": args.quick,
        }
        print(json.dumps(row, sort_keys=True), flush=True)
        del llm


if __name__ == "__main__":
    main()
