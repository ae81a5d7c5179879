#!/usr/bin/env bash
# Issue 19's figures, on loopback with the default model (release build), each setup started fresh:
#  1. single-query latency: one process (1 compute thread) against a gateway + one replica process (1 thread):
#     what the gRPC hop adds (scripts/serve_query_latency.py, client round trip and server-side x-total-time);
#  2. throughput of a batch re-index (`bench replay --workload batch`): one process with 2 threads, a gateway with 1
#     replica process (1 thread), and with 2 replica processes (1 thread each).
# The machine's cores are shared by everything here (gateway, replicas, load generator): read the numbers as the
# shape of the cost, not as what separate hosts would give.
#
#   bash scripts/scale_out_figures.sh [BENCH] [N_QUERIES] [PASSAGES]  > results/<date>-scale-out/figures.txt
set -euo pipefail
cd "$(dirname "$0")/.."
bench="${1:-target/release/bench}"
n="${2:-300}"
passages="${3:-2000}"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

# Starts `bench serve ARGS` on PORT, waits for /health.
start() {
  local port=$1; shift
  # scripts/serve_query_latency.py names the model `x`; the corpus has passages over the model's 256 tokens.
  "$bench" serve --port "$port" --served-model-name x --auto-truncate "$@" >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "bench serve $* on $port never became healthy" >&2
  exit 1
}
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
}
latency() {
  python3 scripts/serve_query_latency.py --url "http://127.0.0.1:$1" --n "$n" | sed "s/^/$2: /"
}
throughput() {
  local out
  out=$("$bench" replay --workload batch --target "http://127.0.0.1:$1" --concurrency 4 \
    --corpus-limit "$passages" --no-report --run-id "scale-out-tmp" --results-dir /tmp/scale-out-results 2>&1 || true)
  echo "$2: $(echo "$out" | grep -E '^ *embedded .* tokens/s' || echo "no throughput line: $out")"
}

echo "# single query, $n requests after warm-up"
start 18180 --threads 1
latency 18180 "one process, 1 thread"
stop_all
start 18181 --role replica --threads 1
start 18180 --role gateway --replica 127.0.0.1:18181
latency 18180 "gateway + 1 replica process, 1 thread"
stop_all

echo "# batch re-index, $passages passages, 4 clients"
start 18180 --threads 2
throughput 18180 "one process, 2 threads"
stop_all
start 18181 --role replica --threads 1
start 18180 --role gateway --replica 127.0.0.1:18181
throughput 18180 "gateway + 1 replica process, 1 thread"
stop_all
start 18181 --role replica --threads 1
start 18182 --role replica --threads 1
start 18180 --role gateway --replica 127.0.0.1:18181 --replica 127.0.0.1:18182
throughput 18180 "gateway + 2 replica processes, 1 thread each"
stop_all
