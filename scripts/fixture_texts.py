"""The texts the tiny-model fixture scripts (make_qwen3_fixtures.py, make_encoder_fixtures.py) embed: a seeded
sample of the shipped corpora, every length regime and script, nasty unicode included."""
import json
import random


def sample(seed):
    rng = random.Random(seed)
    picks = []
    for name, n in [("queries_multilingual", 12), ("passages_en", 6), ("passages_multilingual", 4),
                    ("long_docs_en", 3), ("nasty_unicode", 8)]:
        rows = [json.loads(l)["text"] for l in open(f"workloads/text/{name}.jsonl", encoding="utf-8")]
        rows = [r for r in rows if r and len(r) < 20000]
        picks += rng.sample(rows, n)
    return picks
