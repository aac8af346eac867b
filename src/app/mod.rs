//! Start-up and shutdown of a whole sidecar: build the shared state from a
//! [`Config`], bind the listeners, and drain on request.
//!
//! `main` and the integration tests both go through [`start`], so the tests
//! run exactly the server that ships. Start-up fails early and clearly (bad
//! keys file, unprotected public listener, unreadable TLS files); after that
//! the only way out is [`Running::shutdown`], which drains in order.

use std::net::SocketAddr;
use std::sync::Arc;

use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::Api;
use crate::audit::redaction::Opened;
use crate::audit::{AuditLog, RedactionKey, RedactionKeyError};
use crate::config::Config;
use crate::evidence::Resolver;
use crate::http::auth::{AuthMode, KeyStore, KeysError};
use crate::policy::{self, PolicyStore};
pub use crate::runtime::{db_path, App};
use crate::server::{self, TlsError};
use crate::shipping::Shipper;
use crate::telemetry::health::{self, Component, Health};
use crate::telemetry::metrics::HttpMetrics;

mod watches;
use watches::Watches;

/// Why the sidecar could not start. `main` exits 64 on any of these.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("keys: {0}")]
    Keys(#[from] KeysError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("policies: the first load failed:\n{0}")]
    Policies(String),
    #[error("data dir {path}: {error}")]
    DataDir { path: String, error: String },
    #[error("audit log: {0}")]
    Audit(#[from] crate::audit::AuditError),
    #[error(transparent)]
    RedactionKey(#[from] RedactionKeyError),
    #[error("reviews: {0}")]
    Reviews(#[from] crate::review::ReviewError),
    #[error(transparent)]
    Shared(#[from] crate::store::postgres::SharedError),
    #[error("proxy.upstream: {0}")]
    Upstream(String),
    #[error("batch jobs: {0}")]
    Jobs(#[from] crate::jobs::JobsError),
    #[error("cannot watch {what}: {error}")]
    Watch { what: &'static str, error: String },
    #[error("data dir lock: {0}")]
    Lock(#[from] crate::store::datalock::LockError),
    /// The shared store holds newer checkpoints of this log's origin.
    #[error("audit log: {0}")]
    LogBehind(String),
    #[error("audit.export_url: {0}")]
    Export(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A started sidecar.
pub struct Running {
    pub api_addr: SocketAddr,
    /// The proxy listener, when an upstream is configured.
    pub proxy_addr: Option<SocketAddr>,
    /// Envoy's ext_authz listener, when `[ext_authz] listen` is set.
    pub ext_authz_addr: Option<SocketAddr>,
    pub app: Arc<App>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    /// Dropping it stops watching the keys file.
    _keys_watch: Option<policy::WatchHandle>,
    /// Dropping them stops watching the TLS certificates and keys.
    _tls_watches: Vec<policy::WatchHandle>,
    /// This process owns the data dir until it is dropped.
    _data_lock: crate::store::datalock::DataLock,
    /// The shared store, when reviews live in one.
    shared: Option<crate::store::postgres::SharedStore>,
}

impl Running {
    /// Drains: `/health` turns 503, listeners stop accepting, in-flight
    /// requests finish within the grace period.
    pub async fn shutdown(self) {
        self.app.health.set_draining();
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        // Listeners are drained: stop batch workers between items, then
        // flush what the audit log has queued and stop its writer.
        self.app.jobs.shutdown().await;
        self.app.audit.shutdown().await;
        // Another replica may take over this one's approved reviews at once.
        if let Some(shared) = &self.shared {
            shared.release().await;
        }
        tracing::info!("shutdown complete");
    }
}

/// Reports the key store in `/health/detailed`.
struct AuthComponent(Arc<KeyStore>);

impl Component for AuthComponent {
    fn name(&self) -> &'static str {
        "auth"
    }

    fn report(&self) -> health::Report {
        let ks = &self.0;
        let mode = match ks.mode() {
            AuthMode::Keys => "keys",
            AuthMode::Open => "open (loopback, no keys)",
        };
        health::Report::new(health::Status::Ok)
            .fact("mode", mode)
            .fact("keys", ks.key_count())
    }
}

/// Reports the policy store in `/health/detailed`.
struct PoliciesComponent(&'static str, Arc<PolicyStore>);

impl Component for PoliciesComponent {
    fn name(&self) -> &'static str {
        self.0
    }

    fn report(&self) -> health::Report {
        let set = self.1.load_full();
        let st = self.1.status();
        let status = if st.degraded {
            health::Status::Degraded
        } else {
            health::Status::Ok
        };
        let mut r = health::Report::new(status)
            .fact("revision", set.revision.clone())
            .fact("files", set.files.clone())
            .fact("actions", set.actions.len())
            .fact("routes", set.routes.len())
            .fact("reloads_ok", st.reloads_ok)
            .fact("reloads_failed", st.reloads_failed);
        if !st.unacknowledged_removals.is_empty() {
            r = r.fact("removed_routes", st.unacknowledged_removals.clone());
        }
        if let Some(at) = st.last_reload_at {
            r = r.fact("last_reload", crate::support::time::rfc3339(at));
        }
        if let Some(e) = st.last_error {
            r = r.fact("last_error", e);
        }
        r
    }
}

/// Reports the audit log in `/health/detailed`.
struct AuditComponent(AuditLog);

impl Component for AuditComponent {
    fn name(&self) -> &'static str {
        "audit"
    }

    fn report(&self) -> health::Report {
        let h = self.0.health();
        // A witness that cannot cosign delays no decision: degraded, not
        // failing. One that showed a rollback halted the log: failing.
        let status = if h.failing {
            health::Status::Failing
        } else if h.witnesses.iter().any(|w| w.last_error.is_some()) {
            health::Status::Degraded
        } else {
            health::Status::Ok
        };
        let mut r = health::Report::new(status)
            .fact("size", h.size)
            .fact("key_id", h.key_id);
        if !h.witnesses.is_empty() {
            r = r.fact(
                "witnesses",
                serde_json::to_value(&h.witnesses).unwrap_or_default(),
            );
        }
        if let Some(at) = h.last_checkpoint_at {
            r = r.fact("last_checkpoint", at);
        }
        if let Some(e) = h.last_error {
            r = r.fact("last_error", e);
        }
        r
    }

    fn fatal(&self) -> Option<String> {
        if !self.0.writer_running() {
            return Some(
                "the audit writer has stopped; nothing can be decided until the process restarts"
                    .to_string(),
            );
        }
        self.0.halted().map(|why| {
            format!("{why}; nothing is decided until an operator restores the log and restarts")
        })
    }
}

fn data_err(config: &Config, error: String) -> StartError {
    StartError::DataDir {
        path: config.data_dir.display().to_string(),
        error,
    }
}

/// Creates the data dir (mode 0700).
fn prepare_data_dir(config: &Config) -> Result<(), StartError> {
    let dir = &config.data_dir;
    std::fs::create_dir_all(dir).map_err(|e| data_err(config, e.to_string()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    Ok(())
}

/// Opens the audit log off the runtime.
async fn open_audit(config: &Config) -> Result<AuditLog, StartError> {
    let db = db_path(config);
    let cfg = config.audit.clone();
    let key_dir = config.data_dir.clone();
    let witnesses = cfg.witnesses.clone();
    let log = tokio::task::spawn_blocking(move || AuditLog::open(&db, &key_dir, &cfg))
        .await
        .map_err(|e| data_err(config, format!("audit open task failed: {e}")))?
        .map_err(StartError::Audit)?;
    // A witness that cosigned a larger tree than the log holds, or one the
    // log does not extend, stops start-up here (a rollback); an
    // unreachable one does not.
    if let Err(e) = log.start_witnessing(witnesses).await {
        log.shutdown().await;
        return Err(StartError::Audit(e));
    }
    // Runs with capture off too: inputs captured before still expire.
    log.start_input_retention(config.audit.input_retention);
    Ok(log)
}

/// Loads (or, when absent, creates) the redaction key, off the runtime.
/// Runs before the audit log opens, so a bad key file stops start-up with
/// nothing else started. A new key beside an existing database is logged:
/// values redacted from now on will not match the ones before.
async fn open_redaction_key(config: &Config) -> Result<RedactionKey, StartError> {
    let dir = config.data_dir.clone();
    let db = db_path(config);
    let (key, opened, had_db) = tokio::task::spawn_blocking(move || {
        let had_db = db.exists();
        RedactionKey::open(&dir).map(|(k, o)| (k, o, had_db))
    })
    .await
    .map_err(|e| data_err(config, format!("redaction key task failed: {e}")))??;
    match (opened, had_db) {
        (Opened::Created, true) => tracing::warn!(
            "created a new redaction key beside an existing database: values redacted in new audit records will not match those in earlier ones"
        ),
        (Opened::Created, false) => tracing::info!("created the redaction key"),
        (Opened::Loaded, _) => {}
    }
    Ok(key)
}

/// A listener's reloading certificate and the rustls config that serves
/// through it, when the listener is configured for TLS.
type ListenerTls = (
    Option<Arc<server::ReloadingCert>>,
    Option<Arc<rustls::ServerConfig>>,
);

fn open_tls(
    name: &'static str,
    files: Option<&crate::config::TlsFiles>,
) -> Result<ListenerTls, StartError> {
    let cert = files
        .map(|f| server::ReloadingCert::open(name, f))
        .transpose()?;
    let tls = cert.as_ref().map(|c| c.server_config()).transpose()?;
    Ok((cert, tls))
}

/// Opens the policy store. A missing directory is an empty set only when it
/// is the default `policies` (so zero-config `serve` works anywhere); an
/// explicitly configured directory must exist.
fn open_policies(config: &Config) -> Result<PolicyStore, StartError> {
    let dir = &config.policies_dir;
    if !dir.exists() && dir.as_path() == std::path::Path::new(crate::config::DEFAULT_POLICIES_DIR) {
        tracing::warn!(dir = %dir.display(), "no policies directory; serving with an empty policy set");
        return Ok(PolicyStore::new(dir.clone(), policy::PolicySet::empty()));
    }
    PolicyStore::open(dir.clone()).map_err(|errors| {
        StartError::Policies(
            errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        )
    })
}

/// Builds the shared state and starts the listeners.
pub async fn start(config: Config) -> Result<Running, StartError> {
    start_inner(config, None).await
}

/// Benchmarks only: [`start`] with the given audit log instead of the one in
/// the data dir (e.g. [`AuditLog::noop_for_benchmarks`], to measure what the
/// durable log costs). Not reachable from the config file or the CLI;
/// built only with the `bench` feature.
#[cfg(feature = "bench")]
pub async fn start_with_audit_for_benchmarks(
    config: Config,
    audit: AuditLog,
) -> Result<Running, StartError> {
    start_inner(config, Some(audit)).await
}

/// [`start`], with `audit` instead of the data dir's log when given: builds
/// the shared state, watches its files, binds the listeners and serves.
async fn start_inner(config: Config, audit: Option<AuditLog>) -> Result<Running, StartError> {
    let Built {
        app,
        api_tls: (api_cert, api_tls),
        proxy,
        notifier,
        shipper,
        shared,
        data_lock,
    } = build(Arc::new(config), audit).await?;
    let ProxyParts {
        stats: proxy_stats,
        upstream,
        tls: (proxy_cert, proxy_tls),
        checks,
    } = proxy;
    let config = &app.config;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let watches = Watches::start(&app, [&api_cert, &proxy_cert], &shutdown_rx)?;
    let (api_listener, api_addr) = bind_api(config.api.listen).await?;

    let mut tasks = vec![tokio::spawn(server::serve(
        "api",
        api_listener,
        api_tls,
        Arc::new(Api::new(app.clone())),
        config.server.clone(),
        shutdown_rx.clone(),
    ))];
    if let Some(shared) = &shared {
        tasks.push(tokio::spawn(crate::witness::remote::publish_until(
            app.audit.clone(),
            shared.clone(),
            shutdown_rx.clone(),
        )));
    }
    tasks.extend(watches.tasks);
    if let Some(n) = notifier {
        let base = crate::webhook::derived_console_base(api_addr, config.api.tls.is_some());
        tasks.push(n.spawn(base, shutdown_rx.clone()));
    }
    if let Some(s) = shipper {
        tasks.push(s.spawn(shutdown_rx.clone()));
    }
    let mut proxy_addr = None;
    if let Some(upstream) = upstream {
        let (addr, proxy_tasks) =
            start_proxy(&app, upstream, proxy_stats, proxy_tls, &shutdown_rx)?;
        tasks.extend(proxy_tasks);
        proxy_addr = Some(addr);
    }
    let mut ext_authz_addr = None;
    if let (Some(listen), Some(stats)) = (config.ext_authz_listen, checks) {
        let (addr, task) = crate::ext_authz::start(&app, listen, stats, &shutdown_rx)
            .await
            .map_err(|e| match e {
                crate::ext_authz::StartError::Bind(source) => StartError::Bind {
                    addr: listen,
                    source,
                },
                crate::ext_authz::StartError::Checker(e) => StartError::Upstream(e),
            })?;
        tasks.push(task);
        ext_authz_addr = Some(addr);
    }
    tracing::info!(addr = %api_addr, tls = config.api.tls.is_some(), "api listening");
    app.health.set_ready();

    Ok(Running {
        api_addr,
        proxy_addr,
        ext_authz_addr,
        app,
        shutdown: shutdown_tx,
        tasks,
        _keys_watch: watches.keys,
        _tls_watches: watches.tls,
        _data_lock: data_lock,
        shared,
    })
}

/// What start-up builds before anything listens: the shared state, and
/// what the listeners and [`Running`] keep beside it.
struct Built {
    app: Arc<App>,
    api_tls: ListenerTls,
    proxy: ProxyParts,
    /// Sends review notifications, once the API's address is known.
    notifier: Option<crate::webhook::Notifier>,
    /// Ships the decision log, when `audit.export_url` is set.
    shipper: Option<Shipper>,
    shared: Option<crate::store::postgres::SharedStore>,
    data_lock: crate::store::datalock::DataLock,
}

/// Builds the shared state, failing early: the files it reads first, then
/// the stores, then what runs on them and the health report of it all.
async fn build(config: Arc<Config>, audit: Option<AuditLog>) -> Result<Built, StartError> {
    let files = Files::open(&config)?;
    let stores = Stores::open(&config, audit).await?;
    let mut registry = Registry::default();
    let http_metrics = HttpMetrics::register(&mut registry);
    let decision_metrics = crate::decide::DecisionMetrics::register(&mut registry);
    stores.audit.register_metrics(&mut registry);
    let resolver = Resolver::new(&config.evidence);
    let (reviews, jobs) = stores
        .open_reviews_and_jobs(&config, &resolver, &mut registry)
        .await?;
    // Attached before anything can hold or resolve a review; it starts
    // sending once the API's address (for the console links) is known.
    let notifier = config.review_notify.clone().map(|c| {
        let n = crate::webhook::Notifier::new(c, &mut registry);
        n.attach(&reviews);
        n
    });
    let proxy = ProxyParts::open(&config, &mut registry)?;
    let shipper = match config.audit.export.clone() {
        Some(c) => Some(
            Shipper::new(c, stores.audit.clone(), &config.data_dir, &mut registry)
                .map_err(StartError::Export)?,
        ),
        None => None,
    };
    let parts = HealthParts {
        files: &files,
        stores: &stores,
        jobs: &jobs,
        reviews: &reviews,
        proxy: &proxy,
        shipper: shipper.as_ref(),
    };
    let health = Arc::new(health_of(&config, &parts));
    let Files {
        keys,
        api_tls,
        policies,
        shadow_policies,
    } = files;
    let Stores {
        shared,
        data_lock,
        redaction,
        audit,
    } = stores;
    let app = Arc::new(App {
        config,
        keys,
        health,
        registry,
        http_metrics,
        decision_metrics,
        resolver,
        policies,
        shadow_policies,
        audit,
        redaction,
        jobs,
        reviews,
    });
    Ok(Built {
        app,
        api_tls,
        proxy,
        notifier,
        shipper,
        shared,
        data_lock,
    })
}

/// The files start-up reads before it creates anything: the keys file, the
/// API's TLS files, the policies and the shadow policies.
struct Files {
    keys: Arc<KeyStore>,
    api_tls: ListenerTls,
    policies: Arc<PolicyStore>,
    shadow_policies: Option<Arc<PolicyStore>>,
}

impl Files {
    /// Reads them, in that order.
    fn open(config: &Config) -> Result<Files, StartError> {
        let api_is_loopback = config.api.listen.ip().is_loopback();
        let keys = Arc::new(KeyStore::open(
            config.keys_file.as_deref(),
            api_is_loopback,
        )?);
        if keys.mode() == AuthMode::Open {
            tracing::warn!(
                listen = %config.api.listen,
                "no API keys configured: authentication is OFF because the API listens on loopback only"
            );
        }
        let api_tls = open_tls("api_tls", config.api.tls.as_ref())?;
        let policies = Arc::new(open_policies(config)?);
        let shadow_policies = open_shadow_policies(config)?;
        {
            let set = policies.load_full();
            tracing::info!(revision = %set.revision, actions = set.actions.len(), routes = set.routes.len(), "policies loaded");
        }
        Ok(Files {
            keys,
            api_tls,
            policies,
            shadow_policies,
        })
    }
}

/// Opens `policies.shadow_dir`, when it is set: a set decided beside the
/// enforced one, never enforced.
fn open_shadow_policies(config: &Config) -> Result<Option<Arc<PolicyStore>>, StartError> {
    let Some(dir) = &config.shadow_policies_dir else {
        return Ok(None);
    };
    let store = PolicyStore::open(dir.clone()).map_err(|errors| {
        StartError::Policies(
            errors
                .iter()
                .map(|e| format!("policies.shadow_dir: {e}"))
                .collect::<Vec<_>>()
                .join("\n"),
        )
    })?;
    let set = store.load_full();
    tracing::info!(revision = %set.revision, actions = set.actions.len(), "shadow policies loaded (decided beside, never enforced)");
    Ok(Some(Arc::new(store)))
}

/// Where the state lives: the shared store (when reviews live in one), the
/// data dir this process holds, the redaction key in it, and the audit log.
struct Stores {
    shared: Option<crate::store::postgres::SharedStore>,
    data_lock: crate::store::datalock::DataLock,
    redaction: RedactionKey,
    audit: AuditLog,
}

impl Stores {
    /// Opens them, in that order; `audit`, when given, is the log instead
    /// of the one in the data dir.
    async fn open(config: &Config, audit: Option<AuditLog>) -> Result<Stores, StartError> {
        // The shared store first: a replica that cannot reach it (a wrong
        // password, an untrusted certificate) refuses to start before it
        // creates anything in its data dir (a redaction key, an audit log).
        let shared = match &config.store {
            crate::config::StoreConfig::Sqlite => None,
            crate::config::StoreConfig::Postgres(pg) => {
                Some(crate::store::postgres::SharedStore::connect(pg).await?)
            }
        };
        prepare_data_dir(config)?;
        let data_lock = crate::store::datalock::acquire(&config.data_dir)?;
        let redaction = open_redaction_key(config).await?;
        let audit = match audit {
            Some(a) => a,
            None => open_audit(config).await?,
        };
        Ok(Stores {
            shared,
            data_lock,
            redaction,
            audit,
        })
    }

    /// Opens the reviews and the batch jobs, in the shared store when there
    /// is one (after checking that the audit log is not behind it), and
    /// registers their metrics.
    async fn open_reviews_and_jobs(
        &self,
        config: &Config,
        resolver: &Resolver,
        registry: &mut Registry,
    ) -> Result<(crate::review::Reviews, crate::jobs::Jobs), StartError> {
        // Before this replica takes part in the shared store (reviews, jobs).
        if let Some(shared) = &self.shared {
            crate::witness::remote::check_not_behind(&self.audit, shared)
                .await
                .map_err(StartError::LogBehind)?;
        }
        let seal_key = self.redaction.derive(crate::review::SEAL_KEY_LABEL);
        let reviews = match &self.shared {
            None => crate::review::Reviews::open(&db_path(config), config.review_ttl, seal_key)?,
            Some(shared) => {
                let (s, ttl) = (shared.clone(), config.review_ttl);
                tokio::task::spawn_blocking(move || {
                    crate::review::Reviews::open_shared(s, ttl, seal_key)
                })
                .await
                .map_err(|e| {
                    crate::review::ReviewError::Storage(format!("review store task failed: {e}"))
                })??
            }
        };
        let work = crate::api::batch_item_fn(resolver.clone(), tokio::runtime::Handle::current());
        let jobs = match &self.shared {
            None => crate::jobs::Jobs::open(&db_path(config), &config.jobs, work)?,
            Some(shared) => crate::jobs::Jobs::open_shared(shared.clone(), &config.jobs, work)?,
        };
        jobs.register_metrics(registry);
        if let Some(shared) = &self.shared {
            shared.register_metrics(registry);
        }
        reviews.set_retention(config.review_retention);
        reviews.set_approvals(config.review_approvals);
        reviews.register_metrics(registry);
        Ok((reviews, jobs))
    }
}

/// The proxy's parts before it listens: its metrics, its upstream (it
/// listens only when there is one) and its TLS.
struct ProxyParts {
    stats: crate::proxy::ProxyStats,
    upstream: Option<http::Uri>,
    tls: ListenerTls,
    /// The metrics of Envoy's checks, when `[ext_authz] listen` is set.
    checks: Option<crate::proxy::ProxyStats>,
}

impl ProxyParts {
    /// Registers the metrics, then reads the upstream and the TLS files.
    fn open(config: &Config, registry: &mut Registry) -> Result<ProxyParts, StartError> {
        let stats = crate::proxy::ProxyStats::register(registry);
        let upstream = config
            .proxy
            .upstream
            .as_deref()
            .map(|u| {
                u.parse::<http::Uri>()
                    .map_err(|e| StartError::Upstream(format!("{u:?}: {e}")))
            })
            .transpose()?;
        let tls = open_tls("proxy_tls", config.proxy.tls.as_ref())?;
        let checks = config
            .ext_authz_listen
            .map(|_| crate::proxy::ProxyStats::register_checks(registry));
        Ok(ProxyParts {
            stats,
            upstream,
            tls,
            checks,
        })
    }
}

/// What `/health/detailed` reports on, besides the config.
struct HealthParts<'a> {
    files: &'a Files,
    stores: &'a Stores,
    jobs: &'a crate::jobs::Jobs,
    reviews: &'a crate::review::Reviews,
    proxy: &'a ProxyParts,
    shipper: Option<&'a Shipper>,
}

/// The components of `/health/detailed`: the keys, the policies, the audit
/// log, the jobs, the reviews, the upstream, the TLS certificates, the
/// shared store, the shadow policies and the decision-log shipping.
fn health_of(config: &Config, parts: &HealthParts<'_>) -> Health {
    let HealthParts {
        files,
        stores,
        jobs,
        reviews,
        proxy,
        shipper,
    } = *parts;
    let mut components: Vec<Arc<dyn Component>> = vec![
        Arc::new(AuthComponent(files.keys.clone())),
        Arc::new(PoliciesComponent("policies", files.policies.clone())),
        Arc::new(AuditComponent(stores.audit.clone())),
        Arc::new(jobs.clone()),
        Arc::new(reviews.clone()),
        Arc::new(crate::proxy::UpstreamComponent {
            upstream: config.proxy.upstream.clone(),
            stats: proxy.stats.clone(),
        }),
    ];
    for cert in [&files.api_tls.0, &proxy.tls.0].into_iter().flatten() {
        components.push(cert.clone());
    }
    if let Some(shared) = &stores.shared {
        components.push(Arc::new(shared.clone()));
    }
    if let Some(shadow) = &files.shadow_policies {
        components.push(Arc::new(PoliciesComponent(
            "shadow_policies",
            shadow.clone(),
        )));
    }
    if let Some(s) = shipper {
        components.push(Arc::new(s.health()));
    }
    Health::new(components)
}

/// Binds the API's listener; returns it with the address it got.
async fn bind_api(listen: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: listen,
        source,
    })?;
    Ok((listener, addr))
}

/// Binds the proxy's listeners and serves them, with the forwarder of held
/// requests; returns the proxy's address and those two tasks.
fn start_proxy(
    app: &Arc<App>,
    upstream: http::Uri,
    stats: crate::proxy::ProxyStats,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: &watch::Receiver<bool>,
) -> Result<(SocketAddr, [JoinHandle<()>; 2]), StartError> {
    let config = &app.config;
    // One listener, runtime and upstream pool per core (see
    // `server::serve_per_thread`); the API and everything else stay on
    // the main runtime, and so does the forwarder of held requests.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bind_error = |source| StartError::Bind {
        addr: config.proxy.listen,
        source,
    };
    let listeners = server::bind_reuseport(config.proxy.listen, threads).map_err(bind_error)?;
    let addr = listeners
        .first()
        .map(|l| l.local_addr())
        .transpose()
        .map_err(bind_error)?
        .unwrap_or(config.proxy.listen);
    let proxy = Arc::new(
        crate::proxy::Proxy::new(app.clone(), upstream, config.proxy.clone(), stats)
            .map_err(StartError::Upstream)?,
    );
    let pairs = listeners
        .into_iter()
        .map(|l| Ok((l, Arc::new(proxy.for_thread()?))))
        .collect::<Result<Vec<_>, String>>()
        .map_err(StartError::Upstream)?;
    let forwarder = tokio::spawn(crate::proxy::run_background_forwarder(
        app.clone(),
        proxy,
        shutdown.clone(),
    ));
    let listening =
        server::serve_per_thread("proxy", pairs, tls, config.server.clone(), shutdown.clone())
            .map_err(bind_error)?;
    tracing::info!(addr = %addr, upstream = config.proxy.upstream.as_deref().unwrap_or(""), "proxy listening");
    Ok((addr, [forwarder, listening]))
}
