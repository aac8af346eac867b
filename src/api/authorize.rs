//! `POST /v2/authorize`: the decision artifact, compact or verbose.
//!
//! The body is read here into the decision's domain input; the decision
//! itself is made by [`crate::decide`], shared with the proxy; this module
//! only reads the request and shapes the answer. Compact responses hold exactly the six fields of
//! the interface; verbose adds `reason`, `diagnostics`, `requirements`, `rules`
//! and, in audit mode, `enforced` and `would_decide`; explain adds to verbose
//! the decision's trace (`explain`, see [`crate::decide::explain`]).

use serde::Serialize;

use serde::Deserialize;

use super::wire::{self, CheckOut, MetricsOut, Mode, OptionsIn, RequirementsIn, ResponseIn};
use crate::decide::explain::{self, Explanation};
use crate::decide::input::{AnswerIn, Claims, SourceIn};
use crate::decide::{Decided, Input};
use crate::engine::decide::{self, Requested};
use crate::engine::{Citations, DecisionMode};
use crate::http::error::ApiError;

/// `action: {type, params?}`.
#[derive(Debug, Clone, Deserialize)]
pub struct ActionIn {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub params: serde_json::Map<String, serde_json::Value>,
}

/// The body of `POST /v2/authorize`.
#[derive(Debug, Clone, Deserialize)]
pub struct AuthorizeRequest {
    pub action: ActionIn,
    pub claims: Option<Claims>,
    pub answer: Option<AnswerIn>,
    #[serde(default)]
    pub sources: Vec<SourceIn>,
    pub requirements: Option<RequirementsIn>,
    pub options: Option<OptionsIn>,
    pub response: Option<ResponseIn>,
}

impl AuthorizeRequest {
    /// The response mode and the decision's input; 422 on values the
    /// request may not ask for.
    pub fn into_input(self) -> Result<(Mode, Input), ApiError> {
        let mode = response_mode(self.response.as_ref())?;
        let requested = requested(self.requirements.as_ref(), self.options.as_ref())?;
        Ok((
            mode,
            Input {
                action_type: self.action.kind,
                params: self.action.params,
                claims: self.claims.map(|c| c.0),
                answer: self.answer,
                sources: self.sources,
                requested,
            },
        ))
    }
}

/// `response.mode`: `compact`, `verbose` or, here only, `explain`.
fn response_mode(r: Option<&wire::ResponseIn>) -> Result<Mode, ApiError> {
    match r.and_then(|r| r.mode.as_deref()) {
        Some("explain") => Ok(Mode::Explain),
        None | Some("compact" | "verbose") => wire::response_mode(r),
        Some(other) => Err(ApiError::Unprocessable(format!(
            "response.mode: unknown mode {other:?} (compact, verbose, explain)"
        ))),
    }
}

/// What an explanation needs of the request besides the decision: the
/// action type and the params as sent. `None` unless `mode` is explain.
pub struct ExplainInput {
    action_type: String,
    params: serde_json::Map<String, serde_json::Value>,
}

impl ExplainInput {
    pub fn capture(mode: Mode, input: &Input) -> Option<ExplainInput> {
        (mode == Mode::Explain).then(|| ExplainInput {
            action_type: input.action_type.clone(),
            params: input.params.clone(),
        })
    }

    /// Adds the explanation of `o`, decided on `set`, to `resp`.
    pub fn add_to(self, resp: &mut AuthorizeResponse, o: &Decided, set: &crate::policy::PolicySet) {
        resp.explain = Some(explain::explain(
            o,
            set,
            &self.action_type,
            &self.params,
            None,
        ));
    }
}

pub fn parse_mode(s: &str) -> Result<DecisionMode, ApiError> {
    crate::engine::decide::mode_from(s).ok_or_else(|| {
        ApiError::Unprocessable(format!(
            "requirements.decision_mode: unknown mode {s:?} (strict, balanced, audit)"
        ))
    })
}

pub fn parse_citations(s: &str) -> Result<Citations, ApiError> {
    crate::engine::decide::citations_from(s).ok_or_else(|| {
        ApiError::Unprocessable(format!(
            "requirements.citations: unknown value {s:?} (required, optional)"
        ))
    })
}

/// What the request asks for, validated (422 on bad values).
pub fn requested(r: Option<&RequirementsIn>, o: Option<&OptionsIn>) -> Result<Requested, ApiError> {
    Ok(Requested {
        decision_mode: r
            .and_then(|r| r.decision_mode.as_deref())
            .map(parse_mode)
            .transpose()?,
        min_coverage: wire::min_coverage(r, o)?,
        citations: r
            .and_then(|r| r.citations.as_deref())
            .map(parse_citations)
            .transpose()?,
        deny_if_any_unsupported: o.and_then(|o| o.deny_if_any_unsupported),
        evidence_limit: wire::evidence_limit(o)?,
    })
}

#[derive(Debug, Serialize)]
pub struct AuthorizeResponse {
    pub decision: &'static str,
    pub coverage_score: f64,
    pub evaluated_at: String,
    pub request_id: String,
    pub request_hash: String,
    pub metrics: MetricsOut,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub verbose: Option<Verbose>,
    /// `response.mode = "explain"`: the decision's trace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<Explanation>,
}

#[derive(Debug, Serialize)]
pub struct Verbose {
    pub reason: &'static str,
    pub diagnostics: Vec<CheckOut>,
    pub requirements: RequirementsOut,
    pub rules: Vec<RuleHitOut>,
    /// Params whose value is not of the type the policy reads.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub param_mismatches: Vec<MismatchOut>,
    /// `bind` params that no supported claim states.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unbound_params: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unavailable_sources: Vec<UnavailableOut>,
    pub policy_revision: String,
    pub audit: crate::audit::Receipt,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforced: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_decide: Option<&'static str>,
}

#[derive(Debug, Serialize)]
pub struct RequirementsOut {
    pub decision_mode: &'static str,
    pub min_coverage: f64,
    pub citations: &'static str,
    pub deny_if_any_unsupported: bool,
    pub evidence_limit: usize,
    pub require_claims: bool,
    /// Shown only when the action's policy asks for more than one claim.
    #[serde(skip_serializing_if = "only_one")]
    pub min_claims: usize,
    pub floors_applied: Vec<FloorOut>,
}

fn only_one(n: &usize) -> bool {
    *n <= 1
}

#[derive(Debug, Serialize)]
pub struct FloorOut {
    pub field: &'static str,
    pub requested: String,
    pub floor: String,
}

#[derive(Debug, Serialize)]
pub struct RuleHitOut {
    pub param: String,
    pub effect: &'static str,
    pub message: String,
}

#[derive(Debug, Serialize)]
pub struct MismatchOut {
    pub param: String,
    pub message: String,
}

#[derive(Debug, Serialize)]
pub struct UnavailableOut {
    pub source_id: String,
    pub reason: &'static str,
    pub detail: String,
}

/// Shapes a gate outcome as the decision artifact.
pub fn response(
    o: &Decided,
    mode: Mode,
    request_id: &str,
    request_hash: &str,
    started: std::time::Instant,
) -> AuthorizeResponse {
    let verbose = matches!(mode, Mode::Verbose | Mode::Explain).then(|| {
        let e = &o.effective;
        let audit_mode = !o.decision.enforced;
        Verbose {
            reason: o.decision.reason.as_str(),
            diagnostics: o
                .checks
                .iter()
                .map(|c| wire::check_out(c, Mode::Verbose))
                .collect(),
            requirements: RequirementsOut {
                decision_mode: decide::mode_str(e.decision_mode),
                min_coverage: e.min_coverage,
                citations: decide::citations_str(e.citations),
                deny_if_any_unsupported: e.deny_if_any_unsupported,
                evidence_limit: e.evidence_limit,
                require_claims: e.require_claims,
                min_claims: e.min_claims,
                floors_applied: e
                    .floors_applied
                    .iter()
                    .map(|f| FloorOut {
                        field: f.field,
                        requested: f.requested.clone(),
                        floor: f.floor.clone(),
                    })
                    .collect(),
            },
            rules: o
                .rule_hits
                .iter()
                .map(|h| RuleHitOut {
                    param: h.param.clone(),
                    effect: match h.effect {
                        crate::policy::Effect::Deny => "deny",
                        crate::policy::Effect::Review => "review",
                    },
                    message: h.message.clone(),
                })
                .collect(),
            param_mismatches: o
                .mismatches
                .iter()
                .map(|m| MismatchOut {
                    param: m.param.clone(),
                    message: m.message.clone(),
                })
                .collect(),
            unbound_params: o.unbound.clone(),
            unavailable_sources: o
                .unavailable
                .iter()
                .map(|(id, why)| UnavailableOut {
                    source_id: id.clone(),
                    reason: "fetch_failed",
                    detail: why.clone(),
                })
                .chain(o.untrusted.iter().map(|(id, why)| UnavailableOut {
                    source_id: id.clone(),
                    reason: "untrusted_source",
                    detail: why.clone(),
                }))
                .collect(),
            policy_revision: o.policy_revision.clone(),
            audit: o.receipt.clone(),
            enforced: audit_mode.then_some(false),
            would_decide: o.decision.would_decide.map(|d| d.as_str()),
        }
    });
    let mut metrics = MetricsOut::new(started, &o.checks, o.sources_total);
    metrics.claims_supported = o.claims_supported;
    AuthorizeResponse {
        decision: o.decision.outcome.as_str(),
        coverage_score: o.coverage_score,
        evaluated_at: o.evaluated_at.clone(),
        request_id: request_id.to_string(),
        request_hash: request_hash.to_string(),
        metrics,
        verbose,
        explain: None,
    }
}
