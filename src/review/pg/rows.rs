//! Reading and writing one review's rows on PostgreSQL: the row locked for
//! the rest of a transaction, its held headers and upstream answer, an
//! expiry, a NOTIFY, and the row mapping.

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
    fn replica(&self) -> Result<Option<String>, ReviewError> {
        Ok(self.try_get(21)?)
    }
    fn corrupt(_: usize, what: String) -> ReviewError {
        ReviewError::Storage(format!("bad stored {what}"))
    }
}
