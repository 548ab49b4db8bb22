#!/usr/bin/env python3
"""Hugging Face tokenizers' ids of all-MiniLM-L6-v2's tokenizer.json for tokenizer/testdata/minilm_hf_ids.json
(TestMiniLMHF compares the WordPiece tokenizer with them, from tokenizer.json and vocab.txt).

Usage: python reference/gen_minilm_hf_ids.py [--out tokenizer/testdata/minilm_hf_ids.json]

Needs only tokenizers==0.23.3 (reference/requirements.txt) and the tokenizer.json of `make assets`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

STRINGS = [
    'Hello, world!',
    'The quick brown fox jumps over the lazy dog.',
    'café naïve résumé',
    'Ünïcödé ß',
    'İstanbul',
    '日本語のテキスト',
    '中文字符 and English',
    '한국어',
    'Привет мир',
    'Ελληνικά',
    'emoji 😀🎉👍🏽 👨\u200d👩\u200d👧\u200d👦',
    '$1,000,000.00 and 50%',
    'x = a + b * c / d - e',
    'snake_case and camelCase',
    "don't I'll",
    '[CLS] [MASK] hello [SEP]',
    'a\tb\nc\r\nd',
    '\xa0non-breaking\u2003space',
    'zero\u200bwidth',
    'soft\xadhyphen',
    'control\x01char',
    '',
    '   ',
    'supercalifragilisticexpialidocious',
    'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
    'word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word ',
    'ﬁ ligature',
    'Ⅻ roman',
    '½ fraction',
    '“quotes” — dash … ellipsis',
    'http://example.com/path?q=1&x=2',
    'email@example.com',
    'tab\there',
    'mixed123abc456',
    'COVID-19 pandemic',
    'naïve—café',
    '\ufeffBOM start',
    'Ａｂｃ fullwidth',
    'ǅ titlecase',
    'ΣΑΣ final sigma',
    '🥰 newer emoji',
    '🫠 melting face',
    'á combining',
    # Unassigned code points (Cn) are not control characters to BertNormalizer: they stay, and
    # their word is [UNK] (U+1FAE9 is an emoji of Unicode 16, unassigned in older tables).
    "hello\u0378",
    "\uffff",
    "a\ufdd0 b",
    "new emoji \U0001FAE9 face",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizer", "testdata",
                                                  "minilm_hf_ids.json"))
    args = ap.parse_args()
    import tokenizers
    from tokenizers import Tokenizer

    path = common.require(os.path.join(common.minilm_dir(), "tokenizer.json"))
    tok = Tokenizer.from_file(path)
    tok.no_padding()
    rows = [json.dumps({"text": s, "ids": tok.encode(s).ids}, ensure_ascii=False) for s in STRINGS]
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("{\n")
        f.write(f' "generator": "tokenizers {tokenizers.__version__}: Tokenizer.from_file(tokenizer.json); no_padding(); encode(text).ids",\n')
        f.write(f' "tokenizer_json_sha256": "{hashlib.sha256(open(path, "rb").read()).hexdigest()}",\n')
        f.write(' "strings": [\n  ' + ",\n  ".join(rows) + "\n ]\n}\n")


if __name__ == "__main__":
    main()
