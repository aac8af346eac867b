//! Batch jobs on the shared PostgreSQL store, for several replicas: a job
//! submitted through any replica is visible and pollable through every
//! one, and the workers of every replica run its items.
//!
//! There is no in-memory queue: the database is the queue. A worker claims
//! a few items at a time with one statement (`FOR UPDATE SKIP LOCKED`, so
//! workers never wait on each other's rows) and leases them for
//! `store.lease`. A result is written only where none is stored yet, so an
//! item has one result however many workers ran it; a worker killed
//! mid-item loses its lease and another runs the item again. Results and
//! the job's progress are one transaction, and the job turns `succeeded`
//! in the same transaction as its last result. `Idempotency-Key` holds
//! across replicas through a unique constraint, not a check then an insert.
//!
//! Workers are plain threads, as in the SQLite store (items are CPU work);
//! they drive the async client with [`SharedStore::block_on`]. A submit wakes
//! them at once, on every replica, by `NOTIFY`; otherwise they look for
//! work every half second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::backend::{Backend, BoxFuture, Inserted, JobRow};
use super::worker::{run_item, JobsMetrics, FLUSH_INTERVAL};
use super::{cutoff_ms, now_ms, view, ItemFn, JobStatus, JobView, JobsError, JobsHealth, Page};
use crate::store::postgres::{error_kind, error_text, SharedStore, JOBS_CHANNEL, NOW_MICROS};

/// Items one worker claims at a time: each claim and each write of
/// results is a durable commit, so larger claims mean fewer of them (and
/// a killed worker's claim, run again elsewhere, costs at most this many
/// items).
const CLAIM: i64 = 128;
/// How often an idle worker looks for work without being woken.
const IDLE_POLL: Duration = Duration::from_millis(500);
/// Items inserted per statement at submit.
const INSERT_CHUNK: usize = 1000;

const JOB_COLUMNS: &str = "seq, job_id, owner, status, items_total, items_done, created_at_ms, \
     started_at_ms, finished_at_ms, error, request_hash";

impl From<tokio_postgres::Error> for JobsError {
    fn from(e: tokio_postgres::Error) -> JobsError {
        let transient = match e.as_db_error() {
            Some(_) => crate::store::postgres::is_transient(&e),
            None => crate::store::postgres::is_connection_error(&e),
        };
        if transient {
            JobsError::Unavailable {
                kind: Some(error_kind(&e)),
                message: error_text(&e),
            }
        } else {
            JobsError::Shared(error_text(&e))
        }
    }
}

impl From<deadpool_postgres::PoolError> for JobsError {
    fn from(e: deadpool_postgres::PoolError) -> JobsError {
        JobsError::Unavailable {
            kind: None,
            message: format!("no connection to the shared store: {e}"),
        }
    }
}

/// How often a worker runs a statement again in place after a transient
/// failure (a deadlock, a serialization failure, a dropped connection)
/// before it gives its claim up; the computed results are kept meanwhile.
const RETRIES: u32 = 6;
/// The first wait before a retry; it doubles each time (20 ms .. 640 ms).
const RETRY_BACKOFF: Duration = Duration::from_millis(20);

/// The PostgreSQL job subsystem of one replica.
pub(crate) struct PgJobs {
    shared: SharedStore,
    work: ItemFn,
    pub(super) metrics: JobsMetrics,
    retention: Duration,
    pub(super) workers: usize,
    stopping: AtomicBool,
    /// Bumped (and notified) when there may be new work.
    wake: (Mutex<u64>, Condvar),
    /// std `Mutex`: taken once, by shutdown, to move the handles out.
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Queued and running jobs of every replica, as of the last look.
    counts: Mutex<JobsHealth>,
}

impl PgJobs {
    /// Starts `workers` worker threads, the retention sweeper and the
    /// listener that wakes the workers. Inside a Tokio runtime.
    pub fn open(
        shared: SharedStore,
        retention: Duration,
        workers: usize,
        work: ItemFn,
    ) -> Result<Arc<PgJobs>, JobsError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| JobsError::NoRuntime)?;
        let jobs = Arc::new(PgJobs {
            shared: shared.clone(),
            work,
            metrics: JobsMetrics::new(),
            retention,
            workers: workers.max(1),
            stopping: AtomicBool::new(false),
            wake: (Mutex::new(0), Condvar::new()),
            threads: Mutex::new(Vec::new()),
            tasks: Mutex::new(Vec::new()),
            counts: Mutex::new(JobsHealth {
                queued: 0,
                running: 0,
                oldest_queued_age_s: None,
            }),
        });
        for i in 0..jobs.workers {
            let j = Arc::clone(&jobs);
            let spawned = std::thread::Builder::new()
                .name(format!("verdict-jobs-{i}"))
                .spawn(move || j.run_worker());
            match spawned {
                Ok(t) => lock(&jobs.threads).push(t),
                Err(e) => {
                    jobs.stop();
                    return Err(JobsError::Spawn(e));
                }
            }
        }
        let mut notified = shared.listen(JOBS_CHANNEL);
        let weak = Arc::downgrade(&jobs);
        let listener = runtime.spawn(async move {
            while notified.recv().await.is_some() {
                match weak.upgrade() {
                    Some(j) => j.wake_workers(),
                    None => return,
                }
            }
        });
        let weak = Arc::downgrade(&jobs);
        let sweeper = runtime.spawn(async move {
            let every = (retention / 2).clamp(Duration::from_millis(10), Duration::from_secs(60));
            let mut look = tokio::time::interval(Duration::from_secs(1));
            let mut last_sweep = Instant::now();
            loop {
                look.tick().await;
                let Some(j) = weak.upgrade() else { return };
                if j.stopping.load(Ordering::Relaxed) {
                    return;
                }
                j.refresh_counts_or_warn().await;
                if last_sweep.elapsed() >= every {
                    last_sweep = Instant::now();
                    match j.sweep().await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(jobs = n, "expired batch jobs deleted"),
                        Err(e) => tracing::warn!(error = %e, "batch job retention sweep failed"),
                    }
                }
            }
        });
        lock(&jobs.tasks).extend([listener, sweeper]);
        Ok(jobs)
    }

    pub async fn submit(
        &self,
        owner: &str,
        idempotency_key: Option<&str>,
        request_hash: &str,
        items: Vec<serde_json::Value>,
    ) -> Result<Inserted, JobsError> {
        if self.stopping.load(Ordering::Relaxed) {
            return Err(JobsError::ShuttingDown);
        }
        let job_id = uuid::Uuid::new_v4().to_string();
        let total = i64::try_from(items.len()).unwrap_or(i64::MAX);
        // A job with nothing to run is done when stored.
        let (status, finished) = if items.is_empty() {
            ("succeeded", Some(now_ms()))
        } else {
            ("queued", None)
        };
        let mut client = self.shared.client().await?;
        let tx = client.transaction().await?;
        let inserted = tx
            .query_opt(
                &format!(
                    "INSERT INTO jobs_jobs (job_id, owner, status, items_total, created_at_ms, \
                     started_at_ms, finished_at_ms, idempotency_key, request_hash) \
                     VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8) \
                     ON CONFLICT (owner, idempotency_key) DO NOTHING RETURNING {JOB_COLUMNS}"
                ),
                &[
                    &job_id,
                    &owner,
                    &status,
                    &total,
                    &now_ms(),
                    &finished,
                    &idempotency_key,
                    &request_hash,
                ],
            )
            .await?;
        let Some(row) = inserted else {
            // The key was used before (perhaps through another replica, a
            // moment ago: the insert waited for that commit).
            let existing = tx
                .query_one(
                    &format!(
                        "SELECT {JOB_COLUMNS} FROM jobs_jobs \
                         WHERE owner = $1 AND idempotency_key = $2"
                    ),
                    &[&owner, &idempotency_key],
                )
                .await?;
            let job = job_row(&existing)?;
            return if job.request_hash == request_hash {
                Ok(Inserted::Existing(job))
            } else {
                Err(JobsError::Conflict)
            };
        };
        let job = job_row(&row)?;
        for (n, chunk) in items.chunks(INSERT_CHUNK).enumerate() {
            let first = n * INSERT_CHUNK;
            let idx: Vec<i32> = (first..first + chunk.len())
                .map(|i| i32::try_from(i).unwrap_or(i32::MAX))
                .collect();
            let text: Vec<String> = chunk.iter().map(|v| v.to_string()).collect();
            tx.execute(
                "INSERT INTO jobs_items (job_id, idx, item) \
                 SELECT $1, i, t FROM UNNEST($2::int[], $3::text[]) AS u(i, t)",
                &[&job_id, &idx, &text],
            )
            .await?;
        }
        tx.execute("SELECT pg_notify($1, $2)", &[&JOBS_CHANNEL, &job_id])
            .await?;
        tx.commit().await?;
        self.wake_workers();
        self.refresh_counts_or_warn().await;
        Ok(Inserted::New(job))
    }

    pub async fn get(
        &self,
        job_id: &str,
        owner: &str,
        admin: bool,
        page: Page,
    ) -> Result<Option<JobView>, JobsError> {
        let mut client = self.shared.client().await?;
        // One snapshot for the row and its results.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let Some(row) = tx
            .query_opt(
                &format!("SELECT {JOB_COLUMNS} FROM jobs_jobs WHERE job_id = $1"),
                &[&job_id],
            )
            .await?
        else {
            return Ok(None);
        };
        let job = job_row(&row)?;
        if !admin && job.owner != owner {
            return Ok(None);
        }
        let results = if job.status == JobStatus::Succeeded {
            let offset = i64::try_from(page.offset).unwrap_or(i64::MAX);
            let limit = i64::try_from(page.limit).unwrap_or(i64::MAX);
            let rows = tx
                .query(
                    "SELECT idx, result FROM jobs_items WHERE job_id = $1 \
                     ORDER BY idx OFFSET $2 LIMIT $3",
                    &[&job_id, &offset, &limit],
                )
                .await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in rows {
                let idx: i32 = r.try_get(0)?;
                let text: Option<String> = r.try_get(1)?;
                let text = text.ok_or_else(|| {
                    JobsError::Corrupt(format!("job {job_id} item {idx} has no result"))
                })?;
                let value = serde_json::from_str(&text)
                    .map_err(|e| JobsError::Corrupt(format!("job {job_id} result {idx}: {e}")))?;
                out.push((usize::try_from(idx).unwrap_or(usize::MAX), value));
            }
            Some(out)
        } else {
            None
        };
        tx.commit().await?;
        Ok(Some(view(job, results)))
    }

    pub fn health(&self) -> JobsHealth {
        *lock(&self.counts)
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Deletes jobs that finished more than `retention` ago, with their
    /// items and results.
    pub async fn sweep(&self) -> Result<usize, JobsError> {
        let client = self.shared.client().await?;
        let n = client
            .execute(
                "DELETE FROM jobs_jobs WHERE finished_at_ms IS NOT NULL AND finished_at_ms < $1",
                &[&cutoff_ms(self.retention)],
            )
            .await?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Stops taking items, waits for the workers to finish the item they
    /// run (each writes what it computed), and gives the leases of the
    /// items it claimed but did not run back, so another replica need not
    /// wait for them to lapse.
    pub async fn shutdown(&self) {
        self.stop();
        let threads = std::mem::take(&mut *lock(&self.threads));
        super::join_workers(threads).await;
        for t in std::mem::take(&mut *lock(&self.tasks)) {
            t.abort();
        }
        let released = async {
            let client = self.shared.client().await?;
            client
                .execute(
                    "UPDATE jobs_items SET lease_owner = NULL, lease_until = NULL \
                     WHERE lease_owner = $1 AND result IS NULL",
                    &[&self.shared.replica()],
                )
                .await?;
            Ok::<_, JobsError>(())
        }
        .await;
        if let Err(e) = released {
            tracing::warn!(error = %e, "cannot give back the leases of unfinished batch items");
        }
    }

    fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.wake_workers();
    }

    fn wake_workers(&self) {
        let (generation, cv) = &self.wake;
        *lock(generation) += 1;
        cv.notify_all();
    }

    /// Sleeps until woken or `IDLE_POLL` passes.
    fn idle(&self, seen: u64) {
        let (generation, cv) = &self.wake;
        let guard = lock(generation);
        if *guard == seen && !self.stopping.load(Ordering::Relaxed) {
            let _ = cv
                .wait_timeout(guard, IDLE_POLL)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Counts queued and running jobs for health and the gauges: every
    /// second, and whenever this replica submits or finishes a job.
    async fn refresh_counts_or_warn(&self) {
        if let Err(e) = self.refresh_counts().await {
            tracing::warn!(error = %e, "cannot count batch jobs");
        }
    }

    async fn refresh_counts(&self) -> Result<(), JobsError> {
        let client = self.shared.client().await?;
        let rows = client
            .query(
                "SELECT status, COUNT(*), MIN(created_at_ms) FROM jobs_jobs \
                 WHERE status IN ('queued', 'running') GROUP BY status",
                &[],
            )
            .await?;
        let mut h = JobsHealth {
            queued: 0,
            running: 0,
            oldest_queued_age_s: None,
        };
        for r in rows {
            let status: String = r.try_get(0)?;
            let n = usize::try_from(r.try_get::<_, i64>(1)?).unwrap_or(0);
            if status == "queued" {
                h.queued = n;
                let oldest: Option<i64> = r.try_get(2)?;
                h.oldest_queued_age_s = oldest
                    .map(|created| u64::try_from((now_ms() - created).max(0) / 1000).unwrap_or(0));
            } else {
                h.running = n;
            }
        }
        self.metrics
            .queue_depth
            .set(i64::try_from(h.queued).unwrap_or(i64::MAX));
        self.metrics
            .running
            .set(i64::try_from(h.running).unwrap_or(i64::MAX));
        *lock(&self.counts) = h;
        Ok(())
    }

    /// A worker thread's body: claim items, run them, until shutdown.
    fn run_worker(self: Arc<Self>) {
        while !self.stopping.load(Ordering::Relaxed) {
            let seen = *lock(&self.wake.0);
            match self.shared.block_on(self.claim()) {
                Ok(batch) if batch.is_empty() => self.idle(seen),
                Ok(batch) => {
                    if let Err(e) = self.run_batch(batch) {
                        tracing::error!(error = %e, "batch job storage error");
                        self.idle(seen);
                    }
                }
                Err(e) => {
                    self.count(&e);
                    tracing::warn!(error = %e, "cannot claim batch items");
                    self.idle(seen);
                }
            }
        }
    }

    /// Counts a failed statement in `verdict_store_errors_total{kind}`.
    fn count(&self, e: &JobsError) {
        match e {
            JobsError::Unavailable {
                kind: Some(kind), ..
            } => self.shared.count_error(kind),
            JobsError::Shared(_) => self.shared.count_error("query"),
            _ => {}
        }
    }

    /// Runs `op` (one transaction) again in place while it fails for a
    /// reason of the moment, up to [`RETRIES`] times with a doubling wait;
    /// counts every failure. What the caller computed stays in its hands
    /// meanwhile, so a deadlock costs a retry, not a rerun of the items.
    fn retrying<T, Fut>(&self, what: &str, mut op: impl FnMut() -> Fut) -> Result<T, JobsError>
    where
        Fut: std::future::Future<Output = Result<T, JobsError>>,
    {
        let mut wait = RETRY_BACKOFF;
        let mut attempt = 0;
        loop {
            match self.shared.block_on(op()) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    self.count(&e);
                    // At shutdown, one try: the items' leases lapse and
                    // another replica runs them, rather than stalling the
                    // drain on a store that is down.
                    let stopping = self.stopping.load(Ordering::Relaxed);
                    if !matches!(e, JobsError::Unavailable { .. }) || attempt >= RETRIES || stopping
                    {
                        return Err(e);
                    }
                    attempt += 1;
                    tracing::info!(error = %e, attempt, what, "batch store statement failed; retrying it");
                    std::thread::sleep(wait);
                    wait *= 2;
                }
            }
        }
    }

    /// Leases up to [`CLAIM`] items nobody holds of the oldest job that has
    /// any (jobs run in submit order), and marks the job running.
    ///
    /// Locks: the items (`SKIP LOCKED`: never waits for them), then the
    /// job row only while the job is still `queued`, as in [`Self::flush`]:
    /// items first, the job row last, in every transaction of the item path.
    async fn claim(&self) -> Result<Vec<Claimed>, JobsError> {
        let lease_us = i64::try_from(self.shared.lease().as_micros()).unwrap_or(i64::MAX);
        let mut client = self.shared.client().await?;
        let tx = client.transaction().await?;
        let rows = tx
            .query(
                &tx.prepare_cached(&format!(
                    "WITH j AS ( \
                       SELECT job_id FROM jobs_jobs j \
                       WHERE status IN ('queued', 'running') AND EXISTS ( \
                         SELECT 1 FROM jobs_items i WHERE i.job_id = j.job_id \
                           AND i.result IS NULL \
                           AND (i.lease_until IS NULL OR i.lease_until < {NOW_MICROS})) \
                       ORDER BY seq LIMIT 1), \
                     c AS ( \
                       SELECT i.job_id, i.idx FROM jobs_items i JOIN j ON j.job_id = i.job_id \
                       WHERE i.result IS NULL \
                         AND (i.lease_until IS NULL OR i.lease_until < {NOW_MICROS}) \
                       ORDER BY i.idx LIMIT $2 \
                       FOR UPDATE OF i SKIP LOCKED) \
                     UPDATE jobs_items i SET lease_owner = $1, lease_until = {NOW_MICROS} + $3 \
                     FROM c WHERE i.job_id = c.job_id AND i.idx = c.idx \
                     RETURNING i.job_id, i.idx, i.item"
                ))
                .await?,
                &[&self.shared.replica(), &CLAIM, &lease_us],
            )
            .await?;
        let mut batch: Vec<Claimed> = rows
            .iter()
            .map(|r| {
                Ok(Claimed {
                    job_id: r.try_get(0)?,
                    idx: r.try_get(1)?,
                    item: r.try_get(2)?,
                })
            })
            .collect::<Result<_, JobsError>>()?;
        batch.sort_by(|a, b| (&a.job_id, a.idx).cmp(&(&b.job_id, b.idx)));
        let mut jobs: Vec<&str> = batch.iter().map(|c| c.job_id.as_str()).collect();
        jobs.dedup();
        if !jobs.is_empty() {
            // Matches (and so locks) the job row only while it is queued.
            let started = tx
                .query(
                    &tx.prepare_cached(
                        "UPDATE jobs_jobs SET status = 'running', started_at_ms = $2 \
                         WHERE job_id = ANY($1) AND status = 'queued' \
                         RETURNING job_id, items_done, items_total",
                    )
                    .await?,
                    &[&jobs, &now_ms()],
                )
                .await?;
            for r in started {
                let (id, done, total): (String, i64, i64) =
                    (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
                tracing::info!(job_id = %id, items = total, done, "batch job started");
            }
        }
        tx.commit().await?;
        Ok(batch)
    }

    /// Runs claimed items in order, writing results in small batches.
    fn run_batch(&self, batch: Vec<Claimed>) -> Result<(), JobsError> {
        let mut pending: Vec<(i32, String)> = Vec::new();
        let mut last_flush = Instant::now();
        let mut failed: Option<&str> = None;
        // The job `pending` belongs to.
        let mut current: Option<&str> = None;
        // The items of `job` this worker claimed and has not run yet
        // (their leases are renewed at each flush).
        let unrun = |job: &str, after: usize| -> Vec<i32> {
            batch[after..]
                .iter()
                .filter(|c| c.job_id == job)
                .map(|c| c.idx)
                .collect()
        };
        for (pos, c) in batch.iter().enumerate() {
            let job = c.job_id.as_str();
            if let Some(prev) = current.filter(|prev| *prev != job) {
                self.flush(prev, &mut pending, &[])?;
                last_flush = Instant::now();
            }
            current = Some(job);
            if failed == Some(job) {
                continue;
            }
            if self.stopping.load(Ordering::Relaxed) {
                break;
            }
            let (result, took) = {
                let _job = tracing::info_span!("job", job_id = %c.job_id).entered();
                run_item(&self.work, &self.metrics, i64::from(c.idx), &c.item)
            };
            match result {
                Ok(value) => pending.push((c.idx, value)),
                Err(why) => {
                    self.flush(job, &mut pending, &[])?;
                    self.fail(job, &why)?;
                    failed = Some(job);
                    continue;
                }
            }
            // Results go in once per claim, or sooner when items are slow
            // (progress stays visible): one commit per claim, not per
            // FLUSH_ITEMS.
            if last_flush.elapsed() >= FLUSH_INTERVAL || took >= FLUSH_INTERVAL {
                self.flush(job, &mut pending, &unrun(job, pos + 1))?;
                last_flush = Instant::now();
            }
        }
        if let Some(job) = current {
            self.flush(job, &mut pending, &[])?;
        }
        Ok(())
    }

    /// Writes results where none is stored yet, renews the leases of
    /// `unrun` (items of the claim still to run: slow items must not hand
    /// the rest of the claim to another worker), counts the results into
    /// the job's progress and finishes the job with its last one: one
    /// transaction, retried in place on a transient failure. `pending` is
    /// emptied only once it is stored.
    ///
    /// Locks, in this order: this worker's own item rows, then the job row
    /// (as in [`Self::claim`]). Another worker's items are never touched,
    /// so two workers never wait on each other in a cycle.
    fn flush(
        &self,
        job_id: &str,
        pending: &mut Vec<(i32, String)>,
        unrun: &[i32],
    ) -> Result<(), JobsError> {
        if pending.is_empty() {
            return Ok(());
        }
        let (idx, text): (Vec<i32>, Vec<String>) = pending.iter().cloned().unzip();
        let (idx, text) = (&idx, &text);
        let finished = self.retrying("store batch results", || async move {
            let mut client = self.shared.client().await?;
            let tx = client.transaction().await?;
            if !unrun.is_empty() {
                let lease_us = i64::try_from(self.shared.lease().as_micros()).unwrap_or(i64::MAX);
                tx.execute(
                    &tx.prepare_cached(&format!(
                        "UPDATE jobs_items SET lease_until = {NOW_MICROS} + $4 \
                         WHERE job_id = $1 AND idx = ANY($2) AND lease_owner = $3 \
                         AND result IS NULL"
                    ))
                    .await?,
                    &[&job_id, &unrun, &self.shared.replica(), &lease_us],
                )
                .await?;
            }
            let row = tx
                .query_one(
                    &tx.prepare_cached(
                    "WITH w AS ( \
                       UPDATE jobs_items i SET result = u.t, lease_owner = NULL, lease_until = NULL \
                       FROM UNNEST($2::int[], $3::text[]) AS u(i, t) \
                       WHERE i.job_id = $1 AND i.idx = u.i AND i.result IS NULL RETURNING 1) \
                     UPDATE jobs_jobs SET items_done = items_done + (SELECT COUNT(*) FROM w) \
                     WHERE job_id = $1 RETURNING items_done, items_total, status",
                    )
                    .await?,
                    &[&job_id, idx, text],
                )
                .await?;
            let (done, total, status): (i64, i64, String) =
                (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            // The job row is this transaction's already: no new lock.
            let finished = if done >= total && status == "running" {
                tx.execute(
                    "UPDATE jobs_jobs SET status = 'succeeded', finished_at_ms = $2 \
                     WHERE job_id = $1 AND status = 'running'",
                    &[&job_id, &now_ms()],
                )
                .await?
                    == 1
            } else {
                false
            };
            tx.commit().await?;
            Ok::<_, JobsError>(finished)
        })?;
        pending.clear();
        if finished {
            self.metrics.job_finished(JobStatus::Succeeded);
            tracing::info!(job_id, status = "succeeded", "batch job finished");
            self.shared.block_on(self.refresh_counts_or_warn());
        }
        Ok(())
    }

    fn fail(&self, job_id: &str, message: &str) -> Result<(), JobsError> {
        let changed = self.retrying("fail a batch job", || async {
            let client = self.shared.client().await?;
            Ok::<_, JobsError>(
                client
                    .execute(
                        "UPDATE jobs_jobs SET status = 'failed', error = $2, finished_at_ms = $3 \
                         WHERE job_id = $1 AND status IN ('queued', 'running')",
                        &[&job_id, &message, &now_ms()],
                    )
                    .await?,
            )
        })?;
        if changed == 1 {
            self.metrics.job_finished(JobStatus::Failed);
            tracing::info!(job_id, status = "failed", "batch job finished");
            self.shared.block_on(self.refresh_counts_or_warn());
        }
        Ok(())
    }
}

/// One leased item.
struct Claimed {
    job_id: String,
    idx: i32,
    item: String,
}

fn job_row(r: &tokio_postgres::Row) -> Result<JobRow, JobsError> {
    let status: String = r.try_get(3)?;
    let count = |i: usize| -> Result<u64, JobsError> {
        Ok(u64::try_from(r.try_get::<_, i64>(i)?).unwrap_or(0))
    };
    Ok(JobRow {
        seq: r.try_get(0)?,
        job_id: r.try_get(1)?,
        owner: r.try_get(2)?,
        status: JobStatus::parse(&status)
            .ok_or_else(|| JobsError::Corrupt(format!("bad job status {status:?}")))?,
        items_total: count(4)?,
        items_done: count(5)?,
        created_at_ms: r.try_get(6)?,
        started_at_ms: r.try_get(7)?,
        finished_at_ms: r.try_get(8)?,
        error: r.try_get(9)?,
        request_hash: r.try_get(10)?,
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Backend for PgJobs {
    fn submit<'a>(
        &'a self,
        owner: &'a str,
        idempotency_key: Option<&'a str>,
        request_hash: &'a str,
        items: Vec<serde_json::Value>,
    ) -> BoxFuture<'a, Result<Inserted, JobsError>> {
        Box::pin(PgJobs::submit(
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
        Box::pin(PgJobs::get(self, job_id, owner, admin, page))
    }

    fn health(&self) -> JobsHealth {
        PgJobs::health(self)
    }

    fn sweep(&self) -> BoxFuture<'_, Result<usize, JobsError>> {
        Box::pin(PgJobs::sweep(self))
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(PgJobs::shutdown(self))
    }

    fn is_stopping(&self) -> bool {
        PgJobs::is_stopping(self)
    }

    fn workers(&self) -> usize {
        self.workers
    }

    fn store_name(&self) -> &'static str {
        "postgres"
    }

    fn metrics(&self) -> &JobsMetrics {
        &self.metrics
    }
}
