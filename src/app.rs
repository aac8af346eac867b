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
use crate::auth::{AuthMode, KeyStore, KeysError};
use crate::config::Config;
use crate::health::{self, Component, Health};
use crate::metrics::HttpMetrics;
use crate::server::{self, TlsError};

/// Shared state of a running sidecar. Built once; subsystems hold `Arc`s.
pub struct App {
    pub config: Arc<Config>,
    pub keys: Arc<KeyStore>,
    pub health: Arc<Health>,
    /// Read-only after start-up: every subsystem registers before serving.
    pub registry: Registry,
    pub http_metrics: HttpMetrics,
}

/// Why the sidecar could not start. `main` exits 64 on any of these.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("keys: {0}")]
    Keys(#[from] KeysError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A started sidecar.
pub struct Running {
    pub api_addr: SocketAddr,
    pub app: Arc<App>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
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

/// Builds the shared state and starts the listeners.
pub async fn start(config: Config) -> Result<Running, StartError> {
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
    let api_tls = config.api.tls.as_ref().map(server::load_tls).transpose()?;

    let mut registry = Registry::default();
    let http_metrics = HttpMetrics::register(&mut registry);
    let components: Vec<Arc<dyn Component>> = vec![Arc::new(AuthComponent(keys.clone()))];
    let health = Arc::new(Health::new(components));

    let app = Arc::new(App {
        config: config.clone(),
        keys,
        health,
        registry,
        http_metrics,
    });

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

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let tasks = vec![tokio::spawn(server::serve(
        "api",
        api_listener,
        api_tls,
        Arc::new(Api::new(app.clone())),
        config.server.clone(),
        shutdown_rx.clone(),
    ))];
    tracing::info!(addr = %api_addr, tls = config.api.tls.is_some(), "api listening");
    app.health.set_ready();

    Ok(Running {
        api_addr,
        app,
        shutdown: shutdown_tx,
        tasks,
    })
}
