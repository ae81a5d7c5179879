"""Static embeddings end to end: a potion-sized StaticEmbedding (random rows, 256 wide, all-MiniLM-L6-v2's
WordPiece vocabulary, then Normalize: the shape of minishlab/potion-base-8M) embedding the shipped corpora with
sentence-transformers and with `bench embed`, on the in-house tokenizer and on the `tokenizers` crate. A static
model's forward is a gather and a mean, so tokenisation is most of the work: this is where the tokenizer shows.

Run from the repo root in the peers venv (scripts/setup_peers.sh), after `cargo build --release -p harness`:
  python scripts/static_throughput.py RUN_ID
Writes results/RUN_ID/static_throughput.{json,md}: texts/s and tokens/s each way (the best of 3 timed runs after a
warm-up), and the least cosine between the engine's embeddings and sentence-transformers'.
"""

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Normalize, StaticEmbedding
from tokenizers import Tokenizer

BENCH = "target/release/bench"
CORPORA = ["queries_multilingual", "passages_en"]


def texts(name):
    with open(f"workloads/text/{name}.jsonl", encoding="utf-8") as f:
        return [t for t in (json.loads(line)["text"] for line in f) if t.strip()]


def ours(model, path, tokenizer):
    """`bench embed` over the file: its own timing line, and the embeddings."""
    best, rows = None, None
    for _ in range(4):  # a warm-up, then the best of 3
        run = subprocess.run([BENCH, "embed", "--model", str(model), "--tokenizer", tokenizer, "--threads", "2",
                              str(path)], capture_output=True, text=True, check=True)
        m = re.search(r"embedded (\d+) inputs \((\d+) tokens\) in ([0-9.]+) s", run.stderr)
        n, tokens, secs = int(m.group(1)), int(m.group(2)), float(m.group(3))
        if best is None or secs < best[2]:
            best = (n, tokens, secs)
        rows = run.stdout
    emb = np.array([json.loads(line)["embedding"] for line in rows.splitlines()], dtype=np.float32)
    return best, emb


def main():
    run_id = sys.argv[1]
    torch.set_num_threads(2)
    out = Path("results") / run_id
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "static"
        torch.manual_seed(0)
        tok = Tokenizer.from_file("workloads/vocab/all-MiniLM-L6-v2/tokenizer.json")
        tok.no_truncation()
        SentenceTransformer(modules=[StaticEmbedding(tok, embedding_dim=256), Normalize()], device="cpu").save(
            str(model))
        st = SentenceTransformer(str(model), device="cpu")
        rows = []
        for name in CORPORA:
            batch = texts(name)
            path = Path(tmp) / f"{name}.txt"
            path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in batch))
            st.encode(batch[:256], batch_size=256)
            times = []
            for _ in range(3):
                start = time.perf_counter()
                want = st.encode(batch, batch_size=256, convert_to_numpy=True)
                times.append(time.perf_counter() - start)
            tokens = sum(len(e.ids) for e in st[0].tokenizer.encode_batch(batch, add_special_tokens=False))
            row = {"corpus": name, "texts": len(batch), "tokens": tokens,
                   "sentence_transformers_s": min(times)}
            for kind in ["fast", "hf"]:
                (n, t, secs), got = ours(model, path, kind)
                assert (n, t) == (len(batch), tokens), (name, kind, n, t, tokens)
                cos = float(np.min(np.sum(got * want, axis=1) /
                                   (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))))
                row[f"{kind}_s"], row[f"{kind}_min_cosine"] = secs, cos
            rows.append(row)
            print(row, flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    (out / "static_throughput.json").write_text(json.dumps({"commit": commit, "rows": rows}, indent=2))
    lines = [f"# Static embeddings end to end (`{commit}`, 2 threads)", "",
             "potion-base-8M's shape (all-MiniLM-L6-v2's vocabulary, 256 wide, Normalize), random rows; "
             "`python scripts/static_throughput.py`. Texts/s, the best of 3 runs after a warm-up; the engine's "
             "time is `bench embed`'s own (reading the JSON Lines, tokenising, batching, the forward, and "
             "writing each embedding as a JSON line of floats), sentence-transformers' its `encode` to a numpy "
             "array (batch 256).", "",
             "| corpus | texts | tokens | sentence-transformers | ours, `tokenizers` crate | ours, in-house "
             "tokenizer | min cosine |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        rate = lambda s: r["texts"] / s
        st_rate = rate(r["sentence_transformers_s"])
        lines.append(f"| {r['corpus']} | {r['texts']} | {r['tokens']} | {st_rate:,.0f} | "
                     f"{rate(r['hf_s']):,.0f} ({rate(r['hf_s']) / st_rate:.1f}x) | "
                     f"{rate(r['fast_s']):,.0f} ({rate(r['fast_s']) / st_rate:.1f}x) | "
                     f"{min(r['fast_min_cosine'], r['hf_min_cosine']):.6f} |")
    (out / "static_throughput.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
