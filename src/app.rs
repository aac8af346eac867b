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
use crate::audit::{AuditLog, AuditRecord, RecordKind, RedactionKey, RedactionKeyError};
use crate::config::Config;
use crate::evidence::Resolver;
use crate::http::auth::{AuthMode, KeyStore, KeysError};
use crate::policy::{self, PolicyStore, ReloadOutcome};
pub use crate::runtime::{db_path, App};
use crate::server::{self, TlsError};
use crate::telemetry::health::{self, Component, Health};
use crate::telemetry::metrics::HttpMetrics;

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
    shared: Option<crate::store::postgres::Shared>,
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

/// Appends a record off the request path (reloads, key changes), logging a
/// failure: there is no caller to answer with a 503.
fn audit_in_background(audit: &AuditLog, rt: &tokio::runtime::Handle, record: AuditRecord) {
    let audit = audit.clone();
    rt.spawn(async move {
        if let Err(e) = audit.append(record).await {
            tracing::error!(error = %e, "could not write an audit record");
        }
    });
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

/// The audit record of a policy reload; `None` when nothing changed.
fn reload_record(outcome: &ReloadOutcome) -> Option<AuditRecord> {
    let mut record = AuditRecord::new(RecordKind::PolicyReload);
    match outcome {
        ReloadOutcome::Unchanged { .. } => return None,
        ReloadOutcome::Applied {
            previous_revision,
            revision,
            files,
            actions,
            routes,
            removed_routes,
        } => {
            record.policy_revision = Some(revision.clone());
            let mut detail = serde_json::json!({
                "applied": true,
                "previous_revision": previous_revision,
                "files": files,
                "actions": actions,
                "routes": routes,
            });
            if !removed_routes.is_empty() {
                detail["removed_routes"] = serde_json::json!(removed_routes);
            }
            record.detail = Some(detail);
        }
        ReloadOutcome::Rejected {
            kept_revision,
            errors,
        } => {
            record.policy_revision = Some(kept_revision.clone());
            record.detail = Some(serde_json::json!({
                "applied": false,
                "errors": errors.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
            }));
        }
    }
    Some(record)
}

/// Builds the shared state and starts the listeners.
pub async fn start(config: Config) -> Result<Running, StartError> {
    start_inner(config, None).await
}

/// Benchmarks only: [`start`] with the given audit log instead of the one in
/// the data dir (e.g. [`AuditLog::noop_for_benchmarks`], to measure what the
/// durable log costs). Not reachable from the config file or the CLI.
#[doc(hidden)]
pub async fn start_with_audit_for_benchmarks(
    config: Config,
    audit: AuditLog,
) -> Result<Running, StartError> {
    start_inner(config, Some(audit)).await
}

async fn start_inner(config: Config, audit: Option<AuditLog>) -> Result<Running, StartError> {
    let config = Arc::new(config);
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
    let (api_cert, api_tls) = open_tls("api_tls", config.api.tls.as_ref())?;
    let policies = Arc::new(open_policies(&config)?);
    let shadow_policies = match &config.shadow_policies_dir {
        Some(dir) => {
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
            Some(Arc::new(store))
        }
        None => None,
    };
    {
        let set = policies.load_full();
        tracing::info!(revision = %set.revision, actions = set.actions.len(), routes = set.routes.len(), "policies loaded");
    }

    // The shared store first: a replica that cannot reach it (a wrong
    // password, an untrusted certificate) refuses to start before it
    // creates anything in its data dir (a redaction key, an audit log).
    let shared = match &config.store {
        crate::config::StoreConfig::Sqlite => None,
        crate::config::StoreConfig::Postgres(pg) => {
            Some(crate::store::postgres::Shared::connect(pg).await?)
        }
    };
    prepare_data_dir(&config)?;
    let data_lock = crate::store::datalock::acquire(&config.data_dir)?;
    let redaction = open_redaction_key(&config).await?;
    let audit = match audit {
        Some(a) => a,
        None => open_audit(&config).await?,
    };
    let mut registry = Registry::default();
    let http_metrics = HttpMetrics::register(&mut registry);
    let decision_metrics = crate::decide::DecisionMetrics::register(&mut registry);
    audit.register_metrics(&mut registry);
    let resolver = Resolver::new(&config.evidence);

    // Before this replica takes part in the shared store (reviews, jobs).
    if let Some(shared) = &shared {
        crate::witness::remote::check_not_behind(&audit, shared)
            .await
            .map_err(StartError::LogBehind)?;
    }
    let seal_key = redaction.derive(crate::review::SEAL_KEY_LABEL);
    let (reviews, shared) = match shared {
        None => (
            crate::review::Reviews::open(&db_path(&config), config.review_ttl, seal_key)?,
            None,
        ),
        Some(shared) => {
            let (s, ttl) = (shared.clone(), config.review_ttl);
            let reviews = tokio::task::spawn_blocking(move || {
                crate::review::Reviews::open_shared(s, ttl, seal_key)
            })
            .await
            .map_err(|e| {
                crate::review::ReviewError::Storage(format!("review store task failed: {e}"))
            })??;
            (reviews, Some(shared))
        }
    };
    let work = crate::api::batch_item_fn(resolver.clone(), tokio::runtime::Handle::current());
    let jobs = match &shared {
        None => crate::jobs::Jobs::open(&db_path(&config), &config.jobs, work)?,
        Some(shared) => crate::jobs::Jobs::open_shared(shared.clone(), &config.jobs, work)?,
    };
    jobs.register_metrics(&mut registry);
    if let Some(shared) = &shared {
        shared.register_metrics(&mut registry);
    }
    reviews.set_retention(config.review_retention);
    reviews.set_approvals(config.review_approvals);
    reviews.register_metrics(&mut registry);
    // Attached before anything can hold or resolve a review; it starts
    // sending once the API's address (for the console links) is known.
    let notifier = config.review_notify.clone().map(|c| {
        let n = crate::webhook::Notifier::new(c, &mut registry);
        n.attach(&reviews);
        n
    });
    let proxy_stats = crate::proxy::ProxyStats::register(&mut registry);
    let upstream = config
        .proxy
        .upstream
        .as_deref()
        .map(|u| {
            u.parse::<http::Uri>()
                .map_err(|e| StartError::Upstream(format!("{u:?}: {e}")))
        })
        .transpose()?;
    let (proxy_cert, proxy_tls) = open_tls("proxy_tls", config.proxy.tls.as_ref())?;
    let mut components: Vec<Arc<dyn Component>> = vec![
        Arc::new(AuthComponent(keys.clone())),
        Arc::new(PoliciesComponent("policies", policies.clone())),
        Arc::new(AuditComponent(audit.clone())),
        Arc::new(jobs.clone()),
        Arc::new(reviews.clone()),
        Arc::new(crate::proxy::UpstreamComponent {
            upstream: config.proxy.upstream.clone(),
            stats: proxy_stats.clone(),
        }),
    ];
    for cert in [&api_cert, &proxy_cert].into_iter().flatten() {
        components.push(cert.clone());
    }
    if let Some(shared) = &shared {
        components.push(Arc::new(shared.clone()));
    }
    if let Some(shadow) = &shadow_policies {
        components.push(Arc::new(PoliciesComponent(
            "shadow_policies",
            shadow.clone(),
        )));
    }
    let health = Arc::new(Health::new(components));

    let app = Arc::new(App {
        config: config.clone(),
        keys,
        health,
        registry,
        http_metrics,
        decision_metrics,
        resolver,
        policies: policies.clone(),
        shadow_policies: shadow_policies.clone(),
        audit: audit.clone(),
        redaction,
        jobs,
        reviews,
    });
    let rt = tokio::runtime::Handle::current();

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut watches = Vec::new();
    if policies.dir().is_dir() {
        let (audit, rt) = (audit.clone(), rt.clone());
        let on_reload = move |outcome: ReloadOutcome| {
            if let Some(record) = reload_record(&outcome) {
                audit_in_background(&audit, &rt, record);
            }
        };
        let mut rx = shutdown_rx.clone();
        let stop = async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let task = policy::spawn_watcher(policies.clone(), on_reload, stop).map_err(|e| {
            StartError::Watch {
                what: "policies",
                error: e.to_string(),
            }
        })?;
        watches.push(task);
    }
    // The shadow set reloads like the enforced one (a broken edit keeps the
    // last good set); its reloads are logged, not audited, since they
    // change no decision.
    if let Some(shadow) = shadow_policies.clone().filter(|s| s.dir().is_dir()) {
        let on_reload = |outcome: ReloadOutcome| {
            tracing::info!(outcome = ?outcome, "shadow policies reload");
        };
        let mut rx = shutdown_rx.clone();
        let stop = async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let task =
            policy::spawn_watcher(shadow, on_reload, stop).map_err(|e| StartError::Watch {
                what: "shadow policies",
                error: e.to_string(),
            })?;
        watches.push(task);
    }
    let keys_watch = match app.keys.path() {
        Some(path) => {
            let keys = app.keys.clone();
            let (audit, rt) = (audit.clone(), rt.clone());
            let handle = policy::watch_path(path, policy::DEFAULT_DEBOUNCE, move |_| {
                let mut record = AuditRecord::new(RecordKind::KeyChange);
                match keys.reload() {
                    Ok(n) => {
                        tracing::info!(keys = n, "keys file reloaded");
                        record.detail = Some(serde_json::json!({"what": "api_keys", "applied": true, "keys": n}));
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "keys file reload failed; keeping the previous keys");
                        record.detail = Some(serde_json::json!({"what": "api_keys", "applied": false, "error": e.to_string()}));
                    }
                }
                audit_in_background(&audit, &rt, record);
            })
            .map_err(|e| StartError::Watch {
                what: "keys file",
                error: e.to_string(),
            })?;
            Some(handle)
        }
        None => None,
    };
    // The certificate and key are watched like the keys file (renames, a
    // Secret's `..data` swap, writes in place) and read again on change.
    let mut tls_watches = Vec::new();
    for cert in [&api_cert, &proxy_cert].into_iter().flatten() {
        let files = cert.files();
        let mut paths = vec![files.cert.clone()];
        if files.key != files.cert {
            paths.push(files.key.clone());
        }
        for path in paths {
            let cert = cert.clone();
            let handle = policy::watch_path(&path, policy::DEFAULT_DEBOUNCE, move |_| {
                cert.reload();
            })
            .map_err(|e| StartError::Watch {
                what: "tls files",
                error: e.to_string(),
            })?;
            tls_watches.push(handle);
        }
    }

    let api_listener = TcpListener::bind(config.api.listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: config.api.listen,
            source,
        })?;
    let api_addr = api_listener
        .local_addr()
        .map_err(|source| StartError::Bind {
            addr: config.api.listen,
            source,
        })?;

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
            audit.clone(),
            shared.clone(),
            shutdown_rx.clone(),
        )));
    }
    tasks.extend(watches);
    if let Some(n) = notifier {
        let base = crate::webhook::derived_console_base(api_addr, config.api.tls.is_some());
        tasks.push(n.spawn(base, shutdown_rx.clone()));
    }
    let mut proxy_addr = None;
    if let Some(upstream) = upstream {
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
            crate::proxy::Proxy::new(app.clone(), upstream, config.proxy.clone(), proxy_stats)
                .map_err(StartError::Upstream)?,
        );
        let pairs = listeners
            .into_iter()
            .map(|l| Ok((l, Arc::new(proxy.for_thread()?))))
            .collect::<Result<Vec<_>, String>>()
            .map_err(StartError::Upstream)?;
        tasks.push(tokio::spawn(crate::proxy::run_background_forwarder(
            app.clone(),
            proxy,
            shutdown_rx.clone(),
        )));
        tasks.push(
            server::serve_per_thread(
                "proxy",
                pairs,
                proxy_tls,
                config.server.clone(),
                shutdown_rx.clone(),
            )
            .map_err(bind_error)?,
        );
        tracing::info!(addr = %addr, upstream = config.proxy.upstream.as_deref().unwrap_or(""), "proxy listening");
        proxy_addr = Some(addr);
    }
    tracing::info!(addr = %api_addr, tls = config.api.tls.is_some(), "api listening");
    app.health.set_ready();

    Ok(Running {
        api_addr,
        proxy_addr,
        app,
        shutdown: shutdown_tx,
        tasks,
        _keys_watch: keys_watch,
        _tls_watches: tls_watches,
        _data_lock: data_lock,
        shared,
    })
}
