#!/usr/bin/env python3
"""One request served by `bench serve` over loopback HTTP against what a Python service would run on PyTorch CPU
in-process (sentence-transformers), same inputs, same thread count, one after the other on an otherwise idle
machine. The tasks:

- rerank: a query against --texts passages through TEI's /rerank, against CrossEncoder.predict; the model a
  random-weight BertForSequenceClassification of cross-encoder/ms-marco-MiniLM-L-6-v2's shape (6 layers, 384 wide,
  12 heads, one label).
- deberta-rerank: as rerank, the model a random-weight DebertaV2ForSequenceClassification of
  mixedbread-ai/mxbai-rerank-base-v1's shape (DeBERTa v3 base: 12 layers, 768 wide, 12 heads, disentangled
  attention over 256 log buckets, no position table, one label).
- decoder-rerank: as rerank, the model a random-weight Qwen3ForCausalLM of Qwen/Qwen3-Reranker-0.6B's shape under
  a chat template and LogitScore, as sentence-transformers 6 saves it (DecoderRerank below).
- sparse: --texts passages through TEI's /embed_sparse, against SparseEncoder.encode; the model a random-weight
  BertForMaskedLM of naver/splade-v3's shape (BERT-base: 12 layers, 768 wide, 12 heads, the 30,522-entry
  vocabulary) with SpladePooling (max, log(1 + ReLU)), its decoder bias set so that about as many entries are
  active as a trained SPLADE model's document has (the 99.5th percentile of the max-pooled logits, measured on
  the passages, becomes 0).
- inference-free: --texts queries (of workloads/text/queries_multilingual.jsonl) through /embed_sparse with
  `"prompt_name": "query"`, against SparseEncoder.encode_query; the model a Router of
  opensearch-neural-sparse-encoding-doc-v3-distill's shape: a `query` route of a SparseStaticEmbedding (random
  weights over the 30,522-entry vocabulary, as its IDF table is) and a `document` route of a random-weight
  DistilBertForMaskedLM (6 layers, 768 wide, 12 heads) with SpladePooling (max, log1p_relu), its bias set as
  sparse's. `--task sparse --model-dir` that model's folder times its document route against encode_document.
- colbert: --texts passages through /embed_multi with `"prompt_name": "document"`, against
  MultiVectorEncoder.encode_document; the model a random-weight ModernBertModel of lightonai/GTE-ModernColBERT-v1's
  shape (ModernBERT-base: 22 layers, 768 wide, 12 heads, GeGLU of 1,152, a global layer every third, windows of
  128) saved as sentence-transformers 6 saves a MultiVectorEncoder: documents cut at 300 tokens, queries expanded
  to 32 unattended, Dense 768 -> 128 without bias on every token, MultiVectorMask's punctuation skiplist,
  Normalize; "[Q] " and "[D] " special tokens before the texts. colbert-query: --texts queries (as inference-free's)
  through `"prompt_name": "query"` against encode_query.

Each model (the Hub is not reachable here, and speed does not depend on the weights' values) takes
all-MiniLM-L6-v2's uncased WordPiece tokenizer and is written once into --model-dir. Figures: p50/p90 of the
request's latency over --n requests after --warmup (ours: the client's round trip, HTTP and JSON included;
PyTorch's: the call alone), and the largest difference of our answer from sentence-transformers' (raw scores;
sparse weights, every vocabulary entry) — a speed figure from a wrong engine is worthless.

Needs the peers venv (bash scripts/setup_peers.sh) and a release build (cargo build --release --bin bench).
    ~/.cache/embedding-workbench/peers-venv/bin/python scripts/serve_vs_pytorch.py --task rerank --json results/X/rerank.json
    ~/.cache/embedding-workbench/peers-venv/bin/python scripts/serve_vs_pytorch.py --task decoder-rerank --texts 8 --n 5 --warmup 1 --json results/X/decoder-rerank.json
    ~/.cache/embedding-workbench/peers-venv/bin/python scripts/serve_vs_pytorch.py --task sparse --texts 32 --json results/X/sparse.json
    ~/.cache/embedding-workbench/peers-venv/bin/python scripts/serve_vs_pytorch.py --task inference-free --texts 1 --json results/X/query.json
    ~/.cache/embedding-workbench/peers-venv/bin/python scripts/serve_vs_pytorch.py --task colbert --texts 32 --json results/X/colbert.json
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOKENIZER = Path.home() / ".cache/embedding-workbench/models/all-MiniLM-L6-v2/tokenizer.json"
MODELS = Path.home() / ".cache/embedding-workbench/models"
QUERY = "how do vaccines train the immune system to recognise a virus"


def passages(n: int):
    lines = (REPO / "workloads/text/passages_en.jsonl").read_text().splitlines()
    return [json.loads(l)["text"] for l in lines[:n]]


def save_tokenizer(d: Path):
    """all-MiniLM-L6-v2's uncased WordPiece as BERT's tokenizer, reading up to 512 tokens, padding nothing (its
    own file truncates at 128 and pads)."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER), model_max_length=512, unk_token="[UNK]",
                                  sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]",
                                  model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    tok.save_pretrained(str(d))
    path = d / "tokenizer.json"
    t = json.loads(path.read_text())
    t["truncation"], t["padding"] = None, None
    path.write_text(json.dumps(t, ensure_ascii=False))


class Rerank:
    path = "/rerank"
    model_dir = MODELS / "rerank-minilm-l6-random"
    ours_name = "ours (bench serve /rerank, HTTP)"
    theirs_name = "PyTorch (CrossEncoder.predict)"

    @staticmethod
    def make_model(d: Path):
        import torch
        from transformers import BertConfig, BertForSequenceClassification

        torch.manual_seed(0)
        model = BertForSequenceClassification(BertConfig(
            vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
            max_position_embeddings=512, num_labels=1))
        model.eval().save_pretrained(str(d))
        save_tokenizer(d)

    @staticmethod
    def body(texts):
        return {"query": QUERY, "texts": texts, "raw_scores": True}

    @staticmethod
    def answer(data, texts):
        scores = {r["index"]: r["score"] for r in data}
        return [scores[i] for i in range(len(texts))]

    @staticmethod
    def theirs(model_dir: Path, texts):
        import torch
        from sentence_transformers import CrossEncoder

        ce = CrossEncoder(str(model_dir), device="cpu", max_length=512)
        batch = [(QUERY, p) for p in texts]
        return lambda: [float(x) for x in ce.predict(batch, batch_size=len(batch), activation_fn=torch.nn.Identity(),
                                                       convert_to_numpy=True).reshape(-1)]


class DebertaRerank(Rerank):
    """mixedbread-ai/mxbai-rerank-base-v1's shape: DeBERTa v3 base (12 layers, 768 wide, 12 heads, disentangled
    attention over 256 log buckets of 512 relative positions, no position table), one label; the vocabulary the
    tokenizer's (30,522), which changes nothing but the embedding table's size."""
    model_dir = MODELS / "rerank-deberta-v3-base-random"

    @staticmethod
    def make_model(d: Path):
        import torch
        from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

        torch.manual_seed(0)
        model = DebertaV2ForSequenceClassification(DebertaV2Config(
            vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
            max_position_embeddings=512, relative_attention=True, position_buckets=256, norm_rel_ebd="layer_norm",
            share_att_key=True, pos_att_type="p2c|c2p", position_biased_input=False, type_vocab_size=0,
            max_relative_positions=-1, pad_token_id=0, num_labels=1))
        model.eval().save_pretrained(str(d))
        save_tokenizer(d)


def mlm_transformer(d: Path, model):
    """`model` (a random-weight *ForMaskedLM) with all-MiniLM-L6-v2's tokenizer as a fill-mask Transformer module
    saved under d/_hf, its vocabulary bias lowered so that about as many entries are active as a trained SPLADE
    model's document has (the 99.5th percentile of the max-pooled logits over the passages becomes 0)."""
    import torch
    from sentence_transformers.base.modules import Transformer
    from transformers import AutoTokenizer

    tok_dir = d / "_tokenizer"
    save_tokenizer(tok_dir)
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    with torch.no_grad():
        feats = tok(passages(64), padding=True, truncation=True, return_tensors="pt")
        feats.pop("token_type_ids", None)
        logits = model(**feats).logits.masked_fill(~feats["attention_mask"].bool()[..., None], -1e9)
        pooled = logits.max(dim=1).values.flatten()
        model.get_output_embeddings().bias -= torch.quantile(pooled, 0.995)
    work = d / "_hf"
    model.save_pretrained(str(work))
    tok.save_pretrained(str(work))
    return Transformer(str(work), transformer_task="fill-mask", max_seq_length=512)


def remove_work(d: Path):
    for tmp in [d / "_hf", d / "_tokenizer"]:
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()


class Sparse:
    path = "/embed_sparse"
    model_dir = MODELS / "splade-bert-base-random"
    ours_name = "ours (bench serve /embed_sparse, HTTP)"
    theirs_name = "PyTorch (SparseEncoder.encode)"
    encode = "encode"

    @staticmethod
    def make_model(d: Path):
        import torch
        from sentence_transformers import SparseEncoder
        from sentence_transformers.sparse_encoder.modules import SpladePooling
        from transformers import BertConfig, BertForMaskedLM

        torch.manual_seed(0)
        model = BertForMaskedLM(BertConfig(vocab_size=30522, max_position_embeddings=512)).eval()
        transformer = mlm_transformer(d, model)
        SparseEncoder(modules=[transformer, SpladePooling("max", "relu")], device="cpu").save(str(d))
        remove_work(d)

    @staticmethod
    def body(texts):
        return {"inputs": texts}

    @staticmethod
    def answer(data, texts):
        dense = [[0.0] * 30522 for _ in texts]
        for row, entries in zip(dense, data):
            for e in entries:
                row[e["index"]] = e["value"]
        return [x for row in dense for x in row]

    @classmethod
    def theirs(cls, model_dir: Path, texts):
        from sentence_transformers import SparseEncoder

        encode = getattr(SparseEncoder(str(model_dir), device="cpu"), cls.encode)
        return lambda: encode(texts, batch_size=len(texts), convert_to_tensor=True).to_dense().flatten().tolist()


class InferenceFree(Sparse):
    model_dir = MODELS / "inference-free-distilbert-random"
    ours_name = "ours (bench serve /embed_sparse, prompt_name query, HTTP)"
    theirs_name = "PyTorch (SparseEncoder.encode_query)"
    encode = "encode_query"

    @staticmethod
    def texts(n: int):
        lines = (REPO / "workloads/text/queries_multilingual.jsonl").read_text().splitlines()
        return [json.loads(l)["text"] for l in lines[:n]]

    @staticmethod
    def make_model(d: Path):
        import torch
        from sentence_transformers import SparseEncoder
        from sentence_transformers.base.modules import Router
        from sentence_transformers.sparse_encoder.modules import SparseStaticEmbedding, SpladePooling
        from transformers import DistilBertConfig, DistilBertForMaskedLM

        torch.manual_seed(0)
        model = DistilBertForMaskedLM(DistilBertConfig(vocab_size=30522, tie_word_embeddings=False)).eval()
        transformer = mlm_transformer(d, model)
        idf = torch.rand(30522) * 8.0
        query = SparseStaticEmbedding(tokenizer=transformer.tokenizer, weight=idf, frozen=True)
        router = Router.for_query_document(query_modules=[query],
                                           document_modules=[transformer, SpladePooling("max", "log1p_relu")])
        SparseEncoder(modules=[router], device="cpu").save(str(d))
        remove_work(d)

    @staticmethod
    def body(texts):
        return {"inputs": texts, "prompt_name": "query"}


class DecoderRerank(Rerank):
    """Qwen3-Reranker-0.6B's shape as sentence-transformers 6 saves it: a random-weight Qwen3ForCausalLM (28 layers,
    1,024 wide, 16 query and 8 key/value heads of 128, SwiGLU of 3,072, the 151,669-entry vocabulary tied to the
    LM head), its pairs through a Qwen3-Reranker-style chat template with the generation prompt, then LogitScore
    ("yes" less "no"). The template, LogitScore and byte-level BPE tokenizer are the qwen3_reranker_logit_score
    fixture's (the Hub's Qwen tokenizer is not reachable here: its 602-entry vocabulary gives more tokens per text
    than Qwen's, so the token count is printed)."""
    model_dir = MODELS / "qwen3-reranker-0.6b-random"
    fixture = REPO / "engine/tests/fixtures/qwen3_reranker_logit_score"

    @classmethod
    def make_model(cls, d: Path):
        import shutil

        import torch
        from transformers import Qwen3Config, Qwen3ForCausalLM

        torch.manual_seed(0)
        model = Qwen3ForCausalLM(Qwen3Config(
            vocab_size=151669, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
            num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rope_theta=1000000.0,
            tie_word_embeddings=True, rms_norm_eps=1e-6))
        model.eval().save_pretrained(str(d))
        # modules.json last: its presence says the model is made.
        for f in sorted(cls.fixture.iterdir(), key=lambda f: f.name == "modules.json"):
            if f.name not in ["model.safetensors", "config.json", "reference.jsonl"]:
                (shutil.copytree if f.is_dir() else shutil.copy)(f, d / f.name)
        tok = json.loads((d / "tokenizer_config.json").read_text())
        tok["model_max_length"] = 8192
        (d / "tokenizer_config.json").write_text(json.dumps(tok))

    @staticmethod
    def theirs(model_dir: Path, texts):
        import torch
        from sentence_transformers import CrossEncoder

        ce = CrossEncoder(str(model_dir), device="cpu")
        batch = [(QUERY, p) for p in texts]
        print("tokens per pair:", [len(ce.preprocess([pair])["input_ids"][0]) for pair in batch])
        return lambda: [float(x) for x in ce.predict(batch, batch_size=len(batch), activation_fn=torch.nn.Identity(),
                                                       convert_to_numpy=True).reshape(-1)]


class Colbert:
    path = "/embed_multi"
    model_dir = MODELS / "colbert-modernbert-base-random"
    ours_name = "ours (bench serve /embed_multi, prompt_name document, HTTP)"
    theirs_name = "PyTorch (MultiVectorEncoder.encode_document)"
    task = "document"

    @staticmethod
    def make_model(d: Path):
        import shutil
        import string

        import torch
        from sentence_transformers import MultiVectorEncoder
        from sentence_transformers.base.modules import Dense, Normalize, Transformer
        from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask
        from tokenizers import AddedToken
        from transformers import ModernBertConfig, ModernBertModel, PreTrainedTokenizerFast

        work = d / "_hf"
        work.mkdir()
        save_tokenizer(work)
        tok = PreTrainedTokenizerFast.from_pretrained(str(work))
        tok.add_special_tokens({"additional_special_tokens": [
            AddedToken(p, normalized=False, special=True) for p in ["[Q] ", "[D] "]]})
        tok.save_pretrained(str(work))
        torch.manual_seed(0)
        ModernBertModel(ModernBertConfig(
            vocab_size=len(tok), hidden_size=768, intermediate_size=1152, num_hidden_layers=22,
            num_attention_heads=12, global_attn_every_n_layers=3, local_attention=128, max_position_embeddings=8192,
            pad_token_id=tok.pad_token_id, cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id,
            bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)).eval().save_pretrained(str(work))
        transformer = Transformer(str(work), document_length=300,
                                  query_expansion={"strategy": "fixed", "attend": False, "length": 32})
        dense = Dense(768, 128, bias=False, activation_function=torch.nn.Identity(),
                      module_input_name="token_embeddings")
        modules = [transformer, dense, MultiVectorMask(skiplist_words=list(string.punctuation)),
                   Normalize(module_input_name="token_embeddings")]
        MultiVectorEncoder(modules=modules, prompts={"query": "[Q] ", "document": "[D] "}, device="cpu").save(str(d))
        shutil.rmtree(work)

    @classmethod
    def body(cls, texts):
        return {"inputs": texts, "prompt_name": cls.task, "truncate": True}

    @staticmethod
    def answer(data, texts):
        return [x for vectors in data for v in vectors for x in v]

    @classmethod
    def theirs(cls, model_dir: Path, texts):
        from sentence_transformers import MultiVectorEncoder

        encode = getattr(MultiVectorEncoder(str(model_dir), device="cpu").eval(), f"encode_{cls.task}")
        return lambda: [x for t in encode(texts, batch_size=len(texts)) for x in t.flatten().tolist()]


class ColbertQuery(Colbert):
    ours_name = "ours (bench serve /embed_multi, prompt_name query, HTTP)"
    theirs_name = "PyTorch (MultiVectorEncoder.encode_query)"
    task = "query"

    @staticmethod
    def texts(n: int):
        return InferenceFree.texts(n)


TASKS = {"rerank": Rerank, "deberta-rerank": DebertaRerank, "sparse": Sparse, "inference-free": InferenceFree, "decoder-rerank": DecoderRerank,
         "colbert": Colbert, "colbert-query": ColbertQuery}


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(call, warmup: int, n: int):
    """`call`'s latencies in ms after `warmup` calls, and its last answer."""
    times, answer = [], None
    for i in range(warmup + n):
        start = time.perf_counter()
        answer = call()
        if i >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    return times, answer


def ours(task, bench: str, model_dir: Path, threads: int, dtype: str, texts, warmup: int, n: int):
    port = free_port()
    server = subprocess.Popen([bench, "serve", "--model", str(model_dir), "--threads", str(threads), "--port",
                               str(port), "--auto-truncate", "--dtype", dtype],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        server.stdout.readline()  # "listening on ..."
        conn = http.client.HTTPConnection("127.0.0.1", port)
        body = json.dumps(task.body(texts))

        def call():
            conn.request("POST", task.path, body, {"content-type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                raise SystemExit(f"{task.path} answered {resp.status}: {data[:300]!r}")
            return data

        times, data = timed(call, warmup, n)
        return times, task.answer(json.loads(data), texts)
    finally:
        server.terminate()
        server.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=sorted(TASKS), default="rerank")
    ap.add_argument("--bench", default=str(REPO / "target/release/bench"))
    ap.add_argument("--model-dir", help="default: the task's own, under ~/.cache/embedding-workbench/models")
    ap.add_argument("--texts", type=int, default=16, help="passages in the request")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--dtype", default="f32", help="ours: f32 or bf16 (PyTorch runs f32)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    task = TASKS[args.task]
    model_dir = Path(args.model_dir or task.model_dir)
    # A Router's root holds no weights of its own, only modules.json.
    if not any((model_dir / f).is_file() for f in ("model.safetensors", "modules.json")):
        model_dir.mkdir(parents=True, exist_ok=True)
        task.make_model(model_dir)
    texts = getattr(task, "texts", passages)(args.texts)
    import torch

    torch.set_num_threads(args.threads)
    rows, answers = {}, {}
    for name, run in [(task.ours_name, lambda: ours(task, args.bench, model_dir, args.threads, args.dtype, texts,
                                                    args.warmup, args.n)),
                      (task.theirs_name, lambda: timed(task.theirs(model_dir, texts), args.warmup, args.n))]:
        times, answers[name] = run()
        rows[name] = {"p50_ms": pct(times, 0.5), "p90_ms": pct(times, 0.9), "mean_ms": statistics.fmean(times)}
        print(f"{name}: p50 {rows[name]['p50_ms']:.2f} ms, p90 {rows[name]['p90_ms']:.2f} ms over {args.n}")
    a, b = answers[task.ours_name], answers[task.theirs_name]
    worst = max(abs(x - y) for x, y in zip(a, b))
    spread = max(abs(y) for y in b)
    ratio = rows[task.theirs_name]["p50_ms"] / rows[task.ours_name]["p50_ms"]
    active = sum(1 for y in b if y != 0) / args.texts if issubclass(task, Sparse) else None
    print(f"largest difference {worst:.2e} (largest |value| {spread:.3f}); PyTorch p50 / ours p50 = {ratio:.2f}"
          + (f"; {active:.0f} active entries per text" if active is not None else ""))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        out = {"task": args.task, "texts": args.texts, "threads": args.threads, "dtype_ours": args.dtype,
               "n": args.n, "warmup": args.warmup, "worst_difference": worst, "largest_value": spread,
               "pytorch_over_ours_p50": ratio, "rows": rows}
        if active is not None:
            out["active_entries_per_text"] = active
        if issubclass(task, Rerank):
            out["query"] = QUERY
        if issubclass(task, Colbert):
            out["vectors"] = len(a) // 128
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
