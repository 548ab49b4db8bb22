#!/usr/bin/env python3
"""llama.cpp's ids and detokenized text for a Llama-2-style SentencePiece vocabulary (reference/llamacpp.sh).

Usage: python reference/gen_spm_vocab.py --gguf GEMMA.gguf --out reference/testdata/tokenizer_spm

No Llama-2 file is among the assets, so the vocabulary is Gemma-3's (tokens, scores, merges by
score) with the metadata a Llama-2 file has that Gemma-3's has not: tokenizer.ggml.add_space_prefix
true (a space is written before the text, and llama_detokenize removes the first token's leading
space), and token types changed as index.json's "variant" lists them (the unknown token typed
Unknown, some tokens Unused or undefined). The variant GGUF (metadata only, no tensors) is written to a
temporary folder and loaded with Llama(vocab_only=True).

Writes
    strings.json  for each text, for each EncodeOptions (add_special = add_bos, parse_special =
                  special): llama_tokenize's ids and llama_detokenize(ids, remove_special=false,
                  unparse_special=false) as hex (the bytes may not be UTF-8)
    decode.json   id lists (Unused and undefined tokens among them) and llama_detokenize of each, as above
    index.json    versions, the source GGUF's sha256, the variant
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

# The metadata changed from the source file. Token types by id: 3 (<unk>) Unknown; 6..9
# (<unused0>..<unused3>) and 1080 ("mask") Unused, as converters type unused pieces and the
# [PAD...] entries of a padded vocabulary; 10 (<unused4>) 0, undefined.
ADD_SPACE_PREFIX = True
TYPES = {3: 2, 6: 5, 7: 5, 8: 5, 9: 5, 1080: 5, 10: 0}

STRINGS = [
    "",
    "Hello",
    " Hello",
    "  two spaces",
    "\n",
    "\nnewline first",
    "\u3000ideographic space",
    "😀 emoji",
    "<unk>",
    "<mask>",
    "<unused0>",
    "a<eos>b",
    "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "<eos> after",
]
# Id lists to detokenize: "Hello" (9259) first, after BOS (2), after <unk> (3); " " (236743) first;
# Unused (6, 1080) and undefined (10) tokens alone, among text and after BOS.
DECODE = [[9259], [2, 9259], [3, 26352], [236743], [236743, 236743], [3],
          [6], [1080], [10], [2, 1080], [655, 1080, 236813], [9259, 6, 9259], [9259, 10, 9259]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True, help="Gemma-3's GGUF (make assets)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import gguf
    import llama_cpp
    from llama_cpp import Llama

    src = common.require(args.gguf)
    r = gguf.GGUFReader(src)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "vocab.gguf")
        w = gguf.GGUFWriter(path, r.fields["general.architecture"].contents())
        for field in r.fields.values():
            if field.name == "general.architecture" or field.name.startswith("GGUF."):
                continue
            vt = field.types[0]
            st = field.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
            v = field.contents()
            if field.name == "tokenizer.ggml.add_space_prefix":
                v = ADD_SPACE_PREFIX
            elif field.name == "tokenizer.ggml.token_type":
                v = list(v)
                for i, t in TYPES.items():
                    v[i] = t
            w.add_key_value(field.name, v, vt, sub_type=st)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        w.close()
        llm = Llama(path, vocab_only=True, verbose=False)
        vocab = llm._model.vocab

        def tokenize(b: bytes, add: bool, special: bool) -> list[int]:
            m = 2 * len(b) + 16
            buf = (llama_cpp.llama_token * m)()
            n = llama_cpp.llama_tokenize(vocab, b, len(b), buf, m, add, special)
            assert n >= 0
            return list(buf[:n])

        def detokenize(ids: list[int]) -> str:
            arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
            m = 64 * len(ids) + 64
            buf = ctypes.create_string_buffer(m)
            n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, m, False, False)
            assert n >= 0
            return buf.raw[:n].hex()

        entries = []
        for s in STRINGS:
            e = {"text": s, "runs": []}
            for add in (False, True):
                for special in (False, True):
                    ids = tokenize(s.encode("utf-8"), add, special)
                    e["runs"].append({"add_special": add, "parse_special": special, "ids": ids, "detokenized_hex": detokenize(ids)})
            entries.append(e)
        decoded = [{"ids": ids, "detokenized_hex": detokenize(ids)} for ids in DECODE]

    out = common.Writer(args.out)
    out.json("strings", {"strings": entries,
                         "call": "llama_tokenize(vocab, text, len, ..., add_special, parse_special); "
                                 "llama_detokenize(vocab, ids, ..., remove_special=False, unparse_special=False)"})
    out.json("decode", {"decode": decoded})
    out.json("index", {
        "format": 1,
        "versions": common.versions("llama_cpp_python", "gguf"),
        "gguf": {"file": os.path.basename(src), "sha256": hashlib.sha256(open(src, "rb").read()).hexdigest()},
        "variant": {"tokenizer.ggml.add_space_prefix": ADD_SPACE_PREFIX,
                    "token_types": {str(i): t for i, t in TYPES.items()}},
    })


if __name__ == "__main__":
    main()
