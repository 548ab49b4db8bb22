"""Reference vectors for quanta's GGML block codecs (packages gguf and ggml), from ggml itself.

Two references run for real:
  - ggml's C code (ggml-quants.c of the llama.cpp that llama-cpp-python 0.3.36 vendors, built as
    libggml-base by reference/ggml.sh): quantize_row_<type>_ref and dequantize_row_<type>, called
    through ctypes;
  - gguf-py (gguf==0.19.0): gguf.quants.dequantize for every type, gguf.quants.quantize for the
    types it implements (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).
The C results are written; gguf-py is checked against them here and its agreement recorded in
index.json (a disagreement is reported, never hidden).

  gen_ggml.py vectors --lib libggml-base.so --out DIR
      x.npy                  float32 (24, 256): the inputs, one edge case a row (index.json)
      <type>.q.npy           uint8 (24, bytes per row): quantize_row_<type>_ref of x (all rows in one call)
      <type>.deq.npy         float32 (24, 256): dequantize_row_<type> of <type>.q
      <type>.raw.npy         uint8 (4, bytes per row): random blocks (finite random half scales)
      <type>.raw_deq.npy     float32 (4, 256): dequantize_row_<type> of <type>.raw
      index.json             versions, rows, and gguf-py's agreement per type
  gen_ggml.py digests --lib libggml-base.so --gguf FILE --out FILE.json
      per tensor of a GGUF file: type, GGML dims, and the sha256 of gguf-py's dequantization (float32,
      little-endian, row-major); the block types are dequantized by ggml's C code too, and must agree.

Deterministic: numpy default_rng seeded with crc32 of a name, JSON with sorted keys.
"""

import argparse
import ctypes
import hashlib
import json
import zlib
from importlib import metadata
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

# name: (gguf-py type, elements per block, bytes per block, byte offsets of the half scales)
TYPES = {
    "q4_0": (QT.Q4_0, 32, 18, [0]),
    "q4_1": (QT.Q4_1, 32, 20, [0, 2]),
    "q5_0": (QT.Q5_0, 32, 22, [0]),
    "q5_1": (QT.Q5_1, 32, 24, [0, 2]),
    "q8_0": (QT.Q8_0, 32, 34, [0]),
    "q2_K": (QT.Q2_K, 256, 84, [80, 82]),
    "q3_K": (QT.Q3_K, 256, 110, [108]),
    "q4_K": (QT.Q4_K, 256, 144, [0, 2]),
    "q5_K": (QT.Q5_K, 256, 176, [0, 2]),
    "q6_K": (QT.Q6_K, 256, 210, [208]),
    "iq4_nl": (QT.IQ4_NL, 32, 18, [0]),
}
GGUF_PY_QUANTIZES = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0"}
ROW = 256


def rng(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def load_lib(path):
    lib = ctypes.CDLL(str(path))
    f32p, u8p = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_uint8)
    for name in TYPES:
        q = getattr(lib, f"quantize_row_{name}_ref")
        q.argtypes, q.restype = [f32p, u8p, ctypes.c_int64], None
        d = getattr(lib, f"dequantize_row_{name}")
        d.argtypes, d.restype = [u8p, f32p, ctypes.c_int64], None
    return lib


def c_quantize(lib, name, x):
    _, bs, bb, _ = TYPES[name]
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.zeros(x.size // bs * bb, dtype=np.uint8)
    getattr(lib, f"quantize_row_{name}_ref")(
        x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), out.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), x.size)
    return out


def c_dequantize(lib, name, q, n):
    q = np.ascontiguousarray(q, dtype=np.uint8).reshape(-1)
    out = np.zeros(n, dtype=np.float32)
    getattr(lib, f"dequantize_row_{name}")(
        q.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), n)
    return out


def same_bits(a, b):
    """Bit-identical float32 arrays, any NaN equal to any NaN."""
    a, b = np.asarray(a, np.float32).reshape(-1), np.asarray(b, np.float32).reshape(-1)
    if a.shape != b.shape:
        return False
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a.view(np.uint32)[~nan], b.view(np.uint32)[~nan]))


# The input rows: (description, values). Row 0 is ordinary data, so that no call starts with a
# block below ggml's 1e-15 threshold (IQ4_NL's codes there are whatever ggml's buffer held).
def input_rows():
    r = rng("ggml-inputs")
    rows = []
    rows.append(("normal(0, 1)", r.standard_normal(ROW)))
    zeros = np.zeros(ROW)
    zeros[::7] = -0.0
    rows.append(("zeros and negative zeros", zeros))
    rows.append(("constant 0.75", np.full(ROW, 0.75)))
    rows.append(("constant -3.25", np.full(ROW, -3.25)))
    rows.append(("negative only: -2|normal|", -2 * np.abs(r.standard_normal(ROW))))
    rows.append(("positive only: uniform(0.1, 5)", r.uniform(0.1, 5, ROW)))
    rows.append(("near the half range: uniform(-70000, 70000)", r.uniform(-70000, 70000, ROW)))
    huge = r.standard_normal(ROW) * 1e30
    huge[::9] = 3e38
    huge[4::9] = -3.3e38
    rows.append(("huge: normal·1e30 and ±3e38", huge))
    tiny = r.standard_normal(ROW) * 1e-30
    tiny[::5] = 1e-40
    tiny[2::5] = -3e-42
    rows.append(("tiny: normal·1e-30 and float32 subnormals", tiny))
    mixed = np.zeros(ROW)
    for j in range(ROW // 16):
        s = slice(16 * j, 16 * j + 16)
        kind = j % 8
        if kind == 1:
            mixed[s] = 1.5
        elif kind == 2:
            mixed[s] = r.standard_normal(16)
        elif kind == 3:
            mixed[s] = r.standard_normal(16) * 1e-3
        elif kind == 4:
            mixed[s] = r.standard_normal(16) * 0.01
            mixed[16 * j + 5] = 100
        elif kind == 5:
            mixed[s] = np.linspace(-1, 1, 16)
        elif kind == 6:
            mixed[s] = np.arange(-8, 8) * 0.25
        elif kind == 7:
            mixed[s] = -np.linspace(0.5, 2, 16)
    rows.append(("mixed 16-element groups: zeros, constant, normal, small, outlier, ramps, grid", mixed))
    rows.append(("grid k/8, k = -128..127 (rounding ties)", np.arange(-128, 128) / 8))
    rows.append(("normal(0, 1)·2^-10", r.standard_normal(ROW) * 2.0**-10))
    # Ordinary data, where the K-quants' scale searches take many paths.
    rows.append(("normal(0, 0.02), as trained weights", r.standard_normal(ROW) * 0.02))
    rows.append(("normal(0, 0.02), as trained weights", r.standard_normal(ROW) * 0.02))
    rows.append(("laplace(0, 1)", r.laplace(0, 1, ROW)))
    rows.append(("student-t(3): heavy tails", r.standard_t(3, ROW)))
    rows.append(("uniform(-1, 1)", r.uniform(-1, 1, ROW)))
    rows.append(("normal(2, 0.5): offset", r.normal(2, 0.5, ROW)))
    rows.append(("exponential(1)", r.exponential(1, ROW)))
    rows.append(("bimodal ±1 + normal(0, 0.1)", np.sign(r.standard_normal(ROW)) + r.standard_normal(ROW) * 0.1))
    rows.append(("normal(0, 1) with 1% outliers ×50", r.standard_normal(ROW) * np.where(r.random(ROW) < 0.01, 50, 1)))
    rows.append(("normal(0, 1)·1e-4", r.standard_normal(ROW) * 1e-4))
    rows.append(("normal(-0.3, 1)", r.normal(-0.3, 1, ROW)))
    rows.append(("normal(0, 3)", r.normal(0, 3, ROW)))
    return rows


def half_pool(r, n, with_inf):
    """n random finite half-precision bit patterns: any sign, exponent and mantissa, plus zeros,
    subnormals and ±65504 (and ±inf when with_inf)."""
    bits = r.integers(0, 1 << 16, n, dtype=np.uint32)
    bits = np.where((bits & 0x7C00) == 0x7C00, bits & 0xFBFF, bits)  # no inf/NaN
    special = np.array([0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF, 0x3C00, 0x0400], dtype=np.uint32)
    if with_inf:
        special = np.concatenate([special, np.array([0x7C00, 0xFC00], dtype=np.uint32)])
    pick = r.random(n) < 0.2
    bits[pick] = r.choice(special, pick.sum())
    return bits.astype(np.uint16)


def raw_blocks(name):
    _, bs, bb, halves = TYPES[name]
    r = rng("ggml-raw-" + name)
    nb = 4 * ROW // bs
    blocks = r.integers(0, 256, (nb, bb), dtype=np.uint16).astype(np.uint8)
    for off in halves:
        h = half_pool(r, nb, with_inf=False)
        inf_rows = np.arange(nb) >= 3 * ROW // bs  # the last row also meets infinite scales
        h[inf_rows] = half_pool(r, int(inf_rows.sum()), with_inf=True)
        blocks[:, off] = (h & 0xFF).astype(np.uint8)
        blocks[:, off + 1] = (h >> 8).astype(np.uint8)
    return blocks.reshape(4, -1)


def vectors(args):
    lib = load_lib(args.lib)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = input_rows()
    x = np.stack([v for _, v in rows]).astype(np.float32)
    np.save(out / "x.npy", x)
    index = {
        "versions": {"gguf": metadata.version("gguf"), "numpy": np.__version__,
                     "ggml": "ggml-base of llama-cpp-python 0.3.36 (sdist), reference/ggml.sh"},
        "rows": [d for d, _ in rows],
        "types": {},
    }
    failures = []
    for name, (qt, bs, bb, _) in TYPES.items():
        q = c_quantize(lib, name, x).reshape(x.shape[0], -1)
        deq = c_dequantize(lib, name, q, x.size).reshape(x.shape)
        raw = raw_blocks(name)
        raw_deq = c_dequantize(lib, name, raw, raw.shape[0] * ROW).reshape(raw.shape[0], ROW)
        entry = {
            "block_size": bs, "block_bytes": bb,
            "gguf_py_dequantize_identical": same_bits(dequantize(q, qt), deq) and same_bits(dequantize(raw, qt), raw_deq),
        }
        if name in GGUF_PY_QUANTIZES:
            differ = np.any(quantize(x, qt).reshape(-1, bb) != q.reshape(-1, bb), axis=1).reshape(x.shape[0], -1)
            entry["gguf_py_quantize_blocks_differing"] = int(differ.sum())
            entry["gguf_py_quantize_rows_differing"] = [int(i) for i in np.nonzero(differ.any(axis=1))[0]]
        else:
            entry["gguf_py_quantize_blocks_differing"] = None  # gguf-py has no quantizer for the type
        if not entry["gguf_py_dequantize_identical"]:
            failures.append(f"{name}: gguf-py's dequantization differs from ggml's")
        index["types"][name] = entry
        np.save(out / f"{name}.q.npy", q)
        np.save(out / f"{name}.deq.npy", deq)
        np.save(out / f"{name}.raw.npy", raw)
        np.save(out / f"{name}.raw_deq.npy", raw_deq)
    (out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    for f in failures:
        print("gen_ggml:", f)


def digests(args):
    lib = load_lib(args.lib)
    reader = gguf.GGUFReader(args.gguf)
    names = {v[0]: k for k, v in TYPES.items()}
    tensors = {}
    c_checked = 0
    for t in reader.tensors:
        values = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype="<f4")
        if t.tensor_type in names:
            n = values.size
            if not same_bits(c_dequantize(lib, names[t.tensor_type], t.data, n), values):
                raise SystemExit(f"gen_ggml: {t.name}: gguf-py and ggml dequantize differently")
            c_checked += 1
        tensors[t.name] = {"type": t.tensor_type.name, "dims": [int(d) for d in t.shape],
                           "sha256": hashlib.sha256(values.tobytes()).hexdigest()}
    file_sha = hashlib.sha256(Path(args.gguf).read_bytes()).hexdigest()
    doc = {"file_sha256": file_sha, "tensors": tensors, "block_tensors_checked_against_ggml": c_checked,
           "digest": "sha256 of gguf-py's dequantization, float32 little-endian, row-major"}
    Path(args.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"gen_ggml: {len(tensors)} tensors, {c_checked} block tensors identical in gguf-py and ggml")


def main():
    np.seterr(all="ignore")  # the huge and tiny rows overflow on purpose, in ggml as in gguf-py
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("vectors")
    v.add_argument("--lib", required=True)
    v.add_argument("--out", required=True)
    d = sub.add_parser("digests")
    d.add_argument("--lib", required=True)
    d.add_argument("--gguf", required=True)
    d.add_argument("--out", required=True)
    args = p.parse_args()
    {"vectors": vectors, "digests": digests}[args.cmd](args)


if __name__ == "__main__":
    main()
