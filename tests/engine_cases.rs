//! Hand-written claim/evidence cases for the verification engine, grouped by
//! the domains verdict gates: refunds, account access, shipping and LLM
//! answers. Each case states the status DESIGN §4 requires at the default
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

struct Case {
    evidence: &'static str,
    claim: &'static str,
    want: ClaimStatus,
}

const fn c(evidence: &'static str, claim: &'static str, want: ClaimStatus) -> Case {
    Case {
        evidence,
        claim,
        want,
    }
}

const CASES: &[Case] = &[
    // --- refunds ---
    c(
        REFUND,
        "Customers may request a refund within 30 days of delivery.",
        S,
    ),
    c(
        REFUND,
        "Customers can request a refund within thirty days of delivery.",
        S,
    ),
    c(
        REFUND,
        "Customers may request a refund within 60 days of delivery.",
        U,
    ),
    c(
        REFUND,
        "Customers may not request a refund within 30 days of delivery.",
        U,
    ),
    c(
        REFUND,
        "Refunds are issued to the original payment method.",
        S,
    ),
    c(REFUND, "Refunds are issued as store credit.", U),
    c(REFUND, "Order 4471 was refunded $100 on March 3, 2024.", S),
    c(REFUND, "Order 4471 was refunded $100.00 on 2024-03-03.", S),
    c(REFUND, "Order 4471 was refunded $120 on March 3, 2024.", U),
    c(REFUND, "Order 4471 was refunded $100 on March 5, 2024.", U),
    c(REFUND, "Order 4471 was refunded $100 in 2023.", U),
    c(REFUND, "Order 4471 was refunded one hundred dollars.", S),
    c(REFUND, "Digital gift cards are non-refundable.", S),
    c(REFUND, "Digital gift cards are refundable.", U),
    c(
        REFUND,
        "A restocking fee of 15% applies to opened electronics.",
        S,
    ),
    c(
        REFUND,
        "A restocking fee of 15 percent applies to opened electronics.",
        S,
    ),
    c(
        REFUND,
        "A restocking fee of 25% applies to opened electronics.",
        U,
    ),
    c(
        REFUND,
        "Refunds above $500 require approval by a supervisor.",
        S,
    ),
    c(
        REFUND,
        "Refunds above $1,000 require approval by a supervisor.",
        U,
    ),
    c(
        REFUND,
        "Refunds above $500 require approval by the CFO Margaret.",
        U,
    ),
    c(
        REFUND,
        "Refunds above $500 require approval by a supervisor and a signed form from the bank.",
        A,
    ),
    // --- account access ---
    c(
        ACCOUNT,
        "After 5 failed login attempts the account is locked for 30 minutes.",
        S,
    ),
    c(
        ACCOUNT,
        "The account is locked for 30 minutes after five failed login attempts.",
        S,
    ),
    c(
        ACCOUNT,
        "After 3 failed login attempts the account is locked for 30 minutes.",
        U,
    ),
    c(
        ACCOUNT,
        "After 5 failed login attempts the account is locked for 60 minutes.",
        U,
    ),
    c(
        ACCOUNT,
        "After 5 failed login attempts the account is not locked.",
        U,
    ),
    c(ACCOUNT, "Users can reset their password by email.", S),
    c(ACCOUNT, "Users can reset their passwords by email.", S),
    c(ACCOUNT, "Users cannot reset their password by email.", U),
    c(ACCOUNT, "Users can reset their password by SMS.", U),
    c(
        ACCOUNT,
        "Two-factor authentication is required for administrators.",
        S,
    ),
    c(
        ACCOUNT,
        "Two-factor authentication is not required for administrators.",
        U,
    ),
    c(
        ACCOUNT,
        "The account of user jdoe was created on July 14, 2021.",
        S,
    ),
    c(
        ACCOUNT,
        "The account of user jdoe was created on July 15, 2021.",
        U,
    ),
    c(ACCOUNT, "The account of user jdoe was created in 2021.", S),
    c(ACCOUNT, "Support agents cannot see customer passwords.", S),
    c(ACCOUNT, "Support agents can see customer passwords.", U),
    c(
        ACCOUNT,
        "The account was unlocked by the security officer Priya after a phone call.",
        U,
    ),
    // --- shipping ---
    c(SHIPPING, "Orders placed before 2 pm ship the same day.", S),
    c(SHIPPING, "Orders placed before 4 pm ship the same day.", U),
    c(SHIPPING, "Standard delivery takes 3 to 5 business days.", S),
    c(
        SHIPPING,
        "Standard delivery takes 7 to 10 business days.",
        U,
    ),
    c(
        SHIPPING,
        "Express delivery costs $12.99 and arrives the next business day.",
        S,
    ),
    c(
        SHIPPING,
        "Express delivery costs $15.99 and arrives the next business day.",
        U,
    ),
    c(SHIPPING, "We ship from our warehouse in Rotterdam.", S),
    c(SHIPPING, "We ship from our warehouse in Hamburg.", U),
    c(SHIPPING, "Shipping is free for orders over $50.", S),
    c(
        SHIPPING,
        "Shipping is free for orders over fifty dollars.",
        S,
    ),
    c(SHIPPING, "Shipping is free for orders over $25.", U),
    c(
        SHIPPING,
        "Order 9120 was shipped on June 14, 2024 via DHL.",
        S,
    ),
    c(SHIPPING, "Order 9120 was shipped on 2024-06-14.", S),
    c(
        SHIPPING,
        "Order 9120 was shipped on June 16, 2024 via DHL.",
        U,
    ),
    c(
        SHIPPING,
        "Order 9120 was shipped on June 14, 2024 via FedEx.",
        U,
    ),
    c(
        SHIPPING,
        "Order 9120 was lost in transit and the customer received a voucher.",
        U,
    ),
    // --- LLM answers ---
    c(ANSWER_SRC, "The Eiffel Tower is 330 metres tall.", S),
    c(ANSWER_SRC, "The Eiffel Tower is 300 metres tall.", U),
    c(ANSWER_SRC, "The Eiffel Tower was completed in 1889.", S),
    c(ANSWER_SRC, "The Eiffel Tower was completed in 1887.", U),
    c(
        ANSWER_SRC,
        "It was completed in 1889 for the World's Fair.",
        S,
    ),
    c(
        ANSWER_SRC,
        "Gustave Eiffel's company designed and built the tower.",
        S,
    ),
    c(
        ANSWER_SRC,
        "Gustave Flaubert's company designed and built the tower.",
        U,
    ),
    c(ANSWER_SRC, "About 7 million people visit it every year.", S),
    // A paraphrase of every fact ("roughly" for "about", "the tower" for
    // "it", "each" for "every"): calibrated coverage passes it.
    c(
        ANSWER_SRC,
        "Roughly 7 million people visit the tower each year.",
        S,
    ),
    c(ANSWER_SRC, "About 9 million people visit it every year.", U),
    c(
        ANSWER_SRC,
        "The tower was the tallest man-made structure in the world until 1930.",
        S,
    ),
    c(
        ANSWER_SRC,
        "The tower was the tallest man-made structure in the world until 1950.",
        U,
    ),
    c(
        ANSWER_SRC,
        "The tower is painted gold every seven years by volunteers.",
        U,
    ),
    c(
        ANSWER_SRC,
        "The Eiffel Tower, completed in 1889, is 330 metres tall.",
        S,
    ),
];

#[test]
fn hand_written_cases() {
    assert!(
        CASES.len() >= 60,
        "need at least 60 cases, have {}",
        CASES.len()
    );
    let params = Params::default();
    let mut failures = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let sources = [Source {
            id: "doc".into(),
            text: Some(case.evidence.into()),
        }];
        let claims = [Claim {
            id: format!("c{i}"),
            text: case.claim.into(),
            citations: vec![],
        }];
        let check = &verify(&claims, &sources, &params)[0];
        if check.status != case.want {
            failures.push(format!(
                "#{i} {:?}: want {}, got {} (coverage {}, reasons {:?})",
                case.claim,
                case.want.as_str(),
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
        CASES.len(),
        failures.join("\n")
    );
}
