//! Binding: does a claim state the value an action param carries?
//!
//! Evidence that supports "Order 1001 was charged $100.00" justifies a refund
//! of 100 on order 1001, not a refund of 450 on order 1002. A policy lists the
//! params that matter (`bind = ["amount", "order_id"]`), and the gate asks,
//! for each one, whether some supported claim states it. Values are compared
//! canonically, the way the verifier compares claims with evidence: "$100.00",
//! "100" and "USD 100" all state 100, and ids match as whole tokens, ignoring
//! case. Pure, like the rest of the engine.

use super::numbers::{self, QtyKind};
use super::text::{stemmer, tokenize};

/// A param value, as binding reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct BindValue {
    /// The value as a number: a JSON number, or a string in plain decimal
    /// notation.
    pub number: Option<f64>,
    /// The value as text (strings only), matched as a whole token.
    pub text: Option<String>,
}

impl BindValue {
    /// A JSON number. An integer is also matched as a whole token ("order
    /// 1001"), which the quantity reader may take for an id, not a count.
    pub fn number(n: f64) -> BindValue {
        BindValue {
            number: Some(n),
            text: (n.fract() == 0.0 && n.abs() < 1e15).then(|| format!("{n:.0}")),
        }
    }

    /// A JSON string: a whole token, and a number when it is written in
    /// plain decimal notation.
    pub fn text(s: &str) -> BindValue {
        BindValue {
            number: super::numbers::parse_decimal(s.trim()),
            text: Some(s.to_string()),
        }
    }
}

/// Whether `claim` states `value`: as a number or amount with that exact
/// value, or as a whole token.
pub fn states(claim: &str, value: &BindValue) -> bool {
    if let Some(n) = value.number {
        let st = stemmer();
        let tokens = tokenize(claim, &st);
        let found = numbers::extract(&tokens, &st.vocab()).iter().any(|q| {
            matches!(q.kind, QtyKind::Count | QtyKind::Money)
                && q.value.is_finite()
                && (q.value - n).abs() <= 1e-9 * q.value.abs().max(n.abs()).max(1.0)
        });
        if found {
            return true;
        }
    }
    value
        .text
        .as_deref()
        .is_some_and(|t| contains_token(claim, t))
}

/// `needle` occurs in `hay`, ignoring case, with no letter or digit right
/// before or after it (nor a `.` or `,` that continues a number).
fn contains_token(hay: &str, needle: &str) -> bool {
    let needle = needle.trim();
    if needle.is_empty() {
        return false;
    }
    let hay_l = hay.to_lowercase();
    let needle_l = needle.to_lowercase();
    let digits = needle_l.bytes().all(|b| b.is_ascii_digit());
    let mut from = 0;
    while let Some(i) = hay_l[from..].find(&needle_l) {
        let start = from + i;
        let end = start + needle_l.len();
        // A number continues through a separator followed by a digit:
        // "100" is not stated by "$100.50" or "1,100".
        // A bare number also continues through a date's or time's separator:
        // "2024" is not stated by "2024-03-03".
        let joins = |c: Option<char>| match c {
            Some('.' | ',') => true,
            Some('-' | '/' | ':') => digits,
            _ => false,
        };
        let mut rest = hay_l[end..].chars();
        let after = rest.next();
        let continues_after = after.is_some_and(char::is_alphanumeric)
            || (joins(after) && rest.next().is_some_and(|c| c.is_ascii_digit()));
        let mut prev = hay_l[..start].chars().rev();
        let before = prev.next();
        let continues_before = before.is_some_and(char::is_alphanumeric)
            || (joins(before) && prev.next().is_some_and(|c| c.is_ascii_digit()));
        if !continues_before && !continues_after {
            return true;
        }
        // Step past the first character of this occurrence.
        from = start + hay_l[start..].chars().next().map_or(1, char::len_utf8);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(n: f64) -> BindValue {
        BindValue::number(n)
    }

    fn text(t: &str) -> BindValue {
        BindValue::text(t)
    }

    #[test]
    fn amounts_and_ids() {
        let claim = "Order 1001 was charged $100.00 on 2024-03-03.";
        for (value, want) in [
            (num(100.0), true),
            (num(100.5), false),
            (num(450.0), false),
            (num(1001.0), true),
            (text("1001"), true),
            (text("100"), true),
            (text("1002"), false),
            (text("10"), false),
            (num(1001.5), false),
            (num(2024.0), false),
        ] {
            assert_eq!(states(claim, &value), want, "{value:?}");
        }
        assert!(states("A refund of USD 1,250 was approved.", &num(1250.0)));
        assert!(!states("A refund of $100.50 was approved.", &num(100.0)));
        assert!(!states("Invoice 1,100 was paid.", &text("100")));
        assert!(states("Ticket A-17 is open.", &text("a-17")));
        assert!(!states("Ticket A-170 is open.", &text("A-17")));
        assert!(!states("Ticket XA-17 is open.", &text("A-17")));
        assert!(!states("anything", &text("  ")));
        assert!(states("Zoë's order ZÖE-1 shipped.", &text("zöe-1")));
    }
}
