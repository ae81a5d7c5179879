#!/usr/bin/env bash
# RSS of `bench serve` under abuse (issue 20): the saturation rate measured first (open loop far past capacity,
# 10 s: the answered rate is what the server can do), then 3x that rate for 60 s while hostile clients (idle
# connections up to the limit, slow bodies, bodies over the limit with and without content-length, garbage heads)
# hammer the same server; /proc/PID/status sampled every second. Writes results/<date>-rss-under-abuse/: rss.csv
# (time, phase, VmRSS, VmHWM in MiB), summary.md; fails when the peak passes BOUND_MIB (default 1024).
#   scripts/rss_under_abuse.sh [--model DIR]     (default: the default model)
# The machine may be shared: the rates are this run's, not figures.
set -euo pipefail
cd "$(dirname "$0")/.."
bound="${BOUND_MIB:-1024}"
cargo build --release -p harness
bench="${CARGO_TARGET_DIR:-target}/release/bench"
day=$(date -u +%Y%m%d)
out="results/$day-rss-under-abuse"
mkdir -p "$out"
# No API key: the harness sends none. The hostile clients send one anyway, which a keyless server ignores.
key=unused
"$bench" serve --port 0 --max-connections 256 "$@" > "$out/serve.out" 2> "$out/serve.err" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 600); do grep -q listening "$out/serve.out" 2>/dev/null && break; sleep 0.5; done
url=$(sed -n 's/^listening on //p' "$out/serve.out")
[ -n "$url" ] || { echo "bench serve did not start:" >&2; cat "$out/serve.err" >&2; exit 1; }

sample() { # phase seconds
  local end=$((SECONDS + $2))
  while [ "$SECONDS" -lt "$end" ]; do
    awk -v t="$SECONDS" -v p="$1" '/^VmRSS/ {r=$2} /^VmHWM/ {h=$2} END {printf "%s,%s,%.1f,%.1f\n", t, p, r/1024, h/1024}' "/proc/$pid/status" >> "$out/rss.csv"
    sleep 1
  done
}
echo "t_s,phase,rss_mib,hwm_mib" > "$out/rss.csv"
SECONDS=0
sample idle 3

replay() { # rate seconds run-id
  "$bench" replay --target "$url" --api openai --workload online --rate "$1" \
    --duration-s "$2" --run-id "$3" --results-dir "$out/runs" --reports-dir "$out/runs" > /dev/null 2>&1 || true
  # achieved/s of the step (summary.csv's 7th column)
  awk -F, 'NR == 2 { print $7 }' "$out/runs/$3/summary.csv"
}
sample probe 12 &
sampler=$!
saturation=$(replay 2000 10 probe)
wait $sampler
if ! python3 -c "import sys; sys.exit(float('$saturation') <= 0)"; then
  echo "the probe answered nothing: see $out/runs/probe" >&2
  exit 1
fi
rate=$(python3 -c "print(round(3 * float('$saturation'), 1))")
echo "saturation (answered/s at 2000 req/s offered): $saturation; abuse at 3x: $rate req/s"

python3 - "$url" "$key" 60 > "$out/abuse.txt" <<'PY' &
# Hostile clients for the whole load: connections held idle, bodies trickled, bodies over the limit, garbage.
import socket, sys, threading, time
url, key, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
host, port = url.removeprefix("http://").split(":")
end = time.time() + seconds
counts = {}
lock = threading.Lock()
def count(what):
    with lock: counts[what] = counts.get(what, 0) + 1
def conn():
    s = socket.create_connection((host, int(port)), timeout=15); return s
def idle():
    while time.time() < end:
        try:
            s = conn(); count("idle"); s.recv(1)   # closed by the head timeout
        except OSError: time.sleep(0.1)
def slow_body():
    while time.time() < end:
        try:
            s = conn(); s.sendall(f"POST /embed HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{".encode())
            count("slow_body"); s.recv(4096)
        except OSError: time.sleep(0.1)
def oversized(chunked):
    body = b'{"input": "' + b"x" * (5 << 20) + b'"}'
    while time.time() < end:
        try:
            s = conn()
            if chunked:
                s.sendall(f"POST /v1/embeddings HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n".encode())
                for i in range(0, len(body), 65536):
                    c = body[i:i + 65536]; s.sendall(b"%x\r\n" % len(c) + c + b"\r\n")
                s.sendall(b"0\r\n\r\n")
            else:
                s.sendall(f"POST /v1/embeddings HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body)
            count("oversized_chunked" if chunked else "oversized"); s.recv(4096); s.close()
        except OSError: count("oversized_reset")
def garbage():
    while time.time() < end:
        try:
            s = conn(); s.sendall(b"GARBAGE \x00\xff\r\n\r\n")
            r = s.recv(4096); count("garbage_" + r[9:12].decode(errors="replace")); s.close()
        except OSError: time.sleep(0.01)
threads = [threading.Thread(target=idle) for _ in range(100)] + [threading.Thread(target=slow_body) for _ in range(50)]
threads += [threading.Thread(target=oversized, args=(c,)) for c in (False, True) for _ in range(2)] + [threading.Thread(target=garbage) for _ in range(2)]
for t in threads: t.daemon = True; t.start()
time.sleep(seconds + 1)
print(" ".join(f"{k}={v}" for k, v in sorted(counts.items())))
PY
abuse=$!
sample abuse 62 &
sampler=$!
achieved=$(replay "$rate" 60 abuse)
wait $abuse || true
wait $sampler
sample after 5
kill -TERM $pid; wait $pid || true
trap - EXIT

python3 - "$out" "$saturation" "$rate" "$achieved" "$bound" <<'PY'
import csv, sys
out, saturation, rate, achieved, bound = sys.argv[1:]
rows = list(csv.DictReader(open(f"{out}/rss.csv")))
by = lambda p: [float(r["rss_mib"]) for r in rows if r["phase"] == p]
peak = max(float(r["hwm_mib"]) for r in rows)
abuse = open(f"{out}/abuse.txt").read().strip()
text = f"""# RSS of `bench serve` under abuse

`scripts/rss_under_abuse.sh` on a machine shared with other work (rates are this run's, not figures).
Saturation, measured as the answered rate at 2000 req/s offered for 10 s: {saturation} req/s. Then {rate} req/s
(3x) for 60 s (answered {achieved}/s; the rest refused 429) while hostile clients ran against the same server:
{abuse}.

| phase | RSS min MiB | RSS max MiB |
|---|---:|---:|
""" + "\n".join(f"| {p} | {min(by(p)):.1f} | {max(by(p)):.1f} |" for p in ("idle", "probe", "abuse", "after") if by(p)) + f"""

Peak RSS (VmHWM) {peak:.1f} MiB; bound {bound} MiB: {"within" if peak <= float(bound) else "EXCEEDED"}.
"""
open(f"{out}/summary.md", "w").write(text)
print(text)
sys.exit(0 if peak <= float(bound) else 1)
PY
