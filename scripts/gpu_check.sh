#!/usr/bin/env bash
# The one prepared GPU check of the CUDA backend (issue 17), for a machine with an NVIDIA GPU (an H200), Python with
# torch, transformers and tokenizers, the CUDA libraries, and no Rust toolchain and no network. Under 8 minutes there.
#
# Build here (where Rust is), carry the binary (stripped, well under 64 MiB) with the working tree:
#   cargo build --release -p harness --features cuda && strip -o bench-cuda target/release/bench
# Run there, from the repository root:
#   scripts/gpu_check.sh ./bench-cuda "$OUT"            # BACKEND=cuda by default
# It (a) writes random-weight models of real shapes (all-MiniLM-L6, a BGE-large-sized BERT with transformers; the
# Qwen3-0.6B shape with `bench`'s synthetic model) and their fp32 reference embeddings with torch; (b) checks our
# embeddings against them (cosine ≥ 0.999 in bf16) and against our CPU backend; (c) measures tokens/s against batch
# tokens (`bench curve`), single-query 1x12 p50/p99 with graphs off vs lazy and start-up lazy vs startup
# (`bench plans`), overlap on vs off under a bulk re-index (`bench replay --workload batch`), and PyTorch
# eager / torch.compile on the same machine; and writes $OUT/gpu_check.json and $OUT/gpu_check.md (one table per model).
#
# DRY=1 BACKEND=cpu runs the same steps end to end on a CPU with small models and sizes (no GPU figure):
#   DRY=1 BACKEND=cpu PYTHON=~/.cache/embedding-workbench/peers-venv/bin/python scripts/gpu_check.sh BENCH OUT
# CUDA libraries: cudarc loads libcuda, libnvrtc and libcublasLt from the loader's path; PyTorch's pip wheels carry
# NVRTC and cuBLASLt under site-packages/nvidia/*/lib, which this script adds to LD_LIBRARY_PATH when present.
set -euo pipefail
bench=$(realpath "$1") out=$2
backend=${BACKEND:-cuda}
py=${PYTHON:-python3}
dry=${DRY:-0}
mkdir -p "$out"
out=$(realpath "$out")
helper="$(dirname "$0")/gpu_check.py"
export EMBED_WORKBENCH_CACHE="$out/cache"

if [ "$backend" = cuda ]; then
  libs=$("$py" -c 'import glob, os
try:
    import nvidia
    paths = sorted({os.path.dirname(l) for p in nvidia.__path__ for l in glob.glob(os.path.join(p, "**", "lib*.so*"), recursive=True)})
except ImportError:
    paths = []
print(":".join(paths))')
  export LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

if [ "$dry" = 1 ]; then
  sizes=16,64,256,1024; compile_sizes=256; texts_n=16; bulk_n=64; runs=5; qwen=qwen3-tiny; min_s=0.3
  models_flag=--dry
else
  sizes=16,32,64,128,256,512,1024,2048,4096,8192,16384,32768; compile_sizes=1024; texts_n=64; bulk_n=4096; runs=200
  qwen=qwen3-0.6b; min_s=1; models_flag=
fi
texts="$out/texts.jsonl"
head -n "$texts_n" workloads/text/passages_en.jsonl > "$texts"
head -n "$bulk_n" workloads/text/passages_en.jsonl > "$out/bulk.jsonl"
"$py" "$helper" models "$out/models" $models_flag
# The Qwen3 shape: bench's synthetic model, written into the cache on first use.
head -n 1 "$texts" | "$bench" embed --model "synthetic:$qwen" --backend cpu > /dev/null
ln -sfn "$EMBED_WORKBENCH_CACHE/synthetic/$qwen" "$out/models/$qwen"

"$bench" plans --model "$out/models/minilm-l6" --backend "$backend" --shapes 1x12 --runs 3 > "$out/device.txt" 2>&1 \
  || true
device=$(grep -m1 '^engine:' "$out/device.txt" || echo "engine: unknown")
"$py" -c 'import json, sys
print(json.dumps({"backend": sys.argv[1], "dry": sys.argv[2] == "1", "device": sys.argv[3],
                  "models": ["minilm-l6", "bge-large", sys.argv[4]]}))' "$backend" "$dry" "$device" "$qwen" > "$out/run.json"

for name in minilm-l6 bge-large "$qwen"; do
  model="$out/models/$name" d="$out/$name"
  mkdir -p "$d"
  echo "== $name" >&2
  "$py" "$helper" reference "$model" "$texts" "$d/reference.jsonl" --limit "$texts_n"
  "$bench" embed --model "$model" --backend "$backend" "$texts" > "$d/ours.jsonl"
  "$bench" embed --model "$model" --backend cpu "$texts" > "$d/cpu.jsonl"
  "$py" "$helper" cosine "$d/reference.jsonl" "$d/ours.jsonl" > "$d/cosine_vs_reference.json"
  "$py" "$helper" cosine "$d/cpu.jsonl" "$d/ours.jsonl" > "$d/cosine_vs_cpu.json"
  "$bench" curve --model "$model" --backend "$backend" --dtype bf16 --sizes "$sizes" --min-s "$min_s" \
    --json "$d/curve.json" > /dev/null
  "$bench" plans --model "$model" --backend "$backend" --dtype bf16 --shapes 1x12 --runs "$runs" \
    --json "$d/plans.json" > /dev/null
  # Overlap on vs off under a bulk load: a batch re-index of the first texts of the corpus (`bench replay`).
  for ov in true false; do
    "$bench" replay --model "$model" --workload batch --corpus-limit "$bulk_n" --set backend="$backend" \
      --set dtype=bf16 --set overlap=$ov --run-id "overlap-$ov" --results-dir "$d/replay" \
      --reports-dir "$d/replay-report" > /dev/null 2>&1
  done
  "$py" "$helper" overlap "$d/replay" "$bulk_n" > "$d/overlap.json"
  "$py" "$helper" torch-bench "$model" "$d/torch.json" --sizes "$sizes" --compile-sizes "$compile_sizes" \
    --min-s "$min_s" --runs "$runs"
done
"$py" "$helper" table "$out"
