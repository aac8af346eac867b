//! The SQLite backend of reviews, the zero-config default: the review tables
//! in the data dir's database file, behind the same [`Backend`] trait as the
//! PostgreSQL one.
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
use std::time::SystemTime;

use bytes::Bytes;
use rusqlite::types::{ToSqlOutput, Type};
use rusqlite::{named_params, params, Connection, OptionalExtension, ToSql, TransactionBehavior};

use super::backend::*;
use super::state::{self, ForwardState, ReviewStatus, Verdict};
use super::{ForwardOutcome, HeldRequest, NewReview, ReviewError, UpstreamResponse};

pub(super) const SCHEMA: &str = "
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
    forwards              INTEGER NOT NULL DEFAULT 1, -- 1: the proxy holds the call; 0: record-only, nothing to forward
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
            // Before record-only reviews: every review held a call to
            // forward.
            ("forwards", "forwards INTEGER NOT NULL DEFAULT 1"),
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
            let mut stmt = tx.prepare(
                "SELECT review_id FROM review_reviews \
                 WHERE forward_state = 'started' AND forwards = 1",
            )?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        let to = state::recover(ForwardState::Started);
        for id in &ids {
            tx.execute(
                "UPDATE review_reviews SET forward_state = ?2, forward_error = ?3 \
                 WHERE review_id = ?1 AND forward_state = 'started' AND forwards = 1",
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
             req_creds, rules, detail, requester, approvals_required, forwards) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
             ?18, ?19, ?20)",
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
                new.forwards,
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

    /// A still-pending review of the same owner, route and kind (held or
    /// record-only) holding exactly this request (method, path, body and
    /// headers, by its join key): a client retrying a held call. The
    /// oldest one if several (only possible for reviews stored before this
    /// check).
    fn pending_duplicate(
        &self,
        new: &NewReview,
        now: SystemTime,
    ) -> Result<Option<Row>, ReviewError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM review_reviews WHERE status = 'pending' AND expires_at > ?1 \
             AND owner = ?2 AND route = ?3 AND req_method = ?4 AND req_path = ?5 AND req_body = ?6 \
             AND req_creds = ?7 AND forwards = ?8 ORDER BY created_at LIMIT 1"
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
                    new.join_key.clone(),
                    new.forwards
                ],
                Row::read,
            )
            .optional()?)
    }
}

/// The held headers of a review as stored (credential values still
/// sealed), in the order received.
pub(super) fn held_headers(
    conn: &Connection,
    review_id: &str,
) -> Result<Vec<(String, Vec<u8>)>, ReviewError> {
    let mut stmt = conn.prepare(
        "SELECT name, value FROM review_request_headers WHERE review_id = ?1 ORDER BY position",
    )?;
    let rows = stmt.query_map([review_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn load(conn: &Connection, review_id: &str) -> Result<Option<Row>, ReviewError> {
    let sql = format!("SELECT {COLUMNS} FROM review_reviews WHERE review_id = ?1");
    Ok(conn.query_row(&sql, [review_id], Row::read).optional()?)
}

/// Stores a pending review as expired; it expired at its deadline.
pub(super) fn mark_expired(conn: &Connection, row: &Row) -> Result<(), ReviewError> {
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
        let to = match state::claim(row.status, row.forward, row.forwards) {
            Ok(to) => to,
            Err(refusal) => {
                tracing::debug!(review_id, ?refusal, "forward claim refused");
                return Ok(None);
            }
        };
        // INVARIANT: the guards on `forward_state` and `forwards` repeat the
        // transition's precondition, so even a bug above could not claim
        // twice, or claim a record-only review.
        let changed = tx.execute(
            "UPDATE review_reviews SET forward_state = ?2, forward_started_at = ?3 \
             WHERE review_id = ?1 AND status = 'approved' AND forward_state = 'not_started' \
               AND forwards = 1",
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
    /// `outcome_unknown`) or that have none (record-only), with their held
    /// headers and body; pending reviews, approvals not yet forwarded and
    /// forwards in flight stay. Returns how many went.
    fn purge_resolved(&mut self, before: SystemTime, limit: usize) -> Result<usize, ReviewError> {
        let n = self.conn.execute(
            "DELETE FROM review_reviews WHERE review_id IN (
                 SELECT review_id FROM review_reviews
                 WHERE status != 'pending'
                   AND forward_state != 'started'
                   AND NOT (status = 'approved' AND forward_state = 'not_started'
                            AND forwards = 1)
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

    /// Approved reviews nobody has claimed the forward of, oldest approval
    /// first; record-only ones have none to claim.
    fn approved_unforwarded(&mut self) -> Result<Vec<String>, ReviewError> {
        let mut stmt = self.conn.prepare(
            "SELECT review_id FROM review_reviews \
             WHERE status = 'approved' AND forward_state = 'not_started' AND forwards = 1 \
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
    fn leave_behind(&mut self, review_id: &str, started: bool) {
        if started {
            self.conn
                .execute(
                    "UPDATE review_reviews SET forward_state = 'started' WHERE review_id = ?1",
                    [review_id],
                )
                .unwrap();
        }
    }

    #[cfg(test)]
    fn stored_forward_state(&mut self, review_id: &str) -> String {
        self.conn
            .query_row(
                "SELECT forward_state FROM review_reviews WHERE review_id = ?1",
                [review_id],
                |r| r.get(0),
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
    fn flag(&self, i: usize) -> rusqlite::Result<bool> {
        match self.get::<_, i64>(i)? {
            0 => Ok(false),
            1 => Ok(true),
            n => Err(corrupt(i, Type::Integer, format!("bad stored flag {n}"))),
        }
    }
    /// One process: no replica.
    fn replica(&self) -> rusqlite::Result<Option<String>> {
        Ok(None)
    }
    fn corrupt(i: usize, what: String) -> rusqlite::Error {
        corrupt(i, Type::Text, format!("bad stored {what}"))
    }
}

pub(super) fn corrupt(column: usize, ty: Type, message: String) -> rusqlite::Error {
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
