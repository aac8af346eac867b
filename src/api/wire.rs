//! Wire types shared by verify, authorize and batch: requirements, options,
//! response modes and the check objects of responses. Claims and sources
//! are the decision's input and live in [`crate::decide::input`]; they are
//! re-exported here for the handlers.
//!
//! This is the boundary where JSON becomes engine types. Shape errors (a
//! missing field, a wrong type) come out of serde with their field path and
//! are `400`; values that parse but cannot be accepted (an empty claim, a
//! `min_coverage` of 1.7, a duplicate source id) are checked here and are
//! `422`, each naming the field.

use serde::{Deserialize, Serialize};

pub use crate::decide::input::{
    engine_claims, engine_sources, run_engine, source_refs, CitationIn, ClaimIn, Claims, SourceIn,
};
use crate::engine;
use crate::http::error::ApiError;

/// Upper bound for `evidence_limit`: more snippets than this per claim is a
/// mistake, not a need.
pub const MAX_EVIDENCE_LIMIT: u64 = 100;

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ResponseIn {
    pub mode: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct RequirementsIn {
    pub decision_mode: Option<String>,
    pub min_coverage: Option<f64>,
    pub citations: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct OptionsIn {
    pub deny_if_any_unsupported: Option<bool>,
    pub evidence_limit: Option<u64>,
    pub min_coverage: Option<f64>,
}

/// Compact or verbose responses; `/v2/authorize` also answers `explain`
/// (verbose, plus the decision's trace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Compact,
    Verbose,
    Explain,
}

pub fn response_mode(r: Option<&ResponseIn>) -> Result<Mode, ApiError> {
    match r.and_then(|r| r.mode.as_deref()) {
        None | Some("compact") => Ok(Mode::Compact),
        Some("verbose") => Ok(Mode::Verbose),
        Some(other) => Err(ApiError::Unprocessable(format!(
            "response.mode: unknown mode {other:?} (compact, verbose)"
        ))),
    }
}

/// `min_coverage` from `requirements` and `options`: both present and
/// different is a conflict; outside 0..=1 is invalid.
pub fn min_coverage(
    req: Option<&RequirementsIn>,
    opt: Option<&OptionsIn>,
) -> Result<Option<f64>, ApiError> {
    let a = req.and_then(|r| r.min_coverage);
    let b = opt.and_then(|o| o.min_coverage);
    for (name, v) in [
        ("requirements.min_coverage", a),
        ("options.min_coverage", b),
    ] {
        if let Some(v) = v {
            if !(0.0..=1.0).contains(&v) {
                return Err(ApiError::Unprocessable(format!(
                    "{name}: {v} is outside 0.0..=1.0"
                )));
            }
        }
    }
    match (a, b) {
        (Some(x), Some(y)) if x != y => Err(ApiError::Unprocessable(format!(
            "requirements.min_coverage ({x}) and options.min_coverage ({y}) conflict"
        ))),
        (Some(x), _) | (None, Some(x)) => Ok(Some(x)),
        (None, None) => Ok(None),
    }
}

pub fn evidence_limit(opt: Option<&OptionsIn>) -> Result<Option<usize>, ApiError> {
    match opt.and_then(|o| o.evidence_limit) {
        None => Ok(None),
        Some(n) if n <= MAX_EVIDENCE_LIMIT => Ok(Some(n as usize)),
        Some(n) => Err(ApiError::Unprocessable(format!(
            "options.evidence_limit: {n} is above the maximum of {MAX_EVIDENCE_LIMIT}"
        ))),
    }
}

// === responses ===

#[derive(Debug, Serialize)]
pub struct CheckOut {
    pub claim_id: String,
    pub status: &'static str,
    pub coverage: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim_text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub citations: Option<Vec<CitationOut>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Vec<EvidenceOut>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<&'static str>>,
    /// Verbose only, and only when a conflict has spans: the claim's word
    /// and the evidence's word that disagree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflicts: Option<Vec<ConflictOut>>,
    /// Verbose only, and only for a claim that is not supported: the
    /// claim's words and values that nothing in its evidence aligns with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unaligned: Option<Vec<SpanOut>>,
}

#[derive(Debug, Serialize)]
pub struct ConflictOut {
    pub reason: &'static str,
    pub claim: SpanOut,
    pub evidence: SourceSpanOut,
}

/// Code-point offsets, end exclusive, and the text between them.
#[derive(Debug, Serialize)]
pub struct SpanOut {
    pub start: usize,
    pub end: usize,
    pub text: String,
}

#[derive(Debug, Serialize)]
pub struct SourceSpanOut {
    pub source_id: String,
    pub start: usize,
    pub end: usize,
    pub text: String,
}

#[derive(Debug, Serialize)]
pub struct CitationOut {
    pub source_id: String,
    pub quote: String,
    pub start: usize,
    pub end: usize,
}

#[derive(Debug, Serialize)]
pub struct EvidenceOut {
    pub source_id: String,
    pub snippet: String,
}

/// A check object: compact (`claim_id, status, coverage`) or verbose.
pub fn check_out(c: &engine::Check, mode: Mode) -> CheckOut {
    let verbose = mode == Mode::Verbose;
    CheckOut {
        claim_id: c.claim_id.clone(),
        status: c.status.as_str(),
        coverage: c.coverage,
        claim_text: verbose.then(|| c.claim_text.clone()),
        citations: verbose.then(|| {
            c.citations
                .iter()
                .map(|x| CitationOut {
                    source_id: x.source_id.clone(),
                    quote: x.quote.clone(),
                    start: x.start,
                    end: x.end,
                })
                .collect()
        }),
        evidence: verbose.then(|| {
            c.evidence
                .iter()
                .map(|x| EvidenceOut {
                    source_id: x.source_id.clone(),
                    snippet: x.snippet.clone(),
                })
                .collect()
        }),
        reasons: verbose.then(|| c.reasons.iter().map(|r| r.as_str()).collect()),
        conflicts: (verbose && !c.conflicts.is_empty()).then(|| {
            c.conflicts
                .iter()
                .map(|x| ConflictOut {
                    reason: x.reason.as_str(),
                    claim: SpanOut {
                        start: x.claim_start,
                        end: x.claim_end,
                        text: x.claim_quote.clone(),
                    },
                    evidence: SourceSpanOut {
                        source_id: x.source_id.clone(),
                        start: x.evidence_start,
                        end: x.evidence_end,
                        text: x.evidence_quote.clone(),
                    },
                })
                .collect()
        }),
        unaligned: (verbose && !c.unaligned.is_empty()).then(|| {
            c.unaligned
                .iter()
                .map(|x| SpanOut {
                    start: x.start,
                    end: x.end,
                    text: x.text.clone(),
                })
                .collect()
        }),
    }
}

#[derive(Debug, Serialize)]
pub struct MetricsOut {
    pub latency_ms: f64,
    pub claims_total: usize,
    pub claims_supported: usize,
    pub sources_total: usize,
}

impl MetricsOut {
    pub fn new(
        started: std::time::Instant,
        checks: &[engine::Check],
        sources_total: usize,
    ) -> MetricsOut {
        MetricsOut {
            latency_ms: (started.elapsed().as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0,
            claims_total: checks.len(),
            claims_supported: checks
                .iter()
                .filter(|c| c.status == engine::ClaimStatus::Supported)
                .count(),
            sources_total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_accept_strings_and_objects_and_keep_paths() {
        #[derive(Deserialize)]
        struct R {
            claims: Claims,
        }
        let v = serde_json::json!({"claims": ["a", {"text": "b", "id": "x"}]});
        let r: R = crate::http::typed(&v).unwrap();
        assert_eq!(r.claims.0.len(), 2);
        assert_eq!(r.claims.0[1].id.as_deref(), Some("x"));
        let v = serde_json::json!({"claims": ["a", {"text": "b"}, {"id": "x"}]});
        let err = crate::http::typed::<R>(&v).err().unwrap();
        assert!(err.to_string().starts_with("claims[2]"), "{err}");
        assert!(err.to_string().contains("text"), "{err}");
        let v = serde_json::json!({"claims": "nope"});
        assert!(crate::http::typed::<R>(&v)
            .err()
            .unwrap()
            .to_string()
            .starts_with("claims"));
    }

    #[test]
    fn claim_ids_and_validation() {
        let c = |t: &str| ClaimIn {
            text: t.into(),
            id: None,
            citations: vec![],
        };
        let out = engine_claims("claims", vec![c("a"), c("b")]).unwrap();
        assert_eq!(out[0].id, "c1");
        assert_eq!(out[1].id, "c2");
        assert!(engine_claims("claims", vec![]).is_err());
        assert!(engine_claims("claims", vec![c("  ")]).is_err());
    }

    #[test]
    fn source_validation() {
        let s = |id: Option<&str>, text: Option<&str>, uri: Option<&str>| SourceIn {
            source_id: id.map(Into::into),
            id: None,
            kind: None,
            text: text.map(Into::into),
            uri: uri.map(Into::into),
            checksum: None,
            unavailable: None,
            captured: false,
        };
        assert!(source_refs("sources", vec![s(Some("a"), Some("t"), None)]).is_ok());
        for bad in [
            vec![s(Some("a"), Some("t"), Some("u"))],
            vec![s(Some("a"), None, None)],
            vec![s(None, Some("t"), None)],
            vec![s(Some("a"), Some("t"), None), s(Some("a"), Some("u"), None)],
        ] {
            assert!(matches!(
                source_refs("sources", bad),
                Err(crate::decide::DecideError::Invalid(_))
            ));
        }
        let mut alias = s(None, Some("t"), None);
        alias.id = Some("doc".into());
        assert_eq!(source_refs("sources", vec![alias]).unwrap()[0].id, "doc");
    }

    #[test]
    fn min_coverage_rules() {
        let req = |v| RequirementsIn {
            min_coverage: Some(v),
            ..Default::default()
        };
        let opt = |v| OptionsIn {
            min_coverage: Some(v),
            ..Default::default()
        };
        assert_eq!(min_coverage(Some(&req(0.9)), None).unwrap(), Some(0.9));
        assert_eq!(min_coverage(None, Some(&opt(0.7))).unwrap(), Some(0.7));
        assert_eq!(
            min_coverage(Some(&req(0.7)), Some(&opt(0.7))).unwrap(),
            Some(0.7)
        );
        assert!(min_coverage(Some(&req(0.7)), Some(&opt(0.8))).is_err());
        assert!(min_coverage(Some(&req(1.7)), None).is_err());
        assert!(min_coverage(None, Some(&opt(-0.1))).is_err());
    }
}
