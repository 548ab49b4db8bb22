#!/usr/bin/env python3
"""Fashion-MNIST reference: an fp32 MLP, post-training quantization, then QAT, per format.

Usage: python reference/fashion_mnist.py --out reference/testdata/fmnist [--epochs 5 --qat-epochs 2]

Data: /usr/share/datasets/fashion-mnist (Debian dataset-fashion-mnist), images as float32 x/255,
flattened to 784; 60000 train, 10000 test.
Model: Linear(784,512) - ReLU - Linear(512,512) - ReLU - Linear(512,10), PyTorch default init
under torch.manual_seed(0); cross-entropy; Adam(lr 1e-3, default betas/eps); batch 128; each epoch
a torch.randperm of the training set from a torch.Generator seeded with 1000+epoch; float32, 1 thread.

1. train 5 epochs in float32 -> `fp32` (PTQ column: its test accuracy).
2. PTQ: quantize the weights of all three linears (biases float32) and evaluate:
     int8            per output channel (row of W[out,in]) s = absmax/127, q = round_half_even(W/s), W' = q*s
     nf4             bitsandbytes quantize_4bit(W[out,in], blocksize=64, nf4) (flat blocks along `in`;
                     784 is not a multiple of 64, so blocks straddle rows as bnb does), dequantized with
                     bnb's pure-PyTorch backend
     ternary         eformer: thr = 0.5*std(W) over the whole tensor, W' in {-1,0,+1}, no scale
     ternary_scaled  the ternary pattern times the row's mean|W|
     binary          eformer: sign(W) with 0 -> +1, no scale
     binary_scaled   the binary pattern times the row's mean|W|
3. QAT: from the same fp32 checkpoint, 2 more epochs per format with a fresh Adam(1e-3): the forward
   uses W' (recomputed from the float weights every step), the gradient goes straight through to
   the float weights (W + (W' - W).detach()). `fp32` gets the same 2 extra epochs without quantization.
   QAT column: test accuracy with W' after those epochs.
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import time

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import gen_smollm as sm  # noqa: E402  (the same weight rules as the SmolLM2 table)

FORMATS = {
    "fp32": lambda w: w,
    "int8": sm.int8_wo,
    "nf4": sm.nf4_in,
    "ternary": sm.TRANSFORMS["ternary"],
    "ternary_scaled": sm.TRANSFORMS["ternary_scaled"],
    "binary": sm.TRANSFORMS["binary"],
    "binary_scaled": sm.TRANSFORMS["binary_scaled"],
}


def log(*a):
    print("fmnist:", *a, file=sys.stderr, flush=True)


def load_idx(name: str) -> np.ndarray:
    with gzip.open(os.path.join(common.FASHION_DIR, name), "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load():
    common.require(common.FASHION_DIR)
    xs = {}
    for split in ("train", "t10k"):
        x = load_idx(f"{split}-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / np.float32(255)
        y = load_idx(f"{split}-labels-idx1-ubyte.gz").astype(np.int64)
        xs[split] = (torch.from_numpy(x), torch.from_numpy(y))
    return xs["train"], xs["t10k"]


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(784, 512)
        self.l2 = torch.nn.Linear(512, 512)
        self.l3 = torch.nn.Linear(512, 10)
        self.quant = None  # weight transform used in the forward (with a straight-through gradient)

    def w(self, lin):
        if self.quant is None:
            return lin.weight
        wd = lin.weight.detach()
        return lin.weight + (self.quant(wd) - wd).detach()

    def forward(self, x):
        x = torch.relu(torch.nn.functional.linear(x, self.w(self.l1), self.l1.bias))
        x = torch.relu(torch.nn.functional.linear(x, self.w(self.l2), self.l2.bias))
        return torch.nn.functional.linear(x, self.w(self.l3), self.l3.bias)


def train(model, data, epochs: int, seed_base: int, batch: int = 128) -> list[float]:
    x, y = data
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    model.train()
    for ep in range(epochs):
        g = torch.Generator().manual_seed(seed_base + ep)
        perm = torch.randperm(x.shape[0], generator=g)
        tot, n = 0.0, 0
        for i in range(0, x.shape[0], batch):
            idx = perm[i:i + batch]
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            tot += float(loss.detach()) * idx.numel()
            n += idx.numel()
        losses.append(tot / n)
    return losses


@torch.no_grad()
def accuracy(model, data) -> float:
    model.eval()
    x, y = data
    pred = torch.cat([model(x[i:i + 2000]).argmax(1) for i in range(0, x.shape[0], 2000)])
    return float((pred == y).double().mean())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--qat-epochs", type=int, default=2)
    ap.add_argument("--formats", default=",".join(FORMATS))
    args = ap.parse_args()
    common.set_torch_threads(1)
    train_set, test_set = load()

    torch.manual_seed(0)
    base = MLP()
    t0 = time.time()
    losses = train(base, train_set, args.epochs, seed_base=1000)
    base_state = {k: v.clone() for k, v in base.state_dict().items()}
    log(f"fp32 {args.epochs} epochs in {time.time() - t0:.0f}s, test accuracy {accuracy(base, test_set):.4f}")

    table = {}
    for name in args.formats.split(","):
        fn = FORMATS[name]
        m = MLP()
        m.load_state_dict(base_state)
        m.quant = None if name == "fp32" else fn
        ptq = accuracy(m, test_set)
        t0 = time.time()
        qat_losses = train(m, train_set, args.qat_epochs, seed_base=2000)
        qat = accuracy(m, test_set)
        table[name] = {"ptq": ptq, "qat": qat, "qat_train_loss": qat_losses}
        log(f"{name}: PTQ {ptq:.4f}  QAT {qat:.4f}  ({time.time() - t0:.0f}s)")

    w = common.Writer(args.out)
    w.json("accuracy", {
        "format": 1,
        "versions": common.versions("torch", "bitsandbytes", "numpy"),
        "config": {"epochs": args.epochs, "qat_epochs": args.qat_epochs, "batch": 128, "optimizer": "Adam(lr=1e-3)",
                   "model": "784-512-512-10 ReLU MLP", "init_seed": 0, "shuffle_seeds": "1000+epoch (fp32), 2000+epoch (QAT)",
                   "threads": 1},
        "fp32_train_loss": losses,
        "accuracy": table,
        "def": __doc__.split("Data:")[1],
    })


if __name__ == "__main__":
    main()
