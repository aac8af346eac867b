//! The status a claim gets: contradictions, negation, paraphrase, thresholds,
//! citations, evidence limits, summaries, reason codes and the spans a
//! conflict names.

use super::*;

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
            // The claim's "from" party against the evidence's.
            Some((Reason::PartyConflict, "EU", "US")),
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
    assert_supported(&[
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
    ]);
}

/// A date, amount or id that the evidence states of another event: the
/// clause that states the claim's event gives a rival, and no clause that
/// states it gives the claim's value. The same evidence supports the claim
/// bound as the evidence binds it; ranges, measures and a value the event's
/// own clause states are left alone.
#[test]
fn a_value_bound_to_another_event_is_not_supported() {
    let returned = "Order 5521 was returned to the warehouse on May 9. \
                    The refund was issued on May 12 to the original card.";
    let orders = "Order 3310 cost $40 and order 3318 cost $95. \
                  A refund of $95 was posted to order 3318.";
    let tickets = "Ticket 4401 was closed by the support team on June 2. \
                   Ticket 4410 was escalated to billing.";
    let invoice = "Invoice 8812 has two lines. Subtotal $1,200.00. \
                   Tax $96.00. Total: $1,296.00.";
    let cases = [
        (
            "The refund for order 5521 was issued on May 9.",
            returned,
            Reason::DateMismatch,
            "May 9",
            "May 12",
        ),
        (
            "The $40 refund was posted to order 3310.",
            orders,
            Reason::AmountMismatch,
            "$40",
            "$95",
        ),
        (
            "Ticket 4410 was closed by the support team.",
            tickets,
            Reason::NumberMismatch,
            "4410",
            "4401",
        ),
        (
            "Invoice 8812 totals $1,200.",
            invoice,
            Reason::AmountMismatch,
            "$1,200",
            "$1,296.00",
        ),
    ];
    for (text, evidence, reason, claim_quote, evidence_quote) in cases {
        let k = first_conflict(text, evidence, reason);
        assert_eq!(k.claim_quote, claim_quote, "{text}");
        assert_eq!(k.evidence_quote, evidence_quote, "{text}");
        assert_eq!(
            py_slice(evidence, k.evidence_start, k.evidence_end),
            evidence_quote
        );
        assert_eq!(py_slice(text, k.claim_start, k.claim_end), claim_quote);
    }
    let supported = [
        ("The refund for order 5521 was issued on May 12.", returned),
        (
            "Order 5521 was returned to the warehouse on May 9.",
            returned,
        ),
        ("A refund of $95 was posted to order 3318.", orders),
        ("Ticket 4401 was closed by the support team.", tickets),
        ("Invoice 8812 totals $1,296.", invoice),
        (
            "The refund of $40 was issued on March 3.",
            "On March 3 the agent issued the refund. The refund of $40 went \
             to the card; the order had cost $120 when it was issued on March 1.",
        ),
    ];
    assert_supported(&supported);
}

/// A named party the claim binds to its event ("approved by X", "X
/// approved", "billed to X"), where every stretch of the evidence that
/// states the event names another party in that slot: `party_conflict`,
/// on the two names. The party the evidence does name there is supported,
/// also in a list, as the subject, or after a role noun.
#[test]
fn a_party_in_another_slot_of_the_event_is_not_supported() {
    let wire = "Wire W-77 was prepared on May 2 by Ana Ruiz (payables). \
                Approved on May 3 by Tom Alvarez (controller).";
    let memo = "Credit memo CM-12 was issued by Acme Supply to Harbor Hotel \
                for two returned carts.";
    let bill = "Invoice 5520. Bill to: Norvik Logistics GmbH, Hamburg. \
                Ship to: Norvik Traders Ltd, Felixstowe.";
    let shipped = "Order 77 was booked with FedEx on May 2, but the label was \
                   voided. Re-shipped on May 3 with UPS Ground.";
    let cases = [
        ("Ana Ruiz approved wire W-77.", wire, "Ana Ruiz", "Tom"),
        (
            "Wire W-77 was approved by Ana Ruiz.",
            wire,
            "Ana Ruiz",
            "Tom",
        ),
        (
            "Harbor Hotel issued credit memo CM-12 to Acme Supply.",
            memo,
            "Harbor Hotel",
            "Acme",
        ),
        (
            "Invoice 5520 was billed to Norvik Traders Ltd.",
            bill,
            "Norvik Traders Ltd",
            "Norvik",
        ),
        ("Order 77 was shipped via FedEx.", shipped, "FedEx", "UPS"),
        (
            "Order 88 was cancelled at the customer's request.",
            "Order 88 was cancelled on May 2. Cancellation initiated by the \
             merchant: item out of stock.",
            "customer's",
            "merchant",
        ),
    ];
    for (text, evidence, claim_quote, evidence_quote) in cases {
        let k = first_conflict(text, evidence, Reason::PartyConflict);
        assert_eq!(k.claim_quote, claim_quote, "{text}");
        assert_eq!(k.evidence_quote, evidence_quote, "{text}");
        assert_eq!(
            py_slice(evidence, k.evidence_start, k.evidence_end),
            evidence_quote
        );
    }
    let supported = [
        ("Tom Alvarez approved wire W-77.", wire),
        ("Wire W-77 was approved by Tom Alvarez.", wire),
        (
            "Acme Supply issued credit memo CM-12 to Harbor Hotel.",
            memo,
        ),
        ("Order 77 was shipped via UPS Ground.", shipped),
        (
            "The refund was approved by the manager.",
            "The refund was approved by store manager Dana Okafor.",
        ),
        (
            "The refund was approved by Dana Okafor.",
            "The refund was approved by store manager Dana Okafor and \
             countersigned by Lee Park.",
        ),
        (
            "The album was produced by Mia Stone.",
            "The album was produced by Leo Hart and Mia Stone.",
        ),
        (
            "Mia Stone approved the refund.",
            "Mia Stone approved the refund on May 3; it was paid by Leo Hart.",
        ),
    ];
    assert_supported(&supported);
    // A role against a name: nothing says whether they are one party.
    let c = check(
        "The parcel was shipped to the customer on May 2.",
        "The parcel was shipped to Dana Lee on May 2.",
    );
    assert!(!c.reasons.contains(&Reason::PartyConflict), "{c:?}");
}

/// A state word that leaves an event open hedges the evidence: an
/// estimate, a projection or a proposal is not the event.
#[test]
fn estimates_and_proposals_are_not_the_event() {
    for (text, evidence) in [
        (
            "The migration was completed on June 2.",
            "Migration status: in progress. Projected completion: June 2.",
        ),
        (
            "The parcel was delivered on August 9.",
            "Parcel 2231 shipped August 6. The parcel was estimated to be delivered on August 9.",
        ),
    ] {
        let c = check(text, evidence);
        assert_ne!(c.status, ClaimStatus::Supported, "{text}: {c:?}");
        assert!(
            c.reasons.contains(&Reason::HedgedEvidence),
            "{text}: {:?}",
            c.reasons
        );
    }
}

/// A claim that puts one event's value inside a bound ("within the 14-day
/// window", "within the $500 limit") is not supported when its own amounts
/// break the bound, when the evidence says the bound was exceeded or the
/// event fell outside it, or when the evidence's two dates lie further
/// apart. A policy that states the bound is not about one event.
#[test]
fn a_bound_the_evidence_shows_broken_is_not_supported() {
    let dates = "Order 12 was delivered on 2024-05-01. The return was \
                 requested on 2024-05-25 in the app. Returns are accepted \
                 within 14 days of delivery.";
    let cases = [
        (
            "The return was requested within 14 days of delivery.",
            dates,
            Reason::NumberMismatch,
            "14 days",
        ),
        (
            "The refund of $650 was within the agent's $500 approval limit.",
            "Agent approval limit: $500. A refund of $650 was approved by the agent.",
            Reason::AmountMismatch,
            "$650",
        ),
        (
            "The refund was within the agent's approval limit.",
            "A refund of $140 was approved by agent Lee; the amount exceeded \
             the approval limit of $100.",
            Reason::StatusConflict,
            "within",
        ),
        (
            "The team lunch was within the per-person meal limit.",
            "Team lunch on May 3: $310 for 4 people ($77.50 per person). \
             Meal limit: $60 per person. Flagged as over limit.",
            Reason::StatusConflict,
            "within",
        ),
    ];
    for (text, evidence, reason, claim_quote) in cases {
        let k = first_conflict(text, evidence, reason);
        assert_eq!(k.claim_quote, claim_quote, "{text}");
    }
    let c = check("Returns are accepted within 14 days of delivery.", dates);
    assert_eq!(c.status, ClaimStatus::Supported, "{c:?}");
    // Nine days apart: inside the bound, whatever else the claim lacks.
    let c = check(
        "The return was requested within 14 days of delivery.",
        "The parcel was delivered on 2024-05-01. The return was requested on \
         2024-05-10 in the app.",
    );
    assert!(!c.reasons.contains(&Reason::NumberMismatch), "{c:?}");
}

/// Every (claim, evidence) pair comes out `supported`.
fn assert_supported(cases: &[(&str, &str)]) {
    for (text, evidence) in cases {
        let c = check(text, evidence);
        assert_eq!(c.status, ClaimStatus::Supported, "{text}: {c:?}");
    }
}

/// The claim is `unsupported` with `reason` first; its first conflict.
fn first_conflict(text: &str, evidence: &str, reason: Reason) -> Conflict {
    let c = check(text, evidence);
    assert_eq!(c.status, ClaimStatus::Unsupported, "{text}: {c:?}");
    assert_eq!(c.reasons.first(), Some(&reason), "{text}: {:?}", c.reasons);
    let k = c.conflicts.first().cloned();
    k.unwrap_or_else(|| panic!("{text}: no conflict"))
}
