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
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::registry::Registry;
use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};
use time::macros::format_description;
use time::OffsetDateTime;
use tokio::sync::watch;

use crate::config::JobsConfig;
use crate::telemetry::health::{Component, Report, Status};

mod pg;
mod queue;
mod store;
mod worker;

#[cfg(test)]
mod tests;

use queue::{Queue, Queued};
use store::{Durability, Inserted, JobRow, Store};
use worker::{JobsMetrics, Shared};

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
pub struct Jobs(Kind);

#[derive(Clone)]
enum Kind {
    /// The data dir's SQLite file: one replica.
    Sqlite(SqliteJobs),
    /// The shared store: every replica's jobs, run by every replica.
    Postgres(Arc<pg::PgJobs>),
}

/// Jobs in the data dir's SQLite file.
#[derive(Clone)]
struct SqliteJobs {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    retention: Duration,
    workers: usize,
    /// std `Mutex`: taken once, by shutdown, to move the handles out.
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    sweeper: Mutex<Option<tokio::task::JoinHandle<()>>>,
    stop_sweeper: watch::Sender<bool>,
}

// === impl Jobs ===

impl Jobs {
    /// Opens the jobs in the SQLite file at `db_path`; see
    /// [`SqliteJobs::open`].
    pub fn open(db_path: &Path, cfg: &JobsConfig, work: ItemFn) -> Result<Jobs, JobsError> {
        SqliteJobs::open(db_path, cfg, work).map(|j| Jobs(Kind::Sqlite(j)))
    }

    /// Jobs on the shared store: submitted through any replica, visible
    /// and pollable through every one, run by the workers of all of them.
    /// Inside a Tokio runtime.
    pub fn open_shared(
        shared: crate::store::postgres::Shared,
        cfg: &JobsConfig,
        work: ItemFn,
    ) -> Result<Jobs, JobsError> {
        pg::PgJobs::open(shared, cfg.retention, cfg.workers, work).map(|j| Jobs(Kind::Postgres(j)))
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
        let inserted = match &self.0 {
            Kind::Sqlite(j) => {
                j.submit(owner, idempotency_key, request_hash, items)
                    .await?
            }
            Kind::Postgres(j) => {
                j.submit(owner, idempotency_key, request_hash, items)
                    .await?
            }
        };
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
        match &self.0 {
            Kind::Sqlite(j) => j.get(job_id, owner, admin, page).await,
            Kind::Postgres(j) => j.get(job_id, owner, admin, page).await,
        }
    }

    /// Queued and running jobs (of every replica, on the shared store).
    pub fn health(&self) -> JobsHealth {
        match &self.0 {
            Kind::Sqlite(j) => j.health(),
            Kind::Postgres(j) => j.health(),
        }
    }

    /// Registers the jobs metrics.
    pub fn register_metrics(&self, registry: &mut Registry) {
        let m = match &self.0 {
            Kind::Sqlite(j) => &j.inner.shared.metrics,
            Kind::Postgres(j) => &j.metrics,
        };
        m.register(registry);
    }

    /// Runs one retention sweep now; returns how many jobs it deleted.
    pub async fn sweep(&self) -> Result<usize, JobsError> {
        match &self.0 {
            Kind::Sqlite(j) => j.sweep().await,
            Kind::Postgres(j) => j.sweep().await,
        }
    }

    /// Stops accepting jobs and waits for the workers to stop between
    /// items; unfinished jobs resume at the next start (or, on the shared
    /// store, on another replica).
    pub async fn shutdown(&self) {
        match &self.0 {
            Kind::Sqlite(j) => j.shutdown().await,
            Kind::Postgres(j) => j.shutdown().await,
        }
    }
}

impl SqliteJobs {
    /// Opens or creates the `jobs_*` tables in the SQLite file at `db_path`
    /// (shared with other subsystems) in WAL mode, deletes expired jobs,
    /// queues every queued and running job again (a running one continues
    /// after its last stored result), and starts `cfg.workers` worker threads
    /// plus the retention sweeper.
    ///
    /// Must be called inside a Tokio runtime. It does its start-up IO
    /// synchronously, once, before the server accepts requests.
    fn open(db_path: &Path, cfg: &JobsConfig, work: ItemFn) -> Result<SqliteJobs, JobsError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| JobsError::NoRuntime)?;
        let db = Store::open(db_path)?;
        let swept = db.with_conn(|c| store::sweep(c, cutoff_ms(cfg.retention)))?;
        if swept > 0 {
            tracing::info!(jobs = swept, "expired batch jobs deleted");
        }
        let metrics = JobsMetrics::new();
        let queue = Queue::new(metrics.queue_depth.clone(), metrics.running.clone());
        let unfinished = db.with_conn(|c| store::unfinished_jobs(c))?;
        if !unfinished.is_empty() {
            tracing::info!(jobs = unfinished.len(), "resuming batch jobs");
        }
        for job in &unfinished {
            queue.push(Queued {
                seq: job.seq,
                created_at_ms: job.created_at_ms,
            });
        }
        let workers = cfg.workers.max(1);
        let conns = (0..workers)
            .map(|_| db.connect(Durability::Normal))
            .collect::<Result<Vec<_>, _>>()?;
        let shared = Arc::new(Shared {
            store: db,
            queue,
            work,
            metrics,
        });
        let mut threads = Vec::with_capacity(workers);
        for (i, conn) in conns.into_iter().enumerate() {
            let s = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("verdict-jobs-{i}"))
                .spawn(move || worker::run(s, conn));
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    shared.queue.stop();
                    return Err(JobsError::Spawn(e));
                }
            }
        }
        let (stop_sweeper, stopped) = watch::channel(false);
        let sweeper = runtime.spawn(sweep_loop(Arc::clone(&shared), cfg.retention, stopped));
        Ok(SqliteJobs {
            inner: Arc::new(Inner {
                shared,
                retention: cfg.retention,
                workers,
                threads: Mutex::new(threads),
                sweeper: Mutex::new(Some(sweeper)),
                stop_sweeper,
            }),
        })
    }

    /// Stores a new job, or finds the one an earlier submit made.
    ///
    /// `owner` is the API key name. With an `idempotency_key`, the same
    /// owner and key with the same `request_hash` answer
    /// [`Submitted::Existing`], and with a different hash
    /// [`JobsError::Conflict`]; keys of different owners never meet.
    /// A replay while the first submit is still storing its items is
    /// [`JobsError::InProgress`]. Otherwise the items are stored (in short
    /// transactions, see `store::insert_job`) and the job is queued
    /// ([`Submitted::Created`]).
    pub async fn submit(
        &self,
        owner: &str,
        idempotency_key: Option<&str>,
        request_hash: &str,
        items: Vec<serde_json::Value>,
    ) -> Result<Inserted, JobsError> {
        let shared = &self.inner.shared;
        if shared.queue.is_stopping() {
            return Err(JobsError::ShuttingDown);
        }
        let owner = owner.to_string();
        let key = idempotency_key.map(str::to_string);
        let hash = request_hash.to_string();
        let inserted = self
            .blocking(move |shared| {
                let items: Vec<String> = items.iter().map(|v| v.to_string()).collect();
                shared.store.with_conn(|c| {
                    store::insert_job(c, &owner, key.as_deref(), &hash, &items, now_ms())
                })
            })
            .await?;
        if let Inserted::New(job) = &inserted {
            self.inner.shared.queue.push(Queued {
                seq: job.seq,
                created_at_ms: job.created_at_ms,
            });
        }
        Ok(inserted)
    }

    /// The job as `owner` may see it, or `None` for an unknown id and for
    /// another owner's job alike (both are a 404). `admin` sees every job.
    /// Results come only with `succeeded`, limited to `page`.
    pub async fn get(
        &self,
        job_id: &str,
        owner: &str,
        admin: bool,
        page: Page,
    ) -> Result<Option<JobView>, JobsError> {
        let job_id = job_id.to_string();
        let owner = owner.to_string();
        self.blocking(move |shared| {
            shared.store.with_conn(|c| {
                // One read transaction: the row and its results are one
                // snapshot even if the sweeper runs in between.
                let tx = c.transaction()?;
                let Some(job) = store::job_by_id(&tx, &job_id)? else {
                    return Ok(None);
                };
                if !admin && job.owner != owner {
                    return Ok(None);
                }
                let results = if job.status == JobStatus::Succeeded {
                    let rows = store::results_page(&tx, job.seq, page.offset, page.limit)?;
                    let mut out = Vec::with_capacity(rows.len());
                    for (idx, text) in rows {
                        let value = serde_json::from_str(&text).map_err(|e| {
                            JobsError::Corrupt(format!("job {job_id} result {idx}: {e}"))
                        })?;
                        out.push((idx, value));
                    }
                    Some(out)
                } else {
                    None
                };
                tx.commit()?;
                Ok(Some(view(job, results)))
            })
        })
        .await
    }

    /// Queue depth and age, from memory (no IO).
    pub fn health(&self) -> JobsHealth {
        let (queued, running, oldest) = self.inner.shared.queue.snapshot();
        JobsHealth {
            queued,
            running,
            oldest_queued_age_s: oldest
                .map(|created| (now_ms().saturating_sub(created).max(0) / 1000) as u64),
        }
    }

    /// Deletes jobs finished more than the retention ago now, instead of
    /// waiting for the sweeper. Returns how many went.
    pub async fn sweep(&self) -> Result<usize, JobsError> {
        let retention = self.inner.retention;
        self.blocking(move |shared| sweep_once(shared, retention))
            .await
    }

    /// Stops the workers between two items (the current item finishes and
    /// its result is written) and the sweeper, and returns once the threads
    /// have stopped. Unfinished jobs stay stored and resume at the next
    /// [`Jobs::open`]. Polls still work afterwards; submits do not.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.shared.queue.stop();
        let _ = inner.stop_sweeper.send(true);
        let threads =
            std::mem::take(&mut *inner.threads.lock().unwrap_or_else(PoisonError::into_inner));
        let sweeper = inner
            .sweeper
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        join_workers(threads).await;
        if let Some(s) = sweeper {
            let _ = s.await;
        }
    }

    /// Runs `f` on the blocking pool, never on the runtime.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Shared) -> Result<T, JobsError> + Send + 'static,
    ) -> Result<T, JobsError> {
        let shared = Arc::clone(&self.inner.shared);
        tokio::task::spawn_blocking(move || f(&shared))
            .await
            .map_err(|e| JobsError::Task(e.to_string()))?
    }
}

impl Component for Jobs {
    fn name(&self) -> &'static str {
        "jobs"
    }

    fn report(&self) -> Report {
        let h = self.health();
        let (stopping, workers, store) = match &self.0 {
            Kind::Sqlite(j) => (
                j.inner.shared.queue.is_stopping(),
                j.inner.workers,
                "sqlite",
            ),
            Kind::Postgres(j) => (j.is_stopping(), j.workers, "postgres"),
        };
        let status = if stopping {
            Status::Degraded
        } else {
            Status::Ok
        };
        Report::new(status)
            .fact("queued", h.queued)
            .fact("running", h.running)
            .fact("oldest_queued_age_s", h.oldest_queued_age_s)
            .fact("workers", workers)
            .fact("store", store)
    }
}

impl Drop for Inner {
    /// A handle dropped without [`Jobs::shutdown`] still stops the workers
    /// (after their current item) and the sweeper; it just does not wait.
    fn drop(&mut self) {
        self.shared.queue.stop();
        let _ = self.stop_sweeper.send(true);
    }
}

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

// === retention ===

async fn sweep_loop(shared: Arc<Shared>, retention: Duration, mut stop: watch::Receiver<bool>) {
    let every = (retention / 2).clamp(SWEEP_EVERY_MIN, SWEEP_EVERY_MAX);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            // A stop signal, or the handle is gone.
            _ = stop.changed() => return,
        }
        let s = Arc::clone(&shared);
        match tokio::task::spawn_blocking(move || sweep_once(&s, retention)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => tracing::info!(jobs = n, "expired batch jobs deleted"),
            Ok(Err(e)) => tracing::warn!(error = %e, "batch job retention sweep failed"),
            Err(e) => tracing::warn!(error = %e, "batch job retention sweep panicked"),
        }
    }
}

fn sweep_once(shared: &Shared, retention: Duration) -> Result<usize, JobsError> {
    shared
        .store
        .with_conn(|c| store::sweep(c, cutoff_ms(retention)))
}

fn cutoff_ms(retention: Duration) -> i64 {
    now_ms().saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX))
}

// === helpers ===

/// Wall-clock milliseconds since the Unix epoch.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// `2026-11-22T21:26:13.123Z`.
fn rfc3339(ms: i64) -> String {
    let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    t.format(format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    ))
    .unwrap_or_default()
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
        created_at: rfc3339(job.created_at_ms),
        started_at: job.started_at_ms.map(rfc3339),
        finished_at: job.finished_at_ms.map(rfc3339),
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
