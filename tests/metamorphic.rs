//! Metamorphic properties of the verifier, over the supported cases of the
//! adversarial corpus (`tests/data/adversarial.jsonl`).
//!
//! The corpus test checks fixed pairs; these properties check what an edit
//! of the evidence does to a pair the engine supports. An edit that breaks
//! the fact (negate the predicate, swap it for its exclusive state, change
//! the currency or a digit of an amount or a date, move the event into the
//! future, put the claim's subject under "except", give the event to
//! another party) must never leave the
//! claim `supported`. An edit that keeps
//! the fact (reorder the sources, add unrelated sentences, switch
//! British/American spelling) must not change the status.

use crate::support;

use proptest::prelude::*;
use serde::Deserialize;
use verdict::engine::ClaimStatus;

const CORPUS: &str = include_str!("data/adversarial.jsonl");

#[derive(Deserialize)]
struct Case {
    id: String,
    claim: String,
    evidence: Vec<String>,
    expect: String,
}

/// The supported cases the engine supports today (a case listed as known
/// wrong has no status to keep).
fn supported() -> &'static [Case] {
    static CASES: std::sync::OnceLock<Vec<Case>> = std::sync::OnceLock::new();
    CASES.get_or_init(|| {
        CORPUS
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter_map(|l| serde_json::from_str::<Case>(l).ok())
            .filter(|c| c.expect == "supported")
            .filter(|c| status(&c.claim, &c.evidence) == ClaimStatus::Supported)
            .collect()
    })
}

/// The supported cases whose claim states an exact number: only digits the
/// claim states are facts it rests on, and a bound ("over $500", "within 5
/// days") is backed by any value on its side, so a changed digit may still
/// satisfy it. Drawn from directly, so no generated case is thrown away.
fn exact_numbers() -> &'static [&'static Case] {
    const BOUNDS: &[&str] = &[
        "over ",
        "above ",
        "under ",
        "below ",
        "more than",
        "less than",
        "at least",
        "up to",
        "within ",
    ];
    static CASES: std::sync::OnceLock<Vec<&'static Case>> = std::sync::OnceLock::new();
    let cases = CASES.get_or_init(|| {
        supported()
            .iter()
            .filter(|c| c.claim.chars().any(|ch| ch.is_ascii_digit()))
            .filter(|c| !BOUNDS.iter().any(|b| c.claim.contains(b)))
            .collect()
    });
    assert!(cases.len() >= 20, "only {} exact-number cases", cases.len());
    cases
}

/// The supported cases with one source, for edits that rewrite it.
fn single_source() -> &'static [&'static Case] {
    static CASES: std::sync::OnceLock<Vec<&'static Case>> = std::sync::OnceLock::new();
    let cases = CASES.get_or_init(|| {
        supported()
            .iter()
            .filter(|c| c.evidence.len() == 1)
            .collect()
    });
    assert!(
        cases.len() >= 20,
        "only {} single-source cases",
        cases.len()
    );
    cases
}

fn status(claim: &str, evidence: &[String]) -> ClaimStatus {
    support::check_claim("c", claim, evidence).status
}

/// Replace every whole-word occurrence of `from` (case-sensitive) in the
/// evidence, so an edit reaches whichever clause carries the claim; `None`
/// when there is none.
fn replace_word(evidence: &[String], from: &str, to: &str) -> Option<Vec<String>> {
    let mut out = evidence.to_vec();
    let mut any = false;
    for text in &mut out {
        let mut at = 0;
        while let Some(i) = text[at..].find(from).map(|i| i + at) {
            let before = text[..i].chars().next_back();
            let after = text[i + from.len()..].chars().next();
            let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric());
            if !word(before) && !word(after) {
                text.replace_range(i..i + from.len(), to);
                any = true;
                at = i + to.len();
            } else {
                at = i + from.len();
            }
        }
    }
    any.then_some(out)
}

/// Fact-breaking edits of the evidence: (from, to) word replacements.
const BREAKING: &[(&str, &str)] = &[
    // Negate the predicate.
    ("was", "was not"),
    ("were", "were not"),
    ("is", "is not"),
    ("are", "are not"),
    ("has been", "has not been"),
    // Exclusive states.
    ("approved", "rejected"),
    ("paid", "unpaid"),
    ("delivered", "lost"),
    ("active", "inactive"),
    ("enabled", "disabled"),
    ("succeeded", "failed"),
    ("accepted", "refused"),
    ("granted", "denied"),
    ("shipped", "cancelled"),
    ("refunded", "charged"),
    ("eligible", "ineligible"),
    ("valid", "expired"),
    // Currency.
    ("USD", "EUR"),
    ("EUR", "GBP"),
    ("euros", "dollars"),
    ("dollars", "pounds"),
    // The event moved into the future.
    ("was", "will be"),
    ("were", "will be"),
    ("has been", "will be"),
    ("have been", "will be"),
    // Another party.
    ("Bob", "Carol"),
    ("Alice", "Dave"),
    ("Priya", "Tom"),
];

/// Sentences that say nothing about any case in the corpus.
const UNRELATED: &[&str] = &[
    "Our office is closed on public holidays.",
    "The weather in Lisbon was sunny last week.",
    "Parking is available behind the building.",
    "The cafeteria serves lunch from noon.",
    "Please keep your ticket number for reference.",
];

/// British → American spellings the engine folds.
const SPELLING: &[(&str, &str)] = &[
    ("authorised", "authorized"),
    ("authorized", "authorised"),
    ("cancelled", "canceled"),
    ("canceled", "cancelled"),
    ("colour", "color"),
    ("organisation", "organization"),
    ("jewellery", "jewelry"),
];

/// Runs of ASCII digits in `text`, as byte ranges.
fn digit_runs(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        match (c.is_ascii_digit(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push(s..i);
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// Change one digit of a number the claim states ("$40", "12 May"), in
/// the `nth` such number of the evidence; `None` when the evidence holds
/// none of the claim's numbers.
fn change_digit(claim: &str, evidence: &[String], nth: usize) -> Option<Vec<String>> {
    let claimed: Vec<&str> = digit_runs(claim).into_iter().map(|r| &claim[r]).collect();
    let mut spots = Vec::new();
    for (t, text) in evidence.iter().enumerate() {
        for r in digit_runs(text) {
            if claimed.contains(&&text[r.clone()]) {
                spots.push((t, r));
            }
        }
    }
    if spots.is_empty() {
        return None;
    }
    let (t, r) = spots[nth % spots.len()].clone();
    let mut out = evidence.to_vec();
    let i = r.end - 1;
    let d = out[t][i..=i].parse::<u32>().ok()?;
    out[t].replace_range(i..=i, &((d + 1) % 10).to_string());
    Some(out)
}

/// Put the claim's subject ("The refund was issued": "refund") inside an
/// exception: the evidence says the subject is the one case the statement
/// leaves out.
fn add_exception(claim: &str, evidence: &[String]) -> Option<Vec<String>> {
    let rest = claim.strip_prefix("The ")?;
    let subject: Vec<&str> = rest
        .split_whitespace()
        .take_while(|w| !matches!(*w, "was" | "were" | "is" | "are" | "has" | "have"))
        .collect();
    if subject.is_empty() || subject.len() > 3 || subject.len() == rest.split_whitespace().count() {
        return None;
    }
    let mut out = evidence.to_vec();
    let first = out.first_mut()?;
    let body = first.trim_end_matches('.');
    *first = format!(
        "{body}, except for the {}, which is excluded.",
        subject.join(" ")
    );
    Some(out)
}

/// The evidence of `c` with the fact-breaking edit `from` → `to`, when the
/// edit applies and breaks the claim's fact.
fn broken(c: &Case, from: &str, to: &str) -> Option<Vec<String>> {
    let evidence = replace_word(&c.evidence, from, to)?;
    // An edit that the claim mirrors ("was" in a claim about "was not") is
    // not a break when the claim says the same word the edit introduces.
    if c.claim.contains(to) {
        return None;
    }
    // A state or party swap breaks the fact only when it swaps the claim's
    // own state or party ("Omar's refund was approved; Lina's was denied"
    // says nothing new about Lina when Omar's changes). Moving an event
    // into the future breaks the claim only when the claim reports that
    // event with the same auxiliary ("was").
    let generic = (matches!(from, "was" | "were" | "is" | "are" | "has been")
        && !to.starts_with("will"))
        || matches!(from, "USD" | "EUR" | "euros" | "dollars");
    if !generic && !c.claim.contains(from) {
        return None;
    }
    // Negating evidence for a claim that is itself negated makes a double
    // negation ("are not non-refundable"), which the engine does not read;
    // those pairs are left to the corpus.
    let negated_claim = ["not", "n't", "cannot", "never", "non", "no longer"]
        .iter()
        .any(|n| c.claim.contains(n));
    if to.contains(" not") && negated_claim {
        return None;
    }
    Some(evidence)
}

/// Every fact-breaking edit of every supported case: the domain is small
/// (a few hundred pairs), so it is walked whole rather than sampled.
#[test]
fn a_broken_fact_is_never_supported() {
    let mut tried = 0;
    let mut failures = Vec::new();
    for c in supported() {
        for &(from, to) in BREAKING {
            let Some(evidence) = broken(c, from, to) else {
                continue;
            };
            tried += 1;
            if status(&c.claim, &evidence) == ClaimStatus::Supported {
                failures.push(format!(
                    "{}: {from:?} -> {to:?} in {evidence:?} still supports {:?}",
                    c.id, c.claim
                ));
            }
        }
    }
    assert!(tried >= 150, "only {tried} edits applied");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_changed_digit_is_never_supported(case in 0usize..1000, nth in 0usize..64) {
        let cases = exact_numbers();
        let c = cases[case % cases.len()];
        let Some(evidence) = change_digit(&c.claim, &c.evidence, nth) else {
            return Ok(());
        };
        let got = status(&c.claim, &evidence);
        prop_assert_ne!(got, ClaimStatus::Supported, "{}: {:?} still supports {:?}", c.id, evidence, c.claim);
    }

    #[test]
    fn an_excepted_subject_is_never_supported(case in 0usize..1000) {
        let cases = single_source();
        let c = cases[case % cases.len()];
        let Some(evidence) = add_exception(&c.claim, &c.evidence) else {
            return Ok(());
        };
        let got = status(&c.claim, &evidence);
        prop_assert_ne!(got, ClaimStatus::Supported, "{}: {:?} still supports {:?}", c.id, evidence, c.claim);
    }

    #[test]
    fn reordering_and_unrelated_sentences_keep_the_status(
        case in 0usize..1000,
        extra in proptest::collection::vec(0usize..UNRELATED.len(), 0..3),
        rotate in 0usize..4,
    ) {
        let cases = supported();
        prop_assume!(!cases.is_empty());
        let c = &cases[case % cases.len()];
        let mut evidence = c.evidence.clone();
        for &e in &extra {
            evidence.push(UNRELATED[e].to_string());
        }
        let n = evidence.len();
        evidence.rotate_left(rotate % n);
        let got = status(&c.claim, &evidence);
        prop_assert_eq!(got, ClaimStatus::Supported, "{}: {:?} no longer supports {:?}", c.id, evidence, c.claim);
    }

    #[test]
    fn spelling_variants_keep_the_status(case in 0usize..1000, edit in 0usize..SPELLING.len()) {
        let cases = supported();
        prop_assume!(!cases.is_empty());
        let c = &cases[case % cases.len()];
        let (from, to) = SPELLING[edit];
        let Some(evidence) = replace_word(&c.evidence, from, to) else {
            return Ok(());
        };
        let got = status(&c.claim, &evidence);
        prop_assert_eq!(got, ClaimStatus::Supported, "{}: {:?} no longer supports {:?}", c.id, evidence, c.claim);
    }
}
