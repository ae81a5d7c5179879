#!/usr/bin/env bash
# Runs every fuzz target (fuzz/, cargo-afl on the stable toolchain) for a fixed budget on its committed corpus and
# fails if any crash is found; prints each target's executions and coverage from AFL++'s fuzzer_stats.
#   scripts/fuzz_ci.sh [SECONDS per target, default 30]
# Needs cargo-afl (`cargo install --locked cargo-afl`, which builds AFL++). New crashes are left in
# $OUT/<target>/default/crashes (OUT defaults to target/fuzz-ci); copy one to fuzz/crashes/<target>/ with its fix.
set -euo pipefail
cd "$(dirname "$0")/.."
budget="${1:-30}"
out="${OUT:-target/fuzz-ci}"
targets=(tokenizers http_body trace model_dir)
# Instrumented builds apart from the plain ones.
export CARGO_TARGET_DIR="${AFL_TARGET_DIR:-$PWD/target/afl}"
# cargo-afl builds AFL++ for the toolchain on install; after a toolchain update it must be built again (and says
# so, failing, when it already is: the build below fails loudly if it is still missing).
cargo afl config --build >/dev/null 2>&1 || true
(cd fuzz && cargo afl build --release --features afl)
# AFL++ checks the machine's core dump and CPU frequency settings; a CI box cannot change them, and neither
# matters for finding crashes.
export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_BENCH_UNTIL_CRASH=1
failed=0
printf '%-12s %12s %10s %14s %10s %8s\n' target execs execs/s edges coverage crashes
for t in "${targets[@]}"; do
  rm -rf "$out/$t"
  mkdir -p "$out/$t"
  # -V: stop after the budget; -t: a model load may take a while on a busy machine.
  cargo afl fuzz -i "fuzz/corpus/$t" -o "$out/$t" -V "$budget" -t 5000 "$CARGO_TARGET_DIR/release/$t" \
    > "$out/$t.log" 2>&1 || true
  stats="$out/$t/default/fuzzer_stats"
  if [ ! -f "$stats" ]; then
    echo "$t: AFL++ did not run; its log:" >&2
    tail -20 "$out/$t.log" >&2
    failed=1
    continue
  fi
  get() { awk -F' *: *' -v k="$1" '$1 == k { print $2 }' "$stats"; }
  # Edges: the instrumented branches of the target (and the crates it calls) its corpus reached, of all there are.
  printf '%-12s %12s %10s %14s %10s %8s\n' "$t" "$(get execs_done)" "$(get execs_per_sec)" \
    "$(get edges_found)/$(get total_edges)" "$(get bitmap_cvg)" "$(get saved_crashes)"
  if [ "$(get saved_crashes)" != "0" ]; then
    echo "$t: crashes in $out/$t/default/crashes" >&2
    failed=1
  fi
done
exit "$failed"
