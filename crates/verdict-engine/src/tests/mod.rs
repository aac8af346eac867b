//! Table-driven tests of the public engine API: contradictions never pass,
//! faithful paraphrases do, offsets reproduce quotes, output is deterministic
//! and independent of source order.

use proptest::prelude::*;

use super::*;

const POLICY: &str = "Refunds are available within 30 days of delivery. \
    The refund for order 1234 was $100, issued on March 3, 2024. \
    Customers can reset their password from the login page. \
    Accounts are locked after 5 failed login attempts. \
    Orders ship from our Berlin warehouse within 2 business days.";

fn src(id: &str, text: &str) -> Source {
    Source {
        id: id.to_string(),
        text: Some(text.to_string()),
    }
}

fn claim(id: &str, text: &str) -> Claim {
    Claim {
        id: id.to_string(),
        text: text.to_string(),
        citations: Vec::new(),
    }
}

fn check(text: &str, evidence: &str) -> Check {
    let v = verify(
        &[claim("c1", text)],
        &[src("s1", evidence)],
        &Params::default(),
    );
    v.into_iter()
        .next()
        .expect("verify returns one check per claim")
}

/// Python's `text[start:end]`.
fn py_slice(text: &str, start: usize, end: usize) -> String {
    text.chars()
        .skip(start)
        .take(end.saturating_sub(start))
        .collect()
}

/// A check that is only a status and a coverage: what `summarize` and the
/// decision table read of a check.
pub(super) fn bare_check(status: ClaimStatus, coverage: f64) -> Check {
    Check {
        claim_id: "c1".into(),
        claim_text: "x".into(),
        status,
        coverage,
        citations: vec![],
        evidence: vec![],
        reasons: vec![],
        conflicts: vec![],
        part_gap: false,
        unaligned: vec![],
    }
}

fn sample() -> (Vec<Claim>, Vec<Source>) {
    let claims = vec![
        claim("c1", "The refund for order 1234 was $100."),
        claim("c2", "Orders ship from Berlin within 2 business days."),
        claim("c3", "Shipping is free on every order."),
        claim("c4", "Accounts are locked after 3 failed attempts."),
        claim("c5", "Refunds are available within 30 days."),
    ];
    let sources = vec![
        src("b-policy", POLICY),
        src(
            "a-faq",
            "Shipping is free on every order. Refunds are available within 30 days.",
        ),
        src(
            "c-dup",
            "Refunds are available within 30 days. Orders ship from Berlin.",
        ),
        Source {
            id: "d-down".into(),
            text: None,
        },
    ];
    (claims, sources)
}

// The tests, by what they cover (after the helpers: a macro is seen only
// below its definition).
mod cache;
mod forms;
mod properties;
mod statuses;
mod vocabulary;
