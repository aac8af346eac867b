#!/usr/bin/env python3
"""Fine-tune all-MiniLM-L6-v2 as a 3-way cross-encoder (issue 47, step 2).

Input "[CLS] claim [SEP] evidence [SEP]" -> entailed / contradicted / neither.
Training mix (no WiCE dev, no WiCE test, no RAGTruth odd ids; no SICK):

  * SNLI dev+test as shipped by e-SNLI (premise = evidence, hypothesis =
    claim): entailment/contradiction/neutral -> entailed/contradicted/neither
  * Climate-FEVER: each (claim, evidence sentence) with its evidence_label
    SUPPORTS/REFUTES/NOT_ENOUGH_INFO -> entailed/contradicted/neither
  * the project's pairs (gather_pairs.py --out-train): evidence cut to fit
    max-len tokens by keeping the sentences that share the most words with
    the claim, in page order

Everything is read from local files (HF_HUB_OFFLINE=1). One run: fixed
seed, AdamW, linear warm-up then linear decay, batches of similar length.
Writes DIR/model.safetensors (fp32, with config and tokenizer, loadable with
AutoModelForSequenceClassification) and DIR/model.fp16.safetensors.
"""
import argparse
import json
import math
import os
import random
import re
import sys
import time

from overlap import words

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

LABELS = ["entailed", "contradicted", "neither"]
L2I = {l: i for i, l in enumerate(LABELS)}

def split_sentences(text):
    parts = re.split(r"(?<=[.!?])\s+|\n+", text)
    return [p.strip() for p in parts if p.strip()]


def fit_evidence(tok, claim, evidence, max_len):
    """Keep the evidence sentences most overlapping the claim (in page order)
    so that claim + evidence fit in max_len tokens."""
    budget = max_len - 3 - len(tok(claim, add_special_tokens=False)["input_ids"])
    sents = split_sentences(evidence)
    lens = [len(tok(s, add_special_tokens=False)["input_ids"]) for s in sents]
    if sum(lens) <= budget:
        return evidence
    cw = set(words(claim))
    score = [(-len(cw & set(words(s))), i) for i, s in enumerate(sents)]
    keep, used = [], 0
    for _, i in sorted(score):
        if used + lens[i] <= budget:
            keep.append(i)
            used += lens[i]
    if not keep:  # one sentence longer than the budget: truncation cuts it
        keep = [sorted(score)[0][1]]
    return " ".join(sents[i] for i in sorted(keep))


def load_snli(data_dir):
    out = []
    nli = {"entailment": "entailed", "contradiction": "contradicted", "neutral": "neither"}
    for split in ["dev", "test"]:
        s1 = open(os.path.join(data_dir, f"esnli_s1.{split}")).read().splitlines()
        s2 = open(os.path.join(data_dir, f"esnli_s2.{split}")).read().splitlines()
        lab = open(os.path.join(data_dir, f"esnli_labels.{split}")).read().splitlines()
        assert len(s1) == len(s2) == len(lab)
        for p, h, l in zip(s1, s2, lab):
            if l.strip() in nli:
                out.append((h.strip(), p.strip(), nli[l.strip()], "snli"))
    return out


def load_climate_fever(path):
    out = []
    m = {"SUPPORTS": "entailed", "REFUTES": "contradicted", "NOT_ENOUGH_INFO": "neither"}
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        for e in r["evidences"]:
            if e["evidence_label"] in m:
                out.append((r["claim"], e["evidence"], m[e["evidence_label"]], "climate-fever"))
    return out


def load_pairs(path, tok, max_len):
    out = []
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        ev = fit_evidence(tok, r["claim"], r["evidence"], max_len)
        out.append((r["claim"], ev, r["label"], "project:" + r["source"]))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="dir with model.safetensors, config.json, tokenizer.json")
    p.add_argument("--esnli-dir", required=True, help="dir with esnli_s1/s2/labels.{dev,test}")
    p.add_argument("--climate-fever", required=True, help="climate-fever.jsonl")
    p.add_argument("--pairs", required=True, help="gather_pairs.py --out-train file")
    p.add_argument("--out", required=True)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--warmup", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=47)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--snli-limit", type=int, default=0, help="keep this many SNLI pairs (0: all)")
    p.add_argument("--cf-nei-limit", type=int, default=0,
                   help="keep this many Climate-FEVER NOT_ENOUGH_INFO pairs (0: all)")
    p.add_argument("--deadline", type=float, default=0,
                   help="unix time: stop the loop there and save what was trained (0: none)")
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no cap)")
    a = p.parse_args()

    import numpy as np
    import torch
    from transformers import (AutoTokenizer, BertConfig, BertForSequenceClassification,
                              get_linear_schedule_with_warmup)
    from safetensors.torch import save_file

    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)

    tok = AutoTokenizer.from_pretrained(a.base)
    cfg = BertConfig.from_pretrained(a.base, num_labels=3, id2label=dict(enumerate(LABELS)),
                                     label2id=L2I, architectures=["BertForSequenceClassification"])
    model = BertForSequenceClassification.from_pretrained(a.base, config=cfg)

    t_load = time.time()
    snli = load_snli(a.esnli_dir)
    rng = random.Random(a.seed)
    if a.snli_limit:
        rng.shuffle(snli)
        snli = snli[: a.snli_limit]
    cf = load_climate_fever(a.climate_fever)
    if a.cf_nei_limit:
        nei = [d for d in cf if d[2] == "neither"]
        rng.shuffle(nei)
        cf = [d for d in cf if d[2] != "neither"] + nei[: a.cf_nei_limit]
    data = snli + cf + load_pairs(a.pairs, tok, a.max_len)
    counts = {}
    for _, _, l, s in data:
        counts.setdefault(s, {k: 0 for k in LABELS})[l] += 1
    print("training pairs (source: entailed/contradicted/neither):")
    for s, c in sorted(counts.items()):
        print(f"  {s:<28} {c['entailed']:>6} {c['contradicted']:>6} {c['neither']:>6}")
    print(f"  total {len(data)}; built in {time.time() - t_load:.1f} s")

    enc = tok([d[0] for d in data], [d[1] for d in data], truncation="only_second",
              max_length=a.max_len)
    ids = enc["input_ids"]
    tt = enc["token_type_ids"]
    y = [L2I[d[2]] for d in data]

    # Batches of similar length: shuffle, cut into chunks of 50 batches, sort
    # each chunk by length, cut into batches, shuffle the batches.
    order = list(range(len(data)))
    rng.shuffle(order)
    chunk = a.batch * 50
    batches = []
    for c in range(0, len(order), chunk):
        part = sorted(order[c:c + chunk], key=lambda i: len(ids[i]))
        batches += [part[b:b + a.batch] for b in range(0, len(part), a.batch)]
    rng.shuffle(batches)
    steps = math.ceil(len(batches) * a.epochs)
    if a.max_steps:
        steps = min(steps, a.max_steps)
    sched_batches = (batches * math.ceil(a.epochs + 1))[:steps]

    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    sch = get_linear_schedule_with_warmup(opt, int(a.warmup * steps), steps)
    model.train()
    t0 = time.time()
    ntok = 0
    run_loss = 0.0
    done = 0
    for step, b in enumerate(sched_batches, 1):
        if a.deadline and time.time() > a.deadline:
            print(f"deadline reached after {done} of {steps} steps", flush=True)
            break
        L = max(len(ids[i]) for i in b)
        x = torch.zeros((len(b), L), dtype=torch.long)
        t = torch.zeros_like(x)
        m = torch.zeros_like(x)
        for j, i in enumerate(b):
            n = len(ids[i])
            x[j, :n] = torch.tensor(ids[i])
            t[j, :n] = torch.tensor(tt[i])
            m[j, :n] = 1
        out = model(input_ids=x, token_type_ids=t, attention_mask=m,
                    labels=torch.tensor([y[i] for i in b]))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sch.step()
        opt.zero_grad()
        ntok += int(m.sum())
        done = step
        run_loss += out.loss.item()
        if step % 50 == 0 or step == steps:
            dt = time.time() - t0
            print(f"step {step}/{steps} loss {run_loss / 50:.4f} {dt:.0f} s "
                  f"{ntok / dt:.0f} tok/s eta {dt / step * (steps - step):.0f} s", flush=True)
            run_loss = 0.0
    wall = time.time() - t0

    os.makedirs(a.out, exist_ok=True)
    model.eval()
    model.save_pretrained(a.out, safe_serialization=True)
    tok.save_pretrained(a.out)
    sd = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(a.out, "model.fp16.safetensors"))
    info = {"seed": a.seed, "epochs": a.epochs, "steps": steps, "steps_done": done,
            "snli_limit": a.snli_limit, "cf_nei_limit": a.cf_nei_limit, "lr": a.lr, "batch": a.batch,
            "max_len": a.max_len, "warmup": a.warmup, "threads": a.threads,
            "pairs": len(data), "counts": counts, "train_wall_s": round(wall, 1),
            "train_tokens": ntok, "tokens_per_s": round(ntok / wall, 1)}
    json.dump(info, open(os.path.join(a.out, "train_info.json"), "w"), indent=1)
    print(json.dumps(info))


if __name__ == "__main__":
    sys.exit(main())
