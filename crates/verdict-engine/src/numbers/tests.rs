//! Unit tests of the parent module, kept in their own file so that the
//! module itself reads as code.

use super::*;
use crate::text::{stemmer, tokenize};

fn q(s: &str) -> Vec<Quantity> {
    let st = stemmer();
    let tokens = tokenize(s, &st);
    let out = extract(&tokens, &st.vocab());
    out
}

fn same(a: &str, b: &str) -> bool {
    let (qa, qb) = (q(a), q(b));
    !qa.is_empty() && qa.iter().all(|c| qb.iter().any(|e| backs(c, e)))
}

#[test]
fn a_unit_is_compared_in_its_dimension() {
    let one = |s: &str| q(s).into_iter().next().expect("a quantity");
    assert!(backs(&one("2 weeks"), &one("14 days")));
    assert!(backs(&one("2 kg"), &one("2000 grams")));
    assert!(!backs(&one("12 kg"), &one("12 lb")));
    assert!(conflicts(&one("12 kg"), &one("12 lb")));
    assert!(conflicts(&one("30 days"), &one("30 hours")));
    // Months are no fixed number of days: neither backs nor conflicts.
    assert!(!backs(&one("1 month"), &one("30 days")));
    assert!(!conflicts(&one("1 month"), &one("30 days")));
    assert!(backs(&one("12 months"), &one("1 year")));
    // A bare number still matches a measured one.
    assert!(backs(&one("12"), &one("12 kg")));
}

#[test]
fn an_overflowing_amount_backs_nothing() {
    let huge = format!("${} billion billion", "9".repeat(300));
    let ev = q(&huge);
    assert!(ev.iter().any(|e| e.value.is_infinite()), "{ev:?}");
    for claim in ["$100", "100", "$1 billion", "5%"] {
        assert!(!same(claim, &huge), "{claim}");
    }
    assert!(!same(&huge, &huge));
}

#[test]
fn equal_values() {
    let cases = [
        ("1,000", "1000"),
        ("one thousand", "1000"),
        ("March 3, 2024", "2024-03-03"),
        ("3 March 2024", "2024-03-03"),
        ("March 2024", "2024-03-03"),
        ("$1.2 million", "$1,200,000"),
        ("12%", "12 percent"),
        ("twenty five", "25"),
        ("$5k", "5,000 dollars"),
        ("about 3 million", "2,970,000"),
        ("in 2019", "2019"),
        ("3.5", "3,5"),
        ("03/03/2024", "2024-03-03"),
        ("50 cents", "$0.50"),
        ("USD 19.99", "$19.99"),
        ("€80.00", "EUR 80"),
        ("80 euros", "€80"),
        ("£5", "5 pounds"),
        ("120", "120 EUR"),
        ("05 May 2024", "May 5, 2024"),
        ("4 June 2024", "2024-06-04"),
        ("Apr 3", "April 3"),
        ("3rd of April 2024", "2024-04-03"),
        ("April 3rd, 2024", "2024-04-03"),
        ("Wednesday, April 3, 2024", "2024-04-03"),
        ("Sept. 9, 2024", "2024-09-09"),
        ("25/12/2024", "December 25, 2024"),
        ("12/25/2024", "2024-12-25"),
        ("03/05/2024", "03/05/2024"),
        ("04.04.2024", "April 4, 2024"),
    ];
    for (a, b) in cases {
        assert!(
            same(a, b),
            "{a:?} should equal {b:?}: {:?} vs {:?}",
            q(a),
            q(b)
        );
    }
}

#[test]
fn an_ambiguous_date_conflicts_only_with_dates_neither_reading_is() {
    let one = |s: &str| q(s)[0];
    let amb = one("03/05/2024");
    assert!(amb.date.ambiguous);
    assert!(!conflicts(&amb, &one("March 5, 2024")));
    assert!(!conflicts(&amb, &one("May 3, 2024")));
    assert!(conflicts(&amb, &one("June 7, 2024")));
    assert!(conflicts(&one("June 7, 2024"), &amb));
    assert!(!one("05/05/2024").date.ambiguous);
}

#[test]
fn different_values() {
    let cases = [
        ("$120", "$100"),
        ("2024-03-04", "March 3, 2024"),
        ("March 3, 2024", "March 2024"),
        ("15%", "12%"),
        ("1,000", "100"),
        ("2019", "2018"),
        ("3 million", "2,970,000"),
        ("120 EUR", "120 USD"),
        ("$120", "€120"),
        ("£80", "80 dollars"),
        ("USD 19.99", "EUR 19.99"),
        ("US$1,500", "C$1,500"),
        ("A$20", "$20"),
        // Ambiguous between March 5 and May 3: it supports neither.
        ("03/05/2024", "March 5, 2024"),
        ("03/05/2024", "May 3, 2024"),
        ("March 5, 2024", "03/05/2024"),
    ];
    for (a, b) in cases {
        assert!(!same(a, b), "{a:?} should differ from {b:?}");
    }
}

#[test]
fn may_is_not_always_a_month() {
    assert!(q("You may request a refund").is_empty());
    assert_eq!(q("on May 5, 2023")[0].kind, QtyKind::Date);
}
