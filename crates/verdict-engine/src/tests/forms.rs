//! Forms that mean the same: numbers, currencies, British and American
//! spellings, and ambiguous numeric dates.

use super::*;

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
