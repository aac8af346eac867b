#!/usr/bin/env python3
"""The engine through the API: the server's own `metrics.latency_ms` of
POST /v2/verify with five ~2 KB sources (the texts of
crates/verdict-engine/benches/engine.rs), for one claim and twenty against the
same sources, and one claim against sources never sent before. Each binary
given runs as `verdict serve` on 127.0.0.1:0 (zero config, its own temp data
dir); the binaries take turns over 4 rounds of 150 calls per case, and the
median of each round is printed.

Usage: python3 bench/verify_latency.py target/release/verdict [OTHER_BUILD ...]
"""
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

# The sentences and claims are the engine bench's own, read from its source
# so that the two benches measure the same texts.
BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                     "crates", "verdict-engine", "benches", "engine.rs")


def literals(block):
    return [json.loads(x) for x in re.findall(r'"(?:[^"\\]|\\.)*"', block)]


with open(BENCH) as f:
    _src = f.read()
SENT = literals(re.search(r"const SENTENCES: &\[&str\] = &\[(.*?)\];", _src, re.S).group(1))
CLAIMS = literals(re.search(r"let texts = \[(.*?)\];", _src, re.S).group(1))
assert len(SENT) == 10 and len(CLAIMS) == 5, (SENT, CLAIMS)
def text_of(k, pick):
    t, n = "", 0
    while len(t) < 2048:
        s, num = pick(n); t += s.replace("{n}", str(num)) + " "; n += 1
    return {"id": f"src-{k}", "type": "text", "text": t}
def source(k): return text_of(k, lambda n: (SENT[(n+k) % len(SENT)], 1000 + n*7 + k))
def variant(k, v): return text_of(k, lambda n: (SENT[(n+k+v) % len(SENT)], 1000 + (n*7 + 13*k + v) % 997))
def body(nclaims, sources):
    return json.dumps({"claims": [{"id": f"c{i}", "text": CLAIMS[i % len(CLAIMS)]} for i in range(nclaims)], "sources": sources}).encode()
def start(binary):
    d = tempfile.mkdtemp()
    log = open(d + "/log", "w")
    p = subprocess.Popen([binary, "serve", "--api-listen", "127.0.0.1:0", "--data-dir", d + "/data", "--policies", d],
                         stdout=log, stderr=subprocess.DEVNULL, text=True)
    for _ in range(300):
        time.sleep(0.05)
        for line in open(d + "/log"):
            if "api listening" in line:
                return p, json.loads(line)["addr"]
    raise SystemExit(f"{binary} did not start")
def call(addr, b):
    r = urllib.request.Request(f"http://{addr}/v2/verify", data=b, headers={"content-type": "application/json"})
    return json.loads(urllib.request.urlopen(r).read())["metrics"]["latency_ms"]
bins = sys.argv[1:]
servers = [start(b) for b in bins]
res = {b: {} for b in bins}
for rnd in range(4):
    order = servers if rnd % 2 == 0 else servers[::-1]
    for (p, addr), b in zip(order, bins if rnd % 2 == 0 else bins[::-1]):
        warm = [source(k) for k in range(5)]
        for case, mk in [("1 claim, same sources", lambda i: body(1, warm)),
                         ("20 claims, same sources", lambda i: body(20, warm)),
                         ("1 claim, new sources", lambda i: body(1, [variant(k, rnd*1000 + i + 1) for k in range(5)]))]:
            for i in range(5): call(addr, mk(i))
            xs = [call(addr, mk(i + 10)) for i in range(150)]
            res[b].setdefault(case, []).append(statistics.median(xs))
for p, _ in servers: p.send_signal(signal.SIGTERM)
for b in bins:
    for case, v in res[b].items():
        print(f"{os.path.basename(b):22} {case:26} medians per round (ms): {' '.join('%.3f' % x for x in v)}  min {min(v):.3f}")
