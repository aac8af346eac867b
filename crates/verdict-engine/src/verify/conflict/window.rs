//! Windows and limits: "was requested within the 30-day return window",
//! "the $620 refund is within the $500 limit", "was within the agent's
//! approval limit".
//!
//! Such a claim says one value lies inside a bound, and the evidence rarely
//! repeats the word "within": it gives the two dates, or says the request
//! is "outside the window" or "exceeded the limit". Three readings, each only
//! for a claim about one event (it reports the event as done, or says it
//! "is" or "was" within; a policy such as "returns are accepted within 30
//! days" is not one):
//! - the claim's own amounts: the amount before "within" is larger than the
//!   bound after it (`amount_mismatch`);
//! - a clause of the evidence holds the bound's head noun ("window",
//!   "limit") with "outside", "exceeded" or "beyond", or "over" or "above"
//!   right before it ("over limit"; not for a span of time) (`status_conflict`);
//! - a bound in days ("30-day", "14 days") and the evidence gives exactly
//!   two full dates, further apart than that (`number_mismatch`).

use super::*;
use crate::numbers::{Dim, QtyKind, Quantity};

/// Where in the evidence: a unit, and a token range in its source.
type Place = (usize, (usize, usize));

/// A bound the evidence shows broken: the claim's span, and the evidence's
/// unit and token range when it has one.
pub(in crate::verify) struct Breach {
    pub(in crate::verify) reason: Reason,
    pub(in crate::verify) claim: (usize, usize),
    pub(in crate::verify) at: Option<Place>,
}

/// Words that put a value inside a bound.
fn is_within(norm: &str) -> bool {
    matches!(norm, "within" | "under" | "below")
}

/// Words that say a bound was broken.
fn is_breach(norm: &str) -> bool {
    matches!(
        norm,
        "outside" | "exceeded" | "exceeds" | "exceeding" | "exceed" | "beyond" | "breached"
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days(y: i32, m: u8, d: u8) -> i64 {
    let (m, d) = (i64::from(m), i64::from(d));
    let y = i64::from(y) - i64::from(m <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The first bound the evidence shows broken, if any.
pub(in crate::verify) fn breached(
    a: &Analysis,
    idx: &Index<'_>,
    allowed: &[bool],
) -> Option<Breach> {
    let toks = &a.tokens;
    let vocab = idx.stemmer.vocab();
    let norm = |i: usize| toks.get(i).map_or("", |t| vocab.norm(t.norm_id));
    let w = (0..toks.len()).find(|&i| is_within(norm(i)))?;
    let stated = w > 0 && matches!(norm(w - 1), "is" | "was" | "are" | "were");
    if !(a.done || stated) {
        return None;
    }
    let span = |q: &Quantity| {
        let s = toks.get(q.tok_start).map_or(0, |t| t.start);
        let e = q
            .tok_end
            .checked_sub(1)
            .and_then(|k| toks.get(k))
            .map_or(s, |t| t.end);
        (s, e)
    };
    let within_span = (toks[w].start, toks[w].end);
    // The claim's own amounts: "$620 is within the $500 limit".
    let money: Vec<&Quantity> = a
        .qty
        .iter()
        .map(|c| &c.q)
        .filter(|q| q.kind == QtyKind::Money)
        .collect();
    if let (Some(x), Some(bound)) = (
        money.iter().rev().find(|q| q.tok_end <= w),
        money.iter().find(|q| q.tok_start > w),
    ) {
        if x.currency == bound.currency && x.value > bound.value {
            let at = evidence_of(idx, allowed, x);
            return Some(Breach {
                reason: Reason::AmountMismatch,
                claim: span(x),
                at,
            });
        }
    }
    // The bound's head noun: its last content word, before "of", "after",
    // "from" or the clause's end ("within the 30-day return window").
    let end = (w + 1..toks.len())
        .find(|&i| {
            matches!(norm(i), "of" | "after" | "from" | "for")
                || a.text
                    .get(toks[i - 1].end..toks[i].start)
                    .is_none_or(|g| g.contains([',', ';', '.']))
        })
        .unwrap_or(toks.len());
    let head = (w + 1..end)
        .rev()
        .find(|&i| toks[i].kind == text::TokenKind::Word && !toks[i].lex.stopword)
        .map(|i| toks[i].stem_id);
    if let Some(at) = head.and_then(|h| breach_word(idx, allowed, h, &vocab)) {
        return Some(Breach {
            reason: Reason::StatusConflict,
            claim: within_span,
            at: Some(at),
        });
    }
    // A bound in days against the evidence's two dates.
    let bound = a.qty.iter().map(|c| &c.q).find(|q| {
        q.tok_start > w
            && q.tok_start <= w + 3
            && q.kind == QtyKind::Count
            && q.unit.is_some_and(|u| u.dim == Dim::Duration)
    })?;
    let limit_days = bound.value * bound.unit.map_or(0.0, |u| u.factor) / 86_400.0;
    let (apart, late) = two_dates(idx, allowed)?;
    (apart > limit_days).then(|| Breach {
        reason: Reason::NumberMismatch,
        claim: span(bound),
        at: Some(late),
    })
}

/// A clause of the searched units that holds the bound's head noun (stem
/// `head`) and a word that says it was broken: its unit and token.
fn breach_word(idx: &Index<'_>, allowed: &[bool], head: u32, vocab: &text::Vocab) -> Option<Place> {
    // "over the past year" is a span, not a broken bound.
    let timed = matches!(
        vocab.stem(head),
        "year" | "month" | "week" | "day" | "hour" | "minut" | "second"
    );
    for &ui in idx.posting(head) {
        let ui = ui as usize;
        let unit = &idx.units[ui];
        if !allowed[unit.source] {
            continue;
        }
        let src = &idx.sources[unit.source];
        let utoks = src.tokens.get(unit.tok_start..unit.tok_end).unwrap_or(&[]);
        for clause in clauses(src.text, utoks, vocab) {
            if !clause.iter().any(|t| t.stem_id == head) {
                continue;
            }
            // "outside the window", "exceeded the limit"; "over" and
            // "above" only right before the noun ("flagged as over limit").
            let over = |k: usize| {
                !timed
                    && matches!(vocab.norm(clause[k].norm_id), "over" | "above")
                    && (clause.get(k + 1).is_some_and(|t| t.stem_id == head)
                        || (clause
                            .get(k + 1)
                            .is_some_and(|t| vocab.norm(t.norm_id) == "the")
                            && clause.get(k + 2).is_some_and(|t| t.stem_id == head)))
            };
            let hit =
                (0..clause.len()).find(|&k| is_breach(vocab.norm(clause[k].norm_id)) || over(k));
            if let Some(t) = hit.map(|k| &clause[k]) {
                let k = unit.tok_start + utoks.iter().position(|x| x.start == t.start).unwrap_or(0);
                return Some((ui, (k, k + 1)));
            }
        }
    }
    None
}

/// When the searched units state exactly two distinct full dates: how many
/// days apart they are, and the later one's unit and tokens.
fn two_dates(idx: &Index<'_>, allowed: &[bool]) -> Option<(f64, Place)> {
    let mut dates: Vec<(i64, usize, (usize, usize))> = Vec::new();
    for (ui, uq) in idx.allowed_unit_qty(allowed) {
        for e in uq
            .iter()
            .filter(|e| e.kind == QtyKind::Date && !e.date.ambiguous)
        {
            let (Some(y), Some(m), Some(d)) = (e.date.year, e.date.month, e.date.day) else {
                continue;
            };
            let n = days(y, m, d);
            if !dates.iter().any(|x| x.0 == n) {
                dates.push((n, ui, (e.tok_start, e.tok_end)));
                if dates.len() > 2 {
                    return None;
                }
            }
        }
    }
    let [first, second] = dates.as_slice() else {
        return None;
    };
    let (early, late) = if first.0 <= second.0 {
        (first, second)
    } else {
        (second, first)
    };
    #[allow(clippy::cast_precision_loss)] // day counts are far below 2^52
    let apart = (late.0 - early.0) as f64;
    Some((apart, (late.1, late.2)))
}

/// The first searched unit holding a value that `q` backs, and its tokens.
fn evidence_of(idx: &Index<'_>, allowed: &[bool], q: &Quantity) -> Option<Place> {
    idx.allowed_unit_qty(allowed).find_map(|(ui, uq)| {
        uq.iter()
            .find(|e| crate::numbers::backs(q, e))
            .map(|e| (ui, (e.tok_start, e.tok_end)))
    })
}
