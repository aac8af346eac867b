//! Contradictions that word overlap cannot see: polarity, exclusive states,
//! hedged evidence, quantifier scope, parties and directions (from/to),
//! states whose time bound has ended, and the order of two events.
//!
//! Coverage asks whether the evidence contains the claim's words; these
//! checks ask whether it says the same thing with them. "The refund was
//! denied" shares every content word but one with "The refund was approved",
//! and "The refund will be issued" shares all of them with "The refund was
//! issued". Each check reads the chosen passage sentence by sentence and lets
//! the sentence that carries most of the claim decide: "covers
//! manufacturing defects. Accidental damage ... is not covered" does not
//! support "covers accidental damage", because the sentence about accidental
//! damage is the one that says "not covered".
mod agents;
mod binding;
mod hedge;
mod parties;
mod sentence;
mod window;
pub(super) use agents::{slotting, Slotting};
pub(super) use binding::{bind, misbound, Binding};
use hedge::hedged;
pub(super) use hedge::{claim_hedged, claim_reports_done, reported_event, reports_event_at};
pub(super) use parties::possessive;
use parties::{ended, party, roles, scope};
use sentence::{sorted_set, stems_in, Sentence};
pub(super) use window::breached;

use std::sync::OnceLock;

use super::{negates, polarity_of, Analysis, Index, Polarity};
use crate::text::{self, Token};
use crate::{Conflict, Reason};

/// Coverage below which a passage is not aligned closely enough with the
/// claim to judge exclusive states or scope. Lower than the negation bar:
/// a claim whose own status word is missing ("denied" against "approved")
/// has lost that word's weight already.
const STATUS_MIN_COV: f64 = 0.3;

/// Groups of mutually exclusive states in refund, billing, shipping, access
/// and support language, as words; stemmed once at first use. Two words of
/// one group are exclusive; a word in two groups is exclusive with the
/// other members of each.
const STATE_GROUPS: &[&[&str]] = &[
    &["approved", "rejected", "declined", "denied", "refused"],
    &["approve", "reject", "decline", "deny", "refuse"],
    &["succeeded", "failed"],
    &["succeed", "fail"],
    &["success", "failure"],
    &["successful", "unsuccessful", "failed"],
    &["accepted", "refused", "rejected", "declined"],
    &["accept", "refuse"],
    &["granted", "denied", "revoked", "refused"],
    &["enabled", "disabled"],
    &[
        "active",
        "inactive",
        "suspended",
        "cancelled",
        "canceled",
        "closed",
        "terminated",
        "deactivated",
        "revoked",
        "expired",
    ],
    &["satisfied", "dissatisfied", "unsatisfied"],
    &["full", "partial"],
    &["refunded", "charged"],
    &["refund", "charge"],
    &["fully", "partially"],
    &["primary", "secondary"],
    &["subscribed", "unsubscribed"],
    &["activated", "deactivated", "suspended"],
    &["paid", "unpaid", "overdue", "outstanding"],
    &["delivered", "undelivered", "lost", "returned", "missing"],
    &["valid", "invalid", "expired", "revoked"],
    &["covered", "excluded"],
    &["damaged", "undamaged", "intact"],
    &["eligible", "ineligible"],
    &["open", "resolved", "closed"],
    &["opened", "closed"],
    &["shipped", "unshipped", "cancelled", "canceled"],
    &["locked", "unlocked"],
    &["verified", "unverified"],
    &["completed", "incomplete"],
    &["online", "offline"],
    &["passed", "failed"],
    &["present", "absent"],
    &["won", "lost"],
    &["increased", "decreased"],
    &["increase", "decrease"],
    &["included", "excluded"],
    &["allowed", "blocked", "forbidden", "prohibited"],
    &["confirmed", "unconfirmed"],
    &["able", "unable"],
    &["available", "unavailable"],
    &["possible", "impossible"],
    &["legal", "illegal"],
    &["refundable", "nonrefundable"],
    &["correct", "incorrect"],
    &["authorized", "unauthorized"],
    &["authorised", "unauthorised"],
    &["complete", "incomplete"],
    &["true", "false"],
    &["before", "after"],
    &["above", "below"],
    &["more", "less", "fewer"],
    &["maximum", "minimum"],
    &["higher", "lower"],
    &["earlier", "later"],
    &["first", "last"],
    &["male", "female"],
    &["win", "lose"],
    &["rise", "fall"],
    &["allow", "prohibit", "forbid"],
    &["include", "exclude"],
];

/// Words that begin an exception list: what follows is not what the rest of
/// the sentence says.
fn is_exception_marker(toks: &[Token], vocab: &text::Vocab, k: usize) -> bool {
    let norm = |i: usize| toks.get(i).map_or("", |t| vocab.norm(t.norm_id));
    matches!(
        norm(k),
        "except" | "excluding" | "excepting" | "exception" | "exceptions"
    ) || matches!(
        (norm(k), norm(k + 1)),
        ("other", "than") | ("apart", "from") | ("but", "not")
    ) || (norm(k) == "apply" && k > 0 && negates(toks, vocab, k - 1))
}

/// Words that restrict a statement to part of what "all" would cover.
fn is_restriction(norm: &str) -> bool {
    matches!(
        norm,
        "except" | "excluding" | "only" | "some" | "certain" | "most" | "excepting"
    )
}

/// Quantifiers that claim the whole of something.
pub(super) fn is_universal(norm: &str) -> bool {
    matches!(
        norm,
        "all" | "every" | "any" | "each" | "always" | "everything" | "everyone" | "both"
    )
}

/// Stem → the stems exclusive with it (never itself; the relation is
/// symmetric), built once. Looked up by `&str`, so a query allocates
/// nothing (it is asked for many word pairs per claim).
fn exclusive_stems() -> &'static ahash::AHashMap<String, ahash::AHashSet<String>> {
    static PAIRS: OnceLock<ahash::AHashMap<String, ahash::AHashSet<String>>> = OnceLock::new();
    PAIRS.get_or_init(|| {
        let stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
        let mut out: ahash::AHashMap<String, ahash::AHashSet<String>> = ahash::AHashMap::new();
        let mut pair = |x: &str, y: &str| {
            out.entry(x.to_string()).or_default().insert(y.to_string());
        };
        for group in STATE_GROUPS {
            let stems: Vec<String> = group
                .iter()
                .map(|w| stemmer.stem(&crate::spelling::american(w)).into_owned())
                .collect();
            for x in &stems {
                for y in &stems {
                    if x != y {
                        pair(x, y);
                    }
                }
            }
        }
        for (a, b) in super::antonyms::PAIRS {
            let (x, y) = (stemmer.stem(a), stemmer.stem(b));
            if x != y {
                pair(&x, &y);
                pair(&y, &x);
            }
        }
        out
    })
}

/// Words that open a new clause after a comma, or on their own.
fn opens_clause(norm: &str) -> bool {
    matches!(
        norm,
        "but"
            | "while"
            | "whereas"
            | "however"
            | "although"
            | "though"
            | "yet"
            | "after"
            | "before"
            | "because"
            | "when"
    )
}

/// Role nouns that name a party to a transaction or a ticket.
fn is_role(norm: &str) -> bool {
    text::is_party(norm)
        || matches!(
            norm,
            "seller"
                | "merchant"
                | "vendor"
                | "supplier"
                | "courier"
                | "driver"
                | "carrier"
                | "manager"
                | "supervisor"
                | "agent"
                | "admin"
                | "administrator"
                | "technician"
                | "support"
                | "bank"
                | "issuer"
                | "warehouse"
                | "store"
                | "owner"
                | "employee"
                | "staff"
                | "team"
                | "reviewer"
                | "auditor"
                | "landlord"
                | "tenant"
                | "sender"
                | "recipient"
                | "buyer"
                | "payer"
                | "payee"
                | "cardholder"
                | "user"
                | "requester"
                | "approver"
        )
}

/// A sentence's clauses: split at `;`, before "but", "while",
/// "whereas", "however", "although", "though" and "yet", and at a comma
/// before "and" or "so". "Access was granted to Bob; Alice's request was
/// denied" is two statements about two parties.
pub(super) fn clauses<'t>(body: &str, toks: &'t [Token], vocab: &text::Vocab) -> Vec<&'t [Token]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..toks.len() {
        let gap = body.get(toks[i - 1].end..toks[i].start).unwrap_or("");
        let norm = vocab.norm(toks[i].norm_id);
        let cut = gap.contains(';')
            || opens_clause(norm)
            || (gap.contains(',') && matches!(norm, "and" | "so"));
        if cut && i > start {
            out.push(&toks[start..i]);
            start = i;
        }
    }
    if start < toks.len() {
        out.push(&toks[start..]);
    }
    out
}

/// Whether the gap between tokens `a` and `b` of `text` (a < b) ends a
/// stretch of words that belong together: `, ; ( ) . ! ?` or a line end,
/// and a colon when `colon`; also when either token is missing.
fn gap_cuts(text: &str, toks: &[Token], a: usize, b: usize, colon: bool) -> bool {
    let (Some(x), Some(y)) = (toks.get(a), toks.get(b)) else {
        return true;
    };
    text.get(x.end..y.start).is_none_or(|gap| {
        gap.contains([',', ';', '(', ')', '.', '!', '?', '\n']) || (colon && gap.contains(':'))
    })
}

/// The stems of the claim clause that holds `stem` (the whole claim's
/// terms when no clause does); sorted.
fn claim_clause(a: &Analysis, stem: u32) -> &[u32] {
    a.clauses
        .iter()
        .find(|c| c.binary_search(&stem).is_ok())
        .map_or(&a.clause_all[..], |c| &c[..])
}

/// Which claim word a conflict is about.
enum ClaimSide {
    /// The claim token with this stem.
    Stem(u32),
    /// The claim's "all", "every", "any" ...
    Universal,
    /// The claim token at this index.
    At(usize),
}

/// A contradiction and where it is: the claim's word, and the clause and
/// token of the evidence that contradicts it.
struct Hit {
    reason: Reason,
    claim: ClaimSide,
    at: (usize, usize),
}

impl Hit {
    /// A conflict on the claim token with stem `stem`, against the token
    /// at `at`.
    fn on_stem(reason: Reason, stem: u32, at: (usize, usize)) -> Hit {
        Hit {
            reason,
            claim: ClaimSide::Stem(stem),
            at,
        }
    }
}

/// The first contradiction in `units` that coverage cannot see, if any,
/// with the two spans that disagree. `party_backed`: the evidence names
/// the claim's party in its event's slot ([`slotting`]), so the passage's
/// party check is not asked.
pub(super) fn find(
    a: &Analysis,
    idx: &Index<'_>,
    units: &[usize],
    coverage: f64,
    party_backed: bool,
) -> Option<(Reason, Option<Conflict>)> {
    let claim = a.text.as_str();
    let claim_toks = &a.tokens[..];
    let vocab = idx.stemmer.vocab();
    let vocab = &*vocab;
    let term_stems: Vec<u32> = a.terms.iter().filter_map(|t| t.stem).collect();
    let term_stems = sorted_set(&term_stems);
    let mut sentences: Vec<Sentence<'_>> = Vec::new();
    for &u in units {
        let unit = &idx.units[u];
        let src = &idx.sources[unit.source];
        let toks = src.tokens.get(unit.tok_start..unit.tok_end).unwrap_or(&[]);
        for clause in clauses(src.text, toks, vocab) {
            sentences.push(Sentence::new(src.text, src.id, clause, &term_stems));
        }
    }
    let mut hit = None;
    if coverage >= super::tune::NEG_MIN_COV {
        hit = negation(a, &sentences, vocab)
            .or_else(|| denied_predicate(a, &sentences, vocab))
            .or_else(|| hedged(a, &sentences, vocab));
    }
    if hit.is_none() && coverage >= STATUS_MIN_COV {
        hit = counted(&sentences, vocab, claim_toks)
            .or_else(|| status(a, &sentences, vocab))
            .or_else(|| scope(a, &sentences, vocab))
            .or_else(|| {
                (!party_backed)
                    .then(|| party(a, &sentences, vocab, claim, claim_toks))
                    .flatten()
            })
            .or_else(|| roles(&sentences, vocab, claim, claim_toks))
            .or_else(|| ended(a, &sentences, vocab, claim_toks))
            .or_else(|| one_of_all(a, &sentences, vocab))
            .or_else(|| order(idx, units, &sentences, vocab, claim_toks));
    }
    let hit = hit?;
    let claim_tok = claim_toks.iter().enumerate().find_map(|(i, t)| {
        let this = match hit.claim {
            ClaimSide::Stem(s) => t.stem_id == s,
            ClaimSide::Universal => is_universal(vocab.norm(t.norm_id)),
            ClaimSide::At(k) => i == k,
        };
        this.then_some(t)
    });
    let conflict = claim_tok.and_then(|ct| {
        let s = sentences.get(hit.at.0)?;
        let et = s.toks.get(hit.at.1)?;
        Some(Conflict::between(
            hit.reason,
            claim,
            (ct.start, ct.end),
            s.source_id,
            s.body,
            (et.start, et.end),
        ))
    });
    Some((hit.reason, conflict))
}

/// The most claim words any one sentence shares; `None` when no sentence
/// shares any.
fn best_overlap(sentences: &[Sentence<'_>]) -> Option<usize> {
    sentences
        .iter()
        .map(|s| s.overlap())
        .max()
        .filter(|&n| n > 0)
}

/// A claim word that the sentence carrying most of the claim states with
/// the opposite polarity: `negation_conflict`.
fn negation(a: &Analysis, sentences: &[Sentence<'_>], vocab: &text::Vocab) -> Option<Hit> {
    for &(stem, negated) in &a.polarity {
        let (mut same, mut opposite) = (0, 0);
        let mut at = (0, 0);
        let clause = claim_clause(a, stem);
        for (si, s) in sentences.iter().enumerate() {
            let mut occurrences = s.occurrences(stem).peekable();
            if occurrences.peek().is_none() {
                continue;
            }
            let overlap = s.overlap_in(clause);
            for i in occurrences {
                let Some(pol) = s.polarity(vocab, i) else {
                    continue;
                };
                // An unclear occurrence counts as agreeing: it blocks a
                // conflict.
                if pol == Polarity::Unclear || (pol == Polarity::Negated) == negated {
                    same = same.max(overlap);
                } else if overlap > opposite {
                    opposite = overlap;
                    at = (si, i);
                }
            }
        }
        if opposite > same {
            return Some(Hit::on_stem(Reason::NegationConflict, stem, at));
        }
    }
    None
}

/// The claim asserts without a negator, and every clause that carries
/// most of it denies its predicate ("was not granted", "has never been
/// paid", "did not ship"), even when the claim words the predicate
/// differently ("Bob was given access" against "access was not granted to
/// Bob"): `negation_conflict`.
fn denied_predicate(a: &Analysis, sentences: &[Sentence<'_>], vocab: &text::Vocab) -> Option<Hit> {
    if a.negated {
        return None;
    }
    // One of the claim's words is enough: a denied predicate fails closed.
    let best = best_overlap(sentences)?;
    let mut first = None;
    for (si, s) in sentences
        .iter()
        .enumerate()
        .filter(|(_, s)| s.overlap() == best)
    {
        let norm = |k: usize| s.toks.get(k).map_or("", |t| vocab.norm(t.norm_id));
        let at = (1..s.toks.len()).find(|&k| {
            matches!(norm(k), "not" | "never")
                && matches!(
                    norm(k - 1),
                    "was"
                        | "were"
                        | "is"
                        | "are"
                        | "has"
                        | "have"
                        | "had"
                        | "did"
                        | "does"
                        | "do"
                        | "been"
                        | "be"
                )
        })?;
        let word = s.toks[at..]
            .iter()
            .chain(s.toks[..at].iter())
            .map(|t| t.stem_id)
            .find(|st| a.terms.iter().any(|t| t.stem == Some(*st)))?;
        first.get_or_insert((word, (si, at)));
    }
    let (word, at) = first?;
    Some(Hit::on_stem(Reason::NegationConflict, word, at))
}

/// A claim word whose exclusive state the passage asserts with the same
/// polarity, where the claim's own word is not stated as strongly:
/// `status_conflict` ("denied" against "approved", "not approved" against
/// "not denied"; "not approved" against "denied" agrees).
fn status(a: &Analysis, sentences: &[Sentence<'_>], vocab: &text::Vocab) -> Option<Hit> {
    for &(stem, negated) in &a.polarity {
        // Only a word with an exclusive rival can be contradicted by one.
        let Some(rivals) = exclusive_stems().get(vocab.stem(stem)) else {
            continue;
        };
        // A claim that names both states ("before and after", "first and
        // last name") compares them; it does not assert one of them.
        if a.polarity
            .iter()
            .any(|&(other, _)| rivals.contains(vocab.stem(other)))
        {
            continue;
        }
        let (mut own, mut rival) = (0, 0);
        let mut at = (0, 0);
        let clause = claim_clause(a, stem);
        for (si, s) in sentences.iter().enumerate() {
            let stated = |i: usize| {
                s.polarity(vocab, i).is_some_and(|pol| {
                    pol != Polarity::Unclear && (pol == Polarity::Negated) == negated
                })
            };
            if s.occurrences(stem).any(stated) {
                own = own.max(s.overlap_in(clause));
                continue;
            }
            let rival_here = s.stateful(vocab).iter().copied().find(|&i| {
                let other = s.toks[i].stem_id;
                other != stem && rivals.contains(vocab.stem(other)) && stated(i)
            });
            if let Some(i) = rival_here {
                // The rival word stands in for the claim's own word.
                let overlap = s.overlap_in(clause);
                if overlap + 1 > rival {
                    rival = overlap + 1;
                    at = (si, i);
                }
            }
        }
        if rival > own {
            return Some(Hit::on_stem(Reason::StatusConflict, stem, at));
        }
    }
    None
}

/// The value of a count token: a small number word ("two") or digits.
fn count_value(t: &Token, vocab: &text::Vocab) -> Option<f64> {
    let norm = vocab.norm(t.norm_id);
    match t.kind {
        text::TokenKind::Number => norm.parse().ok(),
        _ => crate::numbers::small_word(norm),
    }
}

/// A spelled-out count in the claim ("two of the three items") that the
/// evidence states with another count in the same place ("one of the
/// three items"), and never with the claim's: `number_mismatch`. Small
/// number words are everyday language, so the number check does not hold
/// them to the evidence on their own; the same following word makes the
/// other count a rival for the same slot.
fn counted(sentences: &[Sentence<'_>], vocab: &text::Vocab, claim_toks: &[Token]) -> Option<Hit> {
    for (k, ct) in claim_toks.iter().enumerate() {
        if ct.kind == text::TokenKind::Number {
            continue;
        }
        let (Some(v), Some(next)) = (
            crate::numbers::small_word(vocab.norm(ct.norm_id)),
            claim_toks.get(k + 1),
        ) else {
            continue;
        };
        let mut rival = None;
        let mut same = false;
        for (si, s) in sentences.iter().enumerate() {
            for (j, et) in s.toks.iter().enumerate() {
                match count_value(et, vocab) {
                    Some(e) if e == v => same = true,
                    Some(_) if s.toks.get(j + 1).is_some_and(|n| n.norm_id == next.norm_id) => {
                        rival.get_or_insert((si, j));
                    }
                    _ => {}
                }
            }
        }
        if let (false, Some(at)) = (same, rival) {
            return Some(Hit::on_stem(Reason::NumberMismatch, ct.stem_id, at));
        }
    }
    None
}

/// "Both" or "all" of something in the claim, done ("were paid"), where
/// the evidence states it in one clause about that thing and not in
/// another ("A-1 was paid; A-2 is still open"): `scope_conflict`, on the
/// claim's quantifier and the last word of the clause that leaves it out.
fn one_of_all(a: &Analysis, sentences: &[Sentence<'_>], vocab: &text::Vocab) -> Option<Hit> {
    let event = a.event?;
    if !a.universal || a.excepts {
        return None;
    }
    // The claim's other words: what "both" is about ("invoices").
    let subject: Vec<u32> = a
        .terms
        .iter()
        .filter_map(|t| t.stem)
        .filter(|&s| s != event && !is_universal(vocab.stem(s)))
        .collect();
    let about: Vec<usize> = (0..sentences.len())
        .filter(|&i| {
            sentences[i]
                .toks
                .iter()
                .any(|t| subject.contains(&t.stem_id))
        })
        .collect();
    let states = |i: usize| {
        let s = &sentences[i];
        s.toks
            .iter()
            .enumerate()
            .any(|(k, t)| t.stem_id == event && !negates(s.toks, vocab, k.saturating_sub(1)))
    };
    if about.len() < 2 || !about.iter().any(|&i| states(i)) {
        return None;
    }
    let missing = about.iter().find(|&&i| !states(i))?;
    let s = &sentences[*missing];
    // Its last word, where the state it gives usually sits ("still open").
    let k = s
        .toks
        .iter()
        .rposition(|t| !t.lex.stopword && t.kind == text::TokenKind::Word)
        .unwrap_or(0);
    Some(Hit {
        reason: Reason::ScopeConflict,
        claim: ClaimSide::Universal,
        at: (*missing, k),
    })
}

/// The claim orders two events ("the refund was issued before the
/// chargeback") and the evidence puts them the other way round: by the
/// dates it gives each ("the chargeback was filed on May 2 and the refund
/// was issued on May 9") or in words ("issued after the chargeback"):
/// `date_mismatch`, on the claim's "before" or "after" and the evidence's
/// date or word.
fn order(
    idx: &Index<'_>,
    units: &[usize],
    sentences: &[Sentence<'_>],
    vocab: &text::Vocab,
    claim_toks: &[Token],
) -> Option<Hit> {
    let norm = |t: &Token| vocab.norm(t.norm_id);
    let b = claim_toks
        .iter()
        .position(|t| matches!(norm(t), "before" | "after"))?;
    let before = norm(&claim_toks[b]) == "before";
    let content = |toks: &[Token]| -> Vec<u32> {
        toks.iter()
            .filter(|t| !t.lex.stopword && t.kind == text::TokenKind::Word)
            .map(|t| t.stem_id)
            .collect()
    };
    let (mut left, mut right) = (content(&claim_toks[..b]), content(&claim_toks[b + 1..]));
    // A date after the word ("before May 3") is a deadline, not an event.
    if claim_toks[b + 1..]
        .iter()
        .any(|t| t.kind == text::TokenKind::Number || t.lex.month.is_some())
    {
        return None;
    }
    let shared: Vec<u32> = left.iter().filter(|s| right.contains(s)).copied().collect();
    left.retain(|s| !shared.contains(s));
    right.retain(|s| !shared.contains(s));
    if left.is_empty() || right.is_empty() {
        return None;
    }
    // In words: the evidence's own "before"/"after" between the two events.
    for (si, s) in sentences.iter().enumerate() {
        for (k, t) in s.toks.iter().enumerate() {
            let w = norm(t);
            if !matches!(w, "before" | "after") {
                continue;
            }
            let (l, r) = (content(&s.toks[..k]), content(&s.toks[k + 1..]));
            let has = |side: &[u32], of: &[u32]| side.iter().any(|x| of.contains(x));
            let same_way = has(&l, &left) && has(&r, &right);
            let flipped = has(&l, &right) && has(&r, &left);
            let evidence_before = w == "before";
            if (same_way && evidence_before != before) || (flipped && evidence_before == before) {
                return Some(Hit {
                    reason: Reason::DateMismatch,
                    claim: ClaimSide::At(b),
                    at: (si, k),
                });
            }
        }
    }
    // By dates: each event's nearest full date in the same sentence.
    for &u in units {
        let unit = &idx.units[u];
        let src = &idx.sources[unit.source];
        let toks = idx.unit_tokens(unit);
        let dates: Vec<(usize, (i32, u8, u8), usize)> = idx
            .unit_qty(unit)
            .iter()
            .filter(|q| q.kind == super::QtyKind::Date && !q.date.ambiguous)
            .filter_map(|q| {
                let (m, d) = (q.date.month?, q.date.day?);
                let at = q.tok_start.checked_sub(unit.tok_start)?;
                Some((at, (q.date.year.unwrap_or(0), m, d), q.tok_start))
            })
            .collect();
        if dates.len() < 2 || dates.iter().any(|d| d.1 .0 == 0) && dates.iter().any(|d| d.1 .0 != 0)
        {
            continue;
        }
        let when = |side: &[u32]| {
            let pos = toks.iter().position(|t| side.contains(&t.stem_id))?;
            dates
                .iter()
                .min_by_key(|d| {
                    // The date after the event's word first, then before.
                    if d.0 > pos {
                        d.0 - pos
                    } else {
                        toks.len() + pos - d.0
                    }
                })
                .copied()
        };
        let (Some(l), Some(r)) = (when(&left), when(&right)) else {
            continue;
        };
        if l.2 == r.2 {
            continue;
        }
        let reversed = if before { l.1 > r.1 } else { l.1 < r.1 };
        if reversed {
            let tok = src.tokens.get(l.2)?;
            let at = sentences.iter().enumerate().find_map(|(si, s)| {
                if !std::ptr::eq(s.body, src.text) {
                    return None;
                }
                let k = s.toks.iter().position(|t| t.start == tok.start)?;
                Some((si, k))
            })?;
            return Some(Hit {
                reason: Reason::DateMismatch,
                claim: ClaimSide::At(b),
                at,
            });
        }
    }
    None
}
