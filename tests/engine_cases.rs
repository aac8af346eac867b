//! Hand-written claim/evidence cases for the verification engine, grouped by
//! the domains verdict gates: refunds, account access, shipping and LLM
//! answers. Each case states the status docs/api.md requires at the default
//! thresholds. Project-owned text, no dataset content.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use verdict::engine::{verify, Claim, ClaimStatus, Params, Source};

use ClaimStatus::{Ambiguous as A, Supported as S, Unsupported as U};

const REFUND: &str = "Refund policy. Customers may request a refund within 30 days of delivery. \
Refunds are issued to the original payment method. \
Order 4471 was refunded $100.00 on March 3, 2024. \
Digital gift cards are non-refundable. \
A restocking fee of 15% applies to opened electronics. \
Refunds above $500 require approval by a supervisor.";

const ACCOUNT: &str =
    "Account security. After 5 failed login attempts the account is locked for 30 minutes. \
Users can reset their password by email. \
Two-factor authentication is required for administrators. \
The account of user jdoe was created on 2021-07-14. \
Support agents cannot see customer passwords.";

const SHIPPING: &str = "Shipping. Orders placed before 2 pm ship the same day. \
Standard delivery takes 3 to 5 business days. \
Express delivery costs $12.99 and arrives the next business day. \
We ship from our warehouse in Rotterdam. \
Shipping is free for orders over $50. \
Order 9120 was shipped on 14 June 2024 via DHL.";

const ANSWER_SRC: &str =
    "The Eiffel Tower is 330 metres tall. It was completed in 1889 for the World's Fair. \
Gustave Eiffel's company designed and built the tower. \
About 7 million people visit it every year. \
The tower was the tallest man-made structure in the world until 1930.";

/// An evidence text and the claims checked against it, by the status
/// docs/api.md requires at the default thresholds.
struct Group {
    evidence: &'static str,
    supported: &'static [&'static str],
    unsupported: &'static [&'static str],
    ambiguous: &'static [&'static str],
}

const GROUPS: &[Group] = &[
    // --- refunds ---
    Group {
        evidence: REFUND,
        supported: &[
            "Customers may request a refund within 30 days of delivery.",
            "Customers can request a refund within thirty days of delivery.",
            "Refunds are issued to the original payment method.",
            "Order 4471 was refunded $100 on March 3, 2024.",
            "Order 4471 was refunded $100.00 on 2024-03-03.",
            "Order 4471 was refunded one hundred dollars.",
            "Digital gift cards are non-refundable.",
            "A restocking fee of 15% applies to opened electronics.",
            "A restocking fee of 15 percent applies to opened electronics.",
            "Refunds above $500 require approval by a supervisor.",
        ],
        unsupported: &[
            "Customers may request a refund within 60 days of delivery.",
            "Customers may not request a refund within 30 days of delivery.",
            "Refunds are issued as store credit.",
            "Order 4471 was refunded $120 on March 3, 2024.",
            "Order 4471 was refunded $100 on March 5, 2024.",
            "Order 4471 was refunded $100 in 2023.",
            "Digital gift cards are refundable.",
            "A restocking fee of 25% applies to opened electronics.",
            "Refunds above $1,000 require approval by a supervisor.",
            "Refunds above $500 require approval by the CFO Margaret.",
        ],
        ambiguous: &[
            "Refunds above $500 require approval by a supervisor and a signed form from the bank.",
        ],
    },
    // --- account access ---
    Group {
        evidence: ACCOUNT,
        supported: &[
            "After 5 failed login attempts the account is locked for 30 minutes.",
            "The account is locked for 30 minutes after five failed login attempts.",
            "Users can reset their password by email.",
            "Users can reset their passwords by email.",
            "Two-factor authentication is required for administrators.",
            "The account of user jdoe was created on July 14, 2021.",
            "The account of user jdoe was created in 2021.",
            "Support agents cannot see customer passwords.",
        ],
        unsupported: &[
            "After 3 failed login attempts the account is locked for 30 minutes.",
            "After 5 failed login attempts the account is locked for 60 minutes.",
            "After 5 failed login attempts the account is not locked.",
            "Users cannot reset their password by email.",
            "Users can reset their password by SMS.",
            "Two-factor authentication is not required for administrators.",
            "The account of user jdoe was created on July 15, 2021.",
            "Support agents can see customer passwords.",
            "The account was unlocked by the security officer Priya after a phone call.",
        ],
        ambiguous: &[],
    },
    // --- shipping ---
    Group {
        evidence: SHIPPING,
        supported: &[
            "Orders placed before 2 pm ship the same day.",
            "Standard delivery takes 3 to 5 business days.",
            "Express delivery costs $12.99 and arrives the next business day.",
            "We ship from our warehouse in Rotterdam.",
            "Shipping is free for orders over $50.",
            "Shipping is free for orders over fifty dollars.",
            "Order 9120 was shipped on June 14, 2024 via DHL.",
            "Order 9120 was shipped on 2024-06-14.",
        ],
        unsupported: &[
            "Orders placed before 4 pm ship the same day.",
            "Standard delivery takes 7 to 10 business days.",
            "Express delivery costs $15.99 and arrives the next business day.",
            "We ship from our warehouse in Hamburg.",
            "Shipping is free for orders over $25.",
            "Order 9120 was shipped on June 16, 2024 via DHL.",
            "Order 9120 was shipped on June 14, 2024 via FedEx.",
            "Order 9120 was lost in transit and the customer received a voucher.",
        ],
        ambiguous: &[],
    },
    // --- LLM answers ---
    Group {
        evidence: ANSWER_SRC,
        supported: &[
            "The Eiffel Tower is 330 metres tall.",
            "The Eiffel Tower was completed in 1889.",
            "It was completed in 1889 for the World's Fair.",
            "Gustave Eiffel's company designed and built the tower.",
            "About 7 million people visit it every year.",
            // "Roughly" for "about": the approximator belongs to the number.
            "Roughly 7 million people visit it every year.",
            "The tower was the tallest man-made structure in the world until 1930.",
            "The Eiffel Tower, completed in 1889, is 330 metres tall.",
        ],
        unsupported: &[
            "The Eiffel Tower is 300 metres tall.",
            "The Eiffel Tower was completed in 1887.",
            "Gustave Flaubert's company designed and built the tower.",
            "About 9 million people visit it every year.",
            "The tower was the tallest man-made structure in the world until 1950.",
            "The tower is painted gold every seven years by volunteers.",
        ],
        // "The tower" for "it": the sentence that states the figure does
        // not name the tower, and nothing aligns a pronoun with its
        // antecedent, so the claim goes to a review.
        ambiguous: &["Roughly 7 million people visit the tower each year."],
    },
];

/// Every case of [`GROUPS`]: evidence, claim, required status.
fn cases() -> Vec<(&'static str, &'static str, ClaimStatus)> {
    GROUPS
        .iter()
        .flat_map(|g| {
            [(g.supported, S), (g.unsupported, U), (g.ambiguous, A)]
                .into_iter()
                .flat_map(move |(claims, want)| claims.iter().map(move |c| (g.evidence, *c, want)))
        })
        .collect()
}

#[test]
fn hand_written_cases() {
    let cases = cases();
    assert!(
        cases.len() >= 60,
        "need at least 60 cases, have {}",
        cases.len()
    );
    let params = Params::default();
    let mut failures = Vec::new();
    for (i, &(evidence, claim, want)) in cases.iter().enumerate() {
        let sources = [Source {
            id: "doc".into(),
            text: Some(evidence.into()),
        }];
        let claims = [Claim {
            id: format!("c{i}"),
            text: claim.into(),
            citations: vec![],
        }];
        let check = &verify(&claims, &sources, &params)[0];
        if check.status != want {
            failures.push(format!(
                "#{i} {claim:?}: want {}, got {} (coverage {}, reasons {:?})",
                want.as_str(),
                check.status.as_str(),
                check.coverage,
                check.reasons.iter().map(|r| r.as_str()).collect::<Vec<_>>()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
