#!/usr/bin/env python3
"""Evaluate the fine-tuned cross-encoder on WiCE, alone and combined with the
lexical engine (issue 47, step 2).

Subcommands:

  lexical  --wice F --out F [--url U]
      POST every WiCE claim to a running `verdict serve` (/v2/verify), one
      inline source whose text is the evidence sentences joined by '\\n'
      (as examples/eval.rs's `wice` does, default params), and store status,
      coverage and reasons per claim.
  model    --wice F --model DIR --out F [--window 3 --stride 2 --max-len 256]
      Score each claim against sliding windows of its evidence sentences;
      store, per claim, the max entailment and max contradiction
      probability over windows.
  choose   --lexical F --scores F --out F [--max-fsr 0.10]
      On dev: choose t (model alone, and combined) and c (combined) to
      maximise balanced accuracy with the false-supported rate (share of
      partially/not-supported claims predicted supported) <= max-fsr.
      Writes the frozen choice as JSON.
  report   --lexical F --scores F --choice F
      Apply a frozen choice: confusion, BAcc, false-supported rate, recall
      for lexical alone, model alone and combined; and the lexical engine
      with its coverage threshold moved to the combined rule's
      false-supported rate.
  bench    --model DIR [--runs 50 --max-len 256]
      Median latency of one claim-passage pair at max-len tokens, 1 thread.

WiCE test is for `report` once, after `choose` ran on dev and its output was
written down; nothing here chooses on test.
"""
import argparse
import json
import statistics
import sys
import time
import urllib.request

from overlap import words

GOLD_POS = "supported"


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


# ---------------------------------------------------------------- lexical
def cmd_lexical(a):
    rows = read_jsonl(a.wice)
    out = open(a.out, "w")
    t0 = time.time()
    for r in rows:
        joined = "".join(s.replace("\n", " ") + "\n" for s in r["evidence"])
        body = {
            "claims": [{"id": "c1", "text": r["claim"]}],
            "sources": [{"source_id": "evidence", "text": joined}],
            "response": {"mode": "verbose"},
        }
        req = urllib.request.Request(
            a.url.rstrip("/") + "/v2/verify",
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(req) as resp:
            ans = json.loads(resp.read())
        ch = ans["checks"][0]
        out.write(json.dumps({
            "id": r["meta"]["id"],
            "gold": r["label"],
            "status": ch["status"],
            "coverage": ch["coverage"],
            "reasons": ch.get("reasons", []),
        }) + "\n")
    out.close()
    print(f"{len(rows)} claims in {time.time() - t0:.1f} s -> {a.out}")


# ---------------------------------------------------------------- model
def load_model(path, threads):
    import torch
    from transformers import AutoTokenizer, AutoModelForSequenceClassification

    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path)
    model.eval()
    return tok, model



def top_windows(claim, wins, k):
    """The k windows sharing the most content words with the claim (all when
    k is 0): a lexical pre-filter that keeps inference cost bounded."""
    if not k or len(wins) <= k:
        return wins
    cw = set(words(claim))
    ranked = sorted(range(len(wins)), key=lambda i: (-len(cw & set(words(wins[i]))), i))
    return [wins[i] for i in sorted(ranked[:k])]


def overlap_window(claim, sentences, n):
    """One extra window: the n sentences sharing the most content words with
    the claim, in page order (a supporting set is often not contiguous)."""
    cw = set(words(claim))
    ranked = sorted(range(len(sentences)), key=lambda i: (-len(cw & set(words(sentences[i]))), i))
    return " ".join(sentences[i] for i in sorted(ranked[:n]))


def windows(sentences, size, stride):
    n = len(sentences)
    if n == 0:
        return [""]
    starts = list(range(0, max(n - size, 0) + 1, stride))
    if starts[-1] + size < n:
        starts.append(n - size)
    return [" ".join(sentences[s:s + size]) for s in starts]


def cmd_model(a):
    import torch

    tok, model = load_model(a.model, a.threads)
    id2label = {int(k): v for k, v in model.config.id2label.items()}
    ent = [k for k, v in id2label.items() if v == "entailed"][0]
    con = [k for k, v in id2label.items() if v == "contradicted"][0]
    rows = read_jsonl(a.wice)
    pairs = []  # (row index, claim, window)
    for i, r in enumerate(rows):
        for w in top_windows(r["claim"], windows(r["evidence"], a.window, a.stride), a.top_windows):
            pairs.append((i, r["claim"], w))
        if a.overlap_window:
            pairs.append((i, r["claim"], overlap_window(r["claim"], r["evidence"], a.overlap_window)))
    # Sort by length so that padding is small; batch of a.batch pairs.
    enc_len = [len(c) + len(w) for _, c, w in pairs]
    order = sorted(range(len(pairs)), key=lambda k: enc_len[k])
    best_e = [0.0] * len(rows)
    best_c = [0.0] * len(rows)
    t0 = time.time()
    ntok = 0
    with torch.inference_mode():
        for b in range(0, len(order), a.batch):
            idx = order[b:b + a.batch]
            enc = tok([pairs[k][1] for k in idx], [pairs[k][2] for k in idx],
                      truncation="only_second", max_length=a.max_len,
                      padding=True, return_tensors="pt")
            ntok += int(enc["attention_mask"].sum())
            p = torch.softmax(model(**enc).logits.float(), dim=-1)
            for j, k in enumerate(idx):
                i = pairs[k][0]
                best_e[i] = max(best_e[i], float(p[j, ent]))
                best_c[i] = max(best_c[i], float(p[j, con]))
    dt = time.time() - t0
    with open(a.out, "w") as f:
        for i, r in enumerate(rows):
            f.write(json.dumps({"id": r["meta"]["id"], "gold": r["label"],
                                "entail_max": best_e[i], "contra_max": best_c[i]}) + "\n")
    print(f"{len(rows)} claims, {len(pairs)} windows, {ntok} tokens in {dt:.1f} s "
          f"({ntok / dt:.0f} tok/s, {dt / len(rows) * 1e3:.0f} ms/claim) -> {a.out}")


# ---------------------------------------------------------------- rules
def join(lex_path, sc_path):
    lex = {r["id"]: r for r in read_jsonl(lex_path)}
    sc = {r["id"]: r for r in read_jsonl(sc_path)}
    assert lex.keys() == sc.keys(), "lexical and model files cover different claims"
    return [dict(lex[k], **sc[k]) for k in lex]


def is_contra(r):
    contra = {"number_mismatch", "date_mismatch", "amount_mismatch", "number_not_found",
              "negation_conflict", "status_conflict", "hedged_evidence", "scope_conflict",
              "party_conflict", "name_missing", "citation_not_found"}
    return any(x in contra for x in r["reasons"])


def pred_lexical(r, _):
    return r["status"] == "supported"


def pred_model(r, ch):
    return r["entail_max"] >= ch["t_model"]


def pred_combined(r, ch):
    return ((r["status"] == "supported" and r["contra_max"] < ch["c"])
            or (r["status"] == "ambiguous" and r["entail_max"] >= ch["t"]))


def metrics(rows, pred):
    tp = fn = tn = fp = 0
    for r in rows:
        g = r["gold"] == GOLD_POS
        p = pred(r)
        tp += g and p
        fn += g and not p
        tn += (not g) and not p
        fp += (not g) and p
    tpr = tp / max(tp + fn, 1)
    fsr = fp / max(tn + fp, 1)
    return {"bacc": 0.5 * (tpr + 1 - fsr), "recall": tpr, "fsr": fsr,
            "tp": tp, "fn": fn, "tn": tn, "fp": fp}


def grid(values):
    vs = sorted(set(values))
    # candidate thresholds: every observed value, plus one above the max
    return vs + [1.01]


def cmd_choose(a):
    rows = join(a.lexical, a.scores)
    best_m = None
    for t in grid(r["entail_max"] for r in rows):
        m = metrics(rows, lambda r: pred_model(r, {"t_model": t}))
        if m["fsr"] <= a.max_fsr and (best_m is None or (m["bacc"], -m["fsr"]) >
                                      (best_m[1]["bacc"], -best_m[1]["fsr"])):
            best_m = (t, m)
    best_c = None
    ts = grid(r["entail_max"] for r in rows if r["status"] == "ambiguous")
    cs = grid(r["contra_max"] for r in rows if r["status"] == "supported")
    for t in ts:
        for c in cs:
            ch = {"t": t, "c": c}
            m = metrics(rows, lambda r: pred_combined(r, ch))
            if m["fsr"] <= a.max_fsr and (best_c is None or (m["bacc"], -m["fsr"]) >
                                          (best_c[1]["bacc"], -best_c[1]["fsr"])):
                best_c = (ch, m)
    lx = lexical_at_fsr(rows, a.max_fsr)
    choice = {"t_model": best_m[0], "t": best_c[0]["t"], "c": best_c[0]["c"],
              "lex_min_coverage": lx[0], "dev_lexical_swept": lx[1],
              "max_fsr": a.max_fsr, "chosen_on": a.scores,
              "dev_model_alone": best_m[1], "dev_combined": best_c[1]}
    json.dump(choice, open(a.out, "w"), indent=1)
    print(json.dumps(choice, indent=1))


def confusion(rows, pred):
    labs = ["supported", "partially_supported", "not_supported"]
    out = {g: [0, 0] for g in labs}
    for r in rows:
        out[r["gold"]][0 if pred(r) else 1] += 1
    return out


def lexical_at_fsr(rows, fsr_target):
    """The lexical engine with min_coverage moved (contradictions stay
    unsupported, as eval.rs's sweep): the best BAcc whose false-supported
    rate is at most fsr_target."""
    best = None
    for th in grid(r["coverage"] for r in rows):
        m = metrics(rows, lambda r: (not is_contra(r)) and r["coverage"] >= th)
        if m["fsr"] <= fsr_target + 1e-12 and (best is None or m["bacc"] > best[1]["bacc"]):
            best = (th, m)
    return best


def fmt(m):
    return (f"BAcc {m['bacc']:.4f}  recall {m['recall']:.4f}  false-supported {m['fsr']:.4f}  "
            f"(tp {m['tp']} fn {m['fn']} tn {m['tn']} fp {m['fp']})")


def cmd_report(a):
    rows = join(a.lexical, a.scores)
    ch = json.load(open(a.choice))
    print(f"claims {len(rows)}; choice t_model {ch['t_model']:.4f}, t {ch['t']:.4f}, c {ch['c']:.4f}")
    lex3 = {}
    for r in rows:
        lex3.setdefault(r["gold"], {}).setdefault(r["status"], 0)
        lex3[r["gold"]][r["status"]] += 1
    print("lexical 3-way (gold -> status):", json.dumps(lex3))
    res = {}
    for name, pred in [("lexical (default 0.85)", pred_lexical), ("model alone", pred_model),
                       ("combined", pred_combined)]:
        m = metrics(rows, lambda r: pred(r, ch))
        res[name] = m
        cf = confusion(rows, lambda r: pred(r, ch))
        print(f"{name:<24} {fmt(m)}")
        print(f"{'':<24} predicted supported / not, by gold: {json.dumps(cf)}")
    th = ch["lex_min_coverage"]
    m = metrics(rows, lambda r: (not is_contra(r)) and r["coverage"] >= th)
    print(f"{'lexical, min_cov ' + format(th, '.4f'):<24} {fmt(m)}  (threshold chosen on dev at FSR <= {ch['max_fsr']})")
    for name in ["combined", "model alone"]:
        lx = lexical_at_fsr(rows, res[name]["fsr"])
        print(f"lexical swept on these claims to FSR <= {name}'s ({res[name]['fsr']:.4f}): "
              f"min_coverage {lx[0]:.4f}: {fmt(lx[1])}")


# ---------------------------------------------------------------- bench
def cmd_bench(a):
    import torch

    tok, model = load_model(a.model, 1)
    claim = "The company reported revenue of 3.2 billion dollars in 2019, up 8 percent."
    passage = " ".join(["The company said its annual revenue rose to 3.2 billion dollars "
                        "as sales in Europe and Asia grew faster than expected."] * 40)
    enc = tok(claim, passage, truncation="only_second", max_length=a.max_len,
              return_tensors="pt")
    assert enc["input_ids"].shape[1] == a.max_len
    times = []
    with torch.inference_mode():
        for _ in range(5):
            model(**enc)
        for _ in range(a.runs):
            t0 = time.perf_counter()
            model(**enc)
            times.append((time.perf_counter() - t0) * 1e3)
    print(f"one pair at {a.max_len} tokens, 1 thread, {a.runs} runs: median "
          f"{statistics.median(times):.1f} ms (min {min(times):.1f}, max {max(times):.1f})")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("lexical")
    s.add_argument("--wice", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--url", default="http://127.0.0.1:8181")
    s = sub.add_parser("model")
    s.add_argument("--wice", required=True)
    s.add_argument("--model", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--window", type=int, default=3)
    s.add_argument("--stride", type=int, default=2)
    s.add_argument("--max-len", type=int, default=256)
    s.add_argument("--batch", type=int, default=32)
    s.add_argument("--overlap-window", type=int, default=0,
                   help="add one window of the N sentences most overlapping the claim (0: none)")
    s.add_argument("--top-windows", type=int, default=0,
                   help="score only the K windows most overlapping the claim (0: all)")
    s.add_argument("--threads", type=int, default=2)
    s = sub.add_parser("choose")
    s.add_argument("--lexical", required=True)
    s.add_argument("--scores", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--max-fsr", type=float, default=0.10)
    s = sub.add_parser("report")
    s.add_argument("--lexical", required=True)
    s.add_argument("--scores", required=True)
    s.add_argument("--choice", required=True)
    s = sub.add_parser("bench")
    s.add_argument("--model", required=True)
    s.add_argument("--runs", type=int, default=50)
    s.add_argument("--max-len", type=int, default=256)
    a = p.parse_args()
    {"lexical": cmd_lexical, "model": cmd_model, "choose": cmd_choose,
     "report": cmd_report, "bench": cmd_bench}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
