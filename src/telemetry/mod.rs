//! What a running sidecar tells its operator: the logging set-up and the
//! shutdown signal here, the health registry in [`health`], the HTTP
//! metrics in [`metrics`]. A leaf: every part may report through it.
//!
//! Logs are JSON lines by default (one object per event, with the request's
//! span fields so every line of a request carries its `request_id`), or a
//! human-readable format with `--log-format pretty`. `RUST_LOG` filters them.

pub mod health;
pub mod metrics;
pub mod trace;

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::config::{LogFormat, TracesConfig};

/// The environment variable that filters log lines (`info` when unset).
pub const ENV_LOG_FILTER: &str = "RUST_LOG";

/// Installs the global subscriber: log lines in `format`, and OTel traces
/// when `traces` names an endpoint (then it must be called inside a Tokio
/// runtime, which runs the exporter). Call once, from `main`. Returns the
/// exporter, to flush at exit.
pub fn init(format: LogFormat, traces: &TracesConfig) -> Result<Option<trace::Exporter>, String> {
    let mut filter =
        EnvFilter::try_from_env(ENV_LOG_FILTER).unwrap_or_else(|_| EnvFilter::new("info"));
    // The spans that exist for traces only stay out of the log lines, which
    // keep the request's span as their current one.
    if let Ok(off) = format!("{}=off", trace::TARGET).parse() {
        filter = filter.add_directive(off);
    }
    let lines = match format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .flatten_event(true)
            .with_writer(std::io::stdout)
            .boxed(),
        LogFormat::Pretty => {
            use std::io::IsTerminal;
            // Colour only for a terminal; a log file gets plain text.
            tracing_subscriber::fmt::layer()
                .pretty()
                .with_ansi(std::io::stdout().is_terminal())
                .with_writer(std::io::stdout)
                .boxed()
        }
    };
    let provider = trace::provider(traces)?;
    let spans = provider.as_ref().map(trace::layer);
    let result = tracing_subscriber::registry()
        .with(lines.with_filter(filter))
        .with(spans)
        .try_init();
    if let Err(e) = result {
        eprintln!("verdict: logging already initialised: {e}");
        return Ok(None);
    }
    Ok(provider.map(trace::installed))
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
