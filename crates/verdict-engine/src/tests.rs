//! Table-driven tests of the public engine API: contradictions never pass,
//! faithful paraphrases do, offsets reproduce quotes, output is deterministic
//! and independent of source order.

use proptest::prelude::*;

use super::*;

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

const POLICY: &str = "Refunds are available within 30 days of delivery. \
    The refund for order 1234 was $100, issued on March 3, 2024. \
    Customers can reset their password from the login page. \
    Accounts are locked after 5 failed login attempts. \
    Orders ship from our Berlin warehouse within 2 business days.";

#[test]
fn contradictions_are_never_supported() {
    // Every case keeps all other words of a supported sentence.
    let cases: &[(&str, Reason)] = &[
        (
            "The refund for order 1234 was $120, issued on March 3, 2024.",
            Reason::AmountMismatch,
        ),
        (
            "The refund for order 1234 was $100, issued on March 4, 2024.",
            Reason::DateMismatch,
        ),
        (
            "The refund for order 1234 was $100, issued on 2023-03-03.",
            Reason::DateMismatch,
        ),
        (
            "Refunds are available within 60 days of delivery.",
            Reason::NumberMismatch,
        ),
        (
            "Accounts are locked after 3 failed login attempts.",
            Reason::NumberMismatch,
        ),
        (
            "Refunds are not available within 30 days of delivery.",
            Reason::NegationConflict,
        ),
        (
            "Customers cannot reset their password from the login page.",
            Reason::NegationConflict,
        ),
        (
            "Orders ship from our Munich warehouse within 2 business days.",
            Reason::NameMissing,
        ),
        (
            "Accounts are unlocked after 5 failed login attempts.",
            Reason::StatusConflict,
        ),
        (
            "Orders ship from our Berlin warehouse within 2 business days for $5.",
            Reason::NumberNotFound,
        ),
    ];
    for (text, reason) in cases {
        let c = check(text, POLICY);
        assert_eq!(c.status, ClaimStatus::Unsupported, "{text}: {c:?}");
        assert!(
            c.reasons.contains(reason),
            "{text}: want {reason:?}, got {:?}",
            c.reasons
        );
    }
}

#[test]
fn negation_governs_the_word_it_precedes() {
    let hose = "Rinse the deck with a garden hose. Do not use a high pressure washer, \
        because it can strip the paint.";
    // "avoid" is an implicit negator: the advice agrees with "do not use".
    let c = check(
        "Avoid using a high pressure washer because it can strip the paint.",
        hose,
    );
    assert!(!c.reasons.contains(&Reason::NegationConflict), "{c:?}");
    // Explicit negators still flip what they govern.
    let c = check("Use a high pressure washer to strip the paint.", hose);
    assert_eq!(c.status, ClaimStatus::Unsupported, "{c:?}");
    assert!(c.reasons.contains(&Reason::NegationConflict), "{c:?}");
    // "no" denies "risk", the first content word after it, not every word
    // within three tokens ("spring").
    let garden = "Plant the bulbs once all danger of spring frost has passed and the soil is warm.";
    let c = check(
        "Plant the bulbs when there is no risk of spring frost.",
        garden,
    );
    assert!(!c.reasons.contains(&Reason::NegationConflict), "{c:?}");
    let c = check("Plant the bulbs when the soil is not warm.", garden);
    assert!(c.reasons.contains(&Reason::NegationConflict), "{c:?}");
}

#[test]
fn faithful_statements_are_supported() {
    let cases = [
        "Refunds are available within 30 days of delivery.",
        "The refund for order 1234 was $100.",
        "The refund for order 1234 was 100 dollars, issued on 2024-03-03.",
        "The refund for order 1234 was issued on 3 March 2024.",
        "Refunds are available within thirty days of delivery.",
        "Orders ship from the Berlin warehouse within two business days.",
        "Customers can reset their passwords from the login page.",
        "After 5 failed login attempts, accounts are locked.",
        "Order 1234 was refunded $100 on March 3, 2024.",
    ];
    for text in cases {
        let c = check(text, POLICY);
        assert_eq!(c.status, ClaimStatus::Supported, "{text}: {c:?}");
        assert!(c.reasons.is_empty(), "{text}: {:?}", c.reasons);
        assert!(!c.citations.is_empty(), "{text}: supported claims cite");
    }
}

/// An invoice states what was charged without naming "the customer"; a
/// source that names another party keeps the claim's party word at full
/// weight, and a party word never outweighs a wrong amount.
#[test]
fn a_party_the_evidence_leaves_implicit_weighs_less() {
    let invoice = "Invoice INV-2291. Item: Vitamix E310 blender. \
        Amount charged: $100.00 on Visa ending 4421. Delivered 2026-03-03.";
    let claim = "The customer was charged $100.00 for the Vitamix E310 blender.";
    let implicit = check(claim, invoice);
    assert_eq!(implicit.status, ClaimStatus::Supported, "{implicit:?}");
    assert!(implicit.coverage >= 0.9, "{implicit:?}");

    let named = "Invoice INV-2291. Item: Vitamix E310 blender. \
        The merchant was charged $100.00 on Visa ending 4421.";
    let other_party = check(claim, named);
    assert!(
        other_party.coverage < implicit.coverage,
        "{other_party:?} against {implicit:?}"
    );
    assert_ne!(
        other_party.status,
        ClaimStatus::Supported,
        "{other_party:?}"
    );

    let wrong = check(
        "The customer was charged $120.00 for the Vitamix E310 blender.",
        invoice,
    );
    assert_eq!(wrong.status, ClaimStatus::Unsupported, "{wrong:?}");
    assert!(wrong.reasons.contains(&Reason::AmountMismatch), "{wrong:?}");
}

#[test]
fn number_forms_are_equal() {
    let cases = [
        ("The fee is 1,000 dollars.", "The fee is $1000."),
        ("The fee is one thousand dollars.", "The fee is $1,000."),
        (
            "The deadline is March 3, 2024.",
            "The deadline is 2024-03-03.",
        ),
        ("Growth was 12 percent.", "Growth was 12%."),
        (
            "The company raised $1.2 million.",
            "The company raised $1,200,000.",
        ),
    ];
    for (claim_text, evidence) in cases {
        let c = check(claim_text, evidence);
        assert_eq!(
            c.status,
            ClaimStatus::Supported,
            "{claim_text} vs {evidence}: {c:?}"
        );
    }
}

#[test]
fn unrelated_claims_are_unsupported() {
    let c = check("The CEO resigned in a scandal.", POLICY);
    assert_eq!(c.status, ClaimStatus::Unsupported);
    assert!(c.citations.is_empty());
}

#[test]
fn thresholds_follow_design() {
    // One of the claim's two parts is absent from the evidence, the other
    // carries most of its weight: a review, never supported.
    let c = check(
        "Refunds are available within 30 days of delivery and gift cards never expire.",
        POLICY,
    );
    assert!(c.unaligned.iter().any(|s| s.text == "gift"), "{c:?}");
    assert_eq!(c.status, ClaimStatus::Ambiguous, "{c:?}");
    assert!(c.reasons.contains(&Reason::LowCoverage), "{c:?}");
    // Nothing in the claim is in the evidence: unsupported.
    let c = check("Gift cards never expire anywhere.", POLICY);
    assert!(c.coverage < 0.5, "{c:?}");
    assert_eq!(c.status, ClaimStatus::Unsupported, "{c:?}");
    let p = Params {
        min_coverage: 0.0,
        review_floor: 0.0,
        evidence_limit: 5,
        ..Params::default()
    };
    let v = verify(
        &[claim("c1", "Refunds are available within 30 days.")],
        &[src("s", POLICY)],
        &p,
    );
    assert_eq!(v[0].status, ClaimStatus::Supported);
}

#[test]
fn no_sources_and_unavailable_sources_never_support() {
    let p = Params::default();
    let v = verify(&[claim("c1", "Refunds take 30 days.")], &[], &p);
    assert_eq!(v[0].status, ClaimStatus::Unsupported);
    assert!(v[0].reasons.contains(&Reason::NoEvidence));
    assert_eq!(summarize(&v, false), (Verdict::Unsupported, 0.0));

    let down = Source {
        id: "s1".into(),
        text: None,
    };
    let v = verify(
        &[claim("c1", "Refunds take 30 days.")],
        std::slice::from_ref(&down),
        &p,
    );
    assert_eq!(v[0].status, ClaimStatus::Unsupported);
    assert!(
        v[0].reasons.contains(&Reason::SourceUnavailable),
        "{:?}",
        v[0].reasons
    );

    let mut cited = claim("c1", "Refunds are available within 30 days of delivery.");
    cited.citations = vec![CallerCitation {
        source_id: "s1".into(),
        quote: None,
    }];
    let v = verify(&[cited], &[down, src("s2", POLICY)], &p);
    assert_eq!(
        v[0].status,
        ClaimStatus::Unsupported,
        "cited source is down: {:?}",
        v[0]
    );
    assert!(v[0].reasons.contains(&Reason::SourceUnavailable));
}

#[test]
fn caller_citations_restrict_and_quotes_must_match() {
    let sources = [
        src("policy", POLICY),
        src("other", "Shipping is free on all orders."),
    ];
    let p = Params::default();
    let cite = |id: &str, quote: Option<&str>| CallerCitation {
        source_id: id.into(),
        quote: quote.map(str::to_string),
    };

    // Restricted to a source that does not say it.
    let mut c = claim("c1", "Refunds are available within 30 days of delivery.");
    c.citations = vec![cite("other", None)];
    assert_ne!(
        verify(&[c.clone()], &sources, &p)[0].status,
        ClaimStatus::Supported
    );

    // Verbatim quote: supported, with the quote's exact offsets.
    let quote = "Refunds are available within 30 days of delivery.";
    c.citations = vec![cite("policy", Some(quote))];
    let v = verify(&[c.clone()], &sources, &p);
    assert_eq!(v[0].status, ClaimStatus::Supported, "{:?}", v[0]);
    let got = &v[0].citations[0];
    assert_eq!(got.quote, quote);
    assert_eq!(py_slice(POLICY, got.start, got.end), quote);

    // Quote not in the source: unsupported whatever the overlap.
    c.citations = vec![cite(
        "policy",
        Some("Refunds are available within 90 days."),
    )];
    let v = verify(&[c.clone()], &sources, &p);
    assert_eq!(v[0].status, ClaimStatus::Unsupported);
    assert!(v[0].reasons.contains(&Reason::CitationNotFound));

    // Unknown source id.
    c.citations = vec![cite("nope", None)];
    let v = verify(&[c], &sources, &p);
    assert_eq!(v[0].status, ClaimStatus::Unsupported);
    assert!(v[0].reasons.contains(&Reason::CitationNotFound));
}

#[test]
fn evidence_is_limited_and_best_first() {
    let p = Params {
        evidence_limit: 1,
        ..Params::default()
    };
    let v = verify(
        &[claim(
            "c1",
            "Accounts are locked after 5 failed login attempts.",
        )],
        &[src("s", POLICY)],
        &p,
    );
    assert_eq!(v[0].evidence.len(), 1);
    assert_eq!(
        v[0].evidence[0].snippet,
        "Accounts are locked after 5 failed login attempts."
    );
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

#[test]
fn summarize_follows_design() {
    let mk = bare_check;
    let s = ClaimStatus::Supported;
    let a = ClaimStatus::Ambiguous;
    let u = ClaimStatus::Unsupported;
    assert_eq!(
        summarize(&[mk(s, 1.0), mk(s, 0.9)], true),
        (Verdict::Supported, 0.95)
    );
    assert_eq!(
        summarize(&[mk(s, 1.0), mk(a, 0.6)], true),
        (Verdict::Ambiguous, 0.8)
    );
    assert_eq!(
        summarize(&[mk(a, 0.6), mk(u, 0.0)], true),
        (Verdict::Unsupported, 0.3)
    );
    assert_eq!(summarize(&[mk(s, 1.0)], false), (Verdict::Supported, 0.0));
    assert_eq!(
        summarize(&[mk(s, 1.0), mk(s, 0.0), mk(s, 0.0)], true).1,
        0.3333
    );
    assert_eq!(summarize(&[], true).0, Verdict::Unsupported);
}

#[test]
fn reason_codes_are_stable() {
    assert_eq!(Reason::NumberMismatch.as_str(), "number_mismatch");
    assert_eq!(Reason::CitationNotFound.as_str(), "citation_not_found");
    assert_eq!(Reason::SourceUnavailable.as_str(), "source_unavailable");
    assert_eq!(ClaimStatus::Ambiguous.as_str(), "ambiguous");
    assert_eq!(Verdict::Unsupported.as_str(), "unsupported");
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

#[test]
fn deterministic() {
    let (claims, sources) = sample();
    let p = Params::default();
    let first = verify(&claims, &sources, &p);
    for _ in 0..5 {
        assert_eq!(verify(&claims, &sources, &p), first);
    }
}

#[test]
fn source_order_does_not_matter() {
    let (claims, sources) = sample();
    let p = Params::default();
    let base = verify(&claims, &sources, &p);
    let n = sources.len();
    // Every rotation plus every reversal of it.
    for r in 0..n {
        for rev in [false, true] {
            let mut s = sources.clone();
            s.rotate_left(r);
            if rev {
                s.reverse();
            }
            let got = verify(&claims, &s, &p);
            assert_eq!(got, base, "rotation {r} reversed {rev}");
        }
    }
}

#[test]
fn no_panics_on_odd_input() {
    let odd = [
        "",
        " ",
        "\u{0}",
        "....",
        "$",
        "$$$1",
        "1,,,000",
        "99999999999999999999999999999999999999 %",
        "Ünïcödé 🎉 日本語 العربية e\u{301}",
        "\r\n\r\n- \n1. \n#",
        "nonnonnon n't 'n't",
        "March May June 31 February 2024-13-45",
    ];
    let p = Params::default();
    for a in odd {
        for b in odd {
            let v = verify(&[claim("c", a)], &[src("s", b)], &p);
            assert_eq!(v.len(), 1);
            let _ = extract_claims(a, &[src("s", b)]);
        }
    }
    // Hostile shapes that would be quadratic with naive rescans; each must
    // finish quickly (this test would time out otherwise).
    for hostile in [
        "a.".repeat(100_000),
        "\n".repeat(200_000),
        "[".repeat(200_000),
        "](".repeat(100_000),
        " .".repeat(100_000),
        "(passage ".repeat(20_000),
        "\"Word ".repeat(20_000),
    ] {
        let v = verify(&[claim("c", &hostile)], &[src("s", &hostile)], &p);
        assert_eq!(v.len(), 1);
        let _ = extract_claims(&hostile, &[]);
    }
    let huge = "Refunds are available within 30 days. ".repeat(5000);
    let v = verify(
        &[claim("c", "Refunds are available within 30 days.")],
        &[src("s", &huge)],
        &p,
    );
    assert_eq!(v[0].status, ClaimStatus::Supported);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn citation_offsets_reproduce_quotes(
        before in "[a-z \u{1F389}\u{65E5}\u{672C}e\u{301}\r\n.]{0,40}",
        core in "[a-z\u{1F600}\u{4E2D}\u{0301}]{1,6}( [a-z\u{1F600}\u{4E2D}]{1,6}){2,5}",
        after in "[a-z \u{1F389}\r\n.]{0,40}",
    ) {
        let body = format!("{before}\r\n{core}.\r\n{after}");
        let sources = [src("s", &body)];
        let mut c = claim("c", &core);
        c.citations = vec![CallerCitation { source_id: "s".into(), quote: Some(core.clone()) }];
        let v = verify(&[c, claim("d", &core)], &sources, &Params { min_coverage: 0.0, review_floor: 0.0, evidence_limit: 5, ..Params::default() });
        for check in &v {
            for cit in &check.citations {
                prop_assert_eq!(py_slice(&body, cit.start, cit.end), cit.quote.clone());
            }
        }
        prop_assert!(!v[0].citations.is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary Unicode never panics, and every citation still reproduces
    /// its quote.
    #[test]
    fn arbitrary_text_never_panics(
        claim_text in "\\PC{0,80}",
        body in "(\\PC|[\\r\\n .,$%0-9])*",
        answer in "(\\PC|[\\r\\n\\[\\]()#*:-])*",
    ) {
        let sources = [src("s", &body)];
        let v = verify(&[claim("c", &claim_text)], &sources, &Params::default());
        prop_assert_eq!(v.len(), 1);
        prop_assert!((0.0..=1.0).contains(&v[0].coverage));
        for cit in &v[0].citations {
            prop_assert_eq!(py_slice(&body, cit.start, cit.end), cit.quote.clone());
        }
        let claims = extract_claims(&answer, &sources);
        let _ = verify(&claims, &sources, &Params::default());
    }
}

#[test]
fn currencies_are_canonical_and_never_interchangeable() {
    let ev = "Invoice INV-7: the customer paid USD 19.99 for shipping and EUR 80 for the blender.";
    for (text, supported) in [
        ("The customer paid $19.99 for shipping.", true),
        ("The customer paid 19.99 dollars for shipping.", true),
        ("The customer paid €80.00 for the blender.", true),
        ("The customer paid 80 euros for the blender.", true),
        ("The customer paid €19.99 for shipping.", false),
        ("The customer paid £80 for the blender.", false),
        ("The customer paid $80 for the blender.", false),
    ] {
        let c = check(text, ev);
        assert_eq!(
            c.status == ClaimStatus::Supported,
            supported,
            "{text}: {:?} {:?}",
            c.status,
            c.reasons
        );
        if !supported {
            assert!(
                c.reasons.contains(&Reason::AmountMismatch),
                "{text}: {:?}",
                c.reasons
            );
        }
    }
}

#[test]
fn british_and_american_spellings_match() {
    for (claim_text, evidence) in [
        (
            "The refund was authorized by the store manager.",
            "The refund was authorised by the store manager.",
        ),
        (
            "The order was cancelled by the customer.",
            "The order was canceled by the customer.",
        ),
        (
            "The customer asked for a different color.",
            "The customer asked for a different colour.",
        ),
    ] {
        let c = check(claim_text, evidence);
        assert_eq!(c.status, ClaimStatus::Supported, "{claim_text}: {c:?}");
        // A stem match weighs a little less than the same surface form.
        assert!(c.coverage >= 0.95, "{claim_text}: {}", c.coverage);
    }
}

/// The four examples of the verifier issue: each unsupported with its
/// reason, and the two words that disagree named by code-point offsets.
#[test]
fn conflicts_name_the_two_words_that_disagree() {
    let py = |t: &str, a: usize, b: usize| t.chars().skip(a).take(b - a).collect::<String>();
    for (claim_text, evidence, reason, claim_word, evidence_word) in [
        (
            "The refund was denied.",
            "The refund was approved by the manager.",
            Reason::StatusConflict,
            "denied",
            "approved",
        ),
        (
            "The login attempt failed.",
            "The login attempt succeeded from IP 10.0.0.5.",
            Reason::StatusConflict,
            "failed",
            "succeeded",
        ),
        (
            "The customer refused the delivery.",
            "The customer accepted the delivery at 09:14.",
            Reason::StatusConflict,
            "refused",
            "accepted",
        ),
        (
            "The warranty covers accidental damage.",
            "Limited warranty: covers manufacturing defects for 24 months. Accidental damage, water damage and normal wear are not covered.",
            Reason::NegationConflict,
            "covers",
            "covered",
        ),
        (
            "The refund was issued.",
            "The refund will be issued within 5 business days.",
            Reason::HedgedEvidence,
            "issued",
            "will",
        ),
    ] {
        let c = check(claim_text, evidence);
        assert_eq!(c.status, ClaimStatus::Unsupported, "{claim_text}: {c:?}");
        assert!(c.reasons.contains(&reason), "{claim_text}: {:?}", c.reasons);
        let x = c.conflicts.first().unwrap_or_else(|| panic!("{claim_text}: no spans"));
        assert_eq!(x.reason, reason);
        assert_eq!(x.claim_quote, claim_word, "{claim_text}");
        assert_eq!(py(claim_text, x.claim_start, x.claim_end), claim_word);
        assert_eq!(x.evidence_quote, evidence_word, "{claim_text}");
        assert_eq!(py(evidence, x.evidence_start, x.evidence_end), evidence_word);
        assert_eq!(x.source_id, "s1");
    }
}

#[test]
fn date_order_reads_an_ambiguous_numeric_date_one_way() {
    use crate::DateOrder;
    let sources = [Source {
        id: "s".into(),
        text: Some("The refund was issued on 03/05/2024.".into()),
    }];
    let run = |claim_text: &str, order: DateOrder| {
        let params = Params {
            date_order: order,
            ..Params::default()
        };
        verify(&[claim("c", claim_text)], &sources, &params)[0].status
    };
    let march = "The refund was issued on March 5, 2024.";
    let may = "The refund was issued on 3 May 2024.";
    // Unknown order: neither reading is supported.
    assert_ne!(run(march, DateOrder::Ambiguous), ClaimStatus::Supported);
    assert_ne!(run(may, DateOrder::Ambiguous), ClaimStatus::Supported);
    // Month first: March 5; 3 May is another date.
    assert_eq!(run(march, DateOrder::Mdy), ClaimStatus::Supported);
    assert_eq!(run(may, DateOrder::Mdy), ClaimStatus::Unsupported);
    // Day first: 3 May; March 5 is another date.
    assert_eq!(run(may, DateOrder::Dmy), ClaimStatus::Supported);
    assert_eq!(run(march, DateOrder::Dmy), ClaimStatus::Unsupported);
}

/// Claims a new user wrote against evidence that contradicts them: none
/// passes, and each says why with spans (the two that disagree, or the
/// claim's words that nothing in the evidence aligns with).
#[test]
fn contradicted_claims_outside_the_corpus_name_their_spans() {
    // (claim, evidence, reason and the claim and evidence words of its
    // conflict, or None and the claim words left unaligned)
    type Case = (
        &'static str,
        &'static str,
        Option<(Reason, &'static str, &'static str)>,
        &'static [&'static str],
    );
    let cases: &[Case] = &[
        (
            "The customer did not receive a refund.",
            "A refund of $25 was issued to the customer on June 3.",
            None,
            &["receive"],
        ),
        (
            "The card was debited $40.",
            "The card was credited $40 as a goodwill gesture.",
            None,
            &["debited"],
        ),
        (
            "The account is currently active.",
            "The account was active until it was closed in January 2024.",
            Some((Reason::StatusConflict, "active", "until")),
            &[],
        ),
        (
            "The transfer went from the EU account to the US account.",
            "The transfer went from the US account to the EU account on 2024-02-01.",
            Some((Reason::PartyConflict, "EU", "EU")),
            &[],
        ),
        (
            "The user was granted admin rights.",
            "The user's request for admin rights was withdrawn before review.",
            None,
            &["granted"],
        ),
        (
            "Both invoices were paid.",
            "Invoice A-1 was paid on 2024-05-02; invoice A-2 is still open.",
            Some((Reason::ScopeConflict, "Both", "open")),
            &[],
        ),
        (
            "The refund was issued before the chargeback.",
            "The chargeback was filed on May 2 and the refund was issued on May 9.",
            Some((Reason::DateMismatch, "before", "May")),
            &[],
        ),
        (
            "The item is returnable.",
            "Final sale: this item is non-returnable.",
            Some((Reason::NegationConflict, "returnable", "returnable")),
            &[],
        ),
        (
            "The box weighed 12 kg.",
            "Shipping label: weight 12 lb, handle with care.",
            None,
            &["12 kg"],
        ),
        (
            "The order was paid by bank transfer.",
            "The order was paid by credit card on 2024-05-02.",
            None,
            &["bank", "transfer"],
        ),
    ];
    for (text, evidence, conflict, unaligned) in cases {
        let c = check(text, evidence);
        assert_ne!(c.status, ClaimStatus::Supported, "{text}: {c:?}");
        match conflict {
            Some((reason, claim_word, evidence_word)) => {
                assert!(c.reasons.contains(reason), "{text}: {c:?}");
                let k = c.conflicts.first().expect("a conflict with spans");
                assert_eq!(k.reason, *reason, "{text}: {c:?}");
                assert_eq!(k.claim_quote, *claim_word, "{text}: {c:?}");
                assert_eq!(k.evidence_quote, *evidence_word, "{text}: {c:?}");
                assert_eq!(py_slice(text, k.claim_start, k.claim_end), *claim_word);
                assert_eq!(
                    py_slice(evidence, k.evidence_start, k.evidence_end),
                    *evidence_word
                );
            }
            None => {
                let words: Vec<&str> = c.unaligned.iter().map(|s| s.text.as_str()).collect();
                for w in *unaligned {
                    assert!(words.contains(w), "{text}: {w} not in {words:?}");
                }
                for s in &c.unaligned {
                    assert_eq!(py_slice(text, s.start, s.end), s.text);
                }
            }
        }
    }
}

/// Events in the evidence's order are no conflict (the order word itself
/// aligns with nothing, so the claim goes to a review); a unit the
/// evidence gives in another measure converts; a time bound still running
/// does not end the state.
#[test]
fn alignment_conflicts_leave_true_claims_alone() {
    let c = check(
        "The refund was issued after the chargeback.",
        "The chargeback was filed on May 2 and the refund was issued on May 9.",
    );
    assert_eq!(c.status, ClaimStatus::Ambiguous, "{c:?}");
    assert!(c.conflicts.is_empty(), "{c:?}");
    for (text, evidence) in [
        (
            "The transfer went from the US account to the EU account.",
            "The transfer went from the US account to the EU account on 2024-02-01.",
        ),
        ("The parcel weighed 2 kg.", "The parcel weighed 2000 g."),
        ("The trial lasts 2 weeks.", "The trial lasts 14 days."),
        (
            "The subscription is active.",
            "The subscription is active until 2030.",
        ),
        (
            "Both invoices were paid.",
            "Invoice A-1 was paid on 2024-05-02; invoice A-2 was paid on 2024-05-09.",
        ),
    ] {
        let c = check(text, evidence);
        assert_eq!(c.status, ClaimStatus::Supported, "{text}: {c:?}");
    }
}
