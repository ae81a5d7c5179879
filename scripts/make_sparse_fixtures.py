"""Sparse (SPLADE) fixtures: random-weight `*ForMaskedLM` checkpoints saved as sentence-transformers SparseEncoder
directories (a Transformer module of task fill-mask, then SpladePooling), with the SparseEncoder's embeddings of the
fixture texts (densified) as the reference.

- bert_splade: BertForMaskedLM (naver/splade-v3's and splade-cocondenser's shape: the MLM head's transform — dense,
  GELU, LayerNorm — then the decoder tied to the word embeddings, which the checkpoint does not hold, and the
  head's bias), SpladePooling max over log(1 + ReLU); a vocabulary of 4,200 rows (the tokenizer's 700 and unused
  ones, as BERT's has), so the engine's projection runs in three blocks of its 2,048, the last one short;
  modules.json in sentence-transformers 5's names (MLMTransformer, `sentence_transformers.sparse_encoder.models`),
  as the Hub's SPLADE models were saved.
- distilbert_splade_log1p: DistilBertForMaskedLM with an untied vocab projector (opensearch-neural-sparse's
  shape), SpladePooling's `log1p_relu` (log(1 + log(1 + ReLU))); sentence-transformers 6's names.
- xlmr_splade: XLMRobertaForMaskedLM (RobertaLMHead: dense, GELU, layer_norm), untied: the decoder's own weight
  and bias (`lm_head.decoder.bias`; the unused `lm_head.bias` random too, so reading it shows); positions after
  the padding id.

- mpnet_splade: MPNetForMaskedLM (MPNetLMHead: dense, GELU, layer_norm, the decoder tied to the word embeddings
  and its bias to `lm_head.bias`), SpladePooling max over log(1 + ReLU).
- modernbert_splade: ModernBertForMaskedLM (ModernBertPredictionHead: `head.dense` with classifier_bias, the
  classifier_activation — GELU's tanh form here —, `head.norm` with norm_bias; the decoder tied to the token
  embeddings with its own bias), a global layer every second and a window of 10, SpladePooling max over
  log(1 + ReLU).
- distilbert_router_splade: an inference-free SPLADE model (opensearch-neural-sparse-encoding-doc-*'s shape): a
  Router whose `document` route (the default) is distilbert_splade_log1p's kind of model and whose `query` route is
  a SparseStaticEmbedding, a weight per vocabulary entry (random here, as IDF weights are; some 0) for each distinct
  token of the query, no special tokens; the document route's reference in reference.jsonl, the query route's
  (`encode_query`) in query_reference.jsonl.

The decoder's bias is drawn well below zero so that most of the vocabulary stays at 0 (ReLU), as a trained
SPLADE model's output is sparse. Needs the peers venv (bash scripts/setup_peers.sh). Run from the repository root
(naming fixtures makes only those):
  ~/.cache/embedding-workbench/peers-venv/bin/python scripts/make_sparse_fixtures.py [NAME ...]
"""
import base64
import json
import shutil
import struct
import sys

import torch
from sentence_transformers import SparseEncoder
from sentence_transformers.base.modules import Router, Transformer
from sentence_transformers.sparse_encoder.modules import SparseStaticEmbedding, SpladePooling
from transformers import (BertConfig, BertForMaskedLM, DistilBertConfig, DistilBertForMaskedLM, ModernBertConfig,
                          ModernBertForMaskedLM, MPNetConfig, MPNetForMaskedLM, PreTrainedTokenizerFast,
                          XLMRobertaConfig, XLMRobertaForMaskedLM)

sys.path.insert(0, "scripts")
import make_encoder_fixtures as enc  # noqa: E402  the tokenizers and texts of the encoder fixtures

MAX_SEQ = 48


def perturb(model, seed, bias_name):
    """Every parameter random, norms around 1; the vocabulary bias far enough below 0 that ReLU zeroes most logits."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            norm = n.lower().endswith("norm.weight")
            p.copy_(torch.randn(p.shape, generator=g) * 0.1 + (1.0 if norm else 0.0))
        params = dict(model.named_parameters())
        # A tied bias is listed under one of its names only.
        bias = params.get(bias_name, params.get(bias_name.replace(".bias", ".decoder.bias")))
        bias.copy_(torch.randn(bias.shape, generator=g) * 0.3 - 1.2)
    return model.eval()


def make(name, model, tok, specials, bias_name, activation, legacy_names, seed):
    d = enc.OUT / name
    shutil.rmtree(d, ignore_errors=True)
    work = enc.OUT / f"{name}_hf"
    shutil.rmtree(work, ignore_errors=True)
    perturb(model, seed, bias_name).save_pretrained(str(work))
    unk = {"unk_token": u for u in ("[UNK]", "<unk>") if tok.token_to_id(u) is not None}
    PreTrainedTokenizerFast(tokenizer_object=tok, **{**unk, **specials}).save_pretrained(str(work))
    transformer = Transformer(str(work), transformer_task="fill-mask", max_seq_length=MAX_SEQ)
    pooling = SpladePooling(pooling_strategy="max", activation_function=activation)
    SparseEncoder(modules=[transformer, pooling], device="cpu").save(str(d))
    shutil.rmtree(work)
    for f in ["special_tokens_map.json", "README.md"]:
        (d / f).unlink(missing_ok=True)
    if legacy_names:
        modules = json.loads((d / "modules.json").read_text())
        for m in modules:
            cls = m["type"].rsplit(".", 1)[1]
            m["type"] = "sentence_transformers.sparse_encoder.models." + ("MLMTransformer" if cls == "Transformer" else cls)
        (d / "modules.json").write_text(json.dumps(modules, indent=2))
    st = SparseEncoder(str(d), device="cpu")
    texts = enc.texts()
    got = st.encode(texts, batch_size=4, convert_to_tensor=True).to_dense()
    active = (got != 0).sum(dim=1).float()
    with open(d / "reference.jsonl", "w", encoding="utf-8") as f:
        for text, row in zip(texts, got):
            ids = st.tokenize([text])["input_ids"][0].tolist()
            b64 = base64.b64encode(struct.pack(f"<{len(row)}f", *row.tolist())).decode()
            f.write(json.dumps({"text": text, "ids": ids, "embedding": b64}, ensure_ascii=False) + "\n")
    print(f"{d}: {len(texts)} texts, vocabulary {got.shape[1]}, active dims {active.min():.0f}..{active.max():.0f} "
          f"(mean {active.mean():.1f})")


def bert_splade():
    tok = enc.bert_tokenizer()
    model = BertForMaskedLM(BertConfig(
        vocab_size=4200, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=64, pad_token_id=tok.token_to_id("[PAD]"),
        attn_implementation="eager"))
    make("bert_splade", model, tok, enc.BERT_SPECIALS, "cls.predictions.bias", "relu", True, 11)


def distilbert_splade_log1p():
    tok = enc.bert_tokenizer()
    model = DistilBertForMaskedLM(DistilBertConfig(
        vocab_size=tok.get_vocab_size(), dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64,
        activation="gelu", pad_token_id=tok.token_to_id("[PAD]"), tie_word_embeddings=False,
        attn_implementation="eager"))
    make("distilbert_splade_log1p", model, tok, enc.BERT_SPECIALS, "vocab_projector.bias", "log1p_relu", False, 12)


def xlmr_splade():
    tok = enc.xlmr_tokenizer()
    model = XLMRobertaForMaskedLM(XLMRobertaConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=MAX_SEQ + 2, type_vocab_size=1,
        pad_token_id=tok.token_to_id("<pad>"), tie_word_embeddings=False, attn_implementation="eager"))
    make("xlmr_splade", model, tok, enc.ROBERTA_SPECIALS, "lm_head.decoder.bias", "relu", False, 13)


def mpnet_splade():
    tok = enc.mpnet_tokenizer()
    model = MPNetForMaskedLM(MPNetConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=MAX_SEQ + 2, pad_token_id=tok.token_to_id("<pad>"),
        attn_implementation="eager"))
    make("mpnet_splade", model, tok, dict(enc.ROBERTA_SPECIALS, unk_token="[UNK]"), "lm_head.bias", "relu", False,
         16)


def modernbert_splade():
    tok = enc.modernbert_tokenizer()
    model = ModernBertForMaskedLM(ModernBertConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, max_position_embeddings=MAX_SEQ, global_attn_every_n_layers=2, local_attention=10,
        pad_token_id=tok.token_to_id("[PAD]"), cls_token_id=tok.token_to_id("[CLS]"),
        sep_token_id=tok.token_to_id("[SEP]"), bos_token_id=tok.token_to_id("[CLS]"),
        eos_token_id=tok.token_to_id("[SEP]"), classifier_bias=True, classifier_activation="gelu_pytorch_tanh",
        norm_bias=True, attn_implementation="eager"))
    make("modernbert_splade", model, tok, enc.MODERNBERT_SPECIALS, "decoder.bias", "relu", False, 17)


def write_reference(path, st, texts, task):
    encode = st.encode_query if task == "query" else st.encode_document
    got = encode(texts, batch_size=4, convert_to_tensor=True).to_dense()
    with open(path, "w", encoding="utf-8") as f:
        for text, row in zip(texts, got):
            ids = st.preprocess([text], task=task)["input_ids"][0].tolist()
            b64 = base64.b64encode(struct.pack(f"<{len(row)}f", *row.tolist())).decode()
            f.write(json.dumps({"text": text, "ids": ids, "embedding": b64}, ensure_ascii=False) + "\n")
    active = (got != 0).sum(dim=1).float()
    print(f"{path}: {len(texts)} texts, active dims {active.min():.0f}..{active.max():.0f} (mean {active.mean():.1f})")


def distilbert_router_splade():
    name = "distilbert_router_splade"
    tok = enc.bert_tokenizer()
    model = DistilBertForMaskedLM(DistilBertConfig(
        vocab_size=tok.get_vocab_size(), dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64,
        activation="gelu", pad_token_id=tok.token_to_id("[PAD]"), tie_word_embeddings=False,
        attn_implementation="eager"))
    d = enc.OUT / name
    shutil.rmtree(d, ignore_errors=True)
    work = enc.OUT / f"{name}_hf"
    shutil.rmtree(work, ignore_errors=True)
    perturb(model, 14, "vocab_projector.bias").save_pretrained(str(work))
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, **enc.BERT_SPECIALS)
    hf_tok.model_max_length = MAX_SEQ
    hf_tok.save_pretrained(str(work))
    transformer = Transformer(str(work), transformer_task="fill-mask", max_seq_length=MAX_SEQ)
    pooling = SpladePooling(pooling_strategy="max", activation_function="log1p_relu")
    g = torch.Generator().manual_seed(15)
    idf = torch.rand(tok.get_vocab_size(), generator=g) * 5.0
    idf[torch.rand(tok.get_vocab_size(), generator=g) < 0.1] = 0.0
    query = SparseStaticEmbedding(tokenizer=transformer.tokenizer, weight=idf, frozen=True)
    router = Router.for_query_document(query_modules=[query], document_modules=[transformer, pooling])
    SparseEncoder(modules=[router], device="cpu").save(str(d))
    shutil.rmtree(work)
    for f in d.rglob("*"):
        if f.name in ("special_tokens_map.json", "README.md"):
            f.unlink()
    st = SparseEncoder(str(d), device="cpu")
    texts = enc.texts()
    write_reference(d / "reference.jsonl", st, texts, "document")
    write_reference(d / "query_reference.jsonl", st, texts, "query")


FIXTURES = [bert_splade, distilbert_splade_log1p, xlmr_splade, mpnet_splade, modernbert_splade,
            distilbert_router_splade]


def main():
    enc.make_named(FIXTURES)


if __name__ == "__main__":
    main()
