#!/usr/bin/env python3
"""Tables of the issue-14 figures from the result.json files scripts/overload_figures.sh wrote.

Usage: python3 scripts/overload_table.py PREFIX   (e.g. 20261203; reads results/PREFIX-*)"""
import glob
import json
import sys

prefix = sys.argv[1] if len(sys.argv) > 1 else "20261203"


def load(name):
    try:
        return json.load(open(f"results/{prefix}-{name}/result.json"))
    except OSError:
        return None


def main_class(d, i=0):
    return d["configs"][0]["steps"][0]["classes"][i]


print("| binary | target | offered x | offered req/s | achieved req/s | goodput req/s | p50 ms | p99 ms | refused | refusal p99 ms |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for b in ("old", "new"):
    for target in ("in-process", "serve"):
        for x in (1, 2, 3):
            d = load(f"overload-{b}-{target}-{x}x")
            if not d:
                continue
            c = main_class(d)
            r = c.get("refusal_ms")
            print(
                f"| {b} | {target} | {x}x | {c['offered_rps']:.1f} | {c['achieved_rps']:.1f} | {c['goodput_rps']:.1f} | "
                f"{c['latency_ms']['p50']:.1f} | {c['latency_ms']['p99']:.1f} | {c['refused']} | "
                f"{r['p99']:.2f} |" if r else
                f"| {b} | {target} | {x}x | {c['offered_rps']:.1f} | {c['achieved_rps']:.1f} | {c['goodput_rps']:.1f} | "
                f"{c['latency_ms']['p50']:.1f} | {c['latency_ms']['p99']:.1f} | {c['refused']} | - |"
            )
print()
print("| binary | run | online offered | online p50 ms | online p99 ms | online goodput | re-index tokens/s |")
print("|---|---|---:|---:|---:|---:|---:|")
for b in ("old", "new"):
    for run in ("alone", "reindex"):
        d = load(f"mixed-{b}-{run}")
        if not d:
            continue
        c = main_class(d)
        classes = d["configs"][0]["steps"][0]["classes"]
        tok = f"{classes[1]['tokens_per_s']:.0f}" if len(classes) > 1 else "-"
        print(f"| {b} | {run} | {c['offered_rps']:.1f} | {c['latency_ms']['p50']:.1f} | {c['latency_ms']['p99']:.1f} | {c['goodput_rps']:.1f} | {tok} |")
print()
for name in ("sweep-online-old", "sweep-online-new"):
    d = load(name)
    if d:
        print(f"{name}: saturation {d['configs'][0]['saturation']['value']} req/s")
d = load("sweep-online-overlap")
if d:
    for c in d["configs"]:
        print(f"overlap sweep, {c['label']}: saturation {c['saturation']['value']} req/s")
for dtype in ("f32", "bf16"):
    try:
        c = json.load(open(f"results/{prefix}-curve-{dtype}.json"))
    except OSError:
        continue
    print(f"\ncurve {dtype} ({c['device']}, {c['threads']} threads): auto budget {c['budget']} tokens")
    print("| batch tokens | p50 ms | tokens/s | of peak |")
    print("|---:|---:|---:|---:|")
    for p in c["points"]:
        print(f"| {p['tokens']} | {p['p50_ms']:.2f} | {p['tokens_per_s']:.0f} | {100 * p['of_peak']:.0f}% |")
d = load("soak")
if d:
    s = d["configs"][0]["steps"][0]
    c = s["classes"][0]
    rss = s.get("rss_mib", [])
    print(f"\nsoak at {c['offered_rps']:.1f} req/s: p99 {c['latency_ms']['p99']:.1f} ms, goodput {c['goodput_rps']:.1f}")
    print("| minute | answered/s | p50 ms | p99 ms | RSS MiB (max) |")
    print("|---:|---:|---:|---:|---:|")
    for i, m in enumerate(c.get("minutes", [])):
        r = [mib for t, mib in rss if m["t"] <= t < m["t"] + 60]
        print(f"| {i + 1} | {m['answered'] / 60:.1f} | {m['p50_ms']:.1f} | {m['p99_ms']:.1f} | {max(r):.0f} |" if r else
              f"| {i + 1} | {m['answered'] / 60:.1f} | {m['p50_ms']:.1f} | {m['p99_ms']:.1f} | - |")
