//! Why a decision came out as it did: the trace the decision path keeps,
//! and the explanation built from it.
//!
//! A policy author who sees `deny` needs to know which of a dozen things
//! decided it: which policy applied (or none, and what `[defaults]` and
//! `unknown_action` made of that), which side set each requirement, which
//! rules hit and which missed, what the verifier said of each claim, and
//! which row of the decision table produced the outcome. [`super::authorize`]
//! records the small part of that only it can see ([`Trace`]: the engine's
//! and the rule evaluator's own traces, so an explanation cannot drift from
//! what decided); [`explain`] joins it with the policy and the params into
//! one [`Explanation`], which `POST /v2/authorize` answers in
//! `response.mode = "explain"` and `verdict explain` prints. It is built
//! after the decision and changes nothing about it.

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::Decided;
use crate::engine::decide::{
    citations_str, mode_str, Decision, Effective, Origins, Outcome, Requested, Row, Won,
};
use crate::engine::{Check, Citations, ClaimStatus, Options, Requirements};
use crate::policy::{ActionPolicy, Effect, ParamLookup, PolicySet, RuleResult};

/// Which policy a decision applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyUsed {
    /// The action policy that names the action type.
    Declared,
    /// No policy names the type: the `[defaults]` floors applied.
    Defaults,
    /// No policy names the type, and `[authorize] unknown_action` refused
    /// it; `near_miss` is the declared type it reads as, misspelt.
    Refused {
        outcome: Outcome,
        near_miss: Option<String>,
    },
}

/// What the decision path saw on its way: kept with every decision (it is
/// small), read only by [`explain`].
#[derive(Debug, Clone)]
pub struct Trace {
    pub policy: PolicyUsed,
    /// The floors that applied: the action policy's, or `[defaults]`.
    pub floor_requirements: Requirements,
    pub floor_options: Options,
    /// What the request asked for.
    pub requested: Requested,
    /// Which side set each effective requirement.
    pub origins: Origins,
    /// One per rule of the action policy, in rule order.
    pub rules: Vec<RuleResult>,
    /// The decision table's row that decided.
    pub row: Row,
    /// The ids of the claims sent without a citation.
    pub uncited: Vec<String>,
}

/// The proxy route a request matched, as the door that read it saw it.
#[derive(Debug, Clone, Serialize)]
pub struct RouteOut {
    pub name: String,
    pub method: String,
    /// The pattern as written, e.g. `/api/orders/{order_id}/refunds`.
    pub path: String,
    /// The policy file that defines the route.
    pub file: String,
    /// `{name}` segments as captured from the request path.
    pub path_params: Map<String, Value>,
    /// `hold` or `deny`: what the proxy does with `needs_review`.
    pub on_review: &'static str,
}

/// The whole explanation.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// `null` for a `/v2/authorize` call.
    pub route: Option<RouteOut>,
    pub action: ActionOut,
    /// The params the rules read (for the proxy: as extracted).
    pub params: Map<String, Value>,
    pub requirements: Vec<FieldOut>,
    pub rules: Vec<RuleOut>,
    pub param_mismatches: Vec<MismatchOut>,
    pub bind: Vec<BindOut>,
    pub claims: Vec<ClaimOut>,
    pub unavailable_sources: Vec<UnavailableOut>,
    pub coverage_score: f64,
    pub decision_table: TableOut,
}

#[derive(Debug, Clone, Serialize)]
pub struct ActionOut {
    #[serde(rename = "type")]
    pub type_: String,
    /// `declared`, `defaults` or `unknown_action`.
    pub policy: &'static str,
    /// With `policy = unknown_action`: `deny` or `needs_review`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_action: Option<&'static str>,
    /// With `policy = unknown_action`: the declared type this one reads as.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub near_miss: Option<String>,
}

/// One effective requirement and where it came from.
#[derive(Debug, Clone, Serialize)]
pub struct FieldOut {
    pub field: &'static str,
    pub value: Value,
    /// `default`, `floor`, `request` or `floor_over_request` (the request
    /// asked for something looser and the floor held).
    pub won: &'static str,
    pub default: Value,
    /// The policy's (or `[defaults]`') value; `null` when it sets none.
    pub floor: Value,
    /// The request's value; `null` when it asked for nothing.
    pub requested: Value,
}

#[derive(Debug, Clone, Serialize)]
pub struct RuleOut {
    /// Index in the action policy's rules, in file order.
    pub index: usize,
    pub param: String,
    /// The op and its operand, e.g. `gt 500`.
    pub op: String,
    pub effect: &'static str,
    pub message: String,
    /// The value the rule read, described (`number 750`); `null` when the
    /// param is absent.
    pub value: Option<String>,
    /// `hit`, `miss` or `mismatch`.
    pub result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MismatchOut {
    pub param: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct BindOut {
    pub param: String,
    /// Whether a counted supported claim states the param's value.
    pub stated: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClaimOut {
    pub claim_id: String,
    pub text: String,
    pub status: &'static str,
    pub coverage: f64,
    /// Whether the caller sent a citation with the claim.
    pub cited: bool,
    /// Whether the claim counts as supported (supported, and cited where
    /// citations are required).
    pub counted: bool,
    pub reasons: Vec<&'static str>,
    /// The quotes the verifier found, code-point offsets, end exclusive.
    pub citations: Vec<Value>,
    /// The claim's span and the evidence's span that disagree.
    pub conflicts: Vec<Value>,
    pub evidence: Vec<Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct UnavailableOut {
    pub source_id: String,
    pub detail: String,
}

/// The decision table's row that produced the outcome.
#[derive(Debug, Clone, Serialize)]
pub struct TableOut {
    pub condition: &'static str,
    pub reason: &'static str,
    /// The row's outcome in each mode (`audit` allows, except the
    /// `unknown_action` row).
    pub outcomes: OutcomesOut,
    /// What audit mode would have decided; `null` for a row audit mode
    /// enforces.
    pub audit_would_decide: Option<&'static str>,
    /// The effective mode, and what it made of the row.
    pub mode: &'static str,
    pub outcome: &'static str,
    pub enforced: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct OutcomesOut {
    pub strict: &'static str,
    pub balanced: &'static str,
    pub audit: &'static str,
}

/// Explains `decided`, a decision on `action_type` with `params` (the ones
/// the rules read) under `set` (the snapshot it was decided on).
pub fn explain(
    decided: &Decided,
    set: &PolicySet,
    action_type: &str,
    params: &Map<String, Value>,
    route: Option<RouteOut>,
) -> Explanation {
    let t = &decided.trace;
    let policy = set.action(action_type);
    let lookup = ParamLookup::from(params);
    let action = action_out(&t.policy, action_type);
    let rules = policy
        .map(|p| rules_out(p, &t.rules, &lookup))
        .unwrap_or_default();
    let bind = policy
        .map(|p| {
            p.bind
                .iter()
                .map(|param| BindOut {
                    param: param.clone(),
                    stated: !decided.unbound.contains(param),
                })
                .collect()
        })
        .unwrap_or_default();
    let e = &decided.effective;
    let claims = decided
        .checks
        .iter()
        .map(|c| claim_out(c, !t.uncited.contains(&c.claim_id), e.citations))
        .collect();
    Explanation {
        route,
        action,
        params: params.clone(),
        requirements: requirements(t, e),
        rules,
        param_mismatches: decided
            .mismatches
            .iter()
            .map(|m| MismatchOut {
                param: m.param.clone(),
                message: m.message.clone(),
            })
            .collect(),
        bind,
        claims,
        unavailable_sources: decided
            .unavailable
            .iter()
            .chain(&decided.untrusted)
            .map(|(id, why)| UnavailableOut {
                source_id: id.clone(),
                detail: why.clone(),
            })
            .collect(),
        coverage_score: decided.coverage_score,
        decision_table: table_out(&t.row, e, &decided.decision),
    }
}

/// The action type and which policy (declared, `[defaults]` or the
/// `unknown_action` refusal) applied to it.
fn action_out(policy: &PolicyUsed, action_type: &str) -> ActionOut {
    ActionOut {
        type_: action_type.to_string(),
        policy: match policy {
            PolicyUsed::Declared => "declared",
            PolicyUsed::Defaults => "defaults",
            PolicyUsed::Refused { .. } => "unknown_action",
        },
        unknown_action: match policy {
            PolicyUsed::Refused { outcome, .. } => Some(outcome.as_str()),
            _ => None,
        },
        near_miss: match policy {
            PolicyUsed::Refused { near_miss, .. } => near_miss.clone(),
            _ => None,
        },
    }
}

/// Each rule of `policy` with the value it read and its result, in rule
/// order.
fn rules_out(policy: &ActionPolicy, results: &[RuleResult], lookup: &ParamLookup) -> Vec<RuleOut> {
    policy
        .rules
        .iter()
        .zip(results)
        .enumerate()
        .map(|(index, (rule, result))| RuleOut {
            index,
            param: rule.param.clone(),
            op: rule.op.describe(),
            effect: effect_str(rule.effect),
            message: rule.message.clone(),
            value: lookup
                .get(&rule.param)
                .filter(|v| !matches!(v, crate::policy::ParamValue::Null))
                .map(|v| v.describe()),
            result: match result {
                RuleResult::Hit => "hit",
                RuleResult::Miss => "miss",
                RuleResult::Mismatch(_) => "mismatch",
            },
            mismatch: match result {
                RuleResult::Mismatch(m) => Some(m.clone()),
                _ => None,
            },
        })
        .collect()
}

/// One claim as the verifier judged it, and whether it counts under the
/// effective `citations`.
fn claim_out(c: &Check, cited: bool, citations: Citations) -> ClaimOut {
    ClaimOut {
        claim_id: c.claim_id.clone(),
        text: c.claim_text.clone(),
        status: c.status.as_str(),
        coverage: c.coverage,
        cited,
        counted: c.status == ClaimStatus::Supported && (cited || citations == Citations::Optional),
        reasons: c.reasons.iter().map(|r| r.as_str()).collect(),
        citations: c
            .citations
            .iter()
            .map(|x| {
                json!({"source_id": x.source_id, "start": x.start, "end": x.end, "quote": x.quote})
            })
            .collect(),
        conflicts: c
            .conflicts
            .iter()
            .map(|x| {
                json!({
                    "reason": x.reason.as_str(),
                    "claim": {"start": x.claim_start, "end": x.claim_end, "text": x.claim_quote},
                    "evidence": {
                        "source_id": x.source_id,
                        "start": x.evidence_start,
                        "end": x.evidence_end,
                        "text": x.evidence_quote,
                    },
                })
            })
            .collect(),
        evidence: c
            .evidence
            .iter()
            .map(|x| json!({"source_id": x.source_id, "snippet": x.snippet}))
            .collect(),
    }
}

/// The decision table's row that decided, its outcome in each mode, and
/// what the effective mode made of it.
fn table_out(row: &Row, e: &Effective, d: &Decision) -> TableOut {
    TableOut {
        condition: row.condition,
        reason: row.reason.as_str(),
        outcomes: OutcomesOut {
            strict: row.strict.as_str(),
            balanced: row.balanced.as_str(),
            audit: if row.audit_allows {
                Outcome::Allow.as_str()
            } else {
                row.audit_would.as_str()
            },
        },
        audit_would_decide: row.audit_allows.then(|| row.audit_would.as_str()),
        mode: mode_str(e.decision_mode),
        outcome: d.outcome.as_str(),
        enforced: d.enforced,
    }
}

fn effect_str(e: Effect) -> &'static str {
    match e {
        Effect::Deny => "deny",
        Effect::Review => "review",
    }
}

/// Each effective requirement with its default, floor, request and winner.
fn requirements(t: &Trace, e: &Effective) -> Vec<FieldOut> {
    use crate::engine::decide::{
        DEFAULT_CITATIONS, DEFAULT_EVIDENCE_LIMIT, DEFAULT_MIN_COVERAGE, DEFAULT_MODE,
    };
    let (fr, fo, rq) = (&t.floor_requirements, &t.floor_options, &t.requested);
    // One requirement whose name is its field in the trace's origins and in
    // the effective settings alike.
    macro_rules! req {
        ($name:ident, $show:expr, $default:expr, $floor:expr) => {
            field(
                stringify!($name),
                t.origins.$name,
                $show,
                (e.$name, $default),
                ($floor, rq.$name),
            )
        };
    }
    let limit = fo.evidence_limit.map(|n| n as usize);
    #[rustfmt::skip]
    let mut fields = vec![
        req!(decision_mode, |m| json!(mode_str(m)), DEFAULT_MODE, fr.decision_mode),
        req!(min_coverage, |v| json!(v), DEFAULT_MIN_COVERAGE, fr.min_coverage.or(fo.min_coverage)),
        req!(citations, |c| json!(citations_str(c)), DEFAULT_CITATIONS, fr.citations),
        req!(deny_if_any_unsupported, |b| json!(b), false, fo.deny_if_any_unsupported),
        req!(evidence_limit, |n| json!(n), DEFAULT_EVIDENCE_LIMIT, limit),
        FieldOut {
            field: "require_claims",
            value: json!(e.require_claims),
            won: t.origins.require_claims.as_str(),
            default: json!(true),
            floor: match t.origins.require_claims {
                Won::Default => Value::Null,
                _ => json!(e.require_claims),
            },
            requested: Value::Null,
        },
    ];
    // Listed only when the policy asks for more than one claim.
    if e.min_claims > 1 {
        fields.push(FieldOut {
            field: "min_claims",
            value: json!(e.min_claims),
            won: Won::Floor.as_str(),
            default: json!(1),
            floor: json!(e.min_claims),
            requested: Value::Null,
        });
    }
    fields
}

/// One requirement with its (effective, default) values and its (floor,
/// request) sides, each shown by `show`; a side that says nothing is null.
fn field<T: Copy>(
    field: &'static str,
    won: Won,
    show: impl Fn(T) -> Value,
    (value, default): (T, T),
    (floor, requested): (Option<T>, Option<T>),
) -> FieldOut {
    FieldOut {
        field,
        value: show(value),
        won: won.as_str(),
        default: show(default),
        floor: floor.map(&show).unwrap_or(Value::Null),
        requested: requested.map(&show).unwrap_or(Value::Null),
    }
}
