//! What a running sidecar tells its operator: the logging set-up and the
//! shutdown signal here, the health registry in [`health`], the HTTP
//! metrics in [`metrics`]. A leaf: every part may report through it.
//!
//! Logs are JSON lines by default (one object per event, with the request's
//! span fields so every line of a request carries its `request_id`), or a
//! human-readable format with `--log-format pretty`. `RUST_LOG` filters them.

pub mod health;
pub mod metrics;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// The environment variable that filters log lines (`info` when unset).
pub const ENV_LOG_FILTER: &str = "RUST_LOG";

/// Installs the global subscriber. Call once, from `main`.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_env(ENV_LOG_FILTER).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stdout);
    let result = match format {
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .flatten_event(true)
            .try_init(),
        LogFormat::Pretty => {
            use std::io::IsTerminal;
            // Colour only for a terminal; a log file gets plain text.
            builder
                .pretty()
                .with_ansi(std::io::stdout().is_terminal())
                .try_init()
        }
    };
    if let Err(e) = result {
        eprintln!("verdict: logging already initialised: {e}");
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
