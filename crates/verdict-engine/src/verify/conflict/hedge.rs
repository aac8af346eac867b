//! Hedged evidence: a modal, a conditional or a state word that leaves an
//! event the claim reports as done still open; and how a claim reports an
//! event.

use super::*;

/// How far a hedge reaches: a modal or a conditional governs the words
/// after it ("could take up to 10 days to reach"); a state word ("pending",
/// "requested", "scheduled") the words beside it ("a reset was requested",
/// "deletion is scheduled").
enum HedgeReach {
    After(usize),
    Around(usize),
}

/// Whether token `k` is a hedge, and how far it reaches: "may" before a
/// number is a month, and a hedge the claim itself uses is not one.
fn hedge_at(
    toks: &[Token],
    vocab: &text::Vocab,
    k: usize,
    claim_terms: &[u32],
) -> Option<HedgeReach> {
    let t = &toks[k];
    let norm = vocab.norm(t.norm_id);
    // "the request to waive the fee", "an attempt to charge the card".
    let asked = matches!(
        norm,
        "request" | "requests" | "attempt" | "attempts" | "application"
    ) && toks
        .get(k + 1)
        .is_some_and(|n| vocab.norm(n.norm_id) == "to");
    if asked && !claim_terms.contains(&t.stem_id) {
        return Some(HedgeReach::After(3));
    }
    if !t.lex.hedge || claim_terms.contains(&t.stem_id) {
        return None;
    }
    // "I can confirm that ...", "we can see that ...": a speaker's
    // preamble, not doubt about what follows.
    if matches!(norm, "can" | "could")
        && toks.get(k + 1).is_some_and(|n| {
            matches!(
                vocab.norm(n.norm_id),
                "confirm" | "see" | "tell" | "verify" | "assure" | "report" | "say"
            )
        })
    {
        return None;
    }
    // "May 5", "2 May", "in May": the month.
    if norm == "may"
        && (t.capitalized
            || toks
                .get(k + 1)
                .is_some_and(|n| n.kind == text::TokenKind::Number)
            || k.checked_sub(1)
                .is_some_and(|j| toks[j].kind == text::TokenKind::Number))
    {
        return None;
    }
    Some(match norm {
        "expected" | "expect" | "expects" | "scheduled" | "pending" | "planned" | "plans"
        | "requested" | "requests" | "awaiting" | "intends" | "intended" | "estimated"
        | "projected" | "anticipated" | "proposed" | "tentative" | "tentatively" => {
            HedgeReach::Around(3)
        }
        _ => HedgeReach::After(8),
    })
}

/// Whether the claim states anything under a hedge. A marker that is the
/// claim's own reported event ("a password reset was requested", "the
/// call was scheduled") is not one: the claim says that it happened.
pub(crate) fn claim_hedged(toks: &[Token], vocab: &text::Vocab) -> bool {
    let norm = |k: usize| toks.get(k).map_or("", |t| vocab.norm(t.norm_id));
    let reported = |k: usize| {
        matches!(norm(k), "requested" | "scheduled" | "planned" | "expected")
            && norm(k + 1) != "to"
            && k.checked_sub(1).is_some_and(|j| {
                matches!(norm(j), "was" | "were")
                    || norm(j) == "been"
                        && matches!(norm(j.wrapping_sub(1)), "has" | "have" | "had")
            })
    };
    (0..toks.len()).any(|k| !reported(k) && hedge_at(toks, vocab, k, &[]).is_some())
}

/// Irregular past forms that report an event as done.
pub(super) fn irregular_past(norm: &str) -> bool {
    matches!(
        norm,
        "sent"
            | "paid"
            | "made"
            | "took"
            | "taken"
            | "gave"
            | "given"
            | "got"
            | "gotten"
            | "went"
            | "gone"
            | "came"
            | "brought"
            | "bought"
            | "sold"
            | "told"
            | "left"
            | "held"
            | "kept"
            | "built"
            | "won"
            | "lost"
            | "found"
            | "spent"
            | "began"
            | "begun"
            | "wrote"
            | "written"
            | "ran"
            | "met"
            | "rang"
            | "saw"
            | "seen"
            | "did"
            | "done"
            | "shipped"
            | "hit"
            | "cut"
            | "set"
            | "put"
            | "shut"
            | "reset"
            | "cost"
            | "quit"
            | "split"
            | "spread"
            | "read"
            | "let"
            | "upset"
            | "froze"
            | "frozen"
            | "chose"
            | "chosen"
            | "drove"
            | "driven"
            | "flew"
            | "flown"
            | "arose"
            | "became"
            | "broke"
            | "broken"
            | "rose"
            | "fell"
            | "fallen"
    )
}

/// Whether the claim reports an event as done ("the refund was issued",
/// "the order shipped", "the courier picked up the return"), as opposed
/// to an instruction ("click Apply"), a general statement ("it is designed
/// to keep food warm") or a plan. Only such a claim can be contradicted by
/// evidence that puts the event in the future or in doubt.
/// Whether token `k` is a past form of a verb ("approved", "sent").
pub(crate) fn reports_event_at(toks: &[Token], vocab: &text::Vocab, k: usize) -> bool {
    toks.get(k).is_some_and(|t| {
        let w = vocab.norm(t.norm_id);
        irregular_past(w) || (w.len() > 4 && w.ends_with("ed") && t.kind == text::TokenKind::Word)
    })
}

/// The stem of the past participle right after the claim's "was", "were"
/// or "been" ("the customer was charged" → charge), if there is one.
pub(crate) fn reported_event(toks: &[Token], vocab: &text::Vocab) -> Option<u32> {
    (1..toks.len()).find_map(|i| {
        let prev = vocab.norm(toks[i - 1].norm_id);
        (matches!(prev, "was" | "were" | "been") && reports_event_at(toks, vocab, i))
            .then_some(toks[i].stem_id)
    })
}

pub(crate) fn claim_reports_done(toks: &[Token], vocab: &text::Vocab) -> bool {
    let norm = |i: usize| vocab.norm(toks[i].norm_id);
    let past = |i: usize| {
        let w = norm(i);
        irregular_past(w)
            || (w.len() > 4 && w.ends_with("ed") && toks[i].kind == text::TokenKind::Word)
    };
    (0..toks.len()).any(|i| {
        match norm(i) {
            "did" => return true,
            // "was issued", "was $19.99", "has been processed".
            "was" | "were" => return true,
            "been" => return (i + 1..(i + 3).min(toks.len())).any(past),
            _ => {}
        }
        // "The order shipped", "the courier picked up": a past form right
        // after the subject near the start. A past form elsewhere is
        // usually an adjective ("installed programs", "a wounded arm").
        i > 0 && i <= 5 && past(i) && !toks[i - 1].lex.stopword
    })
}

/// The clauses that carry most of the claim all put the claim's words
/// under a hedge ("will be issued", "could take 10 days to reach", "a
/// reset was requested", "deletion is scheduled") while the claim reports
/// the event as done: `hedged_evidence`. A hedge elsewhere in the clause
/// ("you may find it says: the drawer is designed ...") governs other
/// words and does not count.
pub(super) fn hedged(a: &Analysis, sentences: &[Sentence<'_>], vocab: &text::Vocab) -> Option<Hit> {
    if a.hedge || !a.done {
        return None;
    }
    // The claim's words and its numbers: "will be refunded $40" governs
    // the claim's "$40" even when it words the event differently.
    let terms: Vec<u32> = a
        .terms
        .iter()
        .filter_map(|t| t.stem)
        .chain(a.qty_stems.iter().copied())
        .collect();
    let best = best_overlap(sentences)?;
    // The event the claim reports with "was"/"were"/"been" ("was
    // charged"): when some clause names it, those clauses decide, not the
    // ones that share most of the claim's other words ("The customer
    // returned an opened camera. A fee will be charged for it.").
    let names_event = |s: &Sentence<'_>| {
        a.event
            .is_some_and(|e| s.toks.iter().any(|t| t.stem_id == e))
    };
    let by_event = sentences.iter().any(names_event);
    let mut first = None;
    for (si, s) in sentences.iter().enumerate().filter(|(_, s)| {
        if by_event {
            names_event(s)
        } else {
            s.overlap() == best
        }
    }) {
        let governed = (0..s.toks.len()).find_map(|k| {
            let range = match hedge_at(s.toks, vocab, k, &terms)? {
                HedgeReach::After(n) => k + 1..(k + 1 + n).min(s.toks.len()),
                HedgeReach::Around(n) => k.saturating_sub(n)..(k + 1 + n).min(s.toks.len()),
            };
            let governed = s.toks.get(range).unwrap_or(&[]);
            let word = governed
                .iter()
                .map(|t| t.stem_id)
                .find(|st| terms.contains(st))
                .or_else(|| {
                    // "will be $19.99" governs the claim's "USD 19.99":
                    // compared as quantities, not surfaces.
                    let qty = crate::numbers::extract(governed, vocab);
                    let backed = qty
                        .iter()
                        .any(|e| a.qty.iter().any(|c| crate::numbers::backs(&c.q, e)));
                    backed.then(|| a.qty_stems.first().copied()).flatten()
                })?;
            Some((word, k))
        });
        match governed {
            Some((word, k)) => {
                first.get_or_insert((word, (si, k)));
            }
            // A clause with a hedge over other words ("will be flagged by
            // the risk team") neither asserts nor hedges the claim's; a
            // clause with no hedge at all asserts it.
            None if (0..s.toks.len()).any(|k| hedge_at(s.toks, vocab, k, &terms).is_some()) => {}
            None => return None,
        }
    }
    let (word, at) = first?;
    Some(Hit::on_stem(Reason::HedgedEvidence, word, at))
}
