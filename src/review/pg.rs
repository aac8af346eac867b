//! PostgreSQL storage for reviews, for several replicas sharing one review
//! queue (`[store] url = "postgres://…"`); the schema is in
//! `crate::store::postgres`.
//!
//! It keeps the promises of the SQLite store across processes that share
//! nothing but the database. A row is locked (`FOR UPDATE`) before a
//! transition reads it, so two replicas resolving the same review take
//! turns. The forward claim is one conditional `UPDATE … WHERE
//! forward_state = 'not_started'`, never a read then a write, and it
//! refuses every replica but the one holding the call while that
//! replica's lease is alive. Once the lease lapses any replica may claim,
//! still once, and a forward left `started` by a replica that is gone
//! becomes `outcome_unknown`. A resolution or expiry is announced with
//! `NOTIFY`, sent on commit, so the holding replica wakes its waiter at
//! once.
//!
//! Like the SQLite store it is synchronous and runs on blocking threads;
//! each call drives the async client with [`SharedStore::block_on`].
mod rows;
use rows::{
    held_headers, insert_headers, insert_review, joinable, load, load_locked, mark_expired, notify,
    read_row, upstream, NewRow,
};

use std::time::SystemTime;

use bytes::Bytes;
use tokio_postgres::types::ToSql;

use super::backend::{
    from_micros, micros, open_held, plan_finish, plan_resolve, Backend, Cells, Inspected,
    ResolvePlan, Resolver, Row, COLUMNS,
};
use super::state::{self, ForwardState, ReviewStatus, Verdict};
use super::{ForwardOutcome, HeldRequest, NewReview, ReviewError, UpstreamResponse};
use crate::store::postgres::{error_text, SharedStore, NOW_MICROS, REVIEWS_CHANNEL};

/// The advisory lock that makes [`super::Reviews::resolution_turn`] one
/// turn for every replica (an arbitrary constant).
const RESOLUTION_LOCK: i64 = 0x7265_7669_6577;

/// True when the review's holding replica has no live lease.
fn holder_gone() -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM verdict_replicas r \
         WHERE r.replica_id = review_reviews.replica AND r.lease_until > {NOW_MICROS})"
    )
}

/// The columns of a [`Row`], in the order [`read_row`] expects.
fn columns() -> String {
    format!("{COLUMNS}, replica")
}

pub(super) struct PgStore {
    shared: SharedStore,
    sealer: super::seal::Sealer,
}

impl PgStore {
    pub fn new(shared: SharedStore, sealer: super::seal::Sealer) -> PgStore {
        PgStore { shared, sealer }
    }

    fn me(&self) -> &str {
        self.shared.replica()
    }

    /// The held request's headers as they are stored, in order, each
    /// credential sealed.
    fn stored_headers(
        &self,
        review_id: &str,
        new: &NewReview,
    ) -> Result<Vec<(String, Vec<u8>)>, ReviewError> {
        let mut headers = Vec::with_capacity(new.request.headers.len());
        for (name, value) in &new.request.headers {
            let lower = name.to_ascii_lowercase();
            let stored = if new.sealed(&lower) {
                self.sealer
                    .seal(review_id, &lower, value)
                    .ok_or_else(|| ReviewError::Storage("cannot seal a held credential".into()))?
            } else {
                value.to_vec()
            };
            headers.push((name.clone(), stored));
        }
        Ok(headers)
    }

    /// Test hook: the one number `sql` selects for a review.
    #[cfg(test)]
    fn test_count(&self, sql: &str, review_id: &str) -> i64 {
        self.shared
            .block_on(async {
                let client = self.shared.client().await?;
                let n: i64 = client.query_one(sql, &[&review_id]).await?.try_get(0)?;
                Ok::<_, ReviewError>(n)
            })
            .unwrap()
    }

    /// Test hook: runs one statement.
    #[cfg(test)]
    fn test_execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) {
        self.shared
            .block_on(async {
                self.shared.client().await?.execute(sql, params).await?;
                Ok::<_, ReviewError>(())
            })
            .unwrap();
    }

    /// The review ids `sql` selects, given this replica's id as `$1`.
    fn ids(&self, sql: &str) -> Result<Vec<String>, ReviewError> {
        self.shared.block_on(async {
            let client = self.shared.client().await?;
            client
                .query(sql, &[&self.me()])
                .await?
                .iter()
                .map(|r| Ok(r.try_get(0)?))
                .collect()
        })
    }
}

/// A statement the database refused is a storage error; a connection
/// that failed, or a refusal that passes (see `store::postgres::is_transient`), is
/// the store being unavailable.
impl From<tokio_postgres::Error> for ReviewError {
    fn from(e: tokio_postgres::Error) -> ReviewError {
        if crate::store::postgres::is_transient(&e) {
            ReviewError::Unavailable(error_text(&e))
        } else {
            ReviewError::Storage(error_text(&e))
        }
    }
}

impl From<deadpool_postgres::PoolError> for ReviewError {
    fn from(e: deadpool_postgres::PoolError) -> ReviewError {
        ReviewError::Unavailable(format!("no connection to the shared store: {e}"))
    }
}

impl Backend for PgStore {
    fn hold(
        &mut self,
        review_id: &str,
        created_at: SystemTime,
        expires_at: SystemTime,
        new: &NewReview,
        join: bool,
    ) -> Result<(Row, bool), ReviewError> {
        let rules = serde_json::to_string(&new.rules)
            .map_err(|e| ReviewError::Storage(format!("rule messages: {e}")))?;
        let headers = self.stored_headers(review_id, new)?;
        let inserted = NewRow {
            review_id,
            created_at,
            expires_at,
            new,
            rules,
            detail: new.detail.as_ref().map(|d| d.to_string()),
            replica: self.me().to_string(),
        };
        self.shared.block_on(async {
            let mut client = self.shared.client().await?;
            let tx = client.transaction().await?;
            if join {
                if let Some(row) = joinable(&tx, new, created_at).await? {
                    return Ok((row, true));
                }
            }
            insert_review(&tx, &inserted).await?;
            insert_headers(&tx, review_id, headers).await?;
            let row = load(&tx, review_id, false)
                .await?
                .ok_or(ReviewError::NotFound)?;
            tx.commit().await?;
            Ok((row, false))
        })
    }

    fn get(&mut self, review_id: &str) -> Result<Option<Row>, ReviewError> {
        self.shared.block_on(async {
            let client = self.shared.client().await?;
            load(&client, review_id, false).await
        })
    }

    fn list(
        &mut self,
        status: Option<ReviewStatus>,
        owner: Option<&str>,
        now: SystemTime,
        limit: usize,
    ) -> Result<Vec<Row>, ReviewError> {
        let sql = format!(
            "SELECT {} FROM review_reviews \
             WHERE ($1::text IS NULL OR owner = $1) \
               AND ($2::text IS NULL \
                 OR ($2 = 'pending' AND status = 'pending' AND expires_at > $3) \
                 OR ($2 = 'expired' AND (status = 'expired' \
                      OR (status = 'pending' AND expires_at <= $3))) \
                 OR ($2 IN ('approved', 'rejected') AND status = $2)) \
             ORDER BY CASE WHEN $2 = 'pending' THEN created_at ELSE -created_at END, review_id \
             LIMIT $4",
            columns()
        );
        let status = status.map(ReviewStatus::as_str);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.shared.block_on(async {
            let client = self.shared.client().await?;
            let rows = client
                .query(&sql, &[&owner, &status, &micros(now), &limit])
                .await?;
            rows.iter().map(read_row).collect()
        })
    }

    fn resolve(
        &mut self,
        review_id: &str,
        verdict: Verdict,
        who: &Resolver<'_>,
        now: SystemTime,
    ) -> Result<Resolved, ReviewError> {
        self.shared.block_on(async {
            let mut client = self.shared.client().await?;
            let tx = client.transaction().await?;
            let row = load_locked(&tx, review_id).await?;
            let plan = plan_resolve(&row, verdict, who, now)?;
            let to = match plan {
                ResolvePlan::Expire => {
                    mark_expired(&tx, &[review_id]).await?;
                    let row = load(&tx, review_id, false)
                        .await?
                        .ok_or(ReviewError::NotFound)?;
                    tx.commit().await?;
                    return Ok(Resolved::ExpiredNow(row));
                }
                ResolvePlan::Approvals { approvals, then } => {
                    tx.execute(
                        "UPDATE review_reviews SET approvals = $2 \
                         WHERE review_id = $1 AND status = 'pending'",
                        &[&review_id, &approvals],
                    )
                    .await?;
                    then
                }
                ResolvePlan::Status(to) => Some(to),
            };
            let Some(to) = to else {
                let row = load(&tx, review_id, false)
                    .await?
                    .ok_or(ReviewError::NotFound)?;
                tx.commit().await?;
                return Ok(Resolved::Partial(row));
            };
            tx.execute(
                "UPDATE review_reviews SET status = $2, reviewer = $3, note = $4, \
                 resolved_at = $5 WHERE review_id = $1 AND status = 'pending'",
                &[
                    &review_id,
                    &to.as_str(),
                    &who.reviewer,
                    &who.note,
                    &micros(now),
                ],
            )
            .await?;
            notify(&tx, review_id).await?;
            let row = load(&tx, review_id, false)
                .await?
                .ok_or(ReviewError::NotFound)?;
            tx.commit().await?;
            Ok(Resolved::Stored(row))
        })
    }

    fn claim(
        &mut self,
        review_id: &str,
        now: SystemTime,
    ) -> Result<Option<HeldRequest>, ReviewError> {
        let me = self.me().to_string();
        self.shared.block_on(async {
            let mut client = self.shared.client().await?;
            let tx = client.transaction().await?;
            // The claim itself: one conditional UPDATE, so two replicas
            // (or two tasks) can never both move `not_started` on.
            let claimed = tx
                .query_opt(
                    &format!(
                        "UPDATE review_reviews SET forward_state = $2, forward_started_at = $3, \
                         forward_replica = $4 \
                         WHERE review_id = $1 AND status = 'approved' AND forwards \
                           AND forward_state = 'not_started' AND (replica = $4 OR {}) \
                         RETURNING req_method, req_path, req_body, req_hash",
                        holder_gone()
                    ),
                    &[
                        &review_id,
                        &ForwardState::Started.as_str(),
                        &micros(now),
                        &me,
                    ],
                )
                .await?;
            let Some(c) = claimed else {
                let exists = tx
                    .query_opt(
                        "SELECT 1 FROM review_reviews WHERE review_id = $1",
                        &[&review_id],
                    )
                    .await?;
                if exists.is_none() {
                    return Err(ReviewError::NotFound);
                }
                // Not approved, claimed before, held by a live replica, or
                // record-only (never claimed).
                tracing::debug!(review_id, "forward claim refused");
                return Ok(None);
            };
            let stored_headers = held_headers(&tx, review_id).await?;
            // An error drops `tx` uncommitted: the claim rolls back.
            let request = open_held(
                &self.sealer,
                review_id,
                (c.try_get(0)?, c.try_get(1)?, c.try_get(2)?),
                stored_headers,
                &c.try_get::<_, String>(3)?,
            )?;
            tx.commit().await?;
            Ok(Some(request))
        })
    }

    fn finish(
        &mut self,
        review_id: &str,
        outcome: &ForwardOutcome,
        now: SystemTime,
    ) -> Result<(), ReviewError> {
        self.shared.block_on(async {
            let mut client = self.shared.client().await?;
            let tx = client.transaction().await?;
            let row = load_locked(&tx, review_id).await?;
            let f = plan_finish(row.forward, outcome)?;
            tx.execute(
                "UPDATE review_reviews SET forward_state = $2, forward_finished_at = $3, \
                 upstream_status = $4, upstream_body = $5, upstream_content_type = $6, \
                 forward_error = $7 WHERE review_id = $1 AND forward_state = 'started'",
                &[
                    &review_id,
                    &f.to.as_str(),
                    &micros(now),
                    &f.status.map(i32::from),
                    &f.body,
                    &f.content_type,
                    &f.error,
                ],
            )
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn purge_resolved(&mut self, before: SystemTime, limit: usize) -> Result<usize, ReviewError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.shared.block_on(async {
            let client = self.shared.client().await?;
            let n = client
                .execute(
                    "DELETE FROM review_reviews WHERE review_id IN (
                         SELECT review_id FROM review_reviews
                         WHERE status != 'pending'
                           AND forward_state != 'started'
                           AND NOT (status = 'approved' AND forward_state = 'not_started'
                                    AND forwards)
                           AND COALESCE(resolved_at, expires_at) < $1
                         LIMIT $2)",
                    &[&micros(before), &limit],
                )
                .await?;
            Ok(usize::try_from(n).unwrap_or(usize::MAX))
        })
    }

    fn count(&mut self) -> Result<u64, ReviewError> {
        self.shared.block_on(async {
            let client = self.shared.client().await?;
            let n: i64 = client
                .query_one("SELECT COUNT(*) FROM review_reviews", &[])
                .await?
                .try_get(0)?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
    }

    fn expire_due(
        &mut self,
        now: SystemTime,
    ) -> Result<(Vec<Row>, Option<SystemTime>), ReviewError> {
        self.shared.block_on(async {
            let mut client = self.shared.client().await?;
            let tx = client.transaction().await?;
            // Rows another replica is resolving are skipped, not waited
            // for: that replica stores the outcome.
            let due: Vec<String> = tx
                .query(
                    "SELECT review_id FROM review_reviews \
                     WHERE status = 'pending' AND expires_at <= $1 \
                     ORDER BY expires_at FOR UPDATE SKIP LOCKED",
                    &[&micros(now)],
                )
                .await?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?;
            let ids: Vec<&str> = due.iter().map(String::as_str).collect();
            mark_expired(&tx, &ids).await?;
            let mut expired = Vec::with_capacity(due.len());
            for id in &due {
                notify(&tx, id).await?;
                if let Some(row) = load(&tx, id, false).await? {
                    expired.push(row);
                }
            }
            let next: Option<i64> = tx
                .query_one(
                    "SELECT MIN(expires_at) FROM review_reviews WHERE status = 'pending'",
                    &[],
                )
                .await?
                .try_get(0)?;
            tx.commit().await?;
            Ok((expired, next.map(from_micros)))
        })
    }

    fn upstream(
        &mut self,
        review_id: &str,
    ) -> Result<Option<(String, UpstreamResponse)>, ReviewError> {
        self.shared.block_on(async {
            let client = self.shared.client().await?;
            upstream(&client, review_id).await
        })
    }

    fn details(&mut self, ids: &[String]) -> Result<Vec<(String, serde_json::Value)>, ReviewError> {
        self.shared.block_on(async {
            let client = self.shared.client().await?;
            let rows = client
                .query(
                    "SELECT review_id, detail FROM review_reviews \
                     WHERE review_id = ANY($1) AND detail IS NOT NULL",
                    &[&ids],
                )
                .await?;
            let mut found = std::collections::HashMap::with_capacity(rows.len());
            for r in rows {
                let (id, detail): (String, String) = (r.try_get(0)?, r.try_get(1)?);
                if let Ok(v) = serde_json::from_str(&detail) {
                    found.insert(id, v);
                }
            }
            // In the order asked, as the SQLite store answers.
            Ok(ids
                .iter()
                .filter_map(|id| found.remove(id).map(|v| (id.clone(), v)))
                .collect())
        })
    }

    fn inspect(&mut self, review_id: &str) -> Result<Option<Inspected>, ReviewError> {
        self.shared.block_on(async {
            let client = self.shared.client().await?;
            let Some(r) = client
                .query_opt(
                    "SELECT req_path, req_body, detail FROM review_reviews WHERE review_id = $1",
                    &[&review_id],
                )
                .await?
            else {
                return Ok(None);
            };
            let (path, body, detail): (String, Vec<u8>, Option<String>) =
                (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
            let headers = held_headers(&client, review_id)
                .await?
                .into_iter()
                .map(super::backend::shown_header)
                .collect();
            Ok(Some(Inspected {
                path,
                headers,
                body: Bytes::from(body),
                detail: detail.and_then(|d| serde_json::from_str(&d).ok()),
                upstream: upstream(&client, review_id).await?.map(|(_, u)| u),
            }))
        })
    }

    fn pending(&mut self) -> Result<Vec<(SystemTime, String)>, ReviewError> {
        self.shared.block_on(async {
            let client = self.shared.client().await?;
            client
                .query(
                    "SELECT created_at, review_id FROM review_reviews \
                     WHERE status = 'pending' AND replica = $1",
                    &[&self.me()],
                )
                .await?
                .iter()
                .map(|r| Ok((from_micros(r.try_get(0)?), r.try_get(1)?)))
                .collect()
        })
    }

    fn approved_unforwarded(&mut self) -> Result<Vec<String>, ReviewError> {
        self.ids(&format!(
            "SELECT review_id FROM review_reviews \
             WHERE status = 'approved' AND forward_state = 'not_started' AND forwards \
               AND (replica = $1 OR {}) \
             ORDER BY resolved_at, review_id",
            holder_gone()
        ))
    }

    fn orphaned_approvals(&mut self) -> Result<Vec<String>, ReviewError> {
        // This replica's own approvals only once they are three leases old:
        // by then its waiting connection or unattended queue has claimed
        // them unless that claim failed (a store blip), which this retries.
        let stale_us = i64::try_from(self.shared.lease().as_micros() * 3).unwrap_or(i64::MAX);
        let sql = format!(
            "SELECT review_id FROM review_reviews \
             WHERE status = 'approved' AND forward_state = 'not_started' AND forwards \
               AND ((replica <> $1 AND {}) OR (replica = $1 AND resolved_at < {NOW_MICROS} - $2)) \
             ORDER BY resolved_at, review_id",
            holder_gone()
        );
        self.shared.block_on(async {
            let client = self.shared.client().await?;
            client
                .query(&sql, &[&self.me(), &stale_us])
                .await?
                .iter()
                .map(|r| Ok(r.try_get(0)?))
                .collect()
        })
    }

    fn resolved_among(&mut self, ids: &[String]) -> Result<Vec<Row>, ReviewError> {
        self.shared.block_on(async {
            let client = self.shared.client().await?;
            client
                .query(
                    &format!(
                        "SELECT {} FROM review_reviews \
                         WHERE review_id = ANY($1) AND status <> 'pending'",
                        columns()
                    ),
                    &[&ids],
                )
                .await?
                .iter()
                .map(read_row)
                .collect()
        })
    }

    fn recover_lapsed(&mut self) -> Result<Vec<String>, ReviewError> {
        self.shared.block_on(async {
            let client = self.shared.client().await?;
            client
                .query(
                    &format!(
                        "UPDATE review_reviews SET forward_state = $1, forward_error = $2 \
                         WHERE forward_state = 'started' AND forwards AND NOT EXISTS ( \
                           SELECT 1 FROM verdict_replicas r \
                           WHERE r.replica_id = review_reviews.forward_replica \
                             AND r.lease_until > {NOW_MICROS}) \
                         RETURNING review_id"
                    ),
                    &[
                        &state::recover(ForwardState::Started).as_str(),
                        &"the replica forwarding it stopped while the forward was in flight",
                    ],
                )
                .await?
                .iter()
                .map(|r| Ok(r.try_get(0)?))
                .collect()
        })
    }

    #[cfg(test)]
    fn corrupt_body(&mut self, review_id: &str) {
        self.test_execute(
            "UPDATE review_reviews SET req_body = $2 WHERE review_id = $1",
            &[&review_id, &b"{\"amount\":9000}".as_slice()],
        );
    }

    #[cfg(test)]
    fn corrupt_rules(&mut self, review_id: &str) {
        self.test_execute(
            "UPDATE review_reviews SET rules = 'not json' WHERE review_id = $1",
            &[&review_id],
        );
    }

    #[cfg(test)]
    fn header_rows(&mut self, review_id: &str) -> i64 {
        self.test_count(
            "SELECT COUNT(*) FROM review_request_headers WHERE review_id = $1",
            review_id,
        )
    }

    #[cfg(test)]
    fn leave_behind(&mut self, review_id: &str, started: bool) {
        let state = if started { "started" } else { "not_started" };
        self.test_execute(
            "UPDATE review_reviews SET replica = 'gone', forward_replica = 'gone', \
             forward_state = CASE WHEN $2 = 'started' THEN $2 ELSE forward_state END \
             WHERE review_id = $1",
            &[&review_id, &state],
        );
    }

    #[cfg(test)]
    fn stored_forward_state(&mut self, review_id: &str) -> String {
        self.shared
            .block_on(async {
                let client = self.shared.client().await?;
                let state: String = client
                    .query_one(
                        "SELECT forward_state FROM review_reviews WHERE review_id = $1",
                        &[&review_id],
                    )
                    .await?
                    .try_get(0)?;
                Ok::<_, ReviewError>(state)
            })
            .unwrap()
    }

    #[cfg(test)]
    fn upstream_body_len(&mut self, review_id: &str) -> usize {
        let n = self.test_count(
            "SELECT length(upstream_body)::bigint FROM review_reviews WHERE review_id = $1",
            review_id,
        );
        usize::try_from(n).unwrap()
    }
}

use super::backend::Resolved;

/// How long a resolution waits for the turn before it answers 503: a
/// turn is a few statements long, so a longer wait means a replica died
/// holding it (PostgreSQL frees it when it drops that session).
const TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The database half of a resolution turn: a session advisory lock on a
/// pooled connection, released when the turn ends.
///
/// The guard owns the connection before the first lock attempt is sent,
/// so a caller that goes away mid-attempt still releases (or, failing
/// that, closes) it: a lock can never stay behind on a pooled connection.
pub(super) struct SharedTurn {
    client: Option<deadpool_postgres::Object>,
}

impl SharedTurn {
    pub async fn take(shared: &SharedStore) -> Result<SharedTurn, ReviewError> {
        let mut turn = SharedTurn {
            client: Some(shared.client().await?),
        };
        let deadline = tokio::time::Instant::now() + TURN_WAIT;
        loop {
            let locked: bool = match &turn.client {
                Some(c) => c
                    .query_one("SELECT pg_try_advisory_lock($1)", &[&RESOLUTION_LOCK])
                    .await?
                    .try_get(0)?,
                None => false,
            };
            if locked {
                return Ok(turn);
            }
            if tokio::time::Instant::now() >= deadline {
                // Not held: the connection goes back to the pool as is.
                turn.client = None;
                return Err(ReviewError::Unavailable(
                    "another replica has held the resolution turn too long".into(),
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

impl Drop for SharedTurn {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Closing the connection releases the lock.
            drop(deadpool_postgres::Object::take(client));
            return;
        };
        runtime.spawn(async move {
            if client
                .execute("SELECT pg_advisory_unlock($1)", &[&RESOLUTION_LOCK])
                .await
                .is_err()
            {
                // Closing the connection releases the lock.
                drop(deadpool_postgres::Object::take(client));
            }
        });
    }
}
