//! `verdict witness serve|vkey`: a C2SP witness that cosigns only
//! checkpoints consistent with the last one it cosigned.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use super::{start_runtime, EXIT_CONFIG};
use crate::config::LogFormat;

#[derive(Subcommand)]
pub(crate) enum WitnessCommand {
    /// Serve the C2SP tlog-witness protocol (POST /add-checkpoint): cosign
    /// each checkpoint of the listed logs that is consistent with the last
    /// one cosigned, refuse any other. Each answer is logged and counted
    /// (GET /metrics: verdict_witness_requests_total{outcome}).
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8282")]
        listen: std::net::SocketAddr,
        /// Where the witness keeps its key (witness.key) and state
        /// (witness.db).
        #[arg(long, default_value = "witness-data")]
        data_dir: PathBuf,
        /// The witness's key name, e.g. witness.example.com/w1.
        #[arg(long)]
        name: String,
        /// A log to cosign for: a verifier key as `verdict audit vkey`
        /// prints it. Repeat for more logs, or for a log's older keys.
        #[arg(long = "log", required = true)]
        logs: Vec<String>,
    },
    /// Print the witness's verifier key (creating its key on first use),
    /// for a log's `[[audit.witnesses]]` entry.
    Vkey {
        #[arg(long, default_value = "witness-data")]
        data_dir: PathBuf,
        /// The witness's key name, e.g. witness.example.com/w1.
        #[arg(long)]
        name: String,
    },
}

pub(crate) fn command(cmd: WitnessCommand) -> ExitCode {
    use crate::witness::{TrustedLog, Witness};
    match cmd {
        WitnessCommand::Vkey { data_dir, name } => {
            match Witness::open(&data_dir, &name, Vec::new()) {
                Ok(w) => {
                    println!("{}", w.vkey());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("verdict: {e}");
                    ExitCode::from(EXIT_CONFIG)
                }
            }
        }
        WitnessCommand::Serve {
            listen,
            data_dir,
            name,
            logs,
        } => {
            // Keys of one origin form one trusted log.
            let mut grouped: Vec<(String, Vec<String>)> = Vec::new();
            for v in logs {
                let origin = v.split('+').next().unwrap_or("").to_string();
                match grouped.iter_mut().find(|(o, _)| *o == origin) {
                    Some((_, keys)) => keys.push(v),
                    None => grouped.push((origin, vec![v])),
                }
            }
            let trusted: Result<Vec<TrustedLog>, _> = grouped
                .iter()
                .map(|(_, keys)| TrustedLog::from_vkeys(keys))
                .collect();
            let witness = match trusted.and_then(|t| Witness::open(&data_dir, &name, t)) {
                Ok(w) => std::sync::Arc::new(w),
                Err(e) => {
                    eprintln!("verdict: {e}");
                    return ExitCode::from(EXIT_CONFIG);
                }
            };
            let _ =
                crate::telemetry::init(LogFormat::Json, &crate::config::TracesConfig::default());
            let runtime = match start_runtime(tokio::runtime::Builder::new_multi_thread()) {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::bind(listen).await {
                    Ok(l) => l,
                    Err(e) => {
                        eprintln!("verdict: witness: cannot listen on {listen}: {e}");
                        return ExitCode::from(EXIT_CONFIG);
                    }
                };
                let addr = listener.local_addr().map_or(listen, |a| a);
                tracing::info!(%addr, vkey = %witness.vkey(), "witness listening");
                let (stop, stopped) = tokio::sync::watch::channel(false);
                let server = tokio::spawn(crate::server::serve(
                    "witness",
                    listener,
                    None,
                    std::sync::Arc::new(crate::witness::WitnessHandler { witness }),
                    crate::config::ServerConfig::witness_defaults(),
                    stopped,
                ));
                crate::telemetry::shutdown_signal().await;
                stop.send_replace(true);
                let _ = server.await;
                ExitCode::SUCCESS
            })
        }
    }
}
