#!/usr/bin/env python3
"""Gathers (claim, evidence, label) pairs for the learned entailment check.

Step 1 of issue 47: the data, before any model. Standard library only.
Provenance, licences, the exact commands and the counts are in DATA.md
beside this file.

Two files are written, both outside the repository (the datasets are not
copied into it):

  --out-train  pairs a model may be fitted on:
               WiCE train (the split's token annotations, the only part of
               the train split at hand), RAGTruth-QA sentences of EVEN source
               ids, and synthetic contradicted pairs made from the entailed
               ones among them.
  --out-dev    pairs for choosing (thresholds, epochs, checkpoints), kept
               apart: WiCE dev and synthetic pairs made from its supported
               claims.

WiCE test and RAGTruth-QA odd source ids are for measuring only: this
script refuses a WiCE file whose ids are not train/dev ids and never emits a
RAGTruth-QA pair from an odd source id.

Each line: {"claim", "evidence", "label", "source", "id"} where label is
"entailed", "contradicted" or "neither"; synthetic lines add "transform",
"parent" and "edit"; RAGTruth lines add "question".

Labels:
  WiCE supported                        -> entailed
  WiCE partially_supported, not_supported -> neither
  (WiCE has no contradiction label: that is what the synthetic pairs are for.)
  RAGTruth-QA, per response sentence:
    overlaps an "Evident/Subtle Conflict" span        -> contradicted
    overlaps only "Evident/Subtle Baseless Info" spans -> neither
    overlaps no span                                   -> entailed
  Synthetic, from an entailed pair, one edit of the claim -> contradicted

Usage:
  python3 scripts/model/gather_pairs.py \\
      --wice-train WICE_REPO/data/non_supported_tokens/train.jsonl \\
      --wice-dev $DATA/wice/claim_dev.jsonl \\
      --ragtruth $DATA/ragtruth/ragtruth_qa.jsonl \\
      --out-train /tmp/verdict-pairs/train.jsonl \\
      --out-dev /tmp/verdict-pairs/dev.jsonl
"""

import argparse
import collections
import hashlib
import json
import math
import os
import re
import sys

# ---------------------------------------------------------------- evidence

STOP = set(
    """a an the of in on at to for from by with and or but as is are was were be been
    being has have had it its this that these those he she they his her their him them
    which who whom whose what when where while also not no into than then there after
    before over under about during since until up out more most other such only own so
    very can will would could should may might must do does did""".split()
)

WORD = re.compile(r"[A-Za-z0-9]+")


def content_words(text):
    return {w for w in (t.lower() for t in WORD.findall(text)) if w not in STOP}


def wice_evidence(row, budget):
    """The evidence for one WiCE row, as text, and the sentence indices used.

    The cited page is too long for a 256- or 512-token encoder, so the
    evidence is the smallest annotated supporting set (every set is a valid
    one, per WiCE's README), filled up to `budget` characters with the
    page's sentences that share the most content words with the claim, in
    page order. Any subset of the page that holds a full supporting set
    still supports a supported claim, and no subset of a page can support
    a claim the whole page does not, so the label survives the cut.
    """
    sents = row["evidence"]
    sets = [s for s in row.get("supporting_sentences") or [] if s]
    chosen = set(min(sets, key=lambda s: (len(s), s)) if sets else [])
    chosen = {i for i in chosen if 0 <= i < len(sents)}
    used = sum(len(sents[i]) + 1 for i in chosen)
    claim = content_words(row["claim"])
    ranked = sorted(
        (i for i in range(len(sents)) if i not in chosen),
        key=lambda i: (-len(claim & content_words(sents[i])), i),
    )
    for i in ranked:
        if not claim & content_words(sents[i]):
            break
        if used + len(sents[i]) + 1 > budget:
            continue
        chosen.add(i)
        used += len(sents[i]) + 1
    order = sorted(chosen)
    return " ".join(sents[i] for i in order), order


WICE_LABEL = {
    "supported": "entailed",
    "partially_supported": "neither",
    "not_supported": "neither",
}


def read_wice(path, split, budget):
    """WiCE rows of one split (claim files and non_supported_tokens files
    have the same label/claim/evidence/supporting_sentences/meta.id)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            rid = row["meta"]["id"]
            if not rid.startswith(split):
                sys.exit(f"{path}:{n}: id {rid!r} is not a WiCE {split} id; refusing it")
            evidence, idx = wice_evidence(row, budget)
            out.append(
                {
                    "claim": row["claim"],
                    "evidence": evidence,
                    "label": WICE_LABEL[row["label"]],
                    "source": f"wice-{split}",
                    "id": f"wice-{split}:{rid}",
                    "wice_label": row["label"],
                    "evidence_sentences": idx,
                }
            )
    return out


# ---------------------------------------------------------------- RAGTruth

# Abbreviations that end in a period without ending a sentence.
ABBREV = re.compile(
    r"(?:\b(?:Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|vs|etc|e\.g|i\.e|approx|Inc|Ltd|Co|Corp|No|Vol|Fig|U\.S|U\.K|a\.m|p\.m|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.|\b[A-Z]\.)$"
)
# Numbered-list markers ("1.", "2)") that start a line.
LIST_MARK = re.compile(r"^\s*(?:\d{1,2}[.)]|[-*\u2022])\s+")


def sentences(text):
    """(start, end) character spans of the sentences of `text`: a break at
    a newline, or after . ! ? followed by space and an upper-case letter,
    digit or quote, unless the period closes an abbreviation."""
    spans = []
    for para in re.finditer(r"[^\n]+", text):
        start = para.start()
        for m in re.finditer(r"[.!?][\"')\]]?\s+(?=[A-Z0-9\"'(])", para.group()):
            end = para.start() + m.end()
            head = text[start : para.start() + m.start() + 1]
            if ABBREV.search(head) or LIST_MARK.fullmatch(head + " "):
                continue
            spans.append((start, end))
            start = end
        spans.append((start, para.end()))
    out = []
    for s, e in spans:
        seg = text[s:e]
        lead = len(seg) - len(seg.lstrip())
        mark = LIST_MARK.match(seg)
        if mark:
            lead = mark.end()
        s2, e2 = s + lead, s + len(seg.rstrip())
        if e2 > s2:
            out.append((s2, e2))
    return out


# Sentences about the passages or the answering itself, not about the world:
# no claim to check, so they are left out and counted.
META = re.compile(
    r"\b(passages?|provided (?:information|context|text)|given (?:information|context|text)|"
    r"unable to answer|i'm sorry|i am sorry|i cannot|i can't|as an ai|"
    r"based on the (?:information|context|text)|according to the (?:information|context|text))\b",
    re.I,
)

CONFLICT = {"Evident Conflict", "Subtle Conflict"}
BASELESS = {"Evident Baseless Info", "Subtle Baseless Info"}


def read_ragtruth(path, skipped):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            sid = int(row["source_id"])
            if sid % 2 == 1:
                skipped["ragtruth-qa odd source id (measuring only)"] += 1
                continue
            question = row["source"]["question"]
            passages = row["source"]["passages"].strip()
            for r, resp in enumerate(row["responses"]):
                text = resp["response"]
                labels = resp.get("labels") or []
                for lab in labels:
                    if text[lab["start"] : lab["end"]] != lab["text"]:
                        sys.exit(f"ragtruth {sid}/{r}: a span's offsets do not match its text")
                for k, (s, e) in enumerate(sentences(text)):
                    claim = text[s:e]
                    if len(WORD.findall(claim)) < 4:
                        skipped["ragtruth-qa sentence under 4 words"] += 1
                        continue
                    if META.search(claim):
                        skipped["ragtruth-qa sentence about the passages or the answer"] += 1
                        continue
                    kinds = {lab["label_type"] for lab in labels if lab["start"] < e and lab["end"] > s}
                    unknown = kinds - CONFLICT - BASELESS
                    if unknown:
                        sys.exit(f"ragtruth {sid}/{r}: unknown span label {sorted(unknown)}")
                    if kinds & CONFLICT:
                        label = "contradicted"
                    elif kinds:
                        label = "neither"
                    else:
                        label = "entailed"
                    out.append(
                        {
                            "claim": claim,
                            "evidence": passages,
                            "label": label,
                            "source": "ragtruth-qa-even",
                            "id": f"ragtruth-qa:{sid}:{r}:{k}",
                            "question": question,
                            "response_model": resp.get("model"),
                        }
                    )
    return out


# ---------------------------------------------------------------- transforms
#
# Each transform makes one edit of an entailed claim so that the unchanged
# evidence, which supports the original, contradicts the result. They follow
# the fact-breaking edits of tests/metamorphic.rs (there applied to the
# evidence; here to the claim, so the evidence stays the real text). A
# claim that is itself negated is never edited (a second negation, or an
# antonym under "not", need not contradict), nor is a number under a bound
# ("over 50", "about 3"), which other values can satisfy.

NEGATED = re.compile(r"\b(?:not|no|never|none|nor|neither|cannot|without|n't|no longer)\b|n't\b", re.I)

AUX_NEGATE = [
    ("has been", "has not been"),
    ("have been", "have not been"),
    ("had been", "had not been"),
    ("was", "was not"),
    ("were", "were not"),
    ("is", "is not"),
    ("are", "are not"),
    ("can", "cannot"),
    ("will", "will not"),
]

# Exclusive pairs: what the one says of a thing, the other denies.
ANTONYMS = [
    ("won", "lost"),
    ("winner", "loser"),
    ("victory", "defeat"),
    ("increased", "decreased"),
    ("increase", "decrease"),
    ("rose", "fell"),
    ("higher", "lower"),
    ("highest", "lowest"),
    ("largest", "smallest"),
    ("larger", "smaller"),
    ("biggest", "smallest"),
    ("longest", "shortest"),
    ("first", "last"),
    ("older", "younger"),
    ("oldest", "youngest"),
    ("earlier", "later"),
    ("before", "after"),
    ("male", "female"),
    ("men", "women"),
    ("alive", "dead"),
    ("opened", "closed"),
    ("public", "private"),
    ("approved", "rejected"),
    ("accepted", "rejected"),
    ("allowed", "forbidden"),
    ("legal", "illegal"),
    ("successful", "unsuccessful"),
    ("succeeded", "failed"),
    ("success", "failure"),
    ("positive", "negative"),
    ("minimum", "maximum"),
    ("north", "south"),
    ("northern", "southern"),
    ("east", "west"),
    ("eastern", "western"),
    ("inside", "outside"),
    ("internal", "external"),
    ("domestic", "foreign"),
    ("full-time", "part-time"),
    ("hot", "cold"),
    ("wet", "dry"),
    ("cheap", "expensive"),
    ("easy", "difficult"),
    ("common", "rare"),
    ("safe", "dangerous"),
    ("benign", "malignant"),
    ("acute", "chronic"),
]
ANTONYM = {}
for _a, _b in ANTONYMS:
    ANTONYM.setdefault(_a, _b)
    ANTONYM.setdefault(_b, _a)

BOUND = re.compile(
    r"\b(?:over|above|under|below|more than|less than|fewer than|at least|at most|up to|"
    r"about|around|approximately|approx\.?|nearly|almost|roughly|some|estimated|"
    r"between|within|upwards of|or more|or less)\s*$",
    re.I,
)
NUMBER = re.compile(r"(?<![\w.,-])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![\w-]|\.\d|,\d{3})")
NUMBER_WORDS = [
    "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "twenty", "thirty", "forty", "fifty", "sixty",
    "seventy", "eighty", "ninety", "hundred", "thousand",
]
NUMBER_WORD = re.compile(r"\b(" + "|".join(NUMBER_WORDS) + r")\b", re.I)

# Currency and unit swaps; a unit is swapped only right after a number.
CURRENCY_SYMBOL = [("US$", "€"), ("$", "€"), ("€", "$"), ("£", "$"), ("¥", "$")]
CURRENCY_WORD = [
    ("USD", "EUR"), ("EUR", "USD"), ("GBP", "USD"), ("dollars", "euros"),
    ("dollar", "euro"), ("euros", "dollars"), ("euro", "dollar"),
    ("yen", "dollars"), ("rupees", "dollars"), ("francs", "dollars"),
]
UNITS = [
    ("kilometres", "miles"), ("kilometers", "miles"), ("km", "miles"),
    ("miles", "kilometres"), ("mi", "km"), ("metres", "feet"), ("meters", "feet"),
    ("m", "ft"), ("feet", "metres"), ("ft", "m"), ("centimetres", "inches"),
    ("centimeters", "inches"), ("cm", "in"), ("inches", "centimetres"),
    ("kilograms", "pounds"), ("kg", "lb"), ("pounds", "kilograms"), ("lb", "kg"),
    ("lbs", "kg"), ("tonnes", "pounds"), ("tons", "kilograms"),
    ("acres", "hectares"), ("hectares", "acres"), ("litres", "gallons"),
    ("liters", "gallons"), ("gallons", "litres"), ("seconds", "minutes"),
    ("minutes", "hours"), ("hours", "days"), ("days", "weeks"), ("weeks", "months"),
    ("months", "years"), ("years", "months"), ("year", "month"), ("month", "year"),
    ("week", "month"), ("day", "week"), ("hour", "day"), ("minute", "hour"),
    ("mph", "km/h"),
    ("km/h", "mph"),
]
QUANTITY = r"(?:\d[\d,]*(?:\.\d+)?|" + "|".join(NUMBER_WORDS) + r"|one|a)"

FUTURE = [
    ("has been", "will be"),
    ("have been", "will be"),
    ("had been", "will be"),
    ("was", "will be"),
    ("were", "will be"),
    ("did", "will"),
]

NOT_A_PARTY = set(
    """The A An In On At By For From To Of And Or But As It Its He She They We I You His
    Her Their Our This That These Those There Here When While After Before During Since
    Although Though However Also Some Many Most All Each Both Other Another Such If
    January February March April May June July August September October November December
    Monday Tuesday Wednesday Thursday Friday Saturday Sunday""".split()
)
PARTY = re.compile(r"\b[A-Z][a-zA-Z'\u2019.-]+(?:\s+(?:of\s+|de\s+|van\s+|von\s+|da\s+|the\s+)?[A-Z][a-zA-Z'\u2019.-]+)*")


def stable_rng(key):
    """A deterministic choice per key (no global random state)."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:12], 16)


def whole_word(text, word, flags=0):
    return re.compile(r"(?<![\w-])" + re.escape(word) + r"(?![\w-])", flags).search(text)


def keep_case(src, dst):
    return dst[:1].upper() + dst[1:] if src[:1].isupper() else dst


def t_negate(claim, evidence, key):
    best = None
    for a, b in AUX_NEGATE:
        # The auxiliary of a predicate: a word follows it ("is sold", not "... is.").
        m = re.compile(r"(?<![\w-])" + re.escape(a) + r"(?=\s+(?!(?:and|or|but|nor)\b)[A-Za-z])", re.I).search(claim)
        if m and (best is None or m.start() < best[0].start()):
            best = (m, b)
    if not best:
        return None
    m, b = best
    return claim[: m.start()] + keep_case(m.group(), b) + claim[m.end() :], (m.group(), b)


def t_antonym(claim, evidence, key):
    hits = []
    for w in re.finditer(r"[A-Za-z-]+", claim):
        to = ANTONYM.get(w.group().lower())
        if to:
            hits.append((w, to))
    if not hits:
        return None
    w, to = hits[stable_rng(key) % len(hits)]
    return claim[: w.start()] + keep_case(w.group(), to) + claim[w.end() :], (w.group(), to)


RANGE_BEFORE = re.compile(r"\d%?\s*(?:-|\u2013|to|and)\s*[$€£]?$")
RANGE_AFTER = re.compile(r"^[^\s\d]{0,3}\s*(?:-|\u2013|to|and)\s*[$€£]?\d")


def bounded(claim, start, end):
    """A number under a bound ("over 50") or in a range ("6 to 9",
    "$100-$300"): other values can satisfy it, so changing it need not
    contradict."""
    return (
        BOUND.search(claim[max(0, start - 24) : start].rstrip("$€£ "))
        or RANGE_BEFORE.search(claim[max(0, start - 12) : start])
        or RANGE_AFTER.search(claim[end : end + 16])
    )


def t_number(claim, evidence, key):
    spots = []
    for m in NUMBER.finditer(claim):
        if bounded(claim, m.start(), m.end()):
            continue
        spots.append(("digits", m))
    for m in NUMBER_WORD.finditer(claim):
        if bounded(claim, m.start(), m.end()):
            continue
        spots.append(("word", m))
    if not spots:
        return None
    r = stable_rng(key)
    kind, m = spots[r % len(spots)]
    old = m.group()
    if kind == "word":
        pool = [w for w in NUMBER_WORDS if w != old.lower() and w not in ("hundred", "thousand")]
        if old.lower() in ("hundred", "thousand"):
            pool = [w for w in ("hundred", "thousand") if w != old.lower()] + ["million"]
        new = keep_case(old, pool[r // 7 % len(pool)])
    else:
        integer = m.group(1)
        digits = integer.replace(",", "")
        step = 1 + (r // 7) % 8
        if len(digits) == 4 and 1000 <= int(digits) <= 2099 and not m.group(2):
            # A year: move it by a few years, never into another millennium.
            new = str(int(digits) + (step if int(digits) + step <= 2099 else -step))
        else:
            # Any other number: change its leading digit (never to 0).
            first = int(digits[0])
            lead = (first - 1 + step) % 9 + 1
            if lead == first:
                lead = first % 9 + 1
            new = str(lead) + integer[1:]
        new += m.group(2) or ""
    return claim[: m.start()] + new + claim[m.end() :], (old, new)


def t_unit(claim, evidence, key):
    spots = []  # (start, end, replacement)
    for sym, to in CURRENCY_SYMBOL:
        for m in re.finditer(re.escape(sym) + r"(?=\s?\d)", claim):
            if sym == "$" and claim[max(0, m.start() - 2) : m.start()] == "US":
                continue
            spots.append((m.start(), m.end(), to))
    for word, to in CURRENCY_WORD + UNITS:
        if len(word) <= 3:
            # A short unit ("km", "kg") only right after digits.
            pat = r"(?<=\d)\s?(" + re.escape(word) + r")(?![\w/])"
            flags = 0
        else:
            pat = (
                r"\b" + QUANTITY + r"(?:\s+(?:million|billion|thousand|hundred))?\s+("
                + re.escape(word) + r")(?![\w/])"
            )
            flags = re.I
        for m in re.finditer(pat, claim, flags):
            spots.append((m.start(1), m.end(1), to))
    if not spots:
        return None
    # The same characters may match twice ("years" and "year"): keep the longest.
    spots.sort(key=lambda s: (s[0], s[0] - s[1]))
    uniq = [s for i, s in enumerate(spots) if i == 0 or s[0] != spots[i - 1][0]]
    start, end, to = uniq[stable_rng(key) % len(uniq)]
    old = claim[start:end]
    if to.lower() == old.lower():
        return None
    return claim[:start] + keep_case(old, to) + claim[end:], (old, to)


# The relations a swap reverses: "A <verb> B" where the verb is not
# symmetric, so "B <verb> A" is false when "A <verb> B" is true.
ASYMMETRIC_VERBS = (
    "acquired|bought|sold|defeated|beat|replaced|succeeded|preceded|hired|fired|"
    "signed|founded|owns|owned|employed|coached|managed|directed|produced|wrote|"
    "published|sued|appointed|named|nominated|sponsored|funded|invaded|conquered|"
    "annexed|trained|taught|mentored|interviewed|released|distributed|"
    "commissioned|designed|built|created|invented|discovered|adopted|fathered|"
    "parented|raised|led|headed|governs|governed|chairs|chaired|leads|heads|"
    "coaches|manages|directs|owns|employs|sponsors|funds|succeeds|replaces|"
    "defeats|beats|acquires|buys|sells|signs"
)
RELATION = re.compile(
    r"^\s+(?:(?:was|were|is|are|has been|had been|has|had)\s+)?(?:" + ASYMMETRIC_VERBS
    + r")(?:\s+by)?\s+(?:the\s+)?$|^\s+(?:is|was|are|were)\s+(?:the\s+)?(?:head coach|coach|"
    r"owner|founder|parent|father|mother|employer|manager|director|successor|predecessor|"
    r"subsidiary|chairman|chair|president|ceo|leader|publisher|distributor)\s+(?:of|to)\s+(?:the\s+)?$"
    ,
    re.I,
)
NAME_SHAPE = re.compile(
    r"^(?:[A-Z][a-z'\u2019-]+|[A-Z]\.)(?:\s+(?:[A-Z][a-z'\u2019-]+|[A-Z]\.|of|de|van|von|da|the)){1,3}$"
)


def parties(claim, evidence):
    """Named parties of the claim that the evidence names too: runs of two
    to four capitalised words ("Tom Perez", "Media Blasters"), or one
    capitalised word ("Powell", "NBC") that the evidence also capitalises
    inside a sentence. Without a tagger these are often not parties (a
    menu item, a nationality): t_swap_parties' relation test is what keeps
    the swaps meaningful."""
    out = []
    for m in PARTY.finditer(claim):
        words = m.group().rstrip(".").split()
        while words and words[0] in NOT_A_PARTY:
            words = words[1:]
        if not words:
            continue
        text = " ".join(words)
        start = m.start() + m.group().index(text)
        if text not in evidence:
            continue
        if not NAME_SHAPE.match(text) and not (
            # One word counts when the evidence capitalises it mid-sentence.
            re.fullmatch(r"[A-Z][a-z'\u2019-]+|[A-Z]{2,6}", text)
            and re.search(r"[a-z,] " + re.escape(text) + r"\b", evidence)
        ):
            continue
        out.append((start, start + len(text), text))
    return out


def t_swap_parties(claim, evidence, key):
    """Swap two named parties that an asymmetric relation joins directly
    ("A acquired B" -> "B acquired A", "A is the head coach of B",
    "replacing A with B"). Only those: a run of heuristics over any two
    names was tried and, read by eye, mostly made nonsense ("Help Center
    to load the Click Start Menu") or symmetric swaps ("A and B"), not
    contradictions."""
    ps = parties(claim, evidence)
    for i in range(len(ps) - 1):
        (a0, a1, a), (b0, b1, b) = ps[i], ps[i + 1]
        if a == b or a in b or b in a:
            continue
        between = claim[a1:b0]
        bare = between.replace('"', " ").replace("'", " ")
        replacing = bare.strip() == "with" and re.search(r"\breplac(?:e|es|ed|ing)\s+(?:the\s+)?[\"']?$", claim[:a0])
        if not (RELATION.match(bare) or replacing):
            continue
        new = claim[:a0] + b + between + a + claim[b1:]
        return new, (a + " <-> " + b, b + " <-> " + a)
    return None


def t_future(claim, evidence, key):
    best = None
    for a, b in FUTURE:
        m = whole_word(claim, a, re.I)
        if m and (best is None or m.start() < best[0].start()):
            best = (m, b)
    if not best:
        return None
    m, b = best
    return claim[: m.start()] + keep_case(m.group(), b) + claim[m.end() :], (m.group(), b)


TRANSFORMS = [
    ("negate", t_negate),
    ("antonym", t_antonym),
    ("number", t_number),
    ("unit_or_currency", t_unit),
    ("swap_parties", t_swap_parties),
    ("future", t_future),
]


def synthesize(pairs, split, skipped):
    out = []
    for p in pairs:
        if p["label"] != "entailed":
            continue
        if NEGATED.search(p["claim"]):
            skipped[f"synthetic-{split}: parent claim already negated"] += 1
            continue
        for name, fn in TRANSFORMS:
            got = fn(p["claim"], p["evidence"], p["id"] + "/" + name)
            if not got:
                continue
            claim, (old, new) = got
            if claim == p["claim"]:
                continue
            out.append(
                {
                    "claim": claim,
                    "evidence": p["evidence"],
                    "label": "contradicted",
                    "source": f"synthetic-{split}",
                    "id": f"{p['id']}#{name}",
                    "transform": name,
                    "parent": p["id"],
                    "edit": [old, new],
                }
            )
    return out


# ---------------------------------------------------------------- main


def inside_repo(path):
    repo = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    return os.path.realpath(os.path.abspath(path)).startswith(repo + os.sep)


def write(path, rows):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def table(rows):
    counts = collections.Counter((r["source"], r["label"]) for r in rows)
    sources = sorted({s for s, _ in counts})
    labels = ["entailed", "contradicted", "neither"]
    lines = ["| source | " + " | ".join(labels) + " | total |", "|---" * (len(labels) + 2) + "|"]
    for s in sources:
        row = [counts[(s, l)] for l in labels]
        lines.append(f"| {s} | " + " | ".join(map(str, row)) + f" | {sum(row)} |")
    tot = [sum(counts[(s, l)] for s in sources) for l in labels]
    lines.append("| **all** | " + " | ".join(map(str, tot)) + f" | {sum(tot)} |")
    return "\n".join(lines)


def by_transform(rows):
    c = collections.Counter(r["transform"] for r in rows if "transform" in r)
    return ", ".join(f"{k} {c[k]}" for k, _ in TRANSFORMS if c[k])


def lengths(rows):
    ev = sorted(len(r["evidence"]) for r in rows)
    if not ev:
        return "none"
    q = lambda x: ev[min(len(ev) - 1, int(math.floor(x * len(ev))))]
    return f"evidence chars: median {q(0.5)}, p90 {q(0.9)}, max {ev[-1]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wice-train", required=True, help="a WiCE train-split jsonl (data/non_supported_tokens/train.jsonl or data/entailment_retrieval/claim/train.jsonl)")
    ap.add_argument("--wice-dev", required=True, help="WiCE claim dev jsonl (for choosing)")
    ap.add_argument("--ragtruth", help="RAGTruth-QA jsonl; only even source ids are read")
    ap.add_argument("--out-train", required=True)
    ap.add_argument("--out-dev", required=True)
    ap.add_argument("--evidence-chars", type=int, default=1000, help="WiCE evidence budget (default 1000)")
    args = ap.parse_args()

    for p in (args.out_train, args.out_dev):
        if inside_repo(p):
            sys.exit(f"{p}: write the pairs outside the repository")
    for p in (args.wice_train, args.wice_dev):
        if os.path.basename(p).startswith(("test", "claim_test")):
            sys.exit(f"{p}: WiCE test is for measuring only")

    skipped = collections.Counter()
    train = read_wice(args.wice_train, "train", args.evidence_chars)
    if args.ragtruth:
        train += read_ragtruth(args.ragtruth, skipped)
    train += synthesize(train, "train", skipped)
    dev = read_wice(args.wice_dev, "dev", args.evidence_chars)
    dev += synthesize(dev, "dev", skipped)

    write(args.out_train, train)
    write(args.out_dev, dev)

    print(f"train: {args.out_train}")
    print(table(train))
    print(f"synthetic-train by transform: {by_transform(train)}")
    print(lengths(train))
    print()
    print(f"dev (choosing only): {args.out_dev}")
    print(table(dev))
    print(f"synthetic-dev by transform: {by_transform(dev)}")
    print(lengths(dev))
    print()
    print("left out:")
    for k, v in sorted(skipped.items()):
        print(f"  {k}: {v}")


if __name__ == "__main__":
    main()
