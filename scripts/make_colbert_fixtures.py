"""Multi-vector (ColBERT) fixtures: random-weight encoders saved as directories that sentence-transformers 6's
MultiVectorEncoder loads, with its token vectors of the fixture texts, encoded as queries and as documents, as the
reference.

- bert_colbert: a native sentence-transformers 6 MultiVectorEncoder save over a BertModel (hidden 32, 2 layers, 4
  heads, its unused pooler saved too) with distilbert_mean's kind of WordPiece (lowercasing BERT normaliser).
  Modules: Transformer with `document_length: 40` and `query_expansion: {strategy: fixed, attend: false, length: 16}`
  (classic ColBERT: every query is exactly 16 tokens, cut to 16 or filled up with [MASK] after its [SEP], the [MASK]s
  at attention_mask 0, so the encoder does not attend to them, yet each gets a vector that is scored); Dense 32 -> 16
  without bias, Identity, on token_embeddings; MultiVectorMask with `skiplist_words = list(string.punctuation)`
  (punctuation tokens dropped from documents' vectors only; the 9 characters that are not a vocabulary entry, # % = @
  \\ ^ ` | ~, are dropped from the list with a warning); Normalize on token_embeddings (each token vector to unit
  length). Prompts `{"query": "[Q] ", "document": "[D] "}` prepended as text, "[Q] " and "[D] " added to the
  tokenizer as special, non-normalised tokens (the form MultiVectorEncoder._register_prefix_tokens gives a legacy
  prefix: the lowercasing normaliser never sees them, and the trailing space is part of the token: "[Q] the" is
  ["[Q] ", "the"], and "[Q] " inside a text is that token too), the word embeddings resized to them.
- modernbert_colbert_pylate: a PyLate v3 save (what PyLate <= 3 wrote, before MultiVectorEncoder) over a
  ModernBertModel (hidden 32, 2 layers: layer 0 global, layer 1 local, `local_attention: 8`, i.e. |i - j| <= 4) with
  modernbert_mean's kind of byte-level BPE. modules.json lists only the Transformer (under its old name,
  `sentence_transformers.models.Transformer`, sentence_bert_config.json `{max_seq_length: 39, do_lower_case:
  false}`, as PyLate left it: document_length - 1) and `pylate.models.Dense.Dense` (1_Dense, 32 -> 16, no bias, its
  config without module_input_name); config_sentence_transformers.json holds PyLate's top-level keys: `model_type:
  ColBERT`, `query_prefix: "[Q] "`, `document_prefix: "[D] "`, `query_length: 12`, `document_length: 40`,
  `do_query_expansion: true`, `attend_to_expansion_tokens: true`, a short `skiplist_words`, `similarity_fn_name:
  MaxSim`, empty query/document prompts. "[Q] " and "[D] " are in tokenizer.json as PyLate added them
  (`tokenizer.add_tokens`: not special, normalized: true). Loading it, sentence-transformers 6 maps Dense to its
  own (on token_embeddings), makes the prompts "[Q] " / "[D] ", turns query_length into `query_expansion: {strategy:
  fixed, attend: true, length: 12}` (query_length itself left unset), and appends a MultiVectorMask with the
  saved skiplist_words and a token-level Normalize (PyLate v3 normalised every token vector in encode too); the
  reference is made from the directory as loaded, and the script asserts those fixups. With attend true the
  [MASK] expansion tokens are attended to (attention_mask 1). The tokenizer as loaded keeps the prefixes as saved:
  "[Q] " already comes out as one piece (no lowercasing normaliser here), so nothing is re-registered.
- bert_colbert_unused: answerai-colbert-small-v1's kind of PyLate v3 save, the same layout as
  modernbert_colbert_pylate, over a BertModel (hidden 32, 2 layers, 4 heads, pooler saved) with bert_colbert's kind
  of WordPiece laid out as bert-base-uncased's vocabulary: [PAD] 0, [unused0] 1, [unused1] 2, [UNK] 3, [CLS] 4,
  [SEP] 5, [MASK] 6, then the trained pieces. [unused0] and [unused1] are ordinary vocabulary entries, not added
  tokens: the saved tokenizer.json alone splits their text at the brackets ("[unused0]" -> "[", "un", ...,
  "##0", "]"), so no text gives their ids. config_sentence_transformers.json: `query_prefix: "[unused0]"`,
  `document_prefix: "[unused1]"` (no trailing space), `query_length: 16`, `document_length: 40`,
  `attend_to_expansion_tokens: false`, `do_query_expansion: true`, no `skiplist_words`, `similarity_fn_name:
  MaxSim`, empty query/document prompts. Loading it, sentence-transformers 6 does modernbert_colbert_pylate's
  fixups (expansion `{strategy: fixed, attend: false, length: 16}`, the [MASK]s unattended; the MultiVectorMask
  with PyLate's default skiplist, list(string.punctuation), less the characters not in the vocabulary) and, the
  prefixes being vocabulary entries the tokenizer splits, registers each as a special, non-normalised added token
  (MultiVectorEncoder._register_prefix_tokens): the prompts "[unused0]" / "[unused1]" then come out as ids 1 / 2
  right after [CLS], and so does their exact text anywhere in a text ("x[unused1]y" -> "x", "[unused1]", "y"; an
  upper-case "[UNUSED1]" is not matched, the match coming before the lowercasing normaliser). The registration is
  the loaded tokenizer's only: the directory is saved from modules (no legacy load, nothing registered), the
  reference made from it loaded afresh, and the script asserts that tokenizer.json's added_tokens stay [PAD],
  [UNK], [CLS], [SEP], [MASK] before and after. Its texts are the others' plus one with the prefixes' text in it.

Each fixture is checked to tell apart what it is for: bert_colbert's queries move with the expansion attended,
modernbert_colbert_pylate's documents with the window past every text, its queries with the expansion unattended,
bert_colbert_unused's queries with "[unused0]" left unregistered (the prefix moved into the prompt, split).

Each directory holds query_reference.jsonl (MultiVectorEncoder.encode_query) and document_reference.jsonl
(encode_document), a line per text: `text`; `ids`, the input_ids row the Transformer gave the encoder (prefix,
truncation, expansion; no trailing padding); `attended`, how many leading ids had attention_mask 1 (len(ids) but
for the [MASK]s of an attend-false query); `kept`, the indices into ids whose vectors encode returns (the
MultiVectorMask's scoring mask: every query position, expansion included; a document's non-skiplist tokens, [CLS],
[SEP] and the prefix among them); `vectors`, those rows (16 wide, unit length), row-major, base64 of little-endian
f32. Similarity is MaxSim: a query's every vector's largest dot product with the document's vectors, summed.

The WordPiece trainer breaks ties in hash order, so a rerun may give bert_colbert and bert_colbert_unused another
vocabulary (bert_colbert_unused's past the ids above); a run's files always agree among themselves. Needs the peers
venv (bash scripts/setup_peers.sh). Run from the repository root (naming fixtures makes only those):
  ~/.cache/embedding-workbench/peers-venv/bin/python scripts/make_colbert_fixtures.py [NAME ...]
"""
import base64
import json
import random
import re
import shutil
import string
import struct
import sys

import torch
from sentence_transformers import MultiVectorEncoder
from sentence_transformers.base.modules import Dense, Normalize, Transformer
from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask
from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers import models as tok_models
from transformers import BertConfig, BertModel, ModernBertConfig, ModernBertModel, PreTrainedTokenizerFast

sys.path.insert(0, "scripts")
import make_encoder_fixtures as enc  # noqa: E402  the tokenizers and texts of the encoder fixtures

MAX_SEQ = 64
HIDDEN = 32
DIM = 16
DOCUMENT_LENGTH = 40
PREFIXES = {"query": "[Q] ", "document": "[D] "}
UNUSED = {"query": "[unused0]", "document": "[unused1]"}  # answerai-colbert-small-v1's PyLate prefixes


def texts():
    """24 texts: short queries (Latin-script ones sampled from the corpus, CJK / Arabic ones, a few hand-written
    English ones, so that most queries are expanded), long ones (cut), passages and a long document (documents
    cut at 40 tokens, with punctuation for the skiplist), nasty unicode, special tokens' text among the words, a
    text naming the prefixes, and the empty text."""
    base = enc.texts()
    rows = [json.loads(line)["text"] for line in open("workloads/text/queries_multilingual.jsonl", encoding="utf-8")]
    rng = random.Random(20260215)
    latin = [r for r in rows if 8 <= len(r) <= 16 and re.fullmatch(r"[A-Za-z ?'.,-]+", r)]
    other = [r for r in rows if 6 <= len(r) <= 12 and not re.search(r"[A-Za-z]", r)]
    picks = rng.sample(latin, 3) + rng.sample(other, 2)
    picks += ["who is the president?", "what is a nation?", "is it new?", "the state of the union", "when, and why?"]
    picks += [base[0], base[10]]  # long queries: Arabic, Russian with quotes and commas
    # Passages and a long document, their first 240 characters (past 40 tokens all the same; the files stay small).
    picks += [base[i][:240] for i in (12, 14, 19, 23)]
    picks += [base[25], base[28], base[30]]  # an emoji sequence, template-injection punctuation, enclosed letters
    picks += [base[33], base[36], base[37], "what do [Q] and [D] mean?", ""]
    return picks


def perturb(module, seed):
    """Every parameter random (norm weights around 1), the rows added for the prefixes included."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in module.named_parameters():
            norm = n.lower().endswith("norm.weight")
            p.copy_(torch.randn(p.shape, generator=g) * 0.1 + (1.0 if norm else 0.0))
    return module.eval()


def save_backbone(work, model, hf_tok, seed):
    """The backbone with its word embeddings resized to the tokenizer (the prefixes added), random, in `work`."""
    shutil.rmtree(work, ignore_errors=True)
    model.resize_token_embeddings(len(hf_tok))
    perturb(model, seed).save_pretrained(str(work))
    hf_tok.save_pretrained(str(work))


def tidy(d):
    for f in d.rglob("*"):
        if f.name in ("special_tokens_map.json", "README.md"):
            f.unlink()


def b64(rows):
    flat = rows.reshape(-1).tolist()
    return base64.b64encode(struct.pack(f"<{len(flat)}f", *flat)).decode()


def write_reference(d, st, batch, task):
    """`task`_reference.jsonl; checks the rows written against encode's own and returns them."""
    encode = st.encode_query if task == "query" else st.encode_document
    got = encode(batch, batch_size=4)
    # The same batches (encode sorts by length the same way), every feature left in: input_ids and the scoring
    # mask MultiVectorMask wrote over attention_mask, padded to each batch's longest.
    raw = encode(batch, batch_size=4, output_value=None)
    rows = []
    with open(d / f"{task}_reference.jsonl", "w", encoding="utf-8") as f:
        for text, vectors, out in zip(batch, got, raw):
            # The row alone: the encoder's own attention_mask, before MultiVectorMask.
            pre = st.preprocess([text], prompt=st.prompts[task], task=task)
            ids = pre["input_ids"][0]
            n = len(ids)
            mask = pre["attention_mask"][0]
            attended = int(mask.sum())
            assert mask[:attended].all() and not mask[attended:].any(), (text, mask)
            assert torch.equal(out["input_ids"][:n], ids), (text, out["input_ids"], ids)
            scoring = out["attention_mask"].bool()
            assert not scoring[n:].any(), f"{text!r}: a padding position scored"
            kept = scoring[:n].nonzero().flatten().tolist()
            assert len(kept) == vectors.shape[0], (text, len(kept), vectors.shape)
            assert torch.equal(out["token_embeddings"][scoring], vectors), text
            alone = encode([text])[0]
            assert torch.allclose(alone, vectors, atol=1e-5), f"{text!r}: batched and alone differ"
            row = {"text": text, "ids": ids.tolist(), "attended": attended, "kept": kept, "vectors": b64(vectors)}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            rows.append(row)
    norms = torch.cat(list(got)).norm(dim=-1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5), "token vectors not unit length"
    print(f"{d / f'{task}_reference.jsonl'}: {len(batch)} texts, {sum(len(r['kept']) for r in rows)} vectors, "
          f"ids {min(len(r['ids']) for r in rows)}..{max(len(r['ids']) for r in rows)}")
    return rows


def check_maxsim(st, queries, documents):
    """similarity() is MaxSim: per query vector the largest dot product over the document's vectors, summed."""
    q = st.encode_query(queries)
    dd = st.encode_document(documents)
    got = st.similarity(q, dd)
    want = torch.tensor([[float((a @ b.T).max(dim=1).values.sum()) for b in dd] for a in q])
    assert torch.allclose(got.cpu().float(), want, atol=1e-4), (got, want)
    print(f"similarity_fn_name {st.similarity_fn_name}: MaxSim checked on {len(q)}x{len(dd)} pairs")


def show_files(d, prefixes=PREFIXES):
    for rel in ["modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"]:
        print(f"  {rel}: {(d / rel).read_text().strip()}")
    for sub in sorted(p for p in d.iterdir() if p.is_dir()):
        for f in sorted(sub.iterdir()):
            if f.suffix == ".json":
                print(f"  {sub.name}/{f.name}: {f.read_text().strip()}")
    tok = json.loads((d / "tokenizer.json").read_text())
    for t in tok["added_tokens"]:
        if t["content"] in prefixes.values():
            print(f"  tokenizer.json added token: {json.dumps(t)}")


def check_lengths(name, queries, documents, query_length, mask_id):
    """Every query exactly query_length ids; some expanded (ending in [MASK]), some filling the width with text;
    some documents cut at document_length, some with skiplisted tokens. Returns the expanded queries."""
    assert all(len(r["ids"]) == query_length for r in queries), f"{name}: a query not {query_length} tokens"
    expanded = [r for r in queries if r["ids"][-1] == mask_id]
    full = len(queries) - len(expanded)
    docs_cut = sum(len(r["ids"]) == DOCUMENT_LENGTH for r in documents)
    skipped = sum(len(r["kept"]) < len(r["ids"]) for r in documents)
    print(f"{name}: queries {len(expanded)} expanded with [MASK], {full} filling all {query_length} ids "
          f"(truncated or exact); documents {docs_cut} cut at {DOCUMENT_LENGTH}, {skipped} with skiplisted tokens")
    assert expanded and full and docs_cut >= 3 and skipped >= 3, name
    return expanded


def show_tokens(st, text, task):
    pre = st.preprocess([text], prompt=st.prompts[task], task=task)
    print(f"  {task} {text!r}: {st.tokenizer.convert_ids_to_tokens(pre['input_ids'][0].tolist())}")
    print(f"    attention_mask {pre['attention_mask'][0].tolist()}")
    if "query_expansion_positions" in pre:
        print(f"    query_expansion_positions {pre['query_expansion_positions'][0].int().tolist()}")


def assert_shows(name, file, edit, what, task, prompt=None):
    """The fixture tells `what` apart: the same directory with `file` edited (`what` taken out) gives the `task`
    side's token vectors far from the reference (both encoded with `prompt`, PREFIXES' by default)."""
    prompt = PREFIXES[task] if prompt is None else prompt
    d = enc.OUT / name
    plain = enc.OUT / f"{name}_plain"
    shutil.rmtree(plain, ignore_errors=True)
    shutil.copytree(d, plain)
    config = json.loads((plain / file).read_text())
    edit(config)
    (plain / file).write_text(json.dumps(config, indent=2))
    batch = texts()
    a = MultiVectorEncoder(str(d), device="cpu").encode(batch, task=task, prompt=prompt)
    b = MultiVectorEncoder(str(plain), device="cpu").encode(batch, task=task, prompt=prompt)
    shutil.rmtree(plain)
    worst = float((torch.cat(a) * torch.cat(b)).sum(-1).min())
    assert worst < 0.99, f"{name}: without its {what} the {task} token vectors stay within cosine {worst}"
    print(f"{name}: without its {what}, min {task} token cosine {worst:.4f}")


def write_references(name, st, query_length, batch=None, prefixes=PREFIXES):
    """Both reference files (of `batch`, texts() by default), their checks, and what the directory holds
    (printed; `prefixes` the added tokens shown)."""
    d = enc.OUT / name
    batch = texts() if batch is None else batch
    queries = write_reference(d, st, batch, "query")
    documents = write_reference(d, st, batch, "document")
    expanded = check_lengths(name, queries, documents, query_length, st.tokenizer.mask_token_id)
    check_maxsim(st, batch[:3], batch[10:14])
    print(f"{name}: modules {[type(m).__name__ for m in st]}, prompts {st.prompts}, "
          f"query_expansion {st[0].query_expansion}, query_length {st[0].query_length}, "
          f"document_length {st[0].document_length}, max_seq_length {st[0].max_seq_length}")
    skip = st[2]._skiplist_ids.tolist()
    print(f"  skiplist ids {skip} ({st.tokenizer.convert_ids_to_tokens(skip)})")
    added = {t.content: dict(special=t.special, normalized=t.normalized)
             for t in st.tokenizer.added_tokens_decoder.values() if t.content in prefixes.values()}
    print(f"  prefixes in the loaded tokenizer: {added}")
    show_files(d, prefixes)
    show_tokens(st, "is it new?", "query")
    show_tokens(st, "is it new?", "document")
    sizes = {f.relative_to(d).as_posix(): f.stat().st_size for f in d.rglob("*") if f.is_file()}
    total = sum(sizes.values())
    print(f"  files: {sizes}, total {total} bytes")
    assert total < 300_000, f"{name}: {total} bytes"
    return queries, expanded


def bert_colbert():
    name = "bert_colbert"
    d = enc.OUT / name
    shutil.rmtree(d, ignore_errors=True)
    work = enc.OUT / f"{name}_hf"
    tok = enc.bert_tokenizer()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, **enc.BERT_SPECIALS)
    hf_tok.model_max_length = MAX_SEQ
    # The prefixes as one token each, the lowercasing normaliser not applied to them (special, normalized false).
    hf_tok.add_special_tokens({"additional_special_tokens": [
        AddedToken(p, normalized=False, special=True) for p in PREFIXES.values()]})
    model = BertModel(BertConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=MAX_SEQ, pad_token_id=tok.token_to_id("[PAD]"),
        attn_implementation="eager"))  # with its (unused) pooler, seeded: AutoModel would add a random one
    save_backbone(work, model, hf_tok, 41)
    transformer = Transformer(str(work), document_length=DOCUMENT_LENGTH,
                              query_expansion={"strategy": "fixed", "attend": False, "length": 16})
    dense = perturb(Dense(HIDDEN, DIM, bias=False, activation_function=torch.nn.Identity(),
                          module_input_name="token_embeddings"), 42)
    modules = [transformer, dense, MultiVectorMask(skiplist_words=list(string.punctuation)),
               Normalize(module_input_name="token_embeddings")]
    MultiVectorEncoder(modules=modules, prompts=dict(PREFIXES), device="cpu").save(str(d))
    shutil.rmtree(work)
    tidy(d)

    st = MultiVectorEncoder(str(d), device="cpu").eval()
    assert [type(m).__name__ for m in st] == ["Transformer", "Dense", "MultiVectorMask", "Normalize"]
    for p in PREFIXES.values():
        assert st.tokenizer.tokenize(p + "The") == [p, "the"], st.tokenizer.tokenize(p + "The")
    queries, expanded = write_references(name, st, 16)
    assert len(expanded) * 2 > len(queries), f"{name}: most queries should be expanded"
    assert_shows(name, "sentence_bert_config.json", lambda c: c["query_expansion"].update(attend=True),
                 "expansion left unattended", "query")


def save_pylate(d, work, dense):
    """The backbone in `work` and `dense` saved as a MultiVectorEncoder into `d`, then rewritten to PyLate v3's
    layout: modules.json of the Transformer (its old name) and `pylate.models.Dense.Dense` alone, the Transformer's
    config as PyLate left it (document_length - 1), the Dense config without module names."""
    MultiVectorEncoder(modules=[Transformer(str(work)), dense], device="cpu").save(str(d))
    shutil.rmtree(work)
    tidy(d)
    (d / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"}], indent=2))
    (d / "sentence_bert_config.json").write_text(json.dumps(
        {"max_seq_length": DOCUMENT_LENGTH - 1, "do_lower_case": False}, indent=2))
    (d / "1_Dense" / "config.json").write_text(json.dumps(
        {"in_features": HIDDEN, "out_features": DIM, "bias": False,
         "activation_function": "torch.nn.modules.linear.Identity"}, indent=2))


def modernbert_colbert_pylate():
    name = "modernbert_colbert_pylate"
    d = enc.OUT / name
    shutil.rmtree(d, ignore_errors=True)
    work = enc.OUT / f"{name}_hf"
    tok = enc.modernbert_tokenizer()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, **enc.MODERNBERT_SPECIALS)
    hf_tok.model_max_length = MAX_SEQ
    hf_tok.add_tokens(list(PREFIXES.values()))  # as PyLate <= 3 did: plain added tokens, normalized
    model = ModernBertModel(ModernBertConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=MAX_SEQ, global_attn_every_n_layers=2, local_attention=8,
        pad_token_id=tok.token_to_id("[PAD]"), cls_token_id=tok.token_to_id("[CLS]"),
        sep_token_id=tok.token_to_id("[SEP]"), bos_token_id=tok.token_to_id("[CLS]"),
        eos_token_id=tok.token_to_id("[SEP]"), attn_implementation="eager"))
    save_backbone(work, model, hf_tok, 43)
    dense = perturb(Dense(HIDDEN, DIM, bias=False, activation_function=torch.nn.Identity(),
                          module_input_name="token_embeddings"), 44)
    save_pylate(d, work, dense)
    skiplist = [",", ".", "?", "!", ":", "'"]
    (d / "config_sentence_transformers.json").write_text(json.dumps({
        # Illustrative versions of a PyLate-era save (loaders only warn about a newer sentence-transformers).
        "__version__": {"sentence_transformers": "5.1.1", "transformers": "4.56.2", "pytorch": "2.8.0"},
        "prompts": {"query": "", "document": ""}, "default_prompt_name": None, "similarity_fn_name": "MaxSim",
        "query_prefix": PREFIXES["query"], "document_prefix": PREFIXES["document"], "query_length": 12,
        "document_length": DOCUMENT_LENGTH, "attend_to_expansion_tokens": True, "skiplist_words": skiplist,
        "do_query_expansion": True, "model_type": "ColBERT"}, indent=2))

    st = MultiVectorEncoder(str(d), device="cpu").eval()
    # The legacy fixups: PyLate's Dense as sentence-transformers', a MultiVectorMask with the saved skiplist and a
    # token-level Normalize appended, expansion on (attending), the prefixes as prompts.
    assert [type(m).__name__ for m in st] == ["Transformer", "Dense", "MultiVectorMask", "Normalize"], list(st)
    assert st[1].module_input_name == "token_embeddings" and st[3].module_input_name == "token_embeddings"
    assert st[2].skiplist_words == skiplist and st[2].skiplist_tasks == ["document"]
    assert st[0].query_expansion == {"strategy": "fixed", "attend": True, "token": None, "length": 12}, \
        st[0].query_expansion
    assert st[0].document_length == DOCUMENT_LENGTH and st[0].query_length is None
    assert st.prompts["query"] == PREFIXES["query"] and st.prompts["document"] == PREFIXES["document"]
    for p in PREFIXES.values():
        assert st.tokenizer.tokenize(p + "the") == [p, "the"], st.tokenizer.tokenize(p + "the")
    # Nothing re-registered: the prefixes stay the plain added tokens PyLate saved.
    assert all(not t.special and t.normalized for t in st.tokenizer.added_tokens_decoder.values()
               if t.content in PREFIXES.values())
    write_references(name, st, 12)
    assert_shows(name, "config.json", lambda c: c.update(local_attention=4 * MAX_SEQ), "sliding window", "document")
    assert_shows(name, "config_sentence_transformers.json", lambda c: c.update(attend_to_expansion_tokens=False),
                 "attention to the expansion", "query")


def bert_unused_tokenizer():
    """bert_tokenizer's WordPiece laid out as bert-base-uncased's vocabulary is: [PAD], then [unused0] and
    [unused1] as ordinary vocabulary entries (no added tokens: BertPreTokenizer splits their text at the
    brackets, so no text ever gives their ids), then [UNK], [CLS], [SEP], [MASK] and the trained pieces."""
    base = enc.bert_tokenizer()
    vocab = base.get_vocab(with_added_tokens=False)
    order = sorted(vocab, key=vocab.get)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert order[:5] == specials and not set(UNUSED.values()) & set(order), order[:5]
    order = order[:1] + list(UNUSED.values()) + order[1:]
    tok = Tokenizer(tok_models.WordPiece({t: i for i, t in enumerate(order)}, unk_token="[UNK]",
                                         continuing_subword_prefix="##", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(specials[:4])
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=False, normalized=False, special=True)])
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    return tok


def bert_colbert_unused():
    name = "bert_colbert_unused"
    d = enc.OUT / name
    shutil.rmtree(d, ignore_errors=True)
    work = enc.OUT / f"{name}_hf"
    tok = bert_unused_tokenizer()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, **enc.BERT_SPECIALS)
    hf_tok.model_max_length = MAX_SEQ
    model = BertModel(BertConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=MAX_SEQ, pad_token_id=tok.token_to_id("[PAD]"),
        attn_implementation="eager"))
    save_backbone(work, model, hf_tok, 45)
    dense = perturb(Dense(HIDDEN, DIM, bias=False, activation_function=torch.nn.Identity(),
                          module_input_name="token_embeddings"), 46)
    # Built from modules, not loaded from a PyLate save: nothing registers the prefixes, so the tokenizer.json
    # written is the one without them, as the Hub's files are.
    # answerai-colbert-small-v1's settings (no skiplist_words: PyLate's default).
    save_pylate(d, work, dense)
    (d / "config_sentence_transformers.json").write_text(json.dumps({
        "__version__": {"sentence_transformers": "5.1.1", "transformers": "4.56.2", "pytorch": "2.8.0"},
        "prompts": {"query": "", "document": ""}, "default_prompt_name": None, "similarity_fn_name": "MaxSim",
        "query_prefix": UNUSED["query"], "document_prefix": UNUSED["document"], "query_length": 16,
        "document_length": DOCUMENT_LENGTH, "attend_to_expansion_tokens": False, "do_query_expansion": True,
        "model_type": "ColBERT"}, indent=2))

    def saved_added_tokens():
        return [t["content"] for t in json.loads((d / "tokenizer.json").read_text())["added_tokens"]]

    # The saved tokenizer.json alone: the prefixes are vocabulary entries, not added tokens, and their text splits.
    assert saved_added_tokens() == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], saved_added_tokens()
    raw = Tokenizer.from_file(str(d / "tokenizer.json"))
    ids = {t: raw.token_to_id(t) for t in ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", *UNUSED.values()]}
    assert ids["[PAD]"] == 0 and ids["[unused0]"] == 1 and ids["[unused1]"] == 2, ids
    print(f"{name}: ids {ids}, vocabulary {raw.get_vocab_size()}")
    for p in UNUSED.values():
        e = raw.encode(p, add_special_tokens=False)
        assert len(e.ids) > 1 and ids[p] not in e.ids, (p, e.tokens)
        print(f"  raw tokenizer.json: {p!r} -> {e.tokens} {e.ids}")

    st = MultiVectorEncoder(str(d), device="cpu").eval()
    assert [type(m).__name__ for m in st] == ["Transformer", "Dense", "MultiVectorMask", "Normalize"], list(st)
    assert st[1].module_input_name == "token_embeddings" and st[3].module_input_name == "token_embeddings"
    assert st[2].skiplist_words == list(string.punctuation) and st[2].skiplist_tasks == ["document"], \
        st[2].skiplist_words
    assert st[0].query_expansion == {"strategy": "fixed", "attend": False, "token": None, "length": 16}, \
        st[0].query_expansion
    assert st[0].document_length == DOCUMENT_LENGTH and st[0].query_length is None
    assert st.prompts["query"] == UNUSED["query"] and st.prompts["document"] == UNUSED["document"], st.prompts
    # MultiVectorEncoder._register_prefix_tokens: each prefix a special, non-normalised added token at load, one
    # piece wherever its exact text appears (an upper-case [UNUSED1] is not it: matched before lowercasing).
    for p in UNUSED.values():
        assert st.tokenizer.tokenize(p) == [p], st.tokenizer.tokenize(p)
        assert st.tokenizer.convert_tokens_to_ids(p) == ids[p]
    registered = {t.content: t for t in st.tokenizer.added_tokens_decoder.values() if t.content in UNUSED.values()}
    assert set(registered) == set(UNUSED.values()) and all(t.special and not t.normalized
                                                           for t in registered.values()), registered
    pieces = st.tokenizer.tokenize("a[unused0]b [UNUSED1]")
    assert pieces[:3] == ["a", "[unused0]", "b"] and "[unused1]" not in pieces, pieces
    print(f"  as loaded: 'a[unused0]b [UNUSED1]' -> {pieces}")
    batch = texts() + ["is [unused0] a word? x[unused1]y, not [UNUSED1]."]
    queries, _ = write_references(name, st, 16, batch, UNUSED)
    documents = [json.loads(line) for line in open(d / "document_reference.jsonl", encoding="utf-8")]
    cls = ids["[CLS]"]
    assert all(r["ids"][:2] == [cls, ids["[unused0]"]] for r in queries)
    assert all(r["ids"][:2] == [cls, ids["[unused1]"]] for r in documents)
    assert all(r["attended"] < 16 for r in queries if r["ids"][-1] == ids["[MASK]"])
    # Registration is in memory only: the file stays as saved.
    assert saved_added_tokens() == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], saved_added_tokens()
    # Without the registration (the prefix moved into the prompt, where nothing registers it) "[unused0]" splits.
    assert_shows(name, "config_sentence_transformers.json",
                 lambda c: c.update(query_prefix="", prompts={"query": UNUSED["query"], "document": ""}),
                 "[unused0] registered as one token", "query", UNUSED["query"])


FIXTURES = [bert_colbert, modernbert_colbert_pylate, bert_colbert_unused]


def main():
    enc.make_named(FIXTURES)


if __name__ == "__main__":
    main()
