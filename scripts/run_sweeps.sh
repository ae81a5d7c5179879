#!/usr/bin/env bash
# The issue-6 measurements: `bench sweep --workload online` and `--workload batch` on the default model and CPU
# engine, each with its wall time. Run it on a quiet machine, not niced: the harness shares the cores with the
# engine, and a starved generator is flagged (BEHIND) rather than measured. Extra arguments go to both sweeps
# (e.g. --axis overlap=true,false).
# Usage: scripts/run_sweeps.sh [bench sweep flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin bench
for workload in online batch; do
  id="$(date -u +%Y%m%d-%H%M%S)-sweep-$workload"
  start=$(date +%s)
  ./target/release/bench sweep --workload "$workload" --run-id "$id" "$@"
  echo "bench sweep --workload $workload: $(( $(date +%s) - start )) s wall (model load and report included);" \
       "results/$id/result.json, reports/$id/index.html"
done
