//! SQLite persistence for batch jobs: the job rows, their items and results.
//!
//! Everything a job needs to survive a crash lives here. Items are written at
//! submit, results as each small batch of items finishes, so
//! a `kill -9` loses at most the results of one unflushed batch, and those
//! items are simply run again: a result is keyed by `(job, index)` and
//! inserted with `INSERT OR IGNORE`, so it can never appear twice.
//!
//! The database file is shared with other subsystems, so every table is
//! prefixed `jobs_`, and no transaction here holds the write lock for long:
//! the audit log commits every decision into the same file. A large job's
//! items are therefore stored [`ITEM_CHUNK`] per transaction under a
//! `staging` row that nothing reads, and the job turns `queued` in one last
//! small transaction. A crash in between leaves a `staging` row, which
//! [`Store::open`] deletes with its items (its submit was never answered).
//!
//! Jobs are addressed internally by `seq`, an `AUTOINCREMENT` integer that is
//! never reused and orders jobs by creation (the FIFO order of the queue); the
//! public id is a UUID.
//!
//! All functions here block. Callers run them on a worker thread or through
//! `spawn_blocking`, never on the async runtime.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use crate::jobs::backend::{Inserted, JobRow};
use crate::jobs::{JobStatus, JobsError};

/// Items stored per transaction at submit (about 0.3 MB of items at the
/// largest allowed body, a millisecond or two of write lock).
pub(crate) const ITEM_CHUNK: usize = 128;

/// Pause between two item transactions of one submit, so that a waiting
/// writer (the audit log polls every 200 us) gets the lock in between.
const CHUNK_PAUSE: Duration = Duration::from_millis(1);

/// Idle connections kept for the async API; more are opened on demand.
const POOL_MAX_IDLE: usize = 4;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs_jobs (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id          TEXT    NOT NULL UNIQUE,
    owner           TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    items_total     INTEGER NOT NULL,
    items_done      INTEGER NOT NULL DEFAULT 0,
    created_at_ms   INTEGER NOT NULL,
    started_at_ms   INTEGER,
    finished_at_ms  INTEGER,
    error           TEXT,
    idempotency_key TEXT,
    request_hash    TEXT    NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_jobs_idempotency
    ON jobs_jobs (owner, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_jobs_status ON jobs_jobs (status, seq);
CREATE INDEX IF NOT EXISTS jobs_jobs_finished
    ON jobs_jobs (finished_at_ms) WHERE finished_at_ms IS NOT NULL;
CREATE TABLE IF NOT EXISTS jobs_items (
    job_seq INTEGER NOT NULL,
    idx     INTEGER NOT NULL,
    item    TEXT    NOT NULL,
    PRIMARY KEY (job_seq, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS jobs_results (
    job_seq INTEGER NOT NULL,
    idx     INTEGER NOT NULL,
    result  TEXT    NOT NULL,
    PRIMARY KEY (job_seq, idx)
) WITHOUT ROWID;
";

/// The database path plus a small pool of connections for the async API.
pub(crate) struct Store {
    path: PathBuf,
    /// std `Mutex`: held only to push or pop a connection, never across IO.
    pool: Mutex<Vec<Connection>>,
}

/// How durable a connection's commits are.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Durability {
    /// `synchronous=FULL`: a submit acknowledged to a client survives power
    /// loss, not only a process crash.
    Full,
    /// `synchronous=NORMAL`: enough for results, which survive a process
    /// crash and are only re-run after a power loss.
    Normal,
}

// === impl Store ===

impl Store {
    /// Opens (or creates) the database and its directory, switches it to WAL
    /// and creates the tables.
    pub fn open(path: &Path) -> Result<Store, JobsError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(JobsError::Io)?;
        }
        crate::store::sqlite::create_private(path).map_err(JobsError::Io)?;
        let store = Store {
            path: path.to_path_buf(),
            pool: Mutex::new(Vec::new()),
        };
        let conn = store.connect(Durability::Full)?;
        let mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(mode, "job store could not switch to WAL");
        }
        conn.execute_batch(SCHEMA)?;
        let dropped = discard_staging(&conn, None)?;
        if dropped > 0 {
            tracing::warn!(
                jobs = dropped,
                "dropped batch jobs whose submit was cut off before it was stored"
            );
        }
        store.give_back(conn);
        Ok(store)
    }

    /// A fresh connection with the pragmas every connection needs.
    pub fn connect(&self, durability: Durability) -> Result<Connection, JobsError> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // Polls for the lock: a large submit needs it once per chunk (see
        // `crate::store::sqlite`).
        conn.busy_handler(Some(crate::store::sqlite::busy_background))?;
        let sync = match durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", sync)?;
        // No temp files: the pod's root filesystem may be read-only.
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        Ok(conn)
    }

    /// Runs `f` with a pooled connection (blocking).
    pub fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, JobsError>,
    ) -> Result<T, JobsError> {
        let pooled = self
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut conn = match pooled {
            Some(c) => c,
            None => self.connect(Durability::Full)?,
        };
        let out = f(&mut conn);
        // A connection left inside a transaction (an error between BEGIN
        // and COMMIT rolls back on drop of the Transaction) is still clean.
        self.give_back(conn);
        out
    }

    fn give_back(&self, conn: Connection) {
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < POOL_MAX_IDLE {
            pool.push(conn);
        }
    }
}

// === queries ===

const JOB_COLUMNS: &str = "seq, job_id, owner, status, items_total, items_done, created_at_ms, \
     started_at_ms, finished_at_ms, error, request_hash";

fn job_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<JobRow> {
    let status: String = r.get(3)?;
    let status = JobStatus::parse(&status).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            3,
            rusqlite::types::Type::Text,
            format!("unknown job status {status:?}").into(),
        )
    })?;
    Ok(JobRow {
        seq: r.get(0)?,
        job_id: r.get(1)?,
        owner: r.get(2)?,
        status,
        items_total: r.get::<_, i64>(4)?.max(0) as u64,
        items_done: r.get::<_, i64>(5)?.max(0) as u64,
        created_at_ms: r.get(6)?,
        started_at_ms: r.get(7)?,
        finished_at_ms: r.get(8)?,
        error: r.get(9)?,
        request_hash: r.get(10)?,
    })
}

/// Stores a new job and its items, or finds the job an earlier submit with
/// the same owner and idempotency key created. Up to [`ITEM_CHUNK`] items go
/// in one transaction with the job row; more are stored in further
/// transactions of [`ITEM_CHUNK`] under a `staging` row, and the job turns
/// `queued` only once all of them are (see the module doc).
pub(crate) fn insert_job(
    conn: &mut Connection,
    owner: &str,
    idempotency_key: Option<&str>,
    request_hash: &str,
    items: &[String],
    now_ms: i64,
) -> Result<Inserted, JobsError> {
    let (first, rest) = items.split_at(items.len().min(ITEM_CHUNK));
    // Pooled connections are FULL; set it again in case an earlier staged
    // submit on this connection failed to restore it (see `store_staged`).
    conn.pragma_update(None, "synchronous", "FULL")?;
    // IMMEDIATE: take the write lock before the idempotency lookup, so two
    // concurrent submits with one key cannot both miss and both insert.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if let Some(key) = idempotency_key {
        let status: Option<String> = tx
            .query_row(
                "SELECT status FROM jobs_jobs WHERE owner = ?1 AND idempotency_key = ?2",
                params![owner, key],
                |r| r.get(0),
            )
            .optional()?;
        match status.as_deref() {
            None => {}
            Some(STAGING) => return Err(JobsError::InProgress),
            Some(_) => {
                let job = tx.query_row(
                    &format!(
                        "SELECT {JOB_COLUMNS} FROM jobs_jobs WHERE owner = ?1 AND idempotency_key = ?2"
                    ),
                    params![owner, key],
                    job_row,
                )?;
                return if job.request_hash == request_hash {
                    Ok(Inserted::Existing(job))
                } else {
                    Err(JobsError::Conflict)
                };
            }
        }
    }
    let job_id = uuid::Uuid::new_v4().to_string();
    let status = if rest.is_empty() { "queued" } else { STAGING };
    tx.execute(
        "INSERT INTO jobs_jobs (job_id, owner, status, items_total, created_at_ms, \
         idempotency_key, request_hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            job_id,
            owner,
            status,
            items.len() as i64,
            now_ms,
            idempotency_key,
            request_hash
        ],
    )?;
    let seq = tx.last_insert_rowid();
    insert_items(&tx, seq, 0, first)?;
    tx.commit()?;
    if !rest.is_empty() {
        if let Err(e) = store_staged(conn, seq, first.len(), rest) {
            // Best effort; a row left behind is dropped at the next open.
            if let Err(cleanup) = discard_staging(conn, Some(seq)) {
                tracing::warn!(error = %cleanup, seq, "could not drop a half-stored batch job");
            }
            return Err(e);
        }
    }
    Ok(Inserted::New(JobRow {
        seq,
        job_id,
        owner: owner.to_string(),
        status: JobStatus::Queued,
        items_total: items.len() as u64,
        items_done: 0,
        created_at_ms: now_ms,
        started_at_ms: None,
        finished_at_ms: None,
        error: None,
        request_hash: request_hash.to_string(),
    }))
}

/// The status of a job whose items are still being stored; never read as a
/// [`JobStatus`].
const STAGING: &str = "staging";

/// Inserts `items` as indexes `start..` of job `seq`.
fn insert_items(
    conn: &Connection,
    seq: i64,
    start: usize,
    items: &[String],
) -> Result<(), JobsError> {
    let mut stmt =
        conn.prepare_cached("INSERT INTO jobs_items (job_seq, idx, item) VALUES (?1, ?2, ?3)")?;
    for (k, item) in items.iter().enumerate() {
        stmt.execute(params![seq, (start + k) as i64, item])?;
    }
    Ok(())
}

/// Stores the rest of a staged job's items, a chunk per transaction, then
/// queues the job.
fn store_staged(
    conn: &mut Connection,
    seq: i64,
    start: usize,
    rest: &[String],
) -> Result<(), JobsError> {
    // The chunks commit without an fsync of their own (`synchronous=NORMAL`
    // writes the WAL but does not sync it), which keeps each one's hold on
    // the write lock short. The last commit, which queues the job, is FULL:
    // its fsync of the WAL makes every earlier frame durable with it, so a
    // queued job always has all its items. A crash before it loses at most
    // a staging job, dropped at the next open.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let chunks = (|| -> Result<(), JobsError> {
        let mut next = start;
        for chunk in rest.chunks(ITEM_CHUNK) {
            std::thread::sleep(CHUNK_PAUSE);
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            insert_items(&tx, seq, next, chunk)?;
            tx.commit()?;
            next += chunk.len();
        }
        Ok(())
    })();
    conn.pragma_update(None, "synchronous", "FULL")?;
    chunks?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let queued = tx.execute(
        "UPDATE jobs_jobs SET status = 'queued' WHERE seq = ?1 AND status = ?2",
        params![seq, STAGING],
    )?;
    if queued != 1 {
        return Err(JobsError::Corrupt(format!(
            "staged job {seq} vanished while its items were stored"
        )));
    }
    tx.commit()?;
    Ok(())
}

/// Deletes staging jobs and their items: job `seq`, or all of them. Returns
/// how many jobs went.
fn discard_staging(conn: &Connection, seq: Option<i64>) -> Result<usize, JobsError> {
    let tx = conn.unchecked_transaction()?;
    tx.execute(
        "DELETE FROM jobs_items WHERE job_seq IN (SELECT seq FROM jobs_jobs \
         WHERE status = ?1 AND (?2 IS NULL OR seq = ?2))",
        params![STAGING, seq],
    )?;
    let jobs = tx.execute(
        "DELETE FROM jobs_jobs WHERE status = ?1 AND (?2 IS NULL OR seq = ?2)",
        params![STAGING, seq],
    )?;
    tx.commit()?;
    Ok(jobs)
}

pub(crate) fn job_by_id(conn: &Connection, job_id: &str) -> Result<Option<JobRow>, JobsError> {
    Ok(conn
        .query_row(
            &format!(
                "SELECT {JOB_COLUMNS} FROM jobs_jobs WHERE job_id = ?1 AND status != '{STAGING}'"
            ),
            params![job_id],
            job_row,
        )
        .optional()?)
}

pub(crate) fn job_by_seq(conn: &Connection, seq: i64) -> Result<Option<JobRow>, JobsError> {
    Ok(conn
        .query_row(
            &format!("SELECT {JOB_COLUMNS} FROM jobs_jobs WHERE seq = ?1"),
            params![seq],
            job_row,
        )
        .optional()?)
}

/// Queued and running jobs, oldest first: the queue to rebuild at start.
pub(crate) fn unfinished_jobs(conn: &Connection) -> Result<Vec<JobRow>, JobsError> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {JOB_COLUMNS} FROM jobs_jobs WHERE status IN ('queued', 'running') ORDER BY seq"
    ))?;
    let rows = stmt.query_map([], job_row)?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// Results `offset..offset+limit` in index order.
pub(crate) fn results_page(
    conn: &Connection,
    seq: i64,
    offset: usize,
    limit: usize,
) -> Result<Vec<(usize, String)>, JobsError> {
    let offset = i64::try_from(offset).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(
        "SELECT idx, result FROM jobs_results WHERE job_seq = ?1 AND idx >= ?2 \
         ORDER BY idx LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![seq, offset, limit], |r| {
        Ok((r.get::<_, i64>(0)?.max(0) as usize, r.get::<_, String>(1)?))
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// Marks a job running; `started_at` keeps its first value across restarts.
pub(crate) fn mark_running(conn: &Connection, seq: i64, now_ms: i64) -> Result<(), JobsError> {
    conn.execute(
        "UPDATE jobs_jobs SET status = 'running', started_at_ms = COALESCE(started_at_ms, ?2) \
         WHERE seq = ?1",
        params![seq, now_ms],
    )?;
    Ok(())
}

/// Up to `limit` items after index `after` that have no result yet.
pub(crate) fn pending_items(
    conn: &Connection,
    seq: i64,
    after: i64,
    limit: usize,
) -> Result<Vec<(i64, String)>, JobsError> {
    let mut stmt = conn.prepare_cached(
        "SELECT i.idx, i.item FROM jobs_items i WHERE i.job_seq = ?1 AND i.idx > ?2 \
         AND NOT EXISTS (SELECT 1 FROM jobs_results r WHERE r.job_seq = ?1 AND r.idx = i.idx) \
         ORDER BY i.idx LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![seq, after, limit as i64], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// Writes a batch of results and advances `items_done` by the rows that
/// were new, in one transaction.
pub(crate) fn write_results(
    conn: &mut Connection,
    seq: i64,
    results: &[(i64, String)],
) -> Result<(), JobsError> {
    if results.is_empty() {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut added = 0i64;
    {
        let mut stmt = tx.prepare_cached(
            "INSERT OR IGNORE INTO jobs_results (job_seq, idx, result) VALUES (?1, ?2, ?3)",
        )?;
        for (idx, result) in results {
            added += stmt.execute(params![seq, idx, result])? as i64;
        }
    }
    tx.execute(
        "UPDATE jobs_jobs SET items_done = items_done + ?2 WHERE seq = ?1",
        params![seq, added],
    )?;
    tx.commit()?;
    Ok(())
}

/// Ends a job: succeeded or failed, `finished_at` set, items dropped (they
/// are never read again; results stay until retention).
pub(crate) fn finish_job(
    conn: &mut Connection,
    seq: i64,
    error: Option<&str>,
    now_ms: i64,
) -> Result<(), JobsError> {
    let status = if error.is_some() {
        JobStatus::Failed
    } else {
        JobStatus::Succeeded
    };
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute(
        "UPDATE jobs_jobs SET status = ?2, finished_at_ms = ?3, error = ?4, \
         started_at_ms = COALESCE(started_at_ms, ?3) WHERE seq = ?1",
        params![seq, status.as_str(), now_ms, error],
    )?;
    tx.execute("DELETE FROM jobs_items WHERE job_seq = ?1", params![seq])?;
    tx.commit()?;
    Ok(())
}

/// Deletes jobs that finished before `cutoff_ms`, with their items, results
/// and idempotency keys (the key lives on the job row). Returns how many.
pub(crate) fn sweep(conn: &mut Connection, cutoff_ms: i64) -> Result<usize, JobsError> {
    let seqs: Vec<i64> = {
        let mut stmt = conn.prepare_cached(
            "SELECT seq FROM jobs_jobs WHERE finished_at_ms IS NOT NULL AND finished_at_ms < ?1",
        )?;
        let rows = stmt.query_map(params![cutoff_ms], |r| r.get(0))?;
        rows.collect::<Result<Vec<_>, _>>()?
    };
    // One transaction per job keeps the write lock short even when a
    // 100 000-result job goes.
    for seq in &seqs {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute("DELETE FROM jobs_results WHERE job_seq = ?1", params![seq])?;
        tx.execute("DELETE FROM jobs_items WHERE job_seq = ?1", params![seq])?;
        tx.execute("DELETE FROM jobs_jobs WHERE seq = ?1", params![seq])?;
        tx.commit()?;
    }
    Ok(seqs.len())
}
