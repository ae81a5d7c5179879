#!/usr/bin/env python3
"""workloads/vocab/albert_style_unigram_1k_tokenizer.json: the XLM-R-style Unigram (xlmr_style_unigram_1k, a
SentencePiece test model's pieces and precompiled charsmap) behind ALBERT's pipeline as transformers 4's
AlbertConverter writes it: `` and '' to ", NFKD, accents stripped, lowercase, the charsmap, runs of spaces to one
space; Metaspace (always prepending); `<s> $A </s>` in the places of ALBERT's `[CLS] $A [SEP]` (the vocabulary's own
special pieces). For the tokenizer tests and the fuzz target: no released ALBERT tokenizer.json ships on PyPI.

Run from the repository root (plain Python, no packages):  python3 scripts/make_albert_vocab.py
"""
import json

SOURCE = "workloads/vocab/xlmr_style_unigram_1k_tokenizer.json"
OUT = "workloads/vocab/albert_style_unigram_1k_tokenizer.json"


def main():
    tok = json.load(open(SOURCE, encoding="utf-8"))
    (charsmap,) = [n for n in tok["normalizer"]["normalizers"] if n["type"] == "Precompiled"]
    tok["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": {"String": "``"}, "content": "\""},
        {"type": "Replace", "pattern": {"String": "''"}, "content": "\""},
        {"type": "NFKD"},
        {"type": "StripAccents"},
        {"type": "Lowercase"},
        charsmap,
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
    ]}
    assert tok["pre_tokenizer"]["type"] == "Metaspace", tok["pre_tokenizer"]
    json.dump(tok, open(OUT, "w", encoding="utf-8"), ensure_ascii=False)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
