#!/usr/bin/env python3
"""Real clients against `bench serve`: the official `openai` package (embeddings in every encoding_format,
`models.list()`), Hugging Face's `InferenceClient` given the server's URL (`feature_extraction`,
`sentence_similarity`) and a TEI-style /embed request must all get the engine's own embeddings.

Usage: python3 scripts/openai_client_test.py --base-url http://127.0.0.1:PORT --reference ref.json [--no-hf]
where ref.json is {"model": NAME, "texts": [...], "embeddings": [[...], ...]} computed in-process by the engine.
Exits 0 when every vector matches (compared as float32), 1 otherwise. `--no-hf` leaves out InferenceClient.
Needs: pip install openai huggingface_hub
"""
import argparse, base64, json, math, struct, sys, urllib.request

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
    p.add_argument("--no-hf", action="store_true", help="skip huggingface_hub's InferenceClient")
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

    ok &= check_formats(client, ref["model"], texts, want)
    ids = [m.id for m in client.models.list()]
    ok &= ids[:1] == [ref["model"]]
    ok &= client.models.retrieve(ref["model"]).id == ref["model"]
    print(f"{'ok  ' if ids[:1] == [ref['model']] else 'FAIL'} openai models.list(): {ids}")
    if not args.no_hf:
        ok &= check_inference_client(args.base_url, texts, want)

    req = urllib.request.Request(
        args.base_url + "/embed",
        data=json.dumps({"inputs": texts}).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req) as r:
        ok &= check("TEI /embed", json.load(r), want)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def check_formats(client, model, texts, want):
    """int8_scaled gives the vector back within half a step; ubinary and binary are its sign bits, packed."""
    ok = True
    scaled = client.embeddings.create(model=model, input=texts, encoding_format="int8_scaled")
    for d, w in zip(sorted(scaled.data, key=lambda d: d.index), want):
        scale = d.model_extra["scale"]
        ok &= all(abs(q * scale - x) <= scale / 2 + 1e-6 for q, x in zip(d.embedding, w))
    bits = [[sum(1 << (7 - i) for i, x in enumerate(w[j:j + 8]) if x > 0) for j in range(0, len(w), 8)] for w in want]
    for fmt, offset in (("ubinary", 0), ("binary", -128)):
        resp = client.embeddings.create(model=model, input=texts, encoding_format=fmt)
        got = [d.embedding for d in sorted(resp.data, key=lambda d: d.index)]
        ok &= got == [[b + offset for b in row] for row in bits]
        raw = client.embeddings.create(model=model, input=texts, encoding_format=fmt + "_base64")
        ok &= [list(base64.b64decode(d.embedding)) for d in raw.data] == [[b % 256 for b in g] for g in got]
    print(f"{'ok  ' if ok else 'FAIL'} openai encoding_format int8_scaled, binary, ubinary (and _base64)")
    return ok


def check_inference_client(base_url, texts, want):
    """huggingface_hub's InferenceClient given the server's URL posts to `/`: feature_extraction gets the
    embedding, sentence_similarity the cosines."""
    from huggingface_hub import InferenceClient

    hf = InferenceClient(model=base_url)
    got = hf.feature_extraction(texts[0])
    ok = check("huggingface_hub InferenceClient.feature_extraction", [list(got[0])], want[:1], tol=1e-5)
    sims = hf.sentence_similarity(texts[0], other_sentences=texts[1:])

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))

    expected = [cos(want[0], w) for w in want[1:]]
    close = len(sims) == len(expected) and all(abs(a - b) < 1e-5 for a, b in zip(sims, expected))
    print(f"{'ok  ' if close else 'FAIL'} huggingface_hub InferenceClient.sentence_similarity: {sims} vs {expected}")
    return ok and close


if __name__ == "__main__":
    sys.exit(main())
