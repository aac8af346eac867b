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

use std::collections::HashSet;
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

/// Whether two stems name exclusive states.
fn exclusive(a: &str, b: &str) -> bool {
    static PAIRS: OnceLock<HashSet<(String, String)>> = OnceLock::new();
    let pairs = PAIRS.get_or_init(|| {
        let stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
        let mut out = HashSet::new();
        for group in STATE_GROUPS {
            let stems: Vec<String> = group
                .iter()
                .map(|w| stemmer.stem(&crate::spelling::american(w)).into_owned())
                .collect();
            for x in &stems {
                for y in &stems {
                    if x != y {
                        out.insert((x.clone(), y.clone()));
                    }
                }
            }
        }
        for (a, b) in super::antonyms::PAIRS {
            let (x, y) = (stemmer.stem(a).into_owned(), stemmer.stem(b).into_owned());
            if x != y {
                out.insert((x.clone(), y.clone()));
                out.insert((y, x));
            }
        }
        out
    });
    a != b && pairs.contains(&(a.to_string(), b.to_string()))
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

/// One clause of the passage, and how many distinct claim terms it holds.
struct Sentence<'a> {
    body: &'a str,
    source_id: &'a str,
    toks: &'a [Token],
    /// Distinct claim terms the clause holds.
    overlap: usize,
    /// Those terms' stems, sorted.
    seen: Vec<u32>,
}

/// The distinct stems of `toks` that are among `stems`, sorted.
fn stems_in(toks: &[Token], stems: &[u32]) -> Vec<u32> {
    let mut seen: Vec<u32> = toks
        .iter()
        .map(|t| t.stem_id)
        .filter(|s| stems.contains(s))
        .collect();
    seen.sort_unstable();
    seen.dedup();
    seen
}

impl Sentence<'_> {
    /// How many of one claim clause's terms this clause holds: a claim
    /// word is judged against the evidence clause that carries the claim
    /// clause it sits in, not the whole claim ("X can be made, while Y
    /// cannot be produced" has two statements).
    fn overlap_in(&self, clause: &[u32]) -> usize {
        self.seen.iter().filter(|s| clause.contains(s)).count()
    }
}

/// The stems of the claim clause that holds `stem` (the whole claim's
/// terms when no clause does).
fn claim_clause(a: &Analysis, stem: u32) -> &[u32] {
    a.clauses
        .iter()
        .find(|c| c.contains(&stem))
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
/// with the two spans that disagree.
pub(super) fn find(
    a: &Analysis,
    idx: &Index<'_>,
    units: &[usize],
    coverage: f64,
    claim: &str,
) -> Option<(Reason, Option<Conflict>)> {
    // Before the vocabulary is borrowed: tokenising interns words.
    let claim_toks = text::tokenize(claim, &idx.stemmer);
    let vocab = idx.stemmer.vocab();
    let vocab = &*vocab;
    let term_stems: Vec<u32> = a.terms.iter().filter_map(|t| t.stem).collect();
    let mut sentences: Vec<Sentence<'_>> = Vec::new();
    for &u in units {
        let unit = &idx.units[u];
        let src = &idx.sources[unit.source];
        let toks = src.tokens.get(unit.tok_start..unit.tok_end).unwrap_or(&[]);
        for clause in clauses(src.text, toks, vocab) {
            let seen = stems_in(clause, &term_stems);
            sentences.push(Sentence {
                body: src.text,
                source_id: src.id,
                toks: clause,
                overlap: seen.len(),
                seen,
            });
        }
    }
    let mut hit = None;
    if coverage >= super::tune::NEG_MIN_COV {
        hit = negation(a, &sentences, vocab)
            .or_else(|| denied_predicate(a, &sentences, vocab))
            .or_else(|| hedged(a, &sentences, vocab));
    }
    if hit.is_none() && coverage >= STATUS_MIN_COV {
        hit = counted(&sentences, vocab, &claim_toks)
            .or_else(|| status(a, &sentences, vocab))
            .or_else(|| scope(a, &sentences, vocab))
            .or_else(|| party(a, &sentences, vocab, claim, &claim_toks))
            .or_else(|| roles(&sentences, vocab, claim, &claim_toks))
            .or_else(|| ended(a, &sentences, vocab, &claim_toks))
            .or_else(|| one_of_all(a, &sentences, vocab))
            .or_else(|| order(idx, units, &sentences, vocab, &claim_toks));
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
        let cp = |text: &str, byte: usize| text.get(..byte).map_or(0, |t| t.chars().count());
        Some(Conflict {
            reason: hit.reason,
            claim_start: cp(claim, ct.start),
            claim_end: cp(claim, ct.end),
            claim_quote: claim.get(ct.start..ct.end).unwrap_or("").to_string(),
            source_id: s.source_id.to_string(),
            evidence_start: cp(s.body, et.start),
            evidence_end: cp(s.body, et.end),
            evidence_quote: s.body.get(et.start..et.end).unwrap_or("").to_string(),
        })
    });
    Some((hit.reason, conflict))
}

/// The most claim words any one sentence shares; `None` when no sentence
/// shares any.
fn best_overlap(sentences: &[Sentence<'_>]) -> Option<usize> {
    sentences.iter().map(|s| s.overlap).max().filter(|&n| n > 0)
}

/// A claim word that the sentence carrying most of the claim states with
/// the opposite polarity: `negation_conflict`.
fn negation(a: &Analysis, sentences: &[Sentence<'_>], vocab: &text::Vocab) -> Option<Hit> {
    for &(stem, negated) in &a.polarity {
        let (mut same, mut opposite) = (0, 0);
        let mut at = (0, 0);
        let clause = claim_clause(a, stem);
        for (si, s) in sentences.iter().enumerate() {
            let overlap = s.overlap_in(clause);
            for (i, t) in s.toks.iter().enumerate() {
                if t.stem_id != stem || negates(s.toks, vocab, i) {
                    continue;
                }
                // An unclear occurrence counts as agreeing: it blocks a
                // conflict.
                let pol = polarity_of(s.body, s.toks, vocab, i);
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
        .filter(|(_, s)| s.overlap == best)
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
        let c = vocab.stem(stem);
        // A claim that names both states ("before and after", "first and
        // last name") compares them; it does not assert one of them.
        if a.polarity
            .iter()
            .any(|&(other, _)| exclusive(c, vocab.stem(other)))
        {
            continue;
        }
        let (mut own, mut rival) = (0, 0);
        let mut at = (0, 0);
        let clause = claim_clause(a, stem);
        for (si, s) in sentences.iter().enumerate() {
            let overlap = s.overlap_in(clause);
            let mut has_own = false;
            let mut rival_here = None;
            for (i, t) in s.toks.iter().enumerate() {
                if negates(s.toks, vocab, i) {
                    continue;
                }
                let pol = polarity_of(s.body, s.toks, vocab, i);
                if pol == Polarity::Unclear || (pol == Polarity::Negated) != negated {
                    continue;
                }
                if t.stem_id == stem {
                    has_own = true;
                } else if rival_here.is_none() && exclusive(c, vocab.stem(t.stem_id)) {
                    rival_here = Some(i);
                }
            }
            if has_own {
                own = own.max(overlap);
            } else if let Some(i) = rival_here {
                // The rival word stands in for the claim's own word.
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
        | "requested" | "requests" | "awaiting" | "intends" | "intended" => HedgeReach::Around(3),
        _ => HedgeReach::After(8),
    })
}

/// Whether the claim states anything under a hedge. A marker that is the
/// claim's own reported event ("a password reset was requested", "the
/// call was scheduled") is not one: the claim says that it happened.
pub(super) fn claim_hedged(toks: &[Token], vocab: &text::Vocab) -> bool {
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
fn irregular_past(norm: &str) -> bool {
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
pub(super) fn reports_event_at(toks: &[Token], vocab: &text::Vocab, k: usize) -> bool {
    toks.get(k).is_some_and(|t| {
        let w = vocab.norm(t.norm_id);
        irregular_past(w) || (w.len() > 4 && w.ends_with("ed") && t.kind == text::TokenKind::Word)
    })
}

/// The stem of the past participle right after the claim's "was", "were"
/// or "been" ("the customer was charged" → charge), if there is one.
pub(super) fn reported_event(toks: &[Token], vocab: &text::Vocab) -> Option<u32> {
    (1..toks.len()).find_map(|i| {
        let prev = vocab.norm(toks[i - 1].norm_id);
        (matches!(prev, "was" | "were" | "been") && reports_event_at(toks, vocab, i))
            .then_some(toks[i].stem_id)
    })
}

pub(super) fn claim_reports_done(toks: &[Token], vocab: &text::Vocab) -> bool {
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
fn hedged(a: &Analysis, sentences: &[Sentence<'_>], vocab: &text::Vocab) -> Option<Hit> {
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
            s.overlap == best
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

/// Whether token `t` of `body` is a possessive ("Casey's").
pub(super) fn possessive(body: &str, t: &Token) -> bool {
    let span = body.get(t.start..t.end).unwrap_or("");
    let after = body.get(t.end..).unwrap_or("");
    [span.strip_suffix('s').unwrap_or(""), after]
        .iter()
        .any(|x| {
            x.ends_with(['\'', '\u{2019}']) || x.starts_with("'s") || x.starts_with("\u{2019}s")
        })
}

/// The claim binds its predicate to a party (a name or a role such as
/// "the manager"), and the clauses that carry the predicate name another
/// party instead: "The agent approved the refund; the manager was not
/// consulted" does not support "The manager approved the refund":
/// `party_conflict`.
fn party(
    a: &Analysis,
    sentences: &[Sentence<'_>],
    vocab: &text::Vocab,
    claim: &str,
    claim_toks: &[Token],
) -> Option<Hit> {
    if let Some(hit) = designated_party(sentences, vocab, claim, claim_toks) {
        return Some(hit);
    }
    let is_party_term = |t: &super::Term| t.name || t.surf.is_some_and(|s| is_role(vocab.norm(s)));
    let parties: Vec<u32> = a
        .terms
        .iter()
        .filter(|t| is_party_term(t))
        .filter_map(|t| t.stem)
        .collect();
    if parties.is_empty() {
        return None;
    }
    let predicate: Vec<u32> = a
        .terms
        .iter()
        .filter(|t| !is_party_term(t))
        .filter_map(|t| t.stem)
        .collect();
    let count = |s: &Sentence<'_>, set: &[u32]| stems_in(s.toks, set).len();
    let best = sentences
        .iter()
        .map(|s| count(s, &predicate))
        .max()
        .unwrap_or(0);
    if best == 0 {
        return None;
    }
    let carriers: Vec<(usize, &Sentence<'_>)> = sentences
        .iter()
        .enumerate()
        .filter(|(_, s)| count(s, &predicate) == best)
        .collect();
    if carriers
        .iter()
        .any(|(_, s)| count(s, &parties) == parties.len())
    {
        return None;
    }
    // The claim's party the carrying clauses leave out.
    let missing = *parties.iter().find(|p| {
        !carriers
            .iter()
            .any(|(_, s)| s.toks.iter().any(|x| x.stem_id == **p))
    })?;
    // Like for like: a missing name is replaced by another name, a missing
    // role by another role ("the agent" for "the manager"). A product name
    // in the clause is not a party standing in for "the customer".
    let missing_name = a.terms.iter().any(|t| {
        t.name
            && !carriers.iter().any(|(_, s)| {
                t.stem
                    .is_some_and(|st| s.toks.iter().any(|x| x.stem_id == st))
            })
    });
    let names_another = |s: &Sentence<'_>| {
        s.toks.iter().position(|t| {
            if parties.contains(&t.stem_id) || predicate.contains(&t.stem_id) || t.lex.stopword {
                return false;
            }
            let norm = vocab.norm(t.norm_id);
            if missing_name {
                // Another name in the slot the claim's name fills: an owner
                // ("Casey's account") or a recipient or agent ("granted to
                // Lee", "reset by Emma"). Any other capitalised word is too
                // common in prose to stand for a party.
                let at = s.toks.iter().position(|x| std::ptr::eq(x, t));
                let norm_at = |k: usize| s.toks.get(k).map_or("", |x| vocab.norm(x.norm_id));
                let slot = at.is_some_and(|k| {
                    let agent = |j: usize| matches!(norm_at(j), "to" | "by" | "for");
                    // "granted to Lee", "reset by Emma"; "Globex was
                    // invoiced" (the subject of the clause's verb).
                    (k > 0 && agent(k - 1))
                        || ((k == 0 || norm_at(k - 1) == "the")
                            && matches!(
                                norm_at(k + 1),
                                "was" | "were" | "is" | "are" | "has" | "had" | "have"
                            ))
                });
                // "Casey's account" owns the claim's thing; "the World's
                // Fair" owns nothing the claim is about.
                let owns_claim_thing = possessive(s.body, t)
                    && at
                        .and_then(|k| s.toks.get(k + 1))
                        .is_some_and(|n| predicate.contains(&n.stem_id));
                t.capitalized
                    && t.kind == text::TokenKind::Word
                    && t.lex.month.is_none()
                    && (owns_claim_thing || slot)
            } else {
                is_role(norm)
            }
        })
    };
    carriers.iter().find_map(|(si, s)| {
        names_another(s).map(|k| Hit::on_stem(Reason::PartyConflict, missing, (*si, k)))
    })
}

/// A one-letter or numeric designator after a capitalised word or a role
/// ("Team A", "Agent 7", "Warehouse B"): the designator, if token `k+1`
/// is one.
fn designator<'b>(body: &'b str, toks: &[Token], vocab: &text::Vocab, k: usize) -> Option<&'b str> {
    let (head, next) = (toks.get(k)?, toks.get(k + 1)?);
    // "May 5" is a date; a number after a plain capitalised word is more
    // often a date, a model or a count than a designator.
    let role = is_role(vocab.norm(head.norm_id));
    if head.lex.month.is_some() || !(head.capitalized || role) {
        return None;
    }
    let gap = body.get(head.end..next.start)?;
    let d = body.get(next.start..next.end)?;
    let one_letter = d.len() == 1 && d.bytes().all(|b| b.is_ascii_uppercase());
    let numeric = !d.is_empty() && d.len() <= 4 && d.bytes().all(|b| b.is_ascii_digit());
    (gap == " " && (one_letter || (numeric && role))).then_some(d)
}

/// The claim names a designated party ("Team A was granted write access")
/// and the clause that carries the predicate names the same head with
/// another designator ("granted to Team B"), while no carrying clause
/// names the claim's: `party_conflict`. Designators are stopwords or
/// numbers to the matcher, so coverage cannot tell "Team A" from "Team B".
fn designated_party(
    sentences: &[Sentence<'_>],
    vocab: &text::Vocab,
    claim: &str,
    claim_toks: &[Token],
) -> Option<Hit> {
    let best = best_overlap(sentences)?;
    for k in 0..claim_toks.len() {
        let Some(d) = designator(claim, claim_toks, vocab, k) else {
            continue;
        };
        let head = claim_toks[k].stem_id;
        let mut other = None;
        let mut same = false;
        for (si, s) in sentences
            .iter()
            .enumerate()
            .filter(|(_, s)| s.overlap == best)
        {
            for j in 0..s.toks.len() {
                if s.toks[j].stem_id != head {
                    continue;
                }
                match designator(s.body, s.toks, vocab, j) {
                    Some(e) if e == d => same = true,
                    Some(_) if other.is_none() => other = Some((si, j + 1)),
                    _ => {}
                }
            }
        }
        if let (false, Some(at)) = (same, other) {
            return Some(Hit::on_stem(Reason::PartyConflict, head, at));
        }
    }
    None
}

/// "All" in the claim against "except", "only" or "some" in the sentence
/// that carries it, or a claim word that the passage names inside an
/// exception list ("all states except Alaska"): `scope_conflict`.
fn scope(a: &Analysis, sentences: &[Sentence<'_>], vocab: &text::Vocab) -> Option<Hit> {
    if a.excepts {
        return None;
    }
    let best = best_overlap(sentences).unwrap_or(0);
    for (si, s) in sentences.iter().enumerate() {
        let mut k = 0;
        while k < s.toks.len() {
            if !is_exception_marker(s.toks, vocab, k) {
                k += 1;
                continue;
            }
            // The list runs to the end of the clause ("Exceptions: gift
            // cards and software" opens it with a colon).
            let mut j = k + 1;
            while j < s.toks.len() {
                let gap = s.body.get(s.toks[j - 1].end..s.toks[j].start).unwrap_or("");
                let opening = j == k + 1 && !gap.contains(['.', ';']);
                if !opening && gap.contains(['.', ';', ':', '(', ')']) {
                    break;
                }
                let t = &s.toks[j];
                let asserted = a.polarity.iter().any(|&(st, neg)| st == t.stem_id && !neg);
                if asserted && !t.lex.stopword {
                    return Some(Hit::on_stem(Reason::ScopeConflict, t.stem_id, (si, j)));
                }
                j += 1;
            }
            k = j;
        }
        let restricted = (0..s.toks.len()).find(|&k| {
            is_restriction(vocab.norm(s.toks[k].norm_id)) || is_exception_marker(s.toks, vocab, k)
        });
        if let (true, true, Some(k)) = (a.universal, s.overlap == best, restricted) {
            return Some(Hit {
                reason: Reason::ScopeConflict,
                claim: ClaimSide::Universal,
                at: (si, k),
            });
        }
    }
    None
}

/// Role prepositions whose objects can trade places: (preposition, the
/// one opposite it).
const ROLE_PREPOSITIONS: &[(&str, &str)] = &[("from", "to"), ("to", "from"), ("into", "from")];

/// The objects of role prepositions in `toks`: (preposition, index of the
/// first content word after it, at most three tokens on, within the
/// clause's punctuation).
fn role_objects(body: &str, toks: &[Token], vocab: &text::Vocab) -> Vec<(&'static str, usize)> {
    let mut out = Vec::new();
    for (k, t) in toks.iter().enumerate() {
        let norm = vocab.norm(t.norm_id);
        let Some(&(prep, _)) = ROLE_PREPOSITIONS.iter().find(|(p, _)| *p == norm) else {
            continue;
        };
        for j in k + 1..toks.len().min(k + 4) {
            let gap = body.get(toks[j - 1].end..toks[j].start).unwrap_or("");
            if gap.contains(['.', ',', ';', ':', '(', ')']) {
                break;
            }
            if !toks[j].lex.stopword {
                out.push((prep, j));
                break;
            }
        }
    }
    out
}

/// A claim word that is the object of "from" (or "to") where the evidence
/// has it only as the object of the opposite preposition: "from the EU
/// account to the US account" against "from the US account to the EU
/// account": `party_conflict`.
fn roles(
    sentences: &[Sentence<'_>],
    vocab: &text::Vocab,
    claim: &str,
    claim_toks: &[Token],
) -> Option<Hit> {
    for (prep, k) in role_objects(claim, claim_toks, vocab) {
        let stem = claim_toks[k].stem_id;
        let Some(&(_, opposite)) = ROLE_PREPOSITIONS.iter().find(|(p, _)| *p == prep) else {
            continue;
        };
        let mut same = false;
        let mut other = None;
        for (si, s) in sentences.iter().enumerate() {
            for (p, j) in role_objects(s.body, s.toks, vocab) {
                if s.toks[j].stem_id != stem {
                    continue;
                }
                if p == prep {
                    same = true;
                } else if p == opposite && other.is_none() {
                    other = Some((si, j));
                }
            }
        }
        if let (false, Some(at)) = (same, other) {
            return Some(Hit::on_stem(Reason::PartyConflict, stem, at));
        }
    }
    None
}

/// The claim states a present state ("is active", "currently", "still")
/// that the evidence bounds in the past: "was active until it was closed",
/// "formerly", "previously": `status_conflict`, on the claim word the
/// bounded clause holds and the evidence's "until".
fn ended(
    a: &Analysis,
    sentences: &[Sentence<'_>],
    vocab: &text::Vocab,
    claim_toks: &[Token],
) -> Option<Hit> {
    let norm = |t: &Token| vocab.norm(t.norm_id);
    let present = claim_toks.iter().any(|t| {
        matches!(
            norm(t),
            "is" | "are" | "am" | "currently" | "still" | "now" | "remains" | "remain"
        )
    });
    let past = claim_toks
        .iter()
        .any(|t| matches!(norm(t), "was" | "were" | "had" | "formerly" | "previously"));
    if !present || past {
        return None;
    }
    let terms: Vec<u32> = a.terms.iter().filter_map(|t| t.stem).collect();
    for (si, s) in sentences.iter().enumerate() {
        for (k, t) in s.toks.iter().enumerate() {
            let bound = match norm(t) {
                "formerly" | "previously" => true,
                // "was active until ...": a past copula before the bound.
                "until" | "till" => s.toks[..k]
                    .iter()
                    .any(|p| matches!(norm(p), "was" | "were")),
                _ => false,
            };
            if !bound {
                continue;
            }
            // The claim word the bound applies to: before "until", or
            // after "formerly".
            let scope: &[Token] = if matches!(norm(t), "until" | "till") {
                &s.toks[..k]
            } else {
                s.toks.get(k + 1..).unwrap_or(&[])
            };
            // The claim word nearest the bound.
            let nearest = |x: &&Token| !x.lex.stopword && terms.contains(&x.stem_id);
            let stated = if matches!(norm(t), "until" | "till") {
                scope.iter().rev().find(nearest)
            } else {
                scope.iter().find(nearest)
            };
            if let Some(x) = stated {
                return Some(Hit::on_stem(Reason::StatusConflict, x.stem_id, (si, k)));
            }
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
