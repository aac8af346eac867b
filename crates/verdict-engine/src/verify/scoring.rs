//! Scoring a claim against its passages: BM25 then coverage to rank them, the
//! quantities' share of the score, the gates a supported claim must pass, and
//! the polarity of a word in context.

use super::*;

/// BM25 over the allowed units, then coverage on the best candidates as single
/// units and adjacent pairs. Returns passages by coverage, best first, with
/// ties broken by position in the id-sorted index.
pub(super) fn rank(lv: &mut Levels<'_, '_>, allowed: &[bool]) -> (Vec<(Passage, f64)>, Vec<usize>) {
    let (a, idx) = (lv.a, lv.idx);
    let mut score = vec![0.0f64; idx.units.len()];
    for t in &a.terms {
        let Some(s) = t.stem else { continue };
        for &u in idx.posting(s) {
            let unit = &idx.units[u as usize];
            if !allowed[unit.source] {
                continue;
            }
            score[u as usize] += t.weight * (tune::K1 + 1.0) / (1.0 + tune::K1 * unit.norm);
        }
    }
    for &(s, k) in &a.related {
        let Some(t) = a.terms.get(k as usize) else {
            continue;
        };
        let w = t.weight * tune::RELATED_MATCH;
        for &u in idx.posting(s) {
            let unit = &idx.units[u as usize];
            if allowed[unit.source] {
                score[u as usize] += w * (tune::K1 + 1.0) / (1.0 + tune::K1 * unit.norm);
            }
        }
    }
    if !a.qty.is_empty() {
        // Which units back which claim quantity, kept for the rows.
        let track = a.qty.len() <= 64;
        if track {
            lv.qty_bits = vec![0; idx.units.len()];
            lv.qty_filled = allowed.to_vec();
            // Claim quantity by claim quantity; a unit still gets its
            // weights in claim order, so every score is the same sum.
            for (k, cq) in a.qty.iter().enumerate() {
                qty_score(lv, allowed, k, cq, &mut score);
            }
        } else {
            for (ui, uq) in idx.allowed_unit_qty(allowed) {
                for cq in &a.qty {
                    if uq.iter().any(|e| numbers::backs(&cq.q, e)) {
                        score[ui] += cq.weight;
                    }
                }
            }
        }
    }
    // Best score first, ties by unit id: a total order, so keeping the top
    // few in order while scanning gives the same list as a full sort. Units
    // come in id order, so a tie never displaces an earlier unit; only a
    // unit that beats the current last one is inserted (a select plus sort
    // over every scored unit cost more than the rest of ranking).
    let mut cands: Vec<usize> = Vec::with_capacity(tune::CANDIDATES + 1);
    for (u, &s) in score.iter().enumerate() {
        if s <= 0.0 || s.is_nan() {
            continue;
        }
        if cands.len() == tune::CANDIDATES {
            match cands.last() {
                Some(&last) if s > score[last] => {}
                _ => continue,
            }
            cands.pop();
        }
        let at = cands.partition_point(|&c| score[c] >= s);
        cands.insert(at, u);
    }

    let mut out: Vec<(Passage, f64)> = Vec::with_capacity(cands.len());
    for &u in &cands {
        let unit = &idx.units[u];
        let src = &idx.sources[unit.source];
        let single = Passage { first: u, last: u };
        let mut best = (single, lv.passage_coverage(single));
        for p in [
            (u > src.unit_start).then(|| Passage {
                first: u - 1,
                last: u,
            }),
            (u + 1 < src.unit_end).then_some(Passage {
                first: u,
                last: u + 1,
            }),
        ]
        .into_iter()
        .flatten()
        {
            let c = lv.passage_coverage(p);
            if c * tune::PAIR_FACTOR > best.1 {
                best = (p, c);
            }
        }
        if best.1 > 0.0 && !out.iter().any(|(p, _)| *p == best.0) {
            out.push(best);
        }
    }
    out.sort_by(|x, y| {
        y.1.total_cmp(&x.1)
            .then((x.0.last - x.0.first).cmp(&(y.0.last - y.0.first)))
            .then(x.0.first.cmp(&y.0.first))
            .then(x.0.last.cmp(&y.0.last))
    });
    (out, cands)
}

/// Adds claim quantity `k`'s weight to the score of every unit of an allowed
/// source that backs it, and sets bit `k` of those units' `qty_bits` (which
/// must be sized; `k < 64`).
///
/// A number, amount or percentage is backed only by a value within 10 % of
/// it (`numbers::backs` compares values, with a relative tolerance of at most
/// 0.1, or a year-only date's year), so only quantities whose value lies in
/// a window of ±20 % around it (plus 1e-6 for values near zero) are tested.
/// Dates, counts with a unit, and any non-finite value, test every quantity.
pub(super) fn qty_score(
    lv: &mut Levels<'_, '_>,
    allowed: &[bool],
    k: usize,
    cq: &ClaimQty,
    score: &mut [f64],
) {
    let idx = lv.idx;
    let bit = 1u64.checked_shl(k as u32).unwrap_or(0);
    let mut mark = |ui: usize, bits: &mut [u64]| {
        if let Some(b) = bits.get_mut(ui) {
            if *b & bit == 0 {
                *b |= bit;
                score[ui] += cq.weight;
            }
        }
    };
    let v = cq.q.value;
    // A count with a unit may be backed by another unit's value ("2 weeks"
    // by "14 days"): outside the window, so every quantity is tested.
    if cq.q.kind != QtyKind::Date && cq.q.unit.is_none() && v.is_finite() && idx.values_finite {
        let (lo, hi) = (v - 0.2 * v.abs() - 1e-6, v + 0.2 * v.abs() + 1e-6);
        let from = idx.by_value.partition_point(|x| x.0 < lo);
        for &(value, ui, qi) in idx.by_value.get(from..).unwrap_or(&[]) {
            if value > hi {
                break;
            }
            let ui = ui as usize;
            let Some(unit) = idx.units.get(ui) else {
                continue;
            };
            if !allowed[unit.source] {
                continue;
            }
            let e = idx.sources[unit.source].qty.get(qi as usize);
            if e.is_some_and(|e| numbers::backs(&cq.q, e)) {
                mark(ui, &mut lv.qty_bits);
            }
        }
        return;
    }
    for (ui, uq) in idx.allowed_unit_qty(allowed) {
        if uq.iter().any(|e| numbers::backs(&cq.q, e)) {
            mark(ui, &mut lv.qty_bits);
        }
    }
}

/// Contradiction gates on the chosen passage.
pub(super) fn gates(
    a: &Analysis,
    idx: &Index<'_>,
    allowed: &[bool],
    set: &EvidenceSet,
    primary: Passage,
    coverage: f64,
    reasons: &mut Vec<Reason>,
) -> Option<Conflict> {
    let units: Vec<&Unit> = set.units.iter().map(|&u| &idx.units[u]).collect();
    value_gates(a, idx, allowed, &units, reasons);
    let (bound, party_backed) = if reasons.is_empty() {
        bindings(a, idx, allowed, reasons)
    } else {
        (None, false)
    };
    for t in a.terms.iter().filter(|t| t.name) {
        let in_passage = units.iter().any(|u| idx.has_stem(u, t.stem));
        if in_passage {
            continue;
        }
        let anywhere = t.stem.is_some_and(|s| {
            idx.posting(s)
                .iter()
                .any(|&u| allowed[idx.units[u as usize].source])
        });
        if !anywhere {
            reasons.push(Reason::NameMissing);
            break;
        }
    }
    // A claim of two or more parts ("the courier tried twice, and the
    // parcel is at the depot") may rest on a sentence the completion added
    // for one part; every sentence of the evidence set is read then. A
    // one-part claim is judged on the passage that carries it.
    let primary_units: Vec<usize> = primary.units().collect();
    let units = if a.parts.is_empty() {
        &primary_units
    } else {
        &set.units
    };
    let found = conflict::find(a, idx, units, coverage, party_backed);
    if let Some((r, _)) = &found {
        reasons.push(*r);
    }
    bound.or_else(|| found.and_then(|(_, c)| c))
}

/// The binding checks, over every searched sentence (the clause that states
/// the claim's event need not be in the chosen passage), first to fire
/// wins: a value the evidence ties to another event, a value the claim
/// puts inside a bound the evidence shows broken, a named party the
/// evidence puts in another slot of the event. Pushes the reason; returns
/// the conflict, and whether the evidence names the claim's party in its
/// slot (then the passage's party check is not asked).
fn bindings(
    a: &Analysis,
    idx: &Index<'_>,
    allowed: &[bool],
    reasons: &mut Vec<Reason>,
) -> (Option<Conflict>, bool) {
    let fired = if let Some(m) = conflict::misbound(a, idx, allowed) {
        let claim_span = a.qty.get(m.claim_qty).map_or((0, 0), |cq| cq.span);
        Some((m.reason, claim_span, Some((m.unit, m.tokens))))
    } else if let Some(b) = conflict::breached(a, idx, allowed) {
        Some((b.reason, b.claim, b.at))
    } else {
        match conflict::slotting(a, idx, allowed) {
            conflict::Slotting::Rival(claim_span, unit, at) => Some((
                Reason::PartyConflict,
                claim_span,
                Some((unit, (at, at + 1))),
            )),
            conflict::Slotting::Backed => return (None, true),
            conflict::Slotting::Unread => None,
        }
    };
    let Some((reason, claim_span, at)) = fired else {
        return (None, false);
    };
    reasons.push(reason);
    let conflict = at.map(|(unit, tokens)| span_conflict(reason, a, idx, claim_span, unit, tokens));
    (conflict, false)
}

/// A conflict between the claim's bytes `claim_span` and the tokens
/// `tokens` (a range in the source) of unit `unit`.
fn span_conflict(
    reason: Reason,
    a: &Analysis,
    idx: &Index<'_>,
    (cs, ce): (usize, usize),
    unit: usize,
    tokens: (usize, usize),
) -> Conflict {
    let src = &idx.sources[idx.units[unit].source];
    let es = src.tokens.get(tokens.0).map_or(0, |t| t.start);
    let ee = tokens
        .1
        .checked_sub(1)
        .and_then(|k| src.tokens.get(k))
        .map_or(es, |t| t.end);
    Conflict::between(reason, &a.text, (cs, ce), src.id, src.text, (es, ee))
}

/// The claim's values against the passage's: another value for the same
/// slot is a mismatch; a specific value no searched source states is
/// `number_not_found`.
fn value_gates(
    a: &Analysis,
    idx: &Index<'_>,
    allowed: &[bool],
    units: &[&Unit],
    reasons: &mut Vec<Reason>,
) {
    let pq: Vec<&Quantity> = units.iter().flat_map(|u| idx.unit_qty(u)).collect();
    let backed_anywhere = |cq: &Quantity| {
        idx.units
            .iter()
            .filter(|u| allowed[u.source])
            .any(|u| idx.unit_qty(u).iter().any(|e| numbers::backs(cq, e)))
    };
    // Whether some claim value states each passage value (backs it or is
    // consistent with it): once per passage value, not once per pair of
    // claim values, which made a claim of thousands of values cubic.
    let claimed: Vec<bool> = if a.qty.len() > 1 {
        pq.iter()
            .map(|e| {
                a.qty
                    .iter()
                    .any(|c2| numbers::backs(&c2.q, e) || numbers::consistent(&c2.q, e))
            })
            .collect()
    } else {
        Vec::new()
    };
    for cq in &a.qty {
        if pq.iter().any(|e| numbers::backs(&cq.q, e)) {
            continue;
        }
        let rival = pq.iter().enumerate().any(|(i, e)| {
            numbers::conflicts(&cq.q, e)
                && !claimed
                    .get(i)
                    .copied()
                    .unwrap_or_else(|| numbers::backs(&cq.q, e) || numbers::consistent(&cq.q, e))
        });
        if rival {
            reasons.push(match cq.q.kind {
                QtyKind::Date => Reason::DateMismatch,
                QtyKind::Money => Reason::AmountMismatch,
                QtyKind::Count | QtyKind::Percent => Reason::NumberMismatch,
            });
        } else if !cq.q.soft && !backed_anywhere(&cq.q) {
            reasons.push(Reason::NumberNotFound);
        }
    }
}

/// How a content token stands with respect to negation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Polarity {
    Positive,
    /// Denied by an explicit negator ("not", "no", "never", "n't", "non-").
    Negated,
    /// Governed by an implicit negator ("avoid", "without", "fail", ...):
    /// "avoid using high pressure" neither asserts nor denies "using" the way
    /// "do not use high pressure" does, so it is not compared.
    Unclear,
}

/// Negators that deny the word they govern outright.
fn is_explicit_negator(norm: &str) -> bool {
    matches!(
        norm,
        "not"
            | "no"
            | "non"
            | "never"
            | "unable"
            | "cannot"
            | "nor"
            | "neither"
            | "none"
            | "nothing"
            | "nobody"
            | "nowhere"
    )
}

/// Polarity of token `i`. A negator governs only the first content word
/// after it ("do not use a high pressure hose" denies "use", not "high" or
/// "hose"), at most `NEG_WINDOW` tokens away with no clause punctuation in
/// between; only stopwords may come between. "not only" is not a negation.
/// Scoping every word within the window flagged faithful paraphrases whose
/// word order differs from the source ("no risk of spring frost" against
/// "all danger of spring frost has passed").
pub(super) fn polarity_of(text: &str, toks: &[Token], vocab: &text::Vocab, i: usize) -> Polarity {
    // Adverbs of time between a negator and its word ("is not now at the
    // depot", "was not yet shipped") neither end its scope nor use it up.
    let mut budget = tune::NEG_WINDOW;
    let mut k = i;
    while budget > 0 && k > 0 {
        k -= 1;
        let norm = vocab.norm(toks[k].norm_id);
        if matches!(
            norm,
            "now" | "yet" | "still" | "currently" | "already" | "ever"
        ) {
            continue;
        }
        budget -= 1;
        // "out of stock", "out of warranty"; "rather than the card",
        // "instead of a refund": the word is what is not the case.
        let pair = k
            .checked_sub(1)
            .map(|j| (vocab.norm(toks[j].norm_id), norm));
        if matches!(
            pair,
            Some(("out", "of") | ("rather", "than") | ("instead", "of"))
        ) && text
            .get(toks[k].end..toks[i].start)
            .is_some_and(|gap| !gap.contains([',', '.', ';', ':', '(', ')', '!', '?', '"']))
        {
            return Polarity::Negated;
        }
        // "no longer active": "longer" belongs to the negator.
        if norm == "longer" && k > 0 && vocab.norm(toks[k - 1].norm_id) == "no" {
            continue;
        }
        if negates(toks, vocab, k) {
            let scoped = toks.get(k + 1).is_none_or(|n| !n.lex.only)
                && text.get(toks[k].end..toks[i].start).is_some_and(|gap| {
                    !gap.contains([',', '.', ';', ':', '(', ')', '!', '?', '"'])
                });
            return match (scoped, is_explicit_negator(norm)) {
                (false, _) => Polarity::Positive,
                (true, true) => Polarity::Negated,
                (true, false) => Polarity::Unclear,
            };
        }
        if !toks[k].lex.stopword {
            return Polarity::Positive;
        }
    }
    Polarity::Positive
}
