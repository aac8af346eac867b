//! `POST /v2/authorize`: the decision artifact, compact or verbose.
//!
//! The decision itself is made by [`crate::gate`], shared with the proxy; this
//! module only shapes it. Compact responses hold exactly the six fields of
//! spec §2.7; verbose adds `reason`, `diagnostics`, `requirements`, `rules`
//! and, in audit mode, `enforced` and `would_decide`.

use serde::Serialize;

use super::wire::{self, CheckOut, MetricsOut, Mode};
use crate::engine::decide;
use crate::gate::GateOutcome;

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
    pub floors_applied: Vec<FloorOut>,
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
    o: &GateOutcome,
    request_id: &str,
    request_hash: &str,
    started: std::time::Instant,
) -> AuthorizeResponse {
    let verbose = (o.mode == Mode::Verbose).then(|| {
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
    }
}
