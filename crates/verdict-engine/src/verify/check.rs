//! One claim's check: the sources it may be checked against, the passages
//! ranked for it and the evidence set, then its status, reasons, citations
//! and evidence.

use super::*;

/// Checks one claim against the sources it may be checked against.
pub(super) fn check_claim(claim: &Claim, idx: &Index<'_>, params: &Params) -> Check {
    let mut reasons: Vec<Reason> = Vec::new();
    let mut conflicts: Vec<Conflict> = Vec::new();
    let mut citations: Vec<Citation> = Vec::new();
    let allowed = searchable_sources(claim, idx, &mut citations, &mut reasons);
    let a = analyse(&claim.text, idx);
    let Found {
        best,
        ranked,
        unaligned,
    } = find_evidence(&a, idx, &allowed, &mut reasons);
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
            cite_passages(idx, &set.units, &mut citations);
        }
    }
    let evidence = evidence_snippets(idx, &ranked, params.evidence_limit);
    reasons.sort_unstable();
    reasons.dedup();
    let unaligned = if status == ClaimStatus::Supported {
        Vec::new()
    } else {
        claim_spans(&claim.text, unaligned)
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

/// Which sources the claim may be checked against: all, or the ones it cites.
fn searchable_sources(
    claim: &Claim,
    idx: &Index<'_>,
    citations: &mut Vec<Citation>,
    reasons: &mut Vec<Reason>,
) -> Vec<bool> {
    if claim.citations.is_empty() {
        if !idx.unavailable.is_empty() && idx.sources.is_empty() {
            reasons.push(Reason::SourceUnavailable);
        }
        vec![true; idx.sources.len()]
    } else {
        let mut allowed = vec![false; idx.sources.len()];
        for cc in &claim.citations {
            resolve_citation(cc, idx, &mut allowed, citations, reasons);
        }
        allowed
    }
}

/// What ranking found for a claim.
struct Found {
    /// The evidence set and its coverage, when any passage ranked.
    best: Option<(EvidenceSet, f64)>,
    ranked: Vec<(Passage, f64)>,
    /// Byte ranges of the claim items nothing in the evidence set aligns
    /// with, sorted.
    unaligned: Vec<(usize, usize)>,
}

/// Ranks the allowed sources' passages for the claim and completes the best into an evidence set.
fn find_evidence(
    a: &Analysis,
    idx: &Index<'_>,
    allowed: &[bool],
    reasons: &mut Vec<Reason>,
) -> Found {
    if a.total <= 0.0 {
        reasons.push(Reason::EmptyClaim);
        return Found {
            best: None,
            ranked: Vec::new(),
            unaligned: Vec::new(),
        };
    }
    let mut lv = Levels::new(a, idx);
    let (ranked, cands) = rank(&mut lv, allowed);
    let best = ranked.first().map(|&(p, _)| complete(&mut lv, p, &cands));
    let mut unaligned: Vec<(usize, usize)> = Vec::new();
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
    Found {
        best,
        ranked,
        unaligned,
    }
}

/// Adds a citation for each run of adjacent evidence units not cited already.
fn cite_passages(idx: &Index<'_>, units: &[usize], citations: &mut Vec<Citation>) {
    for p in runs(idx, units) {
        let c = passage_citation(idx, p);
        if !citations.contains(&c) {
            citations.push(c);
        }
    }
}

/// The first `limit` ranked passages as evidence snippets.
fn evidence_snippets(idx: &Index<'_>, ranked: &[(Passage, f64)], limit: usize) -> Vec<Evidence> {
    ranked
        .iter()
        .take(limit)
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
        .collect()
}

/// Byte ranges of `claim` as spans with char offsets and their text.
fn claim_spans(claim: &str, ranges: Vec<(usize, usize)>) -> Vec<crate::Span> {
    ranges
        .into_iter()
        .map(|(s, e)| {
            let start = text::char_offset(claim, s);
            let text = claim.get(s..e).unwrap_or("").to_string();
            crate::Span {
                start,
                end: start + text.chars().count(),
                text,
            }
        })
        .collect()
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
