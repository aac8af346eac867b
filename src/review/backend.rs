//! Storage for reviews and their held requests: the [`Backend`] interface
//! the async shell in [`super`] calls (synchronously, from blocking
//! threads), and what both implementations share: the row mapping
//! ([`Row::read_from`] over [`Cells`]) and the pure plans of a resolution
//! and of a forward's end. The SQLite implementation, the zero-config
//! default, is `super::sqlite`; the PostgreSQL one, for several replicas,
//! is `super::pg`.

use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::state::{self, ForwardEnd, ForwardState, ReviewStatus, Verdict};
use super::{
    ForwardOutcome, HeldRequest, NewReview, ReviewError, UpstreamResponse, MAX_STORED_UPSTREAM_BODY,
};

/// Every column of a review except the held headers and body, in the order
/// [`Row::read`] expects.
pub(super) const COLUMNS: &str =
    "review_id, created_at, expires_at, owner, route, action, reason, \
     record_id, req_method, req_path, status, reviewer, note, resolved_at, forward_state, \
     upstream_status, req_hash, rules, requester, approvals, approvals_required, forwards";

/// One stored review, without the held headers and body (which only a
/// forward claim reads, so they never travel into views by accident).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Row {
    pub review_id: String,
    pub created_at: SystemTime,
    pub expires_at: SystemTime,
    pub owner: String,
    pub route: String,
    pub action: String,
    pub reason: String,
    pub record_id: Option<String>,
    pub method: String,
    pub path: String,
    pub request_hash: String,
    /// The messages of the rules that fired.
    pub rules: Vec<String>,
    pub status: ReviewStatus,
    pub reviewer: Option<String>,
    pub note: Option<String>,
    pub resolved_at: Option<SystemTime>,
    pub forward: ForwardState,
    /// The API key names behind the held call, none of whom may resolve it.
    pub requesters: Vec<String>,
    /// Approvals so far, oldest first.
    pub approvals: Vec<StoredApproval>,
    /// Distinct approvals the held call's action asks for (its policy's
    /// `approvals`); `None`: the server's `review.approvals`.
    pub approvals_required: Option<u32>,
    /// Whether an approval forwards the held call; `false` for a
    /// record-only review ([`NewReview::forwards`]), whose forward stays
    /// `not_started` in the database and is never claimed.
    pub forwards: bool,
    /// With a shared store: the replica holding the client connection and
    /// the first right to forward. `None` in SQLite (one replica).
    pub replica: Option<String>,
}

/// One approval of a review.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredApproval {
    /// The API key name: who counts as one person.
    pub by: String,
    /// The reviewer as they named themselves.
    pub reviewer: String,
    pub note: Option<String>,
    /// Unix microseconds.
    pub at: i64,
}

/// Who resolves a review, and how many approvers it needs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Resolver<'a> {
    /// The API key name: one person for four eyes.
    pub by: &'a str,
    /// The reviewer as they named themselves.
    pub reviewer: &'a str,
    pub note: Option<&'a str>,
    /// Distinct approvals that approve a review whose action sets none
    /// (the server's `review.approvals`).
    pub required: u32,
}

/// What [`Backend::inspect`] reads.
#[derive(Debug, Clone)]
pub(super) struct Inspected {
    pub path: String,
    pub headers: Vec<(String, Bytes)>,
    pub body: Bytes,
    pub detail: Option<serde_json::Value>,
    pub upstream: Option<UpstreamResponse>,
}

/// What a reviewer sees in place of a sealed credential's value.
pub const SEALED_PLACEHOLDER: &str = "[sealed]";

/// What a resolve call did.
#[derive(Debug)]
pub(super) enum Resolved {
    /// The reviewer's verdict is stored; the row as it is now.
    Stored(Row),
    /// The review was pending past its deadline: it is stored as expired now
    /// and the verdict is refused.
    ExpiredNow(Row),
    /// An approval is recorded; the review waits for more approvers.
    Partial(Row),
}

/// What the review subsystem needs of its storage. Every call is
/// synchronous and runs on a blocking thread; every change is one
/// transaction, and the exactly-once guards (a single-use resolution, a
/// forward claimed once) hold in the database, whatever the caller does.
pub(super) trait Backend: Send {
    /// Stores a new pending review and its held request; with `join`, first
    /// looks for a pending review of the same owner, route and kind
    /// ([`NewReview::forwards`]) holding exactly this call (see
    /// [`super::Reviews::hold`]) and returns it instead, with `true`. The
    /// lookup and the insert cannot interleave with another hold.
    fn hold(
        &mut self,
        review_id: &str,
        created_at: SystemTime,
        expires_at: SystemTime,
        new: &NewReview,
        join: bool,
    ) -> Result<(Row, bool), ReviewError>;
    fn get(&mut self, review_id: &str) -> Result<Option<Row>, ReviewError>;
    /// See [`super::sqlite::SqliteStore::list`].
    fn list(
        &mut self,
        status: Option<ReviewStatus>,
        owner: Option<&str>,
        now: SystemTime,
        limit: usize,
    ) -> Result<Vec<Row>, ReviewError>;
    /// See [`super::sqlite::SqliteStore::resolve`].
    fn resolve(
        &mut self,
        review_id: &str,
        verdict: Verdict,
        who: &Resolver<'_>,
        now: SystemTime,
    ) -> Result<Resolved, ReviewError>;
    /// Claims the forward of an approved review: the held request the one
    /// time the claim succeeds, `None` every other time (a record-only
    /// review's included: it is never claimed).
    fn claim(
        &mut self,
        review_id: &str,
        now: SystemTime,
    ) -> Result<Option<HeldRequest>, ReviewError>;
    fn finish(
        &mut self,
        review_id: &str,
        outcome: &ForwardOutcome,
        now: SystemTime,
    ) -> Result<(), ReviewError>;
    fn purge_resolved(&mut self, before: SystemTime, limit: usize) -> Result<usize, ReviewError>;
    fn count(&mut self) -> Result<u64, ReviewError>;
    fn expire_due(
        &mut self,
        now: SystemTime,
    ) -> Result<(Vec<Row>, Option<SystemTime>), ReviewError>;
    fn upstream(
        &mut self,
        review_id: &str,
    ) -> Result<Option<(String, UpstreamResponse)>, ReviewError>;
    fn details(&mut self, ids: &[String]) -> Result<Vec<(String, serde_json::Value)>, ReviewError>;
    fn inspect(&mut self, review_id: &str) -> Result<Option<Inspected>, ReviewError>;
    /// `(created_at, review_id)` of every review stored as pending.
    fn pending(&mut self) -> Result<Vec<(SystemTime, String)>, ReviewError>;
    /// Approved reviews whose forward this process may claim and nobody
    /// has, oldest approval first; never a record-only one.
    fn approved_unforwarded(&mut self) -> Result<Vec<String>, ReviewError>;
    /// Of these reviews, the ones no longer pending, as stored: how a
    /// replica learns of resolutions made elsewhere.
    fn resolved_among(&mut self, ids: &[String]) -> Result<Vec<Row>, ReviewError>;
    /// Forwards left `started` by a replica that is gone become
    /// `outcome_unknown`; returns their ids. SQLite does this once, at open.
    fn recover_lapsed(&mut self) -> Result<Vec<String>, ReviewError> {
        Ok(Vec::new())
    }
    /// Approved reviews nobody has claimed whose holding replica is gone:
    /// what a replica takes over. This replica's own only once they are
    /// well past the moment its waiting connection or unattended queue
    /// would have claimed them (that claim failed). Never a record-only
    /// one. SQLite has one replica, whose background forwarder lists its
    /// approvals at start.
    fn orphaned_approvals(&mut self) -> Result<Vec<String>, ReviewError> {
        Ok(Vec::new())
    }
    /// Test hooks: flip a stored body as a disk error might; the stored
    /// length of an upstream answer.
    #[cfg(test)]
    fn corrupt_body(&mut self, review_id: &str);
    /// Test hook: stores rule messages that are not JSON.
    #[cfg(test)]
    fn corrupt_rules(&mut self, review_id: &str);
    #[cfg(test)]
    fn upstream_body_len(&mut self, review_id: &str) -> usize;
    /// Test hook: how many held headers are stored for a review.
    #[cfg(test)]
    fn header_rows(&mut self, review_id: &str) -> i64;
    /// Test hook: leaves a review as a process or replica that is gone
    /// would: with `started`, its forward in flight; in a shared store,
    /// also held (and forwarded) by a replica with no lease.
    #[cfg(test)]
    fn leave_behind(&mut self, review_id: &str, started: bool);
    /// Test hook: the `forward_state` column as stored.
    #[cfg(test)]
    fn stored_forward_state(&mut self, review_id: &str) -> String;
}

/// What a reviewer's verdict does to a pending review, decided from the
/// row as stored (the same for every backend).
pub(super) enum ResolvePlan {
    /// The deadline passed: store the expiry and refuse the verdict.
    Expire,
    /// Store this JSON list of approvals; then the final status, or `None`
    /// when more approvers are needed.
    Approvals {
        approvals: String,
        then: Option<ReviewStatus>,
    },
    /// Store this final status.
    Status(ReviewStatus),
}

/// Applies the pure transitions to a resolve call: four eyes (whoever made
/// the held call never resolves it), one approval per key, the deadline,
/// single use.
pub(super) fn plan_resolve(
    row: &Row,
    verdict: Verdict,
    who: &Resolver<'_>,
    now: SystemTime,
) -> Result<ResolvePlan, ReviewError> {
    match state::resolve(row.status, row.expires_at, now, verdict) {
        Ok(_) if row.requesters.iter().any(|r| r == who.by) => Err(ReviewError::OwnCall),
        Ok(to) if verdict == Verdict::Approve => {
            let so_far: Vec<&str> = row.approvals.iter().map(|a| a.by.as_str()).collect();
            let required = row.approvals_required.unwrap_or(who.required);
            let approval = state::approve(&so_far, who.by, required)
                .map_err(|_| ReviewError::AlreadyApprovedBy)?;
            let mut approvals = row.approvals.clone();
            approvals.push(StoredApproval {
                by: who.by.to_string(),
                reviewer: who.reviewer.to_string(),
                note: who.note.map(str::to_string),
                at: micros(now),
            });
            let approvals = serde_json::to_string(&approvals)
                .map_err(|e| ReviewError::Storage(format!("approvals: {e}")))?;
            let then = match approval {
                state::Approval::Partial { .. } => None,
                _ => Some(to),
            };
            Ok(ResolvePlan::Approvals { approvals, then })
        }
        Ok(to) => Ok(ResolvePlan::Status(to)),
        Err(state::ResolveRefusal::Expired) if row.status == ReviewStatus::Pending => {
            Ok(ResolvePlan::Expire)
        }
        Err(state::ResolveRefusal::Expired) => Err(ReviewError::Expired),
        Err(state::ResolveRefusal::AlreadyApprovedBy) => Err(ReviewError::AlreadyApprovedBy),
        Err(state::ResolveRefusal::AlreadyResolved(status)) => {
            Err(ReviewError::AlreadyResolved(status))
        }
    }
}

/// The columns a finished forward stores: the upstream's answer (its body
/// cut to [`MAX_STORED_UPSTREAM_BODY`]) or the error.
pub(super) struct Finish<'a> {
    pub to: ForwardState,
    pub status: Option<u16>,
    pub body: Option<&'a [u8]>,
    pub content_type: Option<&'a str>,
    pub error: Option<&'a str>,
}

/// How a claimed forward ends, or `NotForwarding` when it is not in
/// flight.
pub(super) fn plan_finish(
    forward: ForwardState,
    outcome: &ForwardOutcome,
) -> Result<Finish<'_>, ReviewError> {
    let end = match outcome {
        ForwardOutcome::Done { status, .. } => ForwardEnd::Done { status: *status },
        ForwardOutcome::Failed { .. } => ForwardEnd::Failed,
    };
    let to = state::finish(forward, end).map_err(|r| ReviewError::NotForwarding(r.0.as_str()))?;
    Ok(match outcome {
        ForwardOutcome::Done {
            status,
            body,
            content_type,
        } => Finish {
            to,
            status: Some(*status),
            body: Some(&body[..body.len().min(MAX_STORED_UPSTREAM_BODY)]),
            content_type: content_type.as_deref(),
            error: None,
        },
        ForwardOutcome::Failed { error } => Finish {
            to,
            status: None,
            body: None,
            content_type: None,
            error: Some(error),
        },
    })
}

/// The held request of a claimed forward, its credentials unsealed, or
/// `Corrupt` when a credential does not open or the request no longer
/// hashes as it did when it was held: the caller rolls the claim back, so
/// corrupt bytes are never forwarded and the review stays approved for an
/// operator.
pub(super) fn open_held(
    sealer: &super::seal::Sealer,
    review_id: &str,
    (method, path, body): (String, String, Vec<u8>),
    stored_headers: Vec<(String, Vec<u8>)>,
    request_hash: &str,
) -> Result<HeldRequest, ReviewError> {
    let mut headers = Vec::with_capacity(stored_headers.len());
    for (name, stored) in stored_headers {
        let lower = name.to_ascii_lowercase();
        let value = if super::seal::Sealer::applies(&lower)
            || super::seal::Sealer::is_sealed(&stored)
        {
            sealer.open(review_id, &lower, &stored).map_err(|_| {
                tracing::error!(review_id, header = %lower, "a held credential does not open; not forwarded");
                ReviewError::Corrupt(review_id.to_string())
            })?
        } else {
            stored
        };
        headers.push((name, Bytes::from(value)));
    }
    let request = HeldRequest {
        method,
        path,
        headers,
        body: Bytes::from(body),
    };
    if request.hash() != request_hash {
        tracing::error!(
            review_id,
            "held request fails its integrity check; not forwarded"
        );
        return Err(ReviewError::Corrupt(review_id.to_string()));
    }
    Ok(request)
}

/// A held header as a reviewer sees it: a credential's value (by name, or
/// sealed under a route's `credential_headers`) replaced by
/// [`SEALED_PLACEHOLDER`].
pub(super) fn shown_header((name, value): (String, Vec<u8>)) -> (String, Bytes) {
    let sealed = super::seal::Sealer::applies(&name.to_ascii_lowercase())
        || super::seal::Sealer::is_sealed(&value);
    let value = if sealed {
        Bytes::from_static(SEALED_PLACEHOLDER.as_bytes())
    } else {
        Bytes::from(value)
    };
    (name, value)
}

/// The requesters column: `NULL` for none, else a JSON list of key names.
pub(super) fn encode_requesters(names: &[String]) -> Option<String> {
    if names.is_empty() {
        return None;
    }
    serde_json::to_string(names).ok()
}

/// The requesters column read back: a JSON list, or one plain key name
/// (rows stored when a review had at most one requester).
pub(super) fn decode_requesters(cell: Option<String>) -> Vec<String> {
    match cell {
        None => Vec::new(),
        Some(text) => match serde_json::from_str::<Vec<String>>(&text) {
            Ok(names) => names,
            Err(_) => vec![text],
        },
    }
}

// === impl Row ===

/// Cell access by column index, so that one mapping ([`Row::read_from`])
/// serves both backends. Each backend reads a column as the type its
/// schema stores and says how a value the code never writes is reported.
pub(super) trait Cells {
    type Error;
    fn text(&self, i: usize) -> Result<String, Self::Error>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, Self::Error>;
    fn int(&self, i: usize) -> Result<i64, Self::Error>;
    fn opt_int(&self, i: usize) -> Result<Option<i64>, Self::Error>;
    /// A yes/no column (`INTEGER` 0 or 1 in SQLite, `BOOLEAN` in PostgreSQL).
    fn flag(&self, i: usize) -> Result<bool, Self::Error>;
    /// The holding replica (the column after [`COLUMNS`] in a shared store).
    fn replica(&self) -> Result<Option<String>, Self::Error>;
    /// Column `i` holds a value the code never writes.
    fn corrupt(i: usize, what: String) -> Self::Error;
}

impl Row {
    /// Maps the cells of one [`COLUMNS`] row.
    pub(super) fn read_from<C: Cells>(r: &C) -> Result<Row, C::Error> {
        let forward_name = r.text(14)?;
        let upstream_status = r
            .opt_int(15)?
            .map(|s| u16::try_from(s).map_err(|_| C::corrupt(15, format!("upstream status {s}"))))
            .transpose()?;
        let forward = ForwardState::parse(&forward_name, upstream_status)
            .ok_or_else(|| C::corrupt(14, format!("forward state {forward_name:?}")))?;
        let status = r.text(10)?;
        Ok(Row {
            review_id: r.text(0)?,
            created_at: from_micros(r.int(1)?),
            expires_at: from_micros(r.int(2)?),
            owner: r.text(3)?,
            route: r.text(4)?,
            action: r.text(5)?,
            reason: r.text(6)?,
            record_id: r.opt_text(7)?,
            method: r.text(8)?,
            path: r.text(9)?,
            status: ReviewStatus::parse(&status)
                .ok_or_else(|| C::corrupt(10, format!("review status {status:?}")))?,
            reviewer: r.opt_text(11)?,
            note: r.opt_text(12)?,
            resolved_at: r.opt_int(13)?.map(from_micros),
            forward,
            request_hash: r.text(16)?,
            rules: json_cell(r, 17, "rule messages")?,
            requesters: decode_requesters(r.opt_text(18)?),
            approvals: json_cell(r, 19, "approvals")?,
            approvals_required: r
                .opt_int(20)?
                .map(|n| u32::try_from(n).map_err(|_| C::corrupt(20, format!("approvals {n}"))))
                .transpose()?,
            forwards: r.flag(21)?,
            replica: r.replica()?,
        })
    }

    pub(super) fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
        Row::read_from(r)
    }
}

/// A JSON text column.
fn json_cell<C: Cells, T: serde::de::DeserializeOwned>(
    r: &C,
    i: usize,
    what: &str,
) -> Result<T, C::Error> {
    serde_json::from_str(&r.text(i)?).map_err(|e| C::corrupt(i, format!("{what}: {e}")))
}

/// Unix microseconds, saturating; times before 1970 are stored as 0.
pub(super) fn micros(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

pub(super) fn from_micros(us: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_micros(u64::try_from(us).unwrap_or(0))
}
