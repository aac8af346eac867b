//! Claim × sources → [`Check`]: the per-request index, passage retrieval,
//! coverage and the contradiction gates.
//!
//! Sources are indexed once per call: split into sentences (the passage
//! unit), tokenised, stemmed and interned, with an inverted index from stem
//! to sentence. Each claim then ranks sentences BM25-style (IDF over the
//! request's sentences blended with a fixed prior, so one short source still
//! scores sensibly), rescoring the best few as single sentences and adjacent
//! pairs by coverage: the rarity-weighted share of the claim's words and
//! values that align with the passage (same word, stem, derivational form,
//! or value). What does not align counts for nothing; there is no
//! calibration, so `min_coverage` is the share of the claim that must be
//! stated. Gates on numbers, dates, amounts, names, negation, roles and
//! order then override coverage: a claim that gets a specific wrong is
//! unsupported however many of its words match.

use ahash::{AHashMap as HashMap, AHashSet as HashSet};

use super::numbers::{self, QtyKind, Quantity};
use super::text::{self, Token, TokenKind};
use super::{
    round4, CallerCitation, Check, Citation, Claim, ClaimStatus, Conflict, Evidence, Params,
    Reason, Source,
};

/// Tunables, chosen on WiCE dev and RAGTruth even ids only (see
/// docs/accuracy.md). Kept together so the choice is visible in one place.
#[rustfmt::skip]
mod analysis;
mod antonyms;
mod conflict;
mod derive;
mod levels;
mod scoring;
use analysis::{analyse, negates, part_missing};
use levels::complete;
use scoring::{gates, polarity_of, rank, Polarity};

mod tune {
    /// Weight of a stem-only match relative to an exact surface match.
    pub const STEM_MATCH: f64 = 0.9;
    /// Weight of a derivational form ("delivery" for "delivered").
    pub const RELATED_MATCH: f64 = 0.85;
    /// Multiplier for capitalised names.
    pub const NAME_WEIGHT: f64 = 2.0;
    /// Weight of a number, amount or date relative to the rarest word.
    pub const QTY_WEIGHT: f64 = 2.5;
    /// Fixed IDF prior blended with the request-local IDF.
    pub const IDF_PRIOR: f64 = 2.0;
    /// Share of the local IDF in the blend.
    pub const LOCAL_SHARE: f64 = 0.5;
    /// Sentences rescored per claim after BM25 ranking.
    pub const CANDIDATES: usize = 12;
    /// A sentence pair must beat the single sentence by this factor.
    pub const PAIR_FACTOR: f64 = 0.97;
    /// Coverage below which polarity is not compared: the passage is not
    /// aligned closely enough with the claim to judge it.
    pub const NEG_MIN_COV: f64 = 0.45;
    /// Tokens after a negator that fall in its scope.
    pub const NEG_WINDOW: usize = 3;
    /// Extra complementary sentences allowed in the evidence set.
    pub const MAX_EXTRA: usize = 3;
    /// Coverage a complementary sentence must add to be taken.
    pub const MIN_GAIN: f64 = 0.05;
    /// Weight of a generic party word ("customer") that no source contains,
    /// when no source names any party (see `text::PARTIES`).
    pub const UNNAMED_PARTY: f64 = 0.25;
    /// Share of a claim part's weight the evidence set must hold for the
    /// claim to be supported.
    pub const MIN_PART: f64 = 0.2;
    /// BM25 parameters.
    pub const K1: f64 = 1.2;
    pub const B: f64 = 0.75;
}

// === index ===

/// One sentence of one source.
struct Unit {
    /// Index into `Index::sources`.
    source: usize,
    /// Byte range in the source text.
    start: usize,
    end: usize,
    /// Token range in the source's token list.
    tok_start: usize,
    tok_end: usize,
    /// Sorted, deduplicated stem ids: `Index::ids[stems_at..ids_end]`.
    stems_at: usize,
    ids_end: usize,
    /// Range in the source's quantity list.
    qty_start: usize,
    qty_end: usize,
    len: usize,
    /// BM25 length normalisation `1 - B + B * len / avg_len`, computed once
    /// the average is known instead of per posting and claim.
    norm: f64,
}

struct IndexedSource<'a> {
    id: &'a str,
    text: &'a str,
    tokens: Vec<Token>,
    qty: Vec<Quantity>,
    /// Range in `Index::units`.
    unit_start: usize,
    unit_end: usize,
}

struct Index<'a> {
    /// Available and unavailable sources, sorted by id then text.
    sources: Vec<IndexedSource<'a>>,
    unavailable: Vec<&'a str>,
    units: Vec<Unit>,
    /// Every unit's stem id list, back to back (one allocation, not one per
    /// unit; see `Unit::stems_at`).
    ids: Vec<u32>,
    /// stem id → units containing it, ascending: `postings[posting_at[s]..
    /// posting_at[s + 1]]` (compressed rows, one allocation for all stems).
    posting_at: Vec<usize>,
    postings: Vec<u32>,
    avg_len: f64,
    /// Every quantity that lies in a unit and can back a number, amount or
    /// percentage (any but a date with a month or day), as (value, unit,
    /// quantity index in its source), sorted by value: ranking looks a
    /// claim's number up in a window instead of testing every quantity.
    by_value: Vec<(f64, u32, u32)>,
    /// All those values are finite. When one is not, ranking tests every
    /// quantity instead of the window (a non-finite value backs nothing, see
    /// `numbers::close`, so both give the same answer; the scan does not
    /// depend on how infinities sort).
    values_finite: bool,
    /// Some source holds the stem of a party word (`text::PARTIES`);
    /// computed on first use, by `names_party`.
    names_party: std::cell::OnceCell<bool>,
    /// Surface ids of words some source capitalises inside a sentence
    /// (names, not sentence starts), sorted; computed on first use, by
    /// `capitalised_inside`.
    capitalised: std::cell::OnceCell<Vec<u32>>,
    /// How ambiguous numeric dates are read, in sources and claims.
    date_order: super::DateOrder,
    stemmer: text::Stems,
}

impl<'a> Index<'a> {
    fn build(sources: &'a [Source], date_order: super::DateOrder) -> Index<'a> {
        let stemmer = text::stemmer();
        let mut order: Vec<&'a Source> = sources.iter().collect();
        order.sort_by(|a, b| a.id.cmp(&b.id).then_with(|| a.text.cmp(&b.text)));
        // Sized from the text (about one sentence per 48 bytes and one token
        // per 6, as in `text`), so typical sources do not regrow them.
        let bytes: usize = sources
            .iter()
            .filter_map(|s| s.text.as_ref())
            .map(String::len)
            .sum();
        let mut idx = Index {
            sources: Vec::with_capacity(sources.len()),
            unavailable: Vec::new(),
            units: Vec::with_capacity(bytes / 48 + sources.len()),
            ids: Vec::with_capacity(bytes / 6),
            posting_at: Vec::new(),
            postings: Vec::new(),
            avg_len: 1.0,
            by_value: Vec::new(),
            values_finite: true,
            names_party: std::cell::OnceCell::new(),
            capitalised: std::cell::OnceCell::new(),
            date_order,
            stemmer,
        };
        // Reused for each unit's ids before they are sorted and deduplicated.
        let mut scratch: Vec<u32> = Vec::new();
        for src in order {
            let Some(body) = src.text.as_deref() else {
                idx.unavailable.push(&src.id);
                continue;
            };
            let tokens = text::tokenize(body, &idx.stemmer);
            let mut qty = numbers::extract(&tokens, &idx.stemmer.vocab());
            numbers::resolve_dates(&mut qty, date_order);
            let si = idx.sources.len();
            let unit_start = idx.units.len();
            let mut t = 0;
            let mut q = 0;
            for (start, end) in text::split_sentences(body, true) {
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
                let unit_tokens = &tokens[tok_start..tok_end];
                let stems_at = idx.ids.len();
                sorted_ids(unit_tokens.iter().map(|t| t.stem_id), &mut scratch);
                idx.ids.extend_from_slice(&scratch);
                idx.units.push(Unit {
                    source: si,
                    start,
                    end,
                    tok_start,
                    tok_end,
                    stems_at,
                    ids_end: idx.ids.len(),
                    qty_start,
                    qty_end: q,
                    len: tok_end - tok_start,
                    norm: 1.0,
                });
            }
            let unit_end = idx.units.len();
            idx.sources.push(IndexedSource {
                id: &src.id,
                text: body,
                tokens,
                qty,
                unit_start,
                unit_end,
            });
        }
        idx.build_postings();
        idx.by_value
            .reserve(idx.sources.iter().map(|s| s.qty.len()).sum());
        idx.build_by_value();
        let total: usize = idx.units.iter().map(|u| u.len).sum();
        idx.avg_len = (total as f64 / idx.units.len().max(1) as f64).max(1.0);
        let avg_len = idx.avg_len;
        for unit in &mut idx.units {
            unit.norm = 1.0 - tune::B + tune::B * unit.len as f64 / avg_len;
        }
        idx
    }

    /// Fills `by_value` and `values_finite`.
    fn build_by_value(&mut self) {
        for (ui, unit) in self.units.iter().enumerate() {
            let qty = &self.sources[unit.source].qty;
            for qi in unit.qty_start..unit.qty_end {
                let Some(q) = qty.get(qi) else { continue };
                if q.kind == QtyKind::Date && (q.date.month.is_some() || q.date.day.is_some()) {
                    continue;
                }
                self.values_finite &= q.value.is_finite();
                let ui = u32::try_from(ui).unwrap_or(u32::MAX);
                let qi = u32::try_from(qi).unwrap_or(u32::MAX);
                self.by_value.push((q.value, ui, qi));
            }
        }
        self.by_value
            .sort_unstable_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    }

    /// Fills the compressed postings from the units' stem lists: count per
    /// stem, prefix sums, then units in ascending order.
    fn build_postings(&mut self) {
        let n_stems = self
            .units
            .iter()
            .filter_map(|u| self.ids.get(u.stems_at..u.ids_end)?.last())
            .max()
            .map_or(0, |&s| s as usize + 1);
        let mut at = vec![0usize; n_stems + 1];
        for u in &self.units {
            for &s in self.ids.get(u.stems_at..u.ids_end).unwrap_or(&[]) {
                at[s as usize + 1] += 1;
            }
        }
        let mut sum = 0;
        for x in &mut at {
            sum += *x;
            *x = sum;
        }
        let mut next = at.clone();
        let mut postings = vec![0u32; at[n_stems]];
        for (uid, u) in self.units.iter().enumerate() {
            let uid = u32::try_from(uid).unwrap_or(u32::MAX);
            for &s in self.ids.get(u.stems_at..u.ids_end).unwrap_or(&[]) {
                postings[next[s as usize]] = uid;
                next[s as usize] += 1;
            }
        }
        self.posting_at = at;
        self.postings = postings;
    }

    /// Units containing stem `s`, ascending (empty for a stem no unit has).
    fn posting(&self, s: u32) -> &[u32] {
        let s = s as usize;
        match (self.posting_at.get(s), self.posting_at.get(s + 1)) {
            (Some(&a), Some(&b)) => self.postings.get(a..b).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// Sorted stem ids of a unit.
    fn stems(&self, u: &Unit) -> &[u32] {
        self.ids.get(u.stems_at..u.ids_end).unwrap_or(&[])
    }

    fn df(&self, stem: Option<u32>) -> usize {
        stem.map_or(0, |s| self.posting(s).len())
    }

    /// Whether some source holds a party word (by stem, so "customs"
    /// counts too: the rule only ever weighs less when this is false).
    /// Whether some source capitalises this word inside a sentence.
    fn capitalised_inside(&self, norm_id: u32) -> bool {
        self.capitalised
            .get_or_init(|| {
                let mut out = Vec::new();
                for u in &self.units {
                    let src = &self.sources[u.source];
                    let toks = src.tokens.get(u.tok_start..u.tok_end).unwrap_or(&[]);
                    for w in toks.windows(2) {
                        let gap = src.text.get(w[0].end..w[1].start).unwrap_or("");
                        if w[1].capitalized && !gap.contains(['.', '!', '?', ':', '\n', '"']) {
                            out.push(w[1].norm_id);
                        }
                    }
                }
                out.sort_unstable();
                out.dedup();
                out
            })
            .binary_search(&norm_id)
            .is_ok()
    }

    fn names_party(&self) -> bool {
        *self.names_party.get_or_init(|| {
            let vocab = self.stemmer.vocab();
            text::party_stems()
                .iter()
                .any(|s| self.df(vocab.stem_id(s)) > 0)
        })
    }

    fn idf(&self, stem: Option<u32>) -> f64 {
        let n = self.units.len() as f64;
        let df = self.df(stem) as f64;
        let local = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
        tune::LOCAL_SHARE * local + (1.0 - tune::LOCAL_SHARE) * tune::IDF_PRIOR
    }

    /// The unit's tokens.
    fn unit_tokens(&self, u: &Unit) -> &[Token] {
        self.sources[u.source]
            .tokens
            .get(u.tok_start..u.tok_end)
            .unwrap_or(&[])
    }

    fn unit_qty(&self, u: &Unit) -> &[Quantity] {
        self.sources[u.source]
            .qty
            .get(u.qty_start..u.qty_end)
            .unwrap_or(&[])
    }

    /// Every unit of the `allowed` sources, in unit order, with its
    /// quantities. Source by source: a source's units are contiguous, so
    /// each unit's quantities are a slice of one list.
    fn allowed_unit_qty<'s>(
        &'s self,
        allowed: &'s [bool],
    ) -> impl Iterator<Item = (usize, &'s [Quantity])> + 's {
        self.sources
            .iter()
            .zip(allowed)
            .filter(|(_, &ok)| ok)
            .flat_map(move |(src, _)| {
                let units = self.units.get(src.unit_start..src.unit_end).unwrap_or(&[]);
                (src.unit_start..).zip(units).map(move |(ui, unit)| {
                    (ui, src.qty.get(unit.qty_start..unit.qty_end).unwrap_or(&[]))
                })
            })
    }
}

/// Replaces `out` with the sorted, deduplicated `ids`.
fn sorted_ids(ids: impl Iterator<Item = u32>, out: &mut Vec<u32>) {
    out.clear();
    out.extend(ids);
    out.sort_unstable();
    out.dedup();
}

// === claim analysis ===

/// One content term of a claim.
struct Term {
    surf: Option<u32>,
    stem: Option<u32>,
    weight: f64,
    name: bool,
    /// Byte range in the claim.
    span: (usize, usize),
}

struct ClaimQty {
    q: Quantity,
    weight: f64,
    /// Byte range in the claim.
    span: (usize, usize),
}

struct Analysis {
    terms: Vec<Term>,
    qty: Vec<ClaimQty>,
    /// Any negator in the claim (kept for diagnostics and tests).
    #[allow(dead_code)]
    negated: bool,
    /// (stem id, negated in the claim) for each content word.
    polarity: Vec<(u32, bool)>,
    /// The claim states something under a hedge ("will be issued").
    hedge: bool,
    /// The claim reports an event as done ("the refund was issued").
    done: bool,
    /// The stem of that event's participle, when "was"/"were"/"been"
    /// introduces it ("was issued" → issu).
    event: Option<u32>,
    /// The stems of each clause of the claim's content words, sorted.
    clauses: Vec<Vec<u32>>,
    /// All of them, sorted.
    clause_all: Vec<u32>,
    /// The claim's conjuncts ("refunds are available within 30 days" and
    /// "gift cards never expire"): stems of each part's content words,
    /// when the claim joins two or more parts of two or more words each.
    parts: Vec<Vec<u32>>,
    /// Stems of the claim's number tokens ("40" in "$40").
    qty_stems: Vec<u32>,
    /// The claim says "all", "every", "any" ...
    universal: bool,
    /// The claim has an exception of its own ("except", "excluding").
    excepts: bool,
    /// The claim's text, for the spans of a conflict.
    text: String,
    total: f64,
    /// (stem id, term index) for each derivational form of a term that
    /// some source holds and no term has as its own stem.
    related: Vec<(u32, u32)>,
}

// === passages ===

/// A passage: one unit, or two adjacent units of the same source.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Passage {
    first: usize,
    last: usize,
}

impl Passage {
    fn units(self) -> std::ops::RangeInclusive<usize> {
        self.first..=self.last
    }
}

/// The evidence a claim is judged on: the best passage plus, when they add
/// enough of the claim's content, a few complementary sentences of the
/// searched sources (facts are often spread over a page). Unit ids, sorted.
#[derive(Clone, PartialEq, Eq)]
struct EvidenceSet {
    units: Vec<usize>,
}

fn contains(sorted: &[u32], id: Option<u32>) -> bool {
    id.is_some_and(|id| sorted.binary_search(&id).is_ok())
}

/// Per-claim memo of [`unit_levels`]. Rows are computed only for the units
/// a claim's ranking touches (a few dozen), so the memo stays small however
/// many units the sources have; all rows share one buffer.
struct Levels<'a, 'b> {
    a: &'a Analysis,
    idx: &'a Index<'b>,
    /// Items per row: the claim's terms, then its quantities.
    width: usize,
    /// Stem id → index of the claim term with that stem, or with `RELATED`
    /// set, of the term it is a derivational form of; `u32::MAX` for none.
    /// Covers the stems that occur in units (terms are one per stem).
    term_of: Vec<u32>,
    /// Per unit, bit `k` set when the unit backs claim quantity `k`. [`rank`]
    /// tests every unit of the searched sources for its quantity score and
    /// records the answer here, so rows do not test again. Empty when the
    /// claim has no quantities or more than 64.
    qty_bits: Vec<u64>,
    /// Per source: `qty_bits` holds its units.
    qty_filled: Vec<bool>,
    /// Term index → its surface form id (`u32::MAX`, which no form has, for
    /// a term without one), read in the row loop instead of `Term::surf`.
    surf: Vec<u32>,
    /// Unit id → offset of its row in `rows`, or `usize::MAX` until first
    /// asked.
    slot: Vec<usize>,
    /// The computed rows, `width` levels each, in the order first asked.
    rows: Vec<u8>,
    /// Scratch for [`Levels::coverage`]: best level per item over a set.
    best: Vec<u8>,
    /// What each item adds to coverage at each level (absent, derived,
    /// stem, exact): `[0, weight * RELATED_MATCH, weight * STEM_MATCH,
    /// weight]` for terms, `[0, 0, 0, weight]` for quantities.
    gain: Vec<[f64; 4]>,
}

/// Set in a `Levels::term_of` entry for a derivational form of the term.
const RELATED: u32 = 1 << 31;

// === verify ===

/// Checks every claim against the sources: one [`Check`] per claim, in order.
/// The sources are indexed once for the whole call.
pub fn verify(claims: &[Claim], sources: &[Source], params: &Params) -> Vec<Check> {
    let idx = Index::build(sources, params.date_order);
    claims
        .iter()
        .map(|c| check_claim(c, &idx, params))
        .collect()
}

fn check_claim(claim: &Claim, idx: &Index<'_>, params: &Params) -> Check {
    let mut reasons: Vec<Reason> = Vec::new();
    let mut conflicts: Vec<Conflict> = Vec::new();
    let mut citations: Vec<Citation> = Vec::new();

    // Which sources may be searched.
    let allowed: Vec<bool> = if claim.citations.is_empty() {
        if !idx.unavailable.is_empty() && idx.sources.is_empty() {
            reasons.push(Reason::SourceUnavailable);
        }
        vec![true; idx.sources.len()]
    } else {
        let mut allowed = vec![false; idx.sources.len()];
        for cc in &claim.citations {
            resolve_citation(cc, idx, &mut allowed, &mut citations, &mut reasons);
        }
        allowed
    };

    let a = analyse(&claim.text, idx);
    let mut best: Option<(EvidenceSet, f64)> = None;
    let mut ranked: Vec<(Passage, f64)> = Vec::new();
    // Byte ranges of the claim items nothing in the evidence set aligns
    // with.
    let mut unaligned: Vec<(usize, usize)> = Vec::new();
    if a.total <= 0.0 {
        reasons.push(Reason::EmptyClaim);
    } else {
        let mut lv = Levels::new(&a, idx);
        let (r, cands) = rank(&mut lv, &allowed);
        ranked = r;
        best = ranked.first().map(|&(p, _)| complete(&mut lv, p, &cands));
        if let Some((set, _)) = &best {
            lv.coverage(set.units.iter().copied());
            let spans = a.terms.iter().map(|t| t.span);
            let spans = spans.chain(a.qty.iter().map(|q| q.span));
            for (span, &level) in spans.zip(&lv.best) {
                if level == 0 {
                    unaligned.push(span);
                }
            }
        } else {
            unaligned.extend(a.terms.iter().map(|t| t.span));
            unaligned.extend(a.qty.iter().map(|q| q.span));
        }
        unaligned.sort_unstable();
    }
    // The weighted share of the claim that aligns with the evidence: what
    // does not align is unknown, and counts for nothing.
    let cov = round4(best.as_ref().map_or(0.0, |(_, raw)| *raw));

    if best.is_none() && a.total > 0.0 && !reasons.contains(&Reason::CitationNotFound) {
        reasons.push(Reason::NoEvidence);
    }
    if let (Some((set, c)), Some(&(primary, _))) = (&best, ranked.first()) {
        conflicts.extend(gates(&a, idx, &allowed, set, primary, *c, &mut reasons));
    }

    let contradiction = reasons.iter().any(|r| r.is_contradiction());
    let hard_fail = contradiction
        || reasons.contains(&Reason::NoEvidence)
        || reasons.contains(&Reason::EmptyClaim);
    let part_gap = best
        .as_ref()
        .is_some_and(|(set, _)| part_missing(&a, idx, set));
    let status = status(
        hard_fail,
        cov,
        part_gap,
        params.min_coverage,
        params.review_floor,
    );
    if status != ClaimStatus::Supported && !contradiction && (cov < params.min_coverage || part_gap)
    {
        reasons.push(Reason::LowCoverage);
    }
    if status != ClaimStatus::Unsupported {
        if let Some((set, _)) = &best {
            for p in runs(idx, &set.units) {
                let c = passage_citation(idx, p);
                if !citations.contains(&c) {
                    citations.push(c);
                }
            }
        }
    }
    let evidence = ranked
        .iter()
        .take(params.evidence_limit)
        .map(|&(p, _)| {
            let src = &idx.sources[idx.units[p.first].source];
            Evidence {
                source_id: src.id.to_string(),
                snippet: src
                    .text
                    .get(idx.units[p.first].start..idx.units[p.last].end)
                    .unwrap_or("")
                    .to_string(),
            }
        })
        .collect();
    reasons.sort_unstable();
    reasons.dedup();
    let unaligned = if status == ClaimStatus::Supported {
        Vec::new()
    } else {
        unaligned
            .into_iter()
            .map(|(s, e)| {
                let start = text::char_offset(&claim.text, s);
                let text = claim.text.get(s..e).unwrap_or("").to_string();
                super::Span {
                    start,
                    end: start + text.chars().count(),
                    text,
                }
            })
            .collect()
    };
    Check {
        claim_id: claim.id.clone(),
        claim_text: claim.text.clone(),
        status,
        coverage: cov,
        citations,
        evidence,
        reasons,
        conflicts,
        part_gap,
        unaligned,
    }
}

/// A claim's status from what was found: the one place the thresholds are
/// read (see [`Check::status_under`]).
pub(super) fn status(
    hard_fail: bool,
    cov: f64,
    part_gap: bool,
    min_coverage: f64,
    review_floor: f64,
) -> ClaimStatus {
    if hard_fail {
        ClaimStatus::Unsupported
    } else if cov >= min_coverage && !part_gap {
        ClaimStatus::Supported
    } else if cov >= review_floor {
        ClaimStatus::Ambiguous
    } else {
        ClaimStatus::Unsupported
    }
}

fn resolve_citation(
    cc: &CallerCitation,
    idx: &Index<'_>,
    allowed: &mut [bool],
    citations: &mut Vec<Citation>,
    reasons: &mut Vec<Reason>,
) {
    let Some(si) = idx.sources.iter().position(|s| s.id == cc.source_id) else {
        if idx.unavailable.iter().any(|id| *id == cc.source_id) {
            reasons.push(Reason::SourceUnavailable);
        } else {
            reasons.push(Reason::CitationNotFound);
        }
        return;
    };
    allowed[si] = true;
    let Some(quote) = cc.quote.as_deref().filter(|q| !q.trim().is_empty()) else {
        return;
    };
    let src = &idx.sources[si];
    match src.text.find(quote) {
        Some(b) => {
            let start = text::char_offset(src.text, b);
            let c = Citation {
                source_id: src.id.to_string(),
                quote: quote.to_string(),
                start,
                end: start + quote.chars().count(),
            };
            if !citations.contains(&c) {
                citations.push(c);
            }
        }
        None => reasons.push(Reason::CitationNotFound),
    }
}

/// Groups sorted unit ids into runs of adjacent units of one source.
fn runs(idx: &Index<'_>, units: &[usize]) -> Vec<Passage> {
    let mut out: Vec<Passage> = Vec::new();
    for &u in units {
        match out.last_mut() {
            Some(p) if p.last + 1 == u && idx.units[p.last].source == idx.units[u].source => {
                p.last = u
            }
            _ => out.push(Passage { first: u, last: u }),
        }
    }
    out
}

fn passage_citation(idx: &Index<'_>, p: Passage) -> Citation {
    let (first, last) = (&idx.units[p.first], &idx.units[p.last]);
    let src = &idx.sources[first.source];
    let quote = src.text.get(first.start..last.end).unwrap_or("");
    let start = text::char_offset(src.text, first.start);
    Citation {
        source_id: src.id.to_string(),
        quote: quote.to_string(),
        start,
        end: start + quote.chars().count(),
    }
}

#[cfg(test)]
mod tests;
