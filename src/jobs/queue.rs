//! The in-memory run queue that feeds the worker threads.
//!
//! SQLite is the source of truth; this queue only mirrors which stored jobs
//! still wait, in creation order, so that workers can block on a condvar
//! instead of polling the database, and so that `/health/detailed` can read
//! the queue depth without touching the disk. It is rebuilt from the
//! database at start-up.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use prometheus_client::metrics::gauge::Gauge;

/// One waiting job.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Queued {
    pub seq: i64,
    pub created_at_ms: i64,
}

#[derive(Debug, Default)]
struct State {
    /// INVARIANT: ordered by `seq`, i.e. by creation.
    waiting: VecDeque<Queued>,
    running: usize,
}

/// FIFO of jobs plus the stop flag.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    /// std `Mutex`: held only to push or pop, never across IO.
    state: Mutex<State>,
    wake: Condvar,
    /// Also readable without the lock, so a worker can check it between
    /// items cheaply.
    stopping: AtomicBool,
    depth: Gauge,
    running: Gauge,
}

// === impl Queue ===

impl Queue {
    pub fn new(depth: Gauge, running: Gauge) -> Queue {
        Queue {
            depth,
            running,
            ..Queue::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a job and wakes one worker. Jobs arrive in `seq` order except at
    /// start-up, where they are pushed in `seq` order too.
    pub fn push(&self, job: Queued) {
        let mut s = self.lock();
        // Keep FIFO by seq even if two submits commit and push out of order.
        let at = s.waiting.partition_point(|q| q.seq < job.seq);
        s.waiting.insert(at, job);
        self.depth.set(s.waiting.len() as i64);
        drop(s);
        self.wake.notify_one();
    }

    /// Blocks until a job is waiting (and takes it) or the queue is stopping
    /// (`None`). The caller must call [`Queue::done`] after the job.
    pub fn next(&self) -> Option<Queued> {
        let mut s = self.lock();
        loop {
            if self.is_stopping() {
                return None;
            }
            if let Some(job) = s.waiting.pop_front() {
                s.running += 1;
                self.depth.set(s.waiting.len() as i64);
                self.running.set(s.running as i64);
                return Some(job);
            }
            s = self.wake.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// A worker is finished with a job taken from [`Queue::next`].
    pub fn done(&self) {
        let mut s = self.lock();
        s.running = s.running.saturating_sub(1);
        self.running.set(s.running as i64);
    }

    /// Wakes every worker and makes them stop after their current item.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Take the lock so no worker is between its check and its wait.
        let _s = self.lock();
        self.wake.notify_all();
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// (queued, running, creation time of the oldest queued job).
    pub fn snapshot(&self) -> (usize, usize, Option<i64>) {
        let s = self.lock();
        let oldest = s.waiting.iter().map(|q| q.created_at_ms).min();
        (s.waiting.len(), s.running, oldest)
    }
}
