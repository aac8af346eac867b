//! The SQLite tables of the audit log and the queries on them.
//!
//! The log shares the project's `verdict.db` with other subsystems, so every
//! table is prefixed `audit_`. The first two are append-only:
//!
//! - `audit_records(leaf, record_id, canonical, principal, hashes)`: one row
//!   per leaf. `canonical` is the JSON exactly as hashed. `principal` is a
//!   copy of the record's `principal` for operators' queries only: it is not
//!   covered by any hash, so nothing in verdict reads it back (reads take the
//!   principal from `canonical`, see [`super::record::principal_of`]). `hashes` holds the
//!   Go `tlog` stored hashes of the leaf: the `1 + trailing_ones(leaf)` hashes
//!   tlog appends when that leaf is added (level 0 first), so concatenating
//!   the rows in order gives exactly tlog's stored-hash sequence, and subtree
//!   `(level, n)` is row `((n + 1) << level) - 1`, offset `level`. Keeping
//!   them in the record's row makes a group commit one insert per record.
//! - `audit_checkpoints(tree_size, note, created_at)`: every signed note ever
//!   issued; the root is inside the signed text.
//! - `audit_inputs(record_id, input)`: the captured input of a
//!   decision (`[audit] capture_inputs`), inserted with its record and
//!   deleted after `audit.input_retention` (see [`super::inputs`]). Not part
//!   of any hash: the record's `input_hash` names it, so deleting a row never
//!   breaks the log. An input is some kilobytes, so the table has rowids and
//!   `record_id` its own index: in a `WITHOUT ROWID` table the whole row is
//!   the b-tree's key, and SQLite reads a spilled key (the input's overflow
//!   pages) for every cell it compares, so each insert read a few old inputs
//!   back, more as the table grew. In a log created before 2026-11-30 the
//!   writer moves that table aside at open, to `audit_inputs_old`, which
//!   the retention sweep empties and drops (see [`super::inputs`]).
//!
//! Logs written before 2026-11-24 kept the hashes in a table of their own,
//! `audit_hashes(leaf, hashes)`. The writer merges it into `audit_records`
//! when it opens such a log ([`open_writer`]); `verify_log` reads both
//! layouts, so a log can be checked before the server first opens it.

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
    principal TEXT,
    hashes    BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_inputs (
    record_id BLOB PRIMARY KEY,
    input     TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_checkpoints (
    tree_size  INTEGER PRIMARY KEY,
    note       TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_cosignatures (
    witness     TEXT NOT NULL,
    tree_size   INTEGER NOT NULL,
    line        TEXT NOT NULL,
    cosigned_at INTEGER NOT NULL,
    PRIMARY KEY (witness, tree_size)
);
";

fn flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI
}

/// The writer's connection: WAL, `synchronous=FULL`, tables created, and a
/// log in the earlier layout merged into the current one.
pub fn open_writer(path: &Path) -> Result<Connection, AuditError> {
    crate::store::sqlite::create_private(path)
        .map_err(|e| AuditError::Storage(format!("{}: {e}", path.display())))?;
    let mut conn = Connection::open_with_flags(path, flags())?;
    // Decisions wait on this connection (see `crate::store::sqlite`).
    conn.busy_handler(Some(crate::store::sqlite::busy_decision_path))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    // The cache is a ceiling (pages are allocated as used): time-ordered
    // record ids insert at the index's right edge, so a group commit's
    // working set stays small. The background checkpointer copies most WAL
    // frames; this auto-checkpoint, less often than every 1000 pages,
    // finishes the rest so the WAL can restart (see `checkpointer`).
    conn.pragma_update(None, "cache_size", -65536)?;
    conn.pragma_update(None, "wal_autocheckpoint", 8192)?;
    // No temp files: the pod's root filesystem may be read-only.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    if layout(&conn)? == Layout::SplitHashes {
        merge_hashes(&mut conn)?;
    }
    super::inputs::retire_without_rowid(&conn)?;
    conn.execute_batch(SCHEMA_SQL)?;
    Ok(conn)
}

/// Where a log keeps its stored hashes (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// In `audit_records.hashes`: logs written since 2026-11-24.
    Merged,
    /// In `audit_hashes`: logs written before, not yet opened by the writer.
    SplitHashes,
}

pub fn layout(conn: &Connection) -> Result<Layout, AuditError> {
    let split: bool = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master
                            WHERE type = 'table' AND name = 'audit_hashes')",
        )?
        .query_row([], |r| r.get(0))?;
    Ok(if split {
        Layout::SplitHashes
    } else {
        Layout::Merged
    })
}

/// Moves every row of `audit_hashes` into its record's row, in one
/// transaction: a crash leaves the old layout whole, and the next open
/// starts again. Refuses a log whose two tables do not pair up one to one,
/// which only tampering or a lost row can cause: `verdict audit verify`
/// names the leaf.
fn merge_hashes(conn: &mut Connection) -> Result<(), AuditError> {
    let started = std::time::Instant::now();
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let (records, hashes): (i64, i64) = tx.query_row(
        "SELECT (SELECT COUNT(*) FROM audit_records), (SELECT COUNT(*) FROM audit_hashes)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let unpaired: Option<i64> = tx.query_row(
        "SELECT MIN(r.leaf) FROM audit_records r
         LEFT JOIN audit_hashes h ON h.leaf = r.leaf WHERE h.leaf IS NULL",
        [],
        |r| r.get(0),
    )?;
    if let Some(leaf) = unpaired {
        return Err(AuditError::Corrupt(format!(
            "cannot merge audit_hashes into audit_records: the stored hashes of \
             leaf {leaf} are missing (run `verdict audit verify`)"
        )));
    }
    if records != hashes {
        return Err(AuditError::Corrupt(format!(
            "cannot merge audit_hashes into audit_records: {hashes} hash rows for \
             {records} records (run `verdict audit verify`)"
        )));
    }
    tracing::info!(
        records,
        "merging the audit log's stored hashes into its records"
    );
    // The old table steps aside, and SCHEMA_SQL creates the current one,
    // so the merged table is defined in one place.
    tx.execute_batch("ALTER TABLE audit_records RENAME TO audit_records_split;")?;
    tx.execute_batch(SCHEMA_SQL)?;
    tx.execute_batch(
        "INSERT INTO audit_records (leaf, record_id, canonical, principal, hashes)
             SELECT r.leaf, r.record_id, r.canonical, r.principal, h.hashes
             FROM audit_records_split r JOIN audit_hashes h ON h.leaf = r.leaf
             ORDER BY r.leaf;
         DROP TABLE audit_records_split;
         DROP TABLE audit_hashes;",
    )?;
    tx.commit()?;
    tracing::info!(
        records,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "merged the audit log's stored hashes into its records"
    );
    Ok(())
}

/// The background checkpointer's connection (see `checkpointer`): it runs
/// only PASSIVE checkpoints, which never wait for the writer.
pub fn open_checkpointer(path: &Path) -> Result<Connection, AuditError> {
    let conn = Connection::open_with_flags(path, flags())?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    // It never commits, so it must never run an auto-checkpoint of its own.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    // No temp files: the pod's root filesystem may be read-only.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
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
    // No temp files: the pod's root filesystem may be read-only.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
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

/// A stored record found by id. No `principal`: the side column is not
/// hashed, so whoever needs the principal takes it from `canonical`.
#[derive(Debug, Clone)]
pub struct RecordRow {
    pub leaf: u64,
    pub canonical: String,
}

pub fn record_by_id(conn: &Connection, id: Uuid) -> Result<Option<RecordRow>, AuditError> {
    Ok(conn
        .prepare_cached("SELECT leaf, canonical FROM audit_records WHERE record_id = ?1")?
        .query_row([id.as_bytes().as_slice()], |r| {
            let leaf: i64 = r.get(0)?;
            Ok(RecordRow {
                leaf: u64::try_from(leaf).unwrap_or(u64::MAX),
                canonical: r.get(1)?,
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

/// The insert of every appended leaf, prepared once per group commit.
pub struct Appender<'c> {
    conn: &'c Connection,
    record: rusqlite::CachedStatement<'c>,
    blob: Vec<u8>,
}

impl<'c> Appender<'c> {
    pub fn new(conn: &'c Connection) -> rusqlite::Result<Appender<'c>> {
        Ok(Appender {
            conn,
            record: conn.prepare_cached(
                "INSERT INTO audit_records (leaf, record_id, canonical, principal, hashes) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?,
            blob: Vec::with_capacity(32 * 8),
        })
    }

    pub fn record(
        &mut self,
        leaf: u64,
        id: Uuid,
        canonical: &str,
        principal: Option<&str>,
        hashes: &[Hash],
        input: Option<&super::CapturedInput>,
    ) -> rusqlite::Result<()> {
        self.blob.clear();
        for h in hashes {
            self.blob.extend_from_slice(h);
        }
        // The input first: if either insert is refused, neither row is in
        // the transaction (a refused record leaves no orphan input).
        if let Some(input) = input {
            // Prepared only by groups that capture inputs.
            self.conn
                .prepare_cached("INSERT INTO audit_inputs (record_id, input) VALUES (?1, ?2)")?
                .execute(params![id.as_bytes().as_slice(), input.canonical])?;
        }
        self.record.execute(params![
            i64::try_from(leaf).unwrap_or(i64::MAX),
            id.as_bytes().as_slice(),
            canonical,
            principal,
            self.blob
        ])?;
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

/// Reads stored subtree hashes.
pub struct SqlHashes<'c> {
    conn: &'c Connection,
    query: &'static str,
}

impl<'c> SqlHashes<'c> {
    /// For a log in the current layout: the writer's after `open_writer`,
    /// and the server's readers.
    pub fn new(conn: &'c Connection) -> SqlHashes<'c> {
        SqlHashes::with_layout(conn, Layout::Merged)
    }

    pub fn with_layout(conn: &'c Connection, layout: Layout) -> SqlHashes<'c> {
        let query = match layout {
            Layout::Merged => "SELECT hashes FROM audit_records WHERE leaf = ?1",
            Layout::SplitHashes => "SELECT hashes FROM audit_hashes WHERE leaf = ?1",
        };
        SqlHashes { conn, query }
    }
}

impl SubtreeHashes for SqlHashes<'_> {
    type Error = AuditError;
    fn subtree(&mut self, level: u32, n: u64) -> Result<Hash, AuditError> {
        let leaf = writer_leaf(level, n);
        let blob: Option<Vec<u8>> = self
            .conn
            .prepare_cached(self.query)?
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

// === cosignatures (see `witnessing`) ===

/// A connection that writes beside the writer, rarely and briefly (witnesses'
/// cosignatures, the retention of captured inputs): it waits for the
/// writer's lock like a reader does.
pub fn open_side_writer(path: &Path) -> Result<Connection, AuditError> {
    let conn = Connection::open_with_flags(path, flags())?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    Ok(conn)
}

/// Stores a verified cosignature of the checkpoint of `tree_size`.
pub fn insert_cosignature(
    conn: &Connection,
    witness: &str,
    tree_size: u64,
    line: &str,
    cosigned_at: u64,
) -> Result<(), AuditError> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO audit_cosignatures (witness, tree_size, line, cosigned_at)
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        witness,
        to_i64(tree_size)?,
        line,
        i64::try_from(cosigned_at).unwrap_or(i64::MAX)
    ])?;
    Ok(())
}

/// The largest tree size each witness cosigned, by witness name. A log
/// opened before this table existed has none.
pub fn cosigned_sizes(conn: &Connection) -> Result<Vec<(String, u64)>, AuditError> {
    let exists: bool = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master
             WHERE type = 'table' AND name = 'audit_cosignatures')",
        )?
        .query_row([], |r| r.get(0))?;
    if !exists {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(
        "SELECT witness, MAX(tree_size) FROM audit_cosignatures GROUP BY witness ORDER BY witness",
    )?;
    let rows = stmt.query_map([], |r| {
        let size: i64 = r.get(1)?;
        Ok((r.get::<_, String>(0)?, u64::try_from(size).unwrap_or(0)))
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// The cosignature lines stored for the checkpoint of `tree_size`.
pub fn cosignatures_at(conn: &Connection, tree_size: u64) -> Result<Vec<String>, AuditError> {
    let mut stmt = conn.prepare_cached(
        "SELECT line FROM audit_cosignatures WHERE tree_size = ?1 ORDER BY witness",
    )?;
    let rows = stmt.query_map([to_i64(tree_size)?], |r| r.get(0))?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// The checkpoint of exactly `tree_size`, if one was signed.
pub fn checkpoint_at(
    conn: &Connection,
    tree_size: u64,
) -> Result<Option<CheckpointRow>, AuditError> {
    Ok(conn
        .prepare_cached(
            "SELECT tree_size, note, created_at FROM audit_checkpoints WHERE tree_size = ?1",
        )?
        .query_row([to_i64(tree_size)?], checkpoint_row)
        .optional()?)
}

/// Refuses a log smaller than a tree a witness cosigned: records (and their
/// checkpoints) were removed after the witness saw them.
pub fn check_not_rolled_back(conn: &Connection, size: u64) -> Result<(), AuditError> {
    for (witness, cosigned) in cosigned_sizes(conn)? {
        if cosigned > size {
            return Err(AuditError::Corrupt(format!(
                "witness {witness} cosigned tree size {cosigned}, but the log holds only \
                 {size} records: the newest records were removed (rollback)"
            )));
        }
    }
    Ok(())
}
