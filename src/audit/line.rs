//! The commit line: group commit in the caller (leader/follower).
//!
//! A record joins one queue. When no commit is running, the appending task
//! becomes the leader and commits its record (and any that joined while it
//! took the queue) itself: in place on a multi-threaded runtime, and on its
//! runtime's blocking pool on a single-threaded one (where blocking in place
//! is not allowed; verdict's listener threads each run one, so there the
//! commit still crosses to another thread and back, as it did with a writer
//! thread). Records that arrive while a commit runs are followers: they wait
//! for their answer, and the leader, once its own commit is durable, hands
//! them to the committer thread, which commits what is queued group by group
//! until the queue is empty. A busy log groups exactly as a single writer
//! would. Every promise of the log
//! holds either way: one [`Committer`] at a time (its mutex), each group one
//! transaction with its checkpoint, and no answer before the commit.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::keys::KeyDocument;
use super::writer::Pending;
use super::AuditError;

/// What commits a group: the log's writer, or the benchmarks' no-op.
pub(crate) trait Committer: Send {
    /// Commits `batch` as one group and answers every record in it.
    fn commit_batch(&mut self, batch: Vec<Pending>);
    fn rotate(&mut self) -> Result<KeyDocument, AuditError>;
}

/// What an append is once its record is queued.
pub(crate) enum Role {
    /// No commit was running: commit this batch (it starts with the record)
    /// with [`Line::lead`], then read the answer.
    Leader(Vec<Pending>),
    /// A commit is running; the answer comes when the record's group is in.
    Follower,
}

pub(crate) struct Line {
    state: Mutex<State>,
    /// Signalled when a record joins, when work is handed to the committer
    /// thread, and when the line goes idle.
    changed: Condvar,
    committer: Mutex<Box<dyn Committer>>,
    max_batch: usize,
    max_wait: Duration,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Pending>,
    /// A leader or the committer thread owns the next commit. Whenever the
    /// queue holds a record, this is true.
    busy: bool,
    /// Records queued during a leader's commit wait for the committer thread.
    handed_over: bool,
    /// After shutdown began: nothing is accepted.
    closed: bool,
    /// A commit panicked: nothing is accepted until the process restarts.
    broken: bool,
    /// Records in the previous group, and how long its commit took (see
    /// [`idle_gap`] and [`linger_cap`]).
    last_group: usize,
    last_commit: Duration,
    /// Times the committer thread woke from its wait.
    #[cfg(test)]
    committer_wakes: usize,
}

/// How long a forming group waits for its next record before it closes
/// early: a tenth of `max_wait` (200 us at 2 ms; the default is 0, which
/// never lingers).
///
/// `max_wait` is an upper bound ("collected for at most"), and waiting it out
/// in full only pays while records keep arriving. Only a leader lingers (a
/// group the committer thread takes formed during a commit, so its records
/// have waited one commit already), and only when it has company: a lone
/// record after a group of one commits at once, since the gap would only
/// delay it and group nothing.
///
/// Why: while every client waits on a lingering group, the cores sit idle,
/// so a plain linger costs throughput on a fast disk; these rules keep a
/// linger only where the flush it saves is dear (docs/benchmarks.md has the
/// figures).
fn idle_gap(max_wait: Duration) -> Duration {
    max_wait / 10
}

/// The longest a group may linger, counted from its first record's arrival:
/// half the previous commit's duration, within `max_wait`.
///
/// Records arriving after a full commit's duration would have formed the
/// next group while this one committed, so a longer wait only delays the
/// ones already in. Half rather than all of it keeps a commit running: the
/// records that come during the second half of that time queue behind this
/// group and commit next.
fn linger_cap(max_wait: Duration, last_commit: Duration) -> Duration {
    max_wait.min(last_commit / 2)
}

fn stopped() -> AuditError {
    AuditError::Unavailable("audit writer has stopped".into())
}

impl Line {
    /// A line committing through `committer`, with its committer thread.
    pub fn start(
        committer: Box<dyn Committer>,
        max_batch: usize,
        max_wait: Duration,
    ) -> Result<(Arc<Line>, JoinHandle<()>), AuditError> {
        let line = Arc::new(Line {
            state: Mutex::new(State {
                last_commit: max_wait,
                ..State::default()
            }),
            changed: Condvar::new(),
            committer: Mutex::new(committer),
            max_batch: max_batch.max(1),
            max_wait,
        });
        let serving = line.clone();
        let thread = std::thread::Builder::new()
            .name("audit-writer".into())
            .spawn(move || serving.serve())
            .map_err(|e| AuditError::Unavailable(format!("cannot start the writer: {e}")))?;
        Ok((line, thread))
    }

    /// The state, also after a panic elsewhere: every change to it is made
    /// whole under the lock, so a poisoned lock still holds a consistent one.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a record; says whether the caller leads the next commit.
    pub fn enqueue(&self, p: Pending) -> Result<Role, AuditError> {
        let mut st = self.lock();
        if st.broken || st.closed {
            return Err(stopped());
        }
        st.queue.push_back(p);
        if st.busy {
            // A lingering leader may be waiting for company; with no
            // `max_wait` none lingers, and a wake would only rouse the
            // committer thread to find nothing handed over.
            if !self.max_wait.is_zero() {
                self.changed.notify_all();
            }
            return Ok(Role::Follower);
        }
        st.busy = true;
        let batch = take(&mut st.queue, self.max_batch);
        Ok(Role::Leader(batch))
    }

    /// Commits a leader's batch on this thread, then hands what queued
    /// meanwhile to the committer thread. Blocks for the commit.
    pub fn lead(&self, batch: Vec<Pending>) {
        let guard = Unwinding(self);
        let batch = self.linger(batch);
        let n = batch.len();
        let started = Instant::now();
        self.commit(batch);
        let mut st = self.lock();
        st.last_group = n;
        st.last_commit = started.elapsed();
        if st.queue.is_empty() {
            st.busy = false;
        } else {
            st.handed_over = true;
        }
        // Only two wait for this: the committer thread, for a hand-over,
        // and `close`, for the line to go idle. Any other wake would put
        // the committer thread back to sleep, a context switch per commit.
        if st.handed_over || st.closed {
            self.changed.notify_all();
        }
        drop(st);
        drop(guard);
    }

    /// With `max_wait` set and company to wait for, gathers the records that
    /// arrive while the group lingers (see [`idle_gap`]).
    fn linger(&self, mut batch: Vec<Pending>) -> Vec<Pending> {
        let Some(first) = batch.first() else {
            return batch;
        };
        if self.max_wait.is_zero() {
            return batch;
        }
        let mut st = self.lock();
        let deadline = first.enqueued + linger_cap(self.max_wait, st.last_commit);
        let gap = idle_gap(self.max_wait);
        while batch.len() < self.max_batch {
            if let Some(p) = st.queue.pop_front() {
                batch.push(p);
                continue;
            }
            let now = Instant::now();
            if (batch.len() == 1 && st.last_group <= 1) || now >= deadline {
                break;
            }
            let (s, waited) = self
                .changed
                .wait_timeout(st, (deadline - now).min(gap))
                .unwrap_or_else(|e| e.into_inner());
            st = s;
            if waited.timed_out() && st.queue.is_empty() {
                break;
            }
        }
        batch
    }

    fn commit(&self, batch: Vec<Pending>) {
        match self.committer.lock() {
            Ok(mut c) => c.commit_batch(batch),
            // A commit panicked while holding the committer: its state is
            // unknown, so nothing more is committed (the waiters get an
            // error when `batch` drops their reply channels).
            Err(_) => self.lock().broken = true,
        }
    }

    /// The committer thread: commits the records a leader handed over, one
    /// group after another, until the queue is empty; stops after shutdown.
    fn serve(&self) {
        let guard = Unwinding(self);
        let mut st = self.lock();
        loop {
            // After shutdown began, a running leader may still hand over:
            // the thread stops only once nobody commits.
            while !st.handed_over && (!st.closed || st.busy) {
                st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
                #[cfg(test)]
                {
                    st.committer_wakes += 1;
                }
            }
            if !st.handed_over {
                break;
            }
            let batch = take(&mut st.queue, self.max_batch);
            drop(st);
            let n = batch.len();
            let started = Instant::now();
            self.commit(batch);
            st = self.lock();
            st.last_group = n;
            st.last_commit = started.elapsed();
            if st.queue.is_empty() {
                st.busy = false;
                st.handed_over = false;
                self.changed.notify_all();
            }
        }
        drop(st);
        drop(guard);
    }

    /// Rotates the signing key between two groups. Blocks.
    pub fn rotate(&self) -> Result<KeyDocument, AuditError> {
        {
            let st = self.lock();
            if st.broken || st.closed {
                return Err(stopped());
            }
        }
        match self.committer.lock() {
            Ok(mut c) => c.rotate(),
            Err(_) => Err(stopped()),
        }
    }

    /// Refuses new records, waits until every queued one is committed, and
    /// stops the committer thread. Blocks.
    pub fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        self.changed.notify_all();
        while st.busy && !st.broken {
            st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Refuses new records and lets the committer thread stop once nothing
    /// is committing, without waiting for it: for a log dropped without
    /// [`close`](Line::close).
    pub fn release(&self) {
        let mut st = self.lock();
        st.closed = true;
        self.changed.notify_all();
    }

    /// False once the line was closed or a commit panicked.
    pub fn accepting(&self) -> bool {
        let st = self.lock();
        !st.broken && !st.closed
    }
}

/// The first `max` queued records.
fn take(queue: &mut VecDeque<Pending>, max: usize) -> Vec<Pending> {
    let n = queue.len().min(max);
    queue.drain(..n).collect()
}

/// Held while a leader or the committer thread commits. Dropped by a panic,
/// it stops the line and fails every queued record, so that no caller waits
/// for a commit that will never come.
struct Unwinding<'a>(&'a Line);

impl Drop for Unwinding<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let mut st = self.0.lock();
        st.broken = true;
        st.busy = false;
        st.handed_over = false;
        for p in st.queue.drain(..) {
            let _ = p.reply.send(Err(stopped()));
        }
        self.0.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_linger_is_capped_at_half_the_last_commit_within_max_wait() {
        let ms = Duration::from_millis;
        // A fast disk: half the 0.3 ms commit, far under the 2 ms default.
        assert_eq!(
            linger_cap(ms(2), Duration::from_micros(300)),
            Duration::from_micros(150)
        );
        // A slow disk: max_wait bounds it.
        assert_eq!(linger_cap(ms(2), ms(10)), ms(2));
        assert_eq!(linger_cap(ms(2), ms(4)), ms(2));
        // max_wait 0 never lingers.
        assert_eq!(linger_cap(Duration::ZERO, ms(10)), Duration::ZERO);
        assert_eq!(idle_gap(ms(2)), Duration::from_micros(200));
    }

    struct Nothing;

    impl Committer for Nothing {
        fn commit_batch(&mut self, _: Vec<Pending>) {}
        fn rotate(&mut self) -> Result<KeyDocument, AuditError> {
            Err(stopped())
        }
    }

    /// A released line's committer thread ends by itself, and the line
    /// takes no more records.
    #[test]
    fn a_released_line_stops_its_thread() {
        let (line, thread) = Line::start(Box::new(Nothing), 8, Duration::ZERO).unwrap();
        line.release();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(thread.join().is_ok()));
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true));
        assert!(!line.accepting());
    }

    /// A record for the line, and the receiver of its answer.
    fn pending() -> (
        Pending,
        tokio::sync::oneshot::Receiver<Result<super::super::writer::Answer, AuditError>>,
    ) {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let permit = Arc::new(tokio::sync::Semaphore::new(1))
            .try_acquire_owned()
            .unwrap();
        let p = Pending {
            record_id: uuid::Uuid::now_v7(),
            canonical: "{}".into(),
            record_hash: [0; 32],
            principal: None,
            input: None,
            enqueued: Instant::now(),
            reply,
            _permit: permit,
        };
        (p, answer)
    }

    /// Records that each find the line idle are committed by their callers
    /// alone, and the committer thread sleeps through them.
    #[test]
    fn commits_led_by_their_callers_leave_the_committer_thread_asleep() {
        let (line, thread) = Line::start(Box::new(Nothing), 8, Duration::ZERO).unwrap();
        // Let the thread reach its wait.
        std::thread::sleep(Duration::from_millis(50));
        for _ in 0..100 {
            let (p, _answer) = pending();
            match line.enqueue(p).unwrap() {
                Role::Leader(batch) => line.lead(batch),
                Role::Follower => panic!("an idle line makes its caller the leader"),
            }
        }
        assert_eq!(line.lock().committer_wakes, 0);
        line.close();
        thread.join().unwrap();

        // A record queued during a commit is still handed over.
        let (line, thread) = Line::start(Box::new(Nothing), 8, Duration::ZERO).unwrap();
        let (first, _a) = pending();
        let Ok(Role::Leader(batch)) = line.enqueue(first) else {
            panic!("an idle line makes its caller the leader");
        };
        let (second, answer) = pending();
        assert!(matches!(line.enqueue(second), Ok(Role::Follower)));
        line.lead(batch);
        // `Nothing` answers nobody: the answer channel closes once the
        // committer thread has taken and committed the second record.
        assert!(answer.blocking_recv().is_err());
        line.close();
        thread.join().unwrap();
    }
}
