#!/usr/bin/env bash
# The figures of the scheduler/overload work (issue 14), old binary against new on one machine, one run each:
#   1. `bench sweep --workload online`: saturation at p99 <= 100 ms (old, new), and new with overlap=true,false
#      (plans made at start-up, two runs);
#   2. overload: replays at 1x, 2x and 3x the new saturation rate, in-process and over HTTP (old, new);
#   3. mixed: online alone vs online beside a re-index at concurrency 2, at half the saturation rate (old, new);
#   4. the saturation curve, f32 and bf16 (new);
#   5. a soak at 80% of saturation, SOAK_S seconds (new; default 600).
# Usage: scripts/overload_figures.sh OLD_BENCH NEW_BENCH OUT_PREFIX    (run from the repository root)
# PARTS (default all: "sweep overload mixed overlap curve soak") picks the parts to run; SOAK_S the soak's length.
set -euo pipefail
old=$1 new=$2 out=$3
soak_s=${SOAK_S:-600}
parts=${PARTS:-sweep overload mixed overlap curve soak}
bins=${BINS:-new old}   # which binaries the overload and mixed parts run
part() { [[ " $parts " == *" $1 "* ]]; }
res=results; rep=reports
run() { local bin=$1 id=$2; shift 2; echo "== $id: $*" >&2; "$bin" "$@" --run-id "$id" --results-dir "$res" --reports-dir "$rep" 2>&1 | tail -n 30; }

if part sweep; then
  run "$new" "$out-sweep-online-new" sweep --workload online
  run "$old" "$out-sweep-online-old" sweep --workload online
fi
sat=$(python3 -c "import json,sys; d=json.load(open('$res/$out-sweep-online-new/result.json')); print(d['configs'][0]['saturation']['value'] or 250)")
echo "saturation (new): $sat req/s" >&2
for bin in $bins; do
  b=${!bin}
  part overload && for target in in-process serve; do
    for x in 1 2 3; do
      rate=$(python3 -c "print(round($sat * $x, 1))")
      run "$b" "$out-overload-$bin-$target-${x}x" replay --workload online --target "$target" --rate "$rate" --duration-s 20 --warmup-s 5 || true
    done
  done
  half=$(python3 -c "print(round($sat * 0.5, 1))")
  part mixed || continue
  run "$b" "$out-mixed-$bin-alone" replay --workload online --rate "$half" --duration-s 30 --warmup-s 5 || true
  run "$b" "$out-mixed-$bin-reindex" replay --workload mixed --batch-concurrency 2 --rate "$half" --duration-s 30 --warmup-s 5 || true
done
# Plans made at start-up, so no step pays for a capture; two runs, so run-to-run noise shows.
part overlap && for i in 1 2; do
  run "$new" "$out-sweep-online-overlap-$i" sweep --workload online --axis overlap=true,false --set capture=startup
done
part curve && for dtype in f32 bf16; do
  "$new" curve --dtype "$dtype" --json "$res/$out-curve-$dtype.json" 2>&1 | tail -n 20
done
soak=$(python3 -c "print(round($sat * 0.8, 1))")
part soak && run "$new" "$out-soak" replay --workload online --rate "$soak" --duration-s "$soak_s" --warmup-s 10 || true
true
