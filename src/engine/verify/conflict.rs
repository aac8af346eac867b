//! Contradictions that word overlap cannot see: polarity, exclusive states,
//! hedged evidence and quantifier scope.
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

use super::{negates, polarity_of, Analysis, Index, Passage, Polarity};
use crate::engine::text::{self, Token};
use crate::engine::{Conflict, Reason};

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
    ],
    &["activated", "deactivated", "suspended"],
    &["paid", "unpaid", "overdue", "outstanding"],
    &["delivered", "undelivered", "lost", "returned", "missing"],
    &["valid", "invalid", "expired", "revoked"],
    &["covered", "excluded"],
    &["damaged", "undamaged", "intact"],
    &["eligible", "ineligible"],
    &["open", "resolved", "closed"],
    &["opened", "closed"],
    &["shipped", "unshipped"],
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
        "all" | "every" | "any" | "each" | "always" | "everything" | "everyone"
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
                .map(|w| {
                    stemmer
                        .stem(&crate::engine::spelling::american(w))
                        .into_owned()
                })
                .collect();
            for x in &stems {
                for y in &stems {
                    if x != y {
                        out.insert((x.clone(), y.clone()));
                    }
                }
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
        )
}

/// A sentence's clauses: split at `;`, before "but", "while",
/// "whereas", "however", "although", "though" and "yet", and at a comma
/// before "and" or "so". "Access was granted to Bob; Alice's request was
/// denied" is two statements about two parties.
fn clauses<'t>(body: &str, toks: &'t [Token], vocab: &text::Vocab) -> Vec<&'t [Token]> {
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
    overlap: usize,
}

/// Which claim word a conflict is about.
enum ClaimSide {
    /// The claim token with this stem.
    Stem(u32),
    /// The claim's "all", "every", "any" ...
    Universal,
}

/// A contradiction and where it is: the claim's word, and the clause and
/// token of the evidence that contradicts it.
struct Hit {
    reason: Reason,
    claim: ClaimSide,
    at: (usize, usize),
}

/// The first contradiction in `primary` that coverage cannot see, if any,
/// with the two spans that disagree.
pub(super) fn find(
    a: &Analysis,
    idx: &Index<'_>,
    primary: Passage,
    coverage: f64,
    claim: &str,
) -> Option<(Reason, Option<Conflict>)> {
    // Before the vocabulary is borrowed: tokenising interns words.
    let claim_toks = text::tokenize(claim, &idx.stemmer);
    let vocab = idx.stemmer.vocab();
    let vocab = &*vocab;
    let term_stems: Vec<u32> = a.terms.iter().filter_map(|t| t.stem).collect();
    let mut sentences: Vec<Sentence<'_>> = Vec::new();
    for u in primary.units() {
        let unit = &idx.units[u];
        let src = &idx.sources[unit.source];
        let toks = src.tokens.get(unit.tok_start..unit.tok_end).unwrap_or(&[]);
        for clause in clauses(src.text, toks, vocab) {
            let mut seen: Vec<u32> = clause
                .iter()
                .map(|t| t.stem_id)
                .filter(|s| term_stems.contains(s))
                .collect();
            seen.sort_unstable();
            seen.dedup();
            sentences.push(Sentence {
                body: src.text,
                source_id: src.id,
                toks: clause,
                overlap: seen.len(),
            });
        }
    }
    let mut hit = None;
    if coverage >= super::tune::NEG_MIN_COV {
        hit = negation(a, &sentences, vocab).or_else(|| hedged(a, &sentences, vocab));
    }
    if hit.is_none() && coverage >= STATUS_MIN_COV {
        hit = status(a, &sentences, vocab)
            .or_else(|| scope(a, &sentences, vocab))
            .or_else(|| party(a, &sentences, vocab));
    }
    let hit = hit?;
    let claim_tok = claim_toks.iter().find(|t| match hit.claim {
        ClaimSide::Stem(s) => t.stem_id == s,
        ClaimSide::Universal => is_universal(vocab.norm(t.norm_id)),
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

/// A claim word that the sentence carrying most of the claim states with
/// the opposite polarity: `negation_conflict`.
fn negation(a: &Analysis, sentences: &[Sentence<'_>], vocab: &text::Vocab) -> Option<Hit> {
    for &(stem, negated) in &a.polarity {
        let (mut same, mut opposite) = (0, 0);
        let mut at = (0, 0);
        for (si, s) in sentences.iter().enumerate() {
            for (i, t) in s.toks.iter().enumerate() {
                if t.stem_id != stem || negates(s.toks, vocab, i) {
                    continue;
                }
                // An unclear occurrence counts as agreeing: it blocks a
                // conflict.
                let pol = polarity_of(s.body, s.toks, vocab, i);
                if pol == Polarity::Unclear || (pol == Polarity::Negated) == negated {
                    same = same.max(s.overlap);
                } else if s.overlap > opposite {
                    opposite = s.overlap;
                    at = (si, i);
                }
            }
        }
        if opposite > same {
            return Some(Hit {
                reason: Reason::NegationConflict,
                claim: ClaimSide::Stem(stem),
                at,
            });
        }
    }
    None
}

/// A claim word whose exclusive state the passage asserts with the same
/// polarity, where the claim's own word is not stated as strongly:
/// `status_conflict` ("denied" against "approved", "not approved" against
/// "not denied"; "not approved" against "denied" agrees).
fn status(a: &Analysis, sentences: &[Sentence<'_>], vocab: &text::Vocab) -> Option<Hit> {
    for &(stem, negated) in &a.polarity {
        let c = vocab.stem(stem);
        let (mut own, mut rival) = (0, 0);
        let mut at = (0, 0);
        for (si, s) in sentences.iter().enumerate() {
            for (i, t) in s.toks.iter().enumerate() {
                if negates(s.toks, vocab, i) {
                    continue;
                }
                let pol = polarity_of(s.body, s.toks, vocab, i);
                if pol == Polarity::Unclear || (pol == Polarity::Negated) != negated {
                    continue;
                }
                if t.stem_id == stem {
                    own = own.max(s.overlap);
                } else if exclusive(c, vocab.stem(t.stem_id)) && s.overlap + 1 > rival {
                    // The rival word stands in for the claim's own word.
                    rival = s.overlap + 1;
                    at = (si, i);
                }
            }
        }
        if rival > own {
            return Some(Hit {
                reason: Reason::StatusConflict,
                claim: ClaimSide::Stem(stem),
                at,
            });
        }
    }
    None
}

/// Whether a token is a hedge that governs the clause: "may" before a
/// number is a month, and a hedge the claim itself uses is not one.
fn is_hedge_in(toks: &[Token], vocab: &text::Vocab, k: usize, claim_terms: &[u32]) -> bool {
    let t = &toks[k];
    if !t.lex.hedge || claim_terms.contains(&t.stem_id) {
        return false;
    }
    let date = vocab.norm(t.norm_id) == "may"
        && toks
            .get(k + 1)
            .is_some_and(|n| n.kind == text::TokenKind::Number);
    !date
}

/// Whether the claim states anything under a hedge.
pub(super) fn claim_hedged(toks: &[Token], vocab: &text::Vocab) -> bool {
    (0..toks.len()).any(|k| is_hedge_in(toks, vocab, k, &[]))
}

/// The clauses that carry most of the claim all state it under a hedge
/// ("will be issued", "could take 10 days to reach", "a reset was
/// requested", "deletion is scheduled") while the claim states it as done:
/// `hedged_evidence`.
fn hedged(a: &Analysis, sentences: &[Sentence<'_>], vocab: &text::Vocab) -> Option<Hit> {
    if a.hedge {
        return None;
    }
    let terms: Vec<u32> = a.terms.iter().filter_map(|t| t.stem).collect();
    let best = sentences.iter().map(|s| s.overlap).max().unwrap_or(0);
    if best == 0 {
        return None;
    }
    let mut first = None;
    for (si, s) in sentences
        .iter()
        .enumerate()
        .filter(|(_, s)| s.overlap == best)
    {
        let hedge = (0..s.toks.len()).find(|&k| is_hedge_in(s.toks, vocab, k, &terms))?;
        if first.is_none() {
            // The claim's word this clause states under the hedge.
            let word = s
                .toks
                .iter()
                .map(|t| t.stem_id)
                .find(|st| a.polarity.iter().any(|&(p, _)| p == *st));
            first = word.map(|w| (w, (si, hedge)));
        }
    }
    let (word, at) = first?;
    Some(Hit {
        reason: Reason::HedgedEvidence,
        claim: ClaimSide::Stem(word),
        at,
    })
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
fn party(a: &Analysis, sentences: &[Sentence<'_>], vocab: &text::Vocab) -> Option<Hit> {
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
    let count = |s: &Sentence<'_>, set: &[u32]| {
        let mut seen: Vec<u32> = s
            .toks
            .iter()
            .map(|t| t.stem_id)
            .filter(|id| set.contains(id))
            .collect();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    };
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
                let slot = at
                    .and_then(|k| k.checked_sub(1))
                    .is_some_and(|k| matches!(vocab.norm(s.toks[k].norm_id), "to" | "by" | "for"));
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
        names_another(s).map(|k| Hit {
            reason: Reason::PartyConflict,
            claim: ClaimSide::Stem(missing),
            at: (*si, k),
        })
    })
}

/// "All" in the claim against "except", "only" or "some" in the sentence
/// that carries it, or a claim word that the passage names inside an
/// exception list ("all states except Alaska"): `scope_conflict`.
fn scope(a: &Analysis, sentences: &[Sentence<'_>], vocab: &text::Vocab) -> Option<Hit> {
    if a.excepts {
        return None;
    }
    let best = sentences.iter().map(|s| s.overlap).max().unwrap_or(0);
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
                    return Some(Hit {
                        reason: Reason::ScopeConflict,
                        claim: ClaimSide::Stem(t.stem_id),
                        at: (si, j),
                    });
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
