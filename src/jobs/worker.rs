//! The worker threads that run jobs, one item at a time.
//!
//! Verification is CPU work, so items never run on the async runtime: each
//! worker is a plain OS thread with its own SQLite connection. A worker takes
//! the oldest waiting job from the [`Queue`], runs its items that have no
//! stored result yet in index order, and writes results in small batches
//! (every [`FLUSH_ITEMS`] items or [`FLUSH_INTERVAL`]), so that progress is
//! visible while the job runs and survives a crash. Between two items it
//! checks the stop flag: a shutdown never abandons an item halfway and never
//! drops a finished result. A panic in the item function is caught and fails
//! that job only; the worker moves on to the next one.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use rusqlite::Connection;

use super::queue::Queue;
use super::sqlite::{self as tables, Store};
use super::{now_ms, ItemFn, JobStatus, JobsError};

/// Results are written at least every this many items...
pub(crate) const FLUSH_ITEMS: usize = 64;
/// ...and at least this often while items are slow.
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_millis(50);
/// Items read from the database per query.
const PAGE: usize = 256;

/// State shared by the handle, the workers and the sweeper.
pub(crate) struct JobsState {
    pub store: Store,
    pub queue: Queue,
    pub work: ItemFn,
    pub metrics: JobsMetrics,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StatusLabels {
    pub status: String,
}

/// The subsystem's Prometheus metrics; created at open, registered on request.
#[derive(Clone, Debug)]
pub(crate) struct JobsMetrics {
    pub queue_depth: Gauge,
    pub running: Gauge,
    pub items: Counter,
    pub item_duration: Histogram,
    pub finished: Family<StatusLabels, Counter>,
}

impl JobsMetrics {
    pub fn new() -> JobsMetrics {
        JobsMetrics {
            queue_depth: Gauge::default(),
            running: Gauge::default(),
            items: Counter::default(),
            item_duration: crate::telemetry::metrics::latency_histogram(),
            finished: Family::default(),
        }
    }

    /// Registers queue depth, running jobs, items processed, item duration
    /// and finished jobs by status. Call once.
    pub(crate) fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        let m = self;
        registry.register(
            "verdict_jobs_queue_depth",
            "Batch jobs waiting for a worker",
            m.queue_depth.clone(),
        );
        registry.register(
            "verdict_jobs_running",
            "Batch jobs being processed",
            m.running.clone(),
        );
        registry.register(
            "verdict_jobs_items_processed",
            "Batch items processed",
            m.items.clone(),
        );
        registry.register(
            "verdict_jobs_item_duration_seconds",
            "Time to process one batch item",
            m.item_duration.clone(),
        );
        registry.register(
            "verdict_jobs_finished",
            "Batch jobs finished, by status",
            m.finished.clone(),
        );
    }

    pub(crate) fn job_finished(&self, status: JobStatus) {
        self.finished
            .get_or_create(&StatusLabels {
                status: status.as_str().to_string(),
            })
            .inc();
    }
}

/// How one pass over a job ended.
enum Outcome {
    Finished(JobStatus),
    /// Stopped between items by shutdown; the job stays `running` in the
    /// database and resumes at the next start.
    Stopped,
    /// Nothing to do: the job row is gone (swept) or already finished.
    Gone,
}

/// A worker thread's body: take jobs until the queue stops.
pub(crate) fn run(shared: Arc<JobsState>, mut conn: Connection) {
    while let Some(job) = shared.queue.next() {
        // Every log line of the job carries its id (recorded by `run_job`).
        let span = tracing::info_span!(
            "batch_job",
            job_seq = job.seq,
            job_id = tracing::field::Empty
        );
        let _entered = span.enter();
        let outcome = run_job(&shared, &mut conn, job.seq);
        shared.queue.done();
        match outcome {
            Ok(Outcome::Finished(status)) => {
                shared.metrics.job_finished(status);
                tracing::info!(status = status.as_str(), "batch job finished");
            }
            Ok(Outcome::Stopped) => {
                tracing::info!("batch job paused by shutdown");
            }
            Ok(Outcome::Gone) => {}
            Err(e) => {
                // The store failed under us. Fail the job rather than retry
                // forever; if even that cannot be written the job stays
                // unfinished and resumes at the next start.
                tracing::error!(error = %e, "batch job storage error");
                match tables::finish_job(
                    &mut conn,
                    job.seq,
                    Some("internal storage error"),
                    now_ms(),
                ) {
                    Ok(()) => shared.metrics.job_finished(JobStatus::Failed),
                    Err(e) => {
                        tracing::error!(error = %e, "cannot mark batch job failed")
                    }
                }
            }
        }
    }
}

/// Results computed but not yet written.
struct Pending {
    seq: i64,
    rows: Vec<(i64, String)>,
    last_flush: Instant,
}

impl Pending {
    fn flush(&mut self, conn: &mut Connection) -> Result<(), JobsError> {
        tables::write_results(conn, self.seq, &self.rows)?;
        self.rows.clear();
        self.last_flush = Instant::now();
        Ok(())
    }

    /// Whether to write now. After a slow item (one that took a flush
    /// interval by itself) the next one is probably slow too, so its
    /// predecessors' results are not held back while it runs.
    fn due(&self, last_item: Duration) -> bool {
        self.rows.len() >= FLUSH_ITEMS
            || self.last_flush.elapsed() >= FLUSH_INTERVAL
            || last_item >= FLUSH_INTERVAL
    }
}

fn run_job(shared: &JobsState, conn: &mut Connection, seq: i64) -> Result<Outcome, JobsError> {
    let Some(job) = tables::job_by_seq(conn, seq)? else {
        return Ok(Outcome::Gone);
    };
    tracing::Span::current().record("job_id", job.job_id.as_str());
    if matches!(job.status, JobStatus::Succeeded | JobStatus::Failed) {
        return Ok(Outcome::Gone);
    }
    tracing::info!(
        items = job.items_total,
        done = job.items_done,
        "batch job started"
    );
    tables::mark_running(conn, seq, now_ms())?;
    let mut pending = Pending {
        seq,
        rows: Vec::with_capacity(FLUSH_ITEMS),
        last_flush: Instant::now(),
    };
    let mut after = -1i64;
    loop {
        let page = tables::pending_items(conn, seq, after, PAGE)?;
        if page.is_empty() {
            break;
        }
        for (idx, item) in page {
            if shared.queue.is_stopping() {
                pending.flush(conn)?;
                return Ok(Outcome::Stopped);
            }
            after = idx;
            let (result, took) = run_item(&shared.work, &shared.metrics, idx, &item);
            match result {
                Ok(value) => pending.rows.push((idx, value)),
                Err(why) => return fail(conn, &mut pending, &why),
            }
            if pending.due(took) {
                pending.flush(conn)?;
            }
        }
    }
    pending.flush(conn)?;
    let done = tables::job_by_seq(conn, seq)?.map(|j| (j.items_done, j.items_total));
    match done {
        Some((done, total)) if done >= total => {
            tables::finish_job(conn, seq, None, now_ms())?;
            Ok(Outcome::Finished(JobStatus::Succeeded))
        }
        Some((done, total)) => fail(
            conn,
            &mut pending,
            &format!(
                "internal error: {} of {total} results missing",
                total - done
            ),
        ),
        None => Ok(Outcome::Gone),
    }
}

/// Keeps the results already computed, then fails the job.
fn fail(conn: &mut Connection, pending: &mut Pending, message: &str) -> Result<Outcome, JobsError> {
    pending.flush(conn)?;
    tables::finish_job(conn, pending.seq, Some(message), now_ms())?;
    Ok(Outcome::Finished(JobStatus::Failed))
}

/// Runs one stored item (its JSON text) under `catch_unwind`, metered:
/// the result's JSON text, or why the job fails (the item is not JSON, or
/// the item function panicked), and how long the item ran. Both stores'
/// workers run items through here.
pub(super) fn run_item(
    work: &ItemFn,
    metrics: &JobsMetrics,
    idx: i64,
    stored: &str,
) -> (Result<String, String>, Duration) {
    let item: serde_json::Value = match serde_json::from_str(stored) {
        Ok(v) => v,
        Err(e) => {
            tracing::error!(index = idx, error = %e, "stored batch item is not JSON");
            return (
                Err(format!("item {idx}: stored item is corrupt")),
                Duration::ZERO,
            );
        }
    };
    let index = usize::try_from(idx).unwrap_or(usize::MAX);
    let started = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| work(index, &item)));
    let took = started.elapsed();
    metrics.item_duration.observe(took.as_secs_f64());
    metrics.items.inc();
    let result = result.map(|value| value.to_string()).map_err(|payload| {
        let why = panic_message(payload.as_ref());
        tracing::error!(index = idx, panic = %why, "batch item panicked");
        format!("item {idx} could not be processed: internal error")
    });
    (result, took)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}
