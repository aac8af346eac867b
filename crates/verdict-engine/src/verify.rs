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
mod antonyms;
mod conflict;
mod derive;

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

fn analyse(claim: &str, idx: &Index<'_>) -> Analysis {
    let tokens = text::tokenize(claim, &idx.stemmer);
    let vocab = idx.stemmer.vocab();
    let mut qty = numbers::extract(&tokens, &vocab);
    numbers::resolve_dates(&mut qty, idx.date_order);
    let mut in_qty = vec![false; tokens.len()];
    for q in &qty {
        for flag in in_qty.iter_mut().take(q.tok_end).skip(q.tok_start) {
            *flag = true;
        }
        // "roughly 7 million": the approximator belongs to the number,
        // which is compared with tolerance, not to the words to align.
        let before = q.tok_start.checked_sub(1);
        if let Some(k) = before.filter(|&k| numbers::is_approx(vocab.norm(tokens[k].norm_id))) {
            in_qty[k] = true;
        }
    }
    let max_idf = idx.idf(None);
    let not_name = name_exemptions(claim, &tokens, &vocab);
    // Sized up front (at most one term and one polarity per token): these
    // grew by doubling for every claim.
    let mut terms: Vec<Term> = Vec::with_capacity(tokens.len());
    let mut negated = false;
    let mut polarity: Vec<(u32, bool)> = Vec::with_capacity(tokens.len());
    // Long claims (caller input, possibly huge) use hash maps so analysis
    // stays linear; short ones scan small vectors, which avoids allocating
    // maps for the common 10-30 word claim. `HashMap::new` does not allocate
    // until the first insert, and short claims never insert.
    let long = tokens.len() > 48;
    let mut polarity_at: HashMap<u32, usize> = HashMap::default();
    let mut mixed: HashSet<u32> = HashSet::default();
    let mut mixed_short: Vec<u32> = Vec::new();
    let mut seen: HashSet<u32> = HashSet::default();
    // Each term's form, for its derivational relatives.
    let mut forms: Vec<String> = Vec::with_capacity(tokens.len());
    for (i, tok) in tokens.iter().enumerate() {
        if negates(&tokens, &vocab, i) {
            negated |= tokens.get(i + 1).is_none_or(|n| !n.lex.only);
            continue;
        }
        let stop = tok.lex.stopword;
        if !stop {
            let pol = polarity_of(claim, &tokens, &vocab, i);
            let neg = pol == Polarity::Negated;
            let at = if long {
                polarity_at.get(&tok.stem_id).copied()
            } else {
                polarity.iter().position(|&(s, _)| s == tok.stem_id)
            };
            match at {
                // After an implicit negator, or mentioned with both
                // polarities: no single polarity to compare.
                _ if pol == Polarity::Unclear => {
                    if long {
                        mixed.insert(tok.stem_id);
                    } else {
                        mixed_short.push(tok.stem_id);
                    }
                }
                None => {
                    if long {
                        polarity_at.insert(tok.stem_id, polarity.len());
                    }
                    polarity.push((tok.stem_id, neg));
                }
                Some(k) if polarity[k].1 != neg => {
                    if long {
                        mixed.insert(tok.stem_id);
                    } else {
                        mixed_short.push(tok.stem_id);
                    }
                }
                Some(_) => {}
            }
        }
        if in_qty[i] || stop {
            continue;
        }
        let dup = if long {
            !seen.insert(tok.stem_id)
        } else {
            terms.iter().any(|t| t.stem == Some(tok.stem_id))
        };
        if dup {
            continue;
        }
        // Ids of words no source contains match nothing: no postings, in
        // no unit's sorted id lists.
        let stem = Some(tok.stem_id);
        let surf = Some(tok.norm_id);
        // A capitalised first word is a name only when it is possessive
        // ("Jordan's account"): otherwise the capital is the sentence's.
        let possessive = conflict::possessive(claim, tok);
        let name = (i > 0 || possessive || first_word_name(&tokens, &vocab, idx))
            && tok.capitalized
            && tok.kind == TokenKind::Word
            && vocab.norm(tok.norm_id).chars().count() > 1
            && tok.lex.month.is_none()
            && !not_name[i];
        let mut weight = idx.idf(stem);
        if name {
            weight *= tune::NAME_WEIGHT;
        } else if idx.df(stem) == 0 && text::is_party(vocab.norm(tok.norm_id)) && !idx.names_party()
        {
            // "The customer was charged $100" against an invoice that
            // names nobody: the party is implicit in the record, not
            // missing from it. A source that names a party keeps the word
            // at full weight, so "customer" against "the merchant" counts.
            weight *= tune::UNNAMED_PARTY;
        }
        forms.push(vocab.norm(tok.norm_id).to_string());
        terms.push(Term {
            surf,
            stem,
            weight,
            name,
            span: (tok.start, tok.end),
        });
    }
    polarity.retain(|(s, _)| !mixed.contains(s) && !mixed_short.contains(s));
    let qty: Vec<ClaimQty> = qty
        .into_iter()
        .map(|q| ClaimQty {
            weight: if q.soft {
                max_idf
            } else {
                max_idf * tune::QTY_WEIGHT
            },
            span: (
                tokens.get(q.tok_start).map_or(0, |t| t.start),
                q.tok_end
                    .checked_sub(1)
                    .and_then(|k| tokens.get(k))
                    .map_or(0, |t| t.end),
            ),
            q,
        })
        .collect();
    let total =
        terms.iter().map(|t| t.weight).sum::<f64>() + qty.iter().map(|q| q.weight).sum::<f64>();
    let hedge = conflict::claim_hedged(&tokens, &vocab);
    let done = conflict::claim_reports_done(&tokens, &vocab);
    let event = conflict::reported_event(&tokens, &vocab);
    let clauses: Vec<Vec<u32>> = conflict::clauses(claim, &tokens, &vocab)
        .into_iter()
        .map(|c| {
            let mut v: Vec<u32> = c
                .iter()
                .filter(|t| !t.lex.stopword)
                .map(|t| t.stem_id)
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        })
        .collect();
    let parts = conjuncts(claim, &tokens, &vocab);
    let qty_stems: Vec<u32> = tokens
        .iter()
        .zip(&in_qty)
        .filter(|(t, &q)| q && t.kind == TokenKind::Number)
        .map(|(t, _)| t.stem_id)
        .collect();
    let mut clause_all: Vec<u32> = clauses.iter().flatten().copied().collect();
    clause_all.sort_unstable();
    clause_all.dedup();
    let universal = tokens
        .iter()
        .any(|t| conflict::is_universal(vocab.norm(t.norm_id)));
    let excepts = tokens.iter().any(|t| {
        matches!(
            vocab.norm(t.norm_id),
            "except" | "excluding" | "exclude" | "excludes" | "only" | "excepting"
        )
    });
    drop(vocab);
    let related = related_stems(&terms, &forms, idx);
    Analysis {
        terms,
        qty,
        negated,
        polarity,
        hedge,
        done,
        event,
        clauses,
        clause_all,
        parts,
        qty_stems,
        universal,
        excepts,
        text: claim.to_string(),
        total,
        related,
    }
}

/// (stem id, term index) for each derivational form ([`derive::related`])
/// of a term's form that some unit holds, for the terms no unit holds,
/// unless a term has that stem itself. Names are not derived.
fn related_stems(terms: &[Term], forms: &[String], idx: &Index<'_>) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for (k, (t, form)) in terms.iter().zip(forms).enumerate() {
        // A word some source holds aligns as itself; a derivational form
        // is looked for only when it does not.
        if t.name || idx.df(t.stem) > 0 {
            continue;
        }
        for r in derive::related(form) {
            let s = idx.stemmer.word(r).stem_id;
            let own = terms.iter().any(|t| t.stem == Some(s));
            if !own && idx.df(Some(s)) > 0 && !out.iter().any(|&(x, _)| x == s) {
                out.push((s, u32::try_from(k).unwrap_or(u32::MAX)));
            }
        }
    }
    out
}

/// The claim split at "and", "but", "while" and ";" into parts of at
/// least two content words each (a shorter piece joins the part before
/// it: "cats and dogs" is one part). Empty when there is only one part.
fn conjuncts(claim: &str, tokens: &[Token], vocab: &text::Vocab) -> Vec<Vec<u32>> {
    let mut parts: Vec<Vec<u32>> = Vec::new();
    let mut cur: Vec<u32> = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let gap = i
            .checked_sub(1)
            .and_then(|j| claim.get(tokens[j].end..t.start))
            .unwrap_or("");
        // Not at a bare comma: "According to our records, ..." is a
        // preamble, not a second statement.
        let joint = matches!(vocab.norm(t.norm_id), "and" | "but" | "while") || gap.contains(';');
        if joint && cur.len() >= 2 {
            parts.push(std::mem::take(&mut cur));
        }
        if !t.lex.stopword && t.kind == TokenKind::Word {
            cur.push(t.stem_id);
        }
    }
    match parts.last_mut() {
        Some(last) if cur.len() < 2 => last.append(&mut cur),
        _ => parts.push(cur),
    }
    if parts.len() < 2 {
        return Vec::new();
    }
    parts
}

/// Whether some part of the claim is barely in the evidence set: less
/// than `tune::MIN_PART` of its words' weight. Coverage averages over
/// the whole claim, so a claim that adds an unsupported conjunct to a
/// supported one can still reach the bar.
fn part_missing(a: &Analysis, idx: &Index<'_>, set: &EvidenceSet) -> bool {
    a.parts.iter().any(|part| {
        let (mut have, mut all) = (0.0, 0.0);
        for t in a
            .terms
            .iter()
            .filter(|t| t.stem.is_some_and(|s| part.contains(&s)))
        {
            all += t.weight;
            if set
                .units
                .iter()
                .any(|&u| contains(idx.stems(&idx.units[u]), t.stem))
            {
                have += t.weight;
            }
        }
        all > 0.0 && have < tune::MIN_PART * all
    })
}

/// Whether the claim's capitalised first word is a name rather than a
/// capital the sentence start gives any word: a source capitalises it
/// inside a sentence ("... ; Priya is still waiting"), or no source has it
/// and a verb of the event follows it ("Kevin approved the request").
fn first_word_name(tokens: &[Token], vocab: &text::Vocab, idx: &Index<'_>) -> bool {
    let Some(first) = tokens.first() else {
        return false;
    };
    if !first.capitalized || first.lex.stopword || first.kind != TokenKind::Word {
        return false;
    }
    if idx.capitalised_inside(first.norm_id) {
        return true;
    }
    let norm = vocab.norm(first.norm_id);
    idx.df(Some(first.stem_id)) == 0
        && !norm.ends_with('s')
        && tokens.get(1).is_some_and(|n| {
            conflict::reports_event_at(tokens, vocab, 1)
                || n.lex.stopword && matches!(vocab.norm(n.norm_id), "was" | "has" | "had")
        })
}

/// Whether token `k` negates what follows: a negator, except a verb of
/// refusal or failure that is not followed by "to" ("the login failed"
/// asserts a failure; "failed to pay" denies a payment).
fn negates(toks: &[Token], vocab: &text::Vocab, k: usize) -> bool {
    let t = &toks[k];
    t.lex.negator
        && (!t.lex.content_negator
            || toks
                .get(k + 1)
                .is_some_and(|n| vocab.norm(n.norm_id) == "to"))
}

/// Capitalised words that are not checked as names: words inside quotes
/// (titles, UI labels such as "Export") and the spelled-out form before a
/// parenthesised acronym ("Bureau of Labor Statistics (BLS)"), where the
/// acronym itself is the name to look for.
fn name_exemptions(claim: &str, tokens: &[Token], vocab: &text::Vocab) -> Vec<bool> {
    let mut out = vec![false; tokens.len()];
    // Without a quote mark or an opening parenthesis nothing is exempt; most
    // claims have neither, and the scan below costs per token.
    if !claim.contains(['"', '“', '”', '(']) {
        return out;
    }
    let mut quotes = 0usize;
    let mut scanned = 0usize;
    for (i, t) in tokens.iter().enumerate() {
        // Count quote marks incrementally: linear in the claim length.
        quotes += claim
            .get(scanned..t.start)
            .unwrap_or("")
            .matches(['"', '“', '”'])
            .count();
        scanned = t.start.max(scanned);
        let before = claim.get(..t.start).unwrap_or("");
        if quotes % 2 == 1 {
            out[i] = true;
        }
        let surface = claim.get(t.start..t.end).unwrap_or("");
        let acronym = (2..=6).contains(&surface.len())
            && surface.chars().all(|c| c.is_ascii_uppercase())
            && before.ends_with('(');
        if acronym {
            let mut k = i;
            let mut left = surface.len() + 2;
            while k > 0 && left > 0 {
                k -= 1;
                left -= 1;
                let tk = &tokens[k];
                let joiner = matches!(vocab.norm(tk.norm_id), "of" | "and" | "the" | "for" | "on");
                if !(tk.capitalized || joiner) {
                    break;
                }
                out[k] = true;
            }
        }
    }
    out
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

/// How well one unit matches each claim item (terms, then quantities):
/// 3 = exact surface or backed quantity, 2 = stem only, 1 = a derivational
/// form (`Analysis::related`), 0 = absent. Computed
/// once per unit and claim, so scoring a set of units is a max over rows.
/// Appends one row to `out`.
///
/// One pass over the unit's tokens: a token whose stem is a term's stem
/// matches it by stem, and by surface when its form is the term's form too
/// (same form implies same stem, so no surface match is missed).
fn unit_levels(lv: &Levels<'_, '_>, u: usize, out: &mut Vec<u8>) {
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

impl<'a, 'b> Levels<'a, 'b> {
    fn new(a: &'a Analysis, idx: &'a Index<'b>) -> Self {
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
    fn row(&mut self, u: usize) -> usize {
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
    fn passage_coverage(&mut self, p: Passage) -> f64 {
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
    fn coverage(&mut self, units: impl Iterator<Item = usize>) -> f64 {
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
fn complete(lv: &mut Levels<'_, '_>, best: Passage, cands: &[usize]) -> (EvidenceSet, f64) {
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

/// BM25 over the allowed units, then coverage on the best candidates as single
/// units and adjacent pairs. Returns passages by coverage, best first, with
/// ties broken by position in the id-sorted index.
fn rank(lv: &mut Levels<'_, '_>, allowed: &[bool]) -> (Vec<(Passage, f64)>, Vec<usize>) {
    let (a, idx) = (lv.a, lv.idx);
    let mut score = vec![0.0f64; idx.units.len()];
    for t in &a.terms {
        let Some(s) = t.stem else { continue };
        for &u in idx.posting(s) {
            let unit = &idx.units[u as usize];
            if !allowed[unit.source] {
                continue;
            }
            score[u as usize] += t.weight * (tune::K1 + 1.0) / (1.0 + tune::K1 * unit.norm);
        }
    }
    for &(s, k) in &a.related {
        let Some(t) = a.terms.get(k as usize) else {
            continue;
        };
        let w = t.weight * tune::RELATED_MATCH;
        for &u in idx.posting(s) {
            let unit = &idx.units[u as usize];
            if allowed[unit.source] {
                score[u as usize] += w * (tune::K1 + 1.0) / (1.0 + tune::K1 * unit.norm);
            }
        }
    }
    if !a.qty.is_empty() {
        // Which units back which claim quantity, kept for the rows.
        let track = a.qty.len() <= 64;
        if track {
            lv.qty_bits = vec![0; idx.units.len()];
            lv.qty_filled = allowed.to_vec();
            // Claim quantity by claim quantity; a unit still gets its
            // weights in claim order, so every score is the same sum.
            for (k, cq) in a.qty.iter().enumerate() {
                qty_score(lv, allowed, k, cq, &mut score);
            }
        } else {
            for (ui, uq) in idx.allowed_unit_qty(allowed) {
                for cq in &a.qty {
                    if uq.iter().any(|e| numbers::backs(&cq.q, e)) {
                        score[ui] += cq.weight;
                    }
                }
            }
        }
    }
    // Best score first, ties by unit id: a total order, so keeping the top
    // few in order while scanning gives the same list as a full sort. Units
    // come in id order, so a tie never displaces an earlier unit; only a
    // unit that beats the current last one is inserted (a select plus sort
    // over every scored unit cost more than the rest of ranking).
    let mut cands: Vec<usize> = Vec::with_capacity(tune::CANDIDATES + 1);
    for (u, &s) in score.iter().enumerate() {
        if s <= 0.0 || s.is_nan() {
            continue;
        }
        if cands.len() == tune::CANDIDATES {
            match cands.last() {
                Some(&last) if s > score[last] => {}
                _ => continue,
            }
            cands.pop();
        }
        let at = cands.partition_point(|&c| score[c] >= s);
        cands.insert(at, u);
    }

    let mut out: Vec<(Passage, f64)> = Vec::with_capacity(cands.len());
    for &u in &cands {
        let unit = &idx.units[u];
        let src = &idx.sources[unit.source];
        let single = Passage { first: u, last: u };
        let mut best = (single, lv.passage_coverage(single));
        for p in [
            (u > src.unit_start).then(|| Passage {
                first: u - 1,
                last: u,
            }),
            (u + 1 < src.unit_end).then_some(Passage {
                first: u,
                last: u + 1,
            }),
        ]
        .into_iter()
        .flatten()
        {
            let c = lv.passage_coverage(p);
            if c * tune::PAIR_FACTOR > best.1 {
                best = (p, c);
            }
        }
        if best.1 > 0.0 && !out.iter().any(|(p, _)| *p == best.0) {
            out.push(best);
        }
    }
    out.sort_by(|x, y| {
        y.1.total_cmp(&x.1)
            .then((x.0.last - x.0.first).cmp(&(y.0.last - y.0.first)))
            .then(x.0.first.cmp(&y.0.first))
            .then(x.0.last.cmp(&y.0.last))
    });
    (out, cands)
}

/// Adds claim quantity `k`'s weight to the score of every unit of an allowed
/// source that backs it, and sets bit `k` of those units' `qty_bits` (which
/// must be sized; `k < 64`).
///
/// A number, amount or percentage is backed only by a value within 10 % of
/// it (`numbers::backs` compares values, with a relative tolerance of at most
/// 0.1, or a year-only date's year), so only quantities whose value lies in
/// a window of ±20 % around it (plus 1e-6 for values near zero) are tested.
/// Dates, counts with a unit, and any non-finite value, test every quantity.
fn qty_score(
    lv: &mut Levels<'_, '_>,
    allowed: &[bool],
    k: usize,
    cq: &ClaimQty,
    score: &mut [f64],
) {
    let idx = lv.idx;
    let bit = 1u64.checked_shl(k as u32).unwrap_or(0);
    let mut mark = |ui: usize, bits: &mut [u64]| {
        if let Some(b) = bits.get_mut(ui) {
            if *b & bit == 0 {
                *b |= bit;
                score[ui] += cq.weight;
            }
        }
    };
    let v = cq.q.value;
    // A count with a unit may be backed by another unit's value ("2 weeks"
    // by "14 days"): outside the window, so every quantity is tested.
    if cq.q.kind != QtyKind::Date && cq.q.unit.is_none() && v.is_finite() && idx.values_finite {
        let (lo, hi) = (v - 0.2 * v.abs() - 1e-6, v + 0.2 * v.abs() + 1e-6);
        let from = idx.by_value.partition_point(|x| x.0 < lo);
        for &(value, ui, qi) in idx.by_value.get(from..).unwrap_or(&[]) {
            if value > hi {
                break;
            }
            let ui = ui as usize;
            let Some(unit) = idx.units.get(ui) else {
                continue;
            };
            if !allowed[unit.source] {
                continue;
            }
            let e = idx.sources[unit.source].qty.get(qi as usize);
            if e.is_some_and(|e| numbers::backs(&cq.q, e)) {
                mark(ui, &mut lv.qty_bits);
            }
        }
        return;
    }
    for (ui, uq) in idx.allowed_unit_qty(allowed) {
        if uq.iter().any(|e| numbers::backs(&cq.q, e)) {
            mark(ui, &mut lv.qty_bits);
        }
    }
}

/// Contradiction gates on the chosen passage.
fn gates(
    a: &Analysis,
    idx: &Index<'_>,
    allowed: &[bool],
    set: &EvidenceSet,
    primary: Passage,
    coverage: f64,
    reasons: &mut Vec<Reason>,
) -> Option<Conflict> {
    let units: Vec<&Unit> = set.units.iter().map(|&u| &idx.units[u]).collect();
    let pq: Vec<&Quantity> = units.iter().flat_map(|u| idx.unit_qty(u)).collect();
    let backed_anywhere = |cq: &Quantity| {
        idx.units
            .iter()
            .filter(|u| allowed[u.source])
            .any(|u| idx.unit_qty(u).iter().any(|e| numbers::backs(cq, e)))
    };
    for cq in &a.qty {
        if pq.iter().any(|e| numbers::backs(&cq.q, e)) {
            continue;
        }
        let rival = pq.iter().any(|e| {
            numbers::conflicts(&cq.q, e)
                && !a
                    .qty
                    .iter()
                    .any(|c2| numbers::backs(&c2.q, e) || numbers::consistent(&c2.q, e))
        });
        if rival {
            reasons.push(match cq.q.kind {
                QtyKind::Date => Reason::DateMismatch,
                QtyKind::Money => Reason::AmountMismatch,
                QtyKind::Count | QtyKind::Percent => Reason::NumberMismatch,
            });
        } else if !cq.q.soft && !backed_anywhere(&cq.q) {
            reasons.push(Reason::NumberNotFound);
        }
    }
    for t in a.terms.iter().filter(|t| t.name) {
        let in_passage = units.iter().any(|u| contains(idx.stems(u), t.stem));
        if in_passage {
            continue;
        }
        let anywhere = t.stem.is_some_and(|s| {
            idx.posting(s)
                .iter()
                .any(|&u| allowed[idx.units[u as usize].source])
        });
        if !anywhere {
            reasons.push(Reason::NameMissing);
            break;
        }
    }
    // A claim of two or more parts ("the courier tried twice, and the
    // parcel is at the depot") may rest on a sentence the completion added
    // for one part; every sentence of the evidence set is read then. A
    // one-part claim is judged on the passage that carries it.
    let primary_units: Vec<usize> = primary.units().collect();
    let units = if a.parts.is_empty() {
        &primary_units
    } else {
        &set.units
    };
    let found = conflict::find(a, idx, units, coverage, &a.text);
    if let Some((r, _)) = &found {
        reasons.push(*r);
    }
    found.and_then(|(_, c)| c)
}

/// How a content token stands with respect to negation.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Polarity {
    Positive,
    /// Denied by an explicit negator ("not", "no", "never", "n't", "non-").
    Negated,
    /// Governed by an implicit negator ("avoid", "without", "fail", ...):
    /// "avoid using high pressure" neither asserts nor denies "using" the way
    /// "do not use high pressure" does, so it is not compared.
    Unclear,
}

/// Negators that deny the word they govern outright.
fn is_explicit_negator(norm: &str) -> bool {
    matches!(
        norm,
        "not"
            | "no"
            | "non"
            | "never"
            | "unable"
            | "cannot"
            | "nor"
            | "neither"
            | "none"
            | "nothing"
            | "nobody"
            | "nowhere"
    )
}

/// Polarity of token `i`. A negator governs only the first content word
/// after it ("do not use a high pressure hose" denies "use", not "high" or
/// "hose"), at most `NEG_WINDOW` tokens away with no clause punctuation in
/// between; only stopwords may come between. "not only" is not a negation.
/// Scoping every word within the window flagged faithful paraphrases whose
/// word order differs from the source ("no risk of spring frost" against
/// "all danger of spring frost has passed").
fn polarity_of(text: &str, toks: &[Token], vocab: &text::Vocab, i: usize) -> Polarity {
    // Adverbs of time between a negator and its word ("is not now at the
    // depot", "was not yet shipped") neither end its scope nor use it up.
    let mut budget = tune::NEG_WINDOW;
    let mut k = i;
    while budget > 0 && k > 0 {
        k -= 1;
        let norm = vocab.norm(toks[k].norm_id);
        if matches!(
            norm,
            "now" | "yet" | "still" | "currently" | "already" | "ever"
        ) {
            continue;
        }
        budget -= 1;
        // "out of stock", "out of warranty"; "rather than the card",
        // "instead of a refund": the word is what is not the case.
        let pair = k
            .checked_sub(1)
            .map(|j| (vocab.norm(toks[j].norm_id), norm));
        if matches!(
            pair,
            Some(("out", "of") | ("rather", "than") | ("instead", "of"))
        ) && text
            .get(toks[k].end..toks[i].start)
            .is_some_and(|gap| !gap.contains([',', '.', ';', ':', '(', ')', '!', '?', '"']))
        {
            return Polarity::Negated;
        }
        // "no longer active": "longer" belongs to the negator.
        if norm == "longer" && k > 0 && vocab.norm(toks[k - 1].norm_id) == "no" {
            continue;
        }
        if negates(toks, vocab, k) {
            let scoped = toks.get(k + 1).is_none_or(|n| !n.lex.only)
                && text.get(toks[k].end..toks[i].start).is_some_and(|gap| {
                    !gap.contains([',', '.', ';', ':', '(', ')', '!', '?', '"'])
                });
            return match (scoped, is_explicit_negator(norm)) {
                (false, _) => Polarity::Positive,
                (true, true) => Polarity::Negated,
                (true, false) => Polarity::Unclear,
            };
        }
        if !toks[k].lex.stopword {
            return Polarity::Positive;
        }
    }
    Polarity::Positive
}

#[cfg(test)]
mod tests;
