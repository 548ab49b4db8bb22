#!/usr/bin/env python3
"""bnb_bench.py: bitsandbytes' NF4 product beside PyTorch's dense bfloat16 one, on one GPU.

The same measurement as quanta's bench in its `add` context, for the side-by-side figure of
tpu_tests/run-on-device.sh: for each weight shape K x N and number of activation rows M, bfloat16
activations x (M, K) multiply distinct weights (PyTorch's Linear layout, N x K), enough of them that
one call streams at least --stream-mib of stored weights, their products summed; the time per
product is the median call's over the weights. Formats: dense bfloat16 (torch.nn.functional.linear)
and bitsandbytes NF4 with blocks of 64 (quantize_4bit, matmul_4bit: its GEMV kernel for one row,
dequantize-then-matmul otherwise). Speed-ups are dense's time over NF4's in the same run; bandwidth
is stored bytes per second, against --peak-gbps when given.

Exit status: 0 after the tables; 3 without PyTorch or a CUDA device (nothing measured); 1 on failure.
"""

import argparse
import json
import statistics
import sys


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="4096x4096,4096x11008,11008x4096,8192x8192", help="weight shapes KxN")
    ap.add_argument("--m", default="1,16,256", help="activation rows")
    ap.add_argument("--stream-mib", type=float, default=128, help="stored weight MiB each call streams, at least")
    ap.add_argument("--max-layers", type=int, default=64, help="most distinct weights per call")
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds of timed calls per cell, at least")
    ap.add_argument("--peak-gbps", type=float, default=0, help="the device's peak memory bandwidth in GB/s")
    ap.add_argument("--json", help="write the results as JSON to this file")
    ap.add_argument("--markdown", help="write the table to this file (stdout always gets it)")
    return ap.parse_args()


def main():
    args = parse_args()
    shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes.split(",")]
    rows = [int(m) for m in args.m.split(",")]
    try:
        import torch
    except ImportError as e:
        print(f"bnb_bench: no PyTorch ({e}): nothing measured", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("bnb_bench: no CUDA device: nothing measured", file=sys.stderr)
        return 3
    import bitsandbytes as bnb
    import bitsandbytes.functional as bnbf

    dev = torch.device("cuda")
    report = {
        "device": torch.cuda.get_device_name(dev),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "bitsandbytes": bnb.__version__,
        "peak_gbps": args.peak_gbps,
        "results": [],
    }
    print(f"bnb_bench: {report['device']}, torch {report['torch']} (CUDA {report['torch_cuda']}), "
          f"bitsandbytes {report['bitsandbytes']}", file=sys.stderr)
    gen = torch.Generator(device=dev)

    def weights_for(k, n, bytes_per_weight):
        count = 0
        total = 0.0
        while count < args.max_layers and (total < args.stream_mib * 2**20 or count < 2):
            count += 1
            total += bytes_per_weight
        return count

    def measure(products, x):
        def call():
            y = None
            for p in products:
                out = p(x)
                y = out if y is None else y + out
            return y

        call()  # warm-up: kernels loaded, workspace allocated
        torch.cuda.synchronize()
        times = []
        spent = 0.0
        while spent < args.min_time or len(times) < 3:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            ms = start.elapsed_time(end)
            times.append(ms)
            spent += ms / 1e3
        return statistics.median(times) / len(products)

    with torch.inference_mode():
        for k, n in shapes:
            for fmt in ("dense-bf16", "bnb-nf4"):
                if fmt == "dense-bf16":
                    per_weight = 2.0 * k * n
                else:
                    per_weight = k * n / 2 + 4.0 * k * n / 64  # codes and a float32 absmax per block of 64
                count = weights_for(k, n, per_weight)
                products = []
                for i in range(count):
                    gen.manual_seed(k * 1_000_003 + n * 7 + i)
                    w = (torch.rand((n, k), generator=gen, device=dev, dtype=torch.float32) * 2 - 1) * (6 / k) ** 0.5
                    w = w.to(torch.bfloat16)
                    if fmt == "dense-bf16":
                        products.append(lambda x, w=w: torch.nn.functional.linear(x, w))
                    else:
                        q, state = bnbf.quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=False)
                        products.append(lambda x, q=q, state=state: bnb.matmul_4bit(x, q.t(), quant_state=state))
                        del w
                for m in rows:
                    x = (torch.arange(m * k, device=dev, dtype=torch.float32).reshape(m, k) % 13 / 13 - 0.5).to(torch.bfloat16)
                    ms = measure(products, x)
                    gbps = per_weight / (ms / 1e3) / 1e9
                    r = {"shape": f"{k}x{n}", "format": fmt, "m": m, "layers": count, "ms_per_product": ms,
                         "bytes_per_product": per_weight, "gbps": gbps,
                         "peak_fraction": gbps / args.peak_gbps if args.peak_gbps > 0 else None}
                    report["results"].append(r)
                    print(f"bnb_bench: {r['shape']:<11} {fmt:<10} m={m:<4} {count:3d} layers {ms:9.4f} ms/product "
                          f"{gbps:8.1f} GB/s", file=sys.stderr)
                del products
                torch.cuda.empty_cache()

    dense = {(r["shape"], r["m"]): r["ms_per_product"] for r in report["results"] if r["format"] == "dense-bf16"}
    for r in report["results"]:
        r["speedup_vs_dense"] = dense[(r["shape"], r["m"])] / r["ms_per_product"]
    lines = [f"bitsandbytes {report['bitsandbytes']} NF4 (blocks of 64) beside dense bfloat16 on {report['device']} "
             f"(torch {report['torch']}), bfloat16 activations, `add` context",
             "", "| shape KxN | format | M | ms/product | speed-up vs dense | GB/s | of peak |", "|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        peak = f"{100 * r['peak_fraction']:.0f}%" if r["peak_fraction"] is not None else "-"
        lines.append(f"| {r['shape']} | {r['format']} | {r['m']} | {r['ms_per_product']:.4f} | {r['speedup_vs_dense']:.2f}x "
                     f"| {r['gbps']:.0f} | {peak} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
