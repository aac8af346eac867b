//! Parses of recently indexed source texts, kept per thread, so that a
//! source sent again is not tokenised, scanned for quantities and split into
//! sentences again.
//!
//! Callers send the same evidence over and over (a policy page, the invoice
//! a conversation is about), and parsing the sources is most of a short
//! `verify` call. A parse is a function of the text alone except for the
//! ids its tokens carry, which are the request's: an entry keeps its tokens
//! as the thread's lexicon knows them (`text::LexTokens`), and a hit hands
//! the request the ids a fresh parse would have given it, so no output
//! depends on what the cache holds or on the requests before. An entry is
//! found by a hash of the text computed here, then compared with the text
//! byte for byte: neither a caller's checksum nor a hash collision can
//! return another text's parse. Quantities are kept with numeric dates
//! unresolved; each request reads them in its own date order.
//!
//! A text is kept the second time it is parsed (within the thread's last
//! [`ONCE`] misses), not the first: keeping a parse (copying it out, and
//! evicting) adds about a tenth to a call whose sources all miss, which a
//! text sent only once would pay for nothing. Bounded per thread: at most
//! [`ENTRIES`] entries and [`BYTES`] bytes of text and parse, and no text
//! over [`MAX_TEXT`] bytes is kept. A new entry first evicts those of a
//! lexicon other than its own (their ids mean nothing to the lexicon the
//! thread now uses), then the least recently used.

use std::cell::RefCell;

use crate::numbers::{self, Quantity};
use crate::text::{self, LexTokens, Stems, Token};

/// Entries a thread keeps.
pub(super) const ENTRIES: usize = 32;
/// Bytes of text and parse a thread keeps (a parse is about six times its
/// text, so some 340 KiB of text).
pub(super) const BYTES: usize = 2 << 20;
/// Longest text kept, in bytes.
pub(super) const MAX_TEXT: usize = 64 << 10;
/// Hashes of texts parsed and not kept that a thread remembers: a text
/// parsed again while its hash is among them is kept.
pub(super) const ONCE: usize = 2 * ENTRIES;

/// One sentence of a source: its byte span, and the ranges of the source's
/// tokens and quantities that lie in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sentence {
    pub start: usize,
    pub end: usize,
    pub tok_start: usize,
    pub tok_end: usize,
    pub qty_start: usize,
    pub qty_end: usize,
}

/// A source text parsed for one request: tokens with the request's ids,
/// quantities (numeric dates not yet resolved) and sentences.
#[derive(Debug)]
pub(super) struct Parsed {
    pub tokens: Vec<Token>,
    pub qty: Vec<Quantity>,
    pub sentences: Vec<Sentence>,
}

/// `text` parsed for the request whose vocabulary is in `stems`: from the
/// thread's cache when it holds this text, else fresh (and kept if it
/// missed recently too).
pub(super) fn parse(text: &str, stems: &Stems) -> Parsed {
    if text.len() > MAX_TEXT || disabled() {
        return fresh(text, stems);
    }
    let found = with_cache(|c| {
        let hash = c.hash(text);
        match c.hit(text, hash, stems) {
            Some(parsed) => Ok(parsed),
            None => Err((hash, c.seen_before(hash))),
        }
    });
    let (hash, keep) = match found {
        Some(Ok(parsed)) => {
            #[cfg(test)]
            hooks::HITS.with(|n| n.set(n.get() + 1));
            return parsed;
        }
        Some(Err(miss)) => miss,
        // The cache is in use further up this thread's stack, or the
        // thread is ending: parse without it.
        None => return fresh(text, stems),
    };
    let parsed = fresh(text, stems);
    if !keep {
        return parsed;
    }
    if let Some(tokens) = stems.unbind(&parsed.tokens) {
        let entry = Entry {
            hash,
            used: 0,
            text: text.into(),
            tokens,
            qty: parsed.qty.as_slice().into(),
            sentences: parsed.sentences.as_slice().into(),
        };
        with_cache(|c| c.insert(entry));
    }
    parsed
}

/// `text` tokenised, scanned and split.
fn fresh(text: &str, stems: &Stems) -> Parsed {
    let tokens = text::tokenize(text, stems);
    let qty = numbers::extract(&tokens, &stems.vocab());
    let sentences = sentences(text, &tokens, &qty);
    Parsed {
        tokens,
        qty,
        sentences,
    }
}

/// The sentences of `text`, each with the tokens that lie wholly inside it
/// and the quantities that lie wholly inside those.
fn sentences(text: &str, tokens: &[Token], qty: &[Quantity]) -> Vec<Sentence> {
    let spans = text::split_sentences(text, true);
    let mut out = Vec::with_capacity(spans.len());
    let mut t = 0;
    let mut q = 0;
    for (start, end) in spans {
        while t < tokens.len() && tokens[t].start < start {
            t += 1;
        }
        let tok_start = t;
        while t < tokens.len() && tokens[t].end <= end {
            t += 1;
        }
        let tok_end = t;
        while q < qty.len() && qty[q].tok_start < tok_start {
            q += 1;
        }
        let qty_start = q;
        while q < qty.len() && qty[q].tok_end <= tok_end {
            q += 1;
        }
        out.push(Sentence {
            start,
            end,
            tok_start,
            tok_end,
            qty_start,
            qty_end: q,
        });
    }
    out
}

/// One kept parse.
struct Entry {
    /// [`Cache::hash`] of `text`.
    hash: u64,
    /// [`Cache::clock`] when last used.
    used: u64,
    text: Box<str>,
    tokens: LexTokens,
    /// Numeric dates unresolved.
    qty: Box<[Quantity]>,
    sentences: Box<[Sentence]>,
}

impl Entry {
    /// What the entry holds, in bytes.
    fn bytes(&self) -> usize {
        std::mem::size_of::<Entry>()
            + self.text.len()
            + self.tokens.heap_bytes()
            + std::mem::size_of_val(&*self.qty)
            + std::mem::size_of_val(&*self.sentences)
    }
}

/// A thread's kept parses.
#[derive(Default)]
struct Cache {
    /// Keyed at random per thread, as the lexicon's hasher is.
    hasher: ahash::RandomState,
    entries: Vec<Entry>,
    /// The sum of the entries' [`Entry::bytes`].
    bytes: usize,
    /// Counts lookups: the least recently used entry has the smallest
    /// `used`.
    clock: u64,
    /// Hashes of the last [`ONCE`] texts parsed and not kept, a ring.
    once: Vec<u64>,
    /// Where the next hash goes in `once` when it is full.
    once_next: usize,
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
}

/// `f` on the thread's cache; `None` when it is borrowed already or the
/// thread is ending.
fn with_cache<R>(f: impl FnOnce(&mut Cache) -> R) -> Option<R> {
    CACHE
        .try_with(|c| c.try_borrow_mut().ok().map(|mut c| f(&mut c)))
        .ok()
        .flatten()
}

impl Cache {
    fn hash(&self, text: &str) -> u64 {
        #[cfg(test)]
        if let Some(h) = hooks::FORCED_HASH.with(std::cell::Cell::get) {
            return h;
        }
        self.hasher.hash_one(text)
    }

    /// The kept parse of `text` (whose hash is `hash`), rebound to the
    /// request of `stems`, if one of its lexicon is kept.
    fn hit(&mut self, text: &str, hash: u64, stems: &Stems) -> Option<Parsed> {
        self.clock += 1;
        let generation = stems.generation();
        let entry = self
            .entries
            .iter_mut()
            .find(|e| e.hash == hash && e.tokens.generation() == generation && *e.text == *text)?;
        let tokens = stems.rebind(&entry.tokens)?;
        entry.used = self.clock;
        Some(Parsed {
            tokens,
            qty: entry.qty.to_vec(),
            sentences: entry.sentences.to_vec(),
        })
    }

    /// Whether a text of hash `hash` missed recently; if not, remembers
    /// that it has now. (A hash shared with another text only lets the text
    /// be kept sooner.)
    fn seen_before(&mut self, hash: u64) -> bool {
        if self.once.contains(&hash) {
            return true;
        }
        if self.once.len() < ONCE {
            self.once.push(hash);
        } else if let Some(slot) = self.once.get_mut(self.once_next) {
            *slot = hash;
            self.once_next = (self.once_next + 1) % ONCE;
        }
        false
    }

    /// Keeps `entry`, evicting what the bounds require.
    fn insert(&mut self, mut entry: Entry) {
        let cost = entry.bytes();
        if cost > BYTES {
            return;
        }
        let generation = entry.tokens.generation();
        if self
            .entries
            .iter()
            .any(|e| e.tokens.generation() != generation)
        {
            self.entries.retain(|e| e.tokens.generation() == generation);
            self.bytes = self.entries.iter().map(Entry::bytes).sum();
        }
        while self.entries.len() >= ENTRIES || self.bytes + cost > BYTES {
            let Some(oldest) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used) else {
                break;
            };
            let gone = self.entries.swap_remove(oldest);
            self.bytes -= gone.bytes();
        }
        self.clock += 1;
        entry.used = self.clock;
        self.bytes += cost;
        self.entries.push(entry);
    }
}

/// Never off outside tests.
#[cfg(not(test))]
fn disabled() -> bool {
    false
}

/// Off while `hooks::DISABLED` is set on the thread.
#[cfg(test)]
fn disabled() -> bool {
    hooks::DISABLED.with(std::cell::Cell::get)
}

/// Switches for tests: the cache off, every text's hash forced to one value,
/// a count of hits, and what the thread's cache holds.
#[cfg(test)]
pub(crate) mod hooks {
    use std::cell::Cell;

    thread_local! {
        pub(crate) static DISABLED: Cell<bool> = const { Cell::new(false) };
        pub(crate) static FORCED_HASH: Cell<Option<u64>> = const { Cell::new(None) };
        /// Parses the thread's cache has answered.
        pub(crate) static HITS: Cell<usize> = const { Cell::new(0) };
    }

    /// Parses the thread's cache has answered so far.
    pub(crate) fn hits() -> usize {
        HITS.with(Cell::get)
    }

    /// (entries, their bytes as counted, their bytes recounted, the
    /// longest text) in the thread's cache.
    pub(crate) fn state() -> (usize, usize, usize, usize) {
        super::with_cache(|c| {
            (
                c.entries.len(),
                c.bytes,
                c.entries.iter().map(super::Entry::bytes).sum(),
                c.entries.iter().map(|e| e.text.len()).max().unwrap_or(0),
            )
        })
        .unwrap_or_default()
    }

    /// Empties the thread's cache and forgets the texts it has seen.
    pub(crate) fn clear() {
        super::with_cache(|c| {
            c.entries.clear();
            c.bytes = 0;
            c.once.clear();
            c.once_next = 0;
        });
    }
}

#[cfg(test)]
mod tests;
