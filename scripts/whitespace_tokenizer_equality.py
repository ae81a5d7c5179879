"""The engine's WhitespaceTokenizer (a WordEmbeddings model's: GloVe's kind) against sentence-transformers' own, id
for id: every text of the shipped corpora; one probe per code point below U+3100 put between, before and after
words of the list that are not stop words, one of them upper-case (so every whitespace and punctuation character
meets the split and the strip, and the third lookup lowercases); and every word of the list upper-cased by Python
(so Unicode lowercasing is checked on the list's own non-ASCII words). Through `bench tokenize` on the glove_mean
fixture's word list, cut at its max_seq_length (40) as sentence-transformers cuts. Lowercasing follows Rust's
Unicode tables, which may be newer than the Python's: a letter added since lowercases here only.

Run from the repo root in the peers venv (scripts/setup_peers.sh), after `cargo build --release -p harness`:
  python scripts/whitespace_tokenizer_equality.py
Prints the number of texts and of mismatches (the first five shown); exits 1 on any.
"""
import glob
import json
import subprocess
import sys

from sentence_transformers.sentence_transformer.modules.tokenizer import WhitespaceTokenizer

MODEL = "engine/tests/fixtures/glove_mean"
LIMIT = 40


def main():
    tok = WhitespaceTokenizer.load(f"{MODEL}/0_WordEmbeddings")
    texts = [t for f in sorted(glob.glob("workloads/text/*.jsonl")) for t in
             (json.loads(line)["text"] for line in open(f, encoding="utf-8")) if t.strip()]
    texts += [f"film{c}people {c}American{c} FILM{c} The{c}" for c in map(chr, range(0x3100))]
    vocab = tok.get_vocab()
    texts += [" ".join(w.upper() for w in vocab[i:i + 8]) for i in range(0, len(vocab), 8)]
    run = subprocess.run(["target/release/bench", "tokenize", "--model", MODEL, "--max-length", str(LIMIT)],
                         input="".join(json.dumps({"text": t}) + "\n" for t in texts), capture_output=True,
                         text=True, check=True)
    ours = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(ours) == len(texts), (len(ours), len(texts))
    bad = [(t, w, o) for t, o in zip(texts, ours) if (w := tok.tokenize(t)[:LIMIT]) != o]
    for t, w, o in bad[:5]:
        print("mismatch:", repr(t[:80]), w[:12], o[:12])
    print(f"{len(texts)} texts, {len(bad)} mismatches")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
