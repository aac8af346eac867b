//! Held requests and their review: the durable core of the proxy's `hold`.
//!
//! When a call on a gated route needs a human, the proxy stores it here and
//! waits a while for a reviewer. This module owns that promise: the held
//! request is on disk before [`Reviews::create`] returns, a resolution is
//! single-use, a pending review expires after `review.ttl` (and then counts as
//! rejected), and an approved request is handed out for forwarding **exactly
//! once** ([`Reviews::claim_forward`]), even across restarts: a forward that
//! was in flight when the process stopped becomes `outcome_unknown` and is
//! never retried, because sending a refund twice is worse than asking a human
//! to check once.
//!
//! It does not forward anything itself; the proxy does, and reports back with
//! [`Reviews::finish_forward`]. The rules live in pure transitions
//! (`state`), the storage behind one interface (`backend::Backend`: SQLite by
//! default in `sqlite`, PostgreSQL in `pg` when several replicas share
//! reviews), and this module is the thin async shell (this file, with
//! `open`, `read`, `inner` and `background` beside it): database work runs
//! on blocking threads, waiters are woken by a per-review `watch` channel,
//! and a sweeper task expires reviews at their deadline.
//!
//! With a shared store, the replica that holds a call (its client
//! connection) keeps the first right to forward it: a resolution made on
//! another replica reaches it by `NOTIFY` (and, should that be lost, by
//! polling its own pending reviews every second), and the claim in the
//! database refuses every other replica while the holder's lease is alive.
//! Once it lapses, any replica may claim the approved forward, still once.
//!
//! A review may also be record-only ([`NewReview::forwards`] `false`): a
//! decision answered elsewhere (Envoy ext_authz, AuthZEN) that a person
//! approves or rejects all the same, with the same rules, but for which
//! verdict holds no call. Its approval forwards nothing: the claim refuses
//! it in the database, no listing of approvals to forward shows it, and its
//! forward reads `none`.

mod observe;
mod pg;
mod seal;
pub use seal::SEALED_HEADERS;
mod backend;
mod sqlite;
mod state;

pub use observe::{Observer, ReviewEvent};

pub use seal::KEY_LABEL as SEAL_KEY_LABEL;
mod background;
mod inner;
mod open;
mod read;
#[cfg(test)]
mod tests;
mod view;
use background::{follow_shared, sweep};
use view::view;
pub use view::{
    ApprovalView, ForwardOutcome, ForwardView, HeldRequest, Inspection, NewReview, RequestView,
    Resolution, ReviewError, ReviewView, ReviewsHealth, UpstreamResponse, Viewer, NO_FORWARD,
};

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use serde::{Serialize, Serializer};
use tokio::sync::{mpsc, watch, Notify};

use backend::{Backend, Resolved, Row};
use sqlite::SqliteStore;
use state::Verdict;
pub use state::{ForwardState, ReviewStatus};

/// How much of an upstream answer to a forwarded review is stored.
pub const MAX_STORED_UPSTREAM_BODY: usize = 64 * 1024;

/// A longer `review.ttl` is cut to this, so every deadline stays a
/// printable date.
pub const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 86_400);

/// The most reviews one [`Reviews::list`] call returns.
pub const MAX_LIST_LIMIT: usize = 1000;

/// The longest the sweeper sleeps when no deadline is near; a new review
/// wakes it early.
const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// `review.retention` when the config does not set it.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 86_400);

/// Reviews deleted per sweep at most.
const PURGE_BATCH: usize = 500;

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// How long the sweeper waits after a storage error before it tries again.
const SWEEP_RETRY: Duration = Duration::from_secs(5);

/// The review subsystem: cheap to clone, one per process.
#[derive(Clone)]
pub struct Reviews {
    inner: Arc<Inner>,
}

struct Inner {
    /// The stores calls check out, one each: one SQLite store, whose
    /// single connection serialises this process's writes (the
    /// transactions inside serialise them with other processes); several
    /// PostgreSQL ones, so calls run side by side on the pool. std `Mutex`:
    /// held only to take or return a store.
    stores: Mutex<Vec<Box<dyn Backend>>>,
    /// One permit per store in `stores`.
    store_slots: Arc<tokio::sync::Semaphore>,
    /// The shared store and this replica's id, when reviews live there.
    shared: Option<crate::store::postgres::SharedStore>,
    ttl: Duration,
    /// `review.retention` in milliseconds: resolved and expired reviews,
    /// and their held bodies, are deleted this long after they ended.
    retention_ms: AtomicU64,
    /// `review.approvals`: distinct approvers a review needs.
    approvals_required: std::sync::atomic::AtomicU32,
    /// Reviews stored in every state, as of the sweeper's last run.
    stored: AtomicU64,
    /// One `watch` channel per review somebody waits on. An entry lives while
    /// it has receivers; a resolution is sent into it and never changes.
    waiters: Mutex<HashMap<String, watch::Sender<Option<Resolution>>>>,
    /// Approvals a waiter read from the store before this replica's
    /// bookkeeping of them ran (another store call committed them): theirs
    /// to forward, so that bookkeeping must not queue them. Taken after
    /// `waiters`, never alone.
    taken: Mutex<std::collections::HashSet<String>>,
    /// `(created_at, review_id)` of every stored pending review, so health
    /// and the gauge need no database IO.
    pending: Mutex<BTreeSet<(SystemTime, String)>>,
    last_sweep_error: Mutex<Option<String>>,
    /// Approvals that no live [`Reviews::wait`] took: the background
    /// forwarder's queue. Unbounded: one short id per approval.
    unattended_tx: mpsc::UnboundedSender<String>,
    /// Taken once by [`Reviews::take_unattended_approvals`].
    unattended_rx: Mutex<Option<mpsc::UnboundedReceiver<String>>>,
    metrics: Metrics,
    /// Wakes the sweeper: a new deadline, or this `Inner` being dropped.
    sweeper: Arc<Notify>,
    /// Serialises resolutions (check pending, audit, resolve) in this
    /// process; see [`Reviews::resolution_turn`].
    resolving: Arc<tokio::sync::Mutex<()>>,
    /// Signs the capability tokens of result links.
    result_key: ring::hmac::Key,
    /// Told of every new and resolved review (see `observe`).
    observer: std::sync::OnceLock<Observer>,
}

/// The label the result-link key is derived under from the seal key.
const RESULT_KEY_LABEL: &[u8] = b"verdict/review-result/v1";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug)]
struct Metrics {
    held: Gauge,
    resolutions: Family<OutcomeLabels, Counter>,
    hold_duration: Histogram,
}

// === impl Reviews ===

impl Reviews {
    /// The capability token of a review's result link: an HMAC of its id
    /// under a key derived from the data dir's secret, so every 202 for the
    /// same review (a retried call joins it) carries the same link, and
    /// nobody without the secret can forge one.
    pub fn result_token(&self, id: &str) -> String {
        hex::encode(ring::hmac::sign(&self.inner.result_key, id.as_bytes()))
    }

    /// What the held caller may learn of its call, given its result token:
    /// the review (status, forward) and, once forwarded, the upstream's
    /// stored answer. `None` for an unknown id or a wrong token.
    pub async fn result(
        &self,
        id: &str,
        token: &str,
    ) -> Result<Option<(ReviewView, Option<UpstreamResponse>)>, ReviewError> {
        let Ok(tag) = hex::decode(token) else {
            return Ok(None);
        };
        if ring::hmac::verify(&self.inner.result_key, id.as_bytes(), &tag).is_err() {
            return Ok(None);
        }
        let Some(row) = self.load(id).await? else {
            return Ok(None);
        };
        let review_id = id.to_string();
        let upstream = on_store(&self.inner, move |s, _| s.upstream(&review_id)).await?;
        Ok(Some((
            view(&row, SystemTime::now(), self.approvals_required()),
            upstream.map(|(_, u)| u),
        )))
    }

    /// `review.approvals`: how many distinct people (API keys) must approve
    /// a review before it is approved and forwarded (at least 1).
    pub fn set_approvals(&self, required: u32) {
        self.inner
            .approvals_required
            .store(required.max(1), Ordering::Relaxed);
    }

    /// Distinct approvals a review needs.
    pub fn approvals_required(&self) -> u32 {
        self.inner.approvals_required.load(Ordering::Relaxed)
    }

    /// Sets `review.retention`: how long a resolved or expired review (and
    /// its held body) is kept before the sweeper deletes it.
    pub fn set_retention(&self, retention: Duration) {
        self.inner
            .retention_ms
            .store(duration_ms(retention), Ordering::Relaxed);
        self.inner.sweeper.notify_one();
    }

    /// Holds a request: stores a pending review, durable before it returns.
    pub async fn create(&self, new: NewReview) -> Result<ReviewView, ReviewError> {
        let review_id = new.review_id.unwrap_or_else(uuid::Uuid::new_v4).to_string();
        let now = SystemTime::now();
        let expires_at = now.checked_add(self.inner.ttl.min(MAX_TTL)).unwrap_or(now);
        let row = on_store(&self.inner, move |s, inner| {
            let (row, _) = s.hold(&review_id, now, expires_at, &new, false)?;
            inner.created(&row);
            Ok(row)
        })
        .await?;
        Ok(view(&row, now, self.approvals_required()))
    }

    /// Holds a request unless the same call is already held: when a pending
    /// review of the same owner and route holds exactly this method, path
    /// and body (a client that gave up waiting and retried), returns that
    /// review and `true` instead of storing a second one. Two reviews of one
    /// retried refund could both be approved and forward it twice; joined,
    /// one approval forwards it once.
    ///
    /// The returned [`Waiter`] was listening before the review could be
    /// seen, so an approval that comes at once (even on another replica) is
    /// the caller's to forward, never the unattended queue's.
    ///
    /// A record-only review ([`NewReview::forwards`] `false`) joins only a
    /// record-only one, and its caller, which holds no call, drops the
    /// waiter: that is harmless, since nothing of such a review is ever
    /// queued for forwarding.
    pub async fn hold(&self, new: NewReview) -> Result<(ReviewView, bool, Waiter), ReviewError> {
        let review_id = new.review_id.unwrap_or_else(uuid::Uuid::new_v4).to_string();
        let forwards = new.forwards;
        let sub = Subscription::new(&self.inner, &review_id);
        let (view, joined) = self.store_or_join(review_id, new).await?;
        let mut sub = if view.review_id == sub.id {
            sub
        } else {
            Subscription::new(&self.inner, &view.review_id)
        };
        // A join finds only a review of the same kind.
        sub.forwards = forwards;
        Ok((view, joined, Waiter { sub }))
    }

    async fn store_or_join(
        &self,
        review_id: String,
        new: NewReview,
    ) -> Result<(ReviewView, bool), ReviewError> {
        let now = SystemTime::now();
        let expires_at = now.checked_add(self.inner.ttl.min(MAX_TTL)).unwrap_or(now);
        let (row, joined) = on_store(&self.inner, move |s, inner| {
            let (row, joined) = s.hold(&review_id, now, expires_at, &new, true)?;
            if !joined {
                inner.created(&row);
            }
            Ok((row, joined))
        })
        .await?;
        Ok((view(&row, now, self.approvals_required()), joined))
    }

    /// A turn to resolve a review. The Review API checks that the review is
    /// pending, audits the resolution and then stores it; holding the turn
    /// across those steps means two racing approvals cannot both pass the
    /// check, so the loser gets its 409 before anything is audited, and the
    /// expiry sweeper (which takes the same turn) cannot expire the review
    /// between the audit record and the stored resolution. The caller checks
    /// and resolves as of one instant ([`Reviews::get_at`], then
    /// [`Reviews::resolve`] with the same `now`), so a deadline that passes
    /// while the record is written does not turn an audited approval into an
    /// expiry. Resolutions are human-paced, so one turn for all reviews is
    /// enough.
    ///
    /// With a shared store the turn is also an advisory lock in the
    /// database, so it holds across replicas: two replicas approving the
    /// same review at once audit one approval and answer the other 409.
    pub async fn resolution_turn(&self) -> Result<Turn, ReviewError> {
        Turn::take(&self.inner).await
    }

    /// Waits up to `timeout` for the review to be resolved. Returns at once
    /// when it is resolved already, `None` on timeout.
    ///
    /// The held connection's wait decides who forwards: an approval that
    /// wakes this wait is this caller's to forward (it is not queued for the
    /// background); after `None`, or if this future is dropped, a later
    /// approval goes to [`Reviews::take_unattended_approvals`] instead. In
    /// every case [`Reviews::claim_forward`] stays the exactly-once gate.
    pub async fn wait(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<Option<Resolution>, ReviewError> {
        // Subscribe before reading, so a resolution between the read and the
        // wait is still seen.
        let sub = Subscription::new(&self.inner, id);
        self.wait_on(Waiter { sub }, timeout, std::future::pending())
            .await
    }

    /// [`Reviews::wait`] on the review a [`Reviews::hold`] returned, which
    /// also gives up (as at its timeout) when `stop` resolves first: a
    /// drain answers the held caller instead of dropping it.
    pub async fn wait_on(
        &self,
        waiter: Waiter,
        timeout: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<Option<Resolution>, ReviewError> {
        let mut sub = waiter.sub;
        let id = sub.id.clone();
        let id = id.as_str();
        let row = self.load(id).await?.ok_or(ReviewError::NotFound)?;
        sub.forwards = row.forwards;
        let status = state::effective_status(row.status, row.expires_at, SystemTime::now());
        if let Some(resolution) = Resolution::of(status) {
            sub.read_from_store(resolution, row.created_at);
            return Ok(Some(resolution));
        }
        let woken = tokio::time::timeout(timeout, async {
            tokio::select! {
                r = sub.rx.wait_for(Option::is_some) => Some(r.map(|resolution| *resolution)),
                () = stop => None,
            }
        })
        .await
        .ok()
        .flatten()
        .ok_or(());
        match woken {
            Ok(Ok(resolution)) => {
                sub.delivered = true;
                Ok(resolution)
            }
            // The sender lives while we hold a receiver; read again anyway.
            Ok(Err(_)) => {
                let row = self.load(id).await?.ok_or(ReviewError::NotFound)?;
                let resolution = Resolution::of(state::effective_status(
                    row.status,
                    row.expires_at,
                    SystemTime::now(),
                ));
                match resolution {
                    Some(r) => sub.read_from_store(r, row.created_at),
                    None => sub.delivered = true,
                }
                Ok(resolution)
            }
            Err(_elapsed) => Ok(sub.give_up()),
        }
    }

    /// A reviewer approves or rejects. Single use: a second resolution is
    /// `AlreadyResolved`, and a review past its deadline is stored as expired
    /// and answered with `Expired`. Wakes every waiter.
    pub async fn resolve(
        &self,
        id: &str,
        approve: bool,
        by: &str,
        reviewer: &str,
        note: Option<String>,
        now: SystemTime,
    ) -> Result<ReviewView, ReviewError> {
        let verdict = if approve {
            Verdict::Approve
        } else {
            Verdict::Reject
        };
        let (review_id, reviewer_name, by) = (id.to_string(), reviewer.to_string(), by.to_string());
        let required = self.approvals_required();
        let resolved = on_store(&self.inner, move |s, inner| {
            let who = backend::Resolver {
                by: &by,
                reviewer: &reviewer_name,
                note: note.as_deref(),
                required,
            };
            let resolved = s.resolve(&review_id, verdict, &who, now)?;
            match &resolved {
                Resolved::Partial(row) => {
                    let required = row.approvals_required.unwrap_or(required);
                    tracing::info!(review_id = %row.review_id, approvals = row.approvals.len(), required, by = %by, "approval recorded; more approvers needed");
                }
                Resolved::Stored(row) => {
                    tracing::info!(review_id = %row.review_id, status = %row.status, reviewer = %reviewer_name, "review resolved");
                    inner.resolved(row);
                    // Its retention starts now: the sweeper plans its next
                    // run again (it may have planned for pending ones only).
                    inner.sweeper.notify_one();
                }
                Resolved::ExpiredNow(row) => {
                    tracing::info!(review_id = %row.review_id, "review expired");
                    inner.resolved(row);
                }
            }
            Ok(resolved)
        })
        .await?;
        match resolved {
            Resolved::Stored(row) | Resolved::Partial(row) => Ok(view(&row, now, required)),
            Resolved::ExpiredNow(_) => Err(ReviewError::Expired),
        }
    }

    /// Claims the forward of an approved review: returns the held request
    /// exactly once, `None` when it is not approved or was claimed before,
    /// and always for a record-only review (it holds no call).
    ///
    /// Run the claim, the forward and [`Reviews::finish_forward`] in a
    /// spawned task: if this future is dropped after the claim committed, the
    /// request is lost to forwarding (it stays `started`, and becomes
    /// `outcome_unknown` at the next start).
    pub async fn claim_forward(&self, id: &str) -> Result<Option<HeldRequest>, ReviewError> {
        let review_id = id.to_string();
        on_store(&self.inner, move |s, _| {
            s.claim(&review_id, SystemTime::now())
        })
        .await
    }

    /// Records how a claimed forward ended.
    pub async fn finish_forward(
        &self,
        id: &str,
        outcome: ForwardOutcome,
    ) -> Result<(), ReviewError> {
        if let ForwardOutcome::Failed { error } = &outcome {
            tracing::warn!(
                review_id = id,
                error,
                "forward of an approved review failed; not retried"
            );
        }
        let review_id = id.to_string();
        on_store(&self.inner, move |s, _| {
            s.finish(&review_id, &outcome, SystemTime::now())
        })
        .await
    }

    /// Pending count and the age of the oldest, from memory.
    pub fn health(&self) -> ReviewsHealth {
        let (pending, oldest) = {
            let pending = lock(&self.inner.pending);
            (pending.len(), pending.first().map(|(t, _)| *t))
        };
        ReviewsHealth {
            pending,
            stored: self.inner.stored.load(Ordering::Relaxed),
            oldest_pending_age: oldest
                .map(|t| SystemTime::now().duration_since(t).unwrap_or_default()),
            last_error: lock(&self.inner.last_sweep_error).clone(),
        }
    }

    /// Registers `verdict_review_held_requests` (gauge),
    /// `verdict_review_resolutions_total{outcome}` and
    /// `verdict_review_hold_duration_seconds`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        let m = &self.inner.metrics;
        registry.register(
            "verdict_review_held_requests",
            "Reviews still pending on this replica: held requests, and the record-only reviews of ext_authz and AuthZEN",
            m.held.clone(),
        );
        registry.register(
            "verdict_review_resolutions",
            "Review resolutions by outcome (approved, rejected, expired)",
            m.resolutions.clone(),
        );
        registry.register(
            "verdict_review_hold_duration_seconds",
            "Time from holding a request to its resolution",
            m.hold_duration.clone(),
        );
    }

    /// The queue of approvals that no held connection will forward: the
    /// review's hold timed out (or its connection went away, or it was
    /// pending across a restart) before a reviewer approved it. The
    /// background forwarder drains it. `Some` only on the first call.
    pub fn take_unattended_approvals(&self) -> Option<mpsc::UnboundedReceiver<String>> {
        lock(&self.inner.unattended_rx).take()
    }

    /// Approved reviews whose forward nobody has claimed, oldest approval
    /// first: the proxy forwards these in the background (approved after
    /// the hold timed out, or before a restart). Never a record-only one.
    pub async fn approved_unforwarded(&self) -> Result<Vec<String>, ReviewError> {
        on_store(&self.inner, |s, _| s.approved_unforwarded()).await
    }

    async fn load(&self, id: &str) -> Result<Option<Row>, ReviewError> {
        let review_id = id.to_string();
        on_store(&self.inner, move |s, _| s.get(&review_id)).await
    }
}

impl std::fmt::Debug for Reviews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reviews")
            .field("ttl", &self.inner.ttl)
            .finish_non_exhaustive()
    }
}

impl crate::telemetry::health::Component for Reviews {
    fn name(&self) -> &'static str {
        "reviews"
    }

    fn report(&self) -> crate::telemetry::health::Report {
        use crate::telemetry::health::{Report, Status};
        let h = self.health();
        let status = if h.last_error.is_some() {
            Status::Degraded
        } else {
            Status::Ok
        };
        let mut report = Report::new(status)
            .fact("pending", h.pending)
            .fact("stored", h.stored);
        if let Some(age) = h.oldest_pending_age {
            report = report.fact("oldest_pending_age_s", age.as_secs());
        }
        if let Some(err) = h.last_error {
            report = report.fact("last_error", err);
        }
        report
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Lets the sweeper see that it is alone and stop.
        self.sweeper.notify_one();
    }
}

/// Runs `f` on the store on a blocking thread.
///
/// `f` also gets the in-memory state, so bookkeeping that must follow a
/// commit (waking waiters, health, metrics) happens on that same thread:
/// a blocking task runs to the end even when the caller's future is dropped
/// (a reviewer hanging up mid-approve must still wake the held request).
async fn on_store<T, F>(inner: &Arc<Inner>, f: F) -> Result<T, ReviewError>
where
    T: Send + 'static,
    F: FnOnce(&mut dyn Backend, &Inner) -> Result<T, ReviewError> + Send + 'static,
{
    let inner = Arc::clone(inner);
    // The permit moves into the task: a caller that goes away does not
    // free its slot while the task still holds the store.
    let permit = Arc::clone(&inner.store_slots)
        .acquire_owned()
        .await
        .map_err(|_| ReviewError::Storage("the review store is closed".into()))?;
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let mut out = Checkout::take(&inner)?;
        match out.store.as_mut() {
            Some(store) => f(store.as_mut(), &inner),
            None => Err(ReviewError::Storage("no review store free".into())),
        }
    })
    .await
    .map_err(|e| ReviewError::Storage(format!("storage task failed: {e}")))?
}

/// The most PostgreSQL review calls one replica runs at once.
const MAX_SHARED_STORE_CALLS: usize = 8;

/// A store taken from [`Inner::stores`], returned when dropped (also when
/// the call panics).
struct Checkout<'a> {
    inner: &'a Inner,
    store: Option<Box<dyn Backend>>,
}

impl<'a> Checkout<'a> {
    fn take(inner: &'a Inner) -> Result<Checkout<'a>, ReviewError> {
        let store = lock(&inner.stores)
            .pop()
            .ok_or_else(|| ReviewError::Storage("no review store free".into()))?;
        Ok(Checkout {
            inner,
            store: Some(store),
        })
    }
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        if let Some(store) = self.store.take() {
            lock(&self.inner.stores).push(store);
        }
    }
}

/// A turn to resolve a review (see [`Reviews::resolution_turn`]).
pub struct Turn {
    _shared: Option<pg::SharedTurn>,
    _local: tokio::sync::OwnedMutexGuard<()>,
}

impl Turn {
    async fn take(inner: &Inner) -> Result<Turn, ReviewError> {
        let local = Arc::clone(&inner.resolving).lock_owned().await;
        let shared = match &inner.shared {
            Some(shared) => Some(pg::SharedTurn::take(shared).await?),
            None => None,
        };
        Ok(Turn {
            _shared: shared,
            _local: local,
        })
    }
}

fn sealer(seal_key: &[u8; 32]) -> Result<seal::Sealer, ReviewError> {
    seal::Sealer::new(seal_key)
        .map_err(|_| ReviewError::Storage("the review seal key is not usable".into()))
}

/// A caller listening for a review's resolution since before the review
/// was stored (see [`Reviews::hold`]); give it to [`Reviews::wait_on`].
/// Dropped unused, it passes an approval it was sent on to the unattended
/// queue, as a wait that ends does; a record-only review's passes nothing.
pub struct Waiter {
    sub: Subscription,
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter")
            .field("review_id", &self.sub.id)
            .finish()
    }
}

/// A waiter's receiver. Whether a waiter or the background forwarder owns
/// an approval is decided under the `waiters` lock: an approval sent to a
/// live receiver belongs to it, and a receiver that leaves without taking
/// the approval sent to it passes it on to the unattended queue.
struct Subscription {
    inner: Arc<Inner>,
    id: String,
    rx: watch::Receiver<Option<Resolution>>,
    /// The caller got the resolution, so it owns an approval's forward.
    delivered: bool,
    /// Whether the review has a forward at all (`false`: record-only, so
    /// an approval stranded here is nobody's to forward).
    forwards: bool,
}

impl Subscription {
    fn new(inner: &Arc<Inner>, id: &str) -> Subscription {
        let rx = lock(&inner.waiters)
            .entry(id.to_string())
            .or_insert_with(|| watch::channel(None).0)
            .subscribe();
        Subscription {
            inner: Arc::clone(inner),
            id: id.to_string(),
            rx,
            delivered: false,
            forwards: true,
        }
    }

    /// The caller learned the resolution by reading the store. If this
    /// replica's bookkeeping of it has not run yet (the channel is still
    /// empty), an approval is marked taken, so that bookkeeping, finding
    /// no waiter, does not also queue it for the background forwarder.
    /// (Still pending in this replica's memory means the bookkeeping has
    /// not run; an approval made long ago is nobody's to mark.)
    fn read_from_store(&mut self, resolution: Resolution, created_at: SystemTime) {
        self.delivered = true;
        // Lock order: `waiters`, then `pending`, then `taken`.
        let _waiters = lock(&self.inner.waiters);
        if resolution.is_approved()
            && self.rx.borrow().is_none()
            && lock(&self.inner.pending).contains(&(created_at, self.id.clone()))
        {
            lock(&self.inner.taken).insert(self.id.clone());
        }
    }

    /// Ends the wait at its timeout: takes a resolution that raced in, or
    /// unsubscribes so that a later approval goes to the unattended queue.
    fn give_up(&mut self) -> Option<Resolution> {
        let mut waiters = lock(&self.inner.waiters);
        let current = *self.rx.borrow();
        if current.is_some() {
            self.delivered = true;
            return current;
        }
        drop(std::mem::replace(&mut self.rx, watch::channel(None).1));
        if waiters
            .get(&self.id)
            .is_some_and(|tx| tx.receiver_count() == 0)
        {
            waiters.remove(&self.id);
        }
        None
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut waiters = lock(&self.inner.waiters);
        // An approval was sent to us (so nobody queued it) but the caller
        // never saw it: its future was dropped, e.g. the client hung up.
        let stranded = !self.delivered && *self.rx.borrow() == Some(Resolution::Approved);
        drop(std::mem::replace(&mut self.rx, watch::channel(None).1));
        let alone = waiters
            .get(&self.id)
            .is_none_or(|tx| tx.receiver_count() == 0);
        if alone {
            waiters.remove(&self.id);
        }
        drop(waiters);
        if stranded && alone && self.forwards {
            self.inner.unattended(&self.id);
        }
    }
}

// === impl Metrics ===

impl Metrics {
    fn new() -> Metrics {
        Metrics {
            held: Gauge::default(),
            resolutions: Family::default(),
            // 1 s to about 18 h, by factors of 4.
            hold_duration: Histogram::new(exponential_buckets(1.0, 4.0, 9)),
        }
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Locks, ignoring poisoning: a panic elsewhere cannot leave these maps or
/// the connection half-updated in a harmful way (a transaction that did not
/// commit rolls back when dropped).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
