//! Storage for reviews and their held requests: the [`Backend`] interface
//! the async shell in [`super`] calls (synchronously, from blocking
//! threads), and its SQLite implementation, the zero-config default. The
//! PostgreSQL one, for several replicas, is `super::pg`.
//!
//! The exactly-once forward promise rests on this file. Every change runs in
//! an `IMMEDIATE` transaction (the write lock is taken before the row is read,
//! so two claims can never both see `not_started`), the pure transition in
//! [`super::state`] decides whether the change is allowed, and the connection
//! runs with `synchronous=FULL` so a commit is on disk before the caller is
//! answered. The database file is shared with other subsystems, so every
//! table here is prefixed `review_` and nothing outside those tables is
//! touched (not even `user_version`).

use std::path::Path;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use rusqlite::types::{ToSqlOutput, Type};
use rusqlite::{named_params, params, Connection, OptionalExtension, ToSql, TransactionBehavior};

use super::state::{self, ForwardEnd, ForwardState, ReviewStatus, Verdict};
use super::{
    ForwardOutcome, HeldRequest, NewReview, ReviewError, UpstreamResponse, MAX_STORED_UPSTREAM_BODY,
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS review_reviews (
    review_id             TEXT PRIMARY KEY NOT NULL,
    created_at            INTEGER NOT NULL,  -- unix microseconds
    expires_at            INTEGER NOT NULL,
    owner                 TEXT NOT NULL,     -- API key name of the held app
    route                 TEXT NOT NULL,
    action                TEXT NOT NULL,
    reason                TEXT NOT NULL,
    record_id             TEXT,              -- audit record of the decision
    req_method            TEXT NOT NULL,
    req_path              TEXT NOT NULL,     -- path and query
    req_body              BLOB NOT NULL,
    req_hash              TEXT NOT NULL,     -- HeldRequest::hash, checked on claim
    req_creds             TEXT NOT NULL DEFAULT '', -- NewReview::join_key (the retry identity)
    rules                 TEXT NOT NULL DEFAULT '[]', -- JSON array of rule messages
    detail                TEXT,              -- JSON: what the reviewer is shown of the decision
    requester             TEXT,              -- JSON list of the API key names behind the held call, if any
    approvals             TEXT NOT NULL DEFAULT '[]', -- JSON: approvals so far
    approvals_required    INTEGER,           -- the action's `approvals`; NULL: the server's
    status                TEXT NOT NULL
        CHECK (status IN ('pending', 'approved', 'rejected', 'expired')),
    reviewer              TEXT,
    note                  TEXT,
    resolved_at           INTEGER,
    forward_state         TEXT NOT NULL DEFAULT 'not_started'
        CHECK (forward_state IN ('not_started', 'started', 'done', 'outcome_unknown')),
    forward_started_at    INTEGER,
    forward_finished_at   INTEGER,
    forward_error         TEXT,
    upstream_status       INTEGER,
    upstream_body         BLOB,              -- first 64 KiB only
    upstream_content_type TEXT
) STRICT;
CREATE INDEX IF NOT EXISTS review_reviews_status_created
    ON review_reviews (status, created_at);
CREATE INDEX IF NOT EXISTS review_reviews_owner_created
    ON review_reviews (owner, created_at);
CREATE TABLE IF NOT EXISTS review_request_headers (
    review_id TEXT NOT NULL REFERENCES review_reviews (review_id) ON DELETE CASCADE,
    position  INTEGER NOT NULL,              -- order as received
    name      TEXT NOT NULL,
    value     BLOB NOT NULL,
    PRIMARY KEY (review_id, position)
) STRICT;
";

/// Every column of a review except the held headers and body, in the order
/// [`Row::read`] expects.
pub(super) const COLUMNS: &str =
    "review_id, created_at, expires_at, owner, route, action, reason, \
     record_id, req_method, req_path, status, reviewer, note, resolved_at, forward_state, \
     upstream_status, req_hash, rules, requester, approvals, approvals_required";

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

/// What [`Store::inspect`] reads.
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
    /// looks for a pending review of the same owner and route holding
    /// exactly this call (see [`super::Reviews::hold`]) and
    /// returns it instead, with `true`. The lookup and the insert cannot
    /// interleave with another hold.
    fn hold(
        &mut self,
        review_id: &str,
        created_at: SystemTime,
        expires_at: SystemTime,
        new: &NewReview,
        join: bool,
    ) -> Result<(Row, bool), ReviewError>;
    fn get(&mut self, review_id: &str) -> Result<Option<Row>, ReviewError>;
    /// See [`SqliteStore::list`].
    fn list(
        &mut self,
        status: Option<ReviewStatus>,
        owner: Option<&str>,
        now: SystemTime,
        limit: usize,
    ) -> Result<Vec<Row>, ReviewError>;
    /// See [`SqliteStore::resolve`].
    fn resolve(
        &mut self,
        review_id: &str,
        verdict: Verdict,
        who: &Resolver<'_>,
        now: SystemTime,
    ) -> Result<Resolved, ReviewError>;
    /// Claims the forward of an approved review: the held request the one
    /// time the claim succeeds, `None` every other time.
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
    /// has, oldest approval first.
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
    /// would have claimed them (that claim failed). SQLite has one
    /// replica, whose background forwarder lists its approvals at start.
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
}

/// The SQLite store: one connection to the data dir's database file.
#[derive(Debug)]
pub(super) struct SqliteStore {
    conn: Connection,
    /// Seals the credential headers of held requests at rest.
    sealer: super::seal::Sealer,
}

// === impl SqliteStore ===

impl SqliteStore {
    /// Opens (or creates) the review tables in the file at `path`, and turns
    /// every forward left `started` by a previous process into
    /// `outcome_unknown`. Returns the store and the ids it recovered.
    pub fn open(
        path: &Path,
        sealer: super::seal::Sealer,
    ) -> Result<(SqliteStore, Vec<String>), ReviewError> {
        crate::store::sqlite::create_private(path)
            .map_err(|e| ReviewError::Storage(format!("{}: {e}", path.display())))?;
        let conn = Connection::open(path)?;
        // A held call waits on this connection (see `crate::store::sqlite`).
        conn.busy_handler(Some(crate::store::sqlite::busy_decision_path))?;
        // WAL is a property of the file; `synchronous` and `foreign_keys`
        // are per connection, and this connection only touches review tables.
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(ReviewError::Storage(format!(
                "cannot enable WAL mode (got {mode})"
            )));
        }
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // No temp files: the pod's root filesystem may be read-only.
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        conn.execute_batch(SCHEMA)?;
        // Columns added since the first schema, in the order they came:
        // older databases get them here, with defaults that keep old rows'
        // meaning.
        for (column, ddl) in [
            // Before credential binding: '' never matches a retried call's
            // credentials.
            ("req_creds", "req_creds TEXT NOT NULL DEFAULT ''"),
            // Before rule messages: their reviews list none.
            ("rules", "rules TEXT NOT NULL DEFAULT '[]'"),
            // Before decision snapshots and four eyes: no snapshot, no
            // requester and no approvals yet.
            ("detail", "detail TEXT"),
            ("requester", "requester TEXT"),
            ("approvals", "approvals TEXT NOT NULL DEFAULT '[]'"),
            // Before per-action approvals: the server's count.
            ("approvals_required", "approvals_required INTEGER"),
        ] {
            let has: bool = conn
                .prepare("SELECT 1 FROM pragma_table_info('review_reviews') WHERE name = ?1")?
                .exists([column])?;
            if !has {
                conn.execute_batch(&format!("ALTER TABLE review_reviews ADD COLUMN {ddl}"))?;
            }
        }
        let mut store = SqliteStore { conn, sealer };
        let recovered = store.recover()?;
        Ok((store, recovered))
    }

    fn recover(&mut self) -> Result<Vec<String>, ReviewError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let ids: Vec<String> = {
            let mut stmt =
                tx.prepare("SELECT review_id FROM review_reviews WHERE forward_state = 'started'")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        let to = state::recover(ForwardState::Started);
        for id in &ids {
            tx.execute(
                "UPDATE review_reviews SET forward_state = ?2, forward_error = ?3 \
                 WHERE review_id = ?1 AND forward_state = 'started'",
                params![
                    id,
                    to,
                    "the process stopped while the forward was in flight"
                ],
            )?;
        }
        tx.commit()?;
        Ok(ids)
    }

    /// Stores a new pending review and its held request in one transaction.
    fn insert(
        &mut self,
        review_id: &str,
        created_at: SystemTime,
        expires_at: SystemTime,
        new: &NewReview,
    ) -> Result<Row, ReviewError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute(
            "INSERT INTO review_reviews (review_id, created_at, expires_at, owner, route, action, \
             reason, record_id, req_method, req_path, req_body, req_hash, status, forward_state, \
             req_creds, rules, detail, requester, approvals_required) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
             ?18, ?19)",
            params![
                review_id,
                micros(created_at),
                micros(expires_at),
                new.owner,
                new.route,
                new.action,
                new.reason,
                new.record_id,
                new.request.method,
                new.request.path,
                new.request.body.as_ref(),
                new.request.hash(),
                ReviewStatus::Pending,
                ForwardState::NotStarted,
                new.join_key.clone(),
                serde_json::to_string(&new.rules)
                    .map_err(|e| ReviewError::Storage(format!("rule messages: {e}")))?,
                new.detail.as_ref().map(|d| d.to_string()),
                encode_requesters(&new.requesters),
                new.approvals_required,
            ],
        )?;
        {
            let mut stmt = tx.prepare(
                "INSERT INTO review_request_headers (review_id, position, name, value) \
                 VALUES (?1, ?2, ?3, ?4)",
            )?;
            for (position, (name, value)) in new.request.headers.iter().enumerate() {
                let position = i64::try_from(position).unwrap_or(i64::MAX);
                let lower = name.to_ascii_lowercase();
                if new.sealed(&lower) {
                    let sealed = self.sealer.seal(review_id, &lower, value).ok_or_else(|| {
                        ReviewError::Storage("cannot seal a held credential".into())
                    })?;
                    stmt.execute(params![review_id, position, name, sealed])?;
                } else {
                    stmt.execute(params![review_id, position, name, value.as_ref()])?;
                }
            }
        }
        let row = load(&tx, review_id)?.ok_or(ReviewError::NotFound)?;
        tx.commit()?;
        Ok(row)
    }

    /// A still-pending review of the same owner and route holding exactly
    /// this request (method, path, body and headers, by its join key): a
    /// client retrying a held call. The oldest one if several (only
    /// possible for reviews stored before this check).
    fn pending_duplicate(
        &self,
        new: &NewReview,
        now: SystemTime,
    ) -> Result<Option<Row>, ReviewError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM review_reviews WHERE status = 'pending' AND expires_at > ?1 \
             AND owner = ?2 AND route = ?3 AND req_method = ?4 AND req_path = ?5 AND req_body = ?6 \
             AND req_creds = ?7 ORDER BY created_at LIMIT 1"
        );
        Ok(self
            .conn
            .query_row(
                &sql,
                params![
                    micros(now),
                    new.owner,
                    new.route,
                    new.request.method,
                    new.request.path,
                    new.request.body.as_ref(),
                    new.join_key.clone()
                ],
                Row::read,
            )
            .optional()?)
    }
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

/// The held headers of a review as stored (credential values still
/// sealed), in the order received.
fn held_headers(conn: &Connection, review_id: &str) -> Result<Vec<(String, Vec<u8>)>, ReviewError> {
    let mut stmt = conn.prepare(
        "SELECT name, value FROM review_request_headers WHERE review_id = ?1 ORDER BY position",
    )?;
    let rows = stmt.query_map([review_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn load(conn: &Connection, review_id: &str) -> Result<Option<Row>, ReviewError> {
    let sql = format!("SELECT {COLUMNS} FROM review_reviews WHERE review_id = ?1");
    Ok(conn.query_row(&sql, [review_id], Row::read).optional()?)
}

/// Stores a pending review as expired; it expired at its deadline.
fn mark_expired(conn: &Connection, row: &Row) -> Result<(), ReviewError> {
    conn.execute(
        "UPDATE review_reviews SET status = ?2, resolved_at = ?3 \
         WHERE review_id = ?1 AND status = 'pending'",
        params![row.review_id, ReviewStatus::Expired, micros(row.expires_at)],
    )?;
    Ok(())
}

impl Backend for SqliteStore {
    fn hold(
        &mut self,
        review_id: &str,
        created_at: SystemTime,
        expires_at: SystemTime,
        new: &NewReview,
        join: bool,
    ) -> Result<(Row, bool), ReviewError> {
        // One connection, locked by the caller: the lookup and the insert
        // cannot interleave with another hold of this process.
        if join {
            if let Some(row) = self.pending_duplicate(new, created_at)? {
                return Ok((row, true));
            }
        }
        Ok((self.insert(review_id, created_at, expires_at, new)?, false))
    }

    fn get(&mut self, review_id: &str) -> Result<Option<Row>, ReviewError> {
        load(&self.conn, review_id)
    }

    /// Reviews whose status *at `now`* is `status` (any when `None`), of
    /// `owner` only when given. Pending ones come oldest first (the queue a
    /// reviewer works through); every other listing comes newest first.
    fn list(
        &mut self,
        status: Option<ReviewStatus>,
        owner: Option<&str>,
        now: SystemTime,
        limit: usize,
    ) -> Result<Vec<Row>, ReviewError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM review_reviews \
             WHERE (:owner IS NULL OR owner = :owner) \
               AND (:status IS NULL \
                 OR (:status = 'pending' AND status = 'pending' AND expires_at > :now) \
                 OR (:status = 'expired' AND (status = 'expired' \
                      OR (status = 'pending' AND expires_at <= :now))) \
                 OR (:status IN ('approved', 'rejected') AND status = :status)) \
             ORDER BY CASE WHEN :status = 'pending' THEN created_at ELSE -created_at END, \
                      review_id \
             LIMIT :limit"
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(
            named_params! {
                ":owner": owner,
                ":status": status,
                ":now": micros(now),
                ":limit": i64::try_from(limit).unwrap_or(i64::MAX),
            },
            Row::read,
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Applies a reviewer's verdict, or stores the expiry that refuses it.
    /// An approval counts once per `who.by`, and approves the review only
    /// when it is the `required`-th distinct one.
    fn resolve(
        &mut self,
        review_id: &str,
        verdict: Verdict,
        who: &Resolver<'_>,
        now: SystemTime,
    ) -> Result<Resolved, ReviewError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let row = load(&tx, review_id)?.ok_or(ReviewError::NotFound)?;
        let status = match plan_resolve(&row, verdict, who, now)? {
            ResolvePlan::Expire => {
                mark_expired(&tx, &row)?;
                let row = load(&tx, review_id)?.ok_or(ReviewError::NotFound)?;
                tx.commit()?;
                return Ok(Resolved::ExpiredNow(row));
            }
            ResolvePlan::Approvals { approvals, then } => {
                tx.execute(
                    "UPDATE review_reviews SET approvals = ?2 WHERE review_id = ?1 AND status = 'pending'",
                    params![review_id, approvals],
                )?;
                then
            }
            ResolvePlan::Status(to) => Some(to),
        };
        let Some(to) = status else {
            let row = load(&tx, review_id)?.ok_or(ReviewError::NotFound)?;
            tx.commit()?;
            return Ok(Resolved::Partial(row));
        };
        tx.execute(
            "UPDATE review_reviews SET status = ?2, reviewer = ?3, note = ?4, resolved_at = ?5 \
             WHERE review_id = ?1 AND status = 'pending'",
            params![review_id, to, who.reviewer, who.note, micros(now)],
        )?;
        let row = load(&tx, review_id)?.ok_or(ReviewError::NotFound)?;
        tx.commit()?;
        Ok(Resolved::Stored(row))
    }

    /// Claims the forward of an approved review: returns the held request the
    /// one time the claim succeeds, `None` every other time.
    fn claim(
        &mut self,
        review_id: &str,
        now: SystemTime,
    ) -> Result<Option<HeldRequest>, ReviewError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let row = load(&tx, review_id)?.ok_or(ReviewError::NotFound)?;
        let to = match state::claim(row.status, row.forward) {
            Ok(to) => to,
            Err(refusal) => {
                tracing::debug!(review_id, ?refusal, "forward claim refused");
                return Ok(None);
            }
        };
        // INVARIANT: the guard on `forward_state` repeats the transition's
        // precondition, so even a bug above could not claim twice.
        let changed = tx.execute(
            "UPDATE review_reviews SET forward_state = ?2, forward_started_at = ?3 \
             WHERE review_id = ?1 AND status = 'approved' AND forward_state = 'not_started'",
            params![review_id, to, micros(now)],
        )?;
        if changed != 1 {
            return Ok(None);
        }
        let (method, path, body): (String, String, Vec<u8>) = tx.query_row(
            "SELECT req_method, req_path, req_body FROM review_reviews WHERE review_id = ?1",
            [review_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let request = open_held(
            &self.sealer,
            review_id,
            (method, path, body),
            held_headers(&tx, review_id)?,
            &row.request_hash,
        )?;
        tx.commit()?;
        Ok(Some(request))
    }

    /// Records how a claimed forward ended.
    fn finish(
        &mut self,
        review_id: &str,
        outcome: &ForwardOutcome,
        now: SystemTime,
    ) -> Result<(), ReviewError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let row = load(&tx, review_id)?.ok_or(ReviewError::NotFound)?;
        let f = plan_finish(row.forward, outcome)?;
        tx.execute(
            "UPDATE review_reviews SET forward_state = ?2, forward_finished_at = ?3, \
             upstream_status = ?4, upstream_body = ?5, upstream_content_type = ?6, \
             forward_error = ?7 WHERE review_id = ?1 AND forward_state = 'started'",
            params![
                review_id,
                f.to,
                micros(now),
                f.status,
                f.body,
                f.content_type,
                f.error
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Stores every pending review at or past its deadline as expired.
    /// Returns those rows and the earliest deadline still pending.
    /// Deletes up to `limit` reviews that were resolved or expired before
    /// `before` and whose forward is over (never started, done, or
    /// `outcome_unknown`), with their held headers and body; pending
    /// reviews and forwards in flight stay. Returns how many went.
    fn purge_resolved(&mut self, before: SystemTime, limit: usize) -> Result<usize, ReviewError> {
        let n = self.conn.execute(
            "DELETE FROM review_reviews WHERE review_id IN (
                 SELECT review_id FROM review_reviews
                 WHERE status != 'pending'
                   AND forward_state != 'started'
                   AND NOT (status = 'approved' AND forward_state = 'not_started')
                   AND COALESCE(resolved_at, expires_at) < ?1
                 LIMIT ?2)",
            rusqlite::params![micros(before), i64::try_from(limit).unwrap_or(i64::MAX)],
        )?;
        Ok(n)
    }

    /// How many reviews are stored, in every state.
    fn count(&mut self) -> Result<u64, ReviewError> {
        let n: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM review_reviews", [], |r| r.get(0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn expire_due(
        &mut self,
        now: SystemTime,
    ) -> Result<(Vec<Row>, Option<SystemTime>), ReviewError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let due: Vec<Row> = {
            let mut stmt = tx.prepare(&format!(
                "SELECT {COLUMNS} FROM review_reviews \
                 WHERE status = 'pending' AND expires_at <= ?1 ORDER BY expires_at"
            ))?;
            let rows = stmt.query_map([micros(now)], Row::read)?;
            rows.collect::<Result<_, _>>()?
        };
        let mut expired = Vec::with_capacity(due.len());
        for row in due {
            if state::expire(row.status, row.expires_at, now).is_some() {
                mark_expired(&tx, &row)?;
                if let Some(row) = load(&tx, &row.review_id)? {
                    expired.push(row);
                }
            }
        }
        let next: Option<i64> = tx.query_row(
            "SELECT MIN(expires_at) FROM review_reviews WHERE status = 'pending'",
            [],
            |r| r.get(0),
        )?;
        tx.commit()?;
        Ok((expired, next.map(from_micros)))
    }

    /// The owner and the stored upstream answer of a review whose forward
    /// is done; `None` otherwise.
    fn upstream(
        &mut self,
        review_id: &str,
    ) -> Result<Option<(String, UpstreamResponse)>, ReviewError> {
        let found = self
            .conn
            .query_row(
                "SELECT owner, upstream_status, upstream_content_type, upstream_body \
                 FROM review_reviews WHERE review_id = ?1 AND forward_state = 'done'",
                [review_id],
                |r| {
                    let status: i64 = r.get(1)?;
                    let status = u16::try_from(status)
                        .map_err(|e| corrupt(1, Type::Integer, e.to_string()))?;
                    let body: Option<Vec<u8>> = r.get(3)?;
                    let response = UpstreamResponse {
                        status,
                        content_type: r.get(2)?,
                        body: Bytes::from(body.unwrap_or_default()),
                    };
                    Ok((r.get::<_, String>(0)?, response))
                },
            )
            .optional()?;
        Ok(found)
    }

    /// The decision snapshots of these reviews (those that have one), read
    /// without their held requests.
    fn details(&mut self, ids: &[String]) -> Result<Vec<(String, serde_json::Value)>, ReviewError> {
        let mut stmt = self
            .conn
            .prepare("SELECT detail FROM review_reviews WHERE review_id = ?1")?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let detail: Option<Option<String>> = stmt.query_row([id], |r| r.get(0)).optional()?;
            if let Some(v) = detail.flatten().and_then(|d| serde_json::from_str(&d).ok()) {
                out.push((id.clone(), v));
            }
        }
        Ok(out)
    }

    /// The held request as a reviewer may see it, and the decision
    /// snapshot: the credential headers stay sealed (their values are
    /// replaced by [`SEALED_PLACEHOLDER`]), since a reviewer needs to know
    /// they were sent, never what they hold.
    fn inspect(&mut self, review_id: &str) -> Result<Option<Inspected>, ReviewError> {
        let Some((path, body, detail)) = self
            .conn
            .query_row(
                "SELECT req_path, req_body, detail FROM review_reviews WHERE review_id = ?1",
                [review_id],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Vec<u8>>(1)?,
                        r.get::<_, Option<String>>(2)?,
                    ))
                },
            )
            .optional()?
        else {
            return Ok(None);
        };
        let headers = held_headers(&self.conn, review_id)?
            .into_iter()
            .map(shown_header)
            .collect();
        let detail = detail.and_then(|d| serde_json::from_str(&d).ok());
        let upstream = self.upstream(review_id)?.map(|(_, u)| u);
        Ok(Some(Inspected {
            path,
            headers,
            body: Bytes::from(body),
            detail,
            upstream,
        }))
    }

    /// `(created_at, review_id)` of every review stored as pending.
    fn pending(&mut self) -> Result<Vec<(SystemTime, String)>, ReviewError> {
        let mut stmt = self
            .conn
            .prepare("SELECT created_at, review_id FROM review_reviews WHERE status = 'pending'")?;
        let rows = stmt.query_map([], |r| Ok((from_micros(r.get(0)?), r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Approved reviews nobody has claimed the forward of, oldest approval first.
    fn approved_unforwarded(&mut self) -> Result<Vec<String>, ReviewError> {
        let mut stmt = self.conn.prepare(
            "SELECT review_id FROM review_reviews \
             WHERE status = 'approved' AND forward_state = 'not_started' \
             ORDER BY resolved_at, review_id",
        )?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn resolved_among(&mut self, ids: &[String]) -> Result<Vec<Row>, ReviewError> {
        let mut out = Vec::new();
        for id in ids {
            if let Some(row) = load(&self.conn, id)? {
                if row.status != ReviewStatus::Pending {
                    out.push(row);
                }
            }
        }
        Ok(out)
    }

    #[cfg(test)]
    fn corrupt_body(&mut self, review_id: &str) {
        self.conn
            .execute(
                "UPDATE review_reviews SET req_body = ?2 WHERE review_id = ?1",
                rusqlite::params![review_id, b"{\"amount\":9000}".as_slice()],
            )
            .unwrap();
    }

    #[cfg(test)]
    fn corrupt_rules(&mut self, review_id: &str) {
        self.conn
            .execute(
                "UPDATE review_reviews SET rules = 'not json' WHERE review_id = ?1",
                [review_id],
            )
            .unwrap();
    }

    #[cfg(test)]
    fn header_rows(&mut self, review_id: &str) -> i64 {
        self.conn
            .query_row(
                "SELECT COUNT(*) FROM review_request_headers WHERE review_id = ?1",
                [review_id],
                |row| row.get(0),
            )
            .unwrap()
    }

    #[cfg(test)]
    fn upstream_body_len(&mut self, review_id: &str) -> usize {
        let len: i64 = self
            .conn
            .query_row(
                "SELECT length(upstream_body) FROM review_reviews WHERE review_id = ?1",
                [review_id],
                |r| r.get(0),
            )
            .unwrap();
        usize::try_from(len).unwrap()
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
            replica: r.replica()?,
        })
    }

    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
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

impl Cells for rusqlite::Row<'_> {
    type Error = rusqlite::Error;
    fn text(&self, i: usize) -> rusqlite::Result<String> {
        self.get(i)
    }
    fn opt_text(&self, i: usize) -> rusqlite::Result<Option<String>> {
        self.get(i)
    }
    fn int(&self, i: usize) -> rusqlite::Result<i64> {
        self.get(i)
    }
    fn opt_int(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.get(i)
    }
    /// One process: no replica.
    fn replica(&self) -> rusqlite::Result<Option<String>> {
        Ok(None)
    }
    fn corrupt(i: usize, what: String) -> rusqlite::Error {
        corrupt(i, Type::Text, format!("bad stored {what}"))
    }
}

fn corrupt(column: usize, ty: Type, message: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(column, ty, message.into())
}

// === SQL conversions ===

impl ToSql for ReviewStatus {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

/// Only the name: the upstream status has its own column.
impl ToSql for ForwardState {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
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

#[cfg(test)]
pub(super) mod tests_support {
    use super::SqliteStore;

    /// The connection's `PRAGMA temp_store` (2 is MEMORY).
    pub fn temp_store(store: &SqliteStore) -> i64 {
        store
            .conn
            .query_row("PRAGMA temp_store", [], |r| r.get(0))
            .unwrap()
    }
}
