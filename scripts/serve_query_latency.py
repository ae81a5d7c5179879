#!/usr/bin/env python3
"""One query at a time against a running `bench serve` (or any server sending `x-total-time`): the server-side
time of each request (`x-total-time`, milliseconds: tokenization to embedding, HTTP parsing and JSON writing
excluded) and the client-observed round trip, as p50/p90/p99 over --n requests after --warmup. Set against
`bench embed --per-input` on the same query, this says what serving a lone query adds to its in-process cost.

    python3 scripts/serve_query_latency.py --url http://127.0.0.1:18080 --n 500
"""
import argparse
import http.client
import json
import statistics
import time
import urllib.parse

QUERY = "how to reset a forgotten wifi router password"  # 12 tokens with [CLS] and [SEP]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--text", default=QUERY)
    args = ap.parse_args()
    url = urllib.parse.urlparse(args.url)
    conn = http.client.HTTPConnection(url.hostname, url.port or 80)
    body = json.dumps({"input": args.text, "model": "x"})
    server, client = [], []
    for i in range(args.warmup + args.n):
        start = time.perf_counter()
        conn.request("POST", "/v1/embeddings", body, {"content-type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        elapsed = (time.perf_counter() - start) * 1e3
        if resp.status != 200:
            raise SystemExit(f"HTTP {resp.status}")
        if i >= args.warmup:
            server.append(float(resp.getheader("x-total-time")))
            client.append(elapsed)
    for name, xs in [("x-total-time", server), ("round trip", client)]:
        print(f"{name}: n {len(xs)}, p50 {pct(xs, 0.5):.3f} ms, p90 {pct(xs, 0.9):.3f} ms, "
              f"p99 {pct(xs, 0.99):.3f} ms, mean {statistics.fmean(xs):.3f} ms")


if __name__ == "__main__":
    main()
