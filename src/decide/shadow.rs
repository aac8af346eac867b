//! Shadow policies: a second policy set decided beside the enforced one.
//!
//! A policy change is safest when it has already met real traffic. A shadow
//! set (`[policies] shadow_dir`) is loaded, validated and reloaded like the
//! enforced set, and every authorize decision, from the API or the proxy,
//! is also decided under it: the same claims, the same sources, the same
//! params, its own floors, rules, `bind` and unknown-action answer. The
//! shadow decision never changes what the caller gets. When it disagrees
//! with the enforced one, the disagreement is counted
//! (`verdict_shadow_disagreements_total{route,from,to}`), logged with the
//! request id, and written into the decision's audit record as
//! `detail.shadow` (its decision, reason and the shadow set's revision).
//! The claims are never verified again: a shadow set with another
//! `min_coverage` re-reads each check's status at its threshold
//! (`Check::status_under`), and `evidence_limit` changes no decision.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::config::UnknownAction;
use crate::engine::decide::{self, Decision, Effective, Requested};
use crate::engine::{Check, Citations};
use crate::policy::{ActionPolicy, ParamLookup, PolicySet};

/// `verdict_shadow_disagreements_total` labels. Routes are the policy's
/// (bounded); API calls are `api`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShadowLabels {
    pub route: String,
    pub from: &'static str,
    pub to: &'static str,
}

pub type Disagreements = Family<ShadowLabels, Counter>;

/// What the enforced decision read, which the shadow decision reads too.
pub(super) struct SameRequest<'a> {
    pub action_type: &'a str,
    pub requested: &'a Requested,
    pub lookup: &'a ParamLookup,
    pub defaults: &'a crate::config::DefaultFloors,
    pub unknown_action: UnknownAction,
    pub checks: &'a [Check],
    pub uncited: &'a [String],
    pub unavailable: usize,
    /// Sources the live policy's provenance refused.
    pub untrusted: usize,
    pub effective: &'a Effective,
}

/// The shadow set's decision for the same request.
pub(super) fn decide(set: &PolicySet, s: &SameRequest<'_>) -> Decision {
    let policy = set.action(s.action_type);
    let defaults = policy
        .is_none()
        .then(|| super::defaults_policy(s.defaults, s.action_type));
    let effective = decide::effective(
        policy.or(defaults.as_ref()).map(ActionPolicy::floor),
        s.requested,
    );
    let unknown_action = policy
        .is_none()
        .then(|| super::unknown_outcome(set, s.unknown_action, s.action_type))
        .flatten()
        .map(|(outcome, _)| outcome);
    let evaluation = policy.map(|p| p.evaluate(s.lookup)).unwrap_or_default();
    let restated;
    let checks = if effective.min_coverage == s.effective.min_coverage {
        s.checks
    } else {
        let review_floor = crate::engine::Params::default().review_floor;
        restated = s
            .checks
            .iter()
            .map(|c| Check {
                status: c.status_under(effective.min_coverage, review_floor),
                ..c.clone()
            })
            .collect::<Vec<_>>();
        &restated
    };
    let required = effective.citations == Citations::Required;
    let unbound = super::unbound(policy, s.lookup, checks, |c| {
        !(required && s.uncited.contains(&c.claim_id))
    });
    decide::decide(&decide::Facts {
        requirements: &effective,
        rule_hits: &evaluation.hits,
        checks,
        claims_without_citations: s.uncited.len(),
        unavailable_sources: s.unavailable,
        untrusted_sources: s.untrusted,
        param_mismatches: evaluation.mismatches.len(),
        unbound_params: unbound.len(),
        unknown_action,
    })
}

/// How a second decision of the same input differs from the first: one
/// definition for the shadow set (a disagreement is any change) and for
/// `verdict replay` (which reports the two kinds apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Same outcome, same reason.
    None,
    /// Same outcome for another reason: `deny (unsupported_claims)` to
    /// `deny (policy_violation)`.
    Reason,
    /// Another outcome.
    Decision,
}

/// The [`Change`] from `(outcome, reason)` `a` to `b`, by their codes.
pub fn change(a: (&str, &str), b: (&str, &str)) -> Change {
    if a.0 != b.0 {
        Change::Decision
    } else if a.1 != b.1 {
        Change::Reason
    } else {
        Change::None
    }
}

/// Whether two decisions disagree for a person reading them: any
/// [`Change`].
pub(super) fn disagrees(enforced: &Decision, shadow: &Decision) -> bool {
    change(
        (enforced.outcome.as_str(), enforced.reason.as_str()),
        (shadow.outcome.as_str(), shadow.reason.as_str()),
    ) != Change::None
}
