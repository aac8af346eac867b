//! `verdict serve`: the config loaded, the server started, and a signal
//! turned into a graceful drain.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::EXIT_CONFIG;
use crate::config::{Config, LogFormat, Overrides};

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// Config file (TOML); built-in defaults when absent.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address of the native API (`[api] listen`) [default: 127.0.0.1:8181].
    #[arg(long)]
    api_listen: Option<std::net::SocketAddr>,
    /// Address of the proxy (`[proxy] listen`); the proxy runs only with an
    /// upstream [default: 127.0.0.1:8080].
    #[arg(long)]
    proxy_listen: Option<std::net::SocketAddr>,
    /// Address of Envoy's external authorization, gRPC `Check`
    /// (`[ext_authz] listen`); not served without one.
    #[arg(long)]
    ext_authz_listen: Option<std::net::SocketAddr>,
    /// Upstream service URL, e.g. http://127.0.0.1:9000 (`[proxy] upstream`);
    /// without one no proxy runs.
    #[arg(long)]
    upstream: Option<String>,
    /// Policies directory (`[policies] dir`) [default: policies].
    #[arg(long)]
    policies: Option<PathBuf>,
    /// Data directory: SQLite database, audit signing keys, the redaction
    /// secret (`[data] dir`) [default: data].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// API keys file (`[auth] keys_file`); without one, auth is off and only
    /// loopback addresses are allowed.
    #[arg(long)]
    keys: Option<PathBuf>,
    /// Log format (`[log] format`) [default: json].
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
}

/// A tokio runtime with IO and timers, or the exit code after saying why
/// there is none (`verdict reviews` runs on one thread, `serve` and the
/// witness on many).
pub(crate) fn start_runtime(
    mut builder: tokio::runtime::Builder,
) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        eprintln!("verdict: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
}

pub(crate) fn command(args: ServeArgs) -> ExitCode {
    let overrides = Overrides {
        api_listen: args.api_listen,
        proxy_listen: args.proxy_listen,
        ext_authz_listen: args.ext_authz_listen,
        upstream: args.upstream,
        policies: args.policies,
        data_dir: args.data_dir,
        keys: args.keys,
        log_format: args.log_format,
    };
    let config = match Config::load(args.config.as_deref(), &overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("verdict: config: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let runtime = match start_runtime(tokio::runtime::Builder::new_multi_thread()) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    // The trace exporter runs on the runtime.
    let exporter = {
        let _on = runtime.enter();
        match crate::telemetry::init(config.log_format, &config.traces) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("verdict: config: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        }
    };
    runtime.block_on(async move {
        let running = match crate::app::start(config).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "start-up refused");
                eprintln!("verdict: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        };
        crate::telemetry::shutdown_signal().await;
        tracing::info!("signal received; draining");
        running.shutdown().await;
        if let Some(e) = exporter {
            let _ = tokio::task::spawn_blocking(move || e.shutdown()).await;
        }
        ExitCode::SUCCESS
    })
}
