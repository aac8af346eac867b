//! Finding records, and exporting them so that an export verifies alone.
//!
//! An operator asks "which refunds would the draft policy have denied
//! today?" and an auditor asks for last month's decisions; neither should
//! need SQLite. [`Filter`] selects records by time, kind, action type,
//! decision, `would_decide`, route and principal, for `GET
//! /v2/audit/records` (one page at a time, by leaf cursor) and for
//! `verdict audit export`, which writes one JSON line per record: the record
//! and its inclusion proof against one checkpoint, the newest when the
//! export starts. Every line can then be checked offline with the log's
//! public key (`verdict audit verify-export`), and since all lines share one
//! checkpoint, one consistency proof ties the whole export to any later
//! checkpoint.

use std::io::{BufRead, Write};
use std::path::Path;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use rusqlite::Connection;
use serde::Serialize;
use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::keys::{self, KeyDocument};
use super::merkle::{inclusion_proof, Hash, MemoryHashes};
use super::note::{self, Checkpoint};
use super::record::{hash_string, record_hash};
use super::sqlite;
use super::verify::{verify_document, verify_record, Algorithm, ProofDocument};
use super::{AuditError, AuditLog, ProofStep};

/// Rows scanned per page of `GET /v2/audit/records` at most, matching or
/// not, so that a filter that matches nothing cannot make one request read
/// the whole log; the page's `next_cursor` continues the scan.
const SCAN_PER_PAGE: u64 = 20_000;

/// Which records to select; every set field must match.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub since: Option<OffsetDateTime>,
    pub until: Option<OffsetDateTime>,
    /// `decision`, `review_resolution`, `policy_reload`, `key_change`.
    pub kind: Option<String>,
    /// `action.type`.
    pub action: Option<String>,
    pub decision: Option<String>,
    pub would_decide: Option<String>,
    pub route: Option<String>,
    pub principal: Option<String>,
}

/// The values `kind` can take in a record.
pub const KINDS: [&str; 4] = [
    "decision",
    "review_resolution",
    "policy_reload",
    "key_change",
];
/// The values `decision` and `would_decide` can take in a record.
pub const DECISIONS: [&str; 3] = ["allow", "deny", "needs_review"];

impl Filter {
    /// Sets one field from its query or flag name; `Err` names what is
    /// wrong. A value no record can hold (`decision=DENY`, `kind=decisions`)
    /// is an error naming the allowed values, never a filter that silently
    /// matches nothing.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let text = || Some(value.to_string());
        let one_of = |allowed: &[&str]| {
            if allowed.contains(&value) {
                Ok(Some(value.to_string()))
            } else {
                Err(format!(
                    "{key}: {value:?} is not one of {}",
                    allowed.join(", ")
                ))
            }
        };
        match key {
            "since" => self.since = Some(parse_time(value).map_err(|e| format!("since: {e}"))?),
            "until" => self.until = Some(parse_time(value).map_err(|e| format!("until: {e}"))?),
            "kind" => self.kind = one_of(&KINDS)?,
            "action" => self.action = text(),
            "decision" => self.decision = one_of(&DECISIONS)?,
            "would_decide" => self.would_decide = one_of(&DECISIONS)?,
            "route" => self.route = text(),
            "principal" => self.principal = text(),
            other => {
                return Err(format!(
                    "unknown filter {other:?} (since, until, kind, action, decision, \
                     would_decide, route, principal)"
                ))
            }
        }
        Ok(())
    }

    /// Whether a record (its canonical JSON, parsed) matches.
    pub fn matches(&self, r: &Value) -> bool {
        let field = |v: &Value, want: &Option<String>| {
            want.as_ref()
                .is_none_or(|w| v.as_str().is_some_and(|s| s == w))
        };
        if self.since.is_some() || self.until.is_some() {
            let Some(at) = r["at"]
                .as_str()
                .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok())
            else {
                return false;
            };
            if self.since.is_some_and(|t| at < t) || self.until.is_some_and(|t| at >= t) {
                return false;
            }
        }
        field(&r["kind"], &self.kind)
            && field(&r["action"]["type"], &self.action)
            && field(&r["decision"], &self.decision)
            && field(&r["would_decide"], &self.would_decide)
            && field(&r["route"], &self.route)
            && field(&r["principal"], &self.principal)
    }
}

/// An RFC 3339 time, or a duration before now ("24h", "7d", "90m").
fn parse_time(value: &str) -> Result<OffsetDateTime, String> {
    if let Ok(t) = OffsetDateTime::parse(value, &Rfc3339) {
        return Ok(t);
    }
    let ago = humantime::parse_duration(value)
        .map_err(|_| format!("{value:?} is neither an RFC 3339 time nor a duration such as 24h"))?;
    OffsetDateTime::now_utc()
        .checked_sub(time::Duration::try_from(ago).map_err(|e| e.to_string())?)
        .ok_or_else(|| format!("{value:?} reaches before the calendar"))
}

/// One page of `GET /v2/audit/records`.
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    /// The matching records, oldest first, as their canonical JSON.
    pub records: Vec<Value>,
    /// Pass as `cursor` for the next page; `None` at the end of the log.
    pub next_cursor: Option<String>,
}

impl AuditLog {
    /// Up to `limit` records matching `filter`, from leaf `cursor` on.
    pub async fn search(
        &self,
        filter: Filter,
        cursor: u64,
        limit: usize,
    ) -> Result<Page, AuditError> {
        self.read(move |conn, _| {
            let size = sqlite::record_count(conn)?;
            let mut stmt = conn.prepare_cached(
                "SELECT leaf, canonical FROM audit_records WHERE leaf >= ?1 ORDER BY leaf LIMIT ?2",
            )?;
            let scan = i64::try_from(SCAN_PER_PAGE).unwrap_or(i64::MAX);
            let from = i64::try_from(cursor).unwrap_or(i64::MAX);
            let mut rows = stmt.query(rusqlite::params![from, scan])?;
            let mut records = Vec::new();
            let mut next = cursor;
            while let Some(row) = rows.next()? {
                let leaf: i64 = row.get(0)?;
                let canonical: String = row.get(1)?;
                next = u64::try_from(leaf).unwrap_or(0) + 1;
                let v: Value = serde_json::from_str(&canonical)
                    .map_err(|e| AuditError::Corrupt(format!("record at leaf {leaf}: {e}")))?;
                if filter.matches(&v) {
                    records.push(v);
                    if records.len() >= limit {
                        break;
                    }
                }
            }
            Ok(Page {
                records,
                next_cursor: (next < size).then(|| next.to_string()),
            })
        })
        .await
    }
}

/// Records shipped in one call, as `verdict audit export` writes them: one
/// line each, `{"record": …, "proof": …}`, the proof against the newest
/// signed checkpoint when the batch was read.
#[derive(Debug, Clone, Default)]
pub struct ShipBatch {
    /// The lines, each ending in `\n`.
    pub body: Vec<u8>,
    /// The first leaf in the batch, and one past the last.
    pub first: u64,
    pub end: u64,
    /// Records the log holds, signed or not (the shipper's lag is this
    /// minus `end`).
    pub log_size: u64,
}

impl AuditLog {
    /// Up to `max` records from leaf `from` on, among those the newest
    /// checkpoint covers (a record is shipped once its checkpoint is
    /// signed, which is before its decision is answered). Empty when there
    /// is nothing new.
    pub async fn ship_batch(&self, from: u64, max: usize) -> Result<ShipBatch, AuditError> {
        self.read(move |conn, shared| ship_batch(conn, &shared.key_list()?, from, max))
            .await
    }
}

/// [`AuditLog::ship_batch`] on one read transaction.
fn ship_batch(
    conn: &Connection,
    docs: &[KeyDocument],
    from: u64,
    max: usize,
) -> Result<ShipBatch, AuditError> {
    let tx = conn.unchecked_transaction()?;
    let log_size = sqlite::record_count(&tx)?;
    let Some(cp_row) = sqlite::newest_checkpoint(&tx)? else {
        return Ok(ShipBatch {
            first: from,
            end: from,
            log_size,
            ..ShipBatch::default()
        });
    };
    let n = note::parse(&cp_row.note).map_err(|e| AuditError::Corrupt(e.to_string()))?;
    let cp = Checkpoint::parse(n.text).map_err(|e| AuditError::Corrupt(e.to_string()))?;
    let end = cp.size.min(from.saturating_add(max as u64));
    let mut out = ShipBatch {
        body: Vec::new(),
        first: from,
        end: from.max(end),
        log_size,
    };
    if end <= from {
        return Ok(out);
    }
    let (key, pk, signature) = signer(&n, &cp, docs)?;
    let against = Against {
        note: &cp_row.note,
        cp: &cp,
        key,
        pk,
        signature,
    };
    let mut hashes = Memo {
        sql: sqlite::SqlHashes::new(&tx),
        seen: std::collections::HashMap::new(),
    };
    let mut stmt = tx.prepare_cached(
        "SELECT leaf, canonical FROM audit_records WHERE leaf >= ?1 AND leaf < ?2 ORDER BY leaf",
    )?;
    let bound = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let mut rows = stmt.query(rusqlite::params![bound(from), bound(end)])?;
    let mut expect = from;
    while let Some(row) = rows.next()? {
        let leaf = u64::try_from(row.get::<_, i64>(0)?).unwrap_or(u64::MAX);
        if leaf != expect {
            return Err(AuditError::Corrupt(format!("leaf {expect} is missing")));
        }
        expect += 1;
        let canonical: String = row.get(1)?;
        let v = serde_json::from_str::<Value>(&canonical)
            .map_err(|e| AuditError::Corrupt(format!("record at leaf {leaf}: {e}")))?;
        let path = inclusion_proof(&mut hashes, leaf, cp.size)?;
        // As for an export: a bug in the tree math must not ship a batch of
        // bad proofs.
        let line = against.line(&canonical, &v, leaf, path, leaf == from)?;
        out.body.extend_from_slice(line.as_bytes());
    }
    if expect != end {
        return Err(AuditError::Corrupt(format!("leaf {expect} is missing")));
    }
    Ok(out)
}

/// Stored subtree hashes read once per batch: the proofs of neighbouring
/// leaves share most of their path.
struct Memo<'c> {
    sql: sqlite::SqlHashes<'c>,
    seen: std::collections::HashMap<(u32, u64), Hash>,
}

impl super::merkle::SubtreeHashes for Memo<'_> {
    type Error = AuditError;
    fn subtree(&mut self, level: u32, n: u64) -> Result<Hash, AuditError> {
        if let Some(h) = self.seen.get(&(level, n)) {
            return Ok(*h);
        }
        let h = self.sql.subtree(level, n)?;
        self.seen.insert((level, n), h);
        Ok(h)
    }
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportReport {
    pub scanned: u64,
    pub exported: u64,
    /// The size of the checkpoint every proof is against.
    pub tree_size: u64,
}

/// Writes every record of the log in `db_path` (keys in `key_dir`) that
/// matches `filter`, one line each: `{"record": …, "proof": …}`, the proof
/// being what `GET /v2/audit/{id}/proof` serves but against the newest
/// checkpoint. Reads a consistent snapshot; a running server may keep
/// appending. `progress(scanned, total)` is called as records are read.
pub fn export(
    db_path: &Path,
    key_dir: &Path,
    filter: &Filter,
    out: &mut impl Write,
    mut progress: impl FnMut(u64, u64),
) -> Result<ExportReport, AuditError> {
    let mut conn = sqlite::open_reader(db_path)?;
    let docs = keys::load_docs(key_dir)?;
    // One read transaction: the checkpoint and the rows are one snapshot.
    let tx = conn.transaction()?;
    let cp_row = sqlite::newest_checkpoint(&tx)?
        .ok_or_else(|| AuditError::Corrupt("the log has no checkpoint".into()))?;
    let n = note::parse(&cp_row.note).map_err(|e| AuditError::Corrupt(e.to_string()))?;
    let cp = Checkpoint::parse(n.text).map_err(|e| AuditError::Corrupt(e.to_string()))?;
    let (key, pk, signature) = signer(&n, &cp, &docs)?;
    let size = cp.size;
    let against = Against {
        note: &cp_row.note,
        cp: &cp,
        key,
        pk,
        signature,
    };
    let hashes = load_hashes(&tx, size)?;
    let mut mem = MemoryHashes { rows: hashes };
    let mut stmt =
        tx.prepare("SELECT leaf, canonical FROM audit_records WHERE leaf < ?1 ORDER BY leaf")?;
    let mut rows = stmt.query([i64::try_from(size).unwrap_or(i64::MAX)])?;
    let (mut scanned, mut exported) = (0u64, 0u64);
    let io = |e: std::io::Error| AuditError::Storage(format!("writing the export: {e}"));
    while let Some(row) = rows.next()? {
        let leaf: i64 = row.get(0)?;
        let leaf = u64::try_from(leaf).unwrap_or(0);
        let canonical: String = row.get(1)?;
        scanned += 1;
        if scanned.is_multiple_of(4096) {
            progress(scanned, size);
        }
        let v: Value = serde_json::from_str(&canonical)
            .map_err(|e| AuditError::Corrupt(format!("record at leaf {leaf}: {e}")))?;
        if !filter.matches(&v) {
            continue;
        }
        let path = inclusion_proof(&mut mem, leaf, size).map_err(AuditError::Corrupt)?;
        // The first line is checked before anything is written: a bug in the
        // tree math must not produce a whole file of bad proofs.
        let line = against.line(&canonical, &v, leaf, path, exported == 0)?;
        out.write_all(line.as_bytes()).map_err(io)?;
        exported += 1;
    }
    progress(scanned, size);
    out.flush().map_err(io)?;
    Ok(ExportReport {
        scanned,
        exported,
        tree_size: size,
    })
}

/// The signed checkpoint the lines of an export or a shipped batch prove
/// their records against.
struct Against<'a> {
    note: &'a str,
    cp: &'a Checkpoint,
    key: &'a KeyDocument,
    pk: [u8; 32],
    signature: String,
}

impl Against<'_> {
    /// One line, `{"record": …, "proof": …}` and a newline, for the record
    /// `canonical` (parsed: `record`) at `leaf` with its inclusion `path`;
    /// the proof is verified first when `check`.
    fn line(
        &self,
        canonical: &str,
        record: &Value,
        leaf: u64,
        path: Vec<(Hash, super::merkle::Position)>,
        check: bool,
    ) -> Result<String, AuditError> {
        let record_id = record["record_id"]
            .as_str()
            .and_then(|s| uuid::Uuid::parse_str(s).ok())
            .ok_or_else(|| AuditError::Corrupt(format!("record at leaf {leaf}: no record_id")))?;
        let doc = ProofDocument {
            record_id,
            record_hash: hash_string(&record_hash(canonical)),
            leaf_index: leaf,
            tree_size: self.cp.size,
            merkle_root: hash_string(&self.cp.root),
            proof: ProofStep::path(path),
            checkpoint: self.note.to_string(),
            signature: self.signature.clone(),
            key_id: self.key.kid.clone(),
            algorithm: Algorithm::default(),
        };
        if check {
            verify_document(&doc, &self.pk, &self.key.kid).map_err(AuditError::Corrupt)?;
        }
        Ok(format!(
            "{{\"record\":{canonical},\"proof\":{}}}\n",
            doc.to_json()
        ))
    }
}

/// The published key whose signature line the checkpoint carries first.
fn signer<'d>(
    n: &note::Note<'_>,
    cp: &Checkpoint,
    docs: &'d [KeyDocument],
) -> Result<(&'d KeyDocument, [u8; 32], String), AuditError> {
    for s in &n.signatures {
        for d in docs {
            let Ok(pk) = d.public_key() else { continue };
            if s.name == cp.origin && s.key_hash == note::key_hash(&cp.origin, &pk) {
                return Ok((d, pk, B64.encode(&s.signature)));
            }
        }
    }
    Err(AuditError::Corrupt(
        "the newest checkpoint is signed by no published key".into(),
    ))
}

/// Every leaf's stored hashes for the first `size` leaves, in leaf order.
fn load_hashes(conn: &Connection, size: u64) -> Result<Vec<Vec<Hash>>, AuditError> {
    let mut stmt =
        conn.prepare("SELECT leaf, hashes FROM audit_records WHERE leaf < ?1 ORDER BY leaf")?;
    let mut rows = stmt.query([i64::try_from(size).unwrap_or(i64::MAX)])?;
    let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    while let Some(row) = rows.next()? {
        let leaf: i64 = row.get(0)?;
        if u64::try_from(leaf).ok() != Some(out.len() as u64) {
            return Err(AuditError::Corrupt(format!(
                "leaf {} is missing",
                out.len()
            )));
        }
        let blob: Vec<u8> = row.get(1)?;
        let level_hashes = blob
            .chunks_exact(32)
            .map(|c| <Hash>::try_from(c).unwrap_or([0; 32]))
            .collect();
        out.push(level_hashes);
    }
    Ok(out)
}

/// Checks every line of an export against the log's public key (a JWK or
/// key document): the proof, and that the line's record is the one the
/// proof is of. Returns the number of lines; `Err` names the first bad one.
pub fn verify_export(
    input: impl BufRead,
    key_json: &str,
    mut progress: impl FnMut(u64),
) -> Result<u64, String> {
    let (pk, kid) = keys::parse_key_json(key_json)?;
    let mut n = 0u64;
    for (i, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("reading line {}: {e}", i + 1))?;
        if line.is_empty() {
            continue;
        }
        let at = |e: String| format!("line {}: {e}", i + 1);
        let v: Value = serde_json::from_str(&line).map_err(|e| at(e.to_string()))?;
        let (Some(record), Some(proof)) = (v.get("record"), v.get("proof")) else {
            return Err(at("expected {\"record\": …, \"proof\": …}".into()));
        };
        let proof_json = proof.to_string();
        let doc: ProofDocument =
            serde_json::from_value(proof.clone()).map_err(|e| at(e.to_string()))?;
        verify_document(&doc, &pk, &kid).map_err(at)?;
        verify_record(&proof_json, &record.to_string()).map_err(at)?;
        n += 1;
        if n.is_multiple_of(4096) {
            progress(n);
        }
    }
    progress(n);
    Ok(n)
}

/// One record for `verdict audit show`: where it sits in the tree, then its
/// fields, pretty-printed. `None` when there is no such record.
pub fn show(db_path: &Path, id: uuid::Uuid) -> Result<Option<String>, AuditError> {
    let conn = sqlite::open_reader(db_path)?;
    let Some(row) = sqlite::record_by_id(&conn, id)? else {
        return Ok(None);
    };
    let covering = sqlite::covering_checkpoint(&conn, row.leaf)?;
    let v: Value = serde_json::from_str(&row.canonical)
        .map_err(|e| AuditError::Corrupt(format!("record {id}: {e}")))?;
    let pretty = serde_json::to_string_pretty(&v).unwrap_or_default();
    Ok(Some(format!(
        "record {id}\nleaf {} of {}, first covered by the checkpoint of size {}\nhash {}\n\n{pretty}",
        row.leaf,
        sqlite::record_count(&conn)?,
        covering.map_or_else(|| "(none)".to_string(), |c| c.tree_size.to_string()),
        hash_string(&record_hash(&row.canonical)),
    )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::record::RecordKind;

    #[test]
    fn the_filter_values_are_the_record_enumerations() {
        for kind in [
            RecordKind::Decision,
            RecordKind::ReviewResolution,
            RecordKind::PolicyReload,
            RecordKind::KeyChange,
        ] {
            let text = serde_json::to_value(kind).unwrap();
            assert!(KINDS.contains(&text.as_str().unwrap()), "{text}");
        }
        let mut f = super::Filter::default();
        for bad in [
            ("kind", "decisions"),
            ("decision", "DENY"),
            ("would_decide", "maybe"),
        ] {
            let e = f.set(bad.0, bad.1).unwrap_err();
            assert!(e.starts_with(bad.0), "{e}");
        }
        assert!(f.set("decision", "needs_review").is_ok());
    }

    use super::*;

    #[test]
    fn filters_match_fields_and_times() {
        let r: Value = serde_json::json!({
            "kind": "decision", "at": "2026-11-25T08:00:00.5Z", "decision": "allow",
            "would_decide": "deny", "route": "create-refund", "principal": "proxy",
            "action": {"type": "refund.create"}
        });
        let mut f = Filter::default();
        assert!(f.matches(&r));
        for (k, v) in [
            ("kind", "decision"),
            ("action", "refund.create"),
            ("would_decide", "deny"),
            ("route", "create-refund"),
            ("principal", "proxy"),
            ("decision", "allow"),
            ("since", "2026-11-25T08:00:00Z"),
            ("until", "2026-11-25T08:00:01Z"),
        ] {
            f.set(k, v).unwrap();
            assert!(f.matches(&r), "{k}={v}");
        }
        for (k, v) in [
            ("kind", "policy_reload"),
            ("action", "refund.crate"),
            ("would_decide", "allow"),
            ("since", "2026-11-25T08:00:01Z"),
            ("until", "2026-11-25T08:00:00.5Z"),
        ] {
            let mut g = f.clone();
            g.set(k, v).unwrap();
            assert!(!g.matches(&r), "{k}={v}");
        }
        // A duration counts back from now.
        let mut h = Filter::default();
        h.set("since", "1h").unwrap();
        let now = OffsetDateTime::now_utc().format(&Rfc3339).unwrap();
        assert!(h.matches(&serde_json::json!({"at": now})));
        assert!(!h.matches(&serde_json::json!({"at": "2020-01-01T00:00:00Z"})));
        assert!(
            !h.matches(&serde_json::json!({})),
            "a record without a time"
        );
        assert!(Filter::default().set("colour", "red").is_err());
        assert!(Filter::default().set("since", "yesterday-ish").is_err());
    }
}
