//! Captured decision inputs: what `verdict replay` re-decides.
//!
//! With `[audit] capture_inputs` on, every authorize decision's input (the
//! action with its `redact` fields already replaced, the claims or answer,
//! each source as the engine read it, the requested requirements) goes into
//! `audit_inputs` as RFC 8785 canonical JSON, in the same transaction as the
//! decision's record. The record carries `input_hash`, the sha256 of those
//! bytes, inside the Merkle leaf: a replayed input is provably the one that
//! was decided, while the input itself sits outside every hash, so the
//! retention sweep here can delete it without breaking `audit verify`.
//!
//! The sweep deletes in bounded batches (one short write transaction each,
//! a pause between them), so the writer's group commits never wait long.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OptionalExtension as _};

use super::{AuditError, AuditLog};

/// Rows one sweep transaction deletes at most.
pub const SWEEP_BATCH: usize = 1000;
/// The pause between two batches of one sweep.
const SWEEP_PAUSE: Duration = Duration::from_millis(20);
/// Longest and shortest pause between two sweeps.
const SWEEP_EVERY_MAX: Duration = Duration::from_secs(60);
const SWEEP_EVERY_MIN: Duration = Duration::from_millis(200);

/// One decision's captured input, on its way to `audit_inputs`.
#[derive(Debug, Clone)]
pub struct CapturedInput {
    /// The canonical JSON, exactly as hashed into the record's `input_hash`.
    pub canonical: String,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The smallest record id (UUID v7) stamped at `ms`: every record is
/// created with a v7 id ([`super::AuditRecord::new`]), whose first 48 bits
/// are its Unix time in milliseconds, so ids sort by time and the table
/// needs no time column or index of its own.
fn first_id_at(ms: i64) -> [u8; 16] {
    let mut id = [0u8; 16];
    let ms = u64::try_from(ms.max(0)).unwrap_or(0);
    id[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    id
}

/// Where a log created before 2026-11-30 keeps the inputs it captured
/// before its writer first opened it since.
///
/// Those logs made `audit_inputs` a `WITHOUT ROWID` table, whose inserts
/// read earlier inputs back (see `super::sqlite`). At open the writer
/// renames such a table to this name ([`retire_without_rowid`]), which
/// rewrites the schema and copies no row, and creates the rowid table in
/// its place. Reads look in both; the retention sweep empties this one
/// and then drops it.
const OLD: &str = "audit_inputs_old";

/// Moves a `WITHOUT ROWID` `audit_inputs` aside to [`OLD`], for the writer
/// at open, before it creates its tables. Says whether it did.
pub(super) fn retire_without_rowid(conn: &Connection) -> Result<bool, AuditError> {
    let sql: Option<String> = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'audit_inputs'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    let without_rowid = sql.is_some_and(|s| s.to_ascii_uppercase().contains("WITHOUT ROWID"));
    if !without_rowid {
        return Ok(false);
    }
    if has_table(conn, OLD)? {
        // Only a log renamed by hand can hold both; it is read as it is.
        tracing::warn!(
            "audit_inputs is a WITHOUT ROWID table and {OLD} exists: left as they are \
             (inserts of captured inputs stay slower)"
        );
        return Ok(false);
    }
    conn.execute_batch(&format!("ALTER TABLE audit_inputs RENAME TO {OLD}"))?;
    tracing::info!(
        "captured inputs written before this version moved to {OLD}; the retention sweep \
         empties and drops it"
    );
    Ok(true)
}

/// Deletes at most `limit` inputs of records stamped before `cutoff_ms`,
/// oldest first (those in [`OLD`] before the rest), in one transaction, and
/// drops [`OLD`] once it is empty; returns how many went.
pub fn sweep(conn: &Connection, cutoff_ms: i64, limit: usize) -> Result<usize, AuditError> {
    let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
    let cutoff = first_id_at(cutoff_ms);
    let mut n = 0;
    if has_table(&tx, OLD)? {
        n += delete_before(&tx, OLD, &cutoff, limit)?;
        let left: bool =
            tx.query_row(&format!("SELECT EXISTS (SELECT 1 FROM {OLD})"), [], |r| {
                r.get(0)
            })?;
        if !left {
            tx.execute_batch(&format!("DROP TABLE {OLD}"))?;
        }
    }
    if n < limit {
        n += delete_before(&tx, "audit_inputs", &cutoff, limit - n)?;
    }
    tx.commit()?;
    Ok(n)
}

/// Deletes at most `limit` rows of `table` whose record id sorts before
/// `cutoff`, smallest first.
fn delete_before(
    conn: &Connection,
    table: &str,
    cutoff: &[u8; 16],
    limit: usize,
) -> Result<usize, AuditError> {
    let n = conn
        .prepare_cached(&format!(
            "DELETE FROM {table} WHERE record_id IN (
                 SELECT record_id FROM {table} WHERE record_id < ?1
                 ORDER BY record_id LIMIT ?2)"
        ))?
        .execute(params![
            cutoff.as_slice(),
            i64::try_from(limit).unwrap_or(i64::MAX)
        ])?;
    Ok(n)
}

/// The sweeper's connection: deleted inputs (claims, evidence text) are
/// overwritten in their pages, not left in free space.
fn open_sweeper(path: &Path) -> Result<Connection, AuditError> {
    let conn = super::sqlite::open_side_writer(path)?;
    conn.pragma_update(None, "secure_delete", "FAST")?;
    Ok(conn)
}

/// One sweep: batches until none is full. Returns how many rows went.
fn sweep_all(conn: &Connection, retention: Duration) -> Result<usize, AuditError> {
    let cutoff = now_ms().saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
    let mut total = 0;
    loop {
        let n = sweep(conn, cutoff, SWEEP_BATCH)?;
        total += n;
        if n < SWEEP_BATCH {
            return Ok(total);
        }
        std::thread::sleep(SWEEP_PAUSE);
    }
}

impl AuditLog {
    /// Deletes captured inputs older than `retention`, now and then every
    /// `retention / 2` (between 200 ms and 60 s), until
    /// [`AuditLog::shutdown`]. Failures are logged and retried next time: a
    /// late delete costs disk, never a decision.
    pub fn start_input_retention(&self, retention: Duration) {
        let db = self.inner.db_path.clone();
        let every = (retention / 2).clamp(SWEEP_EVERY_MIN, SWEEP_EVERY_MAX);
        let mut stop = self.inner.stop.subscribe();
        tokio::spawn(async move {
            loop {
                let db = db.clone();
                let swept =
                    tokio::task::spawn_blocking(move || sweep_all(&open_sweeper(&db)?, retention))
                        .await;
                match swept {
                    Ok(Ok(0)) => {}
                    Ok(Ok(n)) => tracing::debug!(deleted = n, "captured decision inputs expired"),
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "captured input retention sweep failed")
                    }
                    Err(e) => tracing::warn!(error = %e, "captured input retention sweep panicked"),
                }
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    _ = stop.changed() => return,
                }
            }
        });
    }
}

/// One record in a replay window, with its captured input if it is still
/// stored.
#[derive(Debug, Clone)]
pub struct Row {
    pub leaf: u64,
    pub canonical: String,
    pub input: Option<String>,
}

/// The record `at` of leaf `leaf`, if the leaf exists.
fn at_of(conn: &Connection, leaf: u64) -> Result<Option<String>, AuditError> {
    let Some(canonical) = super::sqlite::record_by_leaf(conn, leaf)? else {
        return Ok(None);
    };
    let v: serde_json::Value = serde_json::from_str(&canonical)
        .map_err(|e| AuditError::Corrupt(format!("leaf {leaf}: {e}")))?;
    Ok(v.get("at").and_then(|a| a.as_str()).map(str::to_string))
}

/// The first leaf whose record was stamped at or after `since` (RFC 3339,
/// as records write it), by binary search: leaves are appended in time
/// order, up to the few milliseconds a group commit spans, which callers
/// absorb by searching a little earlier and filtering on `at`.
pub fn first_leaf_since(conn: &Connection, since: &str) -> Result<u64, AuditError> {
    let size = super::sqlite::record_count(conn)?;
    let (mut lo, mut hi) = (0u64, size);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match at_of(conn, mid)? {
            Some(at) if at.as_str() < since => lo = mid + 1,
            _ => hi = mid,
        }
    }
    Ok(lo)
}

/// Calls `f` with every record from leaf `from` on, in leaf order, joined
/// with its captured input; stops early when `f` returns `false`.
pub fn for_each_from(
    conn: &Connection,
    from: u64,
    mut f: impl FnMut(Row) -> bool,
) -> Result<(), AuditError> {
    // A log no server of this version has opened has no inputs table; one
    // created before 2026-11-30 may also have inputs in `OLD`.
    let mut stmt = match (has_table(conn, "audit_inputs")?, has_table(conn, OLD)?) {
        (true, false) => conn.prepare(
            "SELECT r.leaf, r.canonical, i.input FROM audit_records r
             LEFT JOIN audit_inputs i ON i.record_id = r.record_id
             WHERE r.leaf >= ?1 ORDER BY r.leaf",
        )?,
        (true, true) => conn.prepare(&format!(
            "SELECT r.leaf, r.canonical, COALESCE(i.input, o.input) FROM audit_records r
             LEFT JOIN audit_inputs i ON i.record_id = r.record_id
             LEFT JOIN {OLD} o ON o.record_id = r.record_id
             WHERE r.leaf >= ?1 ORDER BY r.leaf"
        ))?,
        (false, true) => conn.prepare(&format!(
            "SELECT r.leaf, r.canonical, o.input FROM audit_records r
             LEFT JOIN {OLD} o ON o.record_id = r.record_id
             WHERE r.leaf >= ?1 ORDER BY r.leaf"
        ))?,
        (false, false) => conn.prepare(
            "SELECT leaf, canonical, NULL FROM audit_records WHERE leaf >= ?1 ORDER BY leaf",
        )?,
    };
    let mut rows = stmt.query([i64::try_from(from).unwrap_or(i64::MAX)])?;
    while let Some(r) = rows.next()? {
        let leaf: i64 = r.get(0)?;
        let row = Row {
            leaf: u64::try_from(leaf).unwrap_or(0),
            canonical: r.get(1)?,
            input: r.get(2)?,
        };
        if !f(row) {
            break;
        }
    }
    Ok(())
}

fn has_table(conn: &Connection, name: &str) -> Result<bool, AuditError> {
    let found: Option<i64> = conn
        .prepare_cached("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1")?
        .query_row([name], |r| r.get(0))
        .optional()?;
    Ok(found.is_some())
}

/// How many captured inputs are stored (for tests and `verdict replay`'s
/// summary).
pub fn count(conn: &Connection) -> Result<u64, AuditError> {
    let mut n = 0i64;
    for table in ["audit_inputs", OLD] {
        if has_table(conn, table)? {
            n += conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| {
                r.get::<_, i64>(0)
            })?;
        }
    }
    Ok(u64::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Record ids as the log makes them (UUID v7), 1 ms apart from START,
    /// in a table with rowids (`layout` empty, as logs are created now) or
    /// `WITHOUT ROWID` (logs created before 2026-11-30).
    fn table(layout: &str) -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(&format!(
            "CREATE TABLE audit_inputs (record_id BLOB PRIMARY KEY, input TEXT NOT NULL) {layout}"
        ))
        .unwrap();
        for i in 0..2500u64 {
            let ms = START as u64 + i;
            let id = uuid::Builder::from_unix_timestamp_millis(ms, &[7; 10]).into_uuid();
            c.execute(
                "INSERT INTO audit_inputs VALUES (?1, '{}')",
                params![id.as_bytes().as_slice()],
            )
            .unwrap();
        }
        c
    }

    /// A November 2026 millisecond.
    const START: i64 = 1_795_000_000_000;

    #[test]
    fn a_sweep_batch_deletes_at_most_its_limit_oldest_first() {
        for layout in ["", "WITHOUT ROWID"] {
            sweeps_oldest_first(&table(layout));
        }
    }

    fn sweeps_oldest_first(c: &Connection) {
        assert_eq!(sweep(c, START + 2000, SWEEP_BATCH).unwrap(), SWEEP_BATCH);
        let oldest: Vec<u8> = c
            .query_row("SELECT MIN(record_id) FROM audit_inputs", [], |r| r.get(0))
            .unwrap();
        let (secs, nanos) = uuid::Uuid::from_slice(&oldest)
            .unwrap()
            .get_timestamp()
            .unwrap()
            .to_unix();
        assert_eq!(
            secs * 1000 + u64::from(nanos / 1_000_000),
            START as u64 + 1000
        );
        assert_eq!(sweep(c, START + 2000, SWEEP_BATCH).unwrap(), 1000);
        assert_eq!(
            sweep(c, START + 2000, SWEEP_BATCH).unwrap(),
            0,
            "nothing older is left"
        );
        assert_eq!(count(c).unwrap(), 500);
    }

    #[test]
    fn a_log_written_before_inputs_were_captured_reads_as_records_without_inputs() {
        let c = Connection::open_in_memory().unwrap();
        assert_eq!(count(&c).unwrap(), 0);
        c.execute_batch(
            "CREATE TABLE audit_records (leaf INTEGER PRIMARY KEY, record_id BLOB NOT NULL UNIQUE,
             canonical TEXT NOT NULL, principal TEXT, hashes BLOB NOT NULL);
             INSERT INTO audit_records VALUES (0, x'00', '{}', NULL, x''),
                                              (1, x'01', '{\"a\":1}', NULL, x'');",
        )
        .unwrap();
        let mut rows = Vec::new();
        for_each_from(&c, 1, |r| {
            rows.push(r);
            true
        })
        .unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].leaf, rows[0].input.is_none()), (1, true));
    }
}
