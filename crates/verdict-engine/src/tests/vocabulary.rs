//! The enumerations docs and tests read (`Reason::ALL`, `ClaimStatus::ALL`)
//! hold every variant once: a variant added to the enum but not to its list
//! fails to compile here (the matches are exhaustive) or fails the checks.

use super::*;

/// The position each reason must have in `Reason::ALL`.
fn reason_index(r: Reason) -> usize {
    match r {
        Reason::NumberMismatch => 0,
        Reason::DateMismatch => 1,
        Reason::AmountMismatch => 2,
        Reason::NumberNotFound => 3,
        Reason::NegationConflict => 4,
        Reason::StatusConflict => 5,
        Reason::HedgedEvidence => 6,
        Reason::ScopeConflict => 7,
        Reason::PartyConflict => 8,
        Reason::NameMissing => 9,
        Reason::NoEvidence => 10,
        Reason::CitationNotFound => 11,
        Reason::SourceUnavailable => 12,
        Reason::LowCoverage => 13,
        Reason::EmptyClaim => 14,
    }
}

fn status_index(s: ClaimStatus) -> usize {
    match s {
        ClaimStatus::Supported => 0,
        ClaimStatus::Ambiguous => 1,
        ClaimStatus::Unsupported => 2,
    }
}

#[test]
fn every_reason_is_listed_once() {
    for (i, r) in Reason::ALL.iter().enumerate() {
        assert_eq!(reason_index(*r), i, "{r:?}");
    }
    let names: std::collections::BTreeSet<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(names.len(), Reason::ALL.len());
}

#[test]
fn every_status_is_listed_once() {
    for (i, s) in ClaimStatus::ALL.iter().enumerate() {
        assert_eq!(status_index(*s), i, "{s:?}");
    }
}
