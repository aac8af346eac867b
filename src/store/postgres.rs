//! The shared store: a PostgreSQL database that several replicas of the
//! sidecar use for the state people share (reviews and their held
//! requests, batch jobs, the checkpoints each replica publishes), so that a
//! reviewer finds every replica's held calls in one queue and a pod that
//! dies does not take its pending reviews or jobs with it.
//!
//! This module owns the connection side, not the data: the pool, the
//! versioned schema (applied at start-up by one replica at a time under an
//! advisory lock; a replica refuses a schema newer than it knows), this
//! replica's id and its lease (renewed every third of `store.lease`, read
//! with the database's clock so replicas' clocks need not agree), and a
//! `LISTEN` connection that tells the replica at once when another one
//! resolved a review or submitted a job. The tables of each subsystem are
//! written by that subsystem (`review::pg`, `jobs::pg`, `witness::remote`).
//!
//! The review store and the job workers run on blocking threads (they are
//! synchronous, like the SQLite ones); [`SharedStore::block_on`] lets them drive
//! this async client from there.

use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::PostgresConfig;

/// The SQL expression for "now" in unix microseconds, by the database's
/// clock: leases are written and compared with one clock.
pub const NOW_MICROS: &str = "(extract(epoch from clock_timestamp()) * 1000000)::bigint";

/// The channel a replica is told of resolved reviews on; the payload is
/// the review id.
pub const REVIEWS_CHANNEL: &str = "verdict_reviews";

/// The channel workers are woken on when a job is submitted; the payload
/// is the job id.
pub const JOBS_CHANNEL: &str = "verdict_jobs";

/// The advisory lock key that serialises schema migrations across
/// replicas (an arbitrary constant: `verdict` in ASCII).
const MIGRATION_LOCK: i64 = 0x0076_6572_6469_6374;

/// The schema version this build knows.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// A shared store that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    #[error("shared store {url}: {message}")]
    Connect { url: String, message: String },
    #[error(
        "shared store {url}: its schema is version {found}, newer than this build knows \
         ({known}); upgrade this replica"
    )]
    SchemaTooNew { url: String, found: i32, known: i32 },
    #[error("shared store: {0}")]
    Query(String),
}

impl From<tokio_postgres::Error> for SharedError {
    fn from(e: tokio_postgres::Error) -> SharedError {
        SharedError::Query(error_text(&e))
    }
}

impl From<deadpool_postgres::PoolError> for SharedError {
    fn from(e: deadpool_postgres::PoolError) -> SharedError {
        SharedError::Query(format!("no connection: {}", with_sources(&e)))
    }
}

/// A database error with its server message (tokio-postgres prints only
/// "db error" for those).
pub fn error_text(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => with_sources(e),
    }
}

/// The `verdict_store_errors_total` kind of a failed statement: `deadlock`
/// (SQLSTATE 40P01), `serialization` (40001), `query` (any other refusal by
/// the server) or `connect` (the connection failed under it).
pub fn error_kind(e: &tokio_postgres::Error) -> &'static str {
    match e.as_db_error().map(|db| db.code().code()) {
        Some("40P01") => "deadlock",
        Some("40001") => "serialization",
        Some(_) => "query",
        None if is_connection_error(e) => "connect",
        // The client's own refusals: a row count, a type conversion.
        None => "query",
    }
}

/// Whether an error without a database error is the connection failing
/// (closed, or an I/O error under it), not the client refusing a result.
pub fn is_connection_error(e: &tokio_postgres::Error) -> bool {
    e.is_closed() || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// Whether an error passes by itself: the connection failed, or the server
/// refused for a reason of the moment (SQLSTATE classes 08 connection, 40
/// rollback such as a deadlock or serialization failure, 53 resources, 57
/// operator intervention such as a shutdown, 58 system; and 55P03, a lock
/// not available). Callers answer these 503, not 500.
pub fn is_transient(e: &tokio_postgres::Error) -> bool {
    match e.as_db_error() {
        None => true,
        Some(db) => {
            let code = db.code().code();
            ["08", "40", "53", "57", "58"]
                .iter()
                .any(|class| code.starts_with(class))
                || code == "55P03"
        }
    }
}

/// An error and its causes, `a: b: c` (the TLS failure behind "error
/// performing TLS handshake", say).
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// The shared store: cheap to clone.
#[derive(Clone)]
pub struct SharedStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    pg: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    display: String,
    replica: String,
    lease: Duration,
    runtime: tokio::runtime::Handle,
    /// The last lease renewal's round trip, in microseconds (-1: none yet).
    latency_us: AtomicI64,
    metrics: Metrics,
    /// Failed renewals and listener connections since start.
    errors: AtomicU64,
    /// Set by [`SharedStore::release`]: the lease is ended and stays ended.
    released: std::sync::atomic::AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl SharedStore {
    /// Connects, applies the schema (refusing one newer than this build),
    /// registers this replica's lease and starts renewing it. Call at
    /// start-up, inside the runtime that will use the store.
    pub async fn connect(cfg: &PostgresConfig) -> Result<SharedStore, SharedError> {
        let connect_err = |message: String| SharedError::Connect {
            url: cfg.display.clone(),
            message,
        };
        let tls = MakeRustlsConnect::new(tls_config(cfg).map_err(connect_err)?);
        let manager = Manager::from_config(
            cfg.pg.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(cfg.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(5)))
            .create_timeout(Some(Duration::from_secs(5)))
            .recycle_timeout(Some(Duration::from_secs(5)))
            .build()
            .map_err(|e| connect_err(e.to_string()))?;
        let replica = format!(
            "{}-{}",
            hostname(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let inner = Arc::new(Inner {
            pool,
            pg: cfg.pg.clone(),
            tls,
            display: cfg.display.clone(),
            replica,
            lease: cfg.lease,
            runtime: tokio::runtime::Handle::current(),
            latency_us: AtomicI64::new(-1),
            metrics: Metrics::default(),
            errors: AtomicU64::new(0),
            released: std::sync::atomic::AtomicBool::new(false),
            last_error: Mutex::new(None),
        });
        let shared = SharedStore { inner };
        shared.migrate().await.map_err(|e| match e {
            SharedError::Query(m) => connect_err(m),
            other => other,
        })?;
        shared
            .renew()
            .await
            .map_err(|e| connect_err(e.to_string()))?;
        tokio::spawn(renew_forever(Arc::downgrade(&shared.inner)));
        tracing::info!(url = %shared.inner.display, replica = %shared.inner.replica, schema = SCHEMA_VERSION, "shared store ready");
        Ok(shared)
    }

    /// One plain connection, without the pool, the schema or a lease: for
    /// a command that only reads the store (`verdict audit verify-remote`).
    pub async fn connect_reader(
        cfg: &PostgresConfig,
    ) -> Result<tokio_postgres::Client, SharedError> {
        let connect_err = |message: String| SharedError::Connect {
            url: cfg.display.clone(),
            message,
        };
        let tls = MakeRustlsConnect::new(tls_config(cfg).map_err(connect_err)?);
        let (client, connection) = cfg
            .pg
            .connect(tls)
            .await
            .map_err(|e| connect_err(error_text(&e)))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %error_text(&e), "shared store connection");
            }
        });
        Ok(client)
    }

    /// This replica's id: the host name and a random suffix, new on every
    /// start.
    pub fn replica(&self) -> &str {
        &self.inner.replica
    }

    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// A pooled connection, timing the wait for it
    /// (`verdict_store_pool_wait_seconds`) and counting a failure to get
    /// one (`verdict_store_errors_total{kind="connect"}`).
    pub async fn client(&self) -> Result<deadpool_postgres::Object, deadpool_postgres::PoolError> {
        let started = Instant::now();
        let got = self.inner.pool.get().await;
        self.inner
            .metrics
            .pool_wait
            .observe(started.elapsed().as_secs_f64());
        if got.is_err() {
            self.inner.metrics.error("connect");
        }
        got
    }

    /// Registers `verdict_store_pool_wait_seconds`,
    /// `verdict_store_errors_total{kind}` and
    /// `verdict_store_pool_connections{state}` (open connections in use and
    /// idle, as of the last lease renewal).
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        let m = &self.inner.metrics;
        registry.register(
            "verdict_store_pool_wait_seconds",
            "Time waited for a connection to the shared store",
            m.pool_wait.clone(),
        );
        registry.register(
            "verdict_store_errors",
            "Shared store failures: connect (no connection, or it failed under a statement), lease (a renewal failed), listen (the LISTEN connection failed), deadlock, serialization and query (a statement the server refused)",
            m.errors.clone(),
        );
        registry.register(
            "verdict_store_pool_connections",
            "Open connections to the shared store, by state",
            m.connections.clone(),
        );
    }

    /// Counts one failed statement in `verdict_store_errors_total{kind}`
    /// ([`error_kind`]).
    pub fn count_error(&self, kind: &'static str) {
        self.inner.metrics.error(kind);
    }

    /// `store.lease`.
    pub fn lease(&self) -> Duration {
        self.inner.lease
    }

    /// Runs `fut` to completion from a blocking thread (never from an async
    /// task): the synchronous stores use the async client this way.
    pub fn block_on<F: Future>(&self, fut: F) -> F::Output {
        self.inner.runtime.block_on(fut)
    }

    /// Ends this replica's lease now, so another replica may take over its
    /// approved reviews without waiting for the lease to lapse. Called on a
    /// graceful shutdown.
    pub async fn release(&self) {
        self.inner.released.store(true, Ordering::Relaxed);
        let sql = "UPDATE verdict_replicas SET lease_until = 0 WHERE replica_id = $1";
        match self.client().await {
            Ok(c) => {
                if let Err(e) = c.execute(sql, &[&self.inner.replica]).await {
                    tracing::warn!(error = %error_text(&e), "cannot end this replica's lease");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot end this replica's lease"),
        }
    }

    /// Payloads (review or job ids) of `NOTIFY` on `channel`, as they arrive, for as long
    /// as the receiver lives. The connection is made again after a failure
    /// (a notification sent while it was down is lost; the caller polls as
    /// a fallback).
    pub fn listen(&self, channel: &'static str) -> mpsc::UnboundedReceiver<String> {
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = Arc::downgrade(&self.inner);
        self.inner.runtime.spawn(async move {
            let mut backoff = Duration::from_millis(200);
            loop {
                let Some(strong) = inner.upgrade() else {
                    return;
                };
                let (pg, tls) = (strong.pg.clone(), strong.tls.clone());
                drop(strong);
                match listen_once(&pg, tls, channel, &tx).await {
                    Ok(()) => return, // the receiver is gone
                    Err(e) => {
                        if let Some(strong) = inner.upgrade() {
                            strong.failed("listen", format!("LISTEN {channel}: {e}"));
                        }
                    }
                }
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        });
        rx
    }

    async fn migrate(&self) -> Result<(), SharedError> {
        // A session-level lock on a connection of its own: the pool's
        // connections go back to the pool between statements.
        let mut client = self.client().await?;
        client
            .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
            .await?;
        let result = self.migrate_locked(&mut client).await;
        let unlock = client
            .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
            .await;
        result?;
        unlock?;
        Ok(())
    }

    async fn migrate_locked(
        &self,
        client: &mut deadpool_postgres::Object,
    ) -> Result<(), SharedError> {
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS verdict_schema_migrations (
                     version    INTEGER PRIMARY KEY,
                     applied_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                     replica    TEXT NOT NULL
                 )",
            )
            .await?;
        let found: i32 = client
            .query_one(
                "SELECT COALESCE(MAX(version), 0) FROM verdict_schema_migrations",
                &[],
            )
            .await?
            .get(0);
        if found > SCHEMA_VERSION {
            return Err(SharedError::SchemaTooNew {
                url: self.inner.display.clone(),
                found,
                known: SCHEMA_VERSION,
            });
        }
        for (i, step) in MIGRATIONS
            .iter()
            .enumerate()
            .skip(usize::try_from(found).unwrap_or(0))
        {
            let version = i32::try_from(i + 1).unwrap_or(i32::MAX);
            let tx = client.transaction().await?;
            tx.batch_execute(step).await?;
            tx.execute(
                "INSERT INTO verdict_schema_migrations (version, replica) VALUES ($1, $2)",
                &[&version, &self.inner.replica],
            )
            .await?;
            tx.commit().await?;
            tracing::info!(version, "shared store schema migrated");
        }
        Ok(())
    }

    /// Writes this replica's lease: alive until now + `store.lease`.
    async fn renew(&self) -> Result<(), SharedError> {
        let started = Instant::now();
        let lease_us = i64::try_from(self.inner.lease.as_micros()).unwrap_or(i64::MAX);
        let client = self.client().await?;
        client
            .execute(
                &format!(
                    "INSERT INTO verdict_replicas (replica_id, started_at, lease_until) \
                     VALUES ($1, {NOW_MICROS}, {NOW_MICROS} + $2) \
                     ON CONFLICT (replica_id) DO UPDATE SET lease_until = EXCLUDED.lease_until"
                ),
                &[&self.inner.replica, &lease_us],
            )
            .await?;
        let us = i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX);
        self.inner.latency_us.store(us, Ordering::Relaxed);
        let pool = self.inner.pool.status();
        let gauge = |state| {
            self.inner
                .metrics
                .connections
                .get_or_create(&StateLabels { state })
                .clone()
        };
        gauge("in_use").set(i64::try_from(pool.size.saturating_sub(pool.available)).unwrap_or(0));
        gauge("idle").set(i64::try_from(pool.available).unwrap_or(0));
        // Replicas gone for a day leave their row; nothing refers to it
        // once their reviews and items are taken over.
        client
            .execute(
                &format!(
                    "DELETE FROM verdict_replicas WHERE lease_until < {NOW_MICROS} - 86400000000"
                ),
                &[],
            )
            .await?;
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

/// The shared store's Prometheus metrics.
#[derive(Debug)]
struct Metrics {
    pool_wait: prometheus_client::metrics::histogram::Histogram,
    errors: prometheus_client::metrics::family::Family<
        KindLabels,
        prometheus_client::metrics::counter::Counter,
    >,
    connections: prometheus_client::metrics::family::Family<
        StateLabels,
        prometheus_client::metrics::gauge::Gauge,
    >,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            pool_wait: crate::telemetry::metrics::latency_histogram(),
            errors: Default::default(),
            connections: Default::default(),
        }
    }
}

impl Metrics {
    fn error(&self, kind: &'static str) {
        self.errors.get_or_create(&KindLabels { kind }).inc();
    }
}

impl Inner {
    fn failed(&self, kind: &'static str, message: String) {
        tracing::warn!(error = %message, "shared store");
        self.metrics.error(kind);
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(message);
        }
    }
}

/// Renews the lease every third of it until the store is dropped. A
/// renewal that fails is logged and retried at the next tick: the lease
/// lapses only after three misses.
async fn renew_forever(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let every = strong.lease / 3;
        drop(strong);
        tokio::time::sleep(every).await;
        let Some(strong) = inner.upgrade() else {
            return;
        };
        if strong.released.load(Ordering::Relaxed) {
            return;
        }
        let shared = SharedStore { inner: strong };
        match shared.renew().await {
            Ok(()) => {
                if let Ok(mut last) = shared.inner.last_error.lock() {
                    *last = None;
                }
            }
            Err(e) => shared.inner.failed("lease", format!("lease renewal: {e}")),
        }
    }
}

/// One `LISTEN` connection: forwards each notification's payload until the
/// connection fails (an error) or the receiver is dropped (`Ok`).
async fn listen_once(
    pg: &tokio_postgres::Config,
    tls: MakeRustlsConnect,
    channel: &str,
    tx: &mpsc::UnboundedSender<String>,
) -> Result<(), String> {
    let (client, mut connection) = pg.connect(tls).await.map_err(|e| error_text(&e))?;
    let (msg_tx, mut msg_rx) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if msg_tx.send(Ok(n.payload().to_string())).is_err() {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    let _ = msg_tx.send(Err(error_text(&e)));
                    return;
                }
                None => {
                    let _ = msg_tx.send(Err("the connection closed".to_string()));
                    return;
                }
            }
        }
    });
    let result = async {
        client
            .batch_execute(&format!("LISTEN {channel}"))
            .await
            .map_err(|e| error_text(&e))?;
        loop {
            tokio::select! {
                msg = msg_rx.recv() => match msg {
                    Some(Ok(payload)) => {
                        if tx.send(payload).is_err() {
                            return Ok(());
                        }
                    }
                    Some(Err(e)) => return Err(e),
                    None => return Err("the connection closed".to_string()),
                },
                () = tx.closed() => return Ok(()),
            }
        }
    }
    .await;
    driver.abort();
    result
}

/// The client TLS config: `ca_file`'s roots, or the system's. Used when
/// the URL's `sslmode` asks for TLS (`prefer`, the default, tries it and
/// falls back to plain; `require` insists).
fn tls_config(cfg: &PostgresConfig) -> Result<rustls::ClientConfig, String> {
    crate::config::client_tls(
        cfg.ca_file.as_deref(),
        "set store.ca_file for a TLS connection",
    )
    .map_err(|e| match &cfg.ca_file {
        Some(path) => format!("store.ca_file {}: {e}", path.display()),
        None => e,
    })
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "replica".to_string())
}

impl crate::telemetry::health::Component for SharedStore {
    fn name(&self) -> &'static str {
        "shared_store"
    }

    fn report(&self) -> crate::telemetry::health::Report {
        use crate::telemetry::health::{Report, Status};
        let last_error = self.inner.last_error.lock().ok().and_then(|e| e.clone());
        let status = if last_error.is_some() {
            Status::Degraded
        } else {
            Status::Ok
        };
        let pool = self.inner.pool.status();
        let mut report = Report::new(status)
            .fact("url", self.inner.display.clone())
            .fact("replica", self.inner.replica.clone())
            .fact("schema_version", SCHEMA_VERSION)
            .fact("pool_max", pool.max_size)
            .fact("pool_open", pool.size)
            .fact("pool_in_use", pool.size.saturating_sub(pool.available))
            .fact("pool_waiting", pool.waiting)
            .fact("errors", self.inner.errors.load(Ordering::Relaxed));
        let latency = self.inner.latency_us.load(Ordering::Relaxed);
        if latency >= 0 {
            report = report.fact("latency_ms", latency as f64 / 1000.0);
        }
        if let Some(e) = last_error {
            report = report.fact("last_error", e);
        }
        report
    }
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStore")
            .field("url", &self.inner.display)
            .field("replica", &self.inner.replica)
            .finish_non_exhaustive()
    }
}

mod migrations;
/// The shared store for the crate's unit tests: with
/// `VERDICT_TEST_STORE=postgres`, the review and job tests run against a
/// fresh database in the throwaway cluster that scripts/postgres.sh starts
/// (the same support code the integration tests use).
#[cfg(test)]
#[path = "../../tests/support/postgres.rs"]
#[allow(dead_code)]
mod pg_support;
use migrations::MIGRATIONS;

#[cfg(test)]
pub(crate) mod testing {
    use super::pg_support;

    /// Whether this run tests the PostgreSQL backends.
    pub fn on_postgres() -> bool {
        std::env::var("VERDICT_TEST_STORE").as_deref() == Ok("postgres")
    }

    /// The URL of a new, empty database.
    pub fn fresh_database() -> String {
        pg_support::fresh_database().expect("VERDICT_TEST_STORE=postgres needs PostgreSQL")
    }

    /// A replica connected to the database at `url`, with a 1 s lease.
    pub async fn connect(url: &str) -> super::SharedStore {
        let text = format!("[store]\nurl = \"{url}\"\nlease = \"1s\"\n");
        let config =
            crate::config::Config::from_toml("test", &text, &crate::config::Overrides::default())
                .unwrap();
        let crate::config::StoreConfig::Postgres(pg) = config.store else {
            panic!("not a postgres store")
        };
        super::SharedStore::connect(&pg).await.unwrap()
    }
}
