#!/usr/bin/env python3
"""Writes crates/verdict-engine/src/verify/derivations.txt from WordNet 3.0's derivational links.

A claim says "the delivery was late" where the evidence says "delivered
late"; "approval" where it says "approved"; "payment" where it says "paid".
The stemmer does not join such pairs (Snowball keeps "payment" and "pay"
apart). WordNet links them as "derivationally related forms" (pointer "+").
This script reads those links from the Debian package `wordnet-base`
(development time only: the engine never reads WordNet at run time) and
keeps single-word pairs that are one family of forms: they share a prefix
of at least 3 letters and at least half of the shorter word, so "deliver"
and "delivery" stay, and links that change the word are left out. Agent
and patient nouns ("payer", "payee", "approver") are left out too: they
name a party, not the event.

Output: one line per word, `word<TAB>related,related`, sorted by word.

Usage:
    apt-get install wordnet-base
    python3 scripts/wordnet-derivations.py [--wordnet /usr/share/wordnet]

WordNet's licence is in crates/verdict-engine/src/verify/WORDNET-LICENSE.
"""

import argparse
import os
import sys

POS_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
AGENT = ("er", "or", "ee", "ist", "ant", "ers", "ors", "ees")


def agent(word, other):
    """Whether `other` is `word` with an agent or patient ending."""
    base = word[:-1] if word.endswith("e") else word
    if not other.startswith(base):
        return False
    rest = other[len(base):]
    # A doubled final consonant: "ship"/"shipper".
    if rest[:1] == base[-1:]:
        rest = rest[1:]
    return rest in AGENT


def read(path, links):
    with open(path, encoding="latin-1") as f:
        for line in f:
            if line.startswith("  "):
                continue  # licence header
            parts = line.split()
            w_cnt = int(parts[3], 16)
            words = [parts[4 + 2 * i].lower().split("(")[0] for i in range(w_cnt)]
            k = 4 + 2 * w_cnt
            p_cnt = int(parts[k])
            for i in range(p_cnt):
                sym, tgt, pos, st = parts[k + 1 + 4 * i : k + 5 + 4 * i]
                src, dst = int(st[:2], 16), int(st[2:], 16)
                if sym == "+" and src > 0 and dst > 0:
                    links.append((words[src - 1], (tgt, pos, dst)))
    return links


def prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wordnet", default="/usr/share/wordnet")
    ap.add_argument(
        "--out",
        default=os.path.join(
            os.path.dirname(__file__), "..", "crates", "verdict-engine", "src", "verify", "derivations.txt"
        ),
    )
    args = ap.parse_args()
    if not os.path.isdir(args.wordnet):
        sys.exit(f"{args.wordnet} not found: apt-get install wordnet-base")
    # offset+pos -> words, to resolve pointer targets.
    words_at = {}
    links = []
    for name in POS_FILES:
        pos_char = {"data.noun": "n", "data.verb": "v", "data.adj": "a", "data.adv": "r"}[name]
        path = os.path.join(args.wordnet, name)
        with open(path, encoding="latin-1") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                parts = line.split()
                w_cnt = int(parts[3], 16)
                words = [parts[4 + 2 * i].lower().split("(")[0] for i in range(w_cnt)]
                words_at[(parts[0], pos_char)] = words
                if pos_char == "a":
                    words_at[(parts[0], "s")] = words
        read(path, links)
    related = {}
    for a, (tgt, pos, dst) in links:
        ws = words_at.get((tgt, pos))
        if not ws or dst > len(ws):
            continue
        b = ws[dst - 1]
        if a == b or not (a.isalpha() and b.isalpha()) or min(len(a), len(b)) < 3:
            continue
        p = prefix(a, b)
        if p < 3 or 2 * p < min(len(a), len(b)):
            continue
        # Agent and patient nouns name a party, not the event: "payer" and
        # "payee" are the two sides of "pay", so they align with nothing.
        if agent(a, b) or agent(b, a):
            continue
        related.setdefault(a, set()).add(b)
        related.setdefault(b, set()).add(a)
    with open(args.out, "w") as f:
        for w in sorted(related):
            f.write(w + "\t" + ",".join(sorted(related[w])) + "\n")
    print(f"wrote {len(related)} words to {os.path.normpath(args.out)}", file=sys.stderr)


if __name__ == "__main__":
    main()
