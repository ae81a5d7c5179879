#!/usr/bin/env python3
"""Small byte-level BPE tokenizers for the `fast` tokenizer's BPE tests and benchmark, trained with `tokenizers`
on the corpora the project ships (workloads/text), written to workloads/vocab/.

No PyPI package was found shipping a real Qwen-family tokenizer.json, so these reproduce the three pipelines in
use, each with its exact pre-tokenizer regex and settings, at 4,000 tokens (about 3,700 merges):
  - qwen2_style_bpe_4k: Qwen2/Qwen3 — NFC, Split(Qwen regex, isolated), ByteLevel(use_regex=false),
    TemplateProcessing appending <|endoftext|> (as Qwen3-Embedding's tokenizer does);
  - gpt2_style_bpe_4k: GPT-2 — no normalizer, ByteLevel(use_regex=true) with its built-in regex, ByteLevel
    post-processor;
  - llama3_style_bpe_4k: Llama-3 — no normalizer, Split(Llama-3 regex: digits in runs of up to three),
    ByteLevel(use_regex=false), BPE with ignore_merges, Sequence[ByteLevel, TemplateProcessing prepending
    <|begin_of_text|>].

And the three pipelines of SentencePiece BPE as tokenizer.json holds it (tokens are text with spaces as '▁',
characters outside the vocabulary as their bytes' <0xXX> pieces, unknowns fused), trained within '▁'-started words
as SentencePiece trains, on a 300-character alphabet so the byte fallback is common:
  - llama2_style_spbpe_4k: Llama 2 / Mistral v0.1 (transformers' legacy conversion) — Sequence[Prepend('▁'),
    Replace(' ', '▁')] normaliser, no pre-tokenizer (a whole text is one word), `<s> $A`; plus one added token
    matched on normalised text, which the crate finds after the Prepend;
  - mistral_style_spbpe_4k: Llama / Mistral as transformers 5 writes them — no normaliser, Metaspace(prepend_scheme
    first, split false), `<s> $A`, Mistral's [INST] control tokens;
  - gemma_style_spbpe_4k: Gemma / EmbeddingGemma — Replace(' ', '▁'), Split(' ', merged_with_previous),
    `<bos> $A <eos>`, non-special added tokens (newline runs, HTML tags) as Gemma's vocabulary has.

Needs the peers venv (bash scripts/setup_peers.sh). Run from the repository root:
  ~/.cache/embedding-workbench/peers-venv/bin/python scripts/make_bpe_vocabs.py
"""
import json
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

OUT = Path("workloads/vocab")
VOCAB = 4000
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s+(?!\S)|\s+")
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def corpus():
    for name in ["queries_multilingual", "passages_en", "passages_multilingual", "long_docs_en",
                 "long_docs_multilingual"]:
        for line in open(f"workloads/text/{name}.jsonl", encoding="utf-8"):
            yield json.loads(line)["text"]


def train(tok, specials):
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus(), trainer)


def split_then_bytes(pattern):
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


def qwen2():
    eos = "<|endoftext|>"
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = split_then_bytes(QWEN_SPLIT)
    train(tok, [eos, "<|im_start|>", "<|im_end|>"])
    tok.post_processor = processors.TemplateProcessing(single=f"$A {eos}", special_tokens=[(eos, tok.token_to_id(eos))])
    return tok


def gpt2():
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    train(tok, ["<|endoftext|>"])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def llama3():
    bos = "<|begin_of_text|>"
    tok = Tokenizer(models.BPE(unk_token=None, ignore_merges=True))
    tok.pre_tokenizer = split_then_bytes(LLAMA3_SPLIT)
    train(tok, [bos, "<|end_of_text|>"])
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))]),
    ])
    return tok


def train_with_byte_pieces(tok, trainer, texts):
    """Trains `tok` and adds the 256 <0xXX> pieces SentencePiece's byte fallback reads, with its decoder (also used
    by make_encoder_fixtures.py)."""
    tok.train_from_iterator(texts, trainer)
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    tok = Tokenizer.from_str(json.dumps(j))
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    return tok


def sentencepiece_bpe(specials):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 256, limit_alphabet=300, special_tokens=specials,
                                  show_progress=False)
    return train_with_byte_pieces(tok, trainer, corpus())


def template(tok, single, *specials):
    return processors.TemplateProcessing(single=single, special_tokens=[(t, tok.token_to_id(t)) for t in specials])


def llama2():
    tok = sentencepiece_bpe(["<unk>", "<s>", "</s>"])
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.pre_tokenizer = None
    tok.add_tokens([AddedToken("\u2581<tab>", normalized=True, special=False)])
    tok.post_processor = template(tok, "<s> $A", "<s>")
    return tok


def mistral():
    tok = sentencepiece_bpe(["<unk>", "<s>", "</s>", "[INST]", "[/INST]"])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    tok.post_processor = template(tok, "<s> $A", "<s>")
    return tok


def gemma():
    tok = sentencepiece_bpe(["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"])
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=False)
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in ["\n", "\n\n", "\n\n\n", "<table>", "</td>"]])
    tok.post_processor = template(tok, "<bos> $A <eos>", "<bos>", "<eos>")
    return tok


def main():
    for name, make in [("qwen2_style_bpe_4k", qwen2), ("gpt2_style_bpe_4k", gpt2), ("llama3_style_bpe_4k", llama3),
                       ("llama2_style_spbpe_4k", llama2), ("mistral_style_spbpe_4k", mistral),
                       ("gemma_style_spbpe_4k", gemma)]:
        tok = make()
        path = OUT / f"{name}_tokenizer.json"
        tok.save(str(path))
        merges = len(json.loads(path.read_text())["model"]["merges"])
        print(f"{path}: {tok.get_vocab_size()} tokens, {merges} merges")


if __name__ == "__main__":
    main()
