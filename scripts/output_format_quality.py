#!/usr/bin/env python3
"""What each output format of `bench embed --output-format` (the gateway's `encoding_format`) costs in quality.

Retrieval set from the shipped corpora: the English queries of workloads/text/queries_multilingual.jsonl (MIRACL
and Mr. TyDi questions) against the passages of workloads/text/passages_en.jsonl. There are no relevance labels
between the two, so each format is measured against float's own answers:

- cosine to float, per vector (queries and passages): int8 as stored (the cosine a vector database computes on
  it) and dequantized (atanh(q/127)); int8_scaled dequantized (q * scale); binary as its +-1 sign vector;
- recall@10: of each query's 10 nearest passages by float cosine, how many the format's own top 10 finds, the
  format's vectors on both sides (int8 and int8_scaled by cosine, binary by Hamming distance of the packed bits).

Every format is written by the real `bench embed`; binary and ubinary are also checked byte for byte against
sentence-transformers' quantize_embeddings on the float vectors. Needs numpy and sentence-transformers (the peers
venv: scripts/setup_peers.sh).

Usage: python scripts/output_format_quality.py --bench target/release/bench --out results/DIR [--model DIR]
Writes DIR/quality.json and DIR/README.md; prints the table.
"""
import argparse, json, os, subprocess, sys, tempfile, time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FORMATS = ["float", "int8", "int8_scaled", "binary", "ubinary"]
K = 10


def embed(bench, model, path, fmt):
    """One `bench embed` run: the embeddings (and scales) in input order."""
    cmd = [bench, "embed", path, "--output-format", fmt, "--threads", "0"]
    if model:
        cmd += ["--model", model]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    dtype = {"float": np.float32, "ubinary": np.uint8}.get(fmt, np.int8)
    values = np.array([r["embedding"] for r in rows], dtype=dtype)
    scales = np.array([r["scale"] for r in rows], dtype=np.float32) if fmt == "int8_scaled" else None
    return values, scales


def unit(x):
    x = np.asarray(x, dtype=np.float64)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n == 0, 1, n)


def cosines(a, b):
    """Row-wise cosine of two equally shaped matrices."""
    return np.sum(unit(a) * unit(b), axis=1)


def top_k_cosine(queries, passages):
    scores = unit(queries) @ unit(passages).T
    # A stable sort on the negated score: ties (common for coarse formats) keep passage order.
    return np.argsort(-scores, axis=1, kind="stable")[:, :K]


def top_k_hamming(queries, passages):
    """Nearest by Hamming distance of packed sign bits (uint8)."""
    table = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).sum(axis=1)
    dist = np.stack([table[np.bitwise_xor(q, passages)].sum(axis=1) for q in queries])
    return np.argsort(dist, axis=1, kind="stable")[:, :K]


def recall(got, want):
    return float(np.mean([len(set(g) & set(w)) / K for g, w in zip(got, want)]))


def summary(c):
    return {"mean": float(np.mean(c)), "min": float(np.min(c)), "p01": float(np.percentile(c, 1))}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", default=os.path.join(ROOT, "target/release/bench"))
    p.add_argument("--model", help="model directory (default: bench's default model)")
    p.add_argument("--out", required=True, help="results directory to write")
    args = p.parse_args()

    queries = [json.loads(l) for l in open(os.path.join(ROOT, "workloads/text/queries_multilingual.jsonl"))]
    queries = [q for q in queries if q["lang"] == "en"]
    passages = os.path.join(ROOT, "workloads/text/passages_en.jsonl")
    n_passages = sum(1 for line in open(passages) if line.strip())
    with tempfile.TemporaryDirectory() as tmp:
        qpath = os.path.join(tmp, "queries_en.jsonl")
        with open(qpath, "w") as f:
            for q in queries:
                f.write(json.dumps({"id": q["id"], "text": q["text"]}) + "\n")
        t0 = time.time()
        emb = {}
        for fmt in FORMATS:
            emb[fmt] = {side: embed(args.bench, args.model, path, fmt) for side, path in
                        (("queries", qpath), ("passages", passages))}
            print(f"embedded {fmt} ({time.time() - t0:.0f} s)", file=sys.stderr)

    from sentence_transformers.quantization import quantize_embeddings

    checks = {}
    for side in ("queries", "passages"):
        f = emb["float"][side][0]
        for prec in ("binary", "ubinary"):
            same = np.array_equal(quantize_embeddings(f, precision=prec), emb[prec][side][0])
            checks[f"{prec} {side} == sentence-transformers quantize_embeddings"] = bool(same)
    if not all(checks.values()):
        print(f"FAIL: {checks}", file=sys.stderr)

    def as_float(fmt, side):
        """What the format's vectors compare as, for the cosine to float."""
        v, s = emb[fmt][side]
        if fmt == "int8_scaled":
            return v.astype(np.float64) * s[:, None]
        if fmt == "binary":
            return np.unpackbits((v.astype(np.int16) + 128).astype(np.uint8), axis=1)[:, : emb["float"][side][0].shape[1]] * 2.0 - 1
        return v

    def dequantized_int8(side):
        q = emb["int8"][side][0].astype(np.float64)
        return np.arctanh(np.clip(q, -126.5, 126.5) / 127)

    want = top_k_cosine(emb["float"]["queries"][0], emb["float"]["passages"][0])
    results = {}
    for fmt in ("int8", "int8_scaled", "binary"):
        both = np.concatenate([cosines(as_float(fmt, s), emb["float"][s][0]) for s in ("queries", "passages")])
        r = {"cosine_to_float": summary(both)}
        if fmt == "int8":
            deq = np.concatenate([cosines(dequantized_int8(s), emb["float"][s][0]) for s in ("queries", "passages")])
            r["cosine_to_float_dequantized"] = summary(deq)
        if fmt == "binary":
            got = top_k_hamming(emb["ubinary"]["queries"][0], emb["ubinary"]["passages"][0])
        else:
            got = top_k_cosine(as_float(fmt, "queries"), as_float(fmt, "passages"))
        r["recall_at_10"] = recall(got, want)
        results[fmt] = r

    report = {
        "model": args.model or "default (all-MiniLM-L6-v2)",
        "queries": len(queries),
        "passages": n_passages,
        "dim": int(emb["float"]["queries"][0].shape[1]),
        "k": K,
        "checks": checks,
        "formats": results,
        "bytes_per_vector": {fmt: int(emb[fmt]["queries"][0].shape[1] * (4 if fmt == "float" else 1))
                             for fmt in FORMATS},
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "quality.json"), "w") as f:
        json.dump(report, f, indent=2)
    lines = [
        "| format | bytes/vector | mean cosine to float | min cosine to float | recall@10 vs float |",
        "|---|---:|---:|---:|---:|",
    ]
    for fmt, r in results.items():
        c = r["cosine_to_float"]
        lines.append(f"| {fmt} | {report['bytes_per_vector'][fmt]} | {c['mean']:.4f} | {c['min']:.4f} | "
                     f"{r['recall_at_10']:.3f} |")
    d = results["int8"]["cosine_to_float_dequantized"]
    table = "\n".join(lines)
    text = f"""# What each output format costs

`python scripts/output_format_quality.py --out {args.out}` ({report['model']}, dimension {report['dim']}).
Retrieval set: the {len(queries)} English queries of `workloads/text/queries_multilingual.jsonl` (MIRACL, Mr. TyDi)
against the {n_passages} passages of `workloads/text/passages_en.jsonl`; every vector written by `bench embed
--output-format`. Cosine to float over queries and passages; recall@10: the share of float's 10 nearest passages
(by cosine) that the format's own 10 nearest find, the format on both sides (int8, int8_scaled: cosine of the
stored values; binary: Hamming distance of the packed bits).

{table}

int8 is pplx-embed's `round(127·tanh(x))` of the pooled vector before Normalize, compared as stored; dequantized
(`atanh(q/127)`) its cosine to float is {d['mean']:.4f} mean, {d['min']:.4f} min. binary's cosine is that of its
±1 sign vector. binary and ubinary equal sentence-transformers' `quantize_embeddings` byte for byte:
{all(checks.values())}.
"""
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(text)
    print(text)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
