//! Opening the review subsystem, on the SQLite file or on the shared store,
//! and starting its background tasks.

use super::*;

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
        shared: crate::store::postgres::SharedStore,
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

    pub(super) fn start(
        runtime: tokio::runtime::Handle,
        mut stores: Vec<Box<dyn Backend>>,
        shared: Option<crate::store::postgres::SharedStore>,
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
}
