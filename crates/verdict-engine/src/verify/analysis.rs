//! A claim read once against the request's index: its terms and their
//! weights, its quantities, the clauses it joins, the parts the evidence may
//! miss, and the names and negations in it.

use super::*;

/// Reads `claim` once against the request's index: everything the checks ask of it.
pub(super) fn analyse(claim: &str, idx: &Index<'_>) -> Analysis {
    let tokens = text::tokenize(claim, &idx.stemmer);
    let vocab = idx.stemmer.vocab();
    let mut qty = numbers::extract(&tokens, &vocab);
    numbers::resolve_dates(&mut qty, idx.date_order);
    let in_qty = quantity_tokens(&qty, &tokens, &vocab);
    let max_idf = idx.idf(None);
    let not_name = name_exemptions(claim, &tokens, &vocab);
    let words = claim_words(claim, &tokens, &vocab, idx, &in_qty, &not_name);
    let ClaimWords {
        terms,
        forms,
        negated,
        polarity,
    } = words;
    let qty = claim_quantities(claim, qty, &tokens, &vocab, &in_qty, max_idf);
    let total =
        terms.iter().map(|t| t.weight).sum::<f64>() + qty.iter().map(|q| q.weight).sum::<f64>();
    let hedge = conflict::claim_hedged(&tokens, &vocab);
    let done = conflict::claim_reports_done(&tokens, &vocab);
    let event = conflict::reported_event(&tokens, &vocab);
    let clauses = clause_stems(claim, &tokens, &vocab);
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
    let excepts = has_exception(&tokens, &vocab);
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
        tokens,
        total,
        related,
    }
}

/// Per token: inside a quantity, or the approximator just before one.
fn quantity_tokens(qty: &[Quantity], tokens: &[Token], vocab: &text::Vocab) -> Vec<bool> {
    let mut in_qty = vec![false; tokens.len()];
    for q in qty {
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
    in_qty
}

/// What the claim's words give [`Analysis`]: terms, their forms, negation and polarity.
struct ClaimWords {
    terms: Vec<Term>,
    /// Each term's form, for its derivational relatives.
    forms: Vec<String>,
    negated: bool,
    polarity: Vec<(u32, bool)>,
}

/// Reads the claim's words: one weighted term per content stem, and each stem's polarity.
fn claim_words(
    claim: &str,
    tokens: &[Token],
    vocab: &text::Vocab,
    idx: &Index<'_>,
    in_qty: &[bool],
    not_name: &[bool],
) -> ClaimWords {
    // Long claims (caller input, possibly huge) use hash maps so analysis
    // stays linear; short ones scan small vectors, which avoids allocating
    // maps for the common 10-30 word claim. `HashMap::new` does not allocate
    // until the first insert, and short claims never insert.
    let long = tokens.len() > 48;
    let mut polarity = Polarities::new(long, tokens.len());
    let mut terms = Terms::new(long, tokens.len());
    let mut negated = false;
    for (i, tok) in tokens.iter().enumerate() {
        if negates(tokens, vocab, i) {
            negated |= tokens.get(i + 1).is_none_or(|n| !n.lex.only);
            continue;
        }
        let stop = tok.lex.stopword;
        if !stop {
            polarity.record(tok.stem_id, polarity_of(claim, tokens, vocab, i));
        }
        if in_qty[i] || stop || terms.has(tok.stem_id) {
            continue;
        }
        let name = is_name(claim, tokens, vocab, idx, i) && !not_name[i];
        // Ids of words no source contains match nothing: no postings, in
        // no unit's sorted id lists.
        let term = Term {
            surf: Some(tok.norm_id),
            stem: Some(tok.stem_id),
            weight: term_weight(tok, name, vocab, idx),
            name,
            span: (tok.start, tok.end),
        };
        terms.push(vocab.norm(tok.norm_id), term);
    }
    ClaimWords {
        terms: terms.terms,
        forms: terms.forms,
        negated,
        polarity: polarity.single(),
    }
}

/// Whether token `i` is checked as a name (before quote and acronym exemptions).
#[inline]
fn is_name(claim: &str, tokens: &[Token], vocab: &text::Vocab, idx: &Index<'_>, i: usize) -> bool {
    let tok = &tokens[i];
    // A capitalised first word is a name only when it is possessive
    // ("Jordan's account"): otherwise the capital is the sentence's.
    let possessive = conflict::possessive(claim, tok);
    (i > 0 || possessive || first_word_name(tokens, vocab, idx))
        && tok.capitalized
        && tok.kind == TokenKind::Word
        && vocab.norm(tok.norm_id).chars().count() > 1
        && tok.lex.month.is_none()
}

/// A term's weight: its IDF, raised for a name, lowered for a party the evidence leaves implicit.
#[inline]
fn term_weight(tok: &Token, name: bool, vocab: &text::Vocab, idx: &Index<'_>) -> f64 {
    let stem = Some(tok.stem_id);
    let mut weight = idx.idf(stem);
    if name {
        weight *= tune::NAME_WEIGHT;
    } else if idx.df(stem) == 0 && text::is_party(vocab.norm(tok.norm_id)) && !idx.names_party() {
        // "The customer was charged $100" against an invoice that
        // names nobody: the party is implicit in the record, not
        // missing from it. A source that names a party keeps the word
        // at full weight, so "customer" against "the merchant" counts.
        weight *= tune::UNNAMED_PARTY;
    }
    weight
}

/// The claim's terms so far (one per stem) and each term's form.
struct Terms {
    long: bool,
    /// The stems of `terms`, for long claims.
    seen: HashSet<u32>,
    terms: Vec<Term>,
    forms: Vec<String>,
}

impl Terms {
    /// No terms yet, with room for `cap`; `long` claims look stems up in a set.
    fn new(long: bool, cap: usize) -> Self {
        // Sized up front (at most one term per token): these grew by
        // doubling for every claim.
        Terms {
            long,
            seen: HashSet::default(),
            terms: Vec::with_capacity(cap),
            forms: Vec::with_capacity(cap),
        }
    }

    /// Whether a term has `stem` already; a long claim records it as seen.
    #[inline]
    fn has(&mut self, stem: u32) -> bool {
        if self.long {
            !self.seen.insert(stem)
        } else {
            self.terms.iter().any(|t| t.stem == Some(stem))
        }
    }

    /// Adds `term`, whose form is `form`.
    #[inline]
    fn push(&mut self, form: &str, term: Term) {
        self.forms.push(form.to_string());
        self.terms.push(term);
    }
}

/// Each content stem's polarity in the claim, and the stems with no single polarity.
struct Polarities {
    long: bool,
    /// (stem, negated), in order of first mention.
    polarity: Vec<(u32, bool)>,
    /// Stem → its index in `polarity`, for long claims.
    polarity_at: HashMap<u32, usize>,
    /// Stems with no single polarity: a set for long claims, a list for short.
    mixed: HashSet<u32>,
    mixed_short: Vec<u32>,
}

impl Polarities {
    /// No stems yet, with room for `cap`; `long` claims look stems up in maps.
    fn new(long: bool, cap: usize) -> Self {
        // Sized up front (at most one polarity per token).
        Polarities {
            long,
            polarity: Vec::with_capacity(cap),
            polarity_at: HashMap::default(),
            mixed: HashSet::default(),
            mixed_short: Vec::new(),
        }
    }

    /// Records one mention of `stem` with polarity `pol`.
    #[inline]
    fn record(&mut self, stem: u32, pol: Polarity) {
        let neg = pol == Polarity::Negated;
        let at = if self.long {
            self.polarity_at.get(&stem).copied()
        } else {
            self.polarity.iter().position(|&(s, _)| s == stem)
        };
        match at {
            // After an implicit negator, or mentioned with both
            // polarities: no single polarity to compare.
            _ if pol == Polarity::Unclear => self.mark_mixed(stem),
            None => {
                if self.long {
                    self.polarity_at.insert(stem, self.polarity.len());
                }
                self.polarity.push((stem, neg));
            }
            Some(k) if self.polarity[k].1 != neg => self.mark_mixed(stem),
            Some(_) => {}
        }
    }

    /// Marks `stem` as having no single polarity.
    #[inline]
    fn mark_mixed(&mut self, stem: u32) {
        if self.long {
            self.mixed.insert(stem);
        } else {
            self.mixed_short.push(stem);
        }
    }

    /// (stem, negated) for the stems with one polarity throughout.
    fn single(mut self) -> Vec<(u32, bool)> {
        let (mixed, mixed_short) = (&self.mixed, &self.mixed_short);
        self.polarity
            .retain(|(s, _)| !mixed.contains(s) && !mixed_short.contains(s));
        self.polarity
    }
}

/// The claim's quantities, weighted against the rarest word, with their byte spans.
fn claim_quantities(
    claim: &str,
    qty: Vec<Quantity>,
    tokens: &[Token],
    vocab: &text::Vocab,
    in_qty: &[bool],
    max_idf: f64,
) -> Vec<ClaimQty> {
    // A value in a range ("from $100 to $500", "15-20") is one end of a
    // span, not the value of an event.
    let joins = |a: &Quantity, b: &Quantity| {
        b.tok_start == a.tok_end
            || (b.tok_start == a.tok_end + 1
                && tokens.get(a.tok_end).is_some_and(|t| {
                    matches!(vocab.norm(t.norm_id), "to" | "and" | "or" | "through")
                }))
    };
    // Quantities come in token order: only neighbours can form a range.
    let ranged = |i: usize| {
        let q = &qty[i];
        i.checked_sub(1).is_some_and(|p| joins(&qty[p], q))
            || qty.get(i + 1).is_some_and(|n| joins(q, n))
    };
    let bindings: Vec<conflict::Binding> = qty
        .iter()
        .enumerate()
        .map(|(i, q)| {
            if ranged(i) {
                conflict::Binding::default()
            } else {
                conflict::bind(claim, q, tokens, vocab, in_qty)
            }
        })
        .collect();
    qty.into_iter()
        .zip(bindings)
        .map(|(q, binding)| ClaimQty {
            binding,
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
        .collect()
}

/// Each clause's content stems, sorted and deduplicated.
fn clause_stems(claim: &str, tokens: &[Token], vocab: &text::Vocab) -> Vec<Vec<u32>> {
    conflict::clauses(claim, tokens, vocab)
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
        .collect()
}

/// Whether the claim has an exception of its own ("except", "excluding", "only").
fn has_exception(tokens: &[Token], vocab: &text::Vocab) -> bool {
    tokens.iter().any(|t| {
        matches!(
            vocab.norm(t.norm_id),
            "except" | "excluding" | "exclude" | "excludes" | "only" | "excepting"
        )
    })
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
pub(super) fn part_missing(a: &Analysis, idx: &Index<'_>, set: &EvidenceSet) -> bool {
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
                .any(|&u| idx.has_stem(&idx.units[u], t.stem))
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
pub(super) fn negates(toks: &[Token], vocab: &text::Vocab, k: usize) -> bool {
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
