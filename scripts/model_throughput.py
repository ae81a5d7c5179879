"""A model end to end against sentence-transformers, on random weights of a real model's shape: the engine's
`bench embed` (JSON Lines in, one JSON line of floats out per text) against sentence-transformers' `encode`, each way
on the in-house tokenizer and on the `tokenizers` crate, same texts, two threads. Shapes:

  static  minishlab/potion-base-8M's: a StaticEmbedding over all-MiniLM-L6-v2's WordPiece, 256 wide, Normalize. Its
          forward is a gather and a mean, so tokenisation is most of the work: this is where the tokenizer shows.
  albert  sentence-transformers/paraphrase-albert-small-v2's: ALBERT, embeddings 128 wide projected to 768, six
          layers sharing one set of weights, 12 heads, intermediate 3072, gelu_new, mean pooling, 128 tokens at
          most; with an 8k Unigram of ALBERT's pipeline (NFKD, accents stripped, lowercase) trained on the
          shipped English corpora (make_encoder_fixtures.albert_tokenizer). In f32 both ways.
  gemma2  two layers (one local, one global) of google/gemma-2-2b's shape, bge-multilingual-gemma2's network:
          hidden 2304, 8 query heads of 256 over 4 key/value heads, intermediate 9216, scores soft-capped at 50,
          causal (the local layer's window, 4,096, wider than any text here), last-token pooling, Normalize;
          with an 8k SentencePiece-style BPE of Gemma's pipeline (byte fallback) trained on the shipped corpora
          (make_encoder_fixtures.gemma_tokenizer), 256 tokens at most. In f32 both ways (transformers' eager
          attention, which Gemma 2 requires for its cap).

Run from the repo root in the peers venv (scripts/setup_peers.sh), after `cargo build --release -p harness`:
  python scripts/model_throughput.py SHAPE RUN_ID
Writes results/RUN_ID/SHAPE_throughput.{json,md}: texts/s each way (the best of 3 timed runs after a warm-up), and
the least cosine between the engine's embeddings and sentence-transformers'.
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
from sentence_transformers import SentenceTransformer, models
from sentence_transformers.sentence_transformer.modules import Normalize, StaticEmbedding
from tokenizers import Tokenizer
from transformers import AlbertConfig, AlbertModel, Gemma2Config, Gemma2Model, PreTrainedTokenizerFast

BENCH = "target/release/bench"


def texts(name, n=None):
    with open(f"workloads/text/{name}.jsonl", encoding="utf-8") as f:
        return [t for t in (json.loads(line)["text"] for line in f) if t.strip()][:n]


def ours(model, path, flags):
    """`bench embed` over the file: its own timing line, and the embeddings."""
    best, rows = None, None
    for _ in range(4):  # a warm-up, then the best of 3
        run = subprocess.run([BENCH, "embed", "--model", str(model), "--threads", "2", *flags, str(path)],
                             capture_output=True, text=True, check=True)
        m = re.search(r"embedded (\d+) inputs \((\d+) tokens\) in ([0-9.]+) s", run.stderr)
        n, tokens, secs = int(m.group(1)), int(m.group(2)), float(m.group(3))
        if best is None or secs < best[2]:
            best = (n, tokens, secs)
        rows = run.stdout
    emb = np.array([json.loads(line)["embedding"] for line in rows.splitlines()], dtype=np.float32)
    return best, emb


# Each shape writes its sentence-transformers directory at `path` and returns the corpora (name, how many texts),
# sentence-transformers' batch size, whether the token count has the special tokens, and flags for `bench embed`.

def static(path):
    """potion-base-8M's shape (all-MiniLM-L6-v2's vocabulary, 256 wide, Normalize), random rows."""
    tok = Tokenizer.from_file("workloads/vocab/all-MiniLM-L6-v2/tokenizer.json")
    tok.no_truncation()
    SentenceTransformer(modules=[StaticEmbedding(tok, embedding_dim=256), Normalize()], device="cpu").save(str(path))
    return [("queries_multilingual", None), ("passages_en", None)], 256, False, []


def albert(path):
    """paraphrase-albert-small-v2's shape (ALBERT, 128-wide embeddings to 768, six shared layers, mean pooling, 128
    tokens; an 8k Unigram of ALBERT's pipeline), transformers' random initialisation, f32 both ways."""
    sys.path.insert(0, "scripts")
    import make_encoder_fixtures
    tok = make_encoder_fixtures.albert_tokenizer(vocab_size=8000)
    config = AlbertConfig(vocab_size=tok.get_vocab_size(), embedding_size=128, hidden_size=768, num_hidden_layers=6,
                          num_attention_heads=12, intermediate_size=3072, hidden_act="gelu_new",
                          max_position_embeddings=512, pad_token_id=tok.token_to_id("<pad>"))
    work = path.parent / "albert_hf"
    AlbertModel(config, add_pooling_layer=False).eval().save_pretrained(work)
    PreTrainedTokenizerFast(tokenizer_object=tok, **make_encoder_fixtures.ALBERT_SPECIALS).save_pretrained(work)
    transformer = models.Transformer(str(work), max_seq_length=128)
    SentenceTransformer(modules=[transformer, models.Pooling(768, pooling_mode="mean")], device="cpu").save(str(path))
    return [("queries_multilingual", 2000), ("passages_en", 300)], 32, True, ["--dtype", "f32"]


def gemma2(path):
    """Two layers (local, global) of gemma-2-2b's shape as bge-multilingual-gemma2 runs it (causal, scores capped at
    50, last-token pooling, Normalize; 256 tokens; an 8k BPE of Gemma's pipeline), random weights, f32 both ways."""
    sys.path.insert(0, "scripts")
    import make_encoder_fixtures
    tok = make_encoder_fixtures.gemma_tokenizer(vocab_size=8000)
    ids = {f"{k}_token_id": tok.token_to_id(f"<{k}>") for k in ["pad", "bos", "eos"]}
    config = Gemma2Config(vocab_size=tok.get_vocab_size(), hidden_size=2304, intermediate_size=9216,
                          num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                          max_position_embeddings=8192, attn_implementation="eager", **ids)
    work = path.parent / "gemma2_hf"
    Gemma2Model(config).eval().save_pretrained(work)
    PreTrainedTokenizerFast(tokenizer_object=tok, **make_encoder_fixtures.GEMMA_SPECIALS).save_pretrained(work)
    transformer = models.Transformer(str(work), max_seq_length=256)
    SentenceTransformer(modules=[transformer, models.Pooling(2304, pooling_mode="lasttoken"), models.Normalize()],
                        device="cpu").save(str(path))
    return [("queries_multilingual", 500), ("passages_en", 100)], 32, True, ["--dtype", "f32"]


SHAPES = {"static": static, "albert": albert, "gemma2": gemma2}


def main():
    shape, run_id = sys.argv[1], sys.argv[2]
    torch.set_num_threads(2)
    out = Path("results") / run_id
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / shape
        torch.manual_seed(0)
        corpora, batch_size, specials, flags = SHAPES[shape](model)
        st = SentenceTransformer(str(model), device="cpu")
        counter = Tokenizer.from_file(str(model / "tokenizer.json"))
        counter.no_truncation()
        limit = st.max_seq_length or sys.maxsize
        rows = []
        for name, n in corpora:
            batch = texts(name, n)
            path = Path(tmp) / f"{name}.txt"
            path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in batch))
            st.encode(batch[:256], batch_size=batch_size)
            times = []
            for _ in range(3):
                start = time.perf_counter()
                want = st.encode(batch, batch_size=batch_size, convert_to_numpy=True)
                times.append(time.perf_counter() - start)
            tokens = sum(min(len(e.ids), limit) for e in counter.encode_batch(batch, add_special_tokens=specials))
            row = {"corpus": name, "texts": len(batch), "tokens": tokens,
                   "sentence_transformers_s": min(times)}
            for kind in ["fast", "hf"]:
                (n, t, secs), got = ours(model, path, ["--tokenizer", kind, *flags])
                assert (n, t) == (len(batch), tokens), (name, kind, n, t, tokens)
                cos = float(np.min(np.sum(got * want, axis=1) /
                                   (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))))
                row[f"{kind}_s"], row[f"{kind}_min_cosine"] = secs, cos
            rows.append(row)
            print(row, flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    run = {"commit": commit, "shape": shape, "batch_size": batch_size, "rows": rows}
    (out / f"{shape}_throughput.json").write_text(json.dumps(run, indent=2))
    report(out, run)


def report(out, run):
    """Writes SHAPE_throughput.md from a run's JSON (`python -c` can redo it from the file alone)."""
    commit, shape, batch_size, rows = run["commit"], run["shape"], run["batch_size"], run["rows"]
    doc = " ".join(line.strip() for line in SHAPES[shape].__doc__.splitlines())
    lines = [f"# `{shape}` end to end (`{commit}`, 2 threads)", "",
             f"{doc} `python scripts/model_throughput.py {shape} RUN_ID`. Texts/s, the best of 3 runs after a "
             "warm-up; the engine's time is `bench embed`'s own (reading the JSON Lines, tokenising, batching, the "
             "forward, and writing each embedding as a JSON line of floats), sentence-transformers' its `encode` "
             f"to a numpy array (batch {batch_size}).", "",
             "| corpus | texts | tokens | sentence-transformers | ours, `tokenizers` crate | ours, in-house "
             "tokenizer | min cosine |", "|---|---:|---:|---:|---:|---:|---:|"]
    # Whole numbers from 100 up, three significant figures below, so that slow rates keep theirs.
    figure = lambda x: f"{x:,.0f}" if x >= 100 else f"{x:.3g}"
    for r in rows:
        rate = lambda s: r["texts"] / s
        st_rate = rate(r["sentence_transformers_s"])
        lines.append(f"| {r['corpus']} | {r['texts']} | {r['tokens']} | {figure(st_rate)} | "
                     f"{figure(rate(r['hf_s']))} ({rate(r['hf_s']) / st_rate:.1f}x) | "
                     f"{figure(rate(r['fast_s']))} ({rate(r['fast_s']) / st_rate:.1f}x) | "
                     f"{min(r['fast_min_cosine'], r['hf_min_cosine']):.6f} |")
    (out / f"{shape}_throughput.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
