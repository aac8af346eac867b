//! Reading and writing one review's rows on PostgreSQL: the row locked for
//! the rest of a transaction, its held headers and upstream answer, an
//! expiry, a NOTIFY, and the row mapping.
//!
//! A new hold's statements are here too: the pending review a retried call
//! joins, and the insert of a review and of its held headers.

use super::*;

/// One review, locked for the rest of the transaction with `lock`.
pub(super) async fn load<C: deadpool_postgres::GenericClient>(
    client: &C,
    review_id: &str,
    lock: bool,
) -> Result<Option<Row>, ReviewError> {
    let sql = format!(
        "SELECT {} FROM review_reviews WHERE review_id = $1{}",
        columns(),
        if lock { " FOR UPDATE" } else { "" }
    );
    let statement = client.prepare_cached(&sql).await?;
    client
        .query_opt(&statement, &[&review_id])
        .await?
        .as_ref()
        .map(read_row)
        .transpose()
}

/// One review that must exist, locked for the rest of the transaction.
pub(super) async fn load_locked<C: deadpool_postgres::GenericClient>(
    client: &C,
    review_id: &str,
) -> Result<Row, ReviewError> {
    load(client, review_id, true)
        .await?
        .ok_or(ReviewError::NotFound)
}

pub(super) async fn held_headers<C: deadpool_postgres::GenericClient>(
    client: &C,
    review_id: &str,
) -> Result<Vec<(String, Vec<u8>)>, ReviewError> {
    client
        .query(
            "SELECT name, value FROM review_request_headers WHERE review_id = $1 ORDER BY position",
            &[&review_id],
        )
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

pub(super) async fn upstream<C: deadpool_postgres::GenericClient>(
    client: &C,
    review_id: &str,
) -> Result<Option<(String, UpstreamResponse)>, ReviewError> {
    let Some(r) = client
        .query_opt(
            "SELECT owner, upstream_status, upstream_content_type, upstream_body \
             FROM review_reviews WHERE review_id = $1 AND forward_state = 'done'",
            &[&review_id],
        )
        .await?
    else {
        return Ok(None);
    };
    let status: i32 = r.try_get(1)?;
    let status = u16::try_from(status)
        .map_err(|_| ReviewError::Storage(format!("bad upstream status {status}")))?;
    let body: Option<Vec<u8>> = r.try_get(3)?;
    Ok(Some((
        r.try_get(0)?,
        UpstreamResponse {
            status,
            content_type: r.try_get(2)?,
            body: Bytes::from(body.unwrap_or_default()),
        },
    )))
}

/// The oldest pending review of the same call by the same owner, of the
/// same kind (held or record-only), which a retried hold joins instead of
/// holding the call twice.
pub(super) async fn joinable(
    tx: &deadpool_postgres::Transaction<'_>,
    new: &NewReview,
    now: SystemTime,
) -> Result<Option<Row>, ReviewError> {
    // Two replicas holding the same retried call at once take
    // turns here, so the second one joins the first's review.
    tx.execute(
        &tx.prepare_cached(
            "SELECT pg_advisory_xact_lock(hashtextextended(length($1) || ':' || $1 || $2, 0))",
        )
        .await?,
        &[&new.owner, &new.route],
    )
    .await?;
    let found = tx
        .query_opt(
            &tx.prepare_cached(&format!(
                "SELECT {} FROM review_reviews WHERE status = 'pending' \
                 AND expires_at > $1 AND owner = $2 AND route = $3 \
                 AND req_method = $4 AND req_path = $5 AND req_body = $6 \
                 AND req_creds = $7 AND forwards = $8 ORDER BY created_at LIMIT 1",
                columns()
            ))
            .await?,
            &[
                &micros(now),
                &new.owner,
                &new.route,
                &new.request.method,
                &new.request.path,
                &new.request.body.as_ref(),
                &new.join_key,
                &new.forwards,
            ],
        )
        .await?;
    found.as_ref().map(read_row).transpose()
}

/// A review's row as `hold` inserts it, with what is worked out before
/// its transaction begins.
pub(super) struct NewRow<'a> {
    pub(super) review_id: &'a str,
    pub(super) created_at: SystemTime,
    pub(super) expires_at: SystemTime,
    pub(super) new: &'a NewReview,
    /// The rule messages, as JSON.
    pub(super) rules: String,
    pub(super) detail: Option<String>,
    /// The replica that holds the call: this one.
    pub(super) replica: String,
}

/// Inserts a pending review whose forward has not started (a record-only
/// one's never does).
pub(super) async fn insert_review(
    tx: &deadpool_postgres::Transaction<'_>,
    row: &NewRow<'_>,
) -> Result<(), ReviewError> {
    let new = row.new;
    tx.execute(
        &tx.prepare_cached(
            "INSERT INTO review_reviews (review_id, created_at, expires_at, owner, route, \
         action, reason, record_id, req_method, req_path, req_body, req_hash, status, \
         forward_state, req_creds, rules, detail, requester, replica, \
         approvals_required, forwards) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'pending', \
         'not_started', $13, $14, $15, $16, $17, $18, $19)",
        )
        .await?,
        &[
            &row.review_id,
            &micros(row.created_at),
            &micros(row.expires_at),
            &new.owner,
            &new.route,
            &new.action,
            &new.reason,
            &new.record_id,
            &new.request.method,
            &new.request.path,
            &new.request.body.as_ref(),
            &new.request.hash(),
            &new.join_key,
            &row.rules,
            &row.detail,
            &crate::review::backend::encode_requesters(&new.requesters),
            &row.replica,
            &new.approvals_required.map(|n| n as i32),
            &new.forwards,
        ],
    )
    .await?;
    Ok(())
}

/// Inserts a review's held headers, in their order.
pub(super) async fn insert_headers(
    tx: &deadpool_postgres::Transaction<'_>,
    review_id: &str,
    headers: Vec<(String, Vec<u8>)>,
) -> Result<(), ReviewError> {
    // Every header in one statement: one round trip, not one each.
    let positions: Vec<i32> = (0..headers.len())
        .map(|p| i32::try_from(p).unwrap_or(i32::MAX))
        .collect();
    let (names, values): (Vec<String>, Vec<Vec<u8>>) = headers.into_iter().unzip();
    tx.execute(
        &tx.prepare_cached(
            "INSERT INTO review_request_headers (review_id, position, name, value) \
             SELECT $1, p, n, v FROM UNNEST($2::int[], $3::text[], $4::bytea[]) AS h(p, n, v)",
        )
        .await?,
        &[&review_id, &positions, &names, &values],
    )
    .await?;
    Ok(())
}

/// Stores pending reviews as expired at their deadline.
pub(super) async fn mark_expired(
    tx: &deadpool_postgres::Transaction<'_>,
    ids: &[&str],
) -> Result<(), ReviewError> {
    if ids.is_empty() {
        return Ok(());
    }
    tx.execute(
        "UPDATE review_reviews SET status = 'expired', resolved_at = expires_at \
         WHERE review_id = ANY($1) AND status = 'pending'",
        &[&ids],
    )
    .await?;
    Ok(())
}

/// Tells every replica, on commit, that this review left `pending`.
pub(super) async fn notify(
    tx: &deadpool_postgres::Transaction<'_>,
    review_id: &str,
) -> Result<(), ReviewError> {
    let params: [&(dyn ToSql + Sync); 2] = [&REVIEWS_CHANNEL, &review_id];
    tx.execute("SELECT pg_notify($1, $2)", &params).await?;
    Ok(())
}

pub(super) fn read_row(r: &tokio_postgres::Row) -> Result<Row, ReviewError> {
    Row::read_from(r)
}

impl Cells for tokio_postgres::Row {
    type Error = ReviewError;
    fn text(&self, i: usize) -> Result<String, ReviewError> {
        Ok(self.try_get(i)?)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, ReviewError> {
        Ok(self.try_get(i)?)
    }
    fn int(&self, i: usize) -> Result<i64, ReviewError> {
        Ok(self.try_get(i)?)
    }
    /// `upstream_status` is an `INTEGER` (4 bytes), the times `BIGINT`.
    fn opt_int(&self, i: usize) -> Result<Option<i64>, ReviewError> {
        if self.columns().get(i).map(|c| c.type_()) == Some(&tokio_postgres::types::Type::INT4) {
            Ok(self.try_get::<_, Option<i32>>(i)?.map(i64::from))
        } else {
            Ok(self.try_get(i)?)
        }
    }
    fn flag(&self, i: usize) -> Result<bool, ReviewError> {
        Ok(self.try_get(i)?)
    }
    fn replica(&self) -> Result<Option<String>, ReviewError> {
        Ok(self.try_get(22)?)
    }
    fn corrupt(_: usize, what: String) -> ReviewError {
        ReviewError::Storage(format!("bad stored {what}"))
    }
}
