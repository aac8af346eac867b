//! Whether a quantity a claim states is backed by, conflicts with, or is
//! consistent with one the evidence states: the same dimension, unit and
//! currency, within the tolerance an approximate figure allows.

use super::*;

/// Two amounts in different stated currencies: never the same amount,
/// whatever the numbers.
fn other_currency(c: &Quantity, e: &Quantity) -> bool {
    matches!((c.currency, e.currency), (Some(a), Some(b)) if a != b)
}

/// Equal within a relative tolerance. A non-finite value (an amount whose
/// magnitude words overflow, "1e300 billion billion") is close to nothing:
/// otherwise its infinite scale would make it back every number.
fn close(a: f64, b: f64, approx: bool) -> bool {
    if !a.is_finite() || !b.is_finite() {
        return false;
    }
    let scale = a.abs().max(b.abs()).max(1e-9);
    let tol = if approx { 0.1 } else { 1e-9 };
    (a - b).abs() <= tol * scale
}

fn year_only(q: &Quantity) -> Option<i32> {
    (q.kind == QtyKind::Date && q.date.month.is_none() && q.date.day.is_none())
        .then_some(q.date.year)
        .flatten()
}

/// Does evidence quantity `e` state what claim quantity `c` states? A claim
/// may be less specific than its evidence ("March 2024" is backed by
/// "March 3, 2024") but never more.
#[inline]
pub fn backs(c: &Quantity, e: &Quantity) -> bool {
    if other_currency(c, e) {
        return false;
    }
    match in_base(c, e) {
        Some(Some((cv, ev))) => return close(cv, ev, c.approx || e.approx),
        Some(None) => return false,
        None => {}
    }
    match (c.kind, e.kind) {
        // "03/05/2024" states the same date as itself and nothing else.
        (QtyKind::Date, QtyKind::Date) if c.date.ambiguous || e.date.ambiguous => c.date == e.date,
        (QtyKind::Date, QtyKind::Date) => {
            // An evidence date without a year ("April 9") backs a claim that
            // adds one, as long as month and day are stated and agree.
            let f = |a: Option<i32>, b: Option<i32>| {
                a.is_none() || a == b || (b.is_none() && e.date.day.is_some())
            };
            let g = |a: Option<u8>, b: Option<u8>| a.is_none() || a == b;
            f(c.date.year, e.date.year)
                && g(c.date.month, e.date.month)
                && g(c.date.day, e.date.day)
        }
        (QtyKind::Date, QtyKind::Count) => {
            year_only(c).is_some_and(|y| close(f64::from(y), e.value, false))
        }
        (QtyKind::Count, QtyKind::Date) => {
            year_only(e).is_some_and(|y| close(f64::from(y), c.value, false))
        }
        (_, QtyKind::Date) | (QtyKind::Date, _) => false,
        // An amount or a percentage needs evidence of the same kind; a bare
        // claim number may be backed by either ("refund of 100" by "$100").
        (QtyKind::Money | QtyKind::Percent, k) if k != c.kind => false,
        (QtyKind::Count, QtyKind::Money | QtyKind::Percent) => {
            close(c.value, e.value, c.approx || e.approx)
        }
        _ => close(c.value, e.value, c.approx || e.approx),
    }
}

/// Does `e` state a different value for the slot `c` fills? Only then is a
/// missing match a contradiction rather than a gap. Dates conflict when a
/// part both state differs ("1995" does not conflict with "October 6, 1995").
pub fn conflicts(c: &Quantity, e: &Quantity) -> bool {
    if c.kind != e.kind {
        return false;
    }
    if c.kind == QtyKind::Money && other_currency(c, e) {
        return true;
    }
    match in_base(c, e) {
        Some(Some((cv, ev))) => return !close(cv, ev, c.approx || e.approx),
        Some(None) => return false,
        None => {}
    }
    if c.kind == QtyKind::Date && (c.date.ambiguous || e.date.ambiguous) {
        // Only a date that neither reading can be conflicts.
        let readings = |q: &Quantity| {
            if q.date.ambiguous {
                [q.date, q.date.swapped()]
            } else {
                [q.date, q.date]
            }
        };
        return readings(c).iter().all(|cd| {
            readings(e).iter().all(|ed| {
                let (mut c2, mut e2) = (*c, *e);
                c2.date = DateParts {
                    ambiguous: false,
                    ..*cd
                };
                e2.date = DateParts {
                    ambiguous: false,
                    ..*ed
                };
                conflicts(&c2, &e2)
            })
        });
    }
    if c.kind == QtyKind::Date {
        let differ = |a: Option<u8>, b: Option<u8>| a.is_some() && b.is_some() && a != b;
        let year_differs =
            c.date.year.is_some() && e.date.year.is_some() && c.date.year != e.date.year;
        return year_differs
            || differ(c.date.month, e.date.month) && c.date.day.is_some() && e.date.day.is_some()
            || differ(c.date.day, e.date.day) && c.date.month == e.date.month;
    }
    !close(c.value, e.value, c.approx || e.approx)
}

/// Is `e` consistent with `c` (no stated part differs)?
pub fn consistent(c: &Quantity, e: &Quantity) -> bool {
    c.kind == e.kind && !conflicts(c, e)
}
