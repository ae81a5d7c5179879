#!/usr/bin/env python3
"""Tiny random-weight Qwen3 embedding models and their reference embeddings, for the engine's Qwen3 tests.

Two conventions, each a complete sentence-transformers directory under engine/tests/fixtures/:
  - qwen3_causal: Qwen3-Embedding's (causal attention, last-token pooling, the tokenizer appending
    <|endoftext|>), reference from sentence-transformers itself;
  - qwen3_bidirectional: pplx-embed's (`"is_causal": false` in config.json, full attention, mean pooling),
    reference from transformers' Qwen3Model given an all-visible attention mask, pooled and normalised as
    sentence-transformers' Pooling and Normalize modules do.

The tokenizer is a byte-level BPE of the Qwen2/Qwen3 pipeline (NFC, the Qwen split regex, ByteLevel, BPE merges,
<|endoftext|> appended by the post-processor), trained here with `tokenizers` on the corpora the project ships.
The model has real Qwen3 structure (grouped-query attention, per-head q/k RMSNorm, rotary, SwiGLU) at a tiny
size; weights are seeded random, norms perturbed away from one so every parameter matters.

Writes each directory plus reference.jsonl (text, ids, embedding as base64 little-endian f32).
Needs the peers venv (bash scripts/setup_peers.sh): torch, transformers, sentence-transformers, tokenizers.
Run from the repository root:  ~/.cache/embedding-workbench/peers-venv/bin/python scripts/make_qwen3_fixtures.py
"""
import base64
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3Model

import fixture_texts  # scripts/fixture_texts.py

OUT = Path("engine/tests/fixtures")
MAX_SEQ = 96
# Qwen2/Qwen3's pre-tokenizer pattern, as in their tokenizer.json.
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s+(?!\S)|\s+")
EOS = "<|endoftext|>"


def corpus():
    for name in ["queries_multilingual", "passages_en", "passages_multilingual", "long_docs_en"]:
        for line in open(f"workloads/text/{name}.jsonl", encoding="utf-8"):
            yield json.loads(line)["text"]


def tokenizer():
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    eos = tok.token_to_id(EOS)
    tok.post_processor = processors.TemplateProcessing(single=f"$A {EOS}", special_tokens=[(EOS, eos)])
    tok.enable_truncation(MAX_SEQ)
    return tok


def texts():
    return fixture_texts.sample(20261203)


def make(name, causal, pooling, tok, seed):
    d = OUT / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                         rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, initializer_range=0.2,
                         attn_implementation="eager")
    model = Qwen3Model(config).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.add_(0.3 * torch.randn_like(p))
    model.save_pretrained(d, safe_serialization=True)
    cfg = json.loads((d / "config.json").read_text())
    cfg["is_causal"] = causal
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS).save_pretrained(d)
    (d / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ], indent=2))
    (d / "1_Pooling").mkdir()
    (d / "1_Pooling/config.json").write_text(json.dumps({
        "word_embedding_dimension": 64, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": pooling == "lasttoken", "include_prompt": True}, indent=2))
    (d / "2_Normalize").mkdir()
    (d / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": MAX_SEQ, "do_lower_case": False}))
    for f in ["generation_config.json", "special_tokens_map.json", "chat_template.jinja"]:
        (d / f).unlink(missing_ok=True)

    batch = texts()
    ids = [tok.encode(t).ids for t in batch]
    if causal:
        from sentence_transformers import SentenceTransformer
        st = SentenceTransformer(str(d), device="cpu")
        emb = st.encode(batch, batch_size=1, convert_to_numpy=True)
        st_ids = [st.tokenize([t])["input_ids"][0].tolist() for t in batch]
        assert st_ids == ids, "sentence-transformers tokenized differently"
    else:
        rows = []
        with torch.no_grad():
            for seq in ids:
                x = torch.tensor([seq])
                # A dict mask bypasses Qwen3Model's causal mask: every token sees every other (additive zeros).
                mask = {"full_attention": torch.zeros(1, 1, len(seq), len(seq))}
                h = model(input_ids=x, attention_mask=mask).last_hidden_state[0]
                v = h.mean(0)
                rows.append((v / v.norm().clamp(min=1e-12)).numpy())
        emb = np.stack(rows)
    with open(d / "reference.jsonl", "w", encoding="utf-8") as f:
        for t, i, e in zip(batch, ids, emb):
            b64 = base64.b64encode(struct.pack(f"<{len(e)}f", *e.astype(np.float32))).decode()
            f.write(json.dumps({"text": t, "ids": i, "embedding": b64}, ensure_ascii=False) + "\n")
    print(f"{d}: {len(batch)} texts, vocab {tok.get_vocab_size()}, {sum(len(i) for i in ids)} tokens")


def main():
    torch.set_num_threads(2)
    tok = tokenizer()
    make("qwen3_causal", True, "lasttoken", tok, 1)
    make("qwen3_bidirectional", False, "mean", tok, 2)


if __name__ == "__main__":
    main()
