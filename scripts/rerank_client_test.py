#!/usr/bin/env python3
"""Real clients against `bench serve` with a cross-encoder: the official `cohere` package (`ClientV2.rerank`, which
calls /v2/rerank, and the v1 `Client.rerank` with documents returned), Hugging Face's `InferenceClient` given the
server's URL (`text_classification`, through `POST /`) and TEI's /rerank must all rank by the engine's own scores.

Usage: python3 scripts/rerank_client_test.py --base-url http://127.0.0.1:PORT --reference ref.json [--no-hf]
where ref.json is {"model": NAME, "query": Q, "documents": [...], "logits": [...], "text_logit": X} computed
in-process by the engine (`logits`: each (query, document) pair's one logit; `text_logit`: the first document's
alone). Exits 0 when every score matches, 1 otherwise. `--no-hf` leaves out InferenceClient.
Needs: pip install cohere huggingface_hub
"""
import argparse, json, math, sys, urllib.request

import cohere

TOL = 1e-5


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def check(label, ranked, want):
    """`ranked`: (index, score) pairs as a client returned them; `want`: each document's expected score."""
    order = sorted(range(len(want)), key=lambda i: -want[i])[: len(ranked)]
    got_idx = [i for i, _ in ranked]
    worst = max(abs(s - want[i]) for i, s in ranked)
    scores = [s for _, s in ranked]
    # Ties or near-ties may swap places; the scores must still be in order and each the engine's.
    ok = worst <= TOL and scores == sorted(scores, reverse=True) and len(set(got_idx)) == len(got_idx)
    ok &= all(abs(want[i] - want[j]) <= TOL for i, j in zip(got_idx, order))
    print(f"{'ok  ' if ok else 'FAIL'} {label}: {len(ranked)} ranked, worst difference {worst:.2e}")
    return ok


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--reference", required=True)
    p.add_argument("--no-hf", action="store_true", help="skip huggingface_hub's InferenceClient")
    args = p.parse_args()
    ref = json.load(open(args.reference))
    model, query, docs = ref["model"], ref["query"], ref["documents"]
    want = [sigmoid(x) for x in ref["logits"]]
    ok = True

    v2 = cohere.ClientV2(api_key="not-needed", base_url=args.base_url)
    resp = v2.rerank(model=model, query=query, documents=docs, top_n=3)
    ok &= check("cohere ClientV2.rerank top_n=3", [(r.index, r.relevance_score) for r in resp.results], want)
    ok &= len(resp.results) == 3

    resp = v2.rerank(model=model, query=query, documents=docs)
    ok &= check("cohere ClientV2.rerank, every document", [(r.index, r.relevance_score) for r in resp.results], want)
    bare = len(resp.results) == len(docs) and all(getattr(r, "document", None) is None for r in resp.results)
    print(f"{'ok  ' if bare else 'FAIL'} cohere v2: all {len(docs)} ranked, no documents unless asked")
    ok &= bare

    v1 = cohere.Client(api_key="not-needed", base_url=args.base_url)
    resp = v1.rerank(model=model, query=query, documents=docs, return_documents=True)
    ok &= check("cohere Client.rerank (v1)", [(r.index, r.relevance_score) for r in resp.results], want)
    texts_ok = len(resp.results) == len(docs) and all(r.document.text == docs[r.index] for r in resp.results)
    print(f"{'ok  ' if texts_ok else 'FAIL'} cohere v1 return_documents: each document's text")
    ok &= texts_ok

    req = urllib.request.Request(
        args.base_url + "/rerank",
        data=json.dumps({"query": query, "texts": docs, "raw_scores": True, "truncate": True}).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req) as r:
        ranks = json.load(r)
        ok &= check("TEI /rerank raw_scores", [(x["index"], x["score"]) for x in ranks], ref["logits"])
        ok &= len(ranks) == len(docs)

    if not args.no_hf:
        from huggingface_hub import InferenceClient

        client = InferenceClient(base_url=args.base_url)
        out = client.text_classification(docs[0])
        out = out if isinstance(out, list) else [out]
        got = out[0].score
        good = abs(got - sigmoid(ref["text_logit"])) <= TOL and out[0].label == "LABEL_0"
        print(f"{'ok  ' if good else 'FAIL'} InferenceClient.text_classification: {out[0].label} {got:.6f}")
        ok &= good
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
