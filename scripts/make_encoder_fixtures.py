#!/usr/bin/env python3
"""Tiny random-weight models beyond BERT (encoders and decoders), and their sentence-transformers embeddings.

Complete sentence-transformers directories under engine/tests/fixtures/:
  - xlmr_mean: XLMRobertaModel (multilingual-e5's and paraphrase-multilingual's family) with the shipped
    XLM-R-style Unigram tokenizer (workloads/vocab/xlmr_style_unigram_1k_tokenizer.json) given XLM-R's special
    tokens (`<s> <pad> </s> <unk>`, and `<mask>` taking in the whitespace before it), mean pooling, Normalize;
  - roberta_cls: RobertaModel with a byte-level BPE of RoBERTa's pipeline (ByteLevel pre-tokenizer, RobertaProcessing
    post-processor, the same special tokens), trained here on the shipped corpora, CLS pooling, no Normalize;
  - mpnet_mean: MPNetModel (all-mpnet-base-v2's architecture: RoBERTa's positions, no token types, a relative
    position bias on every attention score) with a WordPiece of MPNet's pipeline (BERT's normaliser and
    pre-tokeniser, `<s> $A </s>`), mean pooling, Normalize, and sequences of up to 160 tokens, so that distances past
    MPNet's 128 (its last, capped bucket) occur. Also writes mpnet_mean/buckets.json: transformers' own
    relative_position_bucket for every distance from -300 to 300;
  - distilbert_mean: DistilBertModel (msmarco-distilbert's and multi-qa-distilbert's) with a WordPiece of BERT's
    special tokens and its own post-processor (BertProcessing), mean pooling, no Normalize;
  - modernbert_mean: ModernBertModel (gte-modernbert's, modernbert-embed's, granite-embedding r2's) with a
    byte-level BPE of ModernBERT's pipeline (NFC, ByteLevel pre-tokenizer, `[CLS] $A [SEP]`, `[MASK]` taking in the
    whitespace before it, runs of spaces as added tokens matched on normalised text), mean pooling, Normalize; no biases (ModernBERT's default), a global layer every third,
    local layers seeing 8 tokens either side, so sequences of up to 96 tokens run well past the window;
  - bert_dense_cls: BertModel with the WordPiece of distilbert_mean, CLS pooling, a Dense module (tanh, with bias,
    64 to 64) and Normalize: LaBSE's head;
  - distilbert_dense_mean: DistilBertModel, mean pooling, two Dense modules without bias or activation (64 to 256
    to 48) and Normalize: EmbeddingGemma's head, the embedding narrower than the hidden states;
  - gemma3_mean: Gemma3TextModel as EmbeddingGemma uses it (bidirectional attention, global and sliding-window
    layers with their rotary bases, four norms a layer, a score scale other than the head width's, GeGLU with
    GELU's tanh approximation), with a tokenizer of Gemma's pipeline (SentencePiece-style BPE over '▁'-joined
    text, byte fallback, `<bos> $A <eos>`: the in-house tokenizer refuses it, the engine's default then reads it
    with the tokenizers crate), mean pooling, EmbeddingGemma's two Dense modules (64 to 128 to 64) and Normalize;
  - modernbert_cls: modernbert_mean's model with every bias (norm_bias, attention_bias, mlp_bias), a global layer every second,
    other rotary bases, a window of 5 either side, CLS pooling, no Normalize;
  - llama_last: LlamaModel (LLM2Vec's and NV-Retriever's backbone) with every bias (attention_bias, mlp_bias),
    grouped-query attention, a tokenizer of Llama's pipeline (SentencePiece-style BPE with '▁' prepended, byte
    fallback, `<s> $A </s>` as e5-mistral's appends its end token), last-token pooling, Normalize;
  - mistral_last: MistralModel (e5-mistral's, SFR-Embedding's) with a head width other than hidden / heads, one
    K/V head and a sliding window of 8 on every layer, the same tokenizer, last-token pooling, no Normalize;
  - qwen2_dense_mean: Qwen2Model (gte-Qwen2's, stella_en_1.5B's) with its Q/K/V biases, sliding-window layers from
    max_window_layers on, the Qwen-style byte-level BPE of make_qwen3_fixtures.py, mean pooling and stella's head
    (a Dense module with bias, 64 to 32, Normalize);
  - qwen3_window_mean: Qwen3Model with `is_causal: false` (transformers 5's bidirectional switch) and
    sliding-window layers from layer_types (seeing |i - j| <= 6), mean pooling, no Normalize;
  - t5_gated_mean: T5EncoderModel as sentence-t5 and GTR (T5 v1.1's gated tanh-GELU feed-forward, heads of 24
    columns, 16 relative-position buckets up to distance 40, so that 96-token texts reach the last), with T5's
    pipeline on the shipped Unigram (`$A </s>`), mean pooling, a Dense module without bias (64 to 64) and Normalize:
    sentence-t5's head; also its buckets.json (transformers' T5Attention._relative_position_bucket);
  - t5_relu_cls: the same with T5 v1.0's ReLU feed-forward and the default 32 buckets up to 128, CLS pooling, no
    Normalize;
  - bert_max: BertModel with the WordPiece of distilbert_mean, max pooling (Sentence-BERT's NLI max-tokens models),
    no Normalize;
  - distilbert_mean_sqrt: DistilBertModel, mean_sqrt_len_tokens pooling, no Normalize (which would hide the scale);
  - llama_weightedmean: llama_last's LlamaModel (causal), position-weighted mean pooling (SGPT's weightedmean),
    Normalize;
  - nomic_mean: NomicBertModel (nomic-embed-text-v1/v1.5: post-norm BERT layers, rotary on Q and K at a base of its
    own, SwiGLU, token types, no position embeddings) as transformers 5 saves it (contrastors' tensor names, as the
    Hub's checkpoints: fused `attn.Wqkv`, `mlp.fc11` up / `fc12` gate, `norm1`, `norm2`, `emb_ln`; transformers'
    config keys), with the WordPiece of distilbert_mean, mean pooling, Normalize;
  - nomic_renamed_mean: the same model under the tensor names transformers gives it in memory, with contrastors'
    config keys alone (`n_embd`, `rotary_emb_base`, `activation_function: swiglu`, ...): the other naming of each;
  - gte_cls: GteModel (gte-multilingual-base's: nomic_mean's network with GeGLU and Q/K/V,
    output and down-projection biases) as transformers 5 saves it, one token type, CLS pooling, Normalize;
  - gte_ntk_cls: GteModel as the Hub's gte-base-en-v1.5 is (Alibaba's NewModel config: `model_type: new`, no token
    types, `rope_scaling: {type: ntk, factor: 2}`), CLS pooling, no Normalize. Alibaba's fixed NTK scaling (vLLM's
    NTKScalingRotaryEmbedding) gives frequencies (θ s)^(-2i/d) s^(-2/d): the reference runs transformers' `linear`
    rope type with base θ s and factor s^(2/d), the same frequencies, and the config written is the NewModel one;
  - jina_v3_mean: JinaEmbeddingsV3Model (jina-embeddings-v3-hf: XLM-R's embeddings without positions, post-norm
    layers with rotary on Q and K, BERT's GELU MLP, every bias) as transformers 5 saves it (the Hub's names: fused
    `mixer.Wqkv`, `mixer.out_proj`, `mlp.fc1`, `norm1`, `emb_ln`), with xlmr_mean's Unigram, mean pooling,
    Normalize;
  - jina_v3_renamed_mean: the same model under the tensor names transformers gives it in memory;
  - eurobert_mean: EuroBertModel (Llama's layers, bidirectional; grouped K/V heads, attention and MLP biases) with
    llama_last's tokenizer, mean pooling, Normalize; config.json without `rms_norm_eps`, so that EuroBERT's own
    default (1e-5, not Llama's 1e-6) is the one read;
  - llama3_rope_last: llama_last's LlamaModel with Llama 3.1's rotary scaling (`llama3`, factor 8 over a pretraining
    length of 32), written in transformers 4's keys as the Hub's Llama 3.x files are (`rope_scaling` beside
    `rope_theta`), last-token pooling, Normalize;
  - gemma3_linear_mean: gemma3_mean's model with Gemma 3 4B's rotary (global layers scaled linearly by 8, local
    ones plain; every second layer global, its base 2e3), in transformers 4's keys (`rope_scaling` for the global layers only), mean pooling, Normalize;
  - qwen3_yarn_last: Qwen3Model (causal) with YaRN (factor 4 over 24 positions) in transformers 5's
    `rope_parameters`, last-token pooling, Normalize;
  - bert_six_modes: bert_max's BertModel with all six pooling modes concatenated, in an order of their own
    (weightedmean, lasttoken, cls, mean_sqrt_len_tokens, max, mean: 384 columns), `include_prompt: false` and a
    prompt `query` (INSTRUCTOR's kind of instruction), no Normalize (which would hide each block's scale); besides
    reference.jsonl (no prompt: every token pooled), reference_query.jsonl: each text encoded with
    `prompt_name="query"`, whose tokens sentence-transformers leaves out of every mode (ids: the templated text's);
  - distilbert_cls_mean_dense: DistilBertModel with CLS and mean pooling concatenated, written in sentence-transformers
    < 6's flags (`pooling_mode_cls_token`, `pooling_mode_mean_tokens`), a tanh Dense module with bias from their 128
    columns to 48, Normalize;
  - albert_mean: AlbertModel (paraphrase-albert-small-v2's): embeddings 32 wide projected to the layers' 64, five
    layers sharing two groups of two layers' weights (layers 0-2 run group 0, 3-4 group 1, each group's two layers
    in turn), GELU's tanh approximation (`gelu_new`), with a Unigram of ALBERT's pipeline (transformers'
    AlbertTokenizer: `` and '' as ", NFKD, accents stripped, lowercase; whitespace split then Metaspace;
    `[CLS] $A [SEP]`, `[MASK]` taking in the whitespace before it), mean pooling, Normalize;
  - electra_mean: ElectraModel (BERT's layers behind embeddings 32 wide and `embeddings_project` to 64) with
    bert_mean's WordPiece, mean pooling, no Normalize;
  - deberta_mean: DebertaV2Model in DeBERTa v3's shape (disentangled attention: each score also takes the query
    against its key's relative position and the key against the query's, log-bucketed, 8 buckets over 24 positions;
    the relative embeddings normed; no absolute positions, no token types), DeBERTa v3's tokenizer pipeline
    (deberta_tokenizer: Strip, the charsmap, runs of spaces to one, Metaspace, `[CLS] $A [SEP]`) over the shipped
    Unigram, mean pooling, Normalize; checked here to embed far from itself without relative attention. Also writes
    deberta_mean/buckets.json: make_log_bucket_position at v3's 256 buckets over 512 positions;
  - deberta_v2_cls: DeBERTa v2's shape (relative positions clamped at 16, their own projections, absolute
    positions and token types, embeddings 32 wide projected to 64 then normed; `pos_att_type` as a string), CLS
    pooling, no Normalize;
  - gemma2_last: Gemma2Model as bge-multilingual-gemma2 uses it (causal; every other layer within a window of 16;
    no q/k norms; four norms a layer; one rotary base, in transformers 5's flat `rope_parameters`; a score scale
    other than the head width's; GeGLU with GELU's tanh approximation; transformers' eager attention, the scores
    soft-capped, here at 1.5 so that the cap bends most of them) with gemma3_mean's tokenizer, last-token pooling
    (its `<eos>`), Normalize.
  Each scaled fixture is checked here to embed far from the same directory without its scaling, and gemma2_last
  without its soft cap.

The first three number positions as RoBERTa does (from pad_token_id + 1, a `<pad>` inside a text taking the padding row and
not advancing the count), so the texts include `<pad>`, `<mask>` and `<s>` among runs of whitespace, and texts
past max_seq_length. Weights are seeded random, every row of every table (the padding rows too) perturbed so that
reading a wrong row shows.

The WordPiece trainer breaks ties between equally frequent pieces in hash order, so a rerun may give mpnet_mean
and distilbert_mean another vocabulary; a run's files (tokenizer, ids, embeddings) always agree among themselves,
which is what the tests need. The other two come out byte for byte the same.

Writes each directory plus reference.jsonl (text, ids as sentence-transformers tokenizes them, embedding as base64
little-endian f32). Needs the peers venv (bash scripts/setup_peers.sh). Run from the repository root:
  ~/.cache/embedding-workbench/peers-venv/bin/python scripts/make_encoder_fixtures.py
"""
import base64
import json
import shutil
import struct
from pathlib import Path

import torch
from sentence_transformers import SentenceTransformer, models
from tokenizers import (AddedToken, Tokenizer, decoders, models as tok_models, normalizers, pre_tokenizers, processors,
                        trainers)
import sys

from transformers import (AlbertConfig, AlbertModel, BertConfig, BertModel, DebertaV2Config, DebertaV2Model,
                          DistilBertConfig, ElectraConfig, ElectraModel, DistilBertModel, Gemma2Config, Gemma2Model, Gemma3TextConfig, GteConfig, GteModel,
                          Gemma3TextModel, LlamaConfig, LlamaModel, MistralConfig, MistralModel, ModernBertConfig,
                          ModernBertModel, MPNetConfig, MPNetModel, NomicBertConfig, NomicBertModel,
                          JinaEmbeddingsV3Config, JinaEmbeddingsV3Model, EuroBertConfig, EuroBertModel,
                          PreTrainedTokenizerFast, Qwen2Config, Qwen2Model,
                          Qwen3Config, Qwen3Model, RobertaConfig, RobertaModel, T5Config, T5EncoderModel,
                          XLMRobertaConfig, XLMRobertaModel)
from transformers.models.t5.modeling_t5 import T5Attention
from transformers.models.mpnet.modeling_mpnet import MPNetEncoder
from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

import fixture_texts  # scripts/fixture_texts.py
import make_bpe_vocabs  # scripts/make_bpe_vocabs.py: SentencePiece BPE's byte pieces
import make_qwen3_fixtures  # scripts/make_qwen3_fixtures.py: the Qwen-style tokenizer

OUT = Path("engine/tests/fixtures")
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def corpus():
    for name in ["queries_multilingual", "passages_en", "passages_multilingual", "long_docs_en"]:
        for line in open(f"workloads/text/{name}.jsonl", encoding="utf-8"):
            yield json.loads(line)["text"]


def with_specials(tok):
    """XLM-R's and RoBERTa's added tokens: `<mask>` strips the whitespace before it (lstrip)."""
    tok.add_special_tokens(SPECIALS)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False, special=True)])
    return tok


def xlmr_tokenizer():
    tok = with_specials(Tokenizer.from_file("workloads/vocab/xlmr_style_unigram_1k_tokenizer.json"))
    return tok


def deberta_tokenizer():
    """DeBERTa v3's pipeline as transformers' DebertaV2Converter writes it, on the shipped Unigram: its first four
    pieces renamed [PAD] [CLS] [SEP] [UNK] (v3's spm ids 0-3) and [MASK] added; Strip, the precompiled charsmap, runs
    of spaces to one; Metaspace; `[CLS] $A [SEP]` and `[CLS] $A [SEP] $B:1 [SEP]:1`."""
    spec = json.loads(Path("workloads/vocab/xlmr_style_unigram_1k_tokenizer.json").read_text(encoding="utf-8"))
    names = ["[PAD]", "[CLS]", "[SEP]", "[UNK]"]
    for i, name in enumerate(names):
        spec["model"]["vocab"][i][0] = name
    spec["model"]["unk_id"] = 3
    spec["added_tokens"] = []
    charsmap = next(n for n in spec["normalizer"]["normalizers"] if n["type"] == "Precompiled")
    spec["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Strip", "strip_left": True, "strip_right": True}, charsmap,
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}]}
    spec["post_processor"] = None
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.add_special_tokens(names)
    tok.add_special_tokens([AddedToken("[MASK]", normalized=False, special=True)])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok


def t5_tokenizer():
    """T5's pipeline on the shipped Unigram: Metaspace, `$A </s>` (no start token), `<pad>` `</s>` `<unk>`."""
    tok = Tokenizer.from_file("workloads/vocab/xlmr_style_unigram_1k_tokenizer.json")
    tok.add_special_tokens(["<pad>", "</s>", "<unk>"])
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[
        ("</s>", tok.token_to_id("</s>"))])
    return tok


T5_SPECIALS = dict(eos_token="</s>", pad_token="<pad>")


def t5(**extra):
    """T5's encoder (T5EncoderModel), 3 blocks of 4 heads 24 wide (96, not d_model's 64); `extra`: the feed-forward
    and the relative position buckets."""
    def build(tok, max_seq):
        config = T5Config(vocab_size=tok.get_vocab_size(), d_model=64, d_kv=24, d_ff=96, num_layers=3, num_heads=4,
                          pad_token_id=tok.token_to_id("<pad>"), eos_token_id=tok.token_to_id("</s>"),
                          attn_implementation="eager", **extra)
        return T5EncoderModel(config).eval()
    return build


def write_buckets(name, bucket_fn, num_buckets, max_distance):
    """transformers' own bucket of every distance from -300 to 300, for the engine's unit test."""
    distances = torch.arange(-300, 301)
    buckets = bucket_fn(distances, num_buckets, max_distance).tolist()
    (OUT / name / "buckets.json").write_text(json.dumps({"num_buckets": num_buckets, "max_distance": max_distance,
                                                         "distances": distances.tolist(), "buckets": buckets}))


def byte_level_bpe(specials):
    tok = Tokenizer(tok_models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    return tok


def roberta_tokenizer():
    tok = with_specials(byte_level_bpe(SPECIALS + ["<mask>"]))
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
                                                      trim_offsets=True, add_prefix_space=False)
    return tok


def wordpiece(specials, mask):
    """A WordPiece of BERT's pipeline (normaliser, pre-tokeniser), `specials` first in its vocabulary and added,
    `mask` added taking in the whitespace before it."""
    tok = Tokenizer(tok_models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=700, limit_alphabet=300, special_tokens=specials + [mask],
                                        show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    tok.add_special_tokens(specials)
    tok.add_special_tokens([AddedToken(mask, lstrip=True, rstrip=False, normalized=False, special=True)])
    tok.decoder = decoders.WordPiece()
    return tok


def mpnet_tokenizer():
    tok = wordpiece(["<s>", "<pad>", "</s>", "[UNK]"], "<mask>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[
        ("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))])
    return tok


def bert_tokenizer():
    """BERT's special tokens and its own post-processor (BertProcessing), as older BERT tokenizer.json files have."""
    tok = wordpiece(["[PAD]", "[UNK]", "[CLS]", "[SEP]"], "[MASK]")
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    return tok


def albert_tokenizer(vocab_size=1000):
    """ALBERT's pipeline as transformers' AlbertTokenizer builds it, on a Unigram trained here."""
    tok = Tokenizer(tok_models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Replace("``", '"'), normalizers.Replace("''", '"'),
                                           normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    specials = ["<pad>", "<unk>", "[CLS]", "[SEP]"]
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials + ["[MASK]"], unk_token="<unk>",
                                      show_progress=False)
    # English only (every character of the multilingual corpora would not fit the vocabulary): the rest is `<unk>`.
    english = (json.loads(line)["text"] for name in ["passages_en", "long_docs_en"]
               for line in open(f"workloads/text/{name}.jsonl", encoding="utf-8"))
    tok.train_from_iterator(english, trainer)
    tok.add_special_tokens(specials)
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=False, normalized=False, special=True)])
    tok.post_processor = processors.TemplateProcessing(single="[CLS]:0 $A:0 [SEP]:0", special_tokens=[
        ("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return tok


ALBERT_SPECIALS = dict(pad_token="<pad>", unk_token="<unk>", cls_token="[CLS]", sep_token="[SEP]",
                       mask_token="[MASK]")


def modernbert_tokenizer():
    """ModernBERT's pipeline (its OLMo / GPT-NeoX tokenizer's): byte-level BPE behind NFC, BERT's special tokens,
    `[CLS] $A [SEP]`, `[MASK]` with lstrip, and runs of spaces as added tokens matched on normalised text."""
    specials = ["[CLS]", "[SEP]", "[PAD]", "[UNK]"]
    tok = byte_level_bpe(specials + ["[MASK]"])
    tok.normalizer = normalizers.NFC()
    tok.add_special_tokens(specials)
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=False, normalized=False, special=True)])
    tok.add_tokens([AddedToken(" " * n, normalized=True, special=False) for n in (2, 3, 4, 8)])
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[
        ("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return tok


def sentencepiece_bpe(specials, bos, eos, prepend, vocab_size=700):
    """SentencePiece's BPE as tokenizer.json holds it: spaces to '▁' (after a '▁' put in front with `prepend`, as
    Llama's and Mistral's), BPE with byte fallback (its <0xXX> pieces in the vocabulary), no pre-tokenizer,
    `bos $A eos`."""
    tok = Tokenizer(tok_models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    replace = normalizers.Replace(" ", "\u2581")
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), replace]) if prepend else replace
    # A small alphabet: the other characters take the byte fallback.
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, limit_alphabet=200, special_tokens=specials,
                                  show_progress=False)
    tok = make_bpe_vocabs.train_with_byte_pieces(tok, trainer, corpus())
    tok.add_special_tokens(specials)
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A {eos}", special_tokens=[
        (bos, tok.token_to_id(bos)), (eos, tok.token_to_id(eos))])
    return tok


def gemma_tokenizer(vocab_size=700):
    """Gemma's pipeline (EmbeddingGemma's `<bos> $A <eos>`)."""
    return sentencepiece_bpe(["<pad>", "<eos>", "<bos>", "<unk>"], "<bos>", "<eos>", prepend=False,
                             vocab_size=vocab_size)


def llama_tokenizer():
    """Llama 2's and Mistral's pipeline, with the end token appended as e5-mistral's tokenizer does (last-token
    pooling reads it)."""
    return sentencepiece_bpe(["<unk>", "<s>", "</s>"], "<s>", "</s>", prepend=True)


LLAMA_SPECIALS = dict(bos_token="<s>", eos_token="</s>", pad_token="</s>")
QWEN_SPECIALS = dict(eos_token=make_qwen3_fixtures.EOS, pad_token=make_qwen3_fixtures.EOS)


def decoder(config_class, model_class, **extra):
    """A Llama-family decoder of 3 layers, 4 query heads; `extra`: what the fixture varies."""
    def build(tok, max_seq):
        config = config_class(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=96,
                              num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=max_seq,
                              attn_implementation="eager", **extra)
        return model_class(config).eval()
    return build


def eurobert(tok, max_seq):
    ids = {f"{k}_token_id": tok.token_to_id(t) for k, t in [("bos", "<s>"), ("eos", "</s>"), ("pad", "</s>")]}
    return decoder(EuroBertConfig, EuroBertModel, num_key_value_heads=2, attention_bias=True, mlp_bias=True,
                   rope_theta=3e4, **ids)(tok, max_seq)


GEMMA_SPECIALS = dict(bos_token="<bos>", eos_token="<eos>", pad_token="<pad>")


def gemma3(tok, max_seq, **extra):
    config = Gemma3TextConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=96,
                              num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                              max_position_embeddings=max_seq, query_pre_attn_scalar=24, sliding_window=16,
                              use_bidirectional_attention=True,
                              hidden_activation="gelu_pytorch_tanh",
                              pad_token_id=tok.token_to_id("<pad>"), bos_token_id=tok.token_to_id("<bos>"),
                              eos_token_id=tok.token_to_id("<eos>"), attn_implementation="eager",
                              **{"rope_theta": 5e4, "rope_local_base_freq": 300.0, "sliding_window_pattern": 3,
                                 **extra})
    return Gemma3TextModel(config).eval()


def gemma2(tok, max_seq):
    """bge-multilingual-gemma2's network at a small width: causal, the layers local and global in turn, the scores
    soft-capped (at 1.5, where Gemma 2's 50 would bend none of these small random scores)."""
    config = Gemma2Config(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=max_seq,
                          query_pre_attn_scalar=10, sliding_window=16, attn_logit_softcapping=1.5,
                          hidden_activation="gelu_pytorch_tanh",
                          rope_parameters={"rope_type": "default", "rope_theta": 2e4},
                          pad_token_id=tok.token_to_id("<pad>"), bos_token_id=tok.token_to_id("<bos>"),
                          eos_token_id=tok.token_to_id("<eos>"), attn_implementation="eager")
    return Gemma2Model(config).eval()


def gemma3_linear_global(tok, max_seq):
    """Gemma 3 4B's rotary: its global layers' positions scaled linearly by 8, the local ones' plain; every second
    layer global, at a base low enough for the scaling to show over 96 positions."""
    return gemma3(tok, max_seq, sliding_window_pattern=2, rope_parameters={
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 2e3},
        "sliding_attention": {"rope_type": "default", "rope_theta": 300.0}})


def as_gemma3_transformers4_rope(config):
    """Gemma 3's transformers 4 keys: `rope_theta` and `rope_local_base_freq`, `rope_scaling` for the global layers."""
    params = config.pop("rope_parameters")
    full, sliding = params["full_attention"], params["sliding_attention"]
    config["rope_theta"] = full.pop("rope_theta")
    config["rope_local_base_freq"] = sliding["rope_theta"]
    config["rope_scaling"] = full


ROBERTA_SPECIALS = dict(bos_token="<s>", eos_token="</s>", pad_token="<pad>", mask_token="<mask>", cls_token="<s>",
                        sep_token="</s>")
BERT_SPECIALS = dict(pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def roberta_like(config_class, model_class):
    """RoBERTa's, XLM-R's and MPNet's configs: positions after the padding id, so the table is 1 + pad longer."""
    def build(tok, max_seq):
        pad = tok.token_to_id("<pad>")
        config = config_class(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
                              num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=max_seq + pad + 1,
                              type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=pad,
                              bos_token_id=tok.token_to_id("<s>"), eos_token_id=tok.token_to_id("</s>"),
                              attn_implementation="eager")
        return model_class(config, add_pooling_layer=False).eval()
    return build


def nomic_bert(tok, max_seq):
    config = NomicBertConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, num_hidden_layers=3,
                             num_attention_heads=4, intermediate_size=96, max_position_embeddings=max_seq,
                             rope_parameters={"rope_theta": 5000.0, "rope_type": "default"},
                             pad_token_id=tok.token_to_id("[PAD]"), attn_implementation="eager")
    return NomicBertModel(config).eval()


def renamed_copy(name, copy, probe, old_keys=None):
    """`name`'s model (transformers saves Nomic BERT and Jina v3 under their Hub checkpoints' tensor names) under the
    names transformers gives it in memory (`layers.N.self_attn.q_proj`, ..., `probe` among them), checked to embed
    as `name` does. `old_keys(config)`: the config keys of the checkpoints' own code to add, and the transformers
    ones to drop after the check (which runs with both)."""
    d = OUT / copy
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(OUT / name, d)
    st = SentenceTransformer(str(OUT / name), device="cpu")
    state = {k: v.contiguous() for k, v in st[0].auto_model.state_dict().items()}
    assert probe in state, sorted(state)
    from safetensors.torch import save_file
    save_file(state, d / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((d / "config.json").read_text())
    native = []
    if old_keys:
        extra, native = old_keys(config)
        config.update(extra)
    (d / "config.json").write_text(json.dumps(config, indent=2))
    batch = texts()
    got = SentenceTransformer(str(d), device="cpu").encode(batch, batch_size=4, convert_to_tensor=True)
    want = st.encode(batch, batch_size=4, convert_to_tensor=True)
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    for k in native:
        del config[k]
    (d / "config.json").write_text(json.dumps(config, indent=2))
    print(f"{d}: transformers' tensor names, embeddings as {name}'s")


def contrastors_keys(config):
    """Nomic BERT's config in contrastors' keys alone (`n_embd`, `rotary_emb_base`, `activation_function: swiglu`,
    ...): the transformers keys they replace."""
    extra = dict(n_embd=config["hidden_size"], n_head=config["num_attention_heads"],
                 n_layer=config["num_hidden_layers"], n_inner=config["intermediate_size"],
                 n_positions=config["max_position_embeddings"], layer_norm_epsilon=config["layer_norm_eps"],
                 activation_function="swiglu", rotary_emb_base=config["rope_parameters"]["rope_theta"],
                 rotary_emb_fraction=1.0, rotary_emb_interleaved=False, rotary_emb_scale_base=None,
                 rotary_scaling_factor=None, prenorm=False, causal=False, qkv_proj_bias=False, mlp_fc1_bias=False,
                 mlp_fc2_bias=False)
    native = ["hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
              "max_position_embeddings", "layer_norm_eps", "hidden_act", "rope_parameters", "head_dim"]
    return extra, native


def jina_v3(tok, max_seq):
    config = JinaEmbeddingsV3Config(vocab_size=tok.get_vocab_size(), hidden_size=64, num_hidden_layers=3,
                                    num_attention_heads=4, intermediate_size=96, max_position_embeddings=max_seq,
                                    rope_parameters={"rope_theta": 3000.0, "rope_type": "default"},
                                    pad_token_id=tok.token_to_id("<pad>"), bos_token_id=tok.token_to_id("<s>"),
                                    eos_token_id=tok.token_to_id("</s>"), attn_implementation="eager")
    return JinaEmbeddingsV3Model(config, add_pooling_layer=False).eval()


def gte(type_vocab_size, rope):
    def build(tok, max_seq):
        config = GteConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                           intermediate_size=96, max_position_embeddings=max_seq, type_vocab_size=type_vocab_size,
                           rope_parameters=rope, pad_token_id=tok.token_to_id("[PAD]"), attn_implementation="eager")
        return GteModel(config).eval()
    return build


def as_new_model(name, theta, factor):
    """`name`'s config.json rewritten as Alibaba's NewModel writes it, with fixed NTK scaling `factor` of base
    `theta` (what the reference ran as transformers' `linear` rope type, as the module docstring says)."""
    path = OUT / name / "config.json"
    config = json.loads(path.read_text())
    del config["rope_parameters"]
    config.update(model_type="new", architectures=["NewModel"], rope_theta=theta,
                  rope_scaling={"type": "ntk", "factor": factor}, layer_norm_type="layer_norm",
                  position_embedding_type="rope", logn_attention_scale=False, pack_qkv=True)
    path.write_text(json.dumps(config, indent=2))


def bert(tok, max_seq):
    config = BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=max_seq, pad_token_id=tok.token_to_id("[PAD]"),
                        attn_implementation="eager")
    return BertModel(config, add_pooling_layer=False).eval()


def distilbert(tok, max_seq):
    config = DistilBertConfig(vocab_size=tok.get_vocab_size(), dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                              max_position_embeddings=max_seq, activation="gelu", pad_token_id=tok.token_to_id("[PAD]"),
                              attn_implementation="eager")
    return DistilBertModel(config).eval()


def albert(tok, max_seq):
    config = AlbertConfig(vocab_size=tok.get_vocab_size(), embedding_size=32, hidden_size=64, num_hidden_layers=5,
                          num_hidden_groups=2, inner_group_num=2, num_attention_heads=4, intermediate_size=128,
                          hidden_act="gelu_new", max_position_embeddings=max_seq, pad_token_id=tok.token_to_id("<pad>"),
                          attn_implementation="eager")
    return AlbertModel(config, add_pooling_layer=False).eval()


def electra(tok, max_seq):
    config = ElectraConfig(vocab_size=tok.get_vocab_size(), embedding_size=32, hidden_size=64, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=128, max_position_embeddings=max_seq,
                           pad_token_id=tok.token_to_id("[PAD]"), attn_implementation="eager")
    return ElectraModel(config).eval()


def deberta(**extra):
    """DebertaV2Model, DeBERTa v3's shape unless `extra` says otherwise: relative attention over log buckets (8 over
    24 positions, so 64-token texts reach past both), both terms through the content's own projections, the
    position embeddings through the encoder's LayerNorm, no absolute positions, no token types."""
    def build(tok, max_seq):
        config = dict(vocab_size=tok.get_vocab_size(), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, max_position_embeddings=max_seq, pad_token_id=tok.token_to_id("[PAD]"),
                      relative_attention=True, position_buckets=8, max_relative_positions=24,
                      pos_att_type=["p2c", "c2p"], share_att_key=True, norm_rel_ebd="layer_norm",
                      position_biased_input=False, type_vocab_size=0)
        config.update(extra)
        return DebertaV2Model(DebertaV2Config(**config)).eval()
    return build


def write_deberta_buckets(name):
    """make_log_bucket_position of every relative position from -1100 to 1100 at DeBERTa v3's 256 buckets over 512
    positions, for the engine's unit test."""
    distances = torch.arange(-1100, 1101)
    buckets = make_log_bucket_position(distances, 256, 512).long().tolist()
    (OUT / name / "buckets.json").write_text(json.dumps({"num_buckets": 256, "max_distance": 512,
                                                         "distances": distances.tolist(), "buckets": buckets}))


def modernbert(**extra):
    def build(tok, max_seq):
        config = ModernBertConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=96,
                                  num_hidden_layers=4, num_attention_heads=4, max_position_embeddings=max_seq,
                                  pad_token_id=tok.token_to_id("[PAD]"), cls_token_id=tok.token_to_id("[CLS]"),
                                  sep_token_id=tok.token_to_id("[SEP]"), bos_token_id=tok.token_to_id("[CLS]"),
                                  eos_token_id=tok.token_to_id("[SEP]"), attn_implementation="eager", **extra)
        return ModernBertModel(config).eval()
    return build


def texts():
    picks = fixture_texts.sample(20261206)
    # Special tokens' text inside texts: a `<pad>` id mid-sequence, `<mask>` eating the whitespace before it.
    picks += [
        "hello <pad> world",
        "<pad><pad> two pads first",
        "a  <mask> b\t<mask>c <s> d </s> e",
        "a  [MASK] b\t[MASK]c [CLS] d [SEP] e",
        "spaces:  two,   three,    four,        eight, cafe\u0301  [MASK]",
        "trailing pad <pad>",
        " ".join(["word <pad>"] * 40),
        "",
    ]
    return picks


def make(name, build, tok, specials, pooling, normalize, seed, max_seq, dense=(), norm_center=1.0, edit=None,
         include_prompt=True, prompts=None, legacy_pooling=False):
    """`pooling`: a mode, or a tuple of modes to concatenate; `dense`: (out_features, bias, activation) of each Dense
    module after pooling; `norm_center`: what the norms' weights are drawn around (Gemma's scale by 1 + weight: 0);
    `edit`: applied to config.json's dict before the reference loads the directory (so the reference is what
    transformers makes of the edited file); `prompts`: name to text, kept in config_sentence_transformers.json, each
    with its own reference_{name}.jsonl; `legacy_pooling`: 1_Pooling/config.json rewritten in sentence-transformers
    < 6's flags."""
    d = OUT / name
    shutil.rmtree(d, ignore_errors=True)
    work = OUT / f"{name}_hf"
    shutil.rmtree(work, ignore_errors=True)
    torch.manual_seed(seed)
    model = build(tok, max_seq)
    with torch.no_grad():
        for n, p in model.named_parameters():
            # Every row random, the padding rows nn.Embedding zeroes included; MPNet's relative bias at the scale of
            # the scores, so that a wrong bucket shows.
            std = 1.0 if "relative_attention_bias" in n or "rel_embeddings" in n else 0.1
            norm = n.endswith("Norm.weight") or n.endswith("norm.weight")
            p.copy_(std * torch.randn_like(p) + (norm_center if norm else 0.0))
    model.save_pretrained(work, safe_serialization=True)
    # The unknown token where the vocabulary has one (a byte-level BPE has none: naming one would add a token).
    unk = {"unk_token": u for u in ("[UNK]", "<unk>") if tok.token_to_id(u) is not None}
    PreTrainedTokenizerFast(tokenizer_object=tok, **{**unk, **specials}).save_pretrained(work)
    transformer = models.Transformer(str(work), max_seq_length=max_seq)
    modules = [transformer, models.Pooling(64, pooling_mode=pooling, include_prompt=include_prompt)]
    width = 64 * (1 if isinstance(pooling, str) else len(pooling))
    for out, bias, act in dense:
        modules.append(models.Dense(width, out, bias=bias, activation_function=act))
        width = out
    if normalize:
        modules.append(models.Normalize())
    st = SentenceTransformer(modules=modules, device="cpu")
    st.save(str(d))
    shutil.rmtree(work)
    for f in ["special_tokens_map.json", "README.md", "config_sentence_transformers.json"]:
        (d / f).unlink(missing_ok=True)
    if prompts:
        (d / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts}, indent=2))
    if legacy_pooling:
        flags = {"cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens", "mean": "pooling_mode_mean_tokens",
                 "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
                 "weightedmean": "pooling_mode_weightedmean_tokens", "lasttoken": "pooling_mode_lasttoken"}
        modes = (pooling,) if isinstance(pooling, str) else pooling
        legacy = {"word_embedding_dimension": 64, **{f: m in modes for m, f in flags.items()},
                  "include_prompt": include_prompt}
        (d / "1_Pooling" / "config.json").write_text(json.dumps(legacy, indent=2))
    if edit:
        config = json.loads((d / "config.json").read_text())
        edit(config)
        (d / "config.json").write_text(json.dumps(config, indent=2))

    st = SentenceTransformer(str(d), device="cpu")
    batch = texts()
    emb = st.encode(batch, batch_size=4, convert_to_numpy=True)
    ids = [st.tokenize([t])["input_ids"][0].tolist() for t in batch]
    pad = tok.token_to_id("<pad>")
    assert pad is None or any(pad in i[1:-1] for i in ids) or "modernbert" in name, "no <pad> inside a sequence"
    assert any(len(i) == max_seq for i in ids), "no text reaches max_seq_length"
    write_reference(d / "reference.jsonl", batch, ids, emb)
    for prompt_name, prompt in (prompts or {}).items():
        # The text as sent (the prompt is the engine's to add); the ids and embedding of the templated one.
        emb = st.encode(batch, prompt_name=prompt_name, batch_size=4, convert_to_numpy=True)
        ids = [st.tokenize([prompt + t])["input_ids"][0].tolist() for t in batch]
        write_reference(d / f"reference_{prompt_name}.jsonl", batch, ids, emb)
    print(f"{d}: {len(batch)} texts, vocab {tok.get_vocab_size()}, {sum(len(i) for i in ids)} tokens")


def write_reference(path, batch, ids, emb):
    with open(path, "w", encoding="utf-8") as f:
        for t, i, e in zip(batch, ids, emb):
            b64 = base64.b64encode(struct.pack(f"<{len(e)}f", *e.tolist())).decode()
            f.write(json.dumps({"text": t, "ids": i, "embedding": b64}, ensure_ascii=False) + "\n")


MODERNBERT_SPECIALS = dict(BERT_SPECIALS, unk_token="[UNK]")


def as_transformers4_rope(config):
    """transformers 4's keys for rotary scaling, as the Hub's Llama 3.x files have them: `rope_scaling` beside a
    top-level `rope_theta`."""
    params = config.pop("rope_parameters")
    config["rope_theta"] = params.pop("rope_theta")
    config["rope_scaling"] = params


def without_rope_scaling(config):
    if config.pop("rope_scaling", None) is None:
        config["rope_parameters"]["rope_type"] = "default"


def assert_shows(name, edit, what):
    """The fixture tells `what` apart: the same directory with its config.json edited (`what` taken out) embeds the
    texts far from the reference."""
    d = OUT / name
    plain = OUT / f"{name}_plain"
    shutil.rmtree(plain, ignore_errors=True)
    shutil.copytree(d, plain)
    config = json.loads((plain / "config.json").read_text())
    edit(config)
    (plain / "config.json").write_text(json.dumps(config, indent=2))
    batch = texts()
    a = SentenceTransformer(str(d), device="cpu").encode(batch, convert_to_tensor=True, normalize_embeddings=True)
    b = SentenceTransformer(str(plain), device="cpu").encode(batch, convert_to_tensor=True, normalize_embeddings=True)
    shutil.rmtree(plain)
    worst = float((a * b).sum(-1).min())
    assert worst < 0.99, f"{name}: without its {what} the embeddings stay within cosine {worst}"
    print(f"{name}: without its {what}, min cosine {worst:.4f}")


def assert_rope_scaling_shows(name):
    assert_shows(name, without_rope_scaling, "rotary scaling")


def make_named(fixtures):
    """Makes those of `fixtures` (functions named as their fixtures) the command line names, all when it names
    none, on 2 threads."""
    torch.set_num_threads(2)
    names = sys.argv[1:] or [f.__name__ for f in fixtures]
    for f in fixtures:
        if f.__name__ in names:
            f()


def main():
    torch.set_num_threads(2)
    only = set(sys.argv[1:])  # names to make; all when none are given
    if not only or "modernbert_mean" in only:
        make("modernbert_mean", modernbert(global_attn_every_n_layers=3, local_attention=16), modernbert_tokenizer(),
             MODERNBERT_SPECIALS, "mean", True, 7, 96)
    if not only or "modernbert_cls" in only:
        make("modernbert_cls", modernbert(global_attn_every_n_layers=2, local_attention=10, norm_bias=True,
                                          attention_bias=True, mlp_bias=True, global_rope_theta=5e4,
                                          local_rope_theta=300.0), modernbert_tokenizer(), MODERNBERT_SPECIALS, "cls",
             False, 8, 96)
    if not only or "gemma3_mean" in only:
        make("gemma3_mean", gemma3, gemma_tokenizer(), GEMMA_SPECIALS, "mean", True, 11, 96,
             dense=[(128, False, torch.nn.Identity()), (64, False, torch.nn.Identity())], norm_center=0.0)
    if not only or "llama_last" in only:
        make("llama_last", decoder(LlamaConfig, LlamaModel, num_key_value_heads=2, attention_bias=True, mlp_bias=True,
                                   rope_theta=5e4), llama_tokenizer(), LLAMA_SPECIALS, "lasttoken", True, 12, 96)
    if not only or "mistral_last" in only:
        make("mistral_last", decoder(MistralConfig, MistralModel, num_key_value_heads=1, head_dim=32,
                                     sliding_window=8), llama_tokenizer(), LLAMA_SPECIALS, "lasttoken", False, 13, 96)
    if not only or "qwen2_dense_mean" in only:
        make("qwen2_dense_mean", decoder(Qwen2Config, Qwen2Model, num_key_value_heads=2, use_sliding_window=True,
                                         sliding_window=12, max_window_layers=1, rope_theta=2e4),
             make_qwen3_fixtures.tokenizer(), QWEN_SPECIALS, "mean", True, 14, 96,
             dense=[(32, True, torch.nn.Identity())])
    if not only or "qwen3_window_mean" in only:
        make("qwen3_window_mean", decoder(Qwen3Config, Qwen3Model, num_key_value_heads=4, head_dim=16, is_causal=False,
                                          sliding_window=6, use_sliding_window=True,
                                          layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
             make_qwen3_fixtures.tokenizer(), QWEN_SPECIALS, "mean", False, 15, 96)
    t5_bucket = lambda d, n, m: T5Attention._relative_position_bucket(d, bidirectional=True, num_buckets=n,
                                                                      max_distance=m)
    if not only or "t5_gated_mean" in only:
        make("t5_gated_mean", t5(feed_forward_proj="gated-gelu", relative_attention_num_buckets=16,
                                 relative_attention_max_distance=40), t5_tokenizer(), T5_SPECIALS, "mean", True, 16,
             96, dense=[(64, False, torch.nn.Identity())])
        write_buckets("t5_gated_mean", t5_bucket, 16, 40)
    if not only or "t5_relu_cls" in only:
        make("t5_relu_cls", t5(feed_forward_proj="relu"), t5_tokenizer(), T5_SPECIALS, "cls", False, 17, 96)
        write_buckets("t5_relu_cls", t5_bucket, 32, 128)
    if not only or "bert_dense_cls" in only:
        make("bert_dense_cls", bert, bert_tokenizer(), BERT_SPECIALS, "cls", True, 9, 64,
             dense=[(64, True, torch.nn.Tanh())])
    if not only or "distilbert_dense_mean" in only:
        make("distilbert_dense_mean", distilbert, bert_tokenizer(), BERT_SPECIALS, "mean", True, 10, 64,
             dense=[(256, False, torch.nn.Identity()), (48, False, torch.nn.Identity())])
    if not only or "bert_max" in only:
        make("bert_max", bert, bert_tokenizer(), BERT_SPECIALS, "max", False, 18, 64)
    if not only or "distilbert_mean_sqrt" in only:
        make("distilbert_mean_sqrt", distilbert, bert_tokenizer(), BERT_SPECIALS, "mean_sqrt_len_tokens", False, 19,
             64)
    if not only or "bert_six_modes" in only:
        make("bert_six_modes", bert, bert_tokenizer(), BERT_SPECIALS,
             ("weightedmean", "lasttoken", "cls", "mean_sqrt_len_tokens", "max", "mean"), False, 30, 64,
             include_prompt=False, prompts={"query": "Represent the question for retrieving supporting documents: "})
    if not only or "distilbert_cls_mean_dense" in only:
        make("distilbert_cls_mean_dense", distilbert, bert_tokenizer(), BERT_SPECIALS, ("cls", "mean"), True, 31, 64,
             dense=[(48, True, torch.nn.Tanh())], legacy_pooling=True)
    if not only or "albert_mean" in only:
        make("albert_mean", albert, albert_tokenizer(), ALBERT_SPECIALS, "mean", True, 32, 64)
    if not only or "electra_mean" in only:
        make("electra_mean", electra, bert_tokenizer(), BERT_SPECIALS, "mean", False, 33, 64)
    if not only or "deberta_mean" in only:
        make("deberta_mean", deberta(), deberta_tokenizer(), BERT_SPECIALS, "mean", True, 35, 64)
        write_deberta_buckets("deberta_mean")
        assert_shows("deberta_mean", lambda c: c.update(relative_attention=False), "relative attention")
    if not only or "deberta_v2_cls" in only:
        # DeBERTa v2's shape: relative positions clamped at 16 without buckets, projected by their own
        # pos_key_proj and pos_query_proj, not normed; absolute positions and token types; embeddings narrower than
        # the layers (embed_proj, then the LayerNorm); pos_att_type in the older files' string.
        make("deberta_v2_cls", deberta(position_buckets=-1, max_relative_positions=16, share_att_key=False,
                                       norm_rel_ebd="none", position_biased_input=True, type_vocab_size=2,
                                       embedding_size=32),
             bert_tokenizer(), BERT_SPECIALS, "cls", False, 36, 64, edit=lambda c: c.update(pos_att_type="c2p|p2c"))
    if not only or "gemma2_last" in only:
        make("gemma2_last", gemma2, gemma_tokenizer(), GEMMA_SPECIALS, "lasttoken", True, 34, 96, norm_center=0.0)
        assert_shows("gemma2_last", lambda c: c.update(attn_logit_softcapping=None), "soft cap")
    if not only or "llama_weightedmean" in only:
        make("llama_weightedmean", decoder(LlamaConfig, LlamaModel, num_key_value_heads=2, rope_theta=5e4),
             llama_tokenizer(), LLAMA_SPECIALS, "weightedmean", True, 20, 96)
    if not only or "nomic_mean" in only:
        make("nomic_mean", nomic_bert, bert_tokenizer(), BERT_SPECIALS, "mean", True, 21, 64)
        renamed_copy("nomic_mean", "nomic_renamed_mean", "layers.0.self_attn.q_proj.weight", contrastors_keys)
    if not only or "gte_cls" in only:
        make("gte_cls", gte(1, {"rope_theta": 2e4, "rope_type": "default"}), bert_tokenizer(), BERT_SPECIALS, "cls",
             True, 22, 64)
    if not only or "gte_ntk_cls" in only:
        # Heads of 16: NTK factor 2 is base 2θ and positions times 2^(-2/16).
        make("gte_ntk_cls", gte(0, {"rope_theta": 2 * 5e3, "rope_type": "linear", "factor": 2 ** (2 / 16)}),
             bert_tokenizer(), BERT_SPECIALS, "cls", False, 23, 64)
        as_new_model("gte_ntk_cls", 5e3, 2.0)
    if not only or "jina_v3_mean" in only:
        make("jina_v3_mean", jina_v3, xlmr_tokenizer(), ROBERTA_SPECIALS, "mean", True, 24, 64)
        renamed_copy("jina_v3_mean", "jina_v3_renamed_mean", "layers.0.mlp.fc1.weight")
    if not only or "eurobert_mean" in only:
        make("eurobert_mean", eurobert, llama_tokenizer(), LLAMA_SPECIALS, "mean", True, 25, 96)
        path = OUT / "eurobert_mean" / "config.json"
        config = json.loads(path.read_text())
        assert config["rms_norm_eps"] == 1e-5, config
        del config["rms_norm_eps"]
        path.write_text(json.dumps(config, indent=2))
    if not only or "llama3_rope_last" in only:
        # Llama 3.1's scaling over a pretraining length of 32 positions: at heads of 16 and base 5e4 one frequency is
        # kept, one smoothed, six divided by 8, which the 96-token texts show.
        llama3 = dict(rope_type="llama3", rope_theta=5e4, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=32)
        make("llama3_rope_last", decoder(LlamaConfig, LlamaModel, num_key_value_heads=2, rope_parameters=llama3),
             llama_tokenizer(), LLAMA_SPECIALS, "lasttoken", True, 26, 96, edit=as_transformers4_rope)
        assert_rope_scaling_shows("llama3_rope_last")
    if not only or "gemma3_linear_mean" in only:
        make("gemma3_linear_mean", gemma3_linear_global, gemma_tokenizer(), GEMMA_SPECIALS, "mean", True, 29, 96,
             norm_center=0.0, edit=as_gemma3_transformers4_rope)
        assert_rope_scaling_shows("gemma3_linear_mean")
    if not only or "qwen3_yarn_last" in only:
        # YaRN as Qwen documents it for long inputs (factor 4) over 24 positions: frequencies ramped and cos/sin
        # times 0.1 ln 4 + 1.
        yarn = dict(rope_type="yarn", rope_theta=1e4, factor=4.0, original_max_position_embeddings=24)
        make("qwen3_yarn_last", decoder(Qwen3Config, Qwen3Model, num_key_value_heads=2, head_dim=16,
                                        rope_parameters=yarn),
             make_qwen3_fixtures.tokenizer(), QWEN_SPECIALS, "lasttoken", True, 27, 96)
        assert_rope_scaling_shows("qwen3_yarn_last")
    if only:
        return
    make("xlmr_mean", roberta_like(XLMRobertaConfig, XLMRobertaModel), xlmr_tokenizer(), ROBERTA_SPECIALS, "mean",
         True, 3, 64)
    make("roberta_cls", roberta_like(RobertaConfig, RobertaModel), roberta_tokenizer(), ROBERTA_SPECIALS, "cls",
         False, 4, 64)
    make("mpnet_mean", roberta_like(MPNetConfig, MPNetModel), mpnet_tokenizer(), ROBERTA_SPECIALS, "mean", True, 5,
         160)
    make("distilbert_mean", distilbert, bert_tokenizer(), BERT_SPECIALS, "mean", False, 6, 64)
    write_buckets("mpnet_mean", lambda d, n, m: MPNetEncoder.relative_position_bucket(d, num_buckets=n,
                                                                                       max_distance=m), 32, 128)


if __name__ == "__main__":
    main()
