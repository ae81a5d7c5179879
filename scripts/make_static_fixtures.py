"""Makes the StaticEmbedding fixtures under engine/tests/fixtures/ with sentence-transformers (run from the repo root
in the peers venv: scripts/setup_peers.sh):

  static_mean      sentence-transformers' own StaticEmbedding (random rows) over a BERT-pipeline WordPiece whose
                   post-processor adds [CLS] and [SEP] (which a StaticEmbedding leaves out), then Normalize; saved by
                   sentence-transformers, then its module moved to 0_StaticEmbedding/ as versions before 6 save it
                   (the Hub's static-retrieval-mrl-en-v1 has it so).
  model2vec_mean   model2vec's layout as the Hub's potion models have it: the module at the root (path "."), a
                   `config.json` of model2vec's, the table as `embeddings` with per-token `weights` and its
                   vocabulary quantisation (a quarter as many rows as tokens, an int64 `mapping` from token id to
                   row), an XLM-R-style Unigram tokenizer whose tokenizer.json keeps a truncation of 24 ids; no
                   Normalize.
  glove_mean       sentence-transformers' WordEmbeddings module as the average_word_embeddings_* models have it
                   (GloVe's; in 0_WordEmbeddings/): a WhitespaceTokenizer over a word list taken from the shipped corpora as they are
                   split (case and punctuation kept, so that all three of its lookups find words), its default
                   English stop words, random rows; mean pooling, no Normalize; max_seq_length 40, so long texts
                   are cut. Its texts add runs of Unicode and ASCII-separator whitespace and punctuation.

Each gets reference.jsonl (text, ids as sentence-transformers tokenizes them, embedding as base64 little-endian
f32) from sentence-transformers' encode; texts the tokenizer gives no ids are left out (sentence-transformers
embeds them as zeros; the engine refuses them).
"""

import json
import shutil
import sys

import torch
from safetensors.torch import save_file
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, StaticEmbedding, WordEmbeddings
from sentence_transformers.sentence_transformer.modules.tokenizer import WhitespaceTokenizer

sys.path.insert(0, "scripts")
from make_encoder_fixtures import (OUT, bert_tokenizer, corpus, texts, write_reference,  # noqa: E402
                                   xlmr_tokenizer)


def reference(d):
    st = SentenceTransformer(str(d), device="cpu")
    static = st[0]
    batch = [t for t in texts() if static.tokenizer.encode(t, add_special_tokens=False).ids]
    emb = st.encode(batch, batch_size=4, convert_to_numpy=True)
    ids = [static.tokenizer.encode(t, add_special_tokens=False).ids for t in batch]
    write_reference(d / "reference.jsonl", batch, ids, emb)
    print(f"{d}: {len(batch)} texts, {sum(len(i) for i in ids)} tokens, dim {emb.shape[1]}")
    return ids


def static_mean():
    d = OUT / "static_mean"
    shutil.rmtree(d, ignore_errors=True)
    torch.manual_seed(40)
    tok = bert_tokenizer()
    static = StaticEmbedding(tok, embedding_dim=48)
    SentenceTransformer(modules=[static, Normalize()], device="cpu").save(str(d))
    for f in ["README.md", "config_sentence_transformers.json"]:
        (d / f).unlink(missing_ok=True)
    (d / "0_StaticEmbedding").mkdir()
    for f in ["model.safetensors", "tokenizer.json"]:
        (d / f).rename(d / "0_StaticEmbedding" / f)
    modules = json.loads((d / "modules.json").read_text())
    modules[0]["path"] = "0_StaticEmbedding"
    (d / "modules.json").write_text(json.dumps(modules, indent=2))
    ids = reference(d)
    assert not any(i[0] == tok.token_to_id("[CLS]") for i in ids), "a special token in a StaticEmbedding's ids"


def model2vec_mean():
    d = OUT / "model2vec_mean"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    torch.manual_seed(41)
    tok = xlmr_tokenizer()
    tok.enable_truncation(24)
    tok.save(str(d / "tokenizer.json"))
    vocab = tok.get_vocab_size()
    rows = vocab // 4
    save_file({"embeddings": torch.randn(rows, 32) * 0.1, "weights": torch.rand(vocab) + 0.5,
               "mapping": torch.randint(0, rows, (vocab,), dtype=torch.int64)}, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({"model_type": "model2vec", "architectures": ["StaticModel"],
                                               "normalize": False, "hidden_dim": 32}, indent=2))
    (d / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": ".",
                                                  "type": "sentence_transformers.models.StaticEmbedding"}], indent=2))
    ids = reference(d)
    assert max(len(i) for i in ids) == 24, "no text reaches the tokenizer's truncation"


def glove_mean():
    d = OUT / "glove_mean"
    shutil.rmtree(d, ignore_errors=True)
    torch.manual_seed(42)
    # Words as str.split() gives them, the most frequent first, a few hundred: enough that the texts find words
    # each of the three ways, few enough that many are unknown.
    counts = {}
    for text in corpus():
        for word in text.split():
            counts[word] = counts.get(word, 0) + 1
    vocab = sorted(counts, key=lambda w: (-counts[w], w))[:600]
    words = WordEmbeddings(WhitespaceTokenizer(vocab=vocab), torch.randn(len(vocab), 24) * 0.5, max_seq_length=40)
    SentenceTransformer(modules=[words, Pooling(24, pooling_mode="mean")], device="cpu").save(str(d))
    for f in ["README.md", "config_sentence_transformers.json"]:
        (d / f).unlink(missing_ok=True)
    # In its own folder, as the Hub's average_word_embeddings_* models have it.
    (d / "0_WordEmbeddings").mkdir()
    for f in ["model.safetensors", "whitespacetokenizer_config.json", "wordembedding_config.json"]:
        (d / f).rename(d / "0_WordEmbeddings" / f)
    modules = json.loads((d / "modules.json").read_text())
    modules[0]["path"] = "0_WordEmbeddings"
    (d / "modules.json").write_text(json.dumps(modules, indent=2))
    st = SentenceTransformer(str(d), device="cpu")
    extra = ["The (cat), the CAT; \u00abthe\u00bb ... --", "words\u001cjoined\u001fby\u00a0separators\u3000and\u2028lines",
             "ALL CAPS WORDS: THE, OF, AND, TO!", "\u0130stanbul \u00c9T\u00c9 na\u00efve caf\u00e9's"]
    batch = [t for t in texts() + extra if st[0].tokenizer.tokenize(t)]
    ids = [st[0].tokenizer.tokenize(t)[:40] for t in batch]
    emb = st.encode(batch, batch_size=4, convert_to_numpy=True)
    write_reference(d / "reference.jsonl", batch, ids, emb)
    print(f"{d}: {len(batch)} texts, {sum(len(i) for i in ids)} tokens, dim {emb.shape[1]}")
    assert max(len(i) for i in ids) == 40, "no text reaches max_seq_length"


if __name__ == "__main__":
    torch.set_num_threads(2)
    only = set(sys.argv[1:])  # names to make; all when none are given
    for make in [static_mean, model2vec_mean, glove_mean]:
        if not only or make.__name__ in only:
            make()
