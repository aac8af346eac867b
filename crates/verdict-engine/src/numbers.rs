//! Numbers, amounts, percentages and dates read out of a token stream and
//! reduced to canonical values.
//!
//! A lexical verifier is only trustworthy on specifics if "1,000", "1000" and
//! "one thousand" are the same number and "March 3, 2024" is the same day as
//! "2024-03-03". Comparing canonical values, not surfaces, is what lets the
//! engine call "$120" against "$100" a contradiction rather than a near match.

mod compare;
mod scan;
pub use compare::{backs, conflicts, consistent};
pub use scan::extract;

/// The slot a quantity fills; only quantities of the same kind contradict
/// each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QtyKind {
    Count,
    Money,
    Percent,
    Date,
}

/// A calendar date with the parts that were stated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DateParts {
    pub year: Option<i32>,
    pub month: Option<u8>,
    pub day: Option<u8>,
    /// A numeric date such as "03/05/2024" that reads as a valid date both
    /// month-first and day-first: `month`/`day` hold the month-first reading,
    /// and it backs only the same literal, never a date in words.
    pub ambiguous: bool,
}

impl DateParts {
    /// The other reading of an ambiguous date.
    fn swapped(self) -> DateParts {
        DateParts {
            month: self.day,
            day: self.month,
            ambiguous: false,
            ..self
        }
    }
}

/// Reads every ambiguous numeric date in `qty` in the given order; with
/// `DateOrder::Ambiguous` they stay ambiguous.
pub fn resolve_dates(qty: &mut [Quantity], order: super::DateOrder) {
    for q in qty.iter_mut().filter(|q| q.date.ambiguous) {
        q.date = match order {
            super::DateOrder::Ambiguous => continue,
            // `month`/`day` already hold the month-first reading.
            super::DateOrder::Mdy => DateParts {
                ambiguous: false,
                ..q.date
            },
            super::DateOrder::Dmy => q.date.swapped(),
        };
    }
}

/// Plain decimal notation: `-?(0|[1-9][0-9]*)(\.[0-9]+)?`, finite. Nothing
/// that one parser reads as a number and another as something else.
pub fn parse_decimal(s: &str) -> Option<f64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = match digits.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (digits, None),
    };
    let int_ok = int == "0"
        || (!int.is_empty() && !int.starts_with('0') && int.bytes().all(|b| b.is_ascii_digit()));
    let frac_ok = frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()));
    if !(int_ok && frac_ok) {
        return None;
    }
    s.parse::<f64>().ok().filter(|n| n.is_finite())
}

/// One quantity and the token range it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quantity {
    pub kind: QtyKind,
    /// Numeric value (for dates: the year, or 0 when the year is unknown).
    pub value: f64,
    pub date: DateParts,
    /// Preceded by "about", "approximately", ... : compare with tolerance.
    pub approx: bool,
    /// Spelled out ("three"): matched like a number but never reported as a
    /// fabricated specific, because small number words are everyday language.
    pub soft: bool,
    /// First token (inclusive) and last token (exclusive).
    pub tok_start: usize,
    pub tok_end: usize,
    /// The ISO 4217 code of an amount whose currency was stated by a
    /// symbol, a code or a word ("$", "USD", "dollars" are all `USD`).
    pub currency: Option<&'static str>,
    /// The unit a count is measured in ("12 kg", "3 weeks"), when one
    /// follows it.
    pub unit: Option<Unit>,
}

/// A unit of measure: its dimension and its size in the dimension's base
/// unit, so that "2 weeks" backs "14 days" and "12 lb" conflicts with
/// "12 kg".
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unit {
    pub dim: Dim,
    pub factor: f64,
}

/// What a unit measures. Months and years are their own dimension: a month
/// is no fixed number of days.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    Mass,
    Length,
    Duration,
    Months,
}

/// The unit a word after a number names, if any. "pound(s)" is left to
/// currency, "m" and "in" to their other readings.
fn measure_unit(norm: &str) -> Option<Unit> {
    let (dim, factor) = match norm {
        "kg" | "kgs" | "kilogram" | "kilograms" | "kilo" | "kilos" => (Dim::Mass, 1000.0),
        "g" | "gram" | "grams" => (Dim::Mass, 1.0),
        "lb" | "lbs" => (Dim::Mass, 453.592_37),
        "oz" | "ounce" | "ounces" => (Dim::Mass, 28.349_523_125),
        "tonne" | "tonnes" => (Dim::Mass, 1_000_000.0),
        "km" | "kilometer" | "kilometers" | "kilometre" | "kilometres" => (Dim::Length, 1000.0),
        "meter" | "meters" | "metre" | "metres" => (Dim::Length, 1.0),
        "cm" | "centimeter" | "centimeters" | "centimetre" | "centimetres" => (Dim::Length, 0.01),
        "mi" | "mile" | "miles" => (Dim::Length, 1609.344),
        "ft" | "foot" | "feet" => (Dim::Length, 0.3048),
        "inch" | "inches" => (Dim::Length, 0.0254),
        "second" | "seconds" | "sec" | "secs" => (Dim::Duration, 1.0),
        "minute" | "minutes" | "min" | "mins" => (Dim::Duration, 60.0),
        "hour" | "hours" | "hr" | "hrs" => (Dim::Duration, 3600.0),
        "day" | "days" => (Dim::Duration, 86_400.0),
        "week" | "weeks" => (Dim::Duration, 604_800.0),
        "month" | "months" => (Dim::Months, 1.0),
        "year" | "years" | "yr" | "yrs" => (Dim::Months, 12.0),
        _ => return None,
    };
    Some(Unit { dim, factor })
}

/// Both counts carry a unit of one dimension: their values in its base
/// unit. `None` when either has no unit; `Some(None)` when the dimensions
/// differ (nothing to compare).
fn in_base(c: &Quantity, e: &Quantity) -> Option<Option<(f64, f64)>> {
    let (cu, eu) = (c.unit?, e.unit?);
    Some((cu.dim == eu.dim).then_some((c.value * cu.factor, e.value * eu.factor)))
}

/// The ISO 4217 code a currency symbol, code or word names. `$` is read as
/// US dollars, the reading a reader of an English invoice takes.
fn currency_of(norm: &str) -> Option<&'static str> {
    Some(match norm {
        "$" | "usd" | "dollar" | "dollars" | "bucks" | "us$" => "USD",
        "€" | "eur" | "euro" | "euros" => "EUR",
        "£" | "gbp" | "pound" | "pounds" | "sterling" => "GBP",
        "¥" | "jpy" | "yen" => "JPY",
        "₹" | "inr" | "rupee" | "rupees" => "INR",
        "chf" | "franc" | "francs" => "CHF",
        "cad" => "CAD",
        "aud" => "AUD",
        "cny" | "rmb" | "yuan" => "CNY",
        "sek" | "nok" | "dkk" | "krona" | "kronor" | "krone" | "kroner" => "SEK",
        _ => return None,
    })
}

/// The currency of a number token's own symbol ("$100", "€80.00").
fn symbol_currency(s: &str) -> Option<&'static str> {
    let c = s.chars().next()?;
    let mut buf = [0u8; 4];
    currency_of(c.encode_utf8(&mut buf))
}

/// Words that make the following quantity approximate.
pub(crate) fn is_approx(norm: &str) -> bool {
    matches!(
        norm,
        "about"
            | "approximately"
            | "around"
            | "roughly"
            | "nearly"
            | "almost"
            | "circa"
            | "some"
            | "over"
            | "under"
            | "approx"
            | "estimated"
            | "up"
    )
}

fn magnitude(norm: &str) -> Option<f64> {
    Some(match norm {
        "hundred" => 1e2,
        "thousand" | "k" => 1e3,
        "million" | "millions" | "mn" | "m" => 1e6,
        "billion" | "billions" | "bn" | "b" => 1e9,
        "trillion" => 1e12,
        _ => return None,
    })
}

fn unit_word(norm: &str) -> Option<QtyKind> {
    match norm {
        "percent" | "pct" | "percentage" => Some(QtyKind::Percent),
        "cents" | "cent" => Some(QtyKind::Money),
        _ => currency_of(norm).map(|_| QtyKind::Money),
    }
}

/// The value of a spelled-out number word ("three", "forty"), if `norm` is
/// one.
/// A frequency adverb and the count it states: "charged twice" says what
/// "charged two times" says. "once" is left out: it is far more often the
/// conjunction ("once the return is received").
pub(crate) fn frequency_word(norm: &str) -> Option<f64> {
    match norm {
        "twice" => Some(2.0),
        "thrice" => Some(3.0),
        _ => None,
    }
}

pub(crate) fn small_word(norm: &str) -> Option<f64> {
    Some(match norm {
        "zero" => 0.0,
        "one" => 1.0,
        "two" => 2.0,
        "three" => 3.0,
        "four" => 4.0,
        "five" => 5.0,
        "six" => 6.0,
        "seven" => 7.0,
        "eight" => 8.0,
        "nine" => 9.0,
        "ten" => 10.0,
        "eleven" => 11.0,
        "twelve" => 12.0,
        "thirteen" => 13.0,
        "fourteen" => 14.0,
        "fifteen" => 15.0,
        "sixteen" => 16.0,
        "seventeen" => 17.0,
        "eighteen" => 18.0,
        "nineteen" => 19.0,
        "twenty" => 20.0,
        "thirty" => 30.0,
        "forty" => 40.0,
        "fifty" => 50.0,
        "sixty" => 60.0,
        "seventy" => 70.0,
        "eighty" => 80.0,
        "ninety" => 90.0,
        _ => return None,
    })
}

/// Parses a numeric token surface ("$1,000.50", "12%", "3,5", "5k", "3rd").
/// Returns value, kind and whether the token carried its own unit.
fn parse_number_token(s: &str) -> Option<(f64, QtyKind)> {
    let mut kind = QtyKind::Count;
    let mut body = s;
    if let Some(c) = body.chars().next() {
        if matches!(c, '$' | '€' | '£' | '¥' | '₹') {
            kind = QtyKind::Money;
            body = &body[c.len_utf8()..];
        }
    }
    if let Some(b) = body.strip_suffix('%') {
        kind = QtyKind::Percent;
        body = b;
    }
    let digits_end = body
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == ',' || c == '.'))
        .map_or(body.len(), |(i, _)| i);
    let (num, suffix) = body.split_at(digits_end);
    if num.is_empty() {
        return None;
    }
    let mut mult = 1.0;
    match suffix {
        "" | "st" | "nd" | "rd" | "th" | "s" | "x" => {}
        other => match magnitude(other) {
            Some(m) => mult = m,
            None => return None,
        },
    }
    // Only a number with a comma needs rewriting (and so a copy).
    let cleaned: std::borrow::Cow<'_, str> = if num.contains(',') {
        let parts: Vec<&str> = num.split(',').collect();
        let grouped = parts.len() > 1
            && parts
                .iter()
                .skip(1)
                .all(|p| p.len() == 3 || (p.len() > 3 && p.as_bytes()[3] == b'.'));
        if grouped || num.contains('.') {
            num.replace(',', "").into()
        } else {
            // "3,5": a decimal comma
            num.replacen(',', ".", 1).into()
        }
    } else {
        num.into()
    };
    let v: f64 = cleaned.trim_end_matches('.').parse().ok()?;
    if !v.is_finite() {
        return None;
    }
    Some((v * mult, kind))
}

fn parse_day(s: &str) -> Option<u8> {
    let d = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let v: u8 = d.parse().ok()?;
    (1..=31).contains(&v).then_some(v)
}

fn parse_year(s: &str) -> Option<i32> {
    if s.len() != 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let y: i32 = s.parse().ok()?;
    (1000..=2199).contains(&y).then_some(y)
}

/// ISO "2024-03-03", "2024/03/03", US "03/03/2024" and "2024-03".
fn parse_numeric_date(s: &str) -> Option<DateParts> {
    // At most three parts, on the stack: this runs for every number token,
    // and collecting into a `Vec` allocated for each.
    let mut parts = [""; 3];
    let mut n = 0;
    for p in s.split(['-', '/', '.']) {
        *parts.get_mut(n)? = p;
        n += 1;
    }
    let num = |p: &str| -> Option<u32> { p.parse().ok() };
    match parts.get(..n)? {
        [y, m, d] if y.len() == 4 => {
            let (m, d) = (num(m)?, num(d)?);
            ((1..=12).contains(&m) && (1..=31).contains(&d)).then(|| DateParts {
                year: parse_year(y),
                month: u8::try_from(m).ok(),
                day: u8::try_from(d).ok(),
                ambiguous: false,
            })
        }
        [a, b, y] if y.len() == 4 && (s.contains('/') || s.contains('.') || s.contains('-')) => {
            let (a, b) = (num(a)?, num(b)?);
            let valid = |m: u32, d: u32| (1..=12).contains(&m) && (1..=31).contains(&d);
            // Month-first when only that reads as a date, day-first when only
            // that does; both: ambiguous unless they are the same date.
            let (m, d, ambiguous) = match (valid(a, b), valid(b, a)) {
                (true, true) => (a, b, a != b),
                (true, false) => (a, b, false),
                (false, true) => (b, a, false),
                (false, false) => return None,
            };
            Some(DateParts {
                year: parse_year(y),
                month: u8::try_from(m).ok(),
                day: u8::try_from(d).ok(),
                ambiguous,
            })
        }
        [y, m] if y.len() == 4 && m.len() == 2 && s.contains('-') => {
            let m = num(m)?;
            (1..=12).contains(&m).then(|| DateParts {
                year: parse_year(y),
                month: u8::try_from(m).ok(),
                day: None,
                ambiguous: false,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
