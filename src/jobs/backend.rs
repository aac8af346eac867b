//! The storage interface of batch jobs: the [`Backend`] trait the
//! [`Jobs`](super::Jobs) handle calls, and the rows both backends share.
//! The SQLite backend, the zero-config default, is `super::sqlite`; the
//! PostgreSQL one, for several replicas sharing one queue, is `super::pg`.

use std::future::Future;
use std::pin::Pin;

use super::worker::JobsMetrics;
use super::{JobStatus, JobView, JobsError, JobsHealth, Page};

/// A boxed future a backend's async methods return, so that the handle can
/// hold either backend behind one pointer.
pub(super) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a store of batch jobs does; see [`Jobs`](super::Jobs) for the
/// meaning of each call.
pub(super) trait Backend: Send + Sync {
    /// Stores a new job (queued to run), or finds the one an earlier submit
    /// with the same owner and idempotency key made.
    fn submit<'a>(
        &'a self,
        owner: &'a str,
        idempotency_key: Option<&'a str>,
        request_hash: &'a str,
        items: Vec<serde_json::Value>,
    ) -> BoxFuture<'a, Result<Inserted, JobsError>>;

    /// A job as `owner` may see it (`admin` sees every job), with a page of
    /// its results once it succeeded.
    fn get<'a>(
        &'a self,
        job_id: &'a str,
        owner: &'a str,
        admin: bool,
        page: Page,
    ) -> BoxFuture<'a, Result<Option<JobView>, JobsError>>;

    /// Queued and running jobs, and the age of the oldest queued one.
    fn health(&self) -> JobsHealth;

    /// Deletes the jobs finished longer than the retention ago; how many.
    fn sweep(&self) -> BoxFuture<'_, Result<usize, JobsError>>;

    /// Stops the workers between two items and waits for them.
    fn shutdown(&self) -> BoxFuture<'_, ()>;

    /// After shutdown began: no new job is accepted.
    fn is_stopping(&self) -> bool;

    /// Worker threads of this replica.
    fn workers(&self) -> usize;

    /// `sqlite` or `postgres`, for the health report.
    fn store_name(&self) -> &'static str;

    fn metrics(&self) -> &JobsMetrics;
}

/// A job row as stored.
#[derive(Debug, Clone)]
pub(crate) struct JobRow {
    pub seq: i64,
    pub job_id: String,
    pub owner: String,
    pub status: JobStatus,
    pub items_total: u64,
    pub items_done: u64,
    pub created_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    pub error: Option<String>,
    pub request_hash: String,
}

/// What a submit stored: a new job, or the one an earlier submit made.
#[derive(Debug)]
pub(crate) enum Inserted {
    New(JobRow),
    /// Same owner, key and request hash: the job submitted earlier.
    Existing(JobRow),
}
