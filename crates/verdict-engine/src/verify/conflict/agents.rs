//! Who did it, and to whom: a named party the claim puts in the agent or
//! recipient slot of its event, where the evidence names another.
//!
//! "Maria Chen approved the transfer" against "Requested by Maria Chen.
//! Approved by Tom Alvarez." holds every word of the claim; so does
//! "Pinecrest Hotel issued a credit memo to Acme Supply" against "a credit
//! memo was issued by Acme Supply to Pinecrest Hotel". The claim binds a
//! name to its predicate with "by", "to", "from", "for" or a means ("via",
//! "with": "approved by Dana Whitfield", "billed to Northwind Traders",
//! "shipped via FedEx"), or as the subject of a
//! past-tense verb ("Maria Chen approved"), which is the evidence's "by"
//! slot. When the stretches of the evidence that state the predicate name
//! someone else in that slot, and none names the claim's party there (or,
//! for an agent, as the subject right before the predicate), the claim is
//! `party_conflict`, on the claim's name and the evidence's. When one does
//! name the claim's party there, that reading is the more specific one: the
//! passage-level party check does not overrule it.

use super::*;

/// Party slots read per claim: a claim names a few parties; the cap keeps
/// a claim of thousands of "by X" from scanning the sources for each.
const MAX_SLOTS: usize = 8;

/// Tokens after a predicate searched for its slot's marker.
const REACH: usize = 12;

/// A party the claim binds to its predicate.
struct Slot {
    /// Stem of the predicate ("approv").
    pred: u32,
    /// "by", "to", "from", "for", or "via" for the means (via, with,
    /// using, through).
    marker: &'static str,
    /// The party the claim puts there.
    party: Party,
    /// The party's first and last token in the claim.
    at: (usize, usize),
}

/// Words that mark a party slot after a predicate.
fn marker(norm: &str) -> Option<&'static str> {
    match norm {
        "by" => Some("by"),
        "to" => Some("to"),
        "from" => Some("from"),
        "for" => Some("for"),
        // The means: "shipped via FedEx" is "re-shipped with UPS"'s slot.
        "via" | "with" | "using" | "through" => Some("via"),
        _ => None,
    }
}

/// Whether the gap between tokens `a` and `b` of `text` ends a stretch: the
/// same boundaries as a value's stretch, never a colon ("Bill to: Northwind
/// Logistics").
fn cut(text: &str, toks: &[Token], a: usize, b: usize) -> bool {
    gap_cuts(text, toks, a, b, false)
}

/// A party in a slot: the role words before it ("store manager") as
/// stems, and its name's words, lowercased ("Dana Okafor"). Either may be
/// empty, not both.
#[derive(Clone, Default)]
struct Party {
    roles: Vec<u32>,
    name: Vec<u32>,
}

/// How a slot's party stands to the claim's.
#[derive(PartialEq)]
enum Match {
    Same,
    Other,
    /// A name against a bare role ("the customer" against "Dana Lee"):
    /// nothing says whether they are one party.
    Unknown,
}

fn compare(claim: &Party, ev: &Party) -> Match {
    let overlap = |a: &[u32], b: &[u32]| a.iter().any(|x| b.contains(x));
    if !claim.name.is_empty() && !ev.name.is_empty() {
        return if same(&claim.name, &ev.name) {
            Match::Same
        } else {
            Match::Other
        };
    }
    if !claim.roles.is_empty() && !ev.roles.is_empty() {
        return if overlap(&claim.roles, &ev.roles) {
            Match::Same
        } else {
            Match::Other
        };
    }
    Match::Unknown
}

/// Whether a word names a role ("customer", "customer's", "manager").
fn role(vocab: &text::Vocab, t: &Token) -> bool {
    let n = vocab.norm(t.norm_id);
    let n = n
        .strip_suffix("'s")
        .or_else(|| n.strip_suffix("\u{2019}s"))
        .unwrap_or(n);
    t.kind == text::TokenKind::Word && is_role(n)
}

/// The parties a slot holds from token `from` on: after at most three
/// lowercase or stop words, whose role words are kept ("by store manager
/// Dana Okafor"), runs of capitalised words, joined by "and" ("by Ana
/// Ruiz and Tom Alvarez"); or the role alone ("by the merchant").
fn parties_at(text: &str, toks: &[Token], vocab: &text::Vocab, from: usize) -> Vec<(usize, Party)> {
    let mut out = Vec::new();
    let mut roles = Vec::new();
    let mut role_at = None;
    let mut i = from;
    let mut skipped = 0;
    let is_name =
        |t: &Token| t.capitalized && t.kind == text::TokenKind::Word && t.lex.month.is_none();
    let only_roles = |roles: Vec<u32>, at: Option<usize>| {
        at.map(|at| {
            vec![(
                at,
                Party {
                    roles,
                    name: Vec::new(),
                },
            )]
        })
        .unwrap_or_default()
    };
    loop {
        let Some(t) = toks.get(i) else {
            return only_roles(roles, role_at);
        };
        if is_name(t) {
            break;
        }
        if skipped == 3
            || t.kind != text::TokenKind::Word
            || (i > from && cut(text, toks, i - 1, i))
        {
            return only_roles(roles, role_at);
        }
        if role(vocab, t) {
            roles.push(t.stem_id);
            role_at.get_or_insert(i);
        }
        skipped += 1;
        i += 1;
    }
    loop {
        let start = i;
        let mut name = Vec::new();
        while let Some(t) = toks.get(i) {
            let joined = i == start || !cut(text, toks, i - 1, i);
            if !(is_name(t) && joined) || name.len() == 4 {
                break;
            }
            name.push(t.norm_id);
            i += 1;
        }
        if name.is_empty() {
            return out;
        }
        out.push((
            start,
            Party {
                roles: std::mem::take(&mut roles),
                name,
            },
        ));
        if out.len() == 8 {
            return out;
        }
        // "and" / "&" and another capitalised run continue the list.
        match toks.get(i) {
            Some(t) if t.kind == text::TokenKind::Word && !cut(text, toks, i - 1, i) => {
                let and = text
                    .get(t.start..t.end)
                    .is_some_and(|w| w.eq_ignore_ascii_case("and"));
                if !and {
                    return out;
                }
                i += 1;
            }
            _ => return out,
        }
    }
}

/// The claim's party slots.
fn slots(claim: &str, toks: &[Token], vocab: &text::Vocab) -> Vec<Slot> {
    let mut out = Vec::new();
    let word = |i: usize| toks.get(i).filter(|t| t.kind == text::TokenKind::Word);
    // A name's words, or the one role word.
    let span = |at: usize, p: &Party| (at, at + p.name.len().max(1) - 1);
    // "approved by Dana Whitfield", "billed to Northwind Traders",
    // "cancelled by the merchant".
    for i in 0..toks.len() {
        let Some(t) = word(i) else { continue };
        if t.lex.stopword || t.capitalized {
            continue;
        }
        // "with" names a means only sometimes ("signed with Cavalry FC"):
        // the claim's means slot is "via" or "using"; the evidence's may
        // also say "with" ("re-shipped with UPS").
        let Some(m) = toks
            .get(i + 1)
            .map(|n| vocab.norm(n.norm_id))
            .filter(|n| !matches!(*n, "with" | "through"))
            .and_then(marker)
        else {
            continue;
        };
        if cut(claim, toks, i, i + 1) {
            continue;
        }
        if let Some((at, party)) = parties_at(claim, toks, vocab, i + 2).into_iter().next() {
            let at = span(at, &party);
            out.push(Slot {
                pred: t.stem_id,
                marker: m,
                party,
                at,
            });
        }
    }
    // "cancelled at the customer's request": the customer is the agent.
    for r in 2..toks.len() {
        if vocab.norm(toks[r].norm_id) != "request" {
            continue;
        }
        let x = r - 1;
        let at_word = (x.saturating_sub(2)..x)
            .rev()
            .find(|&j| vocab.norm(toks[j].norm_id) == "at");
        let pred = at_word
            .and_then(|a| a.checked_sub(1))
            .filter(|&p| word(p).is_some_and(|t| !t.lex.stopword && !t.capitalized));
        let (Some(a), Some(p)) = (at_word, pred) else {
            continue;
        };
        if let Some((at, party)) = parties_at(claim, toks, vocab, a + 1).into_iter().next() {
            let at = span(at, &party);
            out.push(Slot {
                pred: toks[p].stem_id,
                marker: "by",
                party,
                at,
            });
        }
    }
    // "Maria Chen approved the transfer": a name that opens the claim,
    // then a past-tense verb.
    let Some((start, party)) = parties_at(claim, toks, vocab, 0).into_iter().next() else {
        return out;
    };
    let name = &party.name;
    if start != 0 || name.is_empty() || name.iter().any(|&n| text::is_stopword(vocab.norm(n))) {
        return out;
    }
    let Some(verb) = word(start + name.len()) else {
        return out;
    };
    let v = vocab.norm(verb.norm_id);
    let past = super::hedge::irregular_past(v) || (v.len() > 4 && v.ends_with("ed"));
    if past && !verb.capitalized {
        let at = span(start, &party);
        out.push(Slot {
            pred: verb.stem_id,
            marker: "by",
            party,
            at,
        });
    }
    out
}

/// Whether two names are one party: the words of one are among the other's
/// ("Tom" and "Tom Alvarez").
fn same(a: &[u32], b: &[u32]) -> bool {
    a.iter().all(|x| b.contains(x)) || b.iter().all(|x| a.contains(x))
}

/// What the evidence puts in the claim's party slot.
pub(in crate::verify) enum Slotting {
    /// The claim has no party slot, or no stretch states its predicate
    /// with a party in it.
    Unread,
    /// A stretch that states the predicate names the claim's party there.
    Backed,
    /// Only other parties: the claim span of the name, the rival's unit
    /// and token.
    Rival((usize, usize), usize, usize),
}

/// The claim's party slots against every searched sentence that states
/// their predicates: the first slot the evidence fills only with another
/// party, else `Backed` when some slot holds the claim's party.
pub(in crate::verify) fn slotting(a: &Analysis, idx: &Index<'_>, allowed: &[bool]) -> Slotting {
    let claim_toks = &a.tokens[..];
    let vocab = idx.stemmer.vocab();
    let mut out = Slotting::Unread;
    for s in slots(&a.text, claim_toks, &vocab).iter().take(MAX_SLOTS) {
        match read_slot(s, claim_toks, idx, allowed, &vocab) {
            Some(r @ Slotting::Rival(..)) => return r,
            Some(Slotting::Backed) => out = Slotting::Backed,
            _ => {}
        }
    }
    out
}

fn read_slot(
    s: &Slot,
    claim_toks: &[Token],
    idx: &Index<'_>,
    allowed: &[bool],
    vocab: &text::Vocab,
) -> Option<Slotting> {
    let mut rival = None;
    for &ui in idx.posting(s.pred) {
        let unit = &idx.units[ui as usize];
        if !allowed[unit.source] {
            continue;
        }
        let src = &idx.sources[unit.source];
        let toks = &src.tokens;
        for p in unit.tok_start..unit.tok_end {
            if toks[p].stem_id != s.pred
                || polarity_of(src.text, toks, vocab, p) == Polarity::Negated
            {
                continue;
            }
            // The subject right before the predicate, for an agent.
            if s.marker == "by" {
                let mut k = p;
                while k > unit.tok_start
                    && !cut(src.text, toks, k - 1, k)
                    && (toks[k - 1].lex.stopword || !toks[k - 1].capitalized)
                    && p - k < 3
                {
                    k -= 1;
                }
                let before: Vec<u32> = (unit.tok_start..k)
                    .rev()
                    .take_while(|&j| toks[j].capitalized && !cut(src.text, toks, j, j + 1))
                    .take(4)
                    .map(|j| toks[j].norm_id)
                    .collect();
                let before = Party {
                    roles: Vec::new(),
                    name: before,
                };
                if !before.name.is_empty() && compare(&s.party, &before) == Match::Same {
                    return Some(Slotting::Backed);
                }
            }
            // The slot after it, within its stretch.
            let mut q = p + 1;
            while q < unit.tok_end.min(p + 1 + REACH) && !cut(src.text, toks, q - 1, q) {
                if marker(vocab.norm(toks[q].norm_id)) == Some(s.marker) {
                    for (at, party) in parties_at(src.text, toks, vocab, q + 1) {
                        match compare(&s.party, &party) {
                            Match::Same => return Some(Slotting::Backed),
                            Match::Other => {
                                rival.get_or_insert((ui as usize, at));
                            }
                            Match::Unknown => {}
                        }
                    }
                }
                q += 1;
            }
        }
    }
    let (unit, at) = rival?;
    let first = claim_toks.get(s.at.0)?;
    let last = claim_toks.get(s.at.1)?;
    Some(Slotting::Rival((first.start, last.end), unit, at))
}
