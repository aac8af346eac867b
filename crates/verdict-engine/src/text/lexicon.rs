//! The words a thread has stemmed, kept from one request to the next.
//!
//! Stemming a word (the spelling map, then Snowball) and reading its facts
//! ([`Lex`]) cost far more than finding the word in a table, and requests
//! repeat most of their vocabulary: the same policy pages, the same support
//! language. So each thread keeps one lexicon of the forms it has seen, each
//! with its stem and facts, and a request's [`Vocab`](super::Vocab) only maps
//! the lexicon's ids to dense ids of its own, handed out in the order the
//! request first sees each word, as a fresh vocabulary would. What the
//! lexicon holds is a pure function of each word, so no answer depends on
//! which requests came before. It is bounded: a lexicon that has grown past
//! [`CAP`] forms is dropped when its request ends, and the next request
//! starts an empty one. Each lexicon has a generation no other lexicon of
//! the process shares, so that what is kept in terms of its ids (the parse
//! cache, `verify::cache`) is never read through another lexicon.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use rust_stemmers::Stemmer;

use super::Lex;

/// Forms a lexicon may hold when its request ends and still be kept.
const CAP: usize = 1 << 15;

/// Not asked yet (in [`FormInfo`]), or no such id.
const NONE: u32 = u32::MAX;

thread_local! {
    /// The thread's lexicon while no request holds it.
    static SPARE: RefCell<Option<Lexicon>> = const { RefCell::new(None) };
}

/// The thread's lexicon, or a new one when another request on this thread
/// holds it (or the thread has none yet), opened for a new request.
pub(super) fn take() -> Lexicon {
    let spare = SPARE
        .try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.take()))
        .ok()
        .flatten();
    let mut lx = spare.unwrap_or_else(Lexicon::fresh);
    lx.open();
    lx
}

/// Keeps `lx` for the thread's next request, unless it has grown past
/// [`CAP`] or the thread already keeps another.
pub(super) fn give_back(lx: Lexicon) {
    if lx.forms.len() > CAP {
        return;
    }
    let _ = SPARE.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            if s.is_none() {
                *s = Some(lx);
            }
        }
    });
}

/// What the lexicon knows of one form.
#[derive(Clone, Copy)]
struct FormInfo {
    /// Stem id of the form read as a word, [`NONE`] until asked.
    word_stem: u32,
    /// Stem id of the form read as a number (the form itself), [`NONE`]
    /// until asked.
    number_stem: u32,
    lex: Lex,
}

/// The generation of the next lexicon made in the process: global, not
/// per thread, because a request's vocabulary may end on another thread
/// than it began and leave its lexicon there.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// Forms and stems with ids that last as long as the lexicon, and for each
/// the request-local id the current request gave it, if any.
#[derive(Default)]
pub(super) struct Lexicon {
    /// Unique in the process (0 only for the placeholder a dropped
    /// vocabulary leaves behind): ids of one lexicon mean nothing to another.
    generation: u64,
    /// One keyed hash for both tables; each string is hashed once per lookup.
    hasher: ahash::RandomState,
    forms: Interner,
    /// Form id → what is known of it.
    info: Vec<FormInfo>,
    stems: Interner,
    /// Form id → (request, its local id in that request): current only
    /// when the request is `epoch`, so opening a request clears nothing.
    form_local: Vec<(u32, u32)>,
    /// Stem id → (request, its local id in that request).
    stem_local: Vec<(u32, u32)>,
    /// The current request; 0 is no request.
    epoch: u32,
}

/// A form's local ids and facts, as the request's vocabulary records it.
#[derive(Clone, Copy)]
pub(super) enum Seen {
    /// The request has seen the form: its local id.
    Local(u32),
    /// New to the request: its lexicon id, to [`Lexicon::admit`].
    New(u32),
}

impl Lexicon {
    /// An empty lexicon with a generation of its own.
    fn fresh() -> Lexicon {
        Lexicon {
            generation: NEXT_GENERATION.fetch_add(1, Ordering::Relaxed),
            ..Lexicon::default()
        }
    }

    /// Which lexicon this is: see [`NEXT_GENERATION`].
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Forms the lexicon holds: ids below this are its own.
    pub(super) fn form_count(&self) -> usize {
        self.forms.len()
    }

    /// Starts a new request: no form or stem has a local id in it.
    fn open(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.form_local.fill((0, 0));
            self.stem_local.fill((0, 0));
            self.epoch = 1;
        }
    }

    pub(super) fn hash(&self, s: &str) -> u64 {
        self.hasher.hash_one(s)
    }

    /// The form with lexicon id `id`.
    pub(super) fn form(&self, id: u32) -> &str {
        self.forms.get(id)
    }

    /// The stem with lexicon id `id`.
    pub(super) fn stem(&self, id: u32) -> &str {
        self.stems.get(id)
    }

    /// Finds `form` (whose hash is `hash`), adding it when new.
    #[inline(always)]
    pub(super) fn seen(&mut self, form: &str, hash: u64) -> Seen {
        let id = match self.forms.find(form, hash) {
            Some(id) => id,
            None => {
                let id = self.forms.push(form, hash);
                self.info.push(FormInfo {
                    word_stem: NONE,
                    number_stem: NONE,
                    lex: Lex::of(form),
                });
                self.form_local.push((0, 0));
                id
            }
        };
        self.seen_id(id)
    }

    /// Whether the request has seen the form with lexicon id `id`, which
    /// must be one of this lexicon's ids.
    #[inline(always)]
    pub(super) fn seen_id(&self, id: u32) -> Seen {
        match self.form_local.get(id as usize) {
            Some(&(e, local)) if e == self.epoch => Seen::Local(local),
            _ => Seen::New(id),
        }
    }

    /// Records that the request gave form `id` the local id `local`;
    /// returns the form's stem (as a number, or stemmed as a word) and
    /// facts.
    pub(super) fn admit(&mut self, id: u32, local: u32, number: bool, st: &Stemmer) -> (u32, Lex) {
        let epoch = self.epoch;
        if let Some(slot) = self.form_local.get_mut(id as usize) {
            *slot = (epoch, local);
        }
        let Some(&info) = self.info.get(id as usize) else {
            return (NONE, Lex::default());
        };
        let known = if number {
            info.number_stem
        } else {
            info.word_stem
        };
        if known != NONE {
            return (known, info.lex);
        }
        let form = self.forms.get(id);
        let stem = if number {
            self.stems.intern(form, self.forms.hash_of(id))
        } else {
            // British and American spellings share a stem; the form stays
            // as written.
            let american = crate::spelling::american(form);
            let stem = st.stem(&american);
            self.stems.intern(&stem, self.hasher.hash_one(&*stem))
        };
        if self.stem_local.len() < self.stems.len() {
            self.stem_local.resize(self.stems.len(), (0, 0));
        }
        if let Some(i) = self.info.get_mut(id as usize) {
            if number {
                i.number_stem = stem;
            } else {
                i.word_stem = stem;
            }
        }
        (stem, info.lex)
    }

    /// The request's local id for lexicon stem `id`, if it gave one.
    pub(super) fn stem_local(&self, id: u32) -> Option<u32> {
        match self.stem_local.get(id as usize) {
            Some(&(e, local)) if e == self.epoch => Some(local),
            _ => None,
        }
    }

    /// Records that the request gave lexicon stem `id` the local id `local`.
    pub(super) fn set_stem_local(&mut self, id: u32, local: u32) {
        let epoch = self.epoch;
        if let Some(slot) = self.stem_local.get_mut(id as usize) {
            *slot = (epoch, local);
        }
    }

    /// The lexicon id of `stem`, if some form has it.
    pub(super) fn find_stem(&self, stem: &str) -> Option<u32> {
        self.stems.find(stem, self.hasher.hash_one(stem))
    }
}

/// Strings with dense ids, stored back to back in one buffer: interning a
/// new word costs no allocation of its own. Lookup is open addressing with
/// linear probing over ids, at most half full; each string's hash is kept,
/// so a probe compares text only on a full hash match and growing never
/// rehashes text.
#[derive(Default)]
struct Interner {
    /// Every interned string, back to back.
    text: String,
    /// Id → (start, end) in `text` and the string's hash.
    spans: Vec<(usize, usize, u64)>,
    /// Slot → id + 1, 0 when empty. Length 0 or a power of two.
    slots: Vec<u32>,
}

impl Interner {
    fn len(&self) -> usize {
        self.spans.len()
    }

    fn get(&self, id: u32) -> &str {
        self.spans
            .get(id as usize)
            .and_then(|&(a, b, _)| self.text.get(a..b))
            .unwrap_or("")
    }

    fn hash_of(&self, id: u32) -> u64 {
        self.spans.get(id as usize).map_or(0, |s| s.2)
    }

    fn find(&self, s: &str, hash: u64) -> Option<u32> {
        let mask = self.slots.len().checked_sub(1)?;
        // Truncation intended: the low bits pick the slot.
        let mut i = hash as usize & mask;
        loop {
            let id = self.slots[i].checked_sub(1)?;
            let (a, b, h) = self.spans[id as usize];
            // Bytes, not `str::get`: no char-boundary checks per probe.
            if h == hash && self.text.as_bytes().get(a..b) == Some(s.as_bytes()) {
                return Some(id);
            }
            i = (i + 1) & mask;
        }
    }

    /// The id of `s`, added if new.
    fn intern(&mut self, s: &str, hash: u64) -> u32 {
        match self.find(s, hash) {
            Some(id) => id,
            None => self.push(s, hash),
        }
    }

    /// Adds `s`, which must not be interned yet, and returns its id.
    fn push(&mut self, s: &str, hash: u64) -> u32 {
        let id = u32::try_from(self.spans.len()).unwrap_or(u32::MAX);
        let start = self.text.len();
        self.text.push_str(s);
        self.spans.push((start, self.text.len(), hash));
        if self.spans.len() * 2 > self.slots.len() {
            let size = (self.slots.len() * 2).max(256);
            self.slots.clear();
            self.slots.resize(size, 0);
            for k in 0..self.spans.len() {
                self.place(k);
            }
        } else {
            self.place(id as usize);
        }
        id
    }

    /// Puts id `k` in the first free slot of its probe sequence.
    fn place(&mut self, k: usize) {
        let mask = self.slots.len() - 1;
        let mut i = self.spans[k].2 as usize & mask;
        while self.slots[i] != 0 {
            i = (i + 1) & mask;
        }
        self.slots[i] = u32::try_from(k + 1).unwrap_or(u32::MAX);
    }
}
