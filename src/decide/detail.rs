//! What a reviewer is shown of a held call's decision.
//!
//! A held call waits for a person, who needs to see why the gate did not
//! let it through: each claim's status, coverage and reasons, the evidence
//! with the cited and the conflicting spans, the requirements and the rules
//! that fired. The proxy stores this snapshot with the review when it holds
//! the call, because the evidence may have been fetched (and may change), the
//! policy may be reloaded, and the review console must show what was
//! decided, not a re-run. It is a JSON document of its own, versioned by
//! `v`, read only by the console; offsets are code points, as in the verbose
//! `/v2/authorize` output.

use serde_json::{json, Value};

use super::Decided;
use crate::engine::decide::{citations_str, mode_str};
use crate::engine::Effect;

/// The most characters of one source kept in a snapshot.
pub const MAX_SOURCE_CHARS: usize = 64 * 1024;

/// The snapshot of one decision, for the review it sends to a person.
pub fn review_detail(d: &Decided) -> Value {
    let e = &d.effective;
    let claims: Vec<Value> = d
        .checks
        .iter()
        .map(|c| {
            json!({
                "claim_id": c.claim_id,
                "text": c.claim_text,
                "status": c.status.as_str(),
                "coverage": c.coverage,
                "reasons": c.reasons.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
                "citations": c.citations.iter().map(|x| json!({
                    "source_id": x.source_id, "start": x.start, "end": x.end,
                })).collect::<Vec<_>>(),
                "conflicts": c.conflicts.iter().map(|x| json!({
                    "reason": x.reason.as_str(),
                    "claim_start": x.claim_start,
                    "claim_end": x.claim_end,
                    "claim_quote": x.claim_quote,
                    "source_id": x.source_id,
                    "evidence_start": x.evidence_start,
                    "evidence_end": x.evidence_end,
                    "evidence_quote": x.evidence_quote,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let sources: Vec<Value> = d
        .sources
        .iter()
        .map(|(id, text)| {
            let cut = text
                .char_indices()
                .nth(MAX_SOURCE_CHARS)
                .map_or(text.len(), |(i, _)| i);
            json!({"source_id": id, "text": &text[..cut], "truncated": cut < text.len()})
        })
        .collect();
    json!({
        "v": 1,
        "reason": d.decision.reason.as_str(),
        "coverage_score": d.coverage_score,
        "params": d.params,
        "policy_revision": d.policy_revision,
        "record_id": d.receipt.record_id.to_string(),
        "evaluated_at": d.evaluated_at,
        "requirements": {
            "decision_mode": mode_str(e.decision_mode),
            "min_coverage": e.min_coverage,
            "citations": citations_str(e.citations),
            "deny_if_any_unsupported": e.deny_if_any_unsupported,
            "floors_applied": e.floors_applied.iter().map(|f| json!({
                "field": f.field, "requested": f.requested, "floor": f.floor,
            })).collect::<Vec<_>>(),
        },
        "rules": d.rule_hits.iter().map(|h| json!({
            "param": h.param,
            "effect": match h.effect { Effect::Review => "review", Effect::Deny => "deny" },
            "message": h.message,
        })).collect::<Vec<_>>(),
        "claims": claims,
        "sources": sources,
        "unavailable": d.unavailable.iter().chain(&d.untrusted).map(|(id, why)| json!({
            "source_id": id, "detail": why,
        })).collect::<Vec<_>>(),
    })
}
