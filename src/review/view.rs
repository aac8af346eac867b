//! The review subsystem's data as callers see it: a held request, a new
//! review, the view of a stored review, the resolutions and outcomes, and the
//! errors, with the serde shapes of the Review API.

use super::*;

/// A request exactly as the proxy will forward it once approved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRequest {
    pub method: String,
    /// Path and query, e.g. `/api/orders/7/refunds?dry=1`.
    pub path: String,
    /// In the order received; values are bytes because HTTP allows non-UTF-8.
    /// Store them as they should be forwarded (the proxy decides which
    /// `X-Verdict-*` and hop-by-hop headers to add or strip).
    pub headers: Vec<(String, Bytes)>,
    pub body: Bytes,
}

// === impl HeldRequest ===

/// Hashes `bytes` after their length (8 bytes, big-endian), so that no two
/// sequences of fields hash alike.
fn length_prefixed(h: &mut sha2::Sha256, bytes: &[u8]) {
    use sha2::Digest;
    h.update(u64::try_from(bytes.len()).unwrap_or(u64::MAX).to_be_bytes());
    h.update(bytes);
}

impl HeldRequest {
    /// `sha256:<hex>` of the request's retry identity: the method, the
    /// path and query, the body and every header (name lowercased, value,
    /// in order) except those `skip` names (lowercase): the ones that change
    /// from one try to the next (the proxy's `Route::join_skips`).
    /// Hop-by-hop headers are not held at all. A retried call joins a
    /// pending review only when
    /// this matches, so a call joins only the review of the same request
    /// from the same caller, however that caller authenticates (an
    /// `X-Api-Key` as much as an `Authorization`). Each part is
    /// length-prefixed, so no two requests encode alike.
    pub fn join_key(&self, skip: impl Fn(&str) -> bool) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        length_prefixed(&mut h, self.method.as_bytes());
        length_prefixed(&mut h, self.path.as_bytes());
        for (name, value) in &self.headers {
            let name = name.to_ascii_lowercase();
            if skip(&name) {
                continue;
            }
            length_prefixed(&mut h, name.as_bytes());
            length_prefixed(&mut h, value);
        }
        length_prefixed(&mut h, &self.body);
        format!("sha256:{}", hex::encode(h.finalize()))
    }

    /// The `request_hash` of a gated proxy call: `sha256:<hex>` over the
    /// method, the path and query, the number of headers, every header name
    /// and value in order, and the body, each length-prefixed (u64
    /// big-endian) so no two requests encode alike. The headers are the
    /// ones the upstream receives: hop-by-hop headers and any `X-Verdict-*`
    /// a client sent are removed, `X-Forwarded-*` and `X-Request-Id` are
    /// added, and verdict's own `X-Verdict-*` headers, which depend on the
    /// decision, are added after hashing, when the call is forwarded.
    ///
    /// The proxy takes it before deciding, so the decision's audit record
    /// and, when the call is held, its review carry the same hash. The
    /// review stores it, shows it to reviewers (an approval is bound to
    /// these exact bytes) and checks it again before the request is handed
    /// out.
    pub fn hash(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        length_prefixed(&mut h, self.method.as_bytes());
        length_prefixed(&mut h, self.path.as_bytes());
        h.update(
            u64::try_from(self.headers.len())
                .unwrap_or(u64::MAX)
                .to_be_bytes(),
        );
        for (name, value) in &self.headers {
            length_prefixed(&mut h, name.as_bytes());
            length_prefixed(&mut h, value);
        }
        length_prefixed(&mut h, &self.body);
        format!("sha256:{}", hex::encode(h.finalize()))
    }
}

/// Everything needed to hold a request for review.
#[derive(Debug, Clone)]
pub struct NewReview {
    /// `true`: the proxy holds the call and forwards it once approved.
    /// `false`: a record-only review: the decision was answered elsewhere
    /// (Envoy ext_authz, AuthZEN), verdict holds no call and an approval
    /// forwards nothing (its forward reads `none`, and neither
    /// [`Reviews::claim_forward`] nor the background forwarder ever hands
    /// it out). A retried call joins only a pending review of its own kind.
    pub forwards: bool,
    /// Lets the caller pick the id first (e.g. to name it in the decision's
    /// audit record); a fresh UUID v4 when `None`.
    pub review_id: Option<uuid::Uuid>,
    /// The API key name of the app whose call is held: the review's tenant.
    pub owner: String,
    /// The policy route name.
    pub route: String,
    /// The action type, e.g. `refund.create`.
    pub action: String,
    /// Why the decision asked for review, shown to the reviewer.
    pub reason: String,
    /// The messages of the policy rules that fired, shown to the reviewer.
    pub rules: Vec<String>,
    /// The audit record of the original decision.
    pub record_id: Option<String>,
    pub request: HeldRequest,
    /// What the reviewer is shown of the decision
    /// (the decision path's `detail` snapshot); stored as given.
    pub detail: Option<serde_json::Value>,
    /// The API key names found in the held call's credential headers, none
    /// of whom may resolve it: four eyes.
    pub requesters: Vec<String>,
    /// The retry identity a pending review is joined by
    /// ([`HeldRequest::join_key`]).
    pub join_key: String,
    /// Distinct approvals the held call needs, when its action's policy
    /// sets `approvals`; `None`: the server's `review.approvals`.
    pub approvals_required: Option<u32>,
    /// Headers whose values are sealed at rest besides `Authorization`,
    /// `Cookie` and `Proxy-Authorization`: the route's
    /// `credential_headers` (lowercase).
    pub credential_headers: Vec<String>,
}

// === impl NewReview ===

#[cfg(test)]
impl NewReview {
    /// A refund review of `request` by `owner`, for tests: one rule, a
    /// record, no detail, no requesters, one approval.
    pub(crate) fn for_test(owner: &str, request: HeldRequest) -> NewReview {
        NewReview {
            forwards: true,
            review_id: None,
            owner: owner.into(),
            route: "create-refund".into(),
            action: "refund.create".into(),
            reason: "review_required".into(),
            rules: vec!["refunds above 500".into()],
            record_id: Some("rec-1".into()),
            request,
            detail: None,
            requesters: vec![],
            join_key: String::new(),
            credential_headers: vec![],
            approvals_required: None,
        }
    }
}

impl NewReview {
    /// Whether the value of header `name` (lowercase) is sealed at rest.
    /// `X_Api_Key` counts as `X-Api-Key`, as CGI-style servers read it.
    pub fn sealed(&self, name: &str) -> bool {
        let dashed = name.replace('_', "-");
        seal::Sealer::applies(&dashed) || self.credential_headers.contains(&dashed)
    }
}

/// A review with what a reviewer needs to judge it: the held request (its
/// credential headers sealed, shown as `[sealed]`), the decision snapshot,
/// and the upstream's answer once the forward is done.
#[derive(Debug, Clone)]
pub struct Inspection {
    pub view: ReviewView,
    /// Path and query.
    pub path: String,
    pub headers: Vec<(String, Bytes)>,
    pub body: Bytes,
    pub detail: Option<serde_json::Value>,
    pub upstream: Option<UpstreamResponse>,
}

/// How a review ended, as seen by a waiter. `Expired` counts as rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    Approved,
    Rejected,
    Expired,
}

/// How a claimed forward ended, reported by the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardOutcome {
    /// The upstream answered. Only the first [`MAX_STORED_UPSTREAM_BODY`]
    /// bytes of the body are stored.
    Done {
        status: u16,
        body: Bytes,
        content_type: Option<String>,
    },
    /// The forward failed (connect error, timeout, ...). Whether the upstream
    /// acted on it is unknown, so the review's forward becomes
    /// `outcome_unknown` and is never retried.
    Failed { error: String },
}

/// Who is looking: an app key sees only its own reviews, a `review`-scope
/// key sees all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    pub name: String,
    pub sees_all: bool,
}

/// A review as the Review API shows it. Never carries the held headers or
/// body: they may hold secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReviewView {
    pub review_id: String,
    pub status: ReviewStatus,
    #[serde(serialize_with = "ser_time")]
    pub created_at: SystemTime,
    #[serde(serialize_with = "ser_time")]
    pub expires_at: SystemTime,
    pub route: String,
    pub action: String,
    pub reason: String,
    /// The messages of the policy rules that sent the call to review (as in
    /// the decision record's `detail.rules`); empty when none did.
    pub rules: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reviewer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_opt_time"
    )]
    pub resolved_at: Option<SystemTime>,
    pub forward: ForwardView,
    pub request: RequestView,
    /// Approvals so far (one per API key), oldest first.
    pub approvals: Vec<ApprovalView>,
    /// Distinct approvals the review needs: its action's `approvals`, or
    /// else the server's `review.approvals`.
    pub approvals_required: u32,
    /// The tenant, for the caller's audit records; not part of the JSON.
    #[serde(skip)]
    pub owner: String,
    /// The API keys behind the held call; not part of the JSON.
    #[serde(skip)]
    pub requesters: Vec<String>,
}

/// One approval of a review.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalView {
    /// The API key name that approved.
    pub by: String,
    pub reviewer: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(serialize_with = "ser_time")]
    pub at: SystemTime,
}

/// The forward state of a record-only review ([`NewReview::forwards`]
/// `false`): there is no held call to forward.
pub const NO_FORWARD: &str = "none";

/// The forward part of a [`ReviewView`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ForwardView {
    /// `not_started`, `started`, `done` or `outcome_unknown`; `none` for a
    /// record-only review, which has nothing to forward.
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<u16>,
}

/// The request part of a [`ReviewView`]: what was held, not its contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestView {
    pub method: String,
    /// The path only: the query string is left out like the headers and
    /// body, since it may carry secrets too.
    pub path: String,
    /// [`HeldRequest::hash`] of the held request: what an approval
    /// releases, and the `request_hash` of the decision's audit record.
    /// (A record-only review releases nothing; its decision's record has
    /// the request hash of the door that decided it.)
    pub hash: String,
}

/// The upstream's answer to a forwarded review, as stored: at most
/// [`MAX_STORED_UPSTREAM_BODY`] bytes of the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamResponse {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Bytes,
}

/// Facts for `/health/detailed`, from memory (no database IO).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewsHealth {
    pub pending: usize,
    /// Reviews stored in every state (as of the sweeper's last run).
    pub stored: u64,
    pub oldest_pending_age: Option<Duration>,
    /// The sweeper's last storage error, cleared by its next good run.
    pub last_error: Option<String>,
}

/// Why a review operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    /// Unknown id (the Review API answers 404).
    #[error("review not found")]
    NotFound,
    /// A second resolution (the Review API answers 409).
    #[error("review is already {0}")]
    AlreadyResolved(ReviewStatus),
    /// The key behind the held call tried to resolve it (the Review API
    /// answers 403): four eyes.
    #[error("the key that made a held call cannot resolve it; another reviewer must")]
    OwnCall,
    /// This key approved the review before and more approvers are needed
    /// (the Review API answers 409).
    #[error("this key already approved the review; another reviewer must approve it")]
    AlreadyApprovedBy,
    /// The review expired before anyone resolved it (the Review API answers
    /// 409); an expired review counts as rejected.
    #[error("review expired before it was resolved")]
    Expired,
    /// `finish_forward` on a review whose forward is not in flight.
    #[error("review forward is not in flight (it is {0})")]
    NotForwarding(&'static str),
    /// A stored held request no longer matches the hash taken when it was
    /// held; it is not handed out.
    #[error("held request of review {0} fails its integrity check")]
    Corrupt(String),
    /// The database failed. The text is for logs, not clients.
    #[error("review storage failed: {0}")]
    Storage(String),
    /// The shared store cannot be reached (the Review API answers 503; a
    /// hold fails closed).
    #[error("review storage unavailable: {0}")]
    Unavailable(String),
    /// [`Reviews::open`] was called outside a Tokio runtime.
    #[error("the review store must be opened inside a tokio runtime")]
    NoRuntime,
}

// === impl Resolution ===

impl Resolution {
    /// The resolution a status stands for; `None` while pending.
    pub fn of(status: ReviewStatus) -> Option<Resolution> {
        match status {
            ReviewStatus::Pending => None,
            ReviewStatus::Approved => Some(Resolution::Approved),
            ReviewStatus::Rejected => Some(Resolution::Rejected),
            ReviewStatus::Expired => Some(Resolution::Expired),
        }
    }

    pub fn is_approved(self) -> bool {
        self == Resolution::Approved
    }
}

// === impl Viewer ===

impl Viewer {
    /// Whether this viewer may see a review held for `owner`.
    pub fn sees(&self, owner: &str) -> bool {
        self.sees_all || self.name == owner
    }
}

// === impl ReviewError ===

impl From<rusqlite::Error> for ReviewError {
    fn from(e: rusqlite::Error) -> ReviewError {
        ReviewError::Storage(e.to_string())
    }
}

/// The view of a stored row at `now`: a pending review past its deadline
/// reads as expired (at its deadline) before the sweeper writes it down.
pub(super) fn view(row: &Row, now: SystemTime, approvals_required: u32) -> ReviewView {
    let status = state::effective_status(row.status, row.expires_at, now);
    let resolved_at = match (row.resolved_at, status) {
        (None, ReviewStatus::Expired) => Some(row.expires_at),
        (at, _) => at,
    };
    ReviewView {
        review_id: row.review_id.clone(),
        status,
        created_at: row.created_at,
        expires_at: row.expires_at,
        route: row.route.clone(),
        action: row.action.clone(),
        reason: row.reason.clone(),
        rules: row.rules.clone(),
        record_id: row.record_id.clone(),
        reviewer: row.reviewer.clone(),
        note: row.note.clone(),
        resolved_at,
        forward: ForwardView {
            state: if row.forwards {
                row.forward.as_str()
            } else {
                NO_FORWARD
            },
            upstream_status: match row.forward {
                ForwardState::Done { status } => Some(status),
                _ => None,
            },
        },
        request: RequestView {
            method: row.method.clone(),
            // INVARIANT: no query string, which may carry secrets too.
            path: row.path.split('?').next().unwrap_or_default().to_string(),
            hash: row.request_hash.clone(),
        },
        approvals: row
            .approvals
            .iter()
            .map(|a| ApprovalView {
                by: a.by.clone(),
                reviewer: a.reviewer.clone(),
                note: a.note.clone(),
                at: backend::from_micros(a.at),
            })
            .collect(),
        approvals_required: row.approvals_required.unwrap_or(approvals_required),
        owner: row.owner.clone(),
        requesters: row.requesters.clone(),
    }
}

fn ser_time<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    let text = crate::support::time::try_rfc3339(*t)
        .ok_or_else(|| serde::ser::Error::custom("a time outside years 1..=9999"))?;
    s.serialize_str(&text)
}

fn ser_opt_time<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => ser_time(t, s),
        None => s.serialize_none(),
    }
}
