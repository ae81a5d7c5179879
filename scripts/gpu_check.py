#!/usr/bin/env python3
"""The Python half of scripts/gpu_check.sh: random-weight models of real shapes, their reference embeddings with
transformers, cosine checks of our embeddings against them, the PyTorch eager / torch.compile baselines, and the
one results table. Needs torch and transformers (and `tokenizers`); no network.

Subcommands:
  models OUT [--dry]                 write BERT models (all-MiniLM-L6 shape, BGE-large shape) in the
                                     sentence-transformers layout, seeded random weights, the shipped WordPiece
  reference MODEL TEXTS OUT          reference embeddings (fp32 torch, the model's pooling and Normalize)
  cosine REF OURS                    min / mean cosine of two embedding files (JSON lines with "embedding")
  torch-bench MODEL OUT --sizes ...  PyTorch eager and torch.compile: tokens/s per batch size, 1x12 p50/p99
  overlap REPLAY N                   tokens/s of the overlap on / off re-index replays
  table OUT                          one JSON and one Markdown table from the pieces in OUT
"""
import argparse
import glob
import json
import os
import re
import shutil
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The backend's candidate settings the check measures beside its defaults, each on its own (gpu_check.sh reads
# them with `variants`): a tag for file names, words for the table, the flags.
VARIANTS = [
    ("tc", "tensor-core attention", "--gpu-attention tensor-cores"),
    ("bi", "bf16 feed-forward intermediate", "--gpu-intermediate bf16"),
]
TOKENIZER = os.path.join(REPO, "workloads", "vocab", "all-MiniLM-L6-v2", "tokenizer.json")

# Real shapes (their config.json's); --dry keeps the widths and cuts the layers, so a 2-core CPU runs it. MPNet
# (all-mpnet-base-v2's shape: its relative position bias in both attention kernels), ModernBERT
# (ModernBERT-base's, as gte-modernbert-base: sliding-window layers, GeGLU, LayerNorm into another matrix) and
# Qwen2 (gte-Qwen2-1.5B's: Q/K/V biases, last-token pooling, a causal window), Gemma 3 (EmbeddingGemma-300m's:
# heads of 256, the attention kernels' wide entry points), Nomic BERT (nomic-embed-text-v1.5's: post-norm layers
# with rotary positions and SwiGLU) and Gemma 2 (gemma-2-2b's, as bge-multilingual-gemma2: soft-capped scores) are
# checked for correctness only.
SHAPES = {
    "minilm-l6": dict(arch="bert", hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                      intermediate_size=1536, pooling="mean", dry_layers=6),
    "bge-large": dict(arch="bert", hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                      intermediate_size=4096, pooling="cls", dry_layers=2),
    "mpnet-base": dict(arch="mpnet", hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                       intermediate_size=3072, pooling="mean", dry_layers=2),
    # LaBSE's head on the MiniLM shape: CLS pooling, a tanh Dense with bias, Normalize (the host normalizes after
    # the Dense module on a GPU).
    "minilm-dense": dict(arch="bert", hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                         intermediate_size=1536, pooling="cls", dry_layers=2, dense=[(384, True, "Tanh")]),
    # Three dry layers: a global one, then two sliding-window ones.
    "modernbert-base": dict(arch="modernbert", hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
                            intermediate_size=1152, pooling="mean", dry_layers=3),
    # gte-Qwen2-1.5B's widths (Q/K/V biases, 12 query / 2 K/V heads of 128, causal, last-token pooling), cut to 4
    # layers on a GPU (its 28 would take minutes of a short lease to make and load); its sliding window switched
    # on (64 tokens from the second layer on) so the causal-window path of the attention kernels runs.
    "qwen2-1.5b": dict(arch="qwen2", hidden_size=1536, num_hidden_layers=4, num_attention_heads=12,
                       num_key_value_heads=2, intermediate_size=8960, pooling="last", dry_layers=3),
    # EmbeddingGemma-300m's widths (3 query heads over 1 K/V head, of 256: the wide attention kernels; GeGLU, four
    # norms a layer, bidirectional, mean pooling, its two bias-free Dense modules), cut to 4 layers on a GPU (its
    # 24 would cost the lease minutes for no new path); a window of 64 (its own is 512) on two layers of three so
    # the sliding-window path runs on these texts.
    "embeddinggemma-300m": dict(arch="gemma3", hidden_size=768, num_hidden_layers=4, num_attention_heads=3,
                                num_key_value_heads=1, intermediate_size=1152, pooling="mean", dry_layers=3,
                                dense=[(3072, False, "Identity"), (768, False, "Identity")]),
    # nomic-embed-text-v1.5's widths (saved by transformers under the Hub's contrastors names), cut to 4 layers.
    "nomic-embed-v1.5": dict(arch="nomic_bert", hidden_size=768, num_hidden_layers=4, num_attention_heads=12,
                             intermediate_size=3072, pooling="mean", dry_layers=2),
    # gemma-2-2b's widths as bge-multilingual-gemma2 runs them (8 query heads over 4 K/V heads of 256, causal,
    # last-token pooling), two layers: a sliding-window one (64 tokens), a global one. The scores are capped at 2
    # (Gemma 2's own cap, 50, would bend none of these random weights' scores), so the kernels' tanh shows.
    "gemma2-2b": dict(arch="gemma2", hidden_size=2304, num_hidden_layers=2, num_attention_heads=8,
                      num_key_value_heads=4, intermediate_size=9216, pooling="last", dry_layers=2),
}


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=2)


def cmd_models(a):
    import torch
    from transformers import (BertConfig, BertModel, Gemma2Config, Gemma2Model, Gemma3TextConfig, Gemma3TextModel,
                              ModernBertConfig, ModernBertModel, MPNetConfig, MPNetModel, NomicBertConfig,
                              NomicBertModel, Qwen2Config, Qwen2Model)

    for name, s in SHAPES.items():
        out = os.path.join(a.out, name)
        os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
        torch.manual_seed(1234)
        shape = dict(vocab_size=30522, hidden_size=s["hidden_size"],
                     num_hidden_layers=s["dry_layers"] if a.dry else s["num_hidden_layers"],
                     num_attention_heads=s["num_attention_heads"], intermediate_size=s["intermediate_size"],
                     hidden_act="gelu")
        if s["arch"] == "mpnet":
            # MPNet's positions start after its padding id (1): 514 rows for 512 tokens.
            config = MPNetConfig(**shape, max_position_embeddings=514, pad_token_id=1, layer_norm_eps=1e-5)
            model = MPNetModel(config, add_pooling_layer=False).eval()
            with torch.no_grad():
                # Trained MPNets' bias is of the scores' order; the default init (std 0.02) would hide a wrong bucket.
                model.encoder.relative_attention_bias.weight.normal_(0.0, 1.0)
        elif s["arch"] == "modernbert":
            # Its own activation key; the defaults otherwise (a global layer every third, windows of 64 either
            # side, rotary bases 160,000 and 10,000, no biases). The WordPiece's ids: [PAD] 0, [CLS] 101, [SEP] 102.
            shape["hidden_activation"] = shape.pop("hidden_act")
            config = ModernBertConfig(**shape, max_position_embeddings=8192, pad_token_id=0, cls_token_id=101,
                                      sep_token_id=102, bos_token_id=101, eos_token_id=102)
            model = ModernBertModel(config).eval()
        elif s["arch"] == "qwen2":
            shape["hidden_act"] = "silu"
            config = Qwen2Config(**shape, num_key_value_heads=s["num_key_value_heads"], max_position_embeddings=32768,
                                 rope_theta=1e6, use_sliding_window=True, sliding_window=64, max_window_layers=1)
            model = Qwen2Model(config).eval()
            with torch.no_grad():
                # transformers zeroes biases at init: random ones, so that a dropped Q/K/V bias shows.
                for n, p in model.named_parameters():
                    if n.endswith("bias"):
                        p.normal_(0.0, 0.5)
        elif s["arch"] == "gemma3":
            shape["hidden_activation"] = "gelu_pytorch_tanh"
            del shape["hidden_act"]
            config = Gemma3TextConfig(**shape, num_key_value_heads=s["num_key_value_heads"], head_dim=256,
                                      query_pre_attn_scalar=256, sliding_window=64, sliding_window_pattern=3,
                                      use_bidirectional_attention=True, rope_theta=1e6, rope_local_base_freq=1e4,
                                      max_position_embeddings=2048, pad_token_id=0, attn_implementation="eager")
            model = Gemma3TextModel(config).eval()
        elif s["arch"] == "gemma2":
            shape["hidden_activation"] = "gelu_pytorch_tanh"
            del shape["hidden_act"]
            config = Gemma2Config(**shape, num_key_value_heads=s["num_key_value_heads"], head_dim=256,
                                  query_pre_attn_scalar=256, sliding_window=64, attn_logit_softcapping=2.0,
                                  max_position_embeddings=8192, pad_token_id=0, attn_implementation="eager")
            model = Gemma2Model(config).eval()
        elif s["arch"] == "nomic_bert":
            shape["hidden_act"] = "silu"
            config = NomicBertConfig(**shape, max_position_embeddings=8192, pad_token_id=0,
                                     rope_parameters={"rope_theta": 1000.0, "rope_type": "default"})
            model = NomicBertModel(config).eval()
        else:
            config = BertConfig(**shape, max_position_embeddings=512, layer_norm_eps=1e-12)
            model = BertModel(config, add_pooling_layer=False).eval()
        model.save_pretrained(out, safe_serialization=True)
        shutil.copy(TOKENIZER, os.path.join(out, "tokenizer.json"))
        modules = [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ]
        width = s["hidden_size"]
        for out_features, bias, act in s.get("dense", []):
            from safetensors.torch import save_file

            folder = f"{len(modules)}_Dense"
            os.makedirs(os.path.join(out, folder), exist_ok=True)
            weights = {"linear.weight": torch.randn(out_features, width) / width ** 0.5}
            if bias:
                weights["linear.bias"] = 0.1 * torch.randn(out_features)
            save_file(weights, os.path.join(out, folder, "model.safetensors"))
            write_json(os.path.join(out, folder, "config.json"), {
                "in_features": width, "out_features": out_features, "bias": bias,
                "activation_function": f"torch.nn.modules.{'activation.Tanh' if act == 'Tanh' else 'linear.Identity'}"})
            modules.append({"idx": len(modules), "name": str(len(modules)), "path": folder,
                            "type": "sentence_transformers.models.Dense"})
            width = out_features
        modules.append({"idx": len(modules), "name": str(len(modules)), "path": f"{len(modules)}_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
        write_json(os.path.join(out, "modules.json"), modules)
        mode = s["pooling"]
        write_json(os.path.join(out, "1_Pooling", "config.json"), {
            "word_embedding_dimension": s["hidden_size"],
            "pooling_mode_cls_token": mode == "cls", "pooling_mode_mean_tokens": mode == "mean",
            "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
            "pooling_mode_lasttoken": mode == "last",
        })
        write_json(os.path.join(out, "sentence_bert_config.json"), {"max_seq_length": 512, "do_lower_case": False})
        print(f"models: {name} ({config.num_hidden_layers} layers) in {out}", file=sys.stderr)


def model_meta(model_dir):
    """The pooling mode, the Dense modules after it (folder, activation name) and whether the model ends in
    Normalize, from its sentence-transformers files."""
    modules = json.load(open(os.path.join(model_dir, "modules.json")))
    pooling, dense, normalize = "mean", [], False
    for m in modules:
        kind = m["type"].rsplit(".", 1)[-1]
        if kind == "Dense":
            c = json.load(open(os.path.join(model_dir, m["path"], "config.json")))
            act = c.get("activation_function", "torch.nn.modules.activation.Tanh").rsplit(".", 1)[-1]
            dense.append((os.path.join(model_dir, m["path"]), act))
        if kind == "Pooling":
            p = json.load(open(os.path.join(model_dir, m["path"], "config.json")))
            pooling = pooling_mode(p)
        if kind == "Normalize":
            normalize = True
    return pooling, dense, normalize


def pooling_mode(config):
    """The one pooling mode of a Pooling module's config.json, in either sentence-transformers version's form
    (`pooling_mode`, a name or a list, or the old flags); the reference computes mean, CLS and last-token pooling
    of the whole sequence only, so anything else stops the check rather than being compared as mean."""
    flags = {"cls_token": "cls", "mean_tokens": "mean", "lasttoken": "last", "max_tokens": "max",
             "mean_sqrt_len_tokens": "mean_sqrt_len_tokens", "weightedmean_tokens": "weightedmean"}
    names = {"cls": "cls", "mean": "mean", "lasttoken": "last", "max": "max",
             "mean_sqrt_len_tokens": "mean_sqrt_len_tokens", "weightedmean": "weightedmean"}
    mode = config.get("pooling_mode")
    if mode is None:
        # No flag set pools by the mean, as the engine does (sentence-transformers does where the flags are absent).
        modes = [name for flag, name in flags.items() if config.get(f"pooling_mode_{flag}")] or ["mean"]
    else:
        modes = [names.get(m, m) for m in ([mode] if isinstance(mode, str) else mode)]
    if len(modes) != 1 or modes[0] not in ("mean", "cls", "last") or config.get("include_prompt") is False:
        sys.exit(f"gpu_check reference: pooling {modes} (include_prompt {config.get('include_prompt', True)}) is "
                 "not computed here; it checks one mean, CLS or last-token mode over every token")
    return modes[0]


def read_texts(path, limit):
    texts = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                texts.append(json.loads(line)["text"] if line.startswith("{") else line)
            if len(texts) >= limit:
                break
    return texts


def load(model_dir, device):
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModel

    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_padding()
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    st = os.path.join(model_dir, "sentence_bert_config.json")
    max_len = json.load(open(st)).get("max_seq_length", 512) if os.path.exists(st) else 512
    tok.enable_truncation(max_length=min(max_len, cfg.get("max_position_embeddings", max_len)))
    model = AutoModel.from_pretrained(model_dir, torch_dtype=torch.float32).to(device).eval()
    return tok, model


def embed(model, ids_list, pooling, dense, normalize, device):
    """Padded fp32 forward of a list of id lists, pooled as the model's Pooling module, through its Dense modules,
    normalized if it says."""
    import torch

    n = max(len(i) for i in ids_list)
    ids = torch.zeros((len(ids_list), n), dtype=torch.long)
    mask = torch.zeros((len(ids_list), n), dtype=torch.long)
    for r, i in enumerate(ids_list):
        ids[r, : len(i)] = torch.tensor(i)
        mask[r, : len(i)] = 1
    ids, mask = ids.to(device), mask.to(device)
    with torch.no_grad():
        h = model(input_ids=ids, attention_mask=mask).last_hidden_state.float()
    lens = mask.sum(1)
    if pooling == "cls":
        e = h[:, 0]
    elif pooling == "last":
        e = h[torch.arange(h.shape[0], device=h.device), lens - 1]
    else:
        e = (h * mask.unsqueeze(-1)).sum(1) / lens.unsqueeze(-1)
    for folder, act in dense:
        from safetensors.torch import load_file

        w = load_file(os.path.join(folder, "model.safetensors"), device=str(e.device))
        e = e @ w["linear.weight"].T + (w["linear.bias"] if "linear.bias" in w else 0.0)
        e = torch.tanh(e) if act == "Tanh" else e
    if normalize:
        e = torch.nn.functional.normalize(e, dim=-1)
    return e.cpu()


def cmd_reference(a):
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok, model = load(a.model, device)
    pooling, dense, normalize = model_meta(a.model)
    texts = read_texts(a.texts, a.limit)
    with open(a.out, "w") as f:
        for i in range(0, len(texts), 32):
            chunk = [e.ids for e in tok.encode_batch(texts[i : i + 32])]
            for row in embed(model, chunk, pooling, dense, normalize, device).tolist():
                f.write(json.dumps({"embedding": row}) + "\n")
    print(f"reference: {len(texts)} texts, {pooling} pooling, {len(dense)} Dense, normalize {normalize}, on {device}",
          file=sys.stderr)


def read_embeddings(path):
    with open(path) as f:
        return [json.loads(l)["embedding"] for l in f if l.strip()]


def cmd_cosine(a):
    import math

    ref, ours = read_embeddings(a.ref), read_embeddings(a.ours)
    if len(ref) != len(ours) or not ref:
        sys.exit(f"cosine: {len(ref)} reference rows, {len(ours)} of ours")
    cos = []
    for x, y in zip(ref, ours):
        dot = sum(p * q for p, q in zip(x, y))
        cos.append(dot / (math.sqrt(sum(p * p for p in x)) * math.sqrt(sum(q * q for q in y)) or 1.0))
    out = {"rows": len(cos), "min": min(cos), "mean": sum(cos) / len(cos)}
    print(json.dumps(out))


def percentile(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * q))]


def cmd_torch_bench(a):
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    _, model = load(a.model, device)
    model = model.to(dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "dtype": str(dtype),
              "torch": torch.__version__, "modes": {}}
    vocab = model.config.vocab_size
    sizes = [int(s) for s in a.sizes.split(",")]
    compile_sizes = [int(s) for s in a.compile_sizes.split(",") if s]
    for mode in a.modes.split(","):
        m = model
        if mode == "compile":
            try:
                m = torch.compile(model, dynamic=False)
            except Exception as e:  # reported in the table, not fatal
                result["modes"][mode] = {"error": repr(e)[:200]}
                continue
        rows = []
        try:
            # torch.compile recompiles per shape (tens of seconds each on a large model): a few sizes only.
            for tokens in sizes if mode == "eager" else compile_sizes:
                # Sequences of `a.len` tokens (fewer for the small sizes), as `bench curve` forms its batches.
                ln = min(a.len, tokens)
                seqs = max(1, tokens // ln)
                ids = torch.randint(0, vocab, (seqs, ln), device=device)
                mask = torch.ones_like(ids)
                with torch.no_grad():
                    for _ in range(2):
                        m(input_ids=ids, attention_mask=mask)
                    sync()
                    runs, t0 = 0, time.perf_counter()
                    while runs < 3 or time.perf_counter() - t0 < a.min_s:
                        m(input_ids=ids, attention_mask=mask)
                        sync()
                        runs += 1
                    dt = (time.perf_counter() - t0) / runs
                rows.append({"tokens": seqs * ln, "tokens_per_s": seqs * ln / dt})
            ids = torch.randint(0, vocab, (1, 12), device=device)
            mask = torch.ones_like(ids)
            lat = []
            with torch.no_grad():
                for _ in range(3):
                    m(input_ids=ids, attention_mask=mask)
                sync()
                for _ in range(a.runs):
                    t0 = time.perf_counter()
                    m(input_ids=ids, attention_mask=mask)
                    sync()
                    lat.append((time.perf_counter() - t0) * 1e3)
            result["modes"][mode] = {"curve": rows, "single_1x12_p50_ms": percentile(lat, 0.5),
                                     "single_1x12_p99_ms": percentile(lat, 0.99)}
        except Exception as e:
            result["modes"][mode] = {"error": repr(e)[:200]}
    write_json(a.out, result)
    print(f"torch-bench: {a.model} on {device}", file=sys.stderr)


def cmd_peak(a):
    """The machine's dense GEMM rate through PyTorch (bf16 on a GPU, f32 on a CPU): the ceiling for the curve."""
    import torch

    cuda = torch.cuda.is_available()
    n, dtype, device = (8192, torch.bfloat16, "cuda") if cuda else (1024, torch.float32, "cpu")
    x = torch.randn(n, n, dtype=dtype, device=device)
    y = torch.randn(n, n, dtype=dtype, device=device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(3):
        x @ y
    sync()
    t0, runs = time.perf_counter(), 10
    for _ in range(runs):
        x @ y
    sync()
    dt = (time.perf_counter() - t0) / runs
    write_json(a.out, {"n": n, "dtype": str(dtype), "device": device, "gflops": 2 * n**3 / dt / 1e9})


def cmd_variants(a):
    """One line per variant: its tag, then its flags (for gpu_check.sh)."""
    for tag, _, flags in VARIANTS:
        print(tag, flags)


def our_kernels():
    """The kernel names kernels/*.cu defines (the profile sorts every other kernel under cuBLASLt's or its own)."""
    names = set()
    for f in glob.glob(os.path.join(REPO, "kernels", "*.cu")):
        with open(f) as src:
            text = re.sub(r"__launch_bounds__\([^)]*\)", "", src.read())
            names.update(re.findall(r'extern "C" __global__ void\s+(\w+)\(', text))
    return names


def cmd_profile(a):
    """GPU time per kernel from an `ncu --csv --page raw --metrics gpu__time_duration.sum` report (its lines that
    start with a quote: the profiled program's own output may be mixed in), cuBLASLt's GEMM kernels counted
    together, largest first."""
    import csv

    rows = list(csv.reader(l for l in open(a.csv) if l.startswith('"')))
    if len(rows) < 3:
        sys.exit(f"profile: no kernels in {a.csv}")
    head, units = rows[0], rows[1]
    name, t = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6,
             "second": 1e6}.get(units[t])
    if scale is None:
        sys.exit(f"profile: unknown time unit {units[t]!r}")
    ours = our_kernels()
    total, by = 0.0, {}
    for r in rows[2:]:
        k = r[name].split("(")[0].strip()
        if k not in ours:
            k = "GEMM (cuBLASLt)" if any(g in k.lower() for g in ["gemm", "cutlass", "xmma", "nvjet", "sm90", "sm80"]) else k
        us = float(r[t].replace(",", "")) * scale
        total += us
        c = by.setdefault(k, {"kernel": k, "launches": 0, "us": 0.0})
        c["launches"] += 1
        c["us"] += us
    kernels = sorted(by.values(), key=lambda c: -c["us"])
    for c in kernels:
        c["share"] = c["us"] / total if total else None
    print(json.dumps({"launches": len(rows) - 2, "total_us": total, "kernels": kernels}))


def cmd_compare(a):
    """Two runs of this check side by side (a change's effect): per model, the curve's peak and its largest size,
    single-query replay p50, and the bulk re-index's tokens/s; PyTorch eager from whichever run has it."""
    def load(run, name, key):
        p = os.path.join(run, name, key + ".json")
        return json.load(open(p)) if os.path.exists(p) else None

    def curve(c, at=None):
        pts = (c or {}).get("points", [])
        if not pts:
            return None
        if at is None:
            return max(p["tokens_per_s"] for p in pts)
        return next((p["tokens_per_s"] for p in pts if p["tokens"] == at), None)

    names = json.load(open(os.path.join(a.before, "run.json")))["models"]
    md = ["| model | measure | before | after | after / before | PyTorch eager |", "|---|---|---|---|---|---|"]
    for name in names:
        b, c = [load(r, name, "curve") for r in (a.before, a.after)]
        tb = load(a.before, name, "torch") or load(a.after, name, "torch") or {}
        eager = {r["tokens"]: r["tokens_per_s"] for r in tb.get("modes", {}).get("eager", {}).get("curve", [])}
        largest = max((p["tokens"] for p in (c or {}).get("points", [])), default=None)
        pb, pa = [load(r, name, "plans") for r in (a.before, a.after)]
        ob, oa = [load(r, name, "overlap") for r in (a.before, a.after)]
        rows = [("peak tokens/s", curve(b), curve(c), max(eager.values(), default=None)),
                (f"tokens/s at {largest} tokens", curve(b, largest), curve(c, largest), eager.get(largest)),
                ("1x12 replay p50 ms", pb and pb["rows"][0]["replay_p50_ms"], pa and pa["rows"][0]["replay_p50_ms"],
                 tb.get("modes", {}).get("eager", {}).get("single_1x12_p50_ms")),
                ("bulk re-index tokens/s (overlap on)", ob and ob["on_tokens_per_s"], oa and oa["on_tokens_per_s"], None)]
        for what, x, y, t in rows:
            ratio = y / x if x and y else None
            digits = 3 if "ms" in what else 0
            md.append(f"| {name} | {what} | {fmt(x, digits)} | {fmt(y, digits)} | {fmt(ratio, 2)} | {fmt(t, digits)} |")
    print("\n".join(md))


def fmt(v, digits=1):
    return "n/a" if v is None else f"{v:,.{digits}f}"


def first(value, key):
    """The first `key` found walking a JSON value depth-first."""
    if isinstance(value, dict):
        if key in value:
            return value[key]
        value = list(value.values())
    if isinstance(value, list):
        for v in value:
            found = first(v, key)
            if found is not None:
                return found
    return None


def cmd_overlap(a):
    """Overlap on vs off: tokens/s of the bulk re-index replays, and latency of the online ones where they ran."""
    out = {"texts": a.texts}
    for ov in ["true", "false"]:
        side = "on" if ov == "true" else "off"
        r = json.load(open(os.path.join(a.replay, f"overlap-{ov}", "result.json")))
        out[f"{side}_tokens_per_s"] = first(r["configs"][0]["steps"], "tokens_per_s")
        args = r["args"]
        out["clients"] = int(args[args.index("--concurrency") + 1]) if "--concurrency" in args else None
        out["capture"] = r["configs"][0]["engine"]["capture"]
        p = os.path.join(a.replay, f"online-{ov}", "result.json")
        if os.path.exists(p):
            c = json.load(open(p))["configs"][0]["steps"][-1]["classes"][0]
            out[f"online_{side}"] = {k: c.get(k) for k in ["offered_rps", "achieved_rps", "goodput_rps"]} | {
                "p50_ms": c["latency_ms"]["p50"], "p99_ms": c["latency_ms"]["p99"]}
    print(json.dumps(out))


def cmd_table(a):
    out = a.out
    run = json.load(open(os.path.join(out, "run.json")))
    models = run["models"]
    table = {"run": run, "models": {}}
    p = os.path.join(out, "peak.json")
    peak = json.load(open(p)) if os.path.exists(p) else None
    table["gemm_peak"] = peak
    md = [f"# GPU check: backend `{run['backend']}`{' (CPU dry run: small models, no GPU figure)' if run['dry'] else ''}",
          ""]
    device = os.path.join(out, "device.txt")
    engine = [l.strip() for l in open(device) if l.startswith("engine:")] if os.path.exists(device) else []
    run["engine"] = engine[0] if engine else "unknown (the smoke step failed)"
    md.append(f"Engine: {run['engine']}")
    smi = os.path.join(out, "nvidia-smi.csv")
    if os.path.exists(smi):
        run["nvidia_smi"] = open(smi).read().strip()
        md.append(f"nvidia-smi: `{' / '.join(run['nvidia_smi'].splitlines())}`")
    steps = os.path.join(out, "steps.tsv")
    run["steps"] = [dict(zip(["step", "outcome", "rc", "seconds"], l.rstrip("\n").split("\t"))) for l in open(steps)] \
        if os.path.exists(steps) else []
    bad = [f"{s['step']} ({s['outcome']})" for s in run["steps"] if s["outcome"] != "ok"]
    md += [f"Steps: {len(run['steps']) - len(bad)} ok" + (f"; not: {', '.join(bad)}" if bad else ""), ""]
    for name in models:
        d = os.path.join(out, name)
        m = {}
        per_variant = [f"{k}_{tag}" for tag, _, _ in VARIANTS for k in ["cosine_vs_reference", "curve", "plans",
                                                                        "profile"]]
        for key in ["cosine_vs_reference", "cosine_vs_cpu", "curve", "plans", "torch", "torch_compile", "overlap",
                    "profile"] + per_variant:
            p = os.path.join(d, key + ".json")
            m[key] = json.load(open(p)) if os.path.exists(p) else None
        if m["torch_compile"]:
            m["torch"] = m["torch"] or {k: v for k, v in m["torch_compile"].items() if k != "modes"}
            m["torch"].setdefault("modes", {}).update(m["torch_compile"]["modes"])
        del m["torch_compile"]
        table["models"][name] = m
        md += [f"## {name}", ""]
        c1, c2 = m["cosine_vs_reference"], m["cosine_vs_cpu"]
        md.append(f"- cosine vs transformers fp32: min {fmt(c1 and c1['min'], 5)}, mean {fmt(c1 and c1['mean'], 5)} "
                  f"(goal ≥ 0.999 in bf16: {'PASS' if c1 and c1['min'] >= 0.999 else 'FAIL'})")
        md.append(f"- cosine vs our CPU backend: min {fmt(c2 and c2['min'], 5)}, mean {fmt(c2 and c2['mean'], 5)}")
        for tag, what, flags in VARIANTS:
            c3 = m[f"cosine_vs_reference_{tag}"]
            note = f" (dry run: a CPU ignores {flags.split()[0]}, so these are the CPU backend's)" if run["dry"] else ""
            md.append(f"- {what} (`{flags}`), cosine vs transformers fp32: min {fmt(c3 and c3['min'], 5)}, mean "
                      f"{fmt(c3 and c3['mean'], 5)} ({('PASS' if c3['min'] >= 0.999 else 'FAIL') if c3 else 'not run'})"
                      f"{note}")
        if not (m["curve"] or m["plans"] or m["torch"]):
            md.append("")
            continue  # checked for correctness only
        tb = (m["torch"] or {}).get("modes", {})
        eager = {r["tokens"]: r["tokens_per_s"] for r in tb.get("eager", {}).get("curve", [])}
        comp = {r["tokens"]: r["tokens_per_s"] for r in tb.get("compile", {}).get("curve", [])}
        variant_curves = [(what, {r["tokens"]: r["tokens_per_s"] for r in (m[f"curve_{tag}"] or {}).get("points", [])})
                          for tag, what, _ in VARIANTS]
        md += ["", "| batch tokens | ours tokens/s | " + "".join(f"ours, {what} | " for what, _ in variant_curves)
               + "PyTorch eager tokens/s | torch.compile tokens/s |", "|---" * (4 + len(variant_curves)) + "|"]
        curve = m["curve"] or {}
        for p in curve.get("points", []):
            t = p["tokens"]
            md.append(f"| {t} | {fmt(p['tokens_per_s'])} | " + "".join(f"{fmt(c.get(t))} | " for _, c in variant_curves)
                      + f"{fmt(eager.get(t))} | {fmt(comp.get(t))} |")
        if curve.get("points"):
            best = max(curve["points"], key=lambda p: p["tokens_per_s"])
            gflops = best["tokens_per_s"] * curve["flops_per_token"] / 1e9
            line = f"- peak: {fmt(best['tokens_per_s'])} tokens/s at {best['tokens']} tokens, {fmt(gflops)} GFLOP/s"
            if peak:
                line += f" ({fmt(100 * gflops / peak['gflops'])}% of the {fmt(peak['gflops'])} GFLOP/s {peak['dtype']} GEMM the same machine measures)"
            big = [p for p in curve["points"] if p["tokens"] in eager]
            if big:
                b = max(big, key=lambda p: p["tokens"])
                line += f"; vs PyTorch eager at {b['tokens']} tokens {fmt(b['tokens_per_s'] / eager[b['tokens']], 2)}x"
            md.append(line)
            m["peak_of_gemm"] = gflops / peak["gflops"] if peak else None
            for what, c in variant_curves:
                if c:
                    t, v = max(c.items(), key=lambda kv: kv[1])
                    md.append(f"- peak with {what}: {fmt(v)} tokens/s at {t} tokens "
                              f"({fmt(v / best['tokens_per_s'], 2)}x the default's peak)")
        pl = m["plans"]
        if pl:
            r = pl["rows"][0]
            su = pl["startup"]
            md += ["", "| single query 1x12 | p50 ms | p99 ms |", "|---|---|---|",
                   f"| ours, graphs off (eager) | {fmt(r['eager_p50_ms'], 3)} | {fmt(r.get('eager_p99_ms'), 3)} |",
                   f"| ours, graphs lazy (replay) | {fmt(r['replay_p50_ms'], 3)} | {fmt(r.get('replay_p99_ms'), 3)} |"]
            for tag, what, _ in VARIANTS:
                if m[f"plans_{tag}"]:
                    t = m[f"plans_{tag}"]["rows"][0]
                    md += [f"| ours, {what}, graphs off | {fmt(t['eager_p50_ms'], 3)} | {fmt(t.get('eager_p99_ms'), 3)} |",
                           f"| ours, {what}, graphs lazy | {fmt(t['replay_p50_ms'], 3)} | {fmt(t.get('replay_p99_ms'), 3)} |"]
            for mode in ["eager", "compile"]:
                x = tb.get(mode, {})
                md.append(f"| PyTorch {mode} | {fmt(x.get('single_1x12_p50_ms'), 3)} | {fmt(x.get('single_1x12_p99_ms'), 3)} |")
            md += ["", f"- replay vs eager at 1x12: {fmt(r['speedup'], 2)}x (goal ≥ 3x on a GPU)",
                   f"- start-up: capture lazy {fmt(su['lazy_load_ms'])} ms, capture startup {fmt(su['startup_load_ms'])} ms "
                   f"({su['startup_plans']} plans in {fmt(su['startup_capture_ms'])} ms)"]
        ov = m["overlap"]
        if ov:
            on, off = ov["on_tokens_per_s"], ov["off_tokens_per_s"]
            md.append(f"- bulk re-index of {ov['texts']} texts ({ov.get('clients')} clients, capture {ov.get('capture')}): overlap on {fmt(on)} tokens/s, off {fmt(off)} tokens/s "
                      f"(on / off {fmt(on / off if on and off else None, 2)}x)")
            on, off = ov.get("online_on"), ov.get("online_off")
            if on and off:
                md.append(f"- online load of {fmt(on['offered_rps'], 0)} req/s: overlap on p50 {fmt(on['p50_ms'], 2)} ms / "
                          f"p99 {fmt(on['p99_ms'], 2)} ms, off p50 {fmt(off['p50_ms'], 2)} ms / p99 {fmt(off['p99_ms'], 2)} ms "
                          f"(goodput {fmt(on['goodput_rps'])} vs {fmt(off['goodput_rps'])} req/s)")
        for key, what in [("profile", "")] + [(f"profile_{tag}", f", {what}") for tag, what, _ in VARIANTS]:
            pr = m[key]
            if pr:
                top = ", ".join(f"{c['kernel']} {100 * c['share']:.0f}%" for c in pr["kernels"][:6])
                md.append(f"- GPU time of an eager run over the check's texts (ncu{what}): {fmt(pr['total_us'])} µs in "
                          f"{pr['launches']} launches: {top}")
        for mode in ["eager", "compile"]:
            if "error" in tb.get(mode, {}):
                md.append(f"- PyTorch {mode}: {tb[mode]['error']}")
        md.append("")
    write_json(os.path.join(out, "gpu_check.json"), table)
    with open(os.path.join(out, "gpu_check.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("models")
    s.add_argument("out")
    s.add_argument("--dry", action="store_true")
    s = sub.add_parser("reference")
    s.add_argument("model")
    s.add_argument("texts")
    s.add_argument("out")
    s.add_argument("--limit", type=int, default=64)
    s = sub.add_parser("cosine")
    s.add_argument("ref")
    s.add_argument("ours")
    s = sub.add_parser("torch-bench")
    s.add_argument("model")
    s.add_argument("out")
    s.add_argument("--sizes", default="16,64,256,1024")
    s.add_argument("--compile-sizes", default="1024")
    s.add_argument("--len", type=int, default=128)
    s.add_argument("--min-s", type=float, default=0.5)
    s.add_argument("--runs", type=int, default=50)
    s.add_argument("--modes", default="eager,compile", help="eager, compile, or both (comma-separated)")
    s = sub.add_parser("compare")
    s.add_argument("before")
    s.add_argument("after")
    s = sub.add_parser("profile")
    s.add_argument("csv")
    s = sub.add_parser("peak")
    s.add_argument("out")
    s = sub.add_parser("overlap")
    s.add_argument("replay")
    s.add_argument("texts", type=int)
    s = sub.add_parser("table")
    s.add_argument("out")
    sub.add_parser("variants")
    a = p.parse_args()
    {"variants": cmd_variants, "models": cmd_models, "reference": cmd_reference, "cosine": cmd_cosine, "torch-bench": cmd_torch_bench, "peak": cmd_peak, "profile": cmd_profile, "compare": cmd_compare, "overlap": cmd_overlap,
     "table": cmd_table}[a.cmd](a)


if __name__ == "__main__":
    main()
