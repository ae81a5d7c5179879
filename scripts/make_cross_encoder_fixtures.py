"""Cross-encoder fixtures: random-weight `*ForSequenceClassification` checkpoints saved as bare transformers
directories (as the Hub's ms-marco cross-encoders and bge-rerankers are), with sentence-transformers' CrossEncoder
scores of query/passage pairs as the reference.

- bert_cross_encoder: BertForSequenceClassification, one label, token types (BertProcessing: `[CLS] A [SEP]` of
  type 0, `B [SEP]` of type 1), the pooler's tanh then the classifier; type 1's row perturbed far from type 0's.
- xlmr_cross_encoder: XLMRobertaForSequenceClassification, one label, one token type (`<s> A </s></s> B </s>`),
  RobertaClassificationHead; its tokenizer returns no token_type_ids, as XLMRobertaTokenizer.
- distilbert_nli: DistilBertForSequenceClassification, three named labels (pre_classifier with ReLU).
- electra_cross_encoder: ElectraForSequenceClassification (cross-encoder/ms-marco-electra-base's shape), one label,
  token types, embeddings narrower than the layers (`embeddings_project`), ElectraClassificationHead's exact GELU.
- modernbert_cross_encoder: ModernBertForSequenceClassification (gte-reranker-modernbert-base's shape), one label,
  the tokens' mean (`classifier_pooling: mean`) through ModernBertPredictionHead (dense without bias, GELU, a
  LayerNorm without bias), then the classifier; ModernBERT's byte-level BPE with a pair template.
- gte_reranker: GteForSequenceClassification (Alibaba-NLP/gte-multilingual-reranker-base's shape): GTE's rotary
  post-norm layers, one token type, XLM-R's tokenizer and pair template, GtePooler's tanh over the first token then
  the classifier; gte_reranker_new is the same checkpoint in Alibaba's remote-code layout (`new.` tensor names,
  NewForSequenceClassification, NewModel's config keys), scored against gte_reranker's reference.
- deberta_nli: DebertaV2ForSequenceClassification (cross-encoder/nli-deberta-v3-*'s and mxbai-rerank-*-v1's shape):
  DeBERTa v3's disentangled attention over log-bucketed relative positions, no token types (the tokenizer's
  type ids ignored), three named labels, ContextPooler's GELU then the classifier; DeBERTa v3's tokenizer pipeline
  (`[CLS] A [SEP] B [SEP]`).

max length 40, so longest-first truncation cuts the passage alone, or both texts, in some pairs. Writes each
directory plus reference.jsonl (query, passage, ids as the CrossEncoder tokenizes the pair, type1_from where the
token types turn to 1, logits as base64 little-endian f32). Needs the peers venv (bash scripts/setup_peers.sh).
Run from the repository root (naming fixtures makes only those):
  ~/.cache/embedding-workbench/peers-venv/bin/python scripts/make_cross_encoder_fixtures.py [NAME ...]
"""
import base64
import json
import shutil
import struct
import sys

import torch
from safetensors.torch import load_file, save_file
from sentence_transformers import CrossEncoder
from tokenizers import processors
from transformers import (BertConfig, BertForSequenceClassification, DebertaV2Config,
                          DebertaV2ForSequenceClassification, DistilBertConfig, GteConfig, GteForSequenceClassification,
                          DistilBertForSequenceClassification, ElectraConfig, ElectraForSequenceClassification,
                          ModernBertConfig, ModernBertForSequenceClassification, PreTrainedTokenizerFast,
                          XLMRobertaConfig, XLMRobertaForSequenceClassification)

sys.path.insert(0, "scripts")
import make_encoder_fixtures as enc  # noqa: E402  the tokenizers and texts of the encoder fixtures

MAX_LEN = 40


def perturb(model, seed):
    """Every parameter random (the classifier's too), so reading a wrong row, layer or activation shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval()


def pairs():
    texts = enc.texts()
    out = []
    for i in range(len(texts) - 1):
        q, p = texts[i], texts[i + 1]
        # Short queries against long passages; every few pairs the other way round (the query then cut too).
        q, p = (q[:60], p) if i % 3 else (q, p[:50])
        # transformers reads an empty second text as none (a single text, not a pair); a server refuses empty
        # inputs, so the fixture has none.
        if q and p:
            out.append((q, p))
    return out


def make(name, model, tok, specials, model_input_names, seed):
    d = enc.OUT / name
    shutil.rmtree(d, ignore_errors=True)
    perturb(model, seed).save_pretrained(str(d))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=MAX_LEN,
                                   model_input_names=model_input_names, **specials)
    fast.save_pretrained(str(d))
    for f in ["special_tokens_map.json"]:
        (d / f).unlink(missing_ok=True)
    ce = CrossEncoder(str(d), device="cpu", max_length=MAX_LEN)
    batch = pairs()
    logits = ce.predict(batch, batch_size=4, activation_fn=torch.nn.Identity(), convert_to_numpy=True)
    rows = []
    for (q, p), row in zip(batch, logits):
        feats = ce.tokenizer(q, p, truncation=True, max_length=MAX_LEN)
        ids = feats["input_ids"]
        types = feats.get("token_type_ids") or [0] * len(ids)
        rows.append((q, p, ids, next((i for i, t in enumerate(types) if t), None), row))
    typed = sum(r[3] is not None for r in rows)
    cut = write_reference(d, rows, MAX_LEN)
    print(f"{d}: {len(batch)} pairs, {cut} at the limit, {typed} with type-1 tokens, {logits.shape[-1] if logits.ndim > 1 else 1} labels")


def write_reference(d, rows, max_len):
    """reference.jsonl of (query, passage, ids, type1_from, logits) rows; asserts more than 3 reach `max_len`."""
    cut = 0
    with open(d / "reference.jsonl", "w", encoding="utf-8") as f:
        for q, p, ids, from_, row in rows:
            cut += len(ids) == max_len
            row = row.reshape(-1)
            b64 = base64.b64encode(struct.pack(f"<{len(row)}f", *row.tolist())).decode()
            f.write(json.dumps({"query": q, "passage": p, "ids": ids, "type1_from": from_, "logits": b64},
                               ensure_ascii=False) + "\n")
    assert cut > 3, f"{d.name}: only {cut} pairs reach the limit"
    return cut


BERT_INPUTS = ["input_ids", "token_type_ids", "attention_mask"]


def bert_cross_encoder():
    tok = enc.bert_tokenizer()
    model = BertForSequenceClassification(BertConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=64, num_labels=1, attn_implementation="eager"))
    make("bert_cross_encoder", model, tok, enc.BERT_SPECIALS, BERT_INPUTS, 1)


def xlmr_cross_encoder():
    tok = enc.xlmr_tokenizer()
    model = XLMRobertaForSequenceClassification(XLMRobertaConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=MAX_LEN + 2, type_vocab_size=1, num_labels=1,
        pad_token_id=tok.token_to_id("<pad>"), attn_implementation="eager"))
    make("xlmr_cross_encoder", model, tok, enc.ROBERTA_SPECIALS, ["input_ids", "attention_mask"], 2)


def distilbert_nli():
    tok = enc.bert_tokenizer()
    labels = ["contradiction", "entailment", "neutral"]
    model = DistilBertForSequenceClassification(DistilBertConfig(
        vocab_size=tok.get_vocab_size(), dim=64, n_layers=2, n_heads=4, hidden_dim=128,
        max_position_embeddings=64, activation="gelu", num_labels=3, id2label=dict(enumerate(labels)),
        label2id={l: i for i, l in enumerate(labels)}, attn_implementation="eager"))
    make("distilbert_nli", model, tok, enc.BERT_SPECIALS, ["input_ids", "attention_mask"], 3)


def electra_cross_encoder():
    tok = enc.bert_tokenizer()
    model = ElectraForSequenceClassification(ElectraConfig(
        vocab_size=tok.get_vocab_size(), embedding_size=32, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=128, max_position_embeddings=64, num_labels=1,
        attn_implementation="eager"))
    make("electra_cross_encoder", model, tok, enc.BERT_SPECIALS, BERT_INPUTS, 4)


def modernbert_cross_encoder():
    tok = enc.modernbert_tokenizer()
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    model = ModernBertForSequenceClassification(ModernBertConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, max_position_embeddings=64, pad_token_id=tok.token_to_id("[PAD]"), cls_token_id=cls,
        sep_token_id=sep, bos_token_id=cls, eos_token_id=sep, classifier_pooling="mean", num_labels=1,
        attn_implementation="eager"))
    make("modernbert_cross_encoder", model, tok, enc.MODERNBERT_SPECIALS, ["input_ids", "attention_mask"], 5)


def deberta_nli():
    tok = enc.deberta_tokenizer()
    labels = ["contradiction", "entailment", "neutral"]
    model = DebertaV2ForSequenceClassification(DebertaV2Config(
        vocab_size=tok.get_vocab_size(), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=512, relative_attention=True, position_buckets=8,
        max_relative_positions=24, pos_att_type=["p2c", "c2p"], share_att_key=True, norm_rel_ebd="layer_norm",
        position_biased_input=False, type_vocab_size=0, pad_token_id=tok.token_to_id("[PAD]"), num_labels=3,
        id2label=dict(enumerate(labels)), label2id={l: i for i, l in enumerate(labels)}))
    make("deberta_nli", model, tok, enc.BERT_SPECIALS, BERT_INPUTS, 6)


def gte_reranker():
    tok = enc.xlmr_tokenizer()
    model = GteForSequenceClassification(GteConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
        intermediate_size=96, max_position_embeddings=MAX_LEN, type_vocab_size=1,
        rope_parameters={"rope_theta": 2e4, "rope_type": "default"}, pad_token_id=tok.token_to_id("<pad>"),
        num_labels=1, attn_implementation="eager"))
    make("gte_reranker", model, tok, enc.ROBERTA_SPECIALS, ["input_ids", "attention_mask"], 7)
    # The same checkpoint as Alibaba's remote code saves it (gte-multilingual-reranker-base's layout): `new.`
    # before the encoder's tensors, its NewModel config keys; scored against gte_reranker's reference.
    src, dst = enc.OUT / "gte_reranker", enc.OUT / "gte_reranker_new"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    (dst / "reference.jsonl").unlink()
    tensors = load_file(str(dst / "model.safetensors"))
    renamed = {("new." + k[len("gte."):] if k.startswith("gte.") else k): v for k, v in tensors.items()}
    assert "new.pooler.dense.weight" in renamed and "classifier.weight" in renamed, sorted(renamed)
    save_file(renamed, str(dst / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((dst / "config.json").read_text())
    del config["rope_parameters"]
    config.update(model_type="new", architectures=["NewForSequenceClassification"], rope_theta=2e4,
                  rope_scaling=None, layer_norm_type="layer_norm", position_embedding_type="rope",
                  logn_attention_scale=False, pack_qkv=True)
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    print(f"{dst}: {len(renamed)} tensors renamed from {src.name}")


FIXTURES = [bert_cross_encoder, xlmr_cross_encoder, distilbert_nli, electra_cross_encoder, modernbert_cross_encoder,
            deberta_nli, gte_reranker]


def main():
    enc.make_named(FIXTURES)


if __name__ == "__main__":
    main()
