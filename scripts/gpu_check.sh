#!/usr/bin/env bash
# The one prepared GPU check of the CUDA backend (issue 17), for a machine with an NVIDIA GPU (an H200), Python with
# torch, transformers and tokenizers, the CUDA libraries, and no Rust toolchain and no network. Under 8 minutes there.
#
# Build here (where Rust is), carry the binary (stripped, well under 64 MiB) with the working tree:
#   cargo build --release -p harness --features cuda && strip -o bench-cuda target/release/bench
# Run there, from the repository root:
#   scripts/gpu_check.sh ./bench-cuda "$OUT"            # BACKEND=cuda by default
# It (a) writes random-weight models of real shapes (all-MiniLM-L6, a BGE-large-sized BERT and, for correctness
# only, an all-mpnet-base-v2-sized MPNet, a ModernBERT-base-sized ModernBERT, LaBSE's Dense head on the MiniLM
# shape, a gte-Qwen2-1.5B-wide Qwen2, an EmbeddingGemma-300m-wide Gemma 3 (heads of 256), a
# nomic-embed-text-v1.5-wide Nomic BERT and two gemma-2-2b-wide Gemma 2 layers (soft-capped scores) with
# transformers; the
# Qwen3-0.6B shape with `bench`'s synthetic model) and
# their fp32 reference embeddings with torch; (b) checks our
# embeddings against them (cosine ≥ 0.999 in bf16) and against our CPU backend, with the defaults and with each
# candidate setting (`gpu_check.py variants`: `--gpu-attention tensor-cores`, `--gpu-intermediate bf16`); (c)
# measures tokens/s against batch tokens (`bench curve`), single-query 1x12 p50/p99 with graphs off vs lazy and
# start-up lazy vs startup (`bench plans`), both again with each candidate, overlap on vs off under a bulk
# re-index (`bench replay --workload batch`), and PyTorch eager / torch.compile on the same machine; and writes
# $OUT/gpu_check.json and $OUT/gpu_check.md (one table per model).
#
# A device lease is minutes long and the backend's first contact with a GPU may fail anywhere, so no step stops the
# run: each runs under a timeout, its output goes to logs/<step>.log and its outcome to steps.tsv, and the table says
# what is missing. A smoke step comes first: if the CUDA backend cannot embed four texts, the run ends there (the
# log says why) instead of spending the lease on steps that would all fail the same way. Steps are ordered by what
# they are worth (correctness, then the curve and latency, then the baselines, then overlap, then torch.compile) and
# skipped once BUDGET_S seconds (default 420) have gone.
#
# Knobs for a second lease after a change to the backend: REFERENCE_DIR=<an earlier run's output> takes its
# reference embeddings (the models are seeded, so they are the same; it saves the transformers runs), TORCH=0 skips
# the PyTorch baselines, PROFILE=1 adds each model's GPU time per kernel under Nsight Compute (`ncu`, one batch,
# eager) to the table.
#
# DRY=1 BACKEND=cpu runs the same steps end to end on a CPU with small models and sizes (no GPU figure):
#   DRY=1 BACKEND=cpu PYTHON=~/.cache/embedding-workbench/peers-venv/bin/python scripts/gpu_check.sh BENCH OUT
# CUDA libraries: cudarc loads libcuda, libnvrtc and libcublasLt from the loader's path; PyTorch's pip wheels carry
# NVRTC and cuBLASLt under site-packages/nvidia/*/lib, which this script adds to LD_LIBRARY_PATH when present.
set -uo pipefail
bench=$(realpath "$1") out=$2
backend=${BACKEND:-cuda}
py=${PYTHON:-python3}
dry=${DRY:-0}
budget=${BUDGET_S:-420}
reference_dir=${REFERENCE_DIR:-}
torch=${TORCH:-1}
profile=${PROFILE:-0}
# The candidate settings' steps (tag, then flags, per line): on a GPU, or in a dry run (where they exercise the
# commands, nothing more).
variants=()
if [ "$backend" = cuda ] || [ "$dry" = 1 ]; then
  mapfile -t variants < <("$py" "$(dirname "$0")/gpu_check.py" variants)
fi
mkdir -p "$out/logs"
out=$(realpath "$out")
helper="$(dirname "$0")/gpu_check.py"
export EMBED_WORKBENCH_CACHE="$out/cache" RUST_BACKTRACE=1 PYTHONUNBUFFERED=1
started=$SECONDS
: > "$out/steps.tsv"

# step NAME TIMEOUT_S COMMAND...: runs COMMAND (its stdout and stderr to logs/NAME.log), records the outcome.
step() {
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  if (( SECONDS - started > budget )); then
    printf '%s\tskipped\t-\t0\n' "$name" >> "$out/steps.tsv"
    echo "-- $name: skipped (budget of ${budget} s spent)" >&2
    return 1
  fi
  timeout -k 5 "$limit" "$@" > "$out/logs/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$([ $rc = 0 ] && echo ok || echo failed)" "$rc" "$((SECONDS - t0))" \
    >> "$out/steps.tsv"
  echo "-- $name: rc $rc in $((SECONDS - t0)) s" >&2
  [ $rc = 0 ] || tail -n 15 "$out/logs/$name.log" >&2
  return $rc
}
# shstep NAME TIMEOUT_S 'SHELL COMMAND': a step whose command needs redirections.
shstep() { local n=$1 l=$2; shift 2; step "$n" "$l" bash -c "$1"; }
finish() {
  "$py" "$helper" table "$out" > /dev/null 2> "$out/logs/table.log" || tail -n 5 "$out/logs/table.log" >&2
  echo "gpu_check: $(grep -c ok$'\t' "$out/steps.tsv") steps ok, $(grep -vc ok$'\t' "$out/steps.tsv") not, in $((SECONDS - started)) s" >&2
}

if [ "$backend" = cuda ]; then
  libs=$("$py" -c 'import glob, os
try:
    import nvidia
    paths = sorted({os.path.dirname(l) for p in nvidia.__path__ for l in glob.glob(os.path.join(p, "**", "lib*.so*"), recursive=True)})
except ImportError:
    paths = []
print(":".join(paths))')
  export LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$out/nvidia-smi.csv" 2>&1
fi

if [ "$dry" = 1 ]; then
  sizes=16,64,256,1024; compile_sizes=256; texts_n=16; bulk_n=64; runs=5; qwen=qwen3-tiny; min_s=0.3
  online_rate=20; online_s=4
  models_flag=--dry
else
  sizes=16,32,64,128,256,512,1024,2048,4096,8192,16384,32768; compile_sizes=1024; texts_n=32; bulk_n=$(wc -l < workloads/text/passages_en.jsonl)
  runs=200; qwen=qwen3-0.6b; min_s=0.5; models_flag=
  online_rate=1000; online_s=8
fi
models=(minilm-l6 bge-large "$qwen")
# Checked for correctness (cosine, every candidate setting), not measured: a lease is short.
checked=("${models[@]}" mpnet-base modernbert-base minilm-dense qwen2-1.5b embeddinggemma-300m nomic-embed-v1.5
  gemma2-2b)
texts="$out/texts.jsonl"
head -n "$texts_n" workloads/text/passages_en.jsonl > "$texts"
"$py" -c 'import json, sys
print(json.dumps({"backend": sys.argv[1], "dry": sys.argv[2] == "1", "models": sys.argv[3:]}))' \
  "$backend" "$dry" "${checked[@]}" > "$out/run.json"

step models 120 "$py" "$helper" models "$out/models" $models_flag
# The Qwen3 shape: bench's synthetic model, written into the cache on first use.
shstep qwen-model 120 "head -n 1 '$texts' | '$bench' embed --model 'synthetic:$qwen' --backend cpu > /dev/null"
ln -sfn "$EMBED_WORKBENCH_CACHE/synthetic/$qwen" "$out/models/$qwen"

# Smoke: four texts, eager, then the same through a captured graph. The engine line names the device.
shstep smoke 120 "head -n 4 '$texts' | '$bench' embed --model '$out/models/minilm-l6' --backend $backend --capture off \
  > '$out/smoke-eager.jsonl' && '$bench' plans --model '$out/models/minilm-l6' --backend $backend --shapes 1x12 \
  --runs 3 > '$out/device.txt' 2>&1"
if ! grep -q '^engine:' "$out/device.txt" 2>/dev/null; then
  echo "gpu_check: the smoke step failed; the rest would fail the same way (logs/smoke.log)" >&2
  # Where a kernel faulted, the memory checker names it (and the address) for the next try.
  if [ "$backend" = cuda ] && command -v compute-sanitizer > /dev/null; then
    shstep smoke-memcheck 120 "head -n 4 '$texts' | compute-sanitizer --tool memcheck --print-limit 20 '$bench' embed \
      --model '$out/models/minilm-l6' --backend cuda --capture off > /dev/null"
  fi
  finish
  exit 3
fi

step gemm-peak 60 "$py" "$helper" peak "$out/peak.json"
# Correctness first, every model: ours vs transformers fp32, and vs our CPU backend.
for name in "${checked[@]}"; do
  model="$out/models/$name" d="$out/$name"
  mkdir -p "$d"
  if [ -n "$reference_dir" ] && [ -f "$reference_dir/$name/reference.jsonl" ]; then
    step "$name-reference" 10 cp "$reference_dir/$name/reference.jsonl" "$d/reference.jsonl"
  else
    step "$name-reference" 120 "$py" "$helper" reference "$model" "$texts" "$d/reference.jsonl" --limit "$texts_n"
  fi
  shstep "$name-embed" 120 "'$bench' embed --model '$model' --backend $backend '$texts' > '$d/ours.jsonl'"
  shstep "$name-embed-cpu" 180 "'$bench' embed --model '$model' --backend cpu '$texts' > '$d/cpu.jsonl'"
  shstep "$name-cosine" 60 "'$py' '$helper' cosine '$d/reference.jsonl' '$d/ours.jsonl' > '$d/cosine_vs_reference.json' \
    && '$py' '$helper' cosine '$d/cpu.jsonl' '$d/ours.jsonl' > '$d/cosine_vs_cpu.json'"
  # Each candidate setting, checked before anything measures it. A CPU ignores the flags: the steps run on a GPU,
  # and in a dry run only to exercise them (its table says so).
  for v in "${variants[@]}"; do
    tag=${v%% *} flags=${v#* }
    shstep "$name-embed-$tag" 120 "'$bench' embed --model '$model' --backend $backend $flags '$texts' \
      > '$d/ours_$tag.jsonl' && '$py' '$helper' cosine '$d/reference.jsonl' '$d/ours_$tag.jsonl' \
      > '$d/cosine_vs_reference_$tag.json'"
  done
done
# The kernels under compute-sanitizer with every candidate setting at once (none had run on a GPU when written),
# on a BERT and on a Qwen3 (SwiGLU's bf16 gate; the tiny synthetic one: the sanitizer slows kernels by orders of
# magnitude, and 0.6B would spend the budget the measurements need) and on the EmbeddingGemma shape (the wide
# attention kernels: the tensor-core one stages Q in shared memory behind a block barrier, a race the host
# emulation cannot show): out-of-bounds or misaligned accesses, and shared-memory races.
if [ "$backend" = cuda ] && command -v compute-sanitizer > /dev/null; then
  all_flags=$(for v in "${variants[@]}"; do printf '%s ' "${v#* }"; done)
  for tool in memcheck racecheck; do
    for model in "$out/models/minilm-l6" synthetic:qwen3-tiny "$out/models/embeddinggemma-300m"; do
      shstep "sanitize-$tool-${model##*[/:]}" 120 "head -n 4 '$texts' | compute-sanitizer --tool $tool \
        --error-exitcode 9 --print-limit 20 '$bench' embed --model '$model' --backend cuda --capture off $all_flags \
        > /dev/null"
    done
  done
fi
# The saturation curve and single-query latency (graphs off vs lazy, start-up lazy vs startup), with PyTorch eager.
for name in "${models[@]}"; do
  model="$out/models/$name" d="$out/$name"
  step "$name-curve" 150 "$bench" curve --model "$model" --backend "$backend" --dtype bf16 --sizes "$sizes" \
    --min-s "$min_s" --json "$d/curve.json"
  step "$name-plans" 150 "$bench" plans --model "$model" --backend "$backend" --dtype bf16 --shapes 1x12 \
    --runs "$runs" --json "$d/plans.json"
  for v in "${variants[@]}"; do
    tag=${v%% *}
    read -r -a flag_words <<< "${v#* }"
    step "$name-curve-$tag" 150 "$bench" curve --model "$model" --backend "$backend" --dtype bf16 --sizes "$sizes" \
      --min-s "$min_s" "${flag_words[@]}" --json "$d/curve_$tag.json"
    step "$name-plans-$tag" 150 "$bench" plans --model "$model" --backend "$backend" --dtype bf16 --shapes 1x12 \
      --runs "$runs" "${flag_words[@]}" --json "$d/plans_$tag.json"
  done
  [ "$torch" = 1 ] && step "$name-torch-eager" 150 "$py" "$helper" torch-bench "$model" "$d/torch.json" --modes eager --sizes "$sizes" \
    --min-s "$min_s" --runs "$runs"
done
# Where the GPU time of one eager batch (the check's texts) goes, kernel by kernel, under Nsight Compute.
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2> /dev/null | head -n 1)
if [ "$profile" = 1 ] && [ "$backend" = cuda ] && [ -n "$ncu" ]; then
  for name in "${models[@]}"; do
    model="$out/models/$name" d="$out/$name"
    for v in "- " "${variants[@]}"; do
      tag=${v%% *} flags=${v#* }
      suffix=$([ "$tag" = - ] || echo "_$tag")
      shstep "$name-profile$suffix" 120 "'$ncu' --clock-control none --cache-control none --metrics \
        gpu__time_duration.sum --csv --page raw --launch-count 2000 '$bench' embed --model '$model' --backend cuda \
        --capture off $flags '$texts' > '$d/ncu$suffix.csv' 2> '$d/ncu$suffix.err' \
        && '$py' '$helper' profile '$d/ncu$suffix.csv' > '$d/profile$suffix.json'"
    done
  done
fi
# Overlap on vs off under a bulk load: a batch re-index of the passages corpus (`bench replay`; its first texts in a
# dry run), by 8 clients, so batches fill the token budget (2 clients of 16 passages made batches of one request, a
# third of it), with every plan captured at start-up, so no capture falls inside the pass (a fraction of a second).
for name in "${models[@]}"; do
  model="$out/models/$name" d="$out/$name"
  ok=1
  for ov in true false; do
    step "$name-replay-overlap-$ov" 120 "$bench" replay --model "$model" --workload batch --corpus-limit "$bulk_n" \
      --concurrency 8 --set capture=startup --set backend="$backend" --set dtype=bf16 --set overlap=$ov --run-id "overlap-$ov" --results-dir "$d/replay" \
      --reports-dir "$d/replay-report" || ok=0
    # And under an online load (the online model only: a lease is short), latency with overlap on vs off.
    [ "$name" = minilm-l6 ] && step "$name-online-overlap-$ov" 60 "$bench" replay --model "$model" --workload online \
      --rate "$online_rate" --duration-s "$online_s" --warmup-s 1 --set backend="$backend" --set dtype=bf16 \
      --set overlap=$ov --run-id "online-$ov" --results-dir "$d/replay" --reports-dir "$d/replay-report"
  done
  [ $ok = 1 ] && shstep "$name-overlap" 30 "'$py' '$helper' overlap '$d/replay' $bulk_n > '$d/overlap.json'"
done
# torch.compile compiles per shape (tens of seconds each): the compile sizes and 1x12 only, last.
for name in "${models[@]}"; do
  model="$out/models/$name" d="$out/$name"
  [ "$torch" = 1 ] && step "$name-torch-compile" 200 "$py" "$helper" torch-bench "$model" "$d/torch_compile.json" --modes compile \
    --compile-sizes "$compile_sizes" --min-s "$min_s" --runs "$runs"
done
finish
