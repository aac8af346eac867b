//! Batch jobs in the data dir's SQLite file, the zero-config backend: the
//! rows in [`tables`], an in-memory queue (`super::queue`) in front of a
//! pool of worker threads (`super::worker`), and a retention sweeper.
//! One replica owns the file, so the queue can live in memory and is
//! rebuilt from the unfinished rows at open.

mod tables;
pub(super) use tables::*;

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use super::backend::{Backend, BoxFuture, Inserted};
use super::queue::{Queue, Queued};
use super::worker::{self, JobsMetrics, JobsState};
use super::{
    cutoff_ms, join_workers, now_ms, view, ItemFn, JobStatus, JobView, JobsError, JobsHealth, Page,
    SWEEP_EVERY_MAX, SWEEP_EVERY_MIN,
};
use crate::config::JobsConfig;

/// Jobs in the data dir's SQLite file.
pub(super) struct SqliteJobs {
    shared: Arc<JobsState>,
    retention: Duration,
    workers: usize,
    /// std `Mutex`: taken once, by shutdown, to move the handles out.
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    sweeper: Mutex<Option<tokio::task::JoinHandle<()>>>,
    stop_sweeper: watch::Sender<bool>,
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
    pub(super) fn open(
        db_path: &Path,
        cfg: &JobsConfig,
        work: ItemFn,
    ) -> Result<SqliteJobs, JobsError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| JobsError::NoRuntime)?;
        let db = Store::open(db_path)?;
        let swept = db.with_conn(|c| tables::sweep(c, cutoff_ms(cfg.retention)))?;
        if swept > 0 {
            tracing::info!(jobs = swept, "expired batch jobs deleted");
        }
        let metrics = JobsMetrics::new();
        let queue = Queue::new(metrics.queue_depth.clone(), metrics.running.clone());
        let unfinished = db.with_conn(|c| tables::unfinished_jobs(c))?;
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
        let shared = Arc::new(JobsState {
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
            shared,
            retention: cfg.retention,
            workers,
            threads: Mutex::new(threads),
            sweeper: Mutex::new(Some(sweeper)),
            stop_sweeper,
        })
    }

    /// Stores a new job, or finds the one an earlier submit made.
    ///
    /// `owner` is the API key name. With an `idempotency_key`, the same
    /// owner and key with the same `request_hash` answer
    /// [`Inserted::Existing`], and with a different hash
    /// [`JobsError::Conflict`]; keys of different owners never meet.
    /// A replay while the first submit is still storing its items is
    /// [`JobsError::InProgress`]. Otherwise the items are stored (in short
    /// transactions, see `tables::insert_job`) and the job is queued
    /// ([`Inserted::New`]).
    pub async fn submit(
        &self,
        owner: &str,
        idempotency_key: Option<&str>,
        request_hash: &str,
        items: Vec<serde_json::Value>,
    ) -> Result<Inserted, JobsError> {
        let shared = &self.shared;
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
                    tables::insert_job(c, &owner, key.as_deref(), &hash, &items, now_ms())
                })
            })
            .await?;
        if let Inserted::New(job) = &inserted {
            self.shared.queue.push(Queued {
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
                let Some(job) = tables::job_by_id(&tx, &job_id)? else {
                    return Ok(None);
                };
                if !admin && job.owner != owner {
                    return Ok(None);
                }
                let results = if job.status == JobStatus::Succeeded {
                    let rows = tables::results_page(&tx, job.seq, page.offset, page.limit)?;
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
        let (queued, running, oldest) = self.shared.queue.snapshot();
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
        let retention = self.retention;
        self.blocking(move |shared| sweep_once(shared, retention))
            .await
    }

    /// Stops the workers between two items (the current item finishes and
    /// its result is written) and the sweeper, and returns once the threads
    /// have stopped. Unfinished jobs stay stored and resume at the next
    /// [`SqliteJobs::open`]. Polls still work afterwards; submits do not.
    pub async fn shutdown(&self) {
        let inner = self;
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
        f: impl FnOnce(&JobsState) -> Result<T, JobsError> + Send + 'static,
    ) -> Result<T, JobsError> {
        let shared = Arc::clone(&self.shared);
        tokio::task::spawn_blocking(move || f(&shared))
            .await
            .map_err(|e| JobsError::Task(e.to_string()))?
    }
}

impl Backend for SqliteJobs {
    fn submit<'a>(
        &'a self,
        owner: &'a str,
        idempotency_key: Option<&'a str>,
        request_hash: &'a str,
        items: Vec<serde_json::Value>,
    ) -> BoxFuture<'a, Result<Inserted, JobsError>> {
        Box::pin(SqliteJobs::submit(
            self,
            owner,
            idempotency_key,
            request_hash,
            items,
        ))
    }

    fn get<'a>(
        &'a self,
        job_id: &'a str,
        owner: &'a str,
        admin: bool,
        page: Page,
    ) -> BoxFuture<'a, Result<Option<JobView>, JobsError>> {
        Box::pin(SqliteJobs::get(self, job_id, owner, admin, page))
    }

    fn health(&self) -> JobsHealth {
        SqliteJobs::health(self)
    }

    fn sweep(&self) -> BoxFuture<'_, Result<usize, JobsError>> {
        Box::pin(SqliteJobs::sweep(self))
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(SqliteJobs::shutdown(self))
    }

    fn is_stopping(&self) -> bool {
        self.shared.queue.is_stopping()
    }

    fn workers(&self) -> usize {
        self.workers
    }

    fn store_name(&self) -> &'static str {
        "sqlite"
    }

    fn metrics(&self) -> &JobsMetrics {
        &self.shared.metrics
    }
}

impl Drop for SqliteJobs {
    /// A handle dropped without [`SqliteJobs::shutdown`] still stops the workers
    /// (after their current item) and the sweeper; it just does not wait.
    fn drop(&mut self) {
        self.shared.queue.stop();
        let _ = self.stop_sweeper.send(true);
    }
}

async fn sweep_loop(shared: Arc<JobsState>, retention: Duration, mut stop: watch::Receiver<bool>) {
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

fn sweep_once(shared: &JobsState, retention: Duration) -> Result<usize, JobsError> {
    shared
        .store
        .with_conn(|c| tables::sweep(c, cutoff_ms(retention)))
}
