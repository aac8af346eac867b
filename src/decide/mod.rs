//! The one-way decision path: one authorize decision, end to end, for every
//! door (the API's `/v2/authorize`, the proxy's gated routes, and the
//! offline door's `verdict test`, `verdict explain` and `verdict replay`).
//!
//! It takes validated domain input ([`Input`]: the action, its claims or an
//! answer, its sources, what the request asked for) and narrow handles
//! ([`Handles`]: the evidence resolver, the audit log, the clock, the
//! config's floors), and returns a typed [`Decided`] or a [`DecideError`].
//! It imports nothing of `api`, `proxy` or `app`; they call it the same way.
//! The steps run in a fixed order on one policy snapshot: effective
//! requirements (the action policy is a floor), param rules, evidence,
//! claims (explicit, or extracted from an answer), verification, the
//! decision table, and then the audit record, which must be durable before
//! the decision is returned.

mod authorize;
pub mod capture;
pub mod detail;
pub mod explain;
pub mod input;
pub mod recorder;
pub mod shadow;
mod sources;
pub use authorize::authorize;
use sources::{named_sources, read_sources, unbound};

pub use recorder::Recorder;

use std::time::{Duration, SystemTime};

use crate::audit::{AuditError, AuditRecord, Receipt, RecordKind, RedactionKey};
use crate::config::{DefaultFloors, UnknownAction};
use crate::engine::bind::BindValue;
use crate::engine::decide::{self, Decision, DecisionReason, Effective, Outcome, Requested};
use crate::engine::{self, Check};
use crate::evidence::{Content, Resolved, Resolver, SourceRef};
use crate::policy::{
    ActionPolicy, Citations, Options, ParamLookup, ParamMismatch, ParamValue, PolicySet,
    Requirements, RuleHit,
};
use input::{AnswerIn, ClaimIn, SourceIn};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Why a decision could not be made. Every door maps these the same way:
/// `Malformed` 400, `Invalid` 422 (the proxy records both as refusals),
/// `Unavailable` 503 and `Internal` 500 (the gated action does not happen).
#[derive(Debug, Clone, thiserror::Error)]
pub enum DecideError {
    /// The input's shape is wrong (a claim that is a number, say).
    #[error("{0}")]
    Malformed(String),
    /// The input parses but cannot be decided (an empty claim, a duplicate
    /// source id, claims and an answer both).
    #[error("{0}")]
    Invalid(String),
    /// The audit log cannot record the decision.
    #[error("{0}")]
    Unavailable(String),
    /// A bug: a record the log refuses, an engine task that died.
    #[error("{0}")]
    Internal(String),
}

impl From<AuditError> for DecideError {
    /// Anything that keeps the log from recording fails closed; a record the
    /// log refuses is our bug.
    fn from(e: AuditError) -> Self {
        match e {
            AuditError::InvalidRecord(m) => {
                DecideError::Internal(format!("audit record rejected: {m}"))
            }
            other => DecideError::Unavailable(format!(
                "the audit log cannot record this decision: {other}"
            )),
        }
    }
}

/// One authorize request as the decision reads it.
#[derive(Debug, Clone, Default)]
pub struct Input {
    pub action_type: String,
    /// The action's params as sent (the proxy: as extracted).
    pub params: serde_json::Map<String, serde_json::Value>,
    /// Actions mode: the claims, validated here.
    pub claims: Option<Vec<ClaimIn>>,
    /// Output mode: an LLM answer, split into claims here.
    pub answer: Option<AnswerIn>,
    pub sources: Vec<SourceIn>,
    /// What the request asked for (already validated by its door).
    pub requested: Requested,
}

/// Which door a decision came through: a label of its metrics, and named
/// in its audit record when it is Envoy's (`source = "ext_authz"`; a record
/// without `source` came through the API or the proxy, and `route` tells
/// which).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `/v2/authorize`, AuthZEN, the offline tools.
    Api,
    /// verdict's own reverse proxy.
    Proxy,
    /// Envoy's external authorization (`Check`).
    ExtAuthz,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Api => "api",
            Source::Proxy => "proxy",
            Source::ExtAuthz => "ext_authz",
        }
    }

    /// What the audit record's `source` field holds: only Envoy's door is
    /// named, so records of the other two stay as they were.
    pub fn recorded(self) -> Option<String> {
        (self == Source::ExtAuthz).then(|| self.as_str().to_string())
    }
}

/// Who asks and how the request is named.
pub struct Ctx<'a> {
    /// Which door the request came through.
    pub source: Source,
    /// The API key's name, or `proxy`.
    pub principal: &'a str,
    pub request_id: &'a str,
    pub request_hash: &'a str,
    /// The proxy route's name, when the request came through the proxy.
    pub route: Option<&'a str>,
}

/// What a decision needs from the running process, and nothing more.
pub struct Handles<'a> {
    /// Reads `uri` sources within the operator's fences.
    pub resolver: &'a Resolver,
    /// Every decision is appended here before it is returned: the durable
    /// log in a server (always; see [`recorder`]), nowhere offline.
    pub audit: Recorder<'a>,
    /// Keys the HMAC that replaces `redact`ed params in records.
    pub redaction: &'a RedactionKey,
    /// `[defaults]`: the floors of action types no policy names.
    pub defaults: &'a DefaultFloors,
    /// `[authorize] unknown_action`.
    pub unknown_action: UnknownAction,
    pub metrics: &'a DecisionMetrics,
    /// The time a decision is stamped with.
    pub clock: fn() -> SystemTime,
    /// `[policies] shadow_dir`: decided beside, never enforced.
    pub shadow: Option<&'a crate::policy::PolicyStore>,
    /// `[audit] capture_inputs`: keep each decision's input for `verdict
    /// replay` (only where records are kept).
    pub capture: bool,
}

/// Everything a decision produced, for the API response or the proxy.
pub struct Decided {
    pub decision: Decision,
    pub effective: Effective,
    pub checks: Vec<Check>,
    pub coverage_score: f64,
    pub rule_hits: Vec<RuleHit>,
    /// Params whose value is not of the type the policy reads.
    pub mismatches: Vec<ParamMismatch>,
    /// `bind` params that no counted supported claim states.
    pub unbound: Vec<String>,
    /// Supported claims that count: a claim sent without a citation where
    /// citations are required is not one, whatever its coverage.
    pub claims_supported: usize,
    pub sources_total: usize,
    /// `(source_id, why)` for every source that could not be read.
    pub unavailable: Vec<(String, String)>,
    /// `(source_id, why)` for every source the action's provenance refused.
    pub untrusted: Vec<(String, String)>,
    pub policy_revision: String,
    /// The action policy's `approvals`, for a held call's review.
    pub approvals: Option<u32>,
    /// RFC 3339 UTC time of the decision.
    pub evaluated_at: String,
    /// The durable audit record of this decision.
    pub receipt: Receipt,
    /// `(source_id, text)` of every source the engine read, as it read it.
    pub sources: Vec<(String, String)>,
    /// The action params as the audit record holds them (the policy's
    /// `redact` fields replaced).
    pub params: serde_json::Value,
    /// How the decision was reached, for an explanation.
    pub trace: explain::Trace,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `api`, `proxy` or `ext_authz`.
    pub source: &'static str,
    pub decision: &'static str,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    /// `api`, `proxy` or `ext_authz`.
    pub source: &'static str,
    /// `evaluate` or `record`.
    pub stage: &'static str,
}

/// Buckets from 10 µs to about 330 ms: the decision's stages, and the
/// proxy's gated stages beside them (`verdict_proxy_gated_stage_seconds`).
pub fn stage_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_01, 2.0, 16))
}

type StageFamily = Family<StageLabels, Histogram, fn() -> Histogram>;

/// Authorize decisions by where they came from, outcome and reason, and the
/// time a decision takes in its two stages. Action types are not a label:
/// callers choose them, so they are unbounded.
#[derive(Clone, Debug)]
pub struct DecisionMetrics {
    decisions: Family<DecisionLabels, Counter>,
    shadow_disagreements: shadow::Disagreements,
    stages: StageFamily,
}

impl Default for DecisionMetrics {
    fn default() -> DecisionMetrics {
        DecisionMetrics {
            decisions: Family::default(),
            shadow_disagreements: shadow::Disagreements::default(),
            stages: Family::new_with_constructor(stage_histogram),
        }
    }
}

impl DecisionMetrics {
    pub fn register(registry: &mut Registry) -> DecisionMetrics {
        let m = DecisionMetrics::default();
        registry.register(
            "verdict_decisions",
            "Authorize decisions by source (api, proxy, ext_authz), decision and reason",
            m.decisions.clone(),
        );
        registry.register(
            "verdict_decision_stage_seconds",
            "Time of a decision by source (api, proxy, ext_authz) and stage: evaluate (sources resolved, engine, policy, the record built), engine (the claims checked, part of evaluate) and record (the audit append, until the record is durable)",
            m.stages.clone(),
        );
        registry.register(
            "verdict_shadow_disagreements",
            "Decisions where the shadow policy set would have decided otherwise, by route (api for the API), enforced outcome (from) and shadow outcome (to)",
            m.shadow_disagreements.clone(),
        );
        m
    }

    /// Counts a decision the shadow set would have made otherwise.
    pub fn shadow_disagreement(&self, route: Option<&str>, from: Outcome, to: Outcome) {
        self.shadow_disagreements
            .get_or_create(&shadow::ShadowLabels {
                route: route.unwrap_or("api").to_string(),
                from: from.as_str(),
                to: to.as_str(),
            })
            .inc();
    }

    fn stage(&self, source: &'static str, stage: &'static str, took: Duration) {
        self.stages
            .get_or_create(&StageLabels { source, stage })
            .observe(took.as_secs_f64());
    }

    pub fn observe(&self, source: &'static str, decision: &'static str, reason: &'static str) {
        self.decisions
            .get_or_create(&DecisionLabels {
                source,
                decision,
                reason,
            })
            .inc();
    }
}

/// What `[authorize] unknown_action` answers for an action type `set`
/// does not declare, and, for a near miss, the declared type it reads as.
fn unknown_outcome<'s>(
    set: &'s PolicySet,
    setting: UnknownAction,
    action_type: &str,
) -> Option<(Outcome, Option<&'s str>)> {
    match setting {
        UnknownAction::Allow => None,
        UnknownAction::Deny => Some((Outcome::Deny, None)),
        UnknownAction::Review => Some((Outcome::NeedsReview, None)),
        UnknownAction::NearMiss => set
            .near_miss(action_type)
            .map(|declared| (Outcome::Deny, Some(declared))),
    }
}

/// The floors of `[defaults]` as the policy of an action type no policy
/// names.
fn defaults_policy(d: &DefaultFloors, type_: &str) -> ActionPolicy {
    ActionPolicy {
        type_: type_.to_string(),
        defined_at: "[defaults]".to_string(),
        requirements: Requirements {
            decision_mode: d.decision_mode,
            min_coverage: d.min_coverage,
            citations: d.citations,
        },
        options: Options {
            deny_if_any_unsupported: d.deny_if_any_unsupported,
            evidence_limit: None,
            min_coverage: None,
        },
        require_claims: true,
        min_claims: 1,
        approvals: None,
        redact: vec![],
        rules: vec![],
        param_types: Default::default(),
        bind: vec![],
        provenance: Default::default(),
        sources_from: vec![],
    }
}

/// A request the gate refuses before the engine runs (the proxy's
/// ambiguous paths, bodies and media types): recorded like every other
/// decision, durably, before the refusal is returned.
pub struct Refusal<'a> {
    pub action_type: &'a str,
    /// The action params extracted so far (may be empty); redacted by the
    /// action policy before they are stored.
    pub params: serde_json::Map<String, serde_json::Value>,
    pub reason: DecisionReason,
}

/// Records a refusal as a `deny` decision and returns its receipt.
pub async fn refuse(
    h: &Handles<'_>,
    set: &PolicySet,
    refusal: Refusal<'_>,
    ctx: &Ctx<'_>,
) -> Result<Receipt, DecideError> {
    let mut params = serde_json::Value::Object(refusal.params);
    if let Some(p) = set.action(refusal.action_type) {
        crate::audit::redact(&mut params, &p.redact, h.redaction);
    }
    let mut record = AuditRecord::new(RecordKind::Decision);
    record.request_id = Some(ctx.request_id.to_string());
    record.request_hash = Some(ctx.request_hash.to_string());
    record.principal = Some(ctx.principal.to_string());
    record.action = Some(serde_json::json!({"type": refusal.action_type, "params": params}));
    record.decision = Some(Outcome::Deny.as_str().to_string());
    record.reason = Some(refusal.reason.as_str().to_string());
    record.enforced = Some(true);
    record.policy_revision = Some(set.revision.clone());
    record.route = ctx.route.map(str::to_string);
    record.source = ctx.source.recorded();
    let receipt = h.audit.append(record, None).await?;
    h.metrics.observe(
        ctx.source.as_str(),
        Outcome::Deny.as_str(),
        refusal.reason.as_str(),
    );
    tracing::info!(
        request_id = ctx.request_id,
        action = %refusal.action_type,
        record_id = %receipt.record_id,
        reason = refusal.reason.as_str(),
        "gate refused the request"
    );
    Ok(receipt)
}

/// What the record keeps of why: the rules that fired (with their
/// messages), the params of the wrong type and the unbound ones. `None`
/// when there is nothing to say.
fn decision_detail(
    hits: &[RuleHit],
    mismatches: &[ParamMismatch],
    unbound: &[String],
    resolved: &[Resolved],
) -> Option<serde_json::Value> {
    use serde_json::json;
    use sha2::Digest as _;
    let mut d = serde_json::Map::new();
    if !hits.is_empty() {
        let rules: Vec<serde_json::Value> = hits
            .iter()
            .map(|h| {
                json!({
                    "param": h.param,
                    "effect": match h.effect {
                        crate::policy::Effect::Deny => "deny",
                        crate::policy::Effect::Review => "review",
                    },
                    "message": h.message,
                })
            })
            .collect();
        d.insert("rules".into(), json!(rules));
    }
    if !mismatches.is_empty() {
        let m: Vec<serde_json::Value> = mismatches
            .iter()
            .map(|m| json!({"param": m.param, "message": m.message}))
            .collect();
        d.insert("param_mismatches".into(), json!(m));
    }
    if !unbound.is_empty() {
        d.insert("unbound_params".into(), json!(unbound));
    }
    // What was read by uri, and the sha256 of what it said: the record
    // names the document the decision rests on.
    let read: Vec<serde_json::Value> = resolved
        .iter()
        .filter_map(|r| {
            let (uri, text) = (r.uri.as_ref()?, r.text.as_ref().ok()?);
            let sum = hex::encode(sha2::Sha256::digest(text.as_bytes()));
            Some(json!({"source_id": r.id, "uri": uri, "sha256": format!("sha256:{sum}")}))
        })
        .collect();
    if !read.is_empty() {
        d.insert("sources_read".into(), json!(read));
    }
    (!d.is_empty()).then_some(serde_json::Value::Object(d))
}
