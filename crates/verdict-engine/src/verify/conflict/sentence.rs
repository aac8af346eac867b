//! One clause of the chosen passage as the polarity checks read it: the
//! claim terms it holds, and what they ask of it per token (polarity, where
//! a stem occurs, which tokens name an exclusive state), worked out once per
//! clause so that a check costs the occurrences it reads.

use std::cell::OnceCell;

use super::super::{negates, polarity_of, Polarity};
use super::exclusive_stems;
use crate::text::{self, Token};

/// One clause of the passage, the claim terms it holds, and its per-token
/// answers, each worked out on first use (see the module docs).
pub(super) struct Sentence<'a> {
    pub(super) body: &'a str,
    pub(super) source_id: &'a str,
    pub(super) toks: &'a [Token],
    /// The stems of the distinct claim terms the clause holds, sorted.
    seen: Vec<u32>,
    /// Each token's polarity; `None` for a negator itself.
    polarities: OnceCell<Vec<Option<Polarity>>>,
    /// (stem, token index) of every token, sorted.
    by_stem: OnceCell<Vec<(u32, usize)>>,
    /// The tokens whose stem names a state with an exclusive rival, in order.
    stateful: OnceCell<Vec<usize>>,
}

/// `stems` sorted, without repeats: the form [`stems_in`] and
/// [`Sentence::overlap_in`] search.
pub(super) fn sorted_set(stems: &[u32]) -> Vec<u32> {
    let mut v = stems.to_vec();
    v.sort_unstable();
    v.dedup();
    v
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
        Sentence {
            body,
            source_id,
            toks,
            seen: stems_in(toks, term_stems),
            polarities: OnceCell::new(),
            by_stem: OnceCell::new(),
            stateful: OnceCell::new(),
        }
    }

    /// How many distinct claim terms the clause holds.
    pub(super) fn overlap(&self) -> usize {
        self.seen.len()
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
