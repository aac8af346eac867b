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
//! (`state`), the storage behind one interface (`store::Backend`: SQLite by
//! default, PostgreSQL in `pg` when several replicas share reviews), and
//! this file is the thin async shell: database work runs on blocking
//! threads, waiters are woken by a per-review `watch` channel, and a sweeper
//! task expires reviews at their deadline.
//!
//! With a shared store, the replica that holds a call (its client
//! connection) keeps the first right to forward it: a resolution made on
//! another replica reaches it by `NOTIFY` (and, should that be lost, by
//! polling its own pending reviews every second), and the claim in the
//! database refuses every other replica while the holder's lease is alive.
//! Once it lapses, any replica may claim the approved forward, still once.

mod observe;
mod pg;
mod seal;
pub use seal::SEALED_HEADERS;
mod state;
mod store;

pub use observe::{Observer, ReviewEvent};

pub use seal::KEY_LABEL as SEAL_KEY_LABEL;
#[cfg(test)]
mod tests;

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

use state::Verdict;
pub use state::{ForwardState, ReviewStatus};
use store::{Backend, Resolved, Row, SqliteStore};

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

/// A request exactly as the proxy will forward it once approved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRequest {
    pub method: String,
    /// Path and query, e.g. `/api/orders/7/refunds?dry=1`.
    pub path: String,
    /// In the order received; values are bytes because HTTP allows non-UTF-8.
    /// Store them as they should be forwarded (the proxy decides which
    /// `X-Verdict-*` and hop-by-hop headers to add or strip).
    pub headers: Vec<(String, Bytes)>,
    pub body: Bytes,
}

// === impl HeldRequest ===

impl HeldRequest {
    /// `sha256:<hex>` of the request's retry identity: the method, the
    /// path and query, the body and every header (name lowercased, value,
    /// in order) except those `skip` names (lowercase): the ones that change
    /// from one try to the next (the proxy's `Route::join_skips`).
    /// Hop-by-hop headers are not held at all. A retried call joins a
    /// pending review only when
    /// this matches, so a call joins only the review of the same request
    /// from the same caller, however that caller authenticates (an
    /// `X-Api-Key` as much as an `Authorization`). Each part is
    /// length-prefixed, so no two requests encode alike.
    pub fn join_key(&self, skip: impl Fn(&str) -> bool) -> String {
        use sha2::{Digest, Sha256};
        fn field(h: &mut Sha256, bytes: &[u8]) {
            h.update(u64::try_from(bytes.len()).unwrap_or(u64::MAX).to_be_bytes());
            h.update(bytes);
        }
        let mut h = Sha256::new();
        field(&mut h, self.method.as_bytes());
        field(&mut h, self.path.as_bytes());
        for (name, value) in &self.headers {
            let name = name.to_ascii_lowercase();
            if skip(&name) {
                continue;
            }
            field(&mut h, name.as_bytes());
            field(&mut h, value);
        }
        field(&mut h, &self.body);
        format!("sha256:{}", hex::encode(h.finalize()))
    }

    /// The `request_hash` of a gated proxy call: `sha256:<hex>` over the
    /// method, the path and query, the number of headers, every header name
    /// and value in order, and the body, each length-prefixed (u64
    /// big-endian) so no two requests encode alike. The headers are the
    /// ones the upstream receives: hop-by-hop headers and any `X-Verdict-*`
    /// a client sent are removed, `X-Forwarded-*` and `X-Request-Id` are
    /// added, and verdict's own `X-Verdict-*` headers, which depend on the
    /// decision, are added after hashing, when the call is forwarded.
    ///
    /// The proxy takes it before deciding, so the decision's audit record
    /// and, when the call is held, its review carry the same hash. The
    /// review stores it, shows it to reviewers (an approval is bound to
    /// these exact bytes) and checks it again before the request is handed
    /// out.
    pub fn hash(&self) -> String {
        use sha2::{Digest, Sha256};
        fn field(h: &mut Sha256, bytes: &[u8]) {
            h.update(u64::try_from(bytes.len()).unwrap_or(u64::MAX).to_be_bytes());
            h.update(bytes);
        }
        let mut h = Sha256::new();
        field(&mut h, self.method.as_bytes());
        field(&mut h, self.path.as_bytes());
        h.update(
            u64::try_from(self.headers.len())
                .unwrap_or(u64::MAX)
                .to_be_bytes(),
        );
        for (name, value) in &self.headers {
            field(&mut h, name.as_bytes());
            field(&mut h, value);
        }
        field(&mut h, &self.body);
        format!("sha256:{}", hex::encode(h.finalize()))
    }
}

/// Everything needed to hold a request for review.
#[derive(Debug, Clone)]
pub struct NewReview {
    /// Lets the caller pick the id first (e.g. to name it in the decision's
    /// audit record); a fresh UUID v4 when `None`.
    pub review_id: Option<uuid::Uuid>,
    /// The API key name of the app whose call is held: the review's tenant.
    pub owner: String,
    /// The policy route name.
    pub route: String,
    /// The action type, e.g. `refund.create`.
    pub action: String,
    /// Why the decision asked for review, shown to the reviewer.
    pub reason: String,
    /// The messages of the policy rules that fired, shown to the reviewer.
    pub rules: Vec<String>,
    /// The audit record of the original decision.
    pub record_id: Option<String>,
    pub request: HeldRequest,
    /// What the reviewer is shown of the decision
    /// (the decision path's `detail` snapshot); stored as given.
    pub detail: Option<serde_json::Value>,
    /// The API key names found in the held call's credential headers, none
    /// of whom may resolve it: four eyes.
    pub requesters: Vec<String>,
    /// The retry identity a pending review is joined by
    /// ([`HeldRequest::join_key`]).
    pub join_key: String,
    /// Distinct approvals the held call needs, when its action's policy
    /// sets `approvals`; `None`: the server's `review.approvals`.
    pub approvals_required: Option<u32>,
    /// Headers whose values are sealed at rest besides `Authorization`,
    /// `Cookie` and `Proxy-Authorization`: the route's
    /// `credential_headers` (lowercase).
    pub credential_headers: Vec<String>,
}

// === impl NewReview ===

impl NewReview {
    /// Whether the value of header `name` (lowercase) is sealed at rest.
    /// `X_Api_Key` counts as `X-Api-Key`, as CGI-style servers read it.
    pub fn sealed(&self, name: &str) -> bool {
        let dashed = name.replace('_', "-");
        seal::Sealer::applies(&dashed) || self.credential_headers.contains(&dashed)
    }
}

/// A review with what a reviewer needs to judge it: the held request (its
/// credential headers sealed, shown as `[sealed]`), the decision snapshot,
/// and the upstream's answer once the forward is done.
#[derive(Debug, Clone)]
pub struct Inspection {
    pub view: ReviewView,
    /// Path and query.
    pub path: String,
    pub headers: Vec<(String, Bytes)>,
    pub body: Bytes,
    pub detail: Option<serde_json::Value>,
    pub upstream: Option<UpstreamResponse>,
}

/// How a review ended, as seen by a waiter. `Expired` counts as rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    Approved,
    Rejected,
    Expired,
}

/// How a claimed forward ended, reported by the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardOutcome {
    /// The upstream answered. Only the first [`MAX_STORED_UPSTREAM_BODY`]
    /// bytes of the body are stored.
    Done {
        status: u16,
        body: Bytes,
        content_type: Option<String>,
    },
    /// The forward failed (connect error, timeout, ...). Whether the upstream
    /// acted on it is unknown, so the review's forward becomes
    /// `outcome_unknown` and is never retried.
    Failed { error: String },
}

/// Who is looking: an app key sees only its own reviews, a `review`-scope
/// key sees all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    pub name: String,
    pub sees_all: bool,
}

/// A review as the Review API shows it. Never carries the held headers or
/// body: they may hold secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReviewView {
    pub review_id: String,
    pub status: ReviewStatus,
    #[serde(serialize_with = "ser_time")]
    pub created_at: SystemTime,
    #[serde(serialize_with = "ser_time")]
    pub expires_at: SystemTime,
    pub route: String,
    pub action: String,
    pub reason: String,
    /// The messages of the policy rules that sent the call to review (as in
    /// the decision record's `detail.rules`); empty when none did.
    pub rules: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reviewer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_opt_time"
    )]
    pub resolved_at: Option<SystemTime>,
    pub forward: ForwardView,
    pub request: RequestView,
    /// Approvals so far (one per API key), oldest first.
    pub approvals: Vec<ApprovalView>,
    /// Distinct approvals the review needs: its action's `approvals`, or
    /// else the server's `review.approvals`.
    pub approvals_required: u32,
    /// The tenant, for the caller's audit records; not part of the JSON.
    #[serde(skip)]
    pub owner: String,
    /// The API keys behind the held call; not part of the JSON.
    #[serde(skip)]
    pub requesters: Vec<String>,
}

/// One approval of a review.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalView {
    /// The API key name that approved.
    pub by: String,
    pub reviewer: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(serialize_with = "ser_time")]
    pub at: SystemTime,
}

/// The forward part of a [`ReviewView`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ForwardView {
    /// `not_started`, `started`, `done` or `outcome_unknown`.
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<u16>,
}

/// The request part of a [`ReviewView`]: what was held, not its contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestView {
    pub method: String,
    /// The path only: the query string is left out like the headers and
    /// body, since it may carry secrets too.
    pub path: String,
    /// [`HeldRequest::hash`] of the held request: what an approval
    /// releases, and the `request_hash` of the decision's audit record.
    pub hash: String,
}

/// The upstream's answer to a forwarded review, as stored: at most
/// [`MAX_STORED_UPSTREAM_BODY`] bytes of the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamResponse {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Bytes,
}

/// Facts for `/health/detailed`, from memory (no database IO).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewsHealth {
    pub pending: usize,
    /// Reviews stored in every state (as of the sweeper's last run).
    pub stored: u64,
    pub oldest_pending_age: Option<Duration>,
    /// The sweeper's last storage error, cleared by its next good run.
    pub last_error: Option<String>,
}

/// Why a review operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    /// Unknown id (the Review API answers 404).
    #[error("review not found")]
    NotFound,
    /// A second resolution (the Review API answers 409).
    #[error("review is already {0}")]
    AlreadyResolved(ReviewStatus),
    /// The key behind the held call tried to resolve it (the Review API
    /// answers 403): four eyes.
    #[error("the key that made a held call cannot resolve it; another reviewer must")]
    OwnCall,
    /// This key approved the review before and more approvers are needed
    /// (the Review API answers 409).
    #[error("this key already approved the review; another reviewer must approve it")]
    AlreadyApprovedBy,
    /// The review expired before anyone resolved it (the Review API answers
    /// 409); an expired review counts as rejected.
    #[error("review expired before it was resolved")]
    Expired,
    /// `finish_forward` on a review whose forward is not in flight.
    #[error("review forward is not in flight (it is {0})")]
    NotForwarding(&'static str),
    /// A stored held request no longer matches the hash taken when it was
    /// held; it is not handed out.
    #[error("held request of review {0} fails its integrity check")]
    Corrupt(String),
    /// The database failed. The text is for logs, not clients.
    #[error("review storage failed: {0}")]
    Storage(String),
    /// The shared store cannot be reached (the Review API answers 503; a
    /// hold fails closed).
    #[error("review storage unavailable: {0}")]
    Unavailable(String),
    /// [`Reviews::open`] was called outside a Tokio runtime.
    #[error("the review store must be opened inside a tokio runtime")]
    NoRuntime,
}

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
    shared: Option<crate::store::postgres::Shared>,
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
    /// Opens the review tables in the SQLite file at `db_path` (shared with
    /// other subsystems), turns any forward left `started` into
    /// `outcome_unknown`, and starts the expiry sweeper, which stops when the
    /// last clone is dropped. Blocking file IO: call it at start-up.
    ///
    /// `seal_key` seals the held requests' credentials at rest (see
    /// `seal`); it must be the same on every start, or pending reviews
    /// cannot be forwarded.
    pub fn open(db_path: &Path, ttl: Duration, seal_key: [u8; 32]) -> Result<Reviews, ReviewError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ReviewError::NoRuntime)?;
        let (store, recovered) = SqliteStore::open(db_path, sealer(&seal_key)?)?;
        Self::start(
            runtime,
            vec![Box::new(store)],
            None,
            recovered,
            ttl,
            &seal_key,
        )
    }

    /// Opens the review tables of a shared store (PostgreSQL), where
    /// several replicas hold, list and resolve the same reviews. Every
    /// replica must have the same `seal_key` (the data dir's secret, shared
    /// as a Kubernetes secret), or another replica's held credentials do
    /// not open. Blocking: call it at start-up, on a blocking thread or
    /// with `block_in_place`.
    pub fn open_shared(
        shared: crate::store::postgres::Shared,
        ttl: Duration,
        seal_key: [u8; 32],
    ) -> Result<Reviews, ReviewError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ReviewError::NoRuntime)?;
        let mut stores: Vec<Box<dyn Backend>> = Vec::new();
        // Half the pool at most: the turn, the jobs, the lease and the
        // checkpoints need connections too.
        for _ in 0..(shared.pool().status().max_size / 2).clamp(1, MAX_SHARED_STORE_CALLS) {
            stores.push(Box::new(pg::PgStore::new(
                shared.clone(),
                sealer(&seal_key)?,
            )));
        }
        let recovered = match stores.first_mut() {
            Some(store) => store.recover_lapsed()?,
            None => Vec::new(),
        };
        let reviews = Self::start(
            runtime.clone(),
            stores,
            Some(shared.clone()),
            recovered,
            ttl,
            &seal_key,
        )?;
        runtime.spawn(follow_shared(
            Arc::downgrade(&reviews.inner),
            shared.listen(crate::store::postgres::REVIEWS_CHANNEL),
            shared.lease(),
        ));
        Ok(reviews)
    }

    fn start(
        runtime: tokio::runtime::Handle,
        mut stores: Vec<Box<dyn Backend>>,
        shared: Option<crate::store::postgres::Shared>,
        recovered: Vec<String>,
        ttl: Duration,
        seal_key: &[u8; 32],
    ) -> Result<Reviews, ReviewError> {
        for review_id in &recovered {
            tracing::warn!(
                review_id,
                "forward was in flight when the process stopped: outcome unknown, not retried"
            );
        }
        let pending: BTreeSet<(SystemTime, String)> = match stores.first_mut() {
            Some(store) => store.pending()?.into_iter().collect(),
            None => return Err(ReviewError::Storage("no review store".into())),
        };
        let slots = stores.len();
        let metrics = Metrics::new();
        metrics.held.set(gauge_value(pending.len()));
        let (unattended_tx, unattended_rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            stores: Mutex::new(stores),
            store_slots: Arc::new(tokio::sync::Semaphore::new(slots)),
            shared,
            ttl,
            retention_ms: AtomicU64::new(duration_ms(DEFAULT_RETENTION)),
            approvals_required: std::sync::atomic::AtomicU32::new(1),
            stored: AtomicU64::new(0),
            waiters: Mutex::new(HashMap::new()),
            taken: Mutex::new(std::collections::HashSet::new()),
            pending: Mutex::new(pending),
            last_sweep_error: Mutex::new(None),
            unattended_tx,
            unattended_rx: Mutex::new(Some(unattended_rx)),
            metrics,
            sweeper: Arc::new(Notify::new()),
            resolving: Arc::new(tokio::sync::Mutex::new(())),
            result_key: {
                let base = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, seal_key);
                let derived = ring::hmac::sign(&base, RESULT_KEY_LABEL);
                ring::hmac::Key::new(ring::hmac::HMAC_SHA256, derived.as_ref())
            },
            observer: std::sync::OnceLock::new(),
        });
        runtime.spawn(sweep(Arc::downgrade(&inner), Arc::clone(&inner.sweeper)));
        Ok(Reviews { inner })
    }

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
    pub async fn hold(&self, new: NewReview) -> Result<(ReviewView, bool, Waiter), ReviewError> {
        let review_id = new.review_id.unwrap_or_else(uuid::Uuid::new_v4).to_string();
        let sub = Subscription::new(&self.inner, &review_id);
        let (view, joined) = self.store_or_join(review_id, new).await?;
        let sub = if view.review_id == sub.id {
            sub
        } else {
            Subscription::new(&self.inner, &view.review_id)
        };
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
            let who = store::Resolver {
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
    /// exactly once, `None` when it is not approved or was claimed before.
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

    /// One review, or `None` when it is unknown or not `viewer`'s.
    pub async fn get(&self, id: &str, viewer: &Viewer) -> Result<Option<ReviewView>, ReviewError> {
        self.get_at(id, viewer, SystemTime::now()).await
    }

    /// [`Reviews::get`] with the status as of `now`.
    pub async fn get_at(
        &self,
        id: &str,
        viewer: &Viewer,
        now: SystemTime,
    ) -> Result<Option<ReviewView>, ReviewError> {
        let row = self.load(id).await?;
        Ok(row
            .filter(|r| viewer.sees(&r.owner))
            .map(|r| view(&r, now, self.approvals_required())))
    }

    /// The decision snapshots of the reviews in `views` (which the caller
    /// was allowed to see), by review id; without the held requests, so a
    /// list page never reads held bodies.
    pub async fn details(
        &self,
        views: &[ReviewView],
    ) -> Result<HashMap<String, serde_json::Value>, ReviewError> {
        let ids: Vec<String> = views.iter().map(|v| v.review_id.clone()).collect();
        let found = on_store(&self.inner, move |s, _| s.details(&ids)).await?;
        Ok(found.into_iter().collect())
    }

    /// One review with its held request and decision snapshot, for a
    /// reviewer; `None` when unknown or not `viewer`'s.
    pub async fn inspect(
        &self,
        id: &str,
        viewer: &Viewer,
    ) -> Result<Option<Inspection>, ReviewError> {
        let Some(view) = self.get(id, viewer).await? else {
            return Ok(None);
        };
        let review_id = id.to_string();
        let found = on_store(&self.inner, move |s, _| s.inspect(&review_id)).await?;
        Ok(found.map(|i| Inspection {
            view,
            path: i.path,
            headers: i.headers,
            body: i.body,
            detail: i.detail,
            upstream: i.upstream,
        }))
    }

    /// The stored upstream answer of a review whose forward is done, so an
    /// app that got `202` can fetch the result of its held call; `None` when
    /// unknown, not `viewer`'s, or not forwarded (yet).
    pub async fn upstream_response(
        &self,
        id: &str,
        viewer: &Viewer,
    ) -> Result<Option<UpstreamResponse>, ReviewError> {
        let review_id = id.to_string();
        let found = on_store(&self.inner, move |s, _| s.upstream(&review_id)).await?;
        Ok(found.and_then(|(owner, response)| viewer.sees(&owner).then_some(response)))
    }

    /// Reviews `viewer` may see, with the given status (as of now) or any.
    /// Pending ones come oldest first, all others newest first; at most
    /// `limit` (capped at [`MAX_LIST_LIMIT`]).
    pub async fn list(
        &self,
        status: Option<ReviewStatus>,
        viewer: &Viewer,
        limit: usize,
    ) -> Result<Vec<ReviewView>, ReviewError> {
        let owner = (!viewer.sees_all).then(|| viewer.name.clone());
        let limit = limit.min(MAX_LIST_LIMIT);
        let now = SystemTime::now();
        let required = self.approvals_required();
        let rows = on_store(&self.inner, move |s, _| {
            s.list(status, owner.as_deref(), now, limit)
        })
        .await?;
        Ok(rows.iter().map(|r| view(r, now, required)).collect())
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
            "Requests held for review and still pending",
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
    /// the hold timed out, or before a restart).
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

impl crate::runtime::health::Component for Reviews {
    fn name(&self) -> &'static str {
        "reviews"
    }

    fn report(&self) -> crate::runtime::health::Report {
        use crate::runtime::health::{Report, Status};
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

// === impl Inner ===

impl Inner {
    /// Bookkeeping after a new review is stored.
    fn created(&self, row: &Row) {
        {
            let mut pending = lock(&self.pending);
            pending.insert((row.created_at, row.review_id.clone()));
            self.metrics.held.set(gauge_value(pending.len()));
        }
        // The new deadline may be the next one.
        self.sweeper.notify_one();
        tracing::info!(review_id = %row.review_id, owner = %row.owner, route = %row.route, "request held for review");
        self.tell(ReviewEvent::Held, row);
    }

    /// Bookkeeping after a review left `pending` (resolved or expired):
    /// health, metrics, and waking its waiters.
    fn resolved(&self, row: &Row) {
        let Some(resolution) = Resolution::of(row.status) else {
            return;
        };
        let (attended, was_pending) = self.deliver(row, resolution);
        self.metrics
            .resolutions
            .get_or_create(&OutcomeLabels {
                outcome: row.status.as_str().to_string(),
            })
            .inc();
        if let Some(at) = row.resolved_at {
            let held = at.duration_since(row.created_at).unwrap_or_default();
            self.metrics.hold_duration.observe(held.as_secs_f64());
        }
        // Another replica's held call is that replica's to forward (it is
        // told by NOTIFY); the claim would refuse this one anyway. And only
        // the first bookkeeping of a resolution here decides: this
        // replica's own NOTIFY can reach `resolved_elsewhere` before this
        // runs, which then delivered it already.
        if resolution.is_approved() && !attended && was_pending && self.holds(row) {
            self.unattended(&row.review_id);
        }
        self.tell(ReviewEvent::Resolved, row);
    }

    /// Takes a resolved review out of the pending ones and sends the
    /// resolution to its waiters, as one step under the `waiters` lock (a
    /// waiter that reads the store checks both under it too, see
    /// `Subscription::read_from_store`). Returns whether a waiter owns the
    /// resolution (it got it, or read it from the store first), and
    /// whether the review was pending here.
    fn deliver(&self, row: &Row, resolution: Resolution) -> (bool, bool) {
        // Lock order: `waiters`, then `pending`, then `taken`.
        let waiters = lock(&self.waiters);
        let was_pending = {
            let mut pending = lock(&self.pending);
            let was = pending.remove(&(row.created_at, row.review_id.clone()));
            self.metrics.held.set(gauge_value(pending.len()));
            was
        };
        let attended = match waiters.get(&row.review_id) {
            Some(tx) if tx.receiver_count() > 0 => {
                tx.send_replace(Some(resolution));
                // A mark left by a waiter that read the store is spent.
                lock(&self.taken).remove(&row.review_id);
                true
            }
            _ => lock(&self.taken).remove(&row.review_id),
        };
        (attended, was_pending)
    }

    /// Bookkeeping after a review this replica holds was resolved on
    /// another replica: the same as [`Inner::resolved`] but for the webhook
    /// and the resolution metrics, which the resolving replica did.
    fn resolved_elsewhere(&self, row: &Row) {
        let Some(resolution) = Resolution::of(row.status) else {
            return;
        };
        let (attended, was_pending) = self.deliver(row, resolution);
        if was_pending && resolution.is_approved() && !attended && self.holds(row) {
            self.unattended(&row.review_id);
        }
    }

    /// Whether this replica holds the review's call (always, without a
    /// shared store).
    fn holds(&self, row: &Row) -> bool {
        match (&self.shared, &row.replica) {
            (Some(shared), Some(replica)) => replica == shared.replica(),
            _ => true,
        }
    }

    /// Queues an approval that no held connection will forward.
    fn unattended(&self, review_id: &str) {
        tracing::debug!(
            review_id,
            "approved with no held connection waiting: queued for the background forwarder"
        );
        // Fails only when the receiver was dropped: then nobody forwards in
        // the background, and `approved_unforwarded` still lists it.
        let _ = self.unattended_tx.send(review_id.to_string());
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

/// The expiry sweeper: expires every pending review at its deadline and
/// wakes its waiters, then sleeps until the next deadline (or a new review).
/// Holds only a `Weak`, so it stops once every [`Reviews`] is dropped.
async fn sweep(inner: Weak<Inner>, wake: Arc<Notify>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        // Not in the middle of a resolution (see `resolution_turn`), on
        // any replica.
        let turn = match Turn::take(&strong).await {
            Ok(turn) => Some(turn),
            Err(e) => {
                tracing::warn!(error = %e, "review expiry sweep cannot take its turn");
                *lock(&strong.last_sweep_error) = Some(e.to_string());
                None
            }
        };
        let Some(turn) = turn else {
            drop(strong);
            tokio::select! {
                () = tokio::time::sleep(SWEEP_RETRY) => {}
                () = wake.notified() => {}
            }
            continue;
        };
        let swept = on_store(&strong, |s, inner| {
            let now = SystemTime::now();
            let (expired, next) = s.expire_due(now)?;
            for row in &expired {
                tracing::info!(review_id = %row.review_id, "review expired");
                inner.resolved(row);
            }
            // Retention, in bounded batches so a large backlog never holds
            // the store for long; what is left goes on the next run.
            let retention = Duration::from_millis(inner.retention_ms.load(Ordering::Relaxed));
            let mut purged = 0;
            if let Some(before) = now.checked_sub(retention) {
                purged = s.purge_resolved(before, PURGE_BATCH)?;
                if purged > 0 {
                    tracing::info!(purged, "deleted reviews past review.retention");
                }
            }
            inner.stored.store(s.count()?, Ordering::Relaxed);
            // A full batch: come back soon for the rest.
            Ok(if purged == PURGE_BATCH {
                Some(now)
            } else {
                next
            })
        })
        .await;
        drop(turn);
        let pause = match swept {
            Ok(next) => {
                *lock(&strong.last_sweep_error) = None;
                next.map_or(MAX_SWEEP_INTERVAL, |t| {
                    t.duration_since(SystemTime::now())
                        .unwrap_or_default()
                        .min(MAX_SWEEP_INTERVAL)
                })
            }
            Err(e) => {
                tracing::warn!(error = %e, "review expiry sweep failed");
                *lock(&strong.last_sweep_error) = Some(e.to_string());
                SWEEP_RETRY
            }
        };
        // Resolved reviews wait for their retention: with a short one, come
        // back within it (never more often than every 100 ms).
        let resolved_stored = strong.stored.load(Ordering::Relaxed)
            > u64::try_from(lock(&strong.pending).len()).unwrap_or(u64::MAX);
        let retention = Duration::from_millis(strong.retention_ms.load(Ordering::Relaxed));
        let pause = if resolved_stored {
            pause.min(retention.max(Duration::from_millis(100)))
        } else {
            pause
        };
        drop(strong);
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = wake.notified() => {}
        }
    }
}

/// With a shared store: learns of resolutions made on other replicas (by
/// `NOTIFY`, and by polling this replica's pending reviews every second in
/// case a notification was lost), and every third of the lease takes over
/// what replicas that are gone left: their forwards in flight become
/// `outcome_unknown`, and their approved reviews go to this replica's
/// background forwarder (the claim lets only one replica have each).
async fn follow_shared(
    inner: Weak<Inner>,
    mut notified: mpsc::UnboundedReceiver<String>,
    lease: Duration,
) {
    let mut poll = tokio::time::interval(Duration::from_secs(1));
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut takeover = tokio::time::interval(lease / 3);
    takeover.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Only reviews this replica holds (pending in its memory) or waits
        // on: the rest are other replicas' business.
        let ids: Vec<String> = tokio::select! {
            id = notified.recv() => {
                let Some(id) = id else { return };
                let Some(strong) = inner.upgrade() else { return };
                let waiters = lock(&strong.waiters);
                let ours = waiters.contains_key(&id)
                    || lock(&strong.pending).iter().any(|(_, p)| *p == id);
                if !ours {
                    continue;
                }
                vec![id]
            }
            _ = poll.tick() => {
                let Some(strong) = inner.upgrade() else { return };
                let waiters = lock(&strong.waiters);
                let mut ids: BTreeSet<String> =
                    lock(&strong.pending).iter().map(|(_, id)| id.clone()).collect();
                ids.extend(waiters.keys().cloned());
                ids.into_iter().collect()
            }
            _ = takeover.tick() => {
                let Some(strong) = inner.upgrade() else { return };
                let taken = on_store(&strong, |s, inner| {
                    for review_id in s.recover_lapsed()? {
                        tracing::warn!(review_id, "forward was in flight on a replica that is gone: outcome unknown, not retried");
                    }
                    for review_id in s.orphaned_approvals()? {
                        inner.unattended(&review_id);
                    }
                    Ok(())
                })
                .await;
                if let Err(e) = taken {
                    tracing::warn!(error = %e, "cannot take over the reviews of replicas that are gone");
                }
                continue;
            }
        };
        let Some(strong) = inner.upgrade() else {
            return;
        };
        if ids.is_empty() {
            continue;
        }
        let followed = on_store(&strong, move |s, inner| {
            for row in s.resolved_among(&ids)? {
                inner.resolved_elsewhere(&row);
            }
            Ok(())
        })
        .await;
        if let Err(e) = followed {
            tracing::warn!(error = %e, "cannot read reviews resolved on another replica");
        }
    }
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
/// queue, as a wait that ends does.
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
        if stranded && alone {
            self.inner.unattended(&self.id);
        }
    }
}

// === impl Resolution ===

impl Resolution {
    /// The resolution a status stands for; `None` while pending.
    pub fn of(status: ReviewStatus) -> Option<Resolution> {
        match status {
            ReviewStatus::Pending => None,
            ReviewStatus::Approved => Some(Resolution::Approved),
            ReviewStatus::Rejected => Some(Resolution::Rejected),
            ReviewStatus::Expired => Some(Resolution::Expired),
        }
    }

    pub fn is_approved(self) -> bool {
        self == Resolution::Approved
    }
}

// === impl Viewer ===

impl Viewer {
    /// Whether this viewer may see a review held for `owner`.
    pub fn sees(&self, owner: &str) -> bool {
        self.sees_all || self.name == owner
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

// === impl ReviewError ===

impl From<rusqlite::Error> for ReviewError {
    fn from(e: rusqlite::Error) -> ReviewError {
        ReviewError::Storage(e.to_string())
    }
}

/// The view of a stored row at `now`: a pending review past its deadline
/// reads as expired (at its deadline) before the sweeper writes it down.
fn view(row: &Row, now: SystemTime, approvals_required: u32) -> ReviewView {
    let status = state::effective_status(row.status, row.expires_at, now);
    let resolved_at = match (row.resolved_at, status) {
        (None, ReviewStatus::Expired) => Some(row.expires_at),
        (at, _) => at,
    };
    ReviewView {
        review_id: row.review_id.clone(),
        status,
        created_at: row.created_at,
        expires_at: row.expires_at,
        route: row.route.clone(),
        action: row.action.clone(),
        reason: row.reason.clone(),
        rules: row.rules.clone(),
        record_id: row.record_id.clone(),
        reviewer: row.reviewer.clone(),
        note: row.note.clone(),
        resolved_at,
        forward: ForwardView {
            state: row.forward.as_str(),
            upstream_status: match row.forward {
                ForwardState::Done { status } => Some(status),
                _ => None,
            },
        },
        request: RequestView {
            method: row.method.clone(),
            // INVARIANT: no query string, which may carry secrets too.
            path: row.path.split('?').next().unwrap_or_default().to_string(),
            hash: row.request_hash.clone(),
        },
        approvals: row
            .approvals
            .iter()
            .map(|a| ApprovalView {
                by: a.by.clone(),
                reviewer: a.reviewer.clone(),
                note: a.note.clone(),
                at: store::from_micros(a.at),
            })
            .collect(),
        approvals_required: row.approvals_required.unwrap_or(approvals_required),
        owner: row.owner.clone(),
        requesters: row.requesters.clone(),
    }
}

/// RFC 3339 UTC, e.g. `2026-11-22T21:30:00.123456Z`. An error (not the
/// panic of `OffsetDateTime::from`) for times outside years 1..=9999.
fn rfc3339(t: SystemTime) -> Result<String, String> {
    let nanos = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i128::try_from(d.as_nanos()).unwrap_or(i128::MAX),
        Err(before) => i128::try_from(before.duration().as_nanos()).map_or(i128::MIN, |n| -n),
    };
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .map_err(|e| e.to_string())?
        .format(&time::format_description::well_known::Rfc3339)
        .map_err(|e| e.to_string())
}

fn ser_time<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    let text = rfc3339(*t).map_err(serde::ser::Error::custom)?;
    s.serialize_str(&text)
}

fn ser_opt_time<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => ser_time(t, s),
        None => s.serialize_none(),
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
