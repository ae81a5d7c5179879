#!/usr/bin/env bash
# What serving a lone 12-token query over HTTP adds to its in-process cost, per dtype, in interleaved rounds:
# `bench embed --per-input` (in-process p50) against `bench serve` + scripts/serve_query_latency.py (server-side
# x-total-time p50), the same query, the same binary. Run on a quiet machine, release build.
#
#   bash scripts/serve_vs_inprocess.sh [BENCH] [ROUNDS] [N]
set -euo pipefail
cd "$(dirname "$0")/.."
bench="${1:-target/release/bench}"
rounds="${2:-3}"
n="${3:-400}"
port=18089
tmp="$(mktemp -d)"
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
python3 -c "
import json
for _ in range($n): print(json.dumps({'text': 'how to reset a forgotten wifi router password'}))" >"$tmp/query.jsonl"

echo "dtype round in_process_p50_ms served_p50_ms ratio"
for dtype in f32 bf16; do
  for r in $(seq 1 "$rounds"); do
    inproc=$("$bench" embed --per-input --dtype "$dtype" "$tmp/query.jsonl" 2>&1 >/dev/null |
      sed -n 's/.*per input: n [0-9]*, p50 \([0-9.]*\) ms.*/\1/p')
    "$bench" serve --port "$port" --dtype "$dtype" >"$tmp/serve.log" 2>&1 &
    server=$!
    for _ in $(seq 1 100); do
      curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
      sleep 0.1
    done
    served=$(python3 scripts/serve_query_latency.py --url "http://127.0.0.1:$port" --n "$n" 2>&1 |
      sed -n 's/.*x-total-time.*p50 \([0-9.]*\).*/\1/p' | head -1)
    kill "$server"
    wait "$server" 2>/dev/null || true
    ratio=$(python3 -c "print(f'{float(\"$served\") / float(\"$inproc\"):.3f}')" 2>/dev/null || echo "?")
    echo "$dtype $r $inproc $served $ratio"
  done
done
