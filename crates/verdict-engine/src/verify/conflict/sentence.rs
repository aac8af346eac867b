//! One clause of the chosen passage as the polarity checks read it: the
//! claim terms it holds, and what they ask of it per token (polarity, where
//! a stem occurs, which tokens name an exclusive state), worked out once per
//! clause so that a check costs the occurrences it reads.

use std::cell::OnceCell;

use super::super::{negates, polarity_of, Polarity};
use super::exclusive_stems;
use crate::text::{self, Token};

/// One clause of the passage, and how many distinct claim terms it holds.
///
/// The polarity checks ask the same clause about each claim word in turn,
/// so what they read per token (its polarity, where each stem occurs, which
/// tokens name an exclusive state) is worked out once per clause, on first
/// use: a check then costs the occurrences it looks at, not the claim's
/// words times the passage's tokens.
pub(super) struct Sentence<'a> {
    pub(super) body: &'a str,
    pub(super) source_id: &'a str,
    pub(super) toks: &'a [Token],
    /// Distinct claim terms the clause holds.
    pub(super) overlap: usize,
    /// Those terms' stems, sorted.
    pub(super) seen: Vec<u32>,
    /// Each token's polarity; `None` for a negator itself.
    polarities: OnceCell<Vec<Option<Polarity>>>,
    /// (stem, token index) of every token, sorted.
    by_stem: OnceCell<Vec<(u32, usize)>>,
    /// The tokens whose stem names a state with an exclusive rival, in order.
    stateful: OnceCell<Vec<usize>>,
}

/// The distinct stems of `toks` that are among `stems` (sorted), sorted.
pub(super) fn stems_in(toks: &[Token], stems: &[u32]) -> Vec<u32> {
    let mut seen: Vec<u32> = toks
        .iter()
        .map(|t| t.stem_id)
        .filter(|s| stems.binary_search(s).is_ok())
        .collect();
    seen.sort_unstable();
    seen.dedup();
    seen
}

impl<'a> Sentence<'a> {
    pub(super) fn new(
        body: &'a str,
        source_id: &'a str,
        toks: &'a [Token],
        term_stems: &[u32],
    ) -> Self {
        let seen = stems_in(toks, term_stems);
        Sentence {
            body,
            source_id,
            toks,
            overlap: seen.len(),
            seen,
            polarities: OnceCell::new(),
            by_stem: OnceCell::new(),
            stateful: OnceCell::new(),
        }
    }

    /// How many of one claim clause's terms (sorted) this clause holds: a
    /// claim word is judged against the evidence clause that carries the
    /// claim clause it sits in, not the whole claim ("X can be made, while
    /// Y cannot be produced" has two statements).
    pub(super) fn overlap_in(&self, clause: &[u32]) -> usize {
        self.seen
            .iter()
            .filter(|s| clause.binary_search(s).is_ok())
            .count()
    }

    /// Token `i`'s polarity, or `None` when it is a negator.
    pub(super) fn polarity(&self, vocab: &text::Vocab, i: usize) -> Option<Polarity> {
        let all = self.polarities.get_or_init(|| {
            (0..self.toks.len())
                .map(|k| {
                    (!negates(self.toks, vocab, k))
                        .then(|| polarity_of(self.body, self.toks, vocab, k))
                })
                .collect()
        });
        all.get(i).copied().flatten()
    }

    /// The indices of the tokens with stem `stem`, in order.
    pub(super) fn occurrences(&self, stem: u32) -> impl Iterator<Item = usize> + '_ {
        let all = self.by_stem.get_or_init(|| {
            let mut v: Vec<(u32, usize)> = self
                .toks
                .iter()
                .enumerate()
                .map(|(i, t)| (t.stem_id, i))
                .collect();
            v.sort_unstable();
            v
        });
        let from = all.partition_point(|&(s, _)| s < stem);
        all[from..]
            .iter()
            .take_while(move |&&(s, _)| s == stem)
            .map(|&(_, i)| i)
    }

    /// The tokens that may name an exclusive state ([`exclusive_stems`]).
    pub(super) fn stateful(&self, vocab: &text::Vocab) -> &[usize] {
        self.stateful.get_or_init(|| {
            let table = exclusive_stems();
            self.toks
                .iter()
                .enumerate()
                .filter(|(_, t)| table.contains_key(vocab.stem(t.stem_id)))
                .map(|(i, _)| i)
                .collect()
        })
    }
}
