//! The SQLite tables of the audit log and the queries on them.
//!
//! The log shares the project's `verdict.db` with other subsystems, so every
//! table is prefixed `audit_`. Three tables, all append-only:
//!
//! - `audit_records(leaf, record_id, canonical, principal)`: one row per leaf,
//!   the canonical JSON exactly as hashed.
//! - `audit_hashes(leaf, hashes)`: the Go `tlog` stored hashes. Row `leaf`
//!   holds the `1 + trailing_ones(leaf)` hashes tlog appends when that leaf is
//!   added (level 0 first), so concatenating the rows in order gives exactly
//!   tlog's stored-hash sequence, and subtree `(level, n)` is row
//!   `((n + 1) << level) - 1`, offset `level`. One row per leaf instead of one
//!   per hash halves the rows the group commit writes.
//! - `audit_checkpoints(tree_size, note, created_at)`: every signed note ever
//!   issued; the root is inside the signed text.

use std::path::Path;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension as _};
use uuid::Uuid;

use super::merkle::{writer_leaf, Hash, SubtreeHashes};
use super::AuditError;

const SCHEMA_SQL: &str = "
CREATE TABLE IF NOT EXISTS audit_records (
    leaf      INTEGER PRIMARY KEY,
    record_id BLOB NOT NULL UNIQUE,
    canonical TEXT NOT NULL,
    principal TEXT
);
CREATE TABLE IF NOT EXISTS audit_hashes (
    leaf   INTEGER PRIMARY KEY,
    hashes BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_checkpoints (
    tree_size  INTEGER PRIMARY KEY,
    note       TEXT NOT NULL,
    created_at TEXT NOT NULL
);
";

fn flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI
}

/// The writer's connection: WAL, `synchronous=FULL`, tables created.
pub fn open_writer(path: &Path) -> Result<Connection, AuditError> {
    let conn = Connection::open_with_flags(path, flags())?;
    // Decisions wait on this connection (see `crate::sqlite`).
    conn.busy_handler(Some(crate::sqlite::busy_decision_path))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    // The random record_id index touches many pages per group; keep them
    // cached (64 MiB). The background checkpointer copies most WAL frames;
    // this auto-checkpoint, less often than every 1000 pages, finishes the
    // rest so the WAL can restart (see `checkpointer`).
    conn.pragma_update(None, "cache_size", -65536)?;
    conn.pragma_update(None, "wal_autocheckpoint", 8192)?;
    conn.execute_batch(SCHEMA_SQL)?;
    Ok(conn)
}

/// The background checkpointer's connection (see `checkpointer`): it runs
/// only PASSIVE checkpoints, which never wait for the writer.
pub fn open_checkpointer(path: &Path) -> Result<Connection, AuditError> {
    let conn = Connection::open_with_flags(path, flags())?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    // It never commits, so it must never run an auto-checkpoint of its own.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    Ok(conn)
}

/// One PASSIVE checkpoint: copies what WAL frames it can without blocking.
pub fn checkpoint_passive(conn: &Connection) -> Result<(), AuditError> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))?;
    Ok(())
}

/// A reader's connection; it never writes.
pub fn open_reader(path: &Path) -> Result<Connection, AuditError> {
    if !path.exists() {
        return Err(AuditError::Corrupt(format!(
            "{}: database does not exist",
            path.display()
        )));
    }
    let conn = Connection::open_with_flags(path, flags())?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "query_only", "ON")?;
    Ok(conn)
}

/// Number of leaves stored.
pub fn record_count(conn: &Connection) -> Result<u64, AuditError> {
    let n: i64 = conn
        .prepare_cached("SELECT COALESCE(MAX(leaf) + 1, 0) FROM audit_records")?
        .query_row([], |r| r.get(0))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// A stored checkpoint row.
#[derive(Debug, Clone)]
pub struct CheckpointRow {
    pub tree_size: u64,
    pub note: String,
    pub created_at: String,
}

fn checkpoint_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<CheckpointRow> {
    let size: i64 = r.get(0)?;
    Ok(CheckpointRow {
        tree_size: u64::try_from(size).unwrap_or(u64::MAX),
        note: r.get(1)?,
        created_at: r.get(2)?,
    })
}

/// The newest checkpoint, if any.
pub fn newest_checkpoint(conn: &Connection) -> Result<Option<CheckpointRow>, AuditError> {
    Ok(conn
        .prepare_cached(
            "SELECT tree_size, note, created_at FROM audit_checkpoints
             ORDER BY tree_size DESC LIMIT 1",
        )?
        .query_row([], checkpoint_row)
        .optional()?)
}

/// The first checkpoint that covers `leaf` (smallest `tree_size > leaf`).
pub fn covering_checkpoint(
    conn: &Connection,
    leaf: u64,
) -> Result<Option<CheckpointRow>, AuditError> {
    Ok(conn
        .prepare_cached(
            "SELECT tree_size, note, created_at FROM audit_checkpoints
             WHERE tree_size > ?1 ORDER BY tree_size LIMIT 1",
        )?
        .query_row([to_i64(leaf)?], checkpoint_row)
        .optional()?)
}

/// All checkpoints, oldest first.
pub fn all_checkpoints(conn: &Connection) -> Result<Vec<CheckpointRow>, AuditError> {
    let mut stmt = conn
        .prepare("SELECT tree_size, note, created_at FROM audit_checkpoints ORDER BY tree_size")?;
    let rows = stmt.query_map([], checkpoint_row)?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// A stored record found by id.
#[derive(Debug, Clone)]
pub struct RecordRow {
    pub leaf: u64,
    pub canonical: String,
    pub principal: Option<String>,
}

pub fn record_by_id(conn: &Connection, id: Uuid) -> Result<Option<RecordRow>, AuditError> {
    Ok(conn
        .prepare_cached(
            "SELECT leaf, canonical, principal FROM audit_records WHERE record_id = ?1",
        )?
        .query_row([id.as_bytes().as_slice()], |r| {
            let leaf: i64 = r.get(0)?;
            Ok(RecordRow {
                leaf: u64::try_from(leaf).unwrap_or(u64::MAX),
                canonical: r.get(1)?,
                principal: r.get(2)?,
            })
        })
        .optional()?)
}

pub fn record_by_leaf(conn: &Connection, leaf: u64) -> Result<Option<String>, AuditError> {
    Ok(conn
        .prepare_cached("SELECT canonical FROM audit_records WHERE leaf = ?1")?
        .query_row([to_i64(leaf)?], |r| r.get(0))
        .optional()?)
}

/// The two inserts of every appended leaf, prepared once per group commit.
pub struct Appender<'c> {
    record: rusqlite::CachedStatement<'c>,
    hashes: rusqlite::CachedStatement<'c>,
    blob: Vec<u8>,
}

impl<'c> Appender<'c> {
    pub fn new(conn: &'c Connection) -> rusqlite::Result<Appender<'c>> {
        Ok(Appender {
            record: conn.prepare_cached(
                "INSERT INTO audit_records (leaf, record_id, canonical, principal) VALUES (?1, ?2, ?3, ?4)",
            )?,
            hashes: conn.prepare_cached("INSERT INTO audit_hashes (leaf, hashes) VALUES (?1, ?2)")?,
            blob: Vec::with_capacity(32 * 8),
        })
    }

    pub fn record(
        &mut self,
        leaf: u64,
        id: Uuid,
        canonical: &str,
        principal: Option<&str>,
    ) -> rusqlite::Result<()> {
        self.record.execute(params![
            i64::try_from(leaf).unwrap_or(i64::MAX),
            id.as_bytes().as_slice(),
            canonical,
            principal
        ])?;
        Ok(())
    }

    pub fn hashes(&mut self, leaf: u64, hashes: &[Hash]) -> rusqlite::Result<()> {
        self.blob.clear();
        for h in hashes {
            self.blob.extend_from_slice(h);
        }
        self.hashes
            .execute(params![i64::try_from(leaf).unwrap_or(i64::MAX), self.blob])?;
        Ok(())
    }
}

pub fn insert_checkpoint(
    conn: &Connection,
    size: u64,
    note: &str,
    created_at: &str,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO audit_checkpoints (tree_size, note, created_at) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![
        i64::try_from(size).unwrap_or(i64::MAX),
        note,
        created_at
    ])?;
    Ok(())
}

fn to_i64(v: u64) -> Result<i64, AuditError> {
    i64::try_from(v).map_err(|_| AuditError::Corrupt(format!("index {v} out of range")))
}

/// Reads stored subtree hashes from `audit_hashes`.
pub struct SqlHashes<'c> {
    pub conn: &'c Connection,
}

impl SubtreeHashes for SqlHashes<'_> {
    type Error = AuditError;
    fn subtree(&mut self, level: u32, n: u64) -> Result<Hash, AuditError> {
        let leaf = writer_leaf(level, n);
        let blob: Option<Vec<u8>> = self
            .conn
            .prepare_cached("SELECT hashes FROM audit_hashes WHERE leaf = ?1")?
            .query_row([to_i64(leaf)?], |r| r.get(0))
            .optional()?;
        let blob = blob.ok_or_else(|| {
            AuditError::Corrupt(format!("stored hashes of leaf {leaf} are missing"))
        })?;
        let at = level as usize * 32;
        blob.get(at..at + 32)
            .and_then(|s| <Hash>::try_from(s).ok())
            .ok_or_else(|| {
                AuditError::Corrupt(format!("stored hashes of leaf {leaf} lack level {level}"))
            })
    }
}
