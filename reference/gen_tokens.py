#!/usr/bin/env python3
"""Tokenizer vectors from llama.cpp (llama-cpp-python, vocab only): SmolLM2's, or another GGUF's.

Usage: python reference/gen_tokens.py --out reference/testdata/tokenizer
       python reference/gen_tokens.py --gguf GEMMA.gguf --no-transformers --chat --out reference/testdata/tokenizer_gemma3

Writes
    gpl3_ids.npy   int32: llama.cpp's token ids of the whole of /usr/share/common-licenses/GPL-3
                   (the file's bytes as UTF-8, no BOS: see below), first MAX_IDS ids
    strings.json   ~40 test strings with llama.cpp's ids, the detokenized text, for some the
                   per-token pieces, and for comparison the ids of the tokenizer that transformers
                   builds from the same GGUF
    index.json     versions, the GGUF's tokenizer metadata, counts, the GPL-3 file's sha256

BOS: the GGUF says ``tokenizer.ggml.add_bos_token = false`` and llama.cpp follows it:
``Llama.tokenize(text, add_bos=True)`` (``llama_tokenize(..., add_special=true)``) returns the
same ids as with ``add_bos=False``. llama.cpp's own tools (llama-perplexity, llama-cli) therefore
prepend nothing for this model, and neither do we. The index records the check.

Special tokens are not parsed (``special=False``): "<|im_start|>" in a test string is plain text.
With ``--chat``, chat_strings.json adds turns in Gemma's and ChatML's markers tokenized with
``special=True`` and ``add_bos=True`` (the vocabulary decides whether BOS comes), as a chat prompt is.
For a vocabulary that adds BOS (Gemma), gpl3_ids.npy and strings.json stay without it (add_bos=False),
and the index records that add_bos changes the ids.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import numpy as np  # noqa: E402

MAX_IDS = 2048

STRINGS = [
    "",
    " ",
    "   ",
    "   leading spaces",
    "trailing spaces   ",
    "\n",
    "\n\n\n",
    "line one\nline two\n",
    "  \n  \n",
    "\r\n",
    "\t",
    "a\tb\t\tc",
    "0. Definitions.",
    "CONDITIONS\n\n  0. Definitions.",
    "a  0",
    "a   12",
    "x\n 5",
    "12345",
    "1234567890 0000000000",
    "3.14159",
    "version 3, 29 June 2007",
    "$1,000,000.00 and 50%",
    "mixed123abc456",
    "don't I'll we're they've she'd it's",
    "DON'T I'LL WE'RE",
    "Hello, world!",
    "Hello world",
    "hello    world",
    "...!?;:--",
    "(c) 2007 Free Software Foundation, Inc. <https://fsf.org/>",
    "https://www.gnu.org/licenses/",
    "snake_case and camelCase",
    "x = a + b * c / d - e",
    "café naïve résumé",
    "Ünïcödé ß",
    "Ελληνικά",
    "Привет мир",
    "日本語のテキスト",
    "中文字符",
    "한국어",
    "emoji 😀🎉👍🏽",
    "👨‍👩‍👧‍👦",
    "<|im_start|>user",
    "The GNU General Public License is",
]
# With --chat: chat prompts, tokenized with special=True and add_bos=True.
CHAT_STRINGS = [
    "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "text <start_of_turn> between\n\n\nnewlines\t\ttabs",
]
# Strings whose per-token pieces are recorded (as hex of the piece bytes: a piece may be part
# of a UTF-8 sequence).
PIECES = {"0. Definitions.", "CONDITIONS\n\n  0. Definitions.", "   leading spaces", "don't I'll we're they've she'd it's", "café naïve résumé",
          "emoji 😀🎉👍🏽", "\n\n\n", "12345"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-transformers", action="store_true", help="skip the transformers comparison")
    ap.add_argument("--gguf", help="the GGUF whose vocabulary is used (default: SmolLM2's of make assets)")
    ap.add_argument("--chat", action="store_true", help="also write chat_strings.json (special tokens parsed)")
    args = ap.parse_args()
    from llama_cpp import Llama
    from gguf import GGUFReader

    gguf_path = common.require(args.gguf or common.smollm_gguf())
    common.require(common.GPL3)
    llm = Llama(gguf_path, vocab_only=True, verbose=False)

    def tok(s: str, add_bos: bool = False) -> list[int]:
        return list(llm.tokenize(s.encode("utf-8"), add_bos=add_bos, special=False))

    meta = {}
    r = GGUFReader(gguf_path)
    for k in ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.add_bos_token",
              "tokenizer.ggml.add_space_prefix", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
              "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"):
        if k in r.fields:
            meta[k] = r.fields[k].contents()
    meta["vocab_size"] = len(r.fields["tokenizer.ggml.tokens"].data)
    if "tokenizer.ggml.merges" in r.fields:
        meta["n_merges"] = len(r.fields["tokenizer.ggml.merges"].data)

    raw = open(common.GPL3, "rb").read()
    text = raw.decode("utf-8")
    ids = tok(text)
    ids_bos = tok(text, add_bos=True)
    w = common.Writer(args.out)
    ids_info = w.npy("gpl3_ids", np.array(ids[:MAX_IDS], dtype=np.int32))

    hf = None
    if not args.no_transformers:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path))

    entries = []
    for s in STRINGS:
        t = tok(s)
        e = {"text": s, "ids": t, "detokenized": llm.detokenize(t).decode("utf-8", errors="replace")}
        if s in PIECES:
            e["pieces_hex"] = [llm.detokenize([i]).hex() for i in t]
        if hf is not None:
            h = hf.encode(s, add_special_tokens=False)
            e["transformers_gguf_ids"] = h
            e["transformers_gguf_agrees"] = h == t
        entries.append(e)
    w.json("strings", {"strings": entries})
    if args.chat:
        chat = [{"text": s, "ids": list(llm.tokenize(s.encode("utf-8"), add_bos=True, special=True))} for s in CHAT_STRINGS]
        w.json("chat_strings", {"strings": chat, "call": "Llama.tokenize(text.encode('utf-8'), add_bos=True, special=True)"})

    index = {
        "format": 1,
        "versions": common.versions("llama_cpp_python", "gguf", "transformers", "tokenizers"),
        "gguf": {"file": os.path.basename(gguf_path), "sha256": hashlib.sha256(open(gguf_path, "rb").read()).hexdigest(),
                 "tokenizer_metadata": meta},
        "gpl3": {
            "path": common.GPL3,
            "sha256": hashlib.sha256(raw).hexdigest(),
            "n_bytes": len(raw),
            "n_ids": len(ids),
            "ids": ids_info,
            "ids_committed": min(len(ids), MAX_IDS),
            "add_bos_changes_ids": ids_bos != ids,
            "call": "Llama(gguf, vocab_only=True).tokenize(text.encode('utf-8'), add_bos=False, special=False)",
        },
        "strings": {"file": "strings.json", "count": len(entries),
                    "call": "same tokenize call; detokenized = Llama.detokenize(ids).decode('utf-8')"},
    }
    if hf is not None:
        hids = hf.encode(text, add_special_tokens=False)
        first_diff = next((i for i, (a, b) in enumerate(zip(ids, hids)) if a != b), None)
        index["gpl3"]["transformers_gguf"] = {
            "n_ids": len(hids),
            "first_differing_position": first_diff,
            "llama_cpp_ids_around": ids[first_diff - 2: first_diff + 6] if first_diff is not None else None,
            "transformers_ids_around": hids[first_diff - 2: first_diff + 6] if first_diff is not None else None,
            "strings_disagreeing": sum(not e["transformers_gguf_agrees"] for e in entries),
        }
    w.json("index", index)


if __name__ == "__main__":
    main()
