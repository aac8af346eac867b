//! The quantity scanner: one pass over a token stream that reads dates,
//! amounts, percentages, counts and spelled-out numbers, each with the token
//! range it came from.

use super::{
    currency_of, frequency_word, is_approx, magnitude, measure_unit, parse_day, parse_number_token,
    parse_numeric_date, parse_year, small_word, symbol_currency, unit_word, DateParts, QtyKind,
    Quantity,
};
use crate::text::{Token, TokenKind, Vocab};

/// Extracts every quantity from `tokens` (in order, non-overlapping);
/// `vocab` holds their normalised forms.
pub fn extract(tokens: &[Token], vocab: &Vocab) -> Vec<Quantity> {
    let mut scan = Scanner {
        tokens,
        vocab,
        // Room for one quantity per eight tokens, so that a source's list
        // does not regrow (a short claim's list is one small allocation
        // either way).
        out: Vec::with_capacity(tokens.len() / 8 + 1),
    };
    let mut i = 0;
    while let Some(t) = tokens.get(i) {
        // Most tokens are words that start no quantity: not a number, not a
        // month, not a number word (facts looked up once per word).
        if t.kind == TokenKind::Word && t.lex.month.is_none() && !t.lex.number_word {
            i += 1;
            continue;
        }
        i = scan.quantity_at(i);
    }
    scan.out
}

/// The tokens being scanned, their vocabulary, and the quantities read so far.
struct Scanner<'t> {
    tokens: &'t [Token],
    vocab: &'t Vocab,
    out: Vec<Quantity>,
}

/// An amount being read: a number token's value and what the words around it add.
struct Amount {
    value: f64,
    kind: QtyKind,
    currency: Option<&'static str>,
    /// First token (inclusive) and last token (exclusive) read so far.
    start: usize,
    end: usize,
}

impl<'t> Scanner<'t> {
    /// The normalised form of token `k` ("" past the end).
    #[inline]
    fn norm(&self, k: usize) -> &'t str {
        let vocab = self.vocab;
        self.tokens.get(k).map_or("", |t| vocab.norm(t.norm_id))
    }

    /// `month_number(norm(k))`, looked up once per word at interning.
    #[inline]
    fn month(&self, k: usize) -> Option<u8> {
        self.tokens.get(k).and_then(|t| t.lex.month)
    }

    /// Whether token `k` is a number token.
    #[inline]
    fn is_num(&self, k: usize) -> bool {
        self.tokens
            .get(k)
            .is_some_and(|t| t.kind == TokenKind::Number)
    }

    /// Whether the quantity starting at token `k` is approximate ("about", "more than").
    fn approx_at(&self, k: usize) -> bool {
        // Asked only when a quantity is found, not for every token.
        k > 0 && is_approx(self.norm(k - 1))
            || k > 1
                && matches!(
                    (self.norm(k - 2), self.norm(k - 1)),
                    ("more", "than")
                        | ("less", "than")
                        | ("at", "least")
                        | ("at", "most")
                        | ("up", "to")
                )
    }

    /// Reads the quantity that starts at token `i`, if any; returns the token to go on from.
    #[inline]
    fn quantity_at(&mut self, i: usize) -> usize {
        if let Some(m) = self.month(i) {
            if let Some(end) = self.month_first_date(i, m) {
                return end;
            }
        }
        if self.is_num(i) {
            return self.number_at(i);
        }
        if let Some(end) = self.frequency_count(i) {
            return end;
        }
        if let Some(end) = self.spelled_number(i) {
            return end;
        }
        i + 1
    }

    /// Month-first dates: "March 3, 2024", "March 2024", "Mar 3" (month `m` at token `i`).
    fn month_first_date(&mut self, i: usize, m: u8) -> Option<usize> {
        let day = if self.is_num(i + 1) {
            parse_day(self.norm(i + 1))
        } else {
            None
        };
        let year_at = if day.is_some() { i + 2 } else { i + 1 };
        let year = if self.is_num(year_at) {
            parse_year(self.norm(year_at))
        } else {
            None
        };
        if day.is_none() && year.is_none() {
            return None;
        }
        let end = if year.is_some() { year_at + 1 } else { i + 2 };
        self.out.push(date_qty(
            DateParts {
                year,
                month: Some(m),
                day,
                ambiguous: false,
            },
            i,
            end,
        ));
        Some(end)
    }

    /// Reads the quantity a number token at `i` starts; returns the token to go on from.
    fn number_at(&mut self, i: usize) -> usize {
        let s = self.norm(i);
        if let Some(end) = self.day_first_date(i, s) {
            return end;
        }
        if let Some(d) = parse_numeric_date(s) {
            self.out.push(date_qty(d, i, i + 1));
            return i + 1;
        }
        // Ranges "2019-2021", "10-20": two quantities.
        if let Some((a, b)) = s.split_once('-') {
            self.range(i, s, [a, b]);
            return i + 1;
        }
        if let Some(end) = self.bare_year(i, s) {
            return end;
        }
        if let Some(end) = self.amount(i, s) {
            return end;
        }
        i + 1
    }

    /// Day-first dates: "3 March 2024", "3rd of March" (`s` is token `i`).
    fn day_first_date(&mut self, i: usize, s: &str) -> Option<usize> {
        let of = usize::from(self.norm(i + 1) == "of");
        let (Some(d), Some(m)) = (parse_day(s), self.month(i + 1 + of)) else {
            return None;
        };
        if self.norm(i + 1 + of) == "may" && !self.is_num(i + 2 + of) {
            return None;
        }
        let year = if self.is_num(i + 2 + of) {
            parse_year(self.norm(i + 2 + of))
        } else {
            None
        };
        let end = i + 2 + of + usize::from(year.is_some());
        self.out.push(date_qty(
            DateParts {
                year,
                month: Some(m),
                day: Some(d),
                ambiguous: false,
            },
            i,
            end,
        ));
        Some(end)
    }

    /// The two ends of a range token `s` at `i` ("2019-2021", "10-20"), each a year or a number.
    fn range(&mut self, i: usize, s: &str, parts: [&str; 2]) {
        for part in parts {
            if let Some(y) = parse_year(part) {
                self.out.push(date_qty(
                    DateParts {
                        year: Some(y),
                        ..DateParts::default()
                    },
                    i,
                    i + 1,
                ));
            } else if let Some((v, kind)) = parse_number_token(part) {
                self.out.push(Quantity {
                    kind,
                    value: v,
                    date: DateParts::default(),
                    approx: self.approx_at(i),
                    soft: false,
                    tok_start: i,
                    tok_end: i + 1,
                    currency: symbol_currency(s),
                    unit: None,
                });
            }
        }
    }

    /// A year on its own ("in 2024"), unless a unit or magnitude word follows it.
    fn bare_year(&mut self, i: usize, s: &str) -> Option<usize> {
        let next = self.norm(i + 1);
        let unit_follows =
            magnitude(next).is_some() || unit_word(next).is_some() || measure_unit(next).is_some();
        let y = parse_year(s).filter(|_| !unit_follows)?;
        self.out.push(date_qty(
            DateParts {
                year: Some(y),
                ..DateParts::default()
            },
            i,
            i + 1,
        ));
        Some(i + 1)
    }

    /// A number, amount or percentage at `i`, with its currency, magnitudes and unit.
    fn amount(&mut self, i: usize, s: &str) -> Option<usize> {
        let (value, kind) = parse_number_token(s)?;
        let mut a = Amount {
            value,
            kind,
            currency: symbol_currency(s),
            start: i,
            end: i + 1,
        };
        self.currency_before(&mut a, i);
        self.words_after(&mut a);
        let unit = (a.kind == QtyKind::Count)
            .then(|| measure_unit(self.norm(a.end)))
            .flatten();
        if unit.is_some() {
            a.end += 1;
        }
        self.out.push(Quantity {
            kind: a.kind,
            value: a.value,
            date: DateParts::default(),
            approx: self.approx_at(a.start),
            soft: false,
            tok_start: a.start,
            tok_end: a.end,
            currency: a.currency,
            unit,
        });
        Some(a.end)
    }

    /// A currency stated just before the number at `i`: "C$1,500", "USD 19.99".
    fn currency_before(&self, a: &mut Amount, i: usize) {
        // A dollar sign with a country prefix: "C$1,500", "A$20".
        let joined = i > 0 && self.tokens[i - 1].end == self.tokens[i].start;
        if a.currency == Some("USD") && joined {
            let prefixed = country_dollar(self.norm(i - 1));
            if prefixed.is_some() {
                a.currency = prefixed;
                a.start = i - 1;
            }
        }
        // A code before the number: "USD 19.99", "EUR 80".
        if a.currency.is_none() && i > 0 {
            if let Some(c) = currency_of(self.norm(i - 1)).filter(|_| self.norm(i - 1).len() == 3) {
                a.currency = Some(c);
                a.kind = QtyKind::Money;
                a.start = i - 1;
            }
        }
    }

    /// Magnitude and unit words after an amount: "5 million", "20 dollars", "15 per cent".
    fn words_after(&self, a: &mut Amount) {
        while let Some(m) = magnitude(self.norm(a.end)) {
            a.value *= m;
            a.end += 1;
        }
        if let Some(k) = unit_word(self.norm(a.end)) {
            if a.kind == QtyKind::Count {
                a.kind = k;
            }
            if a.currency.is_none() {
                a.currency = currency_of(self.norm(a.end));
            }
            if self.norm(a.end) == "cents" || self.norm(a.end) == "cent" {
                a.value /= 100.0;
            }
            a.end += 1;
            if self.norm(a.end - 1) == "per" && self.norm(a.end) == "cent" {
                a.end += 1;
            }
        } else if self.norm(a.end) == "per" && self.norm(a.end + 1) == "cent" {
            a.kind = QtyKind::Percent;
            a.end += 2;
        }
    }

    /// "twice", "thrice" at `i`: a soft count, like a lone number word.
    fn frequency_count(&mut self, i: usize) -> Option<usize> {
        let value = frequency_word(self.norm(i))?;
        self.out.push(Quantity {
            kind: QtyKind::Count,
            value,
            date: DateParts::default(),
            approx: self.approx_at(i),
            soft: true,
            tok_start: i,
            tok_end: i + 1,
            currency: None,
            unit: None,
        });
        Some(i + 1)
    }

    /// Spelled-out numbers at `i`: "three", "twenty five", "one thousand", with a unit word.
    fn spelled_number(&mut self, i: usize) -> Option<usize> {
        let first = small_word(self.norm(i))?;
        let (value, mut end) = self.spelled_value(i, first);
        // "one" alone is too common ("one of the ...") to be a specific.
        if end == i + 1 && first <= 1.0 {
            return Some(end);
        }
        let mut kind = QtyKind::Count;
        let mut currency = None;
        let mut unit = None;
        if let Some(k) = unit_word(self.norm(end)) {
            kind = k;
            currency = currency_of(self.norm(end));
            end += 1;
        } else if let Some(u) = measure_unit(self.norm(end)) {
            unit = Some(u);
            end += 1;
        }
        let soft = end - i == 1 || (end - i == 2 && kind != QtyKind::Count);
        self.out.push(Quantity {
            kind,
            value,
            date: DateParts::default(),
            approx: self.approx_at(i),
            soft,
            tok_start: i,
            tok_end: end,
            currency,
            unit,
        });
        Some(end)
    }

    /// The value of the number words from `i` (the first worth `first`), and the token after them.
    fn spelled_value(&self, i: usize, first: f64) -> (f64, usize) {
        let mut v = first;
        let mut end = i + 1;
        let mut total = 0.0;
        loop {
            let w = self.norm(end);
            if let Some(s) = small_word(w) {
                if v % 10.0 == 0.0 && v >= 20.0 && s < 10.0 {
                    v += s;
                    end += 1;
                    continue;
                }
                break;
            }
            if let Some(m) = magnitude(w) {
                if m == 100.0 {
                    v *= m;
                } else {
                    total += v * m;
                    v = 0.0;
                }
                end += 1;
                continue;
            }
            break;
        }
        (total + v, end)
    }
}

/// The currency a country prefix glued to a dollar sign names ("C" in "C$1,500").
fn country_dollar(norm: &str) -> Option<&'static str> {
    match norm {
        "c" | "ca" | "can" => Some("CAD"),
        "a" | "au" => Some("AUD"),
        "nz" => Some("NZD"),
        "hk" => Some("HKD"),
        "s" | "sg" => Some("SGD"),
        "us" => Some("USD"),
        _ => None,
    }
}

/// A date quantity over tokens `tok_start..tok_end`.
fn date_qty(date: DateParts, tok_start: usize, tok_end: usize) -> Quantity {
    Quantity {
        kind: QtyKind::Date,
        value: f64::from(date.year.unwrap_or(0)),
        date,
        approx: false,
        soft: false,
        tok_start,
        tok_end,
        currency: None,
        unit: None,
    }
}
