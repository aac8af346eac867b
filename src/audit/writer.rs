//! The single writer: it owns the write connection, the in-memory right edge
//! of the tree and the signing key, and turns a batch of records into one
//! group commit.
//!
//! One writer means leaf indices are assigned without locks and the tree can
//! be extended from memory. Whoever commits holds it alone (`super::line`
//! decides who: the appending caller when the log is quiet, the committer
//! thread under load), always off the async runtime's polling. Each group is
//! one transaction holding the records, their stored hashes and the signed
//! checkpoint for the new size, so a torn write leaves no trace and every
//! stored record is covered by a signed checkpoint. Waiters are answered
//! only after the commit.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use rusqlite::{Connection, ErrorCode, TransactionBehavior};
use time::OffsetDateTime;
use tokio::sync::{oneshot, OwnedSemaphorePermit};
use uuid::Uuid;

use super::checkpointer::Checkpointer;
use super::keys::{KeyDocument, KeyRing, SigningKey};
use super::merkle::{
    consistency_proof, empty_root, inclusion_proof, leaf_hash, verify_consistency, BatchHashes,
    Frontier, Hash, SubtreeHashes as _,
};
use super::note::{self, Checkpoint, Signer};
use super::record::{format_at, hash_string, record_hash, AuditRecord, RecordKind};
use super::sqlite::{self, SqlHashes};
use super::{AuditError, CapturedInput, ProofStep, Published, Receipt};

/// One record waiting for its group commit.
pub(crate) struct Pending {
    pub record_id: Uuid,
    pub canonical: String,
    pub record_hash: Hash,
    pub principal: Option<String>,
    /// The decision's captured input (`audit_inputs`), stored in the same
    /// transaction as the record.
    pub input: Option<CapturedInput>,
    pub enqueued: Instant,
    pub reply: oneshot::Sender<Result<Answer, AuditError>>,
    /// Frees a queue slot when the record has been handled (backpressure).
    pub _permit: OwnedSemaphorePermit,
}

/// What the writer answers an append with once its group is durable.
pub(crate) enum Answer {
    /// Placed at `leaf` of the committed `group`.
    Committed { group: Arc<Group>, leaf: u64 },
    /// The benchmark-only no-op log: a receipt that proves nothing.
    #[cfg(feature = "bench")]
    Noop(Receipt),
}

/// A committed group, shared by its waiters: enough of the tree to build an
/// inclusion proof for any of its leaves against its checkpoint without
/// touching the database.
pub(crate) struct Group {
    /// The tree before the group.
    old: Frontier,
    /// The stored hashes of the group's leaves, in order.
    rows: Vec<Vec<Hash>>,
    /// The size of the checkpoint that first covers the group.
    size: u64,
    /// That checkpoint's root as `sha256:<hex>`.
    root: String,
    key_id: String,
}

impl Answer {
    /// The receipt for the record that was appended with `id` and `record_hash`.
    pub fn receipt(self, id: Uuid, record_hash: &Hash) -> Result<Receipt, AuditError> {
        let (group, leaf) = match self {
            #[cfg(feature = "bench")]
            Answer::Noop(r) => return Ok(r),
            Answer::Committed { group, leaf } => (group, leaf),
        };
        let mut hashes = BatchHashes {
            old: &group.old,
            rows: &group.rows,
        };
        let proof = inclusion_proof(&mut hashes, leaf, group.size).map_err(corrupt)?;
        Ok(Receipt {
            record_id: id,
            record_hash: hash_string(record_hash),
            key_id: group.key_id.clone(),
            merkle_root: group.root.clone(),
            leaf_index: leaf,
            tree_size: group.size,
            proof: ProofStep::path(proof),
        })
    }
}

/// A committed group and, per item, its leaf or why it was refused.
type Committed = (Arc<Group>, Vec<Result<u64, AuditError>>);

/// A record as the commit needs it.
struct Item<'a> {
    id: Uuid,
    canonical: &'a str,
    record_hash: Hash,
    principal: Option<&'a str>,
    input: Option<&'a CapturedInput>,
}

pub(crate) struct Writer {
    conn: Connection,
    /// The tree as of the newest committed checkpoint.
    frontier: Frontier,
    ring: KeyRing,
    origin: String,
    shared: Arc<Published>,
    /// A rotation whose `key_change` record and two-key checkpoint are not
    /// committed yet: the retired key that must co-sign it. Set between the
    /// key documents naming the new key and that commit; every later group
    /// commits it first (and fails while it cannot), and `open` finds one
    /// left by a crash because the newest checkpoint lacks the active key.
    pending_key_change: Option<SigningKey>,
    /// Copies WAL frames into the database beside this thread.
    checkpointer: Checkpointer,
}

fn now_at() -> String {
    format_at(OffsetDateTime::now_utc())
}

fn corrupt(msg: impl Into<String>) -> AuditError {
    AuditError::Corrupt(msg.into())
}

/// `verdict/<hostname>`, read without extra crates.
pub(crate) fn default_origin() -> String {
    let host = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .find(|s| note::valid_name(s))
        .unwrap_or_else(|| "localhost".to_string());
    format!("verdict/{host}")
}

impl Writer {
    /// Opens the log: tables, origin, keys, and the check that the newest
    /// checkpoint is signed by a published key and matches the stored tree.
    pub fn open(
        db_path: &std::path::Path,
        key_dir: &std::path::Path,
        cfg: &crate::config::AuditConfig,
        shared: Arc<Published>,
    ) -> Result<Writer, AuditError> {
        if cfg.max_batch == 0 {
            return Err(AuditError::Config(
                "audit.max_batch must be greater than 0".into(),
            ));
        }
        let conn = sqlite::open_writer(db_path)?;
        let newest = sqlite::newest_checkpoint(&conn)?;
        let count = sqlite::record_count(&conn)?;
        sqlite::check_not_rolled_back(&conn, count)?;
        let parsed = match &newest {
            None => None,
            Some(row) => {
                let n = note::parse(&row.note)
                    .map_err(|e| corrupt(format!("newest checkpoint ({}): {e}", row.tree_size)))?;
                let c = Checkpoint::parse(n.text)
                    .map_err(|e| corrupt(format!("newest checkpoint ({}): {e}", row.tree_size)))?;
                if c.size != row.tree_size {
                    return Err(corrupt(format!(
                        "newest checkpoint row {} holds a note for size {}",
                        row.tree_size, c.size
                    )));
                }
                Some((row.note.clone(), c))
            }
        };
        let origin = match (&cfg.origin, &parsed) {
            (Some(want), Some((_, c))) if *want != c.origin => {
                return Err(AuditError::Config(format!(
                    "audit.origin {want:?} differs from the log's origin {:?}",
                    c.origin
                )))
            }
            (_, Some((_, c))) => c.origin.clone(),
            (Some(want), None) => want.clone(),
            (None, None) => default_origin(),
        };
        if !note::valid_name(&origin) {
            return Err(AuditError::Config(format!(
                "audit.origin {origin:?}: must be non-empty without spaces or '+'"
            )));
        }
        if parsed.is_some() && super::keys::load_docs(key_dir)?.is_empty() {
            // Generating a fresh key here would hide the loss of the old one.
            return Err(AuditError::Key {
                path: key_dir.display().to_string(),
                message: "no published keys, but the log already has checkpoints".into(),
            });
        }
        let ring = KeyRing::open(key_dir, &origin, now_at())?;
        let checkpointer = Checkpointer::start(db_path)?;
        let mut writer = Writer {
            conn,
            frontier: Frontier::empty(),
            ring,
            origin,
            shared,
            pending_key_change: None,
            checkpointer,
        };
        match parsed {
            None => {
                if count != 0 {
                    return Err(corrupt(format!(
                        "{count} records are stored but no checkpoint covers them"
                    )));
                }
                writer.sign_empty()?;
            }
            Some((text, c)) => {
                writer.check_newest(&text, &c, count)?;
                writer.resume_interrupted_rotation(&text)?;
            }
        }
        writer.publish_keys();
        writer.publish_state(None);
        Ok(writer)
    }

    /// After a completed rotation the newest checkpoint always carries the
    /// active key's signature (the key-change checkpoint is signed by both).
    /// When it does not, the process stopped between publishing the new key
    /// and committing its `key_change` record: commit that record now, signed
    /// by the retired key that signed the newest checkpoint and by the new one.
    fn resume_interrupted_rotation(&mut self, newest: &str) -> Result<(), AuditError> {
        let n = note::parse(newest).map_err(|e| corrupt(e.to_string()))?;
        let signed_by = |doc: &KeyDocument| {
            doc.public_key()
                .ok()
                .and_then(|pk| n.verified_by(&self.origin, &pk).ok().flatten())
                .is_some()
        };
        if signed_by(&self.ring.active.doc) {
            return Ok(());
        }
        let Some(previous) = self
            .ring
            .docs
            .iter()
            .rev()
            .find(|d| d.kid != self.ring.active.doc.kid && signed_by(d))
            .cloned()
        else {
            return Ok(());
        };
        match self.ring.load(&previous) {
            Ok(old) => {
                tracing::warn!(
                    old_key_id = %previous.kid,
                    new_key_id = %self.ring.active.doc.kid,
                    "completing a key rotation that stopped before its key_change record"
                );
                self.pending_key_change = Some(old);
                self.finish_key_change()
            }
            Err(e) => {
                // Without the old private key there is nobody to co-sign;
                // the new key stays active and the log still verifies (every
                // checkpoint is signed by a published key).
                tracing::warn!(
                    error = %e,
                    "a key rotation stopped before its key_change record, and the \
                     retired key cannot be loaded to co-sign it"
                );
                Ok(())
            }
        }
    }

    /// The first checkpoint of a new log: size 0, fixes the origin.
    fn sign_empty(&mut self) -> Result<(), AuditError> {
        let body = Checkpoint {
            origin: self.origin.clone(),
            size: 0,
            root: empty_root(),
        }
        .body();
        let note = note::sign(
            &body,
            &[Signer {
                name: &self.origin,
                key: &self.ring.active.pair,
            }],
        );
        let at = now_at();
        sqlite::insert_checkpoint(&self.conn, 0, &note, &at)?;
        self.set_last_checkpoint(at);
        Ok(())
    }

    fn check_newest(&mut self, text: &str, c: &Checkpoint, count: u64) -> Result<(), AuditError> {
        let n = note::parse(text).map_err(|e| corrupt(e.to_string()))?;
        let mut signed = false;
        for doc in &self.ring.docs {
            let Ok(pk) = doc.public_key() else { continue };
            if n.verified_by(&self.origin, &pk)
                .map_err(|e| corrupt(format!("newest checkpoint ({}): {e}", c.size)))?
                .is_some()
            {
                signed = true;
            }
        }
        if !signed {
            return Err(corrupt(format!(
                "newest checkpoint ({}) is not signed by any published key",
                c.size
            )));
        }
        if count != c.size {
            return Err(corrupt(format!(
                "{count} records are stored but the newest checkpoint covers {}",
                c.size
            )));
        }
        let mut reader = SqlHashes::new(&self.conn);
        let frontier = Frontier::load(&mut reader, c.size)?;
        if frontier.root() != c.root {
            return Err(corrupt(format!(
                "the stored tree does not match the newest checkpoint (size {})",
                c.size
            )));
        }
        if c.size > 0 {
            let last = c.size - 1;
            let canonical = sqlite::record_by_leaf(&self.conn, last)?
                .ok_or_else(|| corrupt(format!("record at leaf {last} is missing")))?;
            if leaf_hash(&record_hash(&canonical)) != reader.subtree(0, last)? {
                return Err(corrupt(format!(
                    "record at leaf {last} does not match its stored hash"
                )));
            }
        }
        self.frontier = frontier;
        if let Some(row) = sqlite::newest_checkpoint(&self.conn)? {
            self.set_last_checkpoint(row.created_at);
        }
        Ok(())
    }

    fn set_last_checkpoint(&self, at: String) {
        if let Ok(mut h) = self.shared.health.lock() {
            h.last_checkpoint_at = Some(at);
        }
    }

    /// Publishes size and error state to the shared handle (every group).
    fn publish_state(&self, error: Option<&AuditError>) {
        if let Ok(mut h) = self.shared.health.lock() {
            h.size = self.frontier.size();
            h.failing = error.is_some();
            if let Some(e) = error {
                h.last_error = Some(e.to_string());
            }
        }
    }

    /// Publishes the key documents and the active key id; only opening and
    /// rotating change them.
    fn publish_keys(&self) {
        if let Ok(mut h) = self.shared.health.lock() {
            h.key_id.clone_from(&self.ring.active.doc.kid);
        }
        if let Ok(mut k) = self.shared.keys.write() {
            k.clone_from(&self.ring.docs);
        }
    }

    pub(crate) fn commit_batch(&mut self, batch: Vec<Pending>) {
        if self.pending_key_change.is_some() {
            // The key change goes in first: no record may be signed by the
            // new key alone before the checkpoint that links it to the old.
            if let Err(e) = self.finish_key_change() {
                self.shared.metrics.failures.inc();
                tracing::error!(error = %e, records = batch.len(), "audit group commit failed: pending key change");
                for p in batch {
                    let _ = p.reply.send(Err(e.clone()));
                }
                return;
            }
        }
        let started = Instant::now();
        let items: Vec<Item<'_>> = batch
            .iter()
            .map(|p| Item {
                id: p.record_id,
                canonical: &p.canonical,
                record_hash: p.record_hash,
                principal: p.principal.as_deref(),
                input: p.input.as_ref(),
            })
            .collect();
        let result = self.commit(&items, None);
        drop(items);
        let m = &self.shared.metrics;
        m.commit_seconds.observe(started.elapsed().as_secs_f64());
        match result {
            Ok((group, placed)) => {
                m.group_size.observe(batch.len() as f64);
                let ok = placed.iter().filter(|o| o.is_ok()).count();
                m.records.inc_by(ok as u64);
                self.publish_state(None);
                for (p, o) in batch.into_iter().zip(placed) {
                    let answer = o.map(|leaf| Answer::Committed {
                        group: group.clone(),
                        leaf,
                    });
                    let _ = p.reply.send(answer);
                }
            }
            Err(e) => {
                m.failures.inc();
                tracing::error!(error = %e, records = batch.len(), "audit group commit failed");
                self.publish_state(Some(&e));
                for p in batch {
                    let _ = p.reply.send(Err(e.clone()));
                }
            }
        }
    }

    /// One group commit. The outer error fails the whole group (nothing was
    /// written, in-memory state unchanged); inner errors fail one record.
    /// Receipts are not built here: each waiter builds its own from the
    /// returned [`Group`], on its own task, so the proofs' hashing and
    /// formatting spread over the runtime instead of queueing on this thread.
    fn commit(
        &mut self,
        items: &[Item<'_>],
        extra_signer: Option<&SigningKey>,
    ) -> Result<Committed, AuditError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let stored = sqlite::record_count(&tx)?;
        if stored != self.frontier.size() {
            return Err(corrupt(format!(
                "the log was changed by another writer: {stored} records stored, {} expected",
                self.frontier.size()
            )));
        }
        let mut next = self.frontier.clone();
        let mut rows: Vec<Vec<Hash>> = Vec::with_capacity(items.len());
        let mut placed: Vec<Result<u64, AuditError>> = Vec::with_capacity(items.len());
        {
            let mut append = sqlite::Appender::new(&tx)?;
            for it in items {
                let leaf = next.size();
                // The stored hashes go into the record's row, so they are
                // computed first, on a copy kept only if the insert succeeds
                // (the UNIQUE index refuses a duplicate id).
                let mut grown = next.clone();
                let hashes = grown.append(leaf_hash(&it.record_hash));
                match append.record(leaf, it.id, it.canonical, it.principal, &hashes, it.input) {
                    Ok(()) => next = grown,
                    Err(rusqlite::Error::SqliteFailure(e, _))
                        if e.code == ErrorCode::ConstraintViolation =>
                    {
                        placed.push(Err(AuditError::InvalidRecord(format!(
                            "record_id {} is already in the log",
                            it.id
                        ))));
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
                rows.push(hashes);
                placed.push(Ok(leaf));
            }
        }
        if rows.is_empty() {
            // Every record was refused; nothing to sign. `tx` rolls back.
            let group = Arc::new(Group {
                old: self.frontier.clone(),
                rows,
                size: self.frontier.size(),
                root: hash_string(&self.frontier.root()),
                key_id: self.ring.active.doc.kid.clone(),
            });
            return Ok((group, placed));
        }
        let old_size = self.frontier.size();
        let size = next.size();
        let root = next.root();
        // INVARIANT (sizes only grow, each checkpoint extends the previous
        // one): self-check before signing.
        if old_size > 0 {
            let mut hashes = BatchHashes {
                old: &self.frontier,
                rows: &rows,
            };
            let proof = consistency_proof(&mut hashes, old_size, size).map_err(corrupt)?;
            if !verify_consistency(old_size, size, &self.frontier.root(), &root, &proof) {
                return Err(corrupt(format!(
                    "tree of size {size} is not consistent with checkpoint {old_size}"
                )));
            }
        }
        let body = Checkpoint {
            origin: self.origin.clone(),
            size,
            root,
        }
        .body();
        let mut signers = vec![Signer {
            name: &self.origin,
            key: &self.ring.active.pair,
        }];
        if let Some(k) = extra_signer {
            signers.push(Signer {
                name: &self.origin,
                key: &k.pair,
            });
        }
        let note_text = note::sign(&body, &signers);
        let at = now_at();
        sqlite::insert_checkpoint(&tx, size, &note_text, &at)?;
        if self.shared.inject_failure.load(Ordering::SeqCst) {
            // Dropping `tx` rolls the group back.
            return Err(AuditError::WriteFailed("injected write failure".into()));
        }
        tx.commit()?;
        self.shared.metrics.checkpoints.inc();
        self.checkpointer.committed();
        let group = Arc::new(Group {
            old: std::mem::replace(&mut self.frontier, next),
            rows,
            size,
            root: hash_string(&root),
            key_id: self.ring.active.doc.kid.clone(),
        });
        self.set_last_checkpoint(at);
        Ok((group, placed))
    }

    /// Rotates the signing key: the new key becomes active, the old one is
    /// retired but stays published, a `key_change` record is appended, and
    /// its checkpoint is signed by both keys. If that commit fails, the new
    /// key is already published: the change stays pending and is committed
    /// before the next group (or at the next `open`).
    pub fn rotate(&mut self) -> Result<KeyDocument, AuditError> {
        if self.pending_key_change.is_some() {
            self.finish_key_change()?;
        }
        let old = self.ring.rotate(now_at())?;
        self.pending_key_change = Some(old);
        self.publish_keys();
        let new_doc = self.ring.active.doc.clone();
        self.finish_key_change()?;
        Ok(new_doc)
    }

    /// Commits the pending `key_change` record in a checkpoint signed by the
    /// new key and the retired one. On failure the change stays pending.
    fn finish_key_change(&mut self) -> Result<(), AuditError> {
        let Some(old) = self.pending_key_change.take() else {
            return Ok(());
        };
        let new_doc = self.ring.active.doc.clone();
        let mut rec = AuditRecord::new(RecordKind::KeyChange);
        rec.detail = Some(serde_json::json!({
            "old_key_id": old.doc.kid,
            "new_key_id": new_doc.kid,
            "verifier_key": new_doc.verifier_key,
        }));
        let canonical = match rec.canonical() {
            Ok(c) => c,
            Err(e) => {
                self.pending_key_change = Some(old);
                return Err(AuditError::InvalidRecord(e.to_string()));
            }
        };
        let item = Item {
            id: rec.record_id,
            canonical: &canonical,
            record_hash: record_hash(&canonical),
            principal: None,
            input: None,
        };
        let result = self
            .commit(&[item], Some(&old))
            .and_then(|(_, mut placed)| {
                placed
                    .pop()
                    .unwrap_or_else(|| Err(corrupt("key change was not committed")))
            });
        match result {
            Ok(_) => {
                self.shared.metrics.records.inc();
                self.publish_state(None);
                Ok(())
            }
            Err(e) => {
                self.pending_key_change = Some(old);
                self.publish_state(Some(&e));
                Err(e)
            }
        }
    }
}

impl super::line::Committer for Writer {
    fn commit_batch(&mut self, batch: Vec<Pending>) {
        Writer::commit_batch(self, batch);
    }

    fn rotate(&mut self) -> Result<KeyDocument, AuditError> {
        Writer::rotate(self)
    }
}

/// The benchmarks' committer: stores and signs nothing, and answers every
/// record with a receipt that proves nothing (see
/// [`AuditLog::noop_for_benchmarks`](super::AuditLog::noop_for_benchmarks)).
#[cfg(feature = "bench")]
#[derive(Default)]
pub(crate) struct Noop {
    size: u64,
}

#[cfg(feature = "bench")]
impl super::line::Committer for Noop {
    fn commit_batch(&mut self, batch: Vec<Pending>) {
        for p in batch {
            let _ = p.reply.send(Ok(Answer::Noop(Receipt {
                record_id: p.record_id,
                record_hash: hash_string(&p.record_hash),
                key_id: "noop".into(),
                merkle_root: hash_string(&[0; 32]),
                leaf_index: self.size,
                tree_size: self.size + 1,
                proof: Vec::new(),
            })));
            self.size += 1;
        }
    }

    fn rotate(&mut self) -> Result<KeyDocument, AuditError> {
        Err(AuditError::Unavailable("no-op audit log".into()))
    }
}
