//! How well the units of the evidence match a claim's items, memoised per
//! claim, and the coverage of a passage or a set of units; completing the
//! best passage with sentences that add to it.

use super::*;

/// How well one unit matches each claim item (terms, then quantities):
/// 3 = exact surface or backed quantity, 2 = stem only, 1 = a derivational
/// form (`Analysis::related`), 0 = absent. Computed
/// once per unit and claim, so scoring a set of units is a max over rows.
/// Appends one row to `out`.
///
/// One pass over the unit's tokens: a token whose stem is a term's stem
/// matches it by stem, and by surface when its form is the term's form too
/// (same form implies same stem, so no surface match is missed).
pub(super) fn unit_levels(lv: &Levels<'_, '_>, u: usize, out: &mut Vec<u8>) {
    let (a, idx) = (lv.a, lv.idx);
    let unit = &idx.units[u];
    let at = out.len();
    out.resize(at + a.terms.len(), 0);
    if let Some(row) = out.get_mut(at..) {
        for tok in idx.unit_tokens(unit) {
            // `u32::MAX` (no term) indexes nothing; `RELATED` marks a
            // derivational form of the term.
            let code = lv.term_of.get(tok.stem_id as usize).copied();
            let code = code.unwrap_or(u32::MAX);
            let (k, related) = if code == u32::MAX {
                (usize::MAX, false)
            } else {
                ((code & !RELATED) as usize, code & RELATED != 0)
            };
            let (Some(level), Some(&surf)) = (row.get_mut(k), lv.surf.get(k)) else {
                continue;
            };
            let got = if related {
                1
            } else if surf == tok.norm_id {
                3
            } else {
                2
            };
            *level = (*level).max(got);
        }
    }
    let bits = lv
        .qty_bits
        .get(u)
        .filter(|_| lv.qty_filled.get(unit.source) == Some(&true));
    for (k, cq) in a.qty.iter().enumerate() {
        let backed = match bits {
            Some(&b) => b >> k & 1 == 1,
            None => idx.unit_qty(unit).iter().any(|e| numbers::backs(&cq.q, e)),
        };
        out.push(if backed { 3 } else { 0 });
    }
}

impl<'a, 'b> Levels<'a, 'b> {
    pub(super) fn new(a: &'a Analysis, idx: &'a Index<'b>) -> Self {
        let width = a.terms.len() + a.qty.len();
        let mut term_of = vec![u32::MAX; idx.posting_at.len().saturating_sub(1)];
        for (k, t) in a.terms.iter().enumerate() {
            if let Some(slot) = t.stem.and_then(|s| term_of.get_mut(s as usize)) {
                *slot = u32::try_from(k).unwrap_or(u32::MAX);
            }
        }
        for &(s, k) in &a.related {
            if let Some(slot) = term_of.get_mut(s as usize) {
                if *slot == u32::MAX {
                    *slot = k | RELATED;
                }
            }
        }
        let gain = a
            .terms
            .iter()
            .map(|t| {
                [
                    0.0,
                    t.weight * tune::RELATED_MATCH,
                    t.weight * tune::STEM_MATCH,
                    t.weight,
                ]
            })
            .chain(a.qty.iter().map(|cq| [0.0, 0.0, 0.0, cq.weight]))
            .collect();
        Levels {
            a,
            idx,
            width,
            term_of,
            surf: a.terms.iter().map(|t| t.surf.unwrap_or(u32::MAX)).collect(),
            qty_bits: Vec::new(),
            qty_filled: Vec::new(),
            slot: vec![usize::MAX; idx.units.len()],
            // Room for the rows a typical claim asks for (ranking touches
            // up to three units per candidate).
            rows: Vec::with_capacity(width * 3 * tune::CANDIDATES),
            best: vec![0; width],
            gain,
        }
    }

    /// Offset of unit `u`'s row in `rows`, computing it on first use.
    pub(super) fn row(&mut self, u: usize) -> usize {
        if self.slot[u] != usize::MAX {
            return self.slot[u];
        }
        let at = self.rows.len();
        self.slot[u] = at;
        let mut rows = std::mem::take(&mut self.rows);
        unit_levels(self, u, &mut rows);
        self.rows = rows;
        at
    }

    /// [`Levels::coverage`] of one passage (one unit or two adjacent ones)
    /// without the scratch row; ranking asks this for every candidate and
    /// its neighbours. Same items, same order of additions, same result.
    pub(super) fn passage_coverage(&mut self, p: Passage) -> f64 {
        if self.a.total <= 0.0 {
            return 0.0;
        }
        let w = self.width;
        let x = self.row(p.first);
        let y = if p.last == p.first {
            x
        } else {
            self.row(p.last)
        };
        let (Some(rx), Some(ry), Some(gain)) = (
            self.rows.get(x..x + w),
            self.rows.get(y..y + w),
            self.gain.get(..w),
        ) else {
            return 0.0;
        };
        let mut got = 0.0;
        for ((g, &l), &m) in gain.iter().zip(rx).zip(ry) {
            got += g[usize::from(l.max(m) & 3)];
        }
        (got / self.a.total).clamp(0.0, 1.0)
    }

    /// Rarity-weighted share of the claim's items found in the units.
    pub(super) fn coverage(&mut self, units: impl Iterator<Item = usize>) -> f64 {
        let a = self.a;
        if a.total <= 0.0 {
            return 0.0;
        }
        self.best.fill(0);
        for u in units {
            let at = self.row(u);
            let row = self.rows.get(at..at + self.width).unwrap_or(&[]);
            for (b, &l) in self.best.iter_mut().zip(row) {
                *b = (*b).max(l);
            }
        }
        // Items in order (terms, then quantities), each adding its gain at
        // its best level; an absent item adds 0.0, which leaves the sum
        // exactly as skipping it did.
        let mut got = 0.0;
        for (g, &l) in self.gain.iter().zip(&self.best) {
            got += g[usize::from(l & 3)];
        }
        (got / a.total).clamp(0.0, 1.0)
    }
}

/// Greedily adds complementary sentences to the best passage while each adds
/// at least `tune::MIN_GAIN` coverage.
pub(super) fn complete(
    lv: &mut Levels<'_, '_>,
    best: Passage,
    cands: &[usize],
) -> (EvidenceSet, f64) {
    let mut set: Vec<usize> = Vec::with_capacity(2 + tune::MAX_EXTRA);
    set.extend(best.units());
    let mut cov = lv.coverage(set.iter().copied());
    for _ in 0..tune::MAX_EXTRA {
        let mut pick: Option<(usize, f64)> = None;
        for &u in cands {
            if set.contains(&u) {
                continue;
            }
            let c = lv.coverage(set.iter().copied().chain(std::iter::once(u)));
            if c - cov >= tune::MIN_GAIN && pick.is_none_or(|(_, pc)| c > pc) {
                pick = Some((u, c));
            }
        }
        match pick {
            Some((u, c)) => {
                set.push(u);
                cov = c;
            }
            None => break,
        }
    }
    set.sort_unstable();
    (EvidenceSet { units: set }, cov)
}
