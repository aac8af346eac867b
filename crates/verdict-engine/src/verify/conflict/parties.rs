//! Who and what a claim is about, against the evidence: the party that did or
//! got something, a designated one, the scope of a statement, the roles of
//! from and to, and states that have ended.

use super::*;

/// Whether token `t` of `body` is a possessive ("Casey's").
pub(crate) fn possessive(body: &str, t: &Token) -> bool {
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
pub(super) fn party(
    a: &Analysis,
    sentences: &[Sentence<'_>],
    vocab: &text::Vocab,
    claim: &str,
    claim_toks: &[Token],
) -> Option<Hit> {
    if let Some(hit) = designated_party(sentences, vocab, claim, claim_toks) {
        return Some(hit);
    }
    let is_party_term =
        |t: &crate::verify::Term| t.name || t.surf.is_some_and(|s| is_role(vocab.norm(s)));
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
    let (party_set, predicate_set) = (sorted_set(&parties), sorted_set(&predicate));
    let count = |s: &Sentence<'_>, set: &[u32]| stems_in(s.toks, set).len();
    let best = sentences
        .iter()
        .map(|s| count(s, &predicate_set))
        .max()
        .unwrap_or(0);
    if best == 0 {
        return None;
    }
    let carriers: Vec<(usize, &Sentence<'_>)> = sentences
        .iter()
        .enumerate()
        .filter(|(_, s)| count(s, &predicate_set) == best)
        .collect();
    if carriers
        .iter()
        .any(|(_, s)| count(s, &party_set) == parties.len())
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
            .filter(|(_, s)| s.overlap() == best)
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
pub(super) fn scope(a: &Analysis, sentences: &[Sentence<'_>], vocab: &text::Vocab) -> Option<Hit> {
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
        if let (true, true, Some(k)) = (a.universal, s.overlap() == best, restricted) {
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
pub(super) fn roles(
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
pub(super) fn ended(
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
