#!/usr/bin/env python3
"""One rerank request — a query against --passages passages — served by `bench serve`'s /rerank over loopback HTTP,
against sentence-transformers' CrossEncoder.predict on PyTorch CPU in-process (what a Python service would run),
same pairs, same thread count, one after the other on an otherwise idle machine.

The model is a random-weight BertForSequenceClassification of cross-encoder/ms-marco-MiniLM-L-6-v2's shape (6
layers, 384 wide, 12 heads, one label; the Hub is not reachable here, and speed does not depend on the weights'
values) with all-MiniLM-L6-v2's uncased WordPiece tokenizer, written once into --model-dir. Figures: p50/p90 of
the request's latency over --n requests after --warmup (ours: the client's round trip, HTTP and JSON included;
PyTorch's: predict() alone), and the largest difference of our raw scores from the CrossEncoder's logits (a speed
figure from a wrong engine is worthless).

Needs the peers venv (bash scripts/setup_peers.sh) and a release build (cargo build --release --bin bench).
    ~/.cache/embedding-workbench/peers-venv/bin/python scripts/rerank_vs_pytorch.py --json results/X/rerank.json
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOKENIZER = Path.home() / ".cache/embedding-workbench/models/all-MiniLM-L6-v2/tokenizer.json"


def make_model(d: Path):
    """The random-weight cross-encoder, written once."""
    if (d / "model.safetensors").is_file():
        return
    import torch
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
        max_position_embeddings=512, num_labels=1))
    model.eval().save_pretrained(str(d))
    # BertTokenizer's inputs: the passage's tokens are token type 1 (left out, the CrossEncoder would read type 0).
    tok = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER), model_max_length=512, unk_token="[UNK]",
                                  sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]",
                                  model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    tok.save_pretrained(str(d))
    # all-MiniLM-L6-v2's file truncates at 128 and pads; the Hub's cross-encoder reads up to 512 and pads nothing.
    path = d / "tokenizer.json"
    t = json.loads(path.read_text())
    t["truncation"], t["padding"] = None, None
    path.write_text(json.dumps(t, ensure_ascii=False))


def pairs(n_passages: int):
    lines = (REPO / "workloads/text/passages_en.jsonl").read_text().splitlines()
    passages = [json.loads(l)["text"] for l in lines[:n_passages]]
    return "how do vaccines train the immune system to recognise a virus", passages


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ours(bench: str, model_dir: Path, threads: int, dtype: str, query, passages, warmup: int, n: int):
    port = free_port()
    server = subprocess.Popen([bench, "serve", "--model", str(model_dir), "--threads", str(threads), "--port",
                               str(port), "--auto-truncate", "--dtype", dtype],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        server.stdout.readline()  # "listening on ..."
        conn = http.client.HTTPConnection("127.0.0.1", port)
        body = json.dumps({"query": query, "texts": passages, "raw_scores": True})
        times, scores = [], None
        for i in range(warmup + n):
            start = time.perf_counter()
            conn.request("POST", "/rerank", body, {"content-type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            elapsed = (time.perf_counter() - start) * 1e3
            if resp.status != 200:
                raise SystemExit(f"/rerank answered {resp.status}: {data[:300]!r}")
            if i >= warmup:
                times.append(elapsed)
            scores = {r["index"]: r["score"] for r in json.loads(data)}
        return times, [scores[i] for i in range(len(passages))]
    finally:
        server.terminate()
        server.wait()


def pytorch(model_dir: Path, threads: int, query, passages, warmup: int, n: int):
    import torch
    from sentence_transformers import CrossEncoder

    torch.set_num_threads(threads)
    ce = CrossEncoder(str(model_dir), device="cpu", max_length=512)
    batch = [(query, p) for p in passages]
    times, logits = [], None
    for i in range(warmup + n):
        start = time.perf_counter()
        logits = ce.predict(batch, batch_size=len(batch), activation_fn=torch.nn.Identity(), convert_to_numpy=True)
        if i >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    return times, [float(x) for x in logits.reshape(-1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=str(REPO / "target/release/bench"))
    ap.add_argument("--model-dir", default=str(Path.home() / ".cache/embedding-workbench/models/rerank-minilm-l6-random"))
    ap.add_argument("--passages", type=int, default=16)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--dtype", default="f32", help="ours: f32 or bf16 (PyTorch runs f32)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    model_dir = Path(args.model_dir)
    make_model(model_dir)
    query, passages = pairs(args.passages)
    rows = {}
    for name, run in [("ours (bench serve /rerank, HTTP)", lambda: ours(args.bench, model_dir, args.threads,
                                                                       args.dtype, query, passages, args.warmup,
                                                                       args.n)),
                      ("PyTorch (CrossEncoder.predict)", lambda: pytorch(model_dir, args.threads, query, passages,
                                                                          args.warmup, args.n))]:
        times, scores = run()
        rows[name] = {"p50_ms": pct(times, 0.5), "p90_ms": pct(times, 0.9), "mean_ms": statistics.fmean(times),
                      "scores": scores}
        print(f"{name}: p50 {rows[name]['p50_ms']:.2f} ms, p90 {rows[name]['p90_ms']:.2f} ms over {args.n}")
    (a, b) = [r["scores"] for r in rows.values()]
    worst = max(abs(x - y) for x, y in zip(a, b))
    spread = max(abs(y) for y in b)
    ratio = rows["PyTorch (CrossEncoder.predict)"]["p50_ms"] / rows["ours (bench serve /rerank, HTTP)"]["p50_ms"]
    print(f"largest score difference {worst:.2e} (largest |logit| {spread:.3f}); PyTorch p50 / ours p50 = {ratio:.2f}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        out = {"passages": args.passages, "threads": args.threads, "dtype_ours": args.dtype, "n": args.n, "warmup": args.warmup,
               "query": query, "worst_score_difference": worst, "pytorch_over_ours_p50": ratio,
               "rows": {k: {kk: vv for kk, vv in v.items() if kk != "scores"} for k, v in rows.items()}}
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
