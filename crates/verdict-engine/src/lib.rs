//! The verification engine: claims plus sources in, one [`Check`] per claim
//! out, by the rules below.
//!
//! It is pure on purpose. No IO: it does not read files, open sockets, read
//! the clock or use randomness, and it knows nothing about JSON; the API layer
//! maps these types to the wire. Given the same input it returns the same
//! output, and the order of the sources never changes a claim's status or
//! coverage, because sources are indexed in id order and every tie is broken
//! by source id and offset. The engine is lexical: it is a precise detector of
//! fabricated specifics (numbers, dates, amounts, names, negation flips) and
//! a coarse judge of paraphrase.
//!
//! - [`text`]: tokens and sentences with offsets into the original text.
//! - [`numbers`]: numbers, amounts, percentages and dates as canonical values.
//! - [`verify`](mod@verify): the per-request index and the per-claim scoring and gates.
//! - [`extract`]: output mode, an LLM answer split into claims.
//! - [`decide`]: effective requirements and the decision table.

pub mod bind;
pub mod decide;
pub mod extract;
pub mod model;
pub mod numbers;
pub mod spelling;
pub mod text;
pub mod verify;

#[cfg(test)]
mod tests;

pub use extract::extract_claims;
pub use model::{Citations, DecisionMode, Effect, Floor, Options, Requirements, RuleHit};
pub use verify::verify;

/// A claim to check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub id: String,
    pub text: String,
    /// Empty means the caller sent no citation; the engine then searches every
    /// available source.
    pub citations: Vec<CallerCitation>,
}

/// A citation the caller attached to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerCitation {
    pub source_id: String,
    /// When present, must occur verbatim in the source.
    pub quote: Option<String>,
}

/// One evidence source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub id: String,
    /// `None` means unavailable (fetch failed or checksum mismatch). An
    /// unavailable source never supports anything.
    pub text: Option<String>,
}

/// Thresholds for one verify call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Coverage at or above which a claim without contradictions is supported.
    pub min_coverage: f64,
    /// Coverage at or above which a claim is ambiguous rather than unsupported.
    pub review_floor: f64,
    /// Maximum number of evidence snippets per check.
    pub evidence_limit: usize,
    /// How a numeric date that reads both ways ("03/05/2024") is read.
    pub date_order: DateOrder,
}

/// The reading of a numeric date whose first two parts could each be the
/// month (`[evidence] date_order`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DateOrder {
    /// Unknown: such a date backs only the same literal, and conflicts
    /// only with a date neither reading can be.
    #[default]
    Ambiguous,
    /// Month first (US): 03/05/2024 is March 5.
    Mdy,
    /// Day first: 03/05/2024 is 3 May.
    Dmy,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            min_coverage: 0.85,
            review_floor: 0.5,
            evidence_limit: 5,
            date_order: DateOrder::Ambiguous,
        }
    }
}

/// Per-claim outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimStatus {
    Supported,
    Ambiguous,
    Unsupported,
}

impl ClaimStatus {
    /// Every status, in the order they are declared: what docs and tests
    /// enumerate instead of reading this file.
    pub const ALL: [ClaimStatus; 3] = [
        ClaimStatus::Supported,
        ClaimStatus::Ambiguous,
        ClaimStatus::Unsupported,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ClaimStatus::Supported => "supported",
            ClaimStatus::Ambiguous => "ambiguous",
            ClaimStatus::Unsupported => "unsupported",
        }
    }
}

/// The result for one claim.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub claim_id: String,
    pub claim_text: String,
    pub status: ClaimStatus,
    /// Weighted fraction of the claim's content found in the best evidence
    /// passage, in 0..=1, rounded to 4 places. Not a probability.
    pub coverage: f64,
    /// Quotes the engine verified: the caller's verified quotes, then the best
    /// passage when the claim is supported or ambiguous.
    pub citations: Vec<Citation>,
    /// Up to `evidence_limit` passages, best first.
    pub evidence: Vec<Evidence>,
    /// Why the claim is not supported; empty when it is. Sorted, no repeats.
    pub reasons: Vec<Reason>,
    /// For a polarity, status, hedge, scope or party conflict: the two
    /// words that disagree, so a reviewer sees "claim says *denied*,
    /// evidence says *approved*".
    pub conflicts: Vec<Conflict>,
    /// A part of the claim (joined by "and", "but", ...) has too little of
    /// its weight in the evidence: never `supported`, whatever the coverage.
    pub part_gap: bool,
    /// The claim's words and values that nothing in the evidence it was
    /// judged on aligns with, in claim order; empty when the claim is
    /// supported.
    pub unaligned: Vec<Span>,
}

/// A span of the claim's text: Unicode code point offsets, end exclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
    pub text: String,
}

impl Check {
    /// The status this check would have under another `min_coverage` (and
    /// `review_floor`), everything else equal: what a second policy set
    /// reads without verifying the claim again. Contradictions and missing
    /// evidence fail at any threshold.
    pub fn status_under(&self, min_coverage: f64, review_floor: f64) -> ClaimStatus {
        let hard_fail = self
            .reasons
            .iter()
            .any(|r| r.is_contradiction() || matches!(r, Reason::NoEvidence | Reason::EmptyClaim));
        verify::status(
            hard_fail,
            self.coverage,
            self.part_gap,
            min_coverage,
            review_floor,
        )
    }
}

/// Two spans that contradict each other. Offsets are Unicode code points,
/// end exclusive (Python's `text[start:end]`), like citation offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub reason: Reason,
    /// In the claim's text.
    pub claim_start: usize,
    pub claim_end: usize,
    pub claim_quote: String,
    pub source_id: String,
    /// In the source's text.
    pub evidence_start: usize,
    pub evidence_end: usize,
    pub evidence_quote: String,
}

impl Conflict {
    /// The conflict between the claim's bytes `claim` of `claim_text` and
    /// the bytes `evidence` of source `source_id`'s `body` (byte ranges at
    /// char boundaries, as token offsets are).
    pub(crate) fn between(
        reason: Reason,
        claim_text: &str,
        (cs, ce): (usize, usize),
        source_id: &str,
        body: &str,
        (es, ee): (usize, usize),
    ) -> Conflict {
        Conflict {
            reason,
            claim_start: text::char_offset(claim_text, cs),
            claim_end: text::char_offset(claim_text, ce),
            claim_quote: claim_text.get(cs..ce).unwrap_or("").to_string(),
            source_id: source_id.to_string(),
            evidence_start: text::char_offset(body, es),
            evidence_end: text::char_offset(body, ee),
            evidence_quote: body.get(es..ee).unwrap_or("").to_string(),
        }
    }
}

/// An exact quote from a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Citation {
    pub source_id: String,
    pub quote: String,
    /// Unicode code point offsets, end exclusive: Python's `text[start:end]`.
    pub start: usize,
    pub end: usize,
}

/// An evidence snippet: one sentence or two adjacent sentences of a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    pub source_id: String,
    pub snippet: String,
}

/// Stable machine-readable reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// A count or percentage differs from the one in the best evidence.
    NumberMismatch,
    /// A date or year differs from the one in the best evidence.
    DateMismatch,
    /// A money amount differs from the one in the best evidence.
    AmountMismatch,
    /// A number, amount or date appears in no searched source.
    NumberNotFound,
    /// The claim and its evidence disagree on negation.
    NegationConflict,
    /// The evidence states an exclusive state of the one the claim states
    /// ("approved" for "denied", "succeeded" for "failed").
    StatusConflict,
    /// The evidence states the claim's event as possible, planned or
    /// pending ("will be issued"), not as done.
    HedgedEvidence,
    /// The claim says "all" where the evidence makes an exception, or the
    /// evidence lists the claim's item as an exception.
    ScopeConflict,
    /// The clause that states the claim's predicate names another party
    /// than the claim does.
    PartyConflict,
    /// A name in the claim appears in no searched source.
    NameMissing,
    /// No available source shares any content with the claim.
    NoEvidence,
    /// A caller citation names an unknown source or a quote not in it.
    CitationNotFound,
    /// A searched or cited source is unavailable.
    SourceUnavailable,
    /// Coverage is below `min_coverage`.
    LowCoverage,
    /// The claim has no content words or quantities to check.
    EmptyClaim,
}

impl Reason {
    /// Every reason, in the order they are declared: what docs and tests
    /// enumerate instead of reading this file.
    pub const ALL: [Reason; 15] = [
        Reason::NumberMismatch,
        Reason::DateMismatch,
        Reason::AmountMismatch,
        Reason::NumberNotFound,
        Reason::NegationConflict,
        Reason::StatusConflict,
        Reason::HedgedEvidence,
        Reason::ScopeConflict,
        Reason::PartyConflict,
        Reason::NameMissing,
        Reason::NoEvidence,
        Reason::CitationNotFound,
        Reason::SourceUnavailable,
        Reason::LowCoverage,
        Reason::EmptyClaim,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NumberMismatch => "number_mismatch",
            Reason::DateMismatch => "date_mismatch",
            Reason::AmountMismatch => "amount_mismatch",
            Reason::NumberNotFound => "number_not_found",
            Reason::NegationConflict => "negation_conflict",
            Reason::StatusConflict => "status_conflict",
            Reason::HedgedEvidence => "hedged_evidence",
            Reason::ScopeConflict => "scope_conflict",
            Reason::PartyConflict => "party_conflict",
            Reason::NameMissing => "name_missing",
            Reason::NoEvidence => "no_evidence",
            Reason::CitationNotFound => "citation_not_found",
            Reason::SourceUnavailable => "source_unavailable",
            Reason::LowCoverage => "low_coverage",
            Reason::EmptyClaim => "empty_claim",
        }
    }

    /// Contradictions force `unsupported` whatever the coverage.
    pub fn is_contradiction(self) -> bool {
        matches!(
            self,
            Reason::NumberMismatch
                | Reason::DateMismatch
                | Reason::AmountMismatch
                | Reason::NumberNotFound
                | Reason::NegationConflict
                | Reason::StatusConflict
                | Reason::HedgedEvidence
                | Reason::ScopeConflict
                | Reason::PartyConflict
                | Reason::NameMissing
                | Reason::CitationNotFound
        )
    }
}

/// Overall outcome of a verify call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    Supported,
    Ambiguous,
    Unsupported,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Supported => "supported",
            Verdict::Ambiguous => "ambiguous",
            Verdict::Unsupported => "unsupported",
        }
    }
}

/// Rounds to 4 decimal places, the precision every reported score uses.
pub fn round4(x: f64) -> f64 {
    if x.is_finite() {
        (x * 10_000.0).round() / 10_000.0
    } else {
        0.0
    }
}

/// The verdict and `coverage_score` for a set of checks: supported if every
/// claim is, unsupported if any claim is (or there are none: fail closed),
/// ambiguous otherwise. The score is the mean coverage, 0 without sources.
pub fn summarize(checks: &[Check], sources_present: bool) -> (Verdict, f64) {
    let verdict =
        if checks.is_empty() || checks.iter().any(|c| c.status == ClaimStatus::Unsupported) {
            Verdict::Unsupported
        } else if checks.iter().all(|c| c.status == ClaimStatus::Supported) {
            Verdict::Supported
        } else {
            Verdict::Ambiguous
        };
    let score = if !sources_present || checks.is_empty() {
        0.0
    } else {
        let sum: f64 = checks.iter().map(|c| c.coverage).sum();
        round4(sum / checks.len() as f64)
    };
    (verdict, score)
}
