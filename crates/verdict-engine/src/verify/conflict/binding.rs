//! Values bound to the wrong event: the claim's date, amount or id is in the
//! evidence, but the clause that states the claim's event gives another.
//!
//! "The refund was processed on April 2" against "Return received April 2.
//! Refund processed April 5." holds every word and value of the claim, and
//! coverage says so; what is wrong is which event the date belongs to. The
//! claim ties each value to the word that governs it (the verb before it,
//! "processed"; the noun it modifies, "the $75 refund"; for a labelled id
//! such as "order 7781", the predicate the id is the subject or object of).
//! When the sentences that state that word positively all give a rival
//! value of the same kind (another date, amount or count; for an id, another
//! id with the same label) and none gives the claim's, the value belongs to
//! another event: `date_mismatch`, `amount_mismatch` or `number_mismatch`,
//! on the claim's value and the rival.

use super::*;
use crate::numbers::{self, QtyKind, Quantity};

/// Prepositions between a value and the word that governs it ("processed
/// on April 2", "a refund of $40", "issued against order 7781"): skipped
/// when looking for that word. Most are stopwords already; these are not
/// all.
fn is_preposition(norm: &str) -> bool {
    matches!(
        norm,
        "against"
            | "via"
            | "per"
            | "within"
            | "until"
            | "since"
            | "during"
            | "after"
            | "before"
            | "from"
            | "to"
            | "for"
            | "by"
            | "on"
            | "at"
            | "in"
            | "of"
            | "with"
            | "under"
            | "over"
            | "into"
            | "onto"
            | "toward"
            | "towards"
            | "across"
            | "through"
            | "between"
            | "among"
            | "around"
            | "dated"
    )
}

/// Tokens searched on either side of a claim value for the word that
/// governs it; the words that govern a value sit next to it, and the
/// bound keeps a claim of a million tokens linear.
const REACH: usize = 12;

/// Tokens of an evidence value's stretch read on either side of it.
const STRETCH: usize = 24;

/// Claim values bound, in claim order: a claim states a handful; the cap
/// keeps a claim of thousands of values from scanning the sources for each.
const MAX_BOUND: usize = 16;

/// What a claim value is tied to: the stem of the word that governs it,
/// and for a bare id ("order 7781") the stem of its label.
#[derive(Clone, Copy, Default)]
pub(in crate::verify) struct Binding {
    pub(in crate::verify) anchor: Option<u32>,
    pub(in crate::verify) label: Option<u32>,
}

/// One text's tokens, read for the words that govern its values.
struct Reader<'a> {
    text: &'a str,
    tokens: &'a [Token],
    vocab: &'a text::Vocab,
    /// Whether token `i` is part of a value.
    in_qty: &'a dyn Fn(usize) -> bool,
    /// A label before a colon governs the value after it ("Total due:
    /// $1,569.63"): evidence is read through colons, a claim is not.
    colon_cuts: bool,
}

impl Reader<'_> {
    fn word(&self, i: usize) -> Option<&Token> {
        self.tokens
            .get(i)
            .filter(|t| t.kind == text::TokenKind::Word)
    }

    /// Whether a clause boundary lies between tokens `a` and `b` (a < b).
    fn cut(&self, a: usize, b: usize) -> bool {
        gap_cuts(self.text, self.tokens, a, b, self.colon_cuts)
    }

    /// A word that can govern a value: not a stopword, preposition, name
    /// (capitalised inside a sentence), value, or the value's own label.
    fn content(&self, i: usize, label: Option<usize>) -> bool {
        self.word(i).is_some_and(|t| {
            let name = t.capitalized && i > 0 && !self.starts_line(i);
            let skipped = t.lex.stopword
                || (self.in_qty)(i)
                || is_preposition(self.vocab.norm(t.norm_id))
                || name
                || Some(i) == label;
            !skipped
        })
    }

    /// Whether token `i` begins its sentence or line (a capital there is
    /// not a name).
    fn starts_line(&self, i: usize) -> bool {
        i.checked_sub(1)
            .and_then(|p| self.tokens.get(p))
            .zip(self.tokens.get(i))
            .and_then(|(x, y)| self.text.get(x.end..y.start))
            .is_some_and(|gap| gap.contains(['.', '\n', ':', '!', '?']))
    }

    /// The nearest governing word after token `from`, within its clause.
    fn right(&self, from: usize, label: Option<usize>) -> Option<usize> {
        let mut prev = from.checked_sub(1)?;
        for i in from..self.tokens.len().min(from + REACH) {
            if self.cut(prev, i) {
                return None;
            }
            if self.content(i, label) {
                return Some(i);
            }
            prev = i;
        }
        None
    }

    /// The nearest governing word before token `to`, within its clause.
    fn left(&self, to: usize, label: Option<usize>) -> Option<usize> {
        let mut next = to;
        for i in (to.saturating_sub(REACH)..to).rev() {
            if self.cut(i, next) {
                return None;
            }
            if self.content(i, label) {
                return Some(i);
            }
            next = i;
        }
        None
    }

    /// The participle a be-verb introduces before token `to` in its clause
    /// ("was renewed for a fifth season on July 28": the date is the
    /// renewal's, not the season's).
    fn event_before(&self, to: usize) -> Option<usize> {
        let mut next = to;
        for i in (to.saturating_sub(REACH).max(1)..to).rev() {
            if self.cut(i, next) {
                return None;
            }
            let prev = self.vocab.norm(self.tokens[i - 1].norm_id);
            if matches!(prev, "was" | "were" | "been" | "is" | "are")
                && super::reports_event_at(self.tokens, self.vocab, i)
                && self.content(i, None)
            {
                return Some(i);
            }
            next = i;
        }
        None
    }

    fn stem(&self, i: Option<usize>) -> Option<u32> {
        i.and_then(|i| self.tokens.get(i)).map(|t| t.stem_id)
    }
}

/// Reads the binding of claim value `q` (token range in `tokens`). A full
/// date, an amount, a percentage or a count with a unit is governed by the
/// participle a be-verb introduces before it in its clause ("was renewed
/// for a fifth season on July 28"), else the nearest content word before it
/// ("totals $1,450"), else the one after ("the $75 refund"). A bare number right after a
/// content word is an id with that label ("order 7781"); it is governed by
/// the content word after it ("order 88213 was refunded"), else the one
/// before the label ("issued against order 7781"). Names, other values and
/// prepositions are skipped; a clause boundary (, ; : ( )) ends the search.
pub(in crate::verify) fn bind(
    claim: &str,
    q: &Quantity,
    tokens: &[Token],
    vocab: &text::Vocab,
    in_qty: &[bool],
) -> Binding {
    let none = Binding::default();
    if q.soft || !q.value.is_finite() {
        return none;
    }
    if q.kind == QtyKind::Date && (q.date.month.is_none() || q.date.day.is_none()) {
        return none;
    }
    // Measures and shares ("12 minutes per side", "20 %") describe more
    // than events do, and are stated loosely; only the day, the amount and
    // the id of an event are bound.
    if q.kind == QtyKind::Percent || (q.kind == QtyKind::Count && q.unit.is_some()) {
        return none;
    }
    let is_qty = |i: usize| in_qty.get(i).copied().unwrap_or(true);
    let r = Reader {
        text: claim,
        tokens,
        vocab,
        in_qty: &is_qty,
        colon_cuts: true,
    };
    let label_at = q
        .tok_start
        .checked_sub(1)
        .filter(|&k| !r.cut(k, q.tok_start))
        .filter(|&k| r.word(k).is_some_and(|t| !t.lex.stopword));
    // "received 120 units" counts units; "order 7781 was refunded" names
    // an order: an id is not followed by the thing it counts.
    let counts_next = r
        .word(q.tok_end)
        .is_some_and(|t| !t.lex.stopword && q.tok_end > 0 && !r.cut(q.tok_end - 1, q.tok_end));
    let labelled = q.kind == QtyKind::Count;
    let label = if labelled && !counts_next {
        label_at
    } else {
        None
    };
    if labelled && label.is_none() {
        // A bare number with no label ("3 of them", "120 units") is not an id.
        return none;
    }
    let first = label.unwrap_or(q.tok_start);
    let at = if labelled {
        r.right(q.tok_end, label).or_else(|| r.left(first, label))
    } else {
        r.event_before(first)
            .or_else(|| r.left(first, label))
            .or_else(|| r.right(q.tok_end, label))
    };
    Binding {
        anchor: r.stem(at),
        label: r.stem(label),
    }
}

/// Whether evidence value `e` of source `src` states the word with stem
/// `anchor` in its own stretch of the clause: between the nearest `,` `;`
/// `(` `)` or sentence end on either side (leftwards out of an opening
/// parenthesis), at most `MAX_WORDS_BETWEEN` content words away, read
/// through a colon and a dash
/// ("Total due: $1,569.63", "Mar 14 11:20 Delivered - front desk",
/// "refund of €62.00 issued to the card 2024-03-15"), positively.
fn governed_by(
    src: &super::super::IndexedSource<'_>,
    e: &Quantity,
    anchor: u32,
    vocab: &text::Vocab,
) -> bool {
    let toks = &src.tokens;
    // Leftwards out of a parenthesis: "submitted on 2024-02-19 (45 days
    // after delivery)" states the 45 days of the submission.
    let cut = |a: usize, b: usize, open_cuts: bool| {
        let (Some(x), Some(y)) = (toks.get(a), toks.get(b)) else {
            return true;
        };
        src.text.get(x.end..y.start).is_none_or(|gap| {
            gap.contains([',', ';', ')', '.', '!', '?', '\n']) || (open_cuts && gap.contains('('))
        })
    };
    let mut from = e.tok_start;
    while from > 0 && e.tok_start - from < STRETCH && !cut(from - 1, from, false) {
        from -= 1;
    }
    let mut to = e.tok_end.max(e.tok_start + 1);
    while to < toks.len() && to - e.tok_end < STRETCH && !cut(to - 1, to, true) {
        to += 1;
    }
    // Close to it, too: "renewal comes ahead of the Season 4 premiere on
    // Aug. 6" dates the premiere, not the renewal.
    let words_between = |a: usize, b: usize| {
        toks.get(a + 1..b).map_or(0, |ts| {
            ts.iter()
                .filter(|t| t.kind == text::TokenKind::Word && !t.lex.stopword)
                .count()
        })
    };
    (from..to)
        .filter(|&i| i < e.tok_start || i >= e.tok_end)
        .filter(|&i| {
            let between = if i < e.tok_start {
                words_between(i, e.tok_start)
            } else {
                words_between(e.tok_end - 1, i)
            };
            between <= MAX_WORDS_BETWEEN
        })
        .any(|i| {
            toks[i].stem_id == anchor && polarity_of(src.text, toks, vocab, i) != Polarity::Negated
        })
}

/// Content words that may stand between an evidence value and the word
/// that governs it ("refund of €62.00 issued to the original payment
/// method 2024-03-15").
const MAX_WORDS_BETWEEN: usize = 3;

/// A claim value bound to another event: which one, and the rival value.
pub(in crate::verify) struct Misbound {
    pub(in crate::verify) reason: Reason,
    /// Index into the claim's quantities.
    pub(in crate::verify) claim_qty: usize,
    /// The unit that states the governing word with the rival.
    pub(in crate::verify) unit: usize,
    /// The rival's token range in its source.
    pub(in crate::verify) tokens: (usize, usize),
}

/// The first claim value whose governing word the evidence states only
/// with a rival value (see the module comment); `None` when every value is
/// bound as the claim says, or nothing states the governing word.
pub(in crate::verify) fn misbound(
    a: &Analysis,
    idx: &Index<'_>,
    allowed: &[bool],
) -> Option<Misbound> {
    let vocab = idx.stemmer.vocab();
    for (k, cq) in a.qty.iter().enumerate().take(MAX_BOUND) {
        let Some(anchor) = cq.binding.anchor else {
            continue;
        };
        let mut backed = false;
        let mut rival = None;
        // Clause by clause: "received 2024-03-12; refund issued 2024-03-15"
        // is one sentence and two events.
        // Only the sentences that hold the word (its postings, in order).
        let clauses = idx.posting(anchor).iter().flat_map(|&ui| {
            let ui = ui as usize;
            let unit = &idx.units[ui];
            let src = &idx.sources[unit.source];
            let toks = if allowed[unit.source] {
                src.tokens.get(unit.tok_start..unit.tok_end).unwrap_or(&[])
            } else {
                &[]
            };
            // Clauses partition the unit's tokens in order: each starts
            // where the one before it ended.
            let mut base = unit.tok_start;
            clauses(src.text, toks, &vocab).into_iter().map(move |c| {
                let at = base;
                base += c.len();
                (ui, unit, src, at, c)
            })
        });
        for (ui, unit, src, base, clause) in clauses {
            let end = base + clause.len();
            let states = (base..end).any(|i| {
                src.tokens[i].stem_id == anchor
                    && polarity_of(src.text, &src.tokens, &vocab, i) != Polarity::Negated
            });
            if !states {
                continue;
            }
            // The unit's quantities are in token order.
            let all = idx.unit_qty(unit);
            let from = all.partition_point(|e| e.tok_start < base);
            let to = all.partition_point(|e| e.tok_start < end);
            let uq = all.get(from..to).unwrap_or(&[]);
            if uq.iter().any(|e| numbers::backs(&cq.q, e)) {
                backed = true;
                break;
            }
            if rival.is_some() {
                continue;
            }
            let other_claim_value = |e: &Quantity| {
                a.qty.iter().enumerate().any(|(j, c2)| {
                    j != k && (numbers::backs(&c2.q, e) || numbers::consistent(&c2.q, e))
                })
            };
            rival = uq
                .iter()
                .find(|e| {
                    let same_slot = match cq.binding.label {
                        Some(label) => {
                            e.kind == QtyKind::Count
                                && e.unit.is_none()
                                && e.tok_start
                                    .checked_sub(1)
                                    .and_then(|j| src.tokens.get(j))
                                    .is_some_and(|t| t.stem_id == label)
                        }
                        None => governed_by(src, e, anchor, &vocab),
                    };
                    // A year ("the 2016 Games") is not the day of an event.
                    let full =
                        e.kind != QtyKind::Date || (e.date.month.is_some() && e.date.day.is_some());
                    same_slot && full && numbers::conflicts(&cq.q, e) && !other_claim_value(e)
                })
                .map(|e| (ui, (e.tok_start, e.tok_end)));
        }
        if let (false, Some((unit, tokens))) = (backed, rival) {
            let reason = match cq.q.kind {
                QtyKind::Date => Reason::DateMismatch,
                QtyKind::Money => Reason::AmountMismatch,
                QtyKind::Count | QtyKind::Percent => Reason::NumberMismatch,
            };
            return Some(Misbound {
                reason,
                claim_qty: k,
                unit,
                tokens,
            });
        }
    }
    None
}
