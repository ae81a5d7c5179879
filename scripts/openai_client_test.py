#!/usr/bin/env python3
"""A real client against `bench serve`: the official `openai` package and a TEI-style /embed request must both get
the engine's own embeddings.

Usage: python3 scripts/openai_client_test.py --base-url http://127.0.0.1:PORT --reference ref.json
where ref.json is {"model": NAME, "texts": [...], "embeddings": [[...], ...]} computed in-process by the engine.
Exits 0 when every vector matches (compared as float32), 1 otherwise.
Needs: pip install openai
"""
import argparse, base64, json, struct, sys, urllib.request

import openai


def f32(xs):
    """Rounds to float32, so JSON decimals and base64-decoded floats compare exactly."""
    xs = [float(x) for x in xs]
    return list(struct.unpack(f"{len(xs)}f", struct.pack(f"{len(xs)}f", *xs)))


def check(label, got, want, tol=0.0):
    """Same batch, same bits: tol 0. A batch of another composition rounds differently (GEMM blocking)."""
    diffs = [max(abs(a - b) for a, b in zip(f32(g), f32(w))) for g, w in zip(got, want)]
    if len(got) != len(want) or any(len(g) != len(w) for g, w in zip(got, want)) or max(diffs) > tol:
        print(f"FAIL {label}: {len(got)} vectors for {len(want)} inputs; max difference {max(diffs, default=0)}")
        return False
    print(f"ok   {label}: {len(got)} embeddings equal to the engine's (max difference {max(diffs)})")
    return True


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--reference", required=True)
    args = p.parse_args()
    ref = json.load(open(args.reference))
    texts, want = ref["texts"], ref["embeddings"]

    client = openai.OpenAI(base_url=args.base_url + "/v1", api_key="not-needed")
    ok = True
    # Left unset, the client asks for base64 and decodes it itself; asked for explicitly, base64 comes back raw.
    for fmt in (None, "float", "base64"):
        extra = {} if fmt is None else {"encoding_format": fmt}
        resp = client.embeddings.create(model=ref["model"], input=texts, **extra)
        got = [d.embedding for d in sorted(resp.data, key=lambda d: d.index)]
        if fmt == "base64":
            raws = [base64.b64decode(raw) for raw in got]
            got = [list(struct.unpack(f"{len(raw) // 4}f", raw)) for raw in raws]
        ok &= check(f"openai encoding_format={fmt or 'default'}", got, want)
        ok &= resp.usage.prompt_tokens > 0 and resp.usage.total_tokens == resp.usage.prompt_tokens
        ok &= resp.model == ref["model"]
    one = client.embeddings.create(model=ref["model"], input=texts[0])
    ok &= check("openai single string", [one.data[0].embedding], want[:1], tol=1e-5)
    short = client.embeddings.create(model=ref["model"], input=texts[:2], dimensions=16)
    ok &= all(len(d.embedding) == 16 for d in short.data)
    try:
        client.embeddings.create(model=ref["model"], input="")
        print("FAIL empty string was accepted")
        ok = False
    except openai.BadRequestError as e:
        print(f"ok   empty string refused: {e.status_code}")

    req = urllib.request.Request(
        args.base_url + "/embed",
        data=json.dumps({"inputs": texts}).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req) as r:
        ok &= check("TEI /embed", json.load(r), want)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
