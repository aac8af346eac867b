//! Tests of the audit log: known answers (RFC 6962, C2SP signed note, RFC 7638,
//! RFC 8785, our golden proof), mutations, tampering, group commit and faults.

use std::path::{Path, PathBuf};

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;

use base64::Engine as _;

use ring::signature::{Ed25519KeyPair, KeyPair as _};

use super::merkle::*;

use super::note::{self, Checkpoint, Signer};

use super::record::{hash_string, record_hash, AuditRecord, RecordKind};

use super::*;

fn ct_leaves() -> Vec<Hash> {
    [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ]
    .iter()
    .map(|x| leaf_hash(&hex::decode(x).unwrap()))
    .collect()
}

/// Recursive RFC 6962 MTH over leaf hashes: the reference.
fn mth(v: &[Hash]) -> Hash {
    match v.len() {
        0 => empty_root(),
        1 => v[0],
        n => {
            let mut k = 1;
            while k * 2 < n {
                k *= 2;
            }
            node_hash(&mth(&v[..k]), &mth(&v[k..]))
        }
    }
}

fn numbered_leaves(n: u32) -> Vec<Hash> {
    (0..n).map(|i| leaf_hash(&i.to_be_bytes())).collect()
}

// === the log ===

struct Env {
    _dir: tempfile::TempDir,
    db: PathBuf,
    keys: PathBuf,
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    Env {
        db: dir.path().join("verdict.db"),
        keys: dir.path().join("keys"),
        _dir: dir,
    }
}

fn cfg(max_wait_ms: u64) -> crate::config::AuditConfig {
    crate::config::AuditConfig {
        origin: Some("verdict/test".into()),
        max_wait: Duration::from_millis(max_wait_ms),
        max_batch: 512,
        witnesses: Vec::new(),
        capture_inputs: true,
        input_retention: std::time::Duration::from_secs(7 * 86_400),
        export: None,
    }
}

fn decision(i: u64) -> AuditRecord {
    let mut r = AuditRecord::new(RecordKind::Decision);
    r.principal = Some(format!("tenant-{}", i % 3));
    r.request_id = Some(format!("req-{i}"));
    r.decision = Some("allow".into());
    r.reason = Some("coverage_sufficient".into());
    r.action = Some(serde_json::json!({"type": "refund.create", "params": {"amount": i}}));
    r
}

fn key_json(log: &AuditLog, kid: &str) -> String {
    serde_json::to_string(&log.key(kid).unwrap()).unwrap()
}

/// A log holding `decision(0..n)`, their record ids, and the JSON of the
/// key that signed them.
async fn log_with_decisions(e: &Env, n: u64) -> (AuditLog, Vec<uuid::Uuid>, String) {
    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        let rec = decision(i);
        ids.push(rec.record_id);
        log.append(rec).await.unwrap();
    }
    let key = key_json(&log, &log.health().key_id);
    (log, ids, key)
}

/// The proof document of record `id`, as served.
async fn proof_json(log: &AuditLog, id: uuid::Uuid) -> String {
    log.proof(id).await.unwrap().unwrap().to_json()
}

/// Stops the writer and verifies what it left, as `verdict audit verify`
/// does offline.
async fn shut_and_verify(log: &AuditLog, e: &Env) -> VerifyReport {
    log.shutdown().await;
    verify_log(&e.db, &e.keys, |_, _| {}).unwrap()
}

fn check_receipt(r: &Receipt) {
    let leaf = leaf_hash(&record::parse_hash_string(&r.record_hash).unwrap());
    let steps: Vec<(Hash, Position)> = r
        .proof
        .iter()
        .map(|s| (record::parse_hash_string(&s.hash).unwrap(), s.position))
        .collect();
    let root = record::parse_hash_string(&r.merkle_root).unwrap();
    verify_inclusion(r.leaf_index, r.tree_size, &leaf, &steps, &root).unwrap();
}

/// Changes one character of `s` at char index `i` into a different one.
fn flip_char(s: &str, i: usize) -> String {
    s.chars()
        .enumerate()
        .map(|(j, c)| {
            if j != i {
                c
            } else if c == '0' {
                '1'
            } else if c.is_ascii_alphanumeric() {
                '0'
            } else if c == '\n' {
                ' '
            } else {
                'x'
            }
        })
        .collect()
}

/// A log with one decision whose key rotation failed to commit (write
/// failures still injected); returns it and the retired key's id.
async fn failed_rotation(e: &Env) -> (AuditLog, String) {
    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    log.append(decision(0)).await.unwrap();
    let old_kid = log.health().key_id;
    log.inject_write_failure(true);
    assert!(log.rotate_key().await.is_err());
    (log, old_kid)
}

/// Leaf 1 is the key change from `old` to `new`, in a checkpoint (size 2)
/// signed by both keys.
fn assert_key_change_at_leaf_1(e: &Env, old: &str, new: &str) {
    let (signatures, canonical) = stored(e, 2, 1);
    assert_eq!(signatures, 2);
    assert!(canonical.contains(r#""kind":"key_change""#), "{canonical}");
    assert!(
        canonical.contains(old) && canonical.contains(new),
        "{canonical}"
    );
}

/// The checkpoint at `size` and the record at `leaf`, straight from SQLite.
fn stored(e: &Env, size: u64, leaf: u64) -> (usize, String) {
    let conn = rusqlite::Connection::open(&e.db).unwrap();
    let row = sqlite::covering_checkpoint(&conn, size - 1)
        .unwrap()
        .unwrap();
    assert_eq!(row.tree_size, size);
    let signatures = note::parse(&row.note).unwrap().signatures.len();
    (
        signatures,
        sqlite::record_by_leaf(&conn, leaf).unwrap().unwrap(),
    )
}

async fn build_log(e: &Env, n: u64) -> Vec<Receipt> {
    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        out.push(log.append(decision(i)).await.unwrap());
    }
    log.shutdown().await;
    out
}

fn sql(e: &Env, stmt: &str, params: impl rusqlite::Params) {
    let conn = rusqlite::Connection::open(&e.db).unwrap();
    conn.execute(stmt, params).unwrap();
}

/// Rewrites `column` of the one row of `table` that `row` (an SQL
/// condition) selects with `edit`, behind the log's back.
fn edit_stored<T: rusqlite::types::FromSql + rusqlite::ToSql>(
    e: &Env,
    table: &str,
    column: &str,
    row: &str,
    edit: impl FnOnce(T) -> T,
) {
    let conn = rusqlite::Connection::open(&e.db).unwrap();
    let old: T = conn
        .query_row(
            &format!("SELECT {column} FROM {table} WHERE {row}"),
            [],
            |r| r.get(0),
        )
        .unwrap();
    conn.execute(
        &format!("UPDATE {table} SET {column} = ?1 WHERE {row}"),
        [edit(old)],
    )
    .unwrap();
}

/// Flips bits of byte `at` in the stored hashes of `leaf`, in `table`
/// (`audit_records`, or `audit_hashes` in the earlier layout).
fn flip_stored_hash(e: &Env, table: &str, leaf: u64, at: usize, mask: u8) {
    edit_stored(
        e,
        table,
        "hashes",
        &format!("leaf = {leaf}"),
        |mut blob: Vec<u8>| {
            blob[at] ^= mask;
            blob
        },
    );
}

/// Rewrites a log into the layout used before 2026-11-24, with the stored
/// hashes in `audit_hashes` (the schema exactly as that version created it).
fn split_hashes_layout(e: &Env) {
    let conn = rusqlite::Connection::open(&e.db).unwrap();
    conn.execute_batch(
        "BEGIN;
         CREATE TABLE audit_hashes (
             leaf   INTEGER PRIMARY KEY,
             hashes BLOB NOT NULL
         );
         INSERT INTO audit_hashes (leaf, hashes) SELECT leaf, hashes FROM audit_records;
         CREATE TABLE audit_records_old (
             leaf      INTEGER PRIMARY KEY,
             record_id BLOB NOT NULL UNIQUE,
             canonical TEXT NOT NULL,
             principal TEXT
         );
         INSERT INTO audit_records_old SELECT leaf, record_id, canonical, principal
             FROM audit_records;
         DROP TABLE audit_records;
         ALTER TABLE audit_records_old RENAME TO audit_records;
         COMMIT;",
    )
    .unwrap();
}

fn has_table(e: &Env, name: &str) -> bool {
    let conn = rusqlite::Connection::open(&e.db).unwrap();
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
        [name],
        |r| r.get(0),
    )
    .unwrap()
}

// The tests, by what they cover (after the helpers: a macro is seen only
// below its definition).
mod tampering;
mod vectors;
mod writing;
