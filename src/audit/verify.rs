//! Checking the log: the proof document served for one record, its offline
//! verification, and the full re-verification of a log on disk.
//!
//! The offline verifier trusts nothing in the proof but the key the user
//! supplies: positions must follow from `(leaf_index, tree_size)`, the root
//! must be the one in the signed checkpoint text, and the signature must be
//! by that key. `verify_log` recomputes everything from the record bytes and
//! treats the signed checkpoints as the authority, so it can tell a changed
//! record from a changed stored hash.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::keys::{self, KeyDocument};
use super::merkle;
use super::merkle::{
    consistency_proof, empty_root, leaf_hash, verify_consistency, verify_inclusion, Frontier, Hash,
    Position,
};
use super::note::{self, Checkpoint};
use super::record::{hash_string, parse_hash_string, record_hash, AuditRecord};
use super::sqlite::{self, SqlHashes};
use super::{AuditError, ProofStep};

/// The algorithms a proof uses; fixed for this log version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Algorithm {
    pub hash: String,
    pub tree: String,
    pub signature: String,
}

impl Default for Algorithm {
    fn default() -> Self {
        Algorithm {
            hash: "sha256".into(),
            tree: "rfc6962".into(),
            signature: "ed25519".into(),
        }
    }
}

/// `GET /v2/audit/{record_id}/proof`: the inclusion proof of a record against
/// the first checkpoint that covers it, so it never changes. Serve
/// [`ProofDocument::to_json`] for stable bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProofDocument {
    #[serde(with = "crate::audit::record::uuid_text")]
    pub record_id: Uuid,
    /// `sha256:<hex>` of the record's canonical bytes.
    pub record_hash: String,
    pub leaf_index: u64,
    pub tree_size: u64,
    /// `sha256:<hex>` root of the checkpoint.
    pub merkle_root: String,
    pub proof: Vec<ProofStep>,
    /// The full signed-note text of the checkpoint.
    pub checkpoint: String,
    /// base64 of the 64-byte Ed25519 signature by `key_id` over the checkpoint text.
    pub signature: String,
    pub key_id: String,
    pub algorithm: Algorithm,
}

impl ProofDocument {
    /// RFC 8785 canonical JSON: the same bytes every time.
    pub fn to_json(&self) -> String {
        serde_json_canonicalizer::to_string(self).unwrap_or_default()
    }
}

/// Checks a proof offline against a key the user trusts (a JWK or key document).
pub fn verify_proof(proof_json: &str, key_json: &str) -> Result<(), String> {
    let doc: ProofDocument = serde_json::from_str(proof_json).map_err(|e| format!("proof: {e}"))?;
    let (pk, kid) = keys::parse_key_json(key_json)?;
    verify_document(&doc, &pk, &kid)
}

/// `GET /v2/audit/consistency?first=N&second=M`: an RFC 6962 consistency
/// proof between two tree sizes, hashes in standard base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsistencyDocument {
    pub first: u64,
    pub second: u64,
    pub proof: Vec<String>,
}

impl ConsistencyDocument {
    pub fn new(first: u64, second: u64, proof: &[merkle::Hash]) -> ConsistencyDocument {
        ConsistencyDocument {
            first,
            second,
            proof: proof.iter().map(|h| B64.encode(h)).collect(),
        }
    }
}

/// Checks offline that the checkpoint note `new_note` extends `old_note`:
/// both are signed by the key in `key_json` (a JWK or key document), and
/// `proof_json` (a [`ConsistencyDocument`]) proves the newer tree holds the
/// older one unchanged. Returns a one-line summary.
pub fn verify_consistency_documents(
    old_note: &str,
    new_note: &str,
    proof_json: &str,
    key_json: &str,
) -> Result<String, String> {
    let (pk, kid) = keys::parse_key_json(key_json)?;
    let read = |what: &str, text: &str| -> Result<Checkpoint, String> {
        let n = note::parse(text).map_err(|e| format!("{what} checkpoint: {e}"))?;
        let c = Checkpoint::parse(n.text).map_err(|e| format!("{what} checkpoint: {e}"))?;
        match n.verified_by(&c.origin, &pk) {
            Ok(Some(_)) => Ok(c),
            Ok(None) => Err(format!("{what} checkpoint: not signed by key {kid}")),
            Err(e) => Err(format!("{what} checkpoint: {e}")),
        }
    };
    let (old, new) = (read("old", old_note)?, read("new", new_note)?);
    if old.origin != new.origin {
        return Err(format!(
            "the checkpoints are of two logs: {:?} and {:?}",
            old.origin, new.origin
        ));
    }
    let doc: ConsistencyDocument =
        serde_json::from_str(proof_json).map_err(|e| format!("proof: {e}"))?;
    if (doc.first, doc.second) != (old.size, new.size) {
        return Err(format!(
            "the proof is from size {} to {}, the checkpoints are of sizes {} and {}",
            doc.first, doc.second, old.size, new.size
        ));
    }
    let mut proof = Vec::with_capacity(doc.proof.len());
    for h in &doc.proof {
        let raw = B64
            .decode(h)
            .map_err(|_| format!("proof: {h:?} is not base64"))?;
        let h: merkle::Hash = raw
            .try_into()
            .map_err(|_| "proof: a hash is not 32 bytes".to_string())?;
        proof.push(h);
    }
    if !merkle::verify_consistency(old.size, new.size, &old.root, &new.root, &proof) {
        return Err(format!(
            "the tree of size {} does not extend the tree of size {}",
            new.size, old.size
        ));
    }
    Ok(format!(
        "ok: {} at size {} extends size {} (key {kid})",
        new.origin, new.size, old.size
    ))
}

/// Checks that `record_json` (a record as `GET /v2/audit/{id}` returns it)
/// is the record `proof_json` proves: its id is the proof's `record_id` and
/// the SHA-256 of its RFC 8785 canonical bytes is the proof's
/// `record_hash`. Without this a proof says only that *some* record is in
/// the log.
/// One published checkpoint of a log: its signed note, the key that
/// signed it (as `GET /v2/audit/keys/{kid}` gives it), and the consistency
/// proof from the log's previous published checkpoint (`None` for the
/// first).
#[derive(Debug, Clone)]
pub struct PublishedCheckpoint {
    pub note: String,
    pub key_json: String,
    pub proof_json: Option<String>,
}

/// What a chain of published checkpoints proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainSummary {
    pub origin: String,
    pub checkpoints: usize,
    pub tree_size: u64,
}

/// Checks a log's published checkpoints, oldest first, as a witness
/// would: each is signed by the key published with it, all are of one
/// origin, sizes only grow, and each tree extends the one before it (the
/// RFC 6962 consistency proof published with it). The error names the
/// first checkpoint that fails.
pub fn verify_published_chain(entries: &[PublishedCheckpoint]) -> Result<ChainSummary, String> {
    let mut previous: Option<Checkpoint> = None;
    for e in entries {
        let (pk, kid) = keys::parse_key_json(&e.key_json)?;
        let n = note::parse(&e.note).map_err(|err| format!("checkpoint: {err}"))?;
        let c = Checkpoint::parse(n.text).map_err(|err| format!("checkpoint: {err}"))?;
        let at = format!("{} at size {}", c.origin, c.size);
        match n.verified_by(&c.origin, &pk) {
            Ok(Some(_)) => {}
            Ok(None) => return Err(format!("{at}: not signed by its key {kid}")),
            Err(err) => return Err(format!("{at}: {err}")),
        }
        if let Some(prev) = &previous {
            if c.origin != prev.origin {
                return Err(format!("{at}: another log than {}", prev.origin));
            }
            if c.size <= prev.size {
                return Err(format!(
                    "{at}: does not grow from size {} (root {} then {})",
                    prev.size,
                    B64.encode(prev.root),
                    B64.encode(c.root)
                ));
            }
            let proof_json = e
                .proof_json
                .as_deref()
                .ok_or_else(|| format!("{at}: no consistency proof from size {}", prev.size))?;
            let doc: ConsistencyDocument =
                serde_json::from_str(proof_json).map_err(|err| format!("{at}: proof: {err}"))?;
            if (doc.first, doc.second) != (prev.size, c.size) {
                return Err(format!(
                    "{at}: the proof is from size {} to {}, not from {}",
                    doc.first, doc.second, prev.size
                ));
            }
            let mut proof = Vec::with_capacity(doc.proof.len());
            for h in &doc.proof {
                let raw = B64
                    .decode(h)
                    .map_err(|_| format!("{at}: proof: {h:?} is not base64"))?;
                proof.push(
                    merkle::Hash::try_from(raw)
                        .map_err(|_| format!("{at}: proof: a hash is not 32 bytes"))?,
                );
            }
            if !merkle::verify_consistency(prev.size, c.size, &prev.root, &c.root, &proof) {
                return Err(format!(
                    "{at}: does not extend the tree of size {}",
                    prev.size
                ));
            }
        }
        previous = Some(c);
    }
    let last = previous.ok_or("no checkpoints")?;
    Ok(ChainSummary {
        origin: last.origin,
        checkpoints: entries.len(),
        tree_size: last.size,
    })
}

pub fn verify_record(proof_json: &str, record_json: &str) -> Result<(), String> {
    let doc: ProofDocument = serde_json::from_str(proof_json).map_err(|e| format!("proof: {e}"))?;
    let record: serde_json::Value =
        serde_json::from_str(record_json).map_err(|e| format!("record: {e}"))?;
    let id = record
        .get("record_id")
        .and_then(|v| v.as_str())
        .ok_or("record: no record_id")?;
    if id != doc.record_id.to_string() {
        return Err(format!(
            "the record is {id} but the proof is of {}",
            doc.record_id
        ));
    }
    let bytes = serde_json_canonicalizer::to_vec(&record).map_err(|e| format!("record: {e}"))?;
    let hash = format!(
        "sha256:{}",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes))
    );
    if hash != doc.record_hash {
        return Err(format!(
            "the record's canonical bytes hash to {hash}, the proof's record_hash is {}",
            doc.record_hash
        ));
    }
    Ok(())
}

pub(crate) fn verify_document(doc: &ProofDocument, pk: &[u8; 32], kid: &str) -> Result<(), String> {
    if doc.key_id != kid {
        return Err(format!(
            "proof names key {} but the trusted key is {kid}",
            doc.key_id
        ));
    }
    if doc.algorithm != Algorithm::default() {
        return Err("proof: unsupported algorithm".into());
    }
    let rh = parse_hash_string(&doc.record_hash).ok_or("proof: bad record_hash")?;
    let root = parse_hash_string(&doc.merkle_root).ok_or("proof: bad merkle_root")?;
    let steps: Vec<(Hash, Position)> = doc
        .proof
        .iter()
        .map(|s| parse_hash_string(&s.hash).map(|h| (h, s.position)))
        .collect::<Option<_>>()
        .ok_or("proof: bad proof hash")?;
    verify_inclusion(
        doc.leaf_index,
        doc.tree_size,
        &leaf_hash(&rh),
        &steps,
        &root,
    )
    .map_err(|e| format!("inclusion: {e}"))?;
    let n = note::parse(&doc.checkpoint).map_err(|e| e.to_string())?;
    let c = Checkpoint::parse(n.text).map_err(|e| e.to_string())?;
    if c.size != doc.tree_size {
        return Err("checkpoint: tree size differs from the proof".into());
    }
    if c.root != root {
        return Err("checkpoint: root differs from merkle_root".into());
    }
    let sig = n
        .verified_by(&c.origin, pk)
        .map_err(|e| e.to_string())?
        .ok_or("checkpoint: not signed by the trusted key")?;
    let claimed = B64
        .decode(&doc.signature)
        .map_err(|_| "signature: not base64".to_string())?;
    if claimed != sig.signature {
        return Err("signature: differs from the checkpoint's signature".into());
    }
    Ok(())
}

/// Builds and self-verifies the proof document of a record.
pub(crate) fn build_proof(
    conn: &Connection,
    keys: &[KeyDocument],
    id: Uuid,
) -> Result<Option<ProofDocument>, AuditError> {
    let Some(row) = sqlite::record_by_id(conn, id)? else {
        return Ok(None);
    };
    let corrupt = |m: String| AuditError::Corrupt(format!("proof for {id}: {m}"));
    let cp = sqlite::covering_checkpoint(conn, row.leaf)?
        .ok_or_else(|| corrupt("no checkpoint covers it".into()))?;
    let n = note::parse(&cp.note).map_err(|e| corrupt(e.to_string()))?;
    let c = Checkpoint::parse(n.text).map_err(|e| corrupt(e.to_string()))?;
    if c.size != cp.tree_size {
        return Err(corrupt("checkpoint row and note disagree".into()));
    }
    let proof = super::merkle::inclusion_proof(&mut SqlHashes::new(conn), row.leaf, c.size)?;
    // The first signature line by a published key names the key (the
    // active key at signing time comes first).
    let mut chosen = None;
    'lines: for s in &n.signatures {
        for d in keys {
            let Ok(pk) = d.public_key() else { continue };
            if s.name == c.origin && s.key_hash == note::key_hash(&c.origin, &pk) {
                chosen = Some((d, pk, s.signature.clone()));
                break 'lines;
            }
        }
    }
    let (key, pk, sig) = chosen.ok_or_else(|| corrupt("no published key signed it".into()))?;
    let doc = ProofDocument {
        record_id: id,
        record_hash: hash_string(&record_hash(&row.canonical)),
        leaf_index: row.leaf,
        tree_size: c.size,
        merkle_root: hash_string(&c.root),
        proof: ProofStep::path(proof),
        checkpoint: cp.note.clone(),
        signature: B64.encode(sig),
        key_id: key.kid.clone(),
        algorithm: Algorithm::default(),
    };
    verify_document(&doc, &pk, &key.kid).map_err(corrupt)?;
    Ok(Some(doc))
}

// === verify_log ===

/// What `verify_log` checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    pub records: u64,
    pub checkpoints: u64,
    pub tree_size: u64,
    pub root: String,
    pub keys: usize,
}

/// The first bad item of a log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot read the audit log: {0}")]
    Open(String),
    #[error("checkpoint at tree size {tree_size}: {reason}")]
    Checkpoint { tree_size: u64, reason: String },
    #[error("record at leaf {leaf} ({record_id}): {reason}")]
    Record {
        leaf: u64,
        record_id: String,
        reason: String,
    },
    #[error("stored hash of leaf {leaf}, level {level}: does not match the records")]
    StoredHash { leaf: u64, level: u32 },
    #[error("checkpoints {from} and {to} are not consistent")]
    Consistency { from: u64, to: u64 },
    /// A witness's stored cosignature covers more records than the log
    /// holds (always `WitnessFailure::RolledBack`).
    #[error(transparent)]
    RolledBack(super::witnessing::WitnessFailure),
}

fn open_err(e: impl std::fmt::Display) -> VerifyError {
    VerifyError::Open(e.to_string())
}

/// Re-verifies a whole log: every checkpoint signature, every record hash,
/// every stored hash, and consistency between successive checkpoints.
/// `progress(done, total)` is called as records are checked.
pub fn verify_log(
    db_path: &std::path::Path,
    key_dir: &std::path::Path,
    progress: impl FnMut(u64, u64),
) -> Result<VerifyReport, VerifyError> {
    let conn = sqlite::open_reader(db_path).map_err(open_err)?;
    let docs = keys::load_docs(key_dir).map_err(open_err)?;
    if docs.is_empty() {
        return Err(VerifyError::Open(format!(
            "no published keys in {}",
            key_dir.display()
        )));
    }
    let checkpoints = signed_checkpoints(&conn, &docs)?;
    let total = sqlite::record_count(&conn).map_err(open_err)?;
    check_witness_sizes(&conn, total)?;
    let layout = sqlite::layout(&conn).map_err(open_err)?;
    let rows_sql = record_rows_query(&conn, layout, total)?;
    let f = replay_records(&conn, rows_sql, &checkpoints, total, progress)?;
    check_consistency(&conn, layout, &checkpoints)?;
    Ok(VerifyReport {
        records: f.size(),
        checkpoints: checkpoints.len() as u64,
        tree_size: f.size(),
        root: hash_string(&f.root()),
        keys: docs.len(),
    })
}

/// Every stored checkpoint, parsed and checked: one origin, growing sizes,
/// and signed by at least one published key (and by none that fails).
fn signed_checkpoints(
    conn: &Connection,
    docs: &[KeyDocument],
) -> Result<Vec<Checkpoint>, VerifyError> {
    let rows = sqlite::all_checkpoints(conn).map_err(open_err)?;
    let mut checkpoints: Vec<Checkpoint> = Vec::with_capacity(rows.len());
    for row in &rows {
        let bad = |reason: String| VerifyError::Checkpoint {
            tree_size: row.tree_size,
            reason,
        };
        let n = note::parse(&row.note).map_err(|e| bad(e.to_string()))?;
        let c = Checkpoint::parse(n.text).map_err(|e| bad(e.to_string()))?;
        if c.size != row.tree_size {
            return Err(bad(format!("the note is for size {}", c.size)));
        }
        if let Some(first) = checkpoints.first() {
            if c.origin != first.origin {
                return Err(bad(format!(
                    "origin {:?} differs from {:?}",
                    c.origin, first.origin
                )));
            }
        }
        if checkpoints.last().is_some_and(|p| p.size >= c.size) {
            return Err(bad("tree size does not grow".into()));
        }
        let mut signed = 0;
        for d in docs {
            let pk = d.public_key().map_err(open_err)?;
            match n.verified_by(&c.origin, &pk) {
                Ok(Some(_)) => signed += 1,
                Ok(None) => {}
                Err(_) => return Err(bad(format!("signature by key {} does not verify", d.kid))),
            }
        }
        if signed == 0 {
            return Err(bad("not signed by any published key".into()));
        }
        if c.size == 0 && c.root != empty_root() {
            return Err(bad("empty tree with a non-empty root".into()));
        }
        checkpoints.push(c);
    }
    Ok(checkpoints)
}

/// No witness's stored cosignature may cover more than the log's `total`
/// records (the log was rolled back under it).
fn check_witness_sizes(conn: &Connection, total: u64) -> Result<(), VerifyError> {
    for (witness, cosigned) in sqlite::cosigned_sizes(conn).map_err(open_err)? {
        if cosigned > total {
            return Err(VerifyError::RolledBack(
                super::witnessing::WitnessFailure::RolledBack {
                    witness,
                    cosigned,
                    size: total,
                },
            ));
        }
    }
    Ok(())
}

/// The query that reads every record with its stored hashes in leaf order,
/// after checking that there is one record row (and one hash row) per leaf.
fn record_rows_query(
    conn: &Connection,
    layout: sqlite::Layout,
    total: u64,
) -> Result<&'static str, VerifyError> {
    let record_rows: i64 = conn
        .query_row("SELECT COUNT(*) FROM audit_records", [], |r| r.get(0))
        .map_err(open_err)?;
    if u64::try_from(record_rows).ok() != Some(total) {
        return Err(VerifyError::Record {
            leaf: total,
            record_id: String::new(),
            reason: format!("{record_rows} record rows for {total} leaves"),
        });
    }
    Ok(match layout {
        sqlite::Layout::Merged => {
            "SELECT leaf, record_id, canonical, hashes FROM audit_records ORDER BY leaf"
        }
        sqlite::Layout::SplitHashes => {
            let hash_rows: i64 = conn
                .query_row("SELECT COUNT(*) FROM audit_hashes", [], |r| r.get(0))
                .map_err(open_err)?;
            if hash_rows != record_rows {
                return Err(VerifyError::StoredHash {
                    leaf: total,
                    level: 0,
                });
            }
            "SELECT r.leaf, r.record_id, r.canonical, h.hashes
             FROM audit_records r LEFT JOIN audit_hashes h ON h.leaf = r.leaf
             ORDER BY r.leaf"
        }
    })
}

/// Rebuilds the tree from the records read by `rows_sql`, checking each
/// signed root as it is reached and that the signed checkpoints cover
/// exactly the stored records; returns the rebuilt tree.
fn replay_records(
    conn: &Connection,
    rows_sql: &str,
    checkpoints: &[Checkpoint],
    total: u64,
    mut progress: impl FnMut(u64, u64),
) -> Result<Frontier, VerifyError> {
    let mut stmt = conn.prepare(rows_sql).map_err(open_err)?;
    let mut it = stmt.query([]).map_err(open_err)?;
    let mut replay = Replay {
        f: Frontier::empty(),
        leaf_mismatch: None,
        stored_mismatch: None,
    };
    let mut next_cp = checkpoints.iter().skip_while(|c| c.size == 0).peekable();
    while let Some(row) = it.next().map_err(open_err)? {
        replay.append(row)?;
        if let Some(c) = next_cp.next_if(|c| c.size == replay.f.size()) {
            replay.check_signed_root(c)?;
        }
        if replay.f.size().is_multiple_of(4096) {
            progress(replay.f.size(), total);
        }
    }
    drop(it);
    drop(stmt);
    let f = replay.f;
    progress(f.size(), total);
    if let Some(c) = next_cp.next() {
        return Err(VerifyError::Checkpoint {
            tree_size: c.size,
            reason: format!("covers {} records but only {} are stored", c.size, f.size()),
        });
    }
    let signed = checkpoints.last().map_or(0, |c| c.size);
    if f.size() != signed {
        return Err(VerifyError::Record {
            leaf: signed,
            record_id: String::new(),
            reason: "record is not covered by any signed checkpoint".into(),
        });
    }
    Ok(f)
}

/// The tree rebuilt so far from the records, and the mismatches not yet
/// blamed.
struct Replay {
    f: Frontier,
    // First mismatches seen since the last checkpoint; blamed once the next
    // signed root says whether the records or the stored hashes are wrong.
    leaf_mismatch: Option<(u64, String)>,
    stored_mismatch: Option<(u64, u32)>,
}

impl Replay {
    /// Checks one record row and appends it to the tree, noting (not yet
    /// blaming) stored hashes that differ from the recomputed ones.
    fn append(&mut self, row: &rusqlite::Row<'_>) -> Result<(), VerifyError> {
        let leaf: i64 = row.get(0).map_err(open_err)?;
        let id_bytes: Vec<u8> = row.get(1).map_err(open_err)?;
        let canonical: String = row.get(2).map_err(open_err)?;
        let stored: Option<Vec<u8>> = row.get(3).map_err(open_err)?;
        let expected = self.f.size();
        let id = Uuid::from_slice(&id_bytes)
            .map(|u| u.to_string())
            .unwrap_or_else(|_| hex::encode(&id_bytes));
        let bad_record = |reason: &str| VerifyError::Record {
            leaf: expected,
            record_id: id.clone(),
            reason: reason.to_string(),
        };
        if u64::try_from(leaf).ok() != Some(expected) {
            return Err(bad_record("leaf index out of sequence"));
        }
        check_record_text(&canonical, &id_bytes).map_err(|r| bad_record(&r))?;
        let lh = leaf_hash(&record_hash(&canonical));
        let hashes = self.f.append(lh);
        let Some(stored) = stored else {
            return Err(VerifyError::StoredHash {
                leaf: expected,
                level: 0,
            });
        };
        let fresh = hashes.concat();
        if stored != fresh {
            if stored.get(..32) != Some(&lh[..]) {
                self.leaf_mismatch.get_or_insert((expected, id.clone()));
            } else {
                let level = (0..hashes.len())
                    .find(|&l| stored.get(l * 32..l * 32 + 32) != fresh.get(l * 32..l * 32 + 32))
                    .unwrap_or(hashes.len());
                self.stored_mismatch.get_or_insert((expected, level as u32));
            }
        }
        Ok(())
    }

    /// At a signed checkpoint: the rebuilt root must be the signed one, and
    /// any mismatch noted since the last one is blamed on the records or on
    /// the stored hashes.
    fn check_signed_root(&mut self, c: &Checkpoint) -> Result<(), VerifyError> {
        if self.f.root() != c.root {
            return Err(match self.leaf_mismatch.take() {
                Some((leaf, record_id)) => VerifyError::Record {
                    leaf,
                    record_id,
                    reason: "record hash does not match the signed tree".into(),
                },
                None => VerifyError::Checkpoint {
                    tree_size: c.size,
                    reason: "the records do not hash to the signed root".into(),
                },
            });
        }
        // The records are authentic up to here: any mismatch is in the
        // stored hashes.
        if let Some((leaf, _)) = self.leaf_mismatch.take() {
            return Err(VerifyError::StoredHash { leaf, level: 0 });
        }
        if let Some((leaf, level)) = self.stored_mismatch.take() {
            return Err(VerifyError::StoredHash { leaf, level });
        }
        Ok(())
    }
}

/// Each signed checkpoint (after the empty tree) extends the one before, by
/// a consistency proof built from the stored hashes.
fn check_consistency(
    conn: &Connection,
    layout: sqlite::Layout,
    checkpoints: &[Checkpoint],
) -> Result<(), VerifyError> {
    let mut reader = SqlHashes::with_layout(conn, layout);
    for pair in checkpoints.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.size == 0 {
            continue;
        }
        let bad = || VerifyError::Consistency {
            from: a.size,
            to: b.size,
        };
        let proof = consistency_proof(&mut reader, a.size, b.size).map_err(|_| bad())?;
        if !verify_consistency(a.size, b.size, &a.root, &b.root, &proof) {
            return Err(bad());
        }
    }
    Ok(())
}

/// A stored record must be a valid record whose canonical form is itself and
/// whose `record_id` matches its row.
fn check_record_text(canonical: &str, id_bytes: &[u8]) -> Result<(), String> {
    let rec: AuditRecord =
        serde_json::from_str(canonical).map_err(|e| format!("not a valid record: {e}"))?;
    if rec.record_id.as_bytes().as_slice() != id_bytes {
        return Err("record_id differs from its row".into());
    }
    let again = serde_json_canonicalizer::to_string(&rec).map_err(|e| e.to_string())?;
    if again != canonical {
        return Err("stored text is not canonical".into());
    }
    Ok(())
}
