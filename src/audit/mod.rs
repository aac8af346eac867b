//! The tamper-evident audit log: every decision is written here, durably and
//! covered by a signed checkpoint, before it is returned.
//!
//! The log is one append-only RFC 6962 Merkle tree over the records' hashes,
//! with C2SP checkpoints signed with Ed25519, stored in SQLite. Anyone holding
//! a record, its proof and our public key can check it offline, and
//! `verify_log` re-checks a whole log. This module is the async-facing handle;
//! a commit is led by the appending caller when the log is quiet, and taken
//! by the committer thread under load (see `line`), always through the one
//! `writer`.
//!
//! # Use
//! - Startup: [`AuditLog::open`]`(data_dir/verdict.db, data_dir, &cfg.audit)`;
//!   an `Err` is fatal (a corrupt log or a lost key must stop the server).
//! - Each decision, review resolution, policy reload, key change:
//!   [`AuditLog::append`]; only answer the caller after it returns `Ok`. Its
//!   [`Receipt`] is the verbose response's `audit` object. `WriteFailed`,
//!   `Unavailable`, `Storage`, `Corrupt` and `RolledBack` mean 503 / fail
//!   closed.
//! - `GET /v2/audit/{id}` (scope `audit`, which sees every record):
//!   [`AuditLog::record`], serve `canonical` as is; `GET /v2/audit/{id}/proof`:
//!   [`AuditLog::proof`] then [`ProofDocument::to_json`];
//!   `GET /v2/audit/keys/{kid}`: [`AuditLog::key`].
//! - Shutdown: [`AuditLog::shutdown`] after the listeners have drained.
//! - CLI: [`verify_log`], [`verify_proof`], [`rotate_key`] (server stopped).

pub mod canonical;
mod checkpointer;
pub mod cosign;
pub mod export;
pub mod inputs;
pub mod keys;
mod line;
pub mod merkle;
pub mod note;
pub mod record;
pub mod redaction;
pub mod sqlite;
pub mod verify;
mod witnessing;
mod writer;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, Semaphore};
use uuid::Uuid;

use crate::config::AuditConfig;

pub use inputs::CapturedInput;
pub use keys::{KeyDocument, KeyStatus};
pub use merkle::Position;
pub use record::{redact, AuditRecord, RecordKind, SCHEMA};
pub use redaction::{RedactionKey, RedactionKeyError};
pub use verify::{
    verify_consistency_documents, verify_log, verify_proof, verify_published_chain, verify_record,
    ChainSummary, ConsistencyDocument, ProofDocument, PublishedCheckpoint, VerifyError,
    VerifyReport,
};

use line::{Line, Role};
pub use witnessing::{ask_witnesses, WitnessCheck, WitnessFailure, WitnessStatus};
use writer::{Pending, Writer};

/// Why the audit log could not do what was asked. Cloneable so that one
/// failed group commit can answer every waiter.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuditError {
    #[error("audit storage: {0}")]
    Storage(String),
    #[error("audit key {path}: {message}")]
    Key { path: String, message: String },
    #[error("audit log is corrupt: {0}")]
    Corrupt(String),
    #[error("invalid audit record: {0}")]
    InvalidRecord(String),
    #[error("audit log unavailable: {0}")]
    Unavailable(String),
    #[error("audit write failed: {0}")]
    WriteFailed(String),
    #[error("audit config: {0}")]
    Config(String),
    /// A witness has seen records the log no longer holds (it cosigned a
    /// larger tree, or one the log does not extend): start-up is refused,
    /// and a running log halts.
    #[error("{0}")]
    RolledBack(String),
}

impl From<rusqlite::Error> for AuditError {
    fn from(e: rusqlite::Error) -> Self {
        AuditError::Storage(e.to_string())
    }
}

/// One step of an inclusion proof: a sibling hash and the side it sits on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProofStep {
    /// `sha256:<hex>`.
    pub hash: String,
    pub position: Position,
}

impl ProofStep {
    /// The wire form of an inclusion proof from [`merkle::inclusion_proof`].
    fn path(proof: Vec<(merkle::Hash, Position)>) -> Vec<ProofStep> {
        proof
            .into_iter()
            .map(|(h, position)| ProofStep {
                hash: record::hash_string(&h),
                position,
            })
            .collect()
    }
}

/// What `append` returns once the record is durable and covered by a signed
/// checkpoint: the verbose response's `audit` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    #[serde(with = "crate::audit::record::uuid_text")]
    pub record_id: Uuid,
    /// `sha256:<hex>` of the canonical record bytes.
    pub record_hash: String,
    pub key_id: String,
    /// `sha256:<hex>` root of the first checkpoint covering the record.
    pub merkle_root: String,
    pub leaf_index: u64,
    pub tree_size: u64,
    pub proof: Vec<ProofStep>,
}

/// A stored record for `GET /v2/audit/{id}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    /// The canonical JSON, exactly the hashed bytes: serve it as is.
    pub canonical: String,
    /// The `principal` inside `canonical` (so covered by the record hash),
    /// never the unhashed side column; `None` when the record has none.
    pub principal: Option<String>,
}

/// The audit component of `/health/detailed`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AuditHealth {
    pub size: u64,
    pub last_checkpoint_at: Option<String>,
    pub key_id: String,
    /// True while the last group commit failed, and for good once a
    /// witness showed a rollback ([`AuditLog::halted`]).
    pub failing: bool,
    pub last_error: Option<String>,
    /// Each configured witness: the size it cosigned and the lag behind.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub witnesses: Vec<WitnessStatus>,
}

#[derive(Clone)]
struct Metrics {
    group_size: Histogram,
    commit_seconds: Histogram,
    records: Counter,
    failures: Counter,
    witness_submissions: Family<witnessing::SubmissionLabels, Counter>,
    /// Records the log holds beyond what each witness cosigned.
    witness_lag: Family<witnessing::WitnessLabels, prometheus_client::metrics::gauge::Gauge>,
    checkpoints: Counter,
    /// Records of audit-mode decisions (`enforced: false`), by what was
    /// answered and what would have been.
    unenforced: Family<UnenforcedLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct UnenforcedLabels {
    decision: String,
    would_decide: String,
}

impl Metrics {
    fn new() -> Metrics {
        Metrics {
            group_size: Histogram::new(exponential_buckets(1.0, 2.0, 11)),
            commit_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 14)),
            records: Counter::default(),
            failures: Counter::default(),
            witness_submissions: Family::default(),
            witness_lag: Family::default(),
            checkpoints: Counter::default(),
            unenforced: Family::default(),
        }
    }
}

/// State the writer publishes and the handle reads.
struct Published {
    /// std Mutex: held for a field copy, never across an await.
    health: Mutex<AuditHealth>,
    keys: RwLock<Vec<KeyDocument>>,
    inject_failure: AtomicBool,
    metrics: Metrics,
    witnesses: Mutex<Vec<WitnessStatus>>,
    /// Set once a witness showed a rollback, with the reason; from then on
    /// every append fails, until the process restarts.
    halted: std::sync::OnceLock<String>,
}

struct Inner {
    /// The queue and whoever commits it.
    line: Arc<Line>,
    /// Bounds the records queued for the writer; callers wait here (async)
    /// when the writer falls behind.
    slots: Arc<Semaphore>,
    shared: Arc<Published>,
    db_path: PathBuf,
    /// Idle read connections, reused across `spawn_blocking` reads.
    readers: Mutex<Vec<Connection>>,
    /// The committer thread, which takes the groups that queue during a
    /// commit.
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Turns true on shutdown; background tasks (witnessing) stop.
    stop: tokio::sync::watch::Sender<bool>,
}

impl Drop for Inner {
    /// A log dropped without [`AuditLog::shutdown`] (tests, a start-up that
    /// failed later) still lets its committer thread end.
    fn drop(&mut self) {
        self.line.release();
    }
}

/// Handle to the audit log. Cheap to clone; all clones share one writer.
#[derive(Clone)]
pub struct AuditLog {
    inner: Arc<Inner>,
}

impl Published {
    /// A copy of every published key, active and retired.
    fn key_list(&self) -> Result<Vec<KeyDocument>, AuditError> {
        self.keys
            .read()
            .map(|k| k.clone())
            .map_err(|_| AuditError::Unavailable("key list poisoned".into()))
    }
}

fn new_shared() -> Arc<Published> {
    Arc::new(Published {
        health: Mutex::new(AuditHealth::default()),
        keys: RwLock::new(Vec::new()),
        inject_failure: AtomicBool::new(false),
        metrics: Metrics::new(),
        witnesses: Mutex::new(Vec::new()),
        halted: std::sync::OnceLock::new(),
    })
}

impl AuditLog {
    /// Opens (or creates) the log in `db_path` with keys in `key_dir`,
    /// generating the first key if there is none. Fails if the newest
    /// checkpoint is not signed by a published key or does not match the
    /// stored tree. Call at startup, outside request handling.
    pub fn open(db_path: &Path, key_dir: &Path, cfg: &AuditConfig) -> Result<AuditLog, AuditError> {
        let shared = new_shared();
        let writer = Writer::open(db_path, key_dir, cfg, shared.clone())?;
        let (line, thread) = Line::start(Box::new(writer), cfg.max_batch, cfg.max_wait)?;
        let capacity = cfg.max_batch.saturating_mul(4).clamp(1024, 1 << 20);
        Ok(AuditLog {
            inner: Arc::new(Inner {
                line,
                slots: Arc::new(Semaphore::new(capacity)),
                shared,
                db_path: db_path.to_path_buf(),
                readers: Mutex::new(Vec::new()),
                thread: Mutex::new(Some(thread)),
                stop: tokio::sync::watch::channel(false).0,
            }),
        })
    }

    /// Benchmarks only: a log that stores nothing and signs nothing. It
    /// answers each append at once, through the same queue and reply channel
    /// as the real writer, with a receipt that proves nothing (key `noop`,
    /// empty proof). It exists so that `examples/audit_e2e_bench.rs` can
    /// measure what the durable log costs; it is deliberately not reachable
    /// from the config file or the CLI, and must never serve real traffic.
    /// Built only with the `bench` feature.
    #[cfg(feature = "bench")]
    pub fn noop_for_benchmarks() -> Result<AuditLog, AuditError> {
        let shared = new_shared();
        if let Ok(mut h) = shared.health.lock() {
            h.key_id = "noop".into();
        }
        let noop = Box::new(writer::Noop::default());
        let (line, thread) = Line::start(noop, 1024, std::time::Duration::ZERO)?;
        Ok(AuditLog {
            inner: Arc::new(Inner {
                line,
                slots: Arc::new(Semaphore::new(1 << 16)),
                shared,
                db_path: PathBuf::from("/nonexistent/verdict-noop-audit.db"),
                readers: Mutex::new(Vec::new()),
                thread: Mutex::new(Some(thread)),
                stop: tokio::sync::watch::channel(false).0,
            }),
        })
    }

    /// Appends a record. Resolves only once the record is durable and covered
    /// by a signed checkpoint; the receipt proves inclusion in that checkpoint.
    pub async fn append(&self, record: AuditRecord) -> Result<Receipt, AuditError> {
        self.append_with_input(record, None).await
    }

    /// [`AuditLog::append`], storing a decision's captured input (whose hash
    /// the record's `input_hash` states) in the same transaction.
    pub async fn append_with_input(
        &self,
        record: AuditRecord,
        input: Option<CapturedInput>,
    ) -> Result<Receipt, AuditError> {
        if let Some(reason) = self.halted() {
            return Err(AuditError::RolledBack(reason));
        }
        // Canonicalize and hash here, on the caller's task, so this work
        // spreads over the runtime's threads instead of the one writer.
        let canonical = record
            .canonical()
            .map_err(|e| AuditError::InvalidRecord(e.to_string()))?;
        let unenforced = match (&record.enforced, &record.decision, &record.would_decide) {
            (Some(false), Some(d), Some(w)) => Some(UnenforcedLabels {
                decision: d.clone(),
                would_decide: w.clone(),
            }),
            _ => None,
        };
        let record_hash = record::record_hash(&canonical);
        let permit = self
            .inner
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| AuditError::Unavailable("audit log is closed".into()))?;
        let (reply, answer) = oneshot::channel();
        let role = self.inner.line.enqueue(Pending {
            record_id: record.record_id,
            canonical,
            record_hash,
            principal: record.principal,
            input,
            enqueued: Instant::now(),
            reply,
            _permit: permit,
        })?;
        if let Role::Leader(batch) = role {
            self.lead(batch).await?;
        }
        // The record is durable here. Building the receipt from the group's
        // in-memory hashes fails only on a bug in the tree math; the caller
        // then gets an error and withholds the decision (fail closed), while
        // the log keeps the record, as after a crash between commit and reply.
        let receipt = answer
            .await
            .map_err(|_| AuditError::Unavailable("audit writer has stopped".into()))??
            .receipt(record.record_id, &record_hash)?;
        if let Some(labels) = unenforced {
            self.inner
                .shared
                .metrics
                .unenforced
                .get_or_create(&labels)
                .inc();
        }
        Ok(receipt)
    }

    /// Commits a leader's batch: in place on a multi-threaded runtime (the
    /// worker hands its other tasks on and blocks for the commit), on the
    /// blocking pool on a single-threaded one, where blocking in place is
    /// not allowed.
    async fn lead(&self, batch: Vec<Pending>) -> Result<(), AuditError> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let line = self.inner.line.clone();
        let in_place =
            Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
        if in_place {
            tokio::task::block_in_place(|| line.lead(batch));
            Ok(())
        } else {
            tokio::task::spawn_blocking(move || line.lead(batch))
                .await
                .map_err(|e| AuditError::Unavailable(format!("audit commit failed: {e}")))
        }
    }

    /// Runs `f` with a read connection on the blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection, &Published) -> Result<T, AuditError> + Send + 'static,
    ) -> Result<T, AuditError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let pooled = inner.readers.lock().ok().and_then(|mut v| v.pop());
            let conn = match pooled {
                Some(c) => c,
                None => sqlite::open_reader(&inner.db_path)?,
            };
            let out = f(&conn, &inner.shared);
            if let Ok(mut v) = inner.readers.lock() {
                if v.len() < 8 {
                    v.push(conn);
                }
            }
            out
        })
        .await
        .map_err(|e| AuditError::Unavailable(format!("read task failed: {e}")))?
    }

    /// The stored record with this id.
    pub async fn record(&self, id: Uuid) -> Result<Option<StoredRecord>, AuditError> {
        self.read(move |conn, _| {
            Ok(sqlite::record_by_id(conn, id)?.map(|r| StoredRecord {
                principal: record::principal_of(&r.canonical),
                canonical: r.canonical,
            }))
        })
        .await
    }

    /// The proof of a record against its first covering checkpoint, verified
    /// before it is returned. Serve [`ProofDocument::to_json`].
    pub async fn proof(&self, id: Uuid) -> Result<Option<ProofDocument>, AuditError> {
        self.read(move |conn, shared| verify::build_proof(conn, &shared.key_list()?, id))
            .await
    }

    /// Every published key, active and retired.
    pub fn keys(&self) -> Vec<KeyDocument> {
        self.inner
            .shared
            .keys
            .read()
            .map(|k| k.clone())
            .unwrap_or_default()
    }

    /// A published key (active or retired) by its RFC 7638 thumbprint.
    pub fn key(&self, key_id: &str) -> Option<KeyDocument> {
        self.inner
            .shared
            .keys
            .read()
            .ok()?
            .iter()
            .find(|k| k.kid == key_id)
            .cloned()
    }

    /// Size, last checkpoint, key and failure state.
    pub fn health(&self) -> AuditHealth {
        let mut h = self
            .inner
            .shared
            .health
            .lock()
            .map(|h| h.clone())
            .unwrap_or_default();
        if !self.writer_running() {
            h.failing = true;
            h.last_error = Some("audit writer is not running".into());
        }
        if let Some(reason) = self.halted() {
            h.failing = true;
            h.last_error = Some(reason);
        }
        if let Ok(w) = self.inner.shared.witnesses.lock() {
            h.witnesses = w
                .iter()
                .map(|w| WitnessStatus {
                    lag: w.cosigned_size.map(|c| h.size.saturating_sub(c)),
                    ..w.clone()
                })
                .collect();
        }
        h
    }

    /// Why the log stopped appending for good, if a witness showed that it
    /// rolled back (see `witnessing`). Only a restart clears it, and the
    /// restart is refused while the witness still holds the larger or
    /// other tree.
    pub fn halted(&self) -> Option<String> {
        self.inner.shared.halted.get().cloned()
    }

    /// Whether the log still commits: its committer thread runs and no
    /// commit has panicked. Once it has stopped (after
    /// [`AuditLog::shutdown`], or a panic) every append fails until the
    /// process restarts: unlike a failed commit, which the next group
    /// retries, nothing brings it back.
    pub fn writer_running(&self) -> bool {
        self.inner.line.accepting()
            && self
                .inner
                .thread
                .lock()
                .map(|t| t.as_ref().is_some_and(|t| !t.is_finished()))
                .unwrap_or(false)
    }

    /// Registers `verdict_audit_group_size`, `verdict_audit_commit_seconds`,
    /// `verdict_audit_records_total` and `verdict_audit_commit_failures_total`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        let m = &self.inner.shared.metrics;
        registry.register(
            "verdict_audit_group_size",
            "Records per audit group commit",
            m.group_size.clone(),
        );
        registry.register(
            "verdict_audit_commit_seconds",
            "Audit group commit latency, including signing the checkpoint",
            m.commit_seconds.clone(),
        );
        registry.register(
            "verdict_audit_records",
            "Audit records durably appended",
            m.records.clone(),
        );
        registry.register(
            "verdict_audit_commit_failures",
            "Audit group commits that failed and were rolled back",
            m.failures.clone(),
        );
        registry.register(
            "verdict_audit_checkpoints_signed",
            "Checkpoints signed (one per group commit)",
            m.checkpoints.clone(),
        );
        registry.register(
            "verdict_audit_unenforced_decisions",
            "Audit-mode decisions recorded, by the decision answered and the one that would have been enforced",
            m.unenforced.clone(),
        );
        registry.register(
            "verdict_audit_witness_lag",
            "Records the log holds beyond the tree each witness cosigned last",
            m.witness_lag.clone(),
        );
        registry.register(
            "verdict_audit_witness_submissions",
            "Checkpoints submitted to witnesses, by witness and outcome (ok, failed, rolled_back, forked)",
            m.witness_submissions.clone(),
        );
    }

    /// Rotates the signing key while running (see [`rotate_key`]).
    pub async fn rotate_key(&self) -> Result<KeyDocument, AuditError> {
        let line = self.inner.line.clone();
        tokio::task::spawn_blocking(move || line.rotate())
            .await
            .map_err(|e| AuditError::Unavailable(format!("key rotation failed: {e}")))?
    }

    /// Commits every queued record, then stops the writer. Later appends
    /// fail with `Unavailable`. Safe to call more than once.
    pub async fn shutdown(&self) {
        self.inner.stop.send_replace(true);
        let line = self.inner.line.clone();
        let _ = tokio::task::spawn_blocking(move || line.close()).await;
        let handle = self.inner.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            let _ = tokio::task::spawn_blocking(move || h.join()).await;
        }
    }

    /// Test hook: while on, every group commit fails and is rolled back.
    #[doc(hidden)]
    pub fn inject_write_failure(&self, on: bool) {
        self.inner.shared.inject_failure.store(on, Ordering::SeqCst);
    }
}

/// Offline key rotation for `verdict audit rotate-key`; the server must not be
/// running on the same database. Returns the new active key.
pub fn rotate_key(
    db_path: &Path,
    key_dir: &Path,
    cfg: &AuditConfig,
) -> Result<KeyDocument, AuditError> {
    let mut writer = Writer::open(db_path, key_dir, cfg, new_shared())?;
    writer.rotate()
}
