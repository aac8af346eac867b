//! The tokenizer: text to [`Token`]s that keep their original byte spans,
//! numbers with their separators and words with their apostrophes, each
//! interned in the request's vocabulary. Also tokens in a form that outlives
//! the request ([`LexTokens`]): a token's ids are the request's, so what is
//! kept for a later request holds the thread lexicon's ids instead, and is
//! turned back into the tokens that tokenising the text again would give.

use super::{char_at, Stems, Token, TokenKind, Vocab, Word};

/// Splits `text` into tokens. Numbers keep their inner `,`/`.`/`:`/`/`/`-`
/// separators ("1,000", "3.5", "2024-03-03") and a leading currency sign or a
/// trailing `%`; words keep inner apostrophes. A contraction ending in "n't"
/// yields its base plus a virtual "not" token with the same span, so "don't"
/// and "do not" compare equal.
///
/// Works on byte offsets directly (no per-call char table): positions only
/// ever advance by whole characters, so every offset is a char boundary.
pub fn tokenize(text: &str, stemmer: &Stems) -> Vec<Token> {
    // About one token per six bytes of prose: one allocation, not a doubling
    // series, for typical text.
    let mut out = Vec::with_capacity(text.len() / 6 + 4);
    let mut i = 0;
    // One buffer for normalised forms that differ from the surface;
    // interning copies it out only for words the request has not seen yet.
    let mut buf = String::new();
    let bytes = text.as_bytes();
    // The vocabulary is borrowed once for the whole text, not per token.
    let mut sink = Sink {
        vocab: stemmer.inner.borrow_mut(),
        stemmer: &stemmer.stemmer,
    };
    while let Some(&b) = bytes.get(i) {
        // ASCII spaces and punctuation (other than `$`) start no token.
        if b.is_ascii() && ASCII_CLASS[usize::from(b)] & ALNUM == 0 && b != b'$' {
            i += 1;
            continue;
        }
        let Some(c) = char_at(text, i) else {
            break;
        };
        let start = i;
        let after_c = i + c.len_utf8();
        let next_is_digit = || char_at(text, after_c).is_some_and(|d| d.is_ascii_digit());
        if c.is_ascii_digit() || (is_currency(c) && next_is_digit()) {
            let (end, plain) = number_end(text, after_c, c);
            let norm = fold(text.get(start..end).unwrap_or(""), plain, &mut buf);
            out.push(number_token(start, end, norm, &mut sink));
            i = end;
        } else if c.is_alphanumeric() {
            let (end, plain) = word_end(text, after_c, c);
            let norm = fold(text.get(start..end).unwrap_or(""), plain, &mut buf);
            push_word(&mut out, (start, end), norm, c.is_uppercase(), &mut sink);
            i = end;
        } else {
            i = after_c;
        }
    }
    out
}

/// [`LexToken::flags`] bit: the token is a number.
const NUMBER: u8 = 1;
/// [`LexToken::flags`] bit: the token is capitalised.
const CAPITALIZED: u8 = 2;

/// A token as the thread's lexicon knows it, not as one request does.
#[derive(Debug, Clone, Copy)]
struct LexToken {
    start: u32,
    end: u32,
    /// The lexicon id of its normalised form.
    form: u32,
    /// [`NUMBER`] and [`CAPITALIZED`].
    flags: u8,
}

/// One text's tokens in terms of one lexicon: what may be kept across
/// requests. [`Stems::rebind`] gives back the tokens, with the ids a request
/// would get from [`tokenize`], for a request that uses the same lexicon.
#[derive(Debug, Clone)]
pub(crate) struct LexTokens {
    /// The lexicon's generation.
    generation: u64,
    /// One more than the largest form id.
    forms: usize,
    tokens: Box<[LexToken]>,
}

impl LexTokens {
    /// The heap bytes they hold.
    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.tokens)
    }

    /// The generation of the lexicon whose ids they hold.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }
}

impl Stems {
    /// The generation of the lexicon this request's vocabulary uses: two
    /// [`LexTokens`] of the same generation name forms by the same ids.
    pub(crate) fn generation(&self) -> u64 {
        self.inner.borrow().lx.generation()
    }

    /// `tokens` (from [`tokenize`] with these `Stems`) in terms of the
    /// thread's lexicon. `None` when an offset does not fit in 32 bits.
    pub(crate) fn unbind(&self, tokens: &[Token]) -> Option<LexTokens> {
        let vocab = self.inner.borrow();
        let mut forms = 0;
        let out = tokens
            .iter()
            .map(|t| {
                let &(form, _, _) = vocab.forms.get(t.norm_id as usize)?;
                forms = forms.max(form as usize + 1);
                let mut flags = 0;
                if t.kind == TokenKind::Number {
                    flags |= NUMBER;
                }
                if t.capitalized {
                    flags |= CAPITALIZED;
                }
                Some(LexToken {
                    start: u32::try_from(t.start).ok()?,
                    end: u32::try_from(t.end).ok()?,
                    form,
                    flags,
                })
            })
            .collect::<Option<Box<[LexToken]>>>()?;
        Some(LexTokens {
            generation: vocab.lx.generation(),
            forms,
            tokens: out,
        })
    }

    /// The tokens `kept` stands for, interned in this request's vocabulary
    /// in order, so that their ids are those [`tokenize`] would give here.
    /// `None` (having interned nothing) when `kept` is of another lexicon.
    pub(crate) fn rebind(&self, kept: &LexTokens) -> Option<Vec<Token>> {
        let mut vocab = self.inner.borrow_mut();
        if kept.generation != vocab.lx.generation() || kept.forms > vocab.lx.form_count() {
            return None;
        }
        let out = kept
            .tokens
            .iter()
            .map(|t| {
                let number = t.flags & NUMBER != 0;
                let w = vocab.intern_id(t.form, number, &self.stemmer);
                Token {
                    start: t.start as usize,
                    end: t.end as usize,
                    norm_id: w.norm_id,
                    stem_id: w.stem_id,
                    kind: if number {
                        TokenKind::Number
                    } else {
                        TokenKind::Word
                    },
                    capitalized: t.flags & CAPITALIZED != 0,
                    lex: w.lex,
                }
            })
            .collect();
        Some(out)
    }
}

/// Where tokens are interned: the request's vocabulary, borrowed for one
/// call of [`tokenize`], and the stemmer.
struct Sink<'a> {
    vocab: std::cell::RefMut<'a, Vocab>,
    stemmer: &'a rust_stemmers::Stemmer,
}

impl Sink<'_> {
    /// Interns `norm`, read as a number or as a word.
    #[inline]
    fn intern(&mut self, norm: &str, number: bool) -> Word {
        self.vocab.intern(norm, number, self.stemmer)
    }
}

/// The end of the number whose first character `c` ends at `j`, and whether it is all [`is_plain`].
#[inline]
fn number_end(text: &str, mut j: usize, c: char) -> (usize, bool) {
    // The character before `j`.
    let mut prev = c;
    // Every character so far is `is_plain` (separators and `%` are).
    let mut plain = is_plain(c);
    while let Some(cj) = char_at(text, j) {
        if cj.is_alphanumeric() {
            j += cj.len_utf8();
            prev = cj;
            plain &= is_plain(cj);
        } else if matches!(cj, ',' | '.' | ':' | '/' | '-')
            && prev.is_ascii_digit()
            && char_at(text, j + 1).is_some_and(|d| d.is_ascii_digit())
        {
            // The separator and the digit after it: one byte each.
            j += 2;
            prev = '0';
        } else {
            break;
        }
    }
    if char_at(text, j) == Some('%') {
        j += 1;
    }
    (j, plain)
}

/// The end of the word whose first character `c` ends at `j`, and whether it is all [`is_plain`].
#[inline]
fn word_end(text: &str, mut j: usize, c: char) -> (usize, bool) {
    let bytes = text.as_bytes();
    let mut plain = is_plain(c);
    loop {
        // Runs of ASCII letters and digits, a byte at a time (for
        // ASCII, `is_alphanumeric` is `is_ascii_alphanumeric` and
        // `is_plain` is "not uppercase").
        while let Some(&class) = bytes.get(j).map(|&b| &ASCII_CLASS[usize::from(b)]) {
            if class & ALNUM == 0 {
                break;
            }
            plain &= class & UPPER == 0;
            j += 1;
        }
        let Some(cj) = char_at(text, j) else {
            break;
        };
        if cj.is_alphanumeric() || matches!(cj, '\u{0300}'..='\u{036F}') {
            j += cj.len_utf8();
            plain &= is_plain(cj);
        } else if is_apostrophe(cj) {
            match char_at(text, j + cj.len_utf8()) {
                Some(a) if a.is_alphabetic() => {
                    j += cj.len_utf8() + a.len_utf8();
                    plain &= is_plain(cj) && is_plain(a);
                }
                _ => break,
            }
        } else {
            break;
        }
    }
    (j, plain)
}

/// Pushes the tokens of the word `norm` at `start..end`, splitting "non", "n't" and "'s".
#[inline]
fn push_word(
    out: &mut Vec<Token>,
    (start, end): (usize, usize),
    norm: &str,
    capitalized: bool,
    stemmer: &mut Sink<'_>,
) {
    let non_rest = norm
        .strip_prefix("non")
        .filter(|r| r.chars().count() >= 5 && !matches!(*r, "etheless" | "sense"));
    if let Some(rest) = non_rest {
        // "nonessential" reads as "non essential", like "non-essential".
        out.push(word_token(start, end, "non", false, stemmer));
        out.push(word_token(start, end, rest, false, stemmer));
    } else if let Some(base) = norm.strip_suffix("n't") {
        let base = match base {
            "ca" => "can",
            "wo" => "will",
            "sha" => "shall",
            b => b,
        };
        if !base.is_empty() {
            out.push(word_token(start, end, base, capitalized, stemmer));
        }
        out.push(word_token(start, end, "not", false, stemmer));
    } else {
        // Possessive "'s" adds nothing to matching.
        let word = match norm.strip_suffix("'s") {
            Some(b) if !b.is_empty() => b,
            _ => norm,
        };
        out.push(word_token(start, end, word, capitalized, stemmer));
    }
}

/// The number token with normalised form `norm` spanning `start..end`.
fn number_token(start: usize, end: usize, norm: &str, st: &mut Sink<'_>) -> Token {
    let w = st.intern(norm, true);
    Token {
        start,
        end,
        norm_id: w.norm_id,
        stem_id: w.stem_id,
        kind: TokenKind::Number,
        capitalized: false,
        lex: w.lex,
    }
}

/// The word token with normalised form `word` spanning `start..end`.
fn word_token(start: usize, end: usize, word: &str, capitalized: bool, st: &mut Sink<'_>) -> Token {
    let w = st.intern(word, false);
    Token {
        start,
        end,
        norm_id: w.norm_id,
        stem_id: w.stem_id,
        kind: TokenKind::Word,
        capitalized,
        lex: w.lex,
    }
}

/// [`ASCII_CLASS`] bit: an ASCII letter or digit.
const ALNUM: u8 = 1;
/// [`ASCII_CLASS`] bit: an ASCII uppercase letter.
const UPPER: u8 = 2;

/// Per byte: [`ALNUM`] and [`UPPER`] for ASCII letters and digits, 0 for
/// every other byte (including all non-ASCII bytes), so the tokenizer's
/// ASCII loop does one load and test per byte.
static ASCII_CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() {
            t[b] |= ALNUM;
        }
        if c.is_ascii_uppercase() {
            t[b] |= UPPER;
        }
        b += 1;
    }
    t
};

/// ASCII and not uppercase: folding leaves it as it is.
fn is_plain(c: char) -> bool {
    c.is_ascii() && !c.is_ascii_uppercase()
}

/// Writes the normalised form of `raw` (one token's surface) into `buf` and
/// returns it, or returns `raw` itself when the tokenizer saw only
/// [`is_plain`] characters (the common case, which then copies nothing).
fn fold<'s>(raw: &'s str, plain: bool, buf: &'s mut String) -> &'s str {
    if plain {
        return raw;
    }
    buf.clear();
    for ch in raw.chars() {
        fold_char(ch, buf);
    }
    buf
}

fn is_currency(c: char) -> bool {
    matches!(c, '$' | '€' | '£' | '¥' | '₹')
}

fn fold_char(c: char, out: &mut String) {
    if c.is_ascii() {
        out.push(c.to_ascii_lowercase());
        return;
    }
    match c {
        '\u{2018}' | '\u{2019}' | '\u{02BC}' | '`' => out.push('\''),
        '\u{FB01}' => out.push_str("fi"),
        '\u{FB02}' => out.push_str("fl"),
        _ => out.extend(c.to_lowercase()),
    }
}

fn is_apostrophe(c: char) -> bool {
    matches!(c, '\'' | '\u{2019}' | '\u{02BC}')
}
