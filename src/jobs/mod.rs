//! Durable batch jobs: `POST /v1/verify-claims-batch` and `GET /v2/jobs/{id}`
//! without the HTTP.
//!
//! A batch can hold thousands of verify requests, far too much work for one
//! HTTP request, so it becomes a job: stored at submit (in SQLite, or in the
//! shared PostgreSQL store when several replicas share one), run later by a
//! small pool of worker threads off the request path (a large batch must
//! never starve `/v2/authorize`), and polled by its id. Jobs, items and
//! results live in the database, so queued and running jobs resume after a
//! restart, continuing from their last stored result.
//!
//! This module knows neither HTTP nor the verification engine: an item is an
//! opaque JSON document and the caller injects the work as an [`ItemFn`].
//! Tenancy is by owner (the API key name): an owner sees only its own jobs
//! and idempotency keys; an admin (audit-scope) caller sees every job.
//!
//! Finished jobs are deleted [`JobsConfig::retention`] after they finish, by
//! a sweeper that runs at open and then periodically; an idempotency key is
//! remembered as long as its job.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::registry::Registry;
use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};

use crate::config::JobsConfig;
use crate::support::time::rfc3339_millis;
use crate::telemetry::health::{Component, Report, Status};

mod backend;
mod pg;
mod queue;
mod sqlite;
mod worker;

#[cfg(test)]
mod tests;

use backend::{Backend, Inserted, JobRow};
use sqlite::SqliteJobs;

/// The work for one item: its index in the job and the item document in,
/// the result document out. Runs on a worker thread; it may block and may
/// panic (the job then fails, the worker survives).
pub type ItemFn = Arc<dyn Fn(usize, &serde_json::Value) -> serde_json::Value + Send + Sync>;

/// Longest pause between two retention sweeps.
const SWEEP_EVERY_MAX: Duration = Duration::from_secs(60);
/// Shortest pause between two sweeps (only reached with a tiny retention).
const SWEEP_EVERY_MIN: Duration = Duration::from_millis(10);

#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    /// The idempotency key was used before with a different request body.
    #[error("idempotency key already used with a different request")]
    Conflict,
    /// A submit with the same idempotency key is still storing its items.
    #[error("a submit with this idempotency key is still being stored")]
    InProgress,
    #[error("job store: {0}")]
    Store(#[from] rusqlite::Error),
    /// The shared store (PostgreSQL) refused a statement.
    #[error("shared job store: {0}")]
    Shared(String),
    /// The shared store cannot be reached, or refused for a reason of the
    /// moment such as a deadlock (the API answers 503). `kind` is the
    /// `verdict_store_errors_total` kind of a failed statement; `None` for
    /// a connection the pool could not give, which the pool counts itself.
    #[error("shared job store unavailable: {message}")]
    Unavailable {
        kind: Option<&'static str>,
        message: String,
    },
    #[error("stored job data is corrupt: {0}")]
    Corrupt(String),
    /// After [`Jobs::shutdown`] no new job is accepted.
    #[error("batch jobs are shutting down")]
    ShuttingDown,
    #[error("batch job task failed: {0}")]
    Task(String),
    #[error("batch jobs must be opened inside a tokio runtime")]
    NoRuntime,
    #[error("cannot create the job store directory: {0}")]
    Io(std::io::Error),
    #[error("cannot start batch worker thread: {0}")]
    Spawn(std::io::Error),
}

/// A job's lifecycle: `queued → running → succeeded | failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Option<JobStatus> {
        Some(match s {
            "queued" => JobStatus::Queued,
            "running" => JobStatus::Running,
            "succeeded" => JobStatus::Succeeded,
            "failed" => JobStatus::Failed,
            _ => return None,
        })
    }
}

/// What a submit answers: `{job_id, status, items_total}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobSummary {
    pub job_id: String,
    pub status: JobStatus,
    pub items_total: u64,
}

/// The outcome of [`Jobs::submit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// A new job (HTTP 202).
    Created(JobSummary),
    /// The job an earlier submit with the same owner, idempotency key and
    /// request hash created, in its current status (HTTP 200).
    Existing(JobSummary),
}

impl Submitted {
    pub fn summary(&self) -> &JobSummary {
        match self {
            Submitted::Created(s) | Submitted::Existing(s) => s,
        }
    }
}

/// A window of results: indices `offset..offset + limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub offset: usize,
    pub limit: usize,
}

impl Page {
    /// Every result.
    pub const ALL: Page = Page {
        offset: 0,
        limit: usize::MAX,
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Progress {
    pub total: u64,
    pub done: u64,
}

/// What a poll answers (`GET /v2/jobs/{id}`, docs/openapi.yaml):
/// `{job_id, status, created_at, started_at?, finished_at?, progress:{total,done}, results?, error?}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobView {
    pub job_id: String,
    pub status: JobStatus,
    /// RFC 3339 UTC, millisecond precision.
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    pub progress: Progress,
    /// Only when succeeded: the requested page of `(index, result)` in
    /// index order. Serialised as result objects with `"index"` merged in
    /// (a non-object result becomes `{"index": i, "result": value}`).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_results"
    )]
    pub results: Option<Vec<(usize, serde_json::Value)>>,
    /// Only when failed: why, in words safe to show the client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Queue facts for `/health/detailed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct JobsHealth {
    pub queued: usize,
    pub running: usize,
    /// Age of the oldest queued job in whole seconds; `None` when empty.
    pub oldest_queued_age_s: Option<u64>,
}

/// Handle to the batch-job subsystem; cheap to clone.
#[derive(Clone)]
pub struct Jobs(Arc<dyn Backend>);

// === impl Jobs ===

impl Jobs {
    /// Opens the jobs in the SQLite file at `db_path`; see
    /// `SqliteJobs::open` in `jobs::sqlite`.
    pub fn open(db_path: &Path, cfg: &JobsConfig, work: ItemFn) -> Result<Jobs, JobsError> {
        SqliteJobs::open(db_path, cfg, work).map(|j| Jobs(Arc::new(j)))
    }

    /// Jobs on the shared store: submitted through any replica, visible
    /// and pollable through every one, run by the workers of all of them.
    /// Inside a Tokio runtime.
    pub fn open_shared(
        shared: crate::store::postgres::SharedStore,
        cfg: &JobsConfig,
        work: ItemFn,
    ) -> Result<Jobs, JobsError> {
        pg::PgJobs::open(shared, cfg.retention, cfg.workers, work).map(|j| Jobs(j))
    }

    /// Stores a job and queues it; with an `Idempotency-Key`, a repeat of
    /// the same request returns the job it created (a different request
    /// under the same key is `Conflict`).
    pub async fn submit(
        &self,
        owner: &str,
        idempotency_key: Option<&str>,
        request_hash: &str,
        items: Vec<serde_json::Value>,
    ) -> Result<Submitted, JobsError> {
        let inserted = self
            .0
            .submit(owner, idempotency_key, request_hash, items)
            .await?;
        Ok(match inserted {
            Inserted::New(job) => Submitted::Created(summary(&job)),
            Inserted::Existing(job) => Submitted::Existing(summary(&job)),
        })
    }

    /// A job as `owner` may see it (an admin sees every job), with a page
    /// of its results once it succeeded.
    pub async fn get(
        &self,
        job_id: &str,
        owner: &str,
        admin: bool,
        page: Page,
    ) -> Result<Option<JobView>, JobsError> {
        self.0.get(job_id, owner, admin, page).await
    }

    /// Queued and running jobs (of every replica, on the shared store).
    pub fn health(&self) -> JobsHealth {
        self.0.health()
    }

    /// Registers the jobs metrics.
    pub fn register_metrics(&self, registry: &mut Registry) {
        self.0.metrics().register(registry);
    }

    /// Runs one retention sweep now; returns how many jobs it deleted.
    pub async fn sweep(&self) -> Result<usize, JobsError> {
        self.0.sweep().await
    }

    /// Stops accepting jobs and waits for the workers to stop between
    /// items; unfinished jobs resume at the next start (or, on the shared
    /// store, on another replica).
    pub async fn shutdown(&self) {
        self.0.shutdown().await
    }
}

impl Component for Jobs {
    fn name(&self) -> &'static str {
        "jobs"
    }

    fn report(&self) -> Report {
        let h = self.health();
        let status = if self.0.is_stopping() {
            Status::Degraded
        } else {
            Status::Ok
        };
        Report::new(status)
            .fact("queued", h.queued)
            .fact("running", h.running)
            .fact("oldest_queued_age_s", h.oldest_queued_age_s)
            .fact("workers", self.0.workers())
            .fact("store", self.0.store_name())
    }
}

// === helpers ===

/// Waits (on the blocking pool) for worker threads to end, logging any
/// that panicked.
async fn join_workers(threads: Vec<std::thread::JoinHandle<()>>) {
    let joined = tokio::task::spawn_blocking(move || {
        for t in threads {
            if t.join().is_err() {
                tracing::error!("batch worker thread panicked");
            }
        }
    })
    .await;
    if let Err(e) = joined {
        tracing::error!(error = %e, "joining batch workers failed");
    }
}

/// The finish time before which a job is past its retention, in ms.
fn cutoff_ms(retention: Duration) -> i64 {
    now_ms().saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX))
}

/// Wall-clock milliseconds since the Unix epoch.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn summary(job: &JobRow) -> JobSummary {
    JobSummary {
        job_id: job.job_id.clone(),
        status: job.status,
        items_total: job.items_total,
    }
}

fn view(job: JobRow, results: Option<Vec<(usize, serde_json::Value)>>) -> JobView {
    JobView {
        job_id: job.job_id,
        status: job.status,
        created_at: rfc3339_millis(job.created_at_ms),
        started_at: job.started_at_ms.map(rfc3339_millis),
        finished_at: job.finished_at_ms.map(rfc3339_millis),
        progress: Progress {
            total: job.items_total,
            done: job.items_done,
        },
        results,
        error: job.error,
    }
}

fn serialize_results<S: Serializer>(
    results: &Option<Vec<(usize, serde_json::Value)>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let results = results.as_deref().unwrap_or_default();
    let mut seq = s.serialize_seq(Some(results.len()))?;
    for (index, value) in results {
        seq.serialize_element(&Indexed {
            index: *index,
            value,
        })?;
    }
    seq.end()
}

/// A result with its `"index"` merged in, without copying the result.
struct Indexed<'a> {
    index: usize,
    value: &'a serde_json::Value,
}

impl Serialize for Indexed<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self.value {
            serde_json::Value::Object(fields) => {
                let extra = usize::from(!fields.contains_key("index"));
                let mut map = s.serialize_map(Some(fields.len() + extra))?;
                map.serialize_entry("index", &self.index)?;
                for (k, v) in fields.iter().filter(|(k, _)| k.as_str() != "index") {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
            other => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("index", &self.index)?;
                map.serialize_entry("result", other)?;
                map.end()
            }
        }
    }
}
