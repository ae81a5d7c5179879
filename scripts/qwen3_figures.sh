#!/usr/bin/env bash
# The Qwen3-0.6B-shape figures of issue 18, on the synthetic model (`--model synthetic:qwen3-0.6b`, seeded random
# weights of the real shape, written into the cache on first use):
#   1. the machine's arithmetic peak (`cargo bench -p engine --bench cpu_kernels -- peak`), to set GFLOP/s against;
#   2. forward tokens/s and GFLOP/s per batch size, f32 and bf16 (`bench curve`, sequences of 128);
#   3. single-query latency: an online replay at 1 req/s (no queueing), f32 and bf16;
#   4. `bench sweep --workload online` at an SLO this CPU can meet for a 0.6B model (QWEN3_SLO_MS, default 1000;
#      the online deadline set to match; a slow probe of 4 clients and 30 s steps, as a query takes ~0.5 s).
# Usage: scripts/qwen3_figures.sh BENCH OUT_PREFIX    (run from the repository root)
set -euo pipefail
bench=$1 out=$2
slo=${QWEN3_SLO_MS:-1000}
model=synthetic:qwen3-0.6b
res=results; rep=reports
cargo bench -p engine --bench cpu_kernels -- peak 2>&1 | grep -E "^peak|thrpt" | tee "$res/$out-peak.txt"
for dtype in f32 bf16; do
  "$bench" curve --model "$model" --dtype "$dtype" --sizes 16,64,256,1024 --runs 2 --min-s 1 \
    --json "$res/$out-qwen3-0.6b-curve-$dtype.json" 2>&1 | tail -n 9
  "$bench" replay --model "$model" --dtype "$dtype" --workload online --arrivals uniform --rate 1 --duration-s 40 \
    --warmup-s 5 --run-id "$out-qwen3-0.6b-single-$dtype" --results-dir "$res" --reports-dir "$rep" 2>&1 | tail -n 8
done
"$bench" sweep --model "$model" --workload online --slo-ms "$slo" --set online_deadline_ms="$slo" \
  --probe-s 30 --probe-concurrency 4 --step-s 30 --warmup-s 5 --max-steps 6 \
  --run-id "$out-qwen3-0.6b-sweep-online" --results-dir "$res" --reports-dir "$rep" 2>&1 | tail -n 14
