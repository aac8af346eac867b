//! Text handling for the engine: tokens and sentences that keep byte offsets
//! into the *original* text.
//!
//! Matching runs on a normalised form (lowercase, typographic quotes folded,
//! Snowball stems), but quotes and offsets must always come from the text the
//! caller sent, so every token and sentence here carries its original byte
//! span and normalisation never rewrites the source. The sentence splitter is
//! rule based (abbreviations, decimals, initials, URLs, list items, markdown)
//! because UAX #29 alone splits after "Mr." and "e.g.".

use std::cell::RefCell;
use std::sync::OnceLock;

use ahash::AHashSet as WordSet;

use rust_stemmers::{Algorithm, Stemmer};

/// What a token is, as far as matching cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// Letters (any script), possibly with inner apostrophes.
    Word,
    /// Starts with a digit or a currency sign followed by a digit.
    Number,
}

/// One token: its original byte span and the ids of its normalised forms.
/// Small and `Copy`: the strings live once in the request's [`Vocab`].
#[derive(Debug, Clone, Copy)]
pub struct Token {
    /// Byte offset of the first byte in the original text.
    pub start: usize,
    /// Byte offset one past the last byte in the original text.
    pub end: usize,
    /// Request-local id of the lowercased, quote-folded surface form
    /// ([`Vocab::norm`]): equal ids, equal strings.
    pub norm_id: u32,
    /// Request-local id of the Snowball stem of that form (the form itself
    /// for numbers): equal ids, equal stems.
    pub stem_id: u32,
    pub kind: TokenKind,
    /// First character is uppercase in the original text.
    pub capitalized: bool,
    /// Facts about the normalised form, computed once per interned word
    /// instead of hashing every token.
    pub lex: Lex,
}

/// Per-word facts the checks ask about every token, looked up once when the
/// word is interned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lex {
    /// `is_stopword(norm)`.
    pub stopword: bool,
    /// `is_negator(norm)`.
    pub negator: bool,
    /// `month_number(norm)`.
    pub month: Option<u8>,
    /// The form is "only" ("not only" is not a negation).
    pub only: bool,
    /// A verb of refusal or failure ("failed", "denied", "refused"): a
    /// negator only in front of "to" ("failed to pay" denies "pay"); on its
    /// own it is what the sentence asserts ("the login failed") and is
    /// matched like any content word.
    pub content_negator: bool,
    /// A modal, future or pending marker ("may", "will", "expected",
    /// "scheduled"): the event it governs has not happened.
    pub hedge: bool,
    /// A spelled-out number (`numbers::small_word`) or a frequency adverb
    /// (`numbers::frequency_word`).
    pub number_word: bool,
}

impl Lex {
    fn of(norm: &str) -> Self {
        Lex {
            stopword: is_stopword(norm),
            negator: is_negator(norm),
            month: month_number(norm),
            only: norm == "only",
            content_negator: matches!(norm, "fail" | "fails" | "failed" | "denied" | "refused"),
            hedge: is_hedge(norm),
            number_word: super::numbers::small_word(norm).is_some()
                || super::numbers::frequency_word(norm).is_some(),
        }
    }
}

/// The Snowball English stemmer and the request's vocabulary: sources
/// repeat their words, so a token carries only the ids of its normalised
/// form and stem, and tokenising a repeated word allocates nothing. Stems
/// and word facts come from the thread's [`lexicon`], so a word that an
/// earlier request on the thread has seen is not stemmed again.
pub struct Stems {
    stemmer: Stemmer,
    /// RefCell because tokenising happens behind shared references to the
    /// request index; the index never crosses threads.
    inner: RefCell<Vocab>,
}

/// The request's vocabulary: every normalised form seen, with its stem, and
/// dense ids for forms and stems (in the order the request first sees them)
/// so the index compares integers.
pub struct Vocab {
    /// The thread's lexicon, held for the request and returned on drop.
    lx: lexicon::Lexicon,
    /// Local form id → (lexicon form id, local stem id, facts). Numbers are
    /// their own stem.
    forms: Vec<(u32, u32, Lex)>,
    /// Local stem id → lexicon stem id.
    stems: Vec<u32>,
}

impl Drop for Vocab {
    fn drop(&mut self) {
        lexicon::give_back(std::mem::take(&mut self.lx));
    }
}

/// One interned word: the request-local ids of its form and stem.
#[derive(Debug, Clone, Copy)]
pub struct Word {
    pub norm_id: u32,
    pub stem_id: u32,
    pub lex: Lex,
}

impl Vocab {
    /// The normalised form with id `id` ("" for an id this vocabulary never
    /// gave out).
    pub fn norm(&self, id: u32) -> &str {
        self.forms
            .get(id as usize)
            .map_or("", |&(form, _, _)| self.lx.form(form))
    }

    /// The stem with id `id` ("" for an id this vocabulary never gave out).
    pub fn stem(&self, id: u32) -> &str {
        self.stems
            .get(id as usize)
            .map_or("", |&stem| self.lx.stem(stem))
    }

    /// The stem id of the form with id `id`.
    pub fn stem_of(&self, id: u32) -> Option<u32> {
        self.forms.get(id as usize).map(|&(_, stem, _)| stem)
    }

    /// The id of a stem, if some interned word has it.
    pub fn stem_id(&self, stem: &str) -> Option<u32> {
        self.lx.find_stem(stem).and_then(|s| self.lx.stem_local(s))
    }

    /// Interns `norm`, read as a number (its own stem) or as a word.
    #[inline]
    fn intern(&mut self, norm: &str, number: bool, stemmer: &Stemmer) -> Word {
        let hash = self.lx.hash(norm);
        let seen = self.lx.seen(norm, hash);
        self.local(seen, number, stemmer)
    }

    /// Interns the form with lexicon id `id` (one of this vocabulary's
    /// lexicon's ids), read as a number or as a word: what [`Vocab::intern`]
    /// does for that form's text, without finding the text.
    #[inline]
    fn intern_id(&mut self, id: u32, number: bool, stemmer: &Stemmer) -> Word {
        let seen = self.lx.seen_id(id);
        self.local(seen, number, stemmer)
    }

    /// The request-local ids of a form the lexicon has found: those the
    /// request gave it, or new ones in first-seen order. Inlined into both
    /// callers: it is most of tokenising's per-word work.
    #[inline(always)]
    fn local(&mut self, seen: lexicon::Seen, number: bool, stemmer: &Stemmer) -> Word {
        let id = match seen {
            lexicon::Seen::Local(local) => {
                let (_, stem_id, lex) = self.forms.get(local as usize).copied().unwrap_or_default();
                return Word {
                    norm_id: local,
                    stem_id,
                    lex,
                };
            }
            lexicon::Seen::New(id) => id,
        };
        let norm_id = u32::try_from(self.forms.len()).unwrap_or(u32::MAX);
        let (stem, lex) = self.lx.admit(id, norm_id, number, stemmer);
        let stem_id = match self.lx.stem_local(stem) {
            Some(local) => local,
            None => {
                let local = u32::try_from(self.stems.len()).unwrap_or(u32::MAX);
                self.stems.push(stem);
                self.lx.set_stem_local(stem, local);
                local
            }
        };
        self.forms.push((id, stem_id, lex));
        Word {
            norm_id,
            stem_id,
            lex,
        }
    }
}

impl Stems {
    /// The ids of a word's interned normalised form and stem.
    pub fn word(&self, word: &str) -> Word {
        self.inner.borrow_mut().intern(word, false, &self.stemmer)
    }

    /// The request's vocabulary, to read back forms by id. Do not hold it
    /// across a call to [`tokenize`] with the same `Stems`.
    pub fn vocab(&self) -> std::cell::Ref<'_, Vocab> {
        self.inner.borrow()
    }
}

/// A fresh stemmer (English) with an empty vocabulary.
pub fn stemmer() -> Stems {
    Stems {
        stemmer: Stemmer::create(Algorithm::English),
        inner: RefCell::new(Vocab {
            lx: lexicon::take(),
            forms: Vec::new(),
            stems: Vec::new(),
        }),
    }
}

/// The character starting at byte `i` of `text`, if `i` is in bounds (and a
/// char boundary, which every caller guarantees). ASCII takes one compare.
#[inline]
fn char_at(text: &str, i: usize) -> Option<char> {
    match text.as_bytes().get(i) {
        Some(&b) if b.is_ascii() => Some(char::from(b)),
        Some(_) => text.get(i..).and_then(|rest| rest.chars().next()),
        None => None,
    }
}

/// Function words that carry no content. Negators, quantifiers, modals and
/// comparatives are deliberately absent: dropping them would erase exactly the
/// words that flip a claim's truth.
const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "also",
    "am",
    "an",
    "and",
    "are",
    "as",
    "at",
    "be",
    "been",
    "being",
    "but",
    "by",
    "did",
    "do",
    "does",
    "doing",
    "for",
    "from",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "me",
    "my",
    "myself",
    "of",
    "on",
    "or",
    "our",
    "ours",
    "she",
    "so",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "to",
    "too",
    "us",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "with",
    "you",
    "your",
    "yours",
    "yourself",
    "just",
    "such",
    "other",
    "own",
    "same",
    "s",
    "t",
    "can",
    "will",
    "would",
    "shall",
    "currently",
    "however",
    "its",
    "via",
    "etc",
    "one",
    "well",
    "both",
    "either",
    "because",
    "through",
    "during",
    "upon",
    "within",
    "including",
    "include",
    "includes",
    "included",
    "per",
];

/// Words that negate what follows. Never stopwords; handled by the polarity
/// check rather than counted as coverage terms.
pub const NEGATORS: &[&str] = &[
    "not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "without", "cannot",
    "non", "nowhere", "unable", "fails", "failed", "fail", "lacks", "lacked", "lack", "denied",
    "refused", "avoid", "avoids", "avoided", "avoiding",
];

/// Generic words for a party to a transaction or a conversation. Records
/// such as invoices, delivery notes and ticket logs state what happened to
/// an account or an order without calling its owner "the customer", so a
/// claim's "the customer was charged $100" names a party that such evidence
/// leaves implicit. The verifier weighs such a word less when no source
/// names any party at all (see `verify::analyse`); a source that names one
/// ("the merchant") keeps the claim's word at full weight.
pub const PARTIES: &[&str] = &[
    "customer",
    "customers",
    "client",
    "clients",
    "user",
    "users",
    "buyer",
    "buyers",
    "purchaser",
    "purchasers",
    "shopper",
    "shoppers",
    "consumer",
    "consumers",
    "cardholder",
    "cardholders",
    "payer",
    "payers",
    "subscriber",
    "subscribers",
    "merchant",
    "merchants",
    "seller",
    "sellers",
    "vendor",
    "vendors",
    "supplier",
    "suppliers",
    "retailer",
    "retailers",
    "recipient",
    "recipients",
    "requester",
    "caller",
];

/// A hash set over a word list, built once: the lists are scanned for every
/// token, and a linear scan of ~130 words was a visible share of engine time.
fn word_set(
    cell: &'static OnceLock<WordSet<&'static str>>,
    words: &'static [&'static str],
) -> &'static WordSet<&'static str> {
    cell.get_or_init(|| words.iter().copied().collect())
}

pub fn is_stopword(norm: &str) -> bool {
    static SET: OnceLock<WordSet<&'static str>> = OnceLock::new();
    word_set(&SET, STOPWORDS).contains(norm)
}

pub fn is_party(norm: &str) -> bool {
    static SET: OnceLock<WordSet<&'static str>> = OnceLock::new();
    word_set(&SET, PARTIES).contains(norm)
}

/// The Snowball stems of [`PARTIES`], deduplicated, computed once: the
/// verifier asks whether any source holds one of them only for a claim
/// that has a party word no source contains.
pub fn party_stems() -> &'static [String] {
    static STEMS: OnceLock<Vec<String>> = OnceLock::new();
    STEMS.get_or_init(|| {
        let stemmer = Stemmer::create(Algorithm::English);
        let mut out: Vec<String> = PARTIES
            .iter()
            .map(|w| stemmer.stem(w).into_owned())
            .collect();
        out.sort();
        out.dedup();
        out
    })
}

pub fn is_negator(norm: &str) -> bool {
    static SET: OnceLock<WordSet<&'static str>> = OnceLock::new();
    word_set(&SET, NEGATORS).contains(norm)
}

/// Words that put the event they govern in the future, in doubt or on
/// hold: evidence that a refund "will be issued" does not support a claim
/// that it was issued.
pub fn is_hedge(norm: &str) -> bool {
    matches!(
        norm,
        "may"
            | "might"
            | "could"
            | "will"
            | "would"
            | "should"
            | "shall"
            | "can"
            | "expected"
            | "expect"
            | "expects"
            | "scheduled"
            | "pending"
            | "planned"
            | "plans"
            | "requested"
            | "requests"
            | "once"
            | "if"
            | "unless"
            | "awaiting"
            | "likely"
            | "possibly"
            | "probably"
            | "intends"
            | "intended"
            | "going"
            | "estimated"
            | "projected"
            | "anticipated"
            | "proposed"
            | "tentative"
            | "tentatively"
    )
}

/// 1-based month number for a full or abbreviated month name. A `match`
/// (length, then bytes) rather than a list scan: it runs for every token.
pub fn month_number(norm: &str) -> Option<u8> {
    // Cheap rejection first: most words start with another letter.
    if !matches!(
        norm.as_bytes().first(),
        Some(b'a' | b'd' | b'f' | b'j' | b'm' | b'n' | b'o' | b's')
    ) {
        return None;
    }
    Some(match norm.trim_end_matches('.') {
        "january" | "jan" => 1,
        "february" | "feb" => 2,
        "march" | "mar" => 3,
        "april" | "apr" => 4,
        "may" => 5,
        "june" | "jun" => 6,
        "july" | "jul" => 7,
        "august" | "aug" => 8,
        "september" | "sep" | "sept" => 9,
        "october" | "oct" => 10,
        "november" | "nov" => 11,
        "december" | "dec" => 12,
        _ => return None,
    })
}

/// Counts code points in `text[..byte]`; `byte` must be a char boundary
/// (callers only pass token or sentence offsets, which always are).
pub fn char_offset(text: &str, byte: usize) -> usize {
    text.get(..byte).map_or(0, |s| s.chars().count())
}

mod lexicon;
mod sentences;
#[cfg(test)]
mod tests;
mod tokens;
pub use sentences::split_sentences;
pub use tokens::tokenize;
pub(crate) use tokens::LexTokens;
