//! The Review API: list, read, approve and reject held proxy requests.
//!
//! Every resolution is audited before it takes effect, and the record names
//! the review and the original decision's record, so a reviewer's approval of
//! a refund is as provable as the refund's first decision. A resolution is
//! single-use: a second one is `409`.

use serde::Deserialize;

use crate::audit::{AuditLog, AuditRecord, RecordKind};
use crate::http::auth::Principal;
use crate::http::error::ApiError;
use crate::http::JsonBody;
use crate::review::{ReviewError, ReviewStatus, ReviewView, Reviews, UpstreamResponse, Viewer};

/// The most reviews one list call returns.
const MAX_LIST: usize = 1000;

#[derive(Debug, Deserialize)]
struct ResolveBody {
    reviewer: String,
    note: Option<String>,
}

/// Review keys see every review.
pub fn viewer(p: &Principal) -> Viewer {
    Viewer {
        name: p.name.clone(),
        sees_all: p.has(crate::http::auth::Scope::Review),
    }
}

/// `?status=pending&limit=50`.
pub fn list_query(query: Option<&str>) -> Result<(Option<ReviewStatus>, usize), ApiError> {
    let mut status = None;
    let mut limit = 100;
    for (k, v) in crate::http::query_params(query)? {
        match k.as_str() {
            "status" => {
                status = Some(ReviewStatus::parse(&v).ok_or_else(|| {
                    ApiError::Unprocessable(format!(
                        "status: unknown value {v:?} (pending, approved, rejected, expired)"
                    ))
                })?)
            }
            "limit" => {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIST).contains(n))
                    .ok_or_else(|| {
                        ApiError::Unprocessable(format!("limit: must be 1 to {MAX_LIST}"))
                    })?
            }
            _ => {}
        }
    }
    Ok((status, limit))
}

/// One resolution as a reviewer asked for it, validated.
pub struct Resolve<'a> {
    pub id: &'a str,
    pub approve: bool,
    /// Who resolves, as recorded (the Review API's `reviewer`; the console's
    /// key name).
    pub reviewer: &'a str,
    pub note: Option<String>,
    /// The `request_hash` of the resolution's audit record.
    pub request_hash: String,
}

/// The longest `note` a resolution keeps.
pub const MAX_NOTE_BYTES: usize = 4096;

/// `POST /v2/reviews/{id}/approve|reject`: reads `{reviewer, note?}` and
/// resolves.
pub async fn resolve_json(
    reviews: &Reviews,
    audit: &AuditLog,
    principal: &Principal,
    request_id: &str,
    id: &str,
    approve: bool,
    body: JsonBody,
) -> Result<ReviewView, ApiError> {
    let req: ResolveBody = crate::http::typed(&body.value)?;
    let reviewer = req.reviewer.trim();
    if reviewer.is_empty() || reviewer.len() > 200 {
        return Err(ApiError::Unprocessable(
            "reviewer: must be 1 to 200 characters".into(),
        ));
    }
    if req.note.as_ref().is_some_and(|n| n.len() > MAX_NOTE_BYTES) {
        return Err(ApiError::Unprocessable(format!(
            "note: at most {MAX_NOTE_BYTES} bytes"
        )));
    }
    let r = Resolve {
        id,
        approve,
        reviewer,
        note: req.note,
        request_hash: body.hash,
    };
    resolve(reviews, audit, principal, request_id, r).await
}

/// Approves or rejects a review: audit first, then resolve, one resolution
/// at a time.
pub async fn resolve(
    reviews: &Reviews,
    audit: &AuditLog,
    principal: &Principal,
    request_id: &str,
    r: Resolve<'_>,
) -> Result<ReviewView, ApiError> {
    let Resolve {
        id,
        approve,
        reviewer,
        note,
        request_hash,
    } = r;
    let view = viewer(principal);
    // Held until the resolution is stored: check, audit and resolve are one
    // step for racing resolvers.
    let _turn = reviews.resolution_turn().await?;
    // One instant for the check and the stored resolution: a deadline that
    // passes while the record is written must not contradict the record.
    let now = std::time::SystemTime::now();
    let current = reviews
        .get_at(id, &view, now)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no review {id}")))?;
    if current.status != ReviewStatus::Pending {
        return Err(ApiError::Conflict(format!(
            "review {id} is already {}",
            current.status.as_str()
        )));
    }
    // Four eyes, checked before anything is recorded (the store checks
    // again): the key behind the held call never resolves it, and one key
    // counts as one approver.
    if current.requesters.contains(&principal.name) {
        return Err(ReviewError::OwnCall.into());
    }
    if approve && current.approvals.iter().any(|a| a.by == principal.name) {
        return Err(ReviewError::AlreadyApprovedBy.into());
    }
    let partial = approve && current.approvals.len() + 1 < current.approvals_required as usize;
    let verdict = match (approve, partial) {
        (true, true) => "approval_recorded",
        (true, false) => "approved",
        (false, _) => "rejected",
    };
    let mut record = AuditRecord::new(RecordKind::ReviewResolution);
    record.request_id = Some(request_id.to_string());
    record.request_hash = Some(request_hash);
    record.principal = Some(principal.name.clone());
    record.review_id = Some(id.to_string());
    record.route = Some(current.route.clone());
    record.decision = Some(
        match (approve, partial) {
            (true, false) => "allow",
            (true, true) => "needs_review",
            (false, _) => "deny",
        }
        .to_string(),
    );
    record.reason = Some(format!("review_{verdict}"));
    record.detail = Some(serde_json::json!({
        "reviewer": reviewer,
        "note": note,
        "original_record_id": current.record_id,
        "action": current.action,
        "approvals": current.approvals.len() + usize::from(approve),
        "approvals_required": current.approvals_required,
    }));
    // A resolution is never acted on before its record is durable.
    audit.append(record).await?;
    let resolved = reviews
        .resolve(id, approve, &principal.name, reviewer, note, now)
        .await?;
    tracing::info!(
        review_id = id,
        reviewer,
        outcome = verdict,
        "review resolved"
    );
    Ok(resolved)
}

/// The body of a held caller's result link.
pub fn result_body(view: &ReviewView, upstream: Option<&UpstreamResponse>) -> serde_json::Value {
    use base64::Engine as _;
    let response = upstream.map(|u| {
        let mut r = serde_json::json!({
            "status": u.status,
            "headers": {"content-type": u.content_type},
            "truncated": u.body.len() >= crate::review::MAX_STORED_UPSTREAM_BODY,
        });
        match std::str::from_utf8(&u.body) {
            Ok(text) => r["body"] = text.into(),
            Err(_) => {
                r["body_base64"] = base64::engine::general_purpose::STANDARD
                    .encode(&u.body)
                    .into()
            }
        }
        r
    });
    serde_json::json!({
        "review_id": view.review_id,
        "status": view.status,
        "expires_at": crate::support::time::rfc3339(view.expires_at),
        "forward": view.forward,
        "response": response,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_queries() {
        assert_eq!(list_query(None).unwrap(), (None, 100));
        assert_eq!(
            list_query(Some("status=pending&limit=5")).unwrap(),
            (Some(ReviewStatus::Pending), 5)
        );
        assert!(list_query(Some("status=open")).is_err());
        assert!(list_query(Some("limit=0")).is_err());
        assert!(list_query(Some("limit=99999")).is_err());
    }
}
