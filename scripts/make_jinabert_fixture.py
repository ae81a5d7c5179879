"""Makes engine/tests/fixtures/jinabert_mean: a tiny random-weight JinaBERT (jina-embeddings-v2-small-en's and
-base-en's architecture) with its reference embeddings; and jinabert_qk_mean, the same for Jina's other JinaBERT,
`jinaai/jina-bert-v2-qk-post-norm` (jina-embeddings-v2-base-code's, -de's, -es's, -zh's).

transformers has no JinaBERT (the Hub's models run Jina's remote code, `jinaai/jina-bert-implementation`, which
this machine cannot fetch), so the reference is written out here, small and plain, after that code as
candle-transformers' `jina_bert.rs` and text-embeddings-inference's `jina.rs` mirror it (the slopes are Jina's
function itself, below): BERT's embeddings without a position table (word + token type 0,
LayerNorm); post-norm layers whose attention scores, divided by √d, take symmetric ALiBi (`-slope_h · |i - j|`,
`_get_alibi_head_slopes`) before the softmax; a GeGLU feed-forward: `mlp.gated_layers` without bias, the exact
GELU of its first half times its second half, `mlp.wo`, residual, `mlp.layernorm`. 12 heads (not a power of two:
the slopes' second rule) of width 8. Each text runs alone, so no padding mask is needed; then mean pooling and
Normalize, as sentence-transformers' modules do.

The qk-post-norm variant, after that remote code as text-embeddings-inference's `jina_code.rs` and the JinaBERT
port proposed to transformers mirror it (`JinaBertSelfAttention`, `JinaBertGLUMLP`, `JinaBertLayer`): a LayerNorm on
the projected Q (`attention.self.layer_norm_q`) and one on K (`layer_norm_k`), each over all heads together; the
attention block as BERT's (`attention.output.dense`, residual, `attention.output.LayerNorm`), then
`layer_norm_1(input + that)`; the GeGLU `mlp.up_gated_layer` without bias, its first half times the exact GELU of
its second half, `mlp.down_layer`, residual, `layer_norm_2`.

The sentence-transformers files and the WordPiece tokenizer are nomic_mean's (make_encoder_fixtures.py), with the
pooling width changed; ids are what that tokenizer gives with sentence-transformers' truncation at 64.

Needs the peers venv (bash scripts/setup_peers.sh). Run from the repository root:
  ~/.cache/embedding-workbench/peers-venv/bin/python scripts/make_jinabert_fixture.py
"""
import base64
import json
import math
import shutil
import struct
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import PreTrainedTokenizerFast

sys.path.insert(0, str(Path(__file__).parent))
from make_encoder_fixtures import OUT, texts  # noqa: E402

NAME, QK_NAME = "jinabert_mean", "jinabert_qk_mean"
HIDDEN, HEADS, INTER, LAYERS, MAX_SEQ, EPS = 96, 12, 128, 3, 64, 1e-12


def alibi_slopes(n):
    """jina-bert-implementation's `_get_alibi_head_slopes`."""
    def powers(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return powers(n)
    p = 2 ** math.floor(math.log2(n))
    return powers(p) + alibi_slopes(2 * p)[0::2][: n - p]


def weights(vocab, seed, qk=False):
    torch.manual_seed(seed)
    w = {}

    def add(name, *shape, norm=False):
        w[name] = 0.1 * torch.randn(*shape) + (1.0 if norm else 0.0)

    add("embeddings.word_embeddings.weight", vocab, HIDDEN)
    add("embeddings.token_type_embeddings.weight", 2, HIDDEN)
    add("embeddings.LayerNorm.weight", HIDDEN, norm=True)
    add("embeddings.LayerNorm.bias", HIDDEN)
    for i in range(LAYERS):
        p = f"encoder.layer.{i}"
        for n in ["attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"]:
            add(f"{p}.{n}.weight", HIDDEN, HIDDEN)
            add(f"{p}.{n}.bias", HIDDEN)
        norms = ["attention.output.LayerNorm"]
        norms += ["attention.self.layer_norm_q", "attention.self.layer_norm_k", "layer_norm_1", "layer_norm_2"] \
            if qk else ["mlp.layernorm"]
        for n in norms:
            add(f"{p}.{n}.weight", HIDDEN, norm=True)
            add(f"{p}.{n}.bias", HIDDEN)
        gated, out = ("mlp.up_gated_layer", "mlp.down_layer") if qk else ("mlp.gated_layers", "mlp.wo")
        add(f"{p}.{gated}.weight", 2 * INTER, HIDDEN)
        add(f"{p}.{out}.weight", HIDDEN, INTER)
        add(f"{p}.{out}.bias", HIDDEN)
    return w


def forward(w, ids, qk=False):
    """One sequence's last hidden states, [tokens, HIDDEN]."""
    t, d = len(ids), HIDDEN // HEADS
    ln = lambda x, n: F.layer_norm(x, (HIDDEN,), w[f"{n}.weight"], w[f"{n}.bias"], EPS)
    lin = lambda x, n: F.linear(x, w[f"{n}.weight"], w.get(f"{n}.bias"))
    x = w["embeddings.word_embeddings.weight"][torch.tensor(ids)] + w["embeddings.token_type_embeddings.weight"][0]
    x = ln(x, "embeddings.LayerNorm")
    pos = torch.arange(t)
    distance = (pos[None, :] - pos[:, None]).abs()
    alibi = (torch.tensor(alibi_slopes(HEADS)) * -1)[:, None, None] * distance  # [heads, t, t], f32
    for i in range(LAYERS):
        p = f"encoder.layer.{i}"
        proj = lambda n: lin(x, f"{p}.attention.self.{n}")
        qk_norm = (lambda y, n: ln(y, f"{p}.attention.self.layer_norm_{n}")) if qk else (lambda y, n: y)
        heads = lambda y: y.view(t, HEADS, d).transpose(0, 1)
        q, k, v = heads(qk_norm(proj("query"), "q")), heads(qk_norm(proj("key"), "k")), heads(proj("value"))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        ctx = (torch.softmax(scores + alibi, dim=-1) @ v).transpose(0, 1).reshape(t, HIDDEN)
        attended = ln(lin(ctx, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
        if qk:
            x = ln(x + attended, f"{p}.layer_norm_1")
            g = lin(x, f"{p}.mlp.up_gated_layer")
            h = g[:, :INTER] * F.gelu(g[:, INTER:])
            x = ln(x + lin(h, f"{p}.mlp.down_layer"), f"{p}.layer_norm_2")
        else:
            x = attended
            g = lin(x, f"{p}.mlp.gated_layers")
            h = F.gelu(g[:, :INTER]) * g[:, INTER:]
            x = ln(lin(h, f"{p}.mlp.wo") + x, f"{p}.mlp.layernorm")
    return x


def make(name, qk, seed):
    d = OUT / name
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(OUT / "nomic_mean", d)
    (d / "model.safetensors").unlink()
    (d / "reference.jsonl").unlink()
    pooling = d / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({**json.loads(pooling.read_text()), "embedding_dimension": HIDDEN}, indent=4))
    tok = PreTrainedTokenizerFast.from_pretrained(str(d))
    remote = "jinaai/jina-bert-v2-qk-post-norm" if qk else "jinaai/jina-bert-implementation"
    config = {
        "architectures": ["JinaBertForMaskedLM"], "model_type": "bert",
        "auto_map": {"AutoConfig": f"{remote}--configuration_bert.JinaBertConfig",
                     "AutoModel": f"{remote}--modeling_bert.JinaBertModel"},
        "vocab_size": len(tok), "hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "intermediate_size": INTER, "hidden_act": "gelu", "max_position_embeddings": MAX_SEQ, "type_vocab_size": 2,
        "layer_norm_eps": EPS, "pad_token_id": tok.pad_token_id, "position_embedding_type": "alibi",
        "feed_forward_type": "geglu", "emb_pooler": "mean", "attn_implementation": None,
    }
    (d / "config.json").write_text(json.dumps(config, indent=2))
    w = weights(len(tok), seed, qk)
    save_file({k: v.contiguous() for k, v in w.items()}, d / "model.safetensors", metadata={"format": "pt"})
    batch = texts()
    with torch.no_grad(), open(d / "reference.jsonl", "w", encoding="utf-8") as f:
        for text in batch:
            ids = tok(text, truncation=True, max_length=MAX_SEQ)["input_ids"]
            e = F.normalize(forward(w, ids, qk).mean(dim=0), dim=0)
            b64 = base64.b64encode(struct.pack(f"<{len(e)}f", *e.tolist())).decode()
            f.write(json.dumps({"text": text, "ids": ids, "embedding": b64}, ensure_ascii=False) + "\n")
    lengths = [len(tok(t, truncation=True, max_length=MAX_SEQ)["input_ids"]) for t in batch]
    assert MAX_SEQ in lengths, "no text reaches max_seq_length"
    print(f"{d}: {len(batch)} texts, {sum(lengths)} tokens")


def main():
    torch.set_num_threads(2)
    only = set(sys.argv[1:])  # names to make; all when none are given
    for name, qk, seed in [(NAME, False, 26), (QK_NAME, True, 28)]:
        if not only or name in only:
            make(name, qk, seed)


if __name__ == "__main__":
    main()
