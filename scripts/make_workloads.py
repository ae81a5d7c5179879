#!/usr/bin/env python3
"""Copy the shippable part of ../shared/data into workloads/ (see ../shared/data/README.md for licenses).

Only rows whose license lets the project ship them are copied, capped per file so the repository stays small.
Run from the repository root: python3 scripts/make_workloads.py [--shared ../shared]
"""
import argparse, json, os, shutil

# file -> (predicate on source, cap on rows)
CORPORA = {
    "queries_multilingual": (lambda s: s.startswith(("miracl", "mrtydi")), 20000),
    "passages_en": (lambda s: s.startswith(("nltk-", "jargon-")), 4000),
    "passages_multilingual": (lambda s: s.startswith("nltk-genesis"), 2000),
    "long_docs_en": (lambda s: s.startswith(("nltk-state_union", "nltk-inaugural", "nltk-movie_reviews")), 400),
    "long_docs_multilingual": (lambda s: s.startswith("nltk-udhr"), 300),
    "nasty_unicode": (lambda s: not s.startswith("debian-"), 100000),
}

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default="../shared")
    args = ap.parse_args()
    text = os.path.join(args.shared, "data", "text")
    os.makedirs("workloads/text", exist_ok=True)
    for name, (keep, cap) in CORPORA.items():
        rows = []
        with open(os.path.join(text, name + ".jsonl"), encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                if keep(d["source"]):
                    rows.append(line)
        # Spread the cap over the whole file rather than taking its head, so every source stays represented.
        step = max(1, len(rows) // cap)
        rows = rows[::step][:cap]
        with open(f"workloads/text/{name}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(rows)
        print(f"{name}: {len(rows)} rows")
    traces = os.path.join(args.shared, "data", "traces")
    os.makedirs("workloads/traces", exist_ok=True)
    for entry in os.listdir(traces):
        src = os.path.join(traces, entry)
        dst = os.path.join("workloads/traces", entry)
        if os.path.isdir(src):
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            shutil.copyfile(src, dst)
    print("traces copied")

if __name__ == "__main__":
    main()
