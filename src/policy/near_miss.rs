//! Which declared action type an undeclared one reads as, misspelt.
//!
//! `/v2/authorize` takes its action type from the calling app, so an app that
//! sends `refund.crate` (or `Refund_Create`, or `create.refund`) for a declared
//! `refund.create` silently escapes that policy's floors and rules: the type
//! is undeclared, so the caller's own requirements apply. A hostile app could
//! as well not call at all; the danger this module guards against is the
//! honest mistake that turns a strict gate into an open one. The check is
//! deliberately narrow so that an unrelated undeclared type (`reply`) keeps
//! the `[defaults]` behaviour the API documents.

/// The declared type that `candidate` is a near miss of, if any.
///
/// A near miss is, after folding case and the separators `_ - . / :` and
/// space to one separator: the same name; the same words in another order;
/// or a name within a small edit distance (optimal string alignment, so a
/// swap of two neighbouring letters is one edit) of a declared one: one edit
/// for names of 4 to 7 characters, two from 8 characters up, none below 4
/// (where one edit turns most names into other words).
pub fn near_miss<'a>(
    candidate: &str,
    declared: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let c = fold(candidate);
    let c_words = sorted_words(&c);
    declared.into_iter().find(|d| {
        let d_fold = fold(d);
        if d_fold == c || sorted_words(&d_fold) == c_words {
            return true;
        }
        let len = d_fold.chars().count().min(c.chars().count());
        let allowed = match len {
            0..=3 => 0,
            4..=7 => 1,
            _ => 2,
        };
        allowed > 0 && strsim::osa_distance(&d_fold, &c) <= allowed
    })
}

fn fold(s: &str) -> String {
    s.trim()
        .chars()
        .map(|ch| match ch {
            '_' | '-' | '.' | '/' | ':' | ' ' => '.',
            other => other,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

fn sorted_words(folded: &str) -> Vec<&str> {
    let mut words: Vec<&str> = folded.split('.').filter(|w| !w.is_empty()).collect();
    words.sort_unstable();
    words
}

#[cfg(test)]
mod tests {
    use super::near_miss;

    const DECLARED: [&str; 3] = ["refund.create", "order.cancel", "pay"];

    #[test]
    fn misspellings_of_a_declared_type_are_near_misses() {
        for c in [
            "refund.crate",
            "refund.craete",
            "refunds.create",
            "Refund.Create",
            "refund_create",
            "REFUND-CREATE",
            "create.refund",
            " refund.create ",
            "refund.creat",
            "order.cancle",
            "order/cancel",
            "PAY",
        ] {
            assert!(near_miss(c, DECLARED).is_some(), "{c}");
        }
        assert_eq!(near_miss("refund.crate", DECLARED), Some("refund.create"));
        assert_eq!(near_miss("cancel_order", DECLARED), Some("order.cancel"));
    }

    #[test]
    fn other_undeclared_types_are_not() {
        for c in [
            "issue_refund",
            "reply",
            "x",
            "refund",
            "refund.delete",
            "order.create",
            "pax",
            "payout.create",
            "",
        ] {
            assert_eq!(near_miss(c, DECLARED), None, "{c}");
        }
    }
}
