//! The command line: every `verdict` subcommand, parsed with clap and run.
//! `src/main.rs` only calls [`main`]; each subcommand that is more than a
//! call into another part has its file here.
//!
//! Exit codes: 0 on success and after a graceful drain, 1 when a check fails,
//! 2 on a usage error, 64 when the configuration is bad or start-up is refused.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, Overrides};
use crate::http::auth::Scope;

mod audit;
pub mod backup;
pub mod reviews;
mod serve;
mod witness;

use audit::AuditCommand;
use reviews::ReviewsArgs;
use serve::{start_runtime, ServeArgs};
use witness::WitnessCommand;

/// Exit code for a bad configuration (EX_USAGE from sysexits).
const EXIT_CONFIG: u8 = 64;

#[derive(Parser)]
#[command(
    name = "verdict",
    version,
    about = "A sidecar that gates actions with evidence"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the API listener (and the proxy when an upstream is configured).
    Serve(ServeArgs),
    /// Validate every policy file; print `file:line:col: message` per error.
    ///
    /// Besides each file's own errors, a route whose hold_timeout is longer
    /// than review.ttl is an error (the review would expire while the call
    /// is held), and so is a route suffix that another route shadows.
    Check {
        /// Policies directory [default: the config's `[policies] dir`, else
        /// policies].
        #[arg(long)]
        policies: Option<PathBuf>,
        /// Config file to validate too (exit 64 when it is bad, as for
        /// `serve`); hold_timeout is then checked against its review.ttl
        /// instead of the default 24h.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Treat warnings (a set that gates nothing, a rule on a param no
        /// route extracts, routes that share paths) as errors.
        #[arg(long)]
        strict: bool,
    },
    /// Run the policy test files (*.test.toml beside the policies): decide
    /// each case as the API or the proxy would, offline, and compare.
    ///
    /// Prints one line per case and a diff per failure. Exit 0 when every
    /// case passes, 1 when one does not, 2 on unusable input (policies that
    /// do not load, a malformed test file, no test files).
    Test {
        #[command(flatten)]
        on: CasesArgs,
        /// Print a machine-readable report.
        #[arg(long)]
        json: bool,
    },
    /// Decide one case and print why: route, action policy, params,
    /// requirements and their floors, every rule, every claim, and the
    /// decision table's row.
    ///
    /// FILE is a test file (its only case, or the one --case names) or a
    /// /v2/authorize body (*.json). Exit 0 when explained, 2 on unusable
    /// input.
    Explain {
        file: PathBuf,
        /// The case to explain, when FILE holds several.
        #[arg(long)]
        case: Option<String>,
        #[command(flatten)]
        on: CasesArgs,
        /// Print the explanation as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Re-decide recorded traffic with a draft policy set: the decisions
    /// the server captured (`[audit] capture_inputs`) in the window, decided
    /// by the baseline set (which must reproduce them) and by the draft.
    ///
    /// Reads the data dir read-only, beside a running server. Prints the
    /// flips (recorded -> draft, with example record ids), the calls the
    /// draft would newly send to review, and inputs retention has deleted
    /// (missing). Exit 0 when the baseline reproduced every decision
    /// recorded under its revision, 1 when it did not, 2 on unusable input
    /// or a stored input that does not match its record's input_hash.
    Replay {
        /// The draft policies directory.
        #[arg(long)]
        policies: PathBuf,
        /// The policies the server runs [default: the config's
        /// `[policies] dir`].
        #[arg(long)]
        baseline: Option<PathBuf>,
        /// The server's config file: its `data_dir`, `[defaults]`,
        /// `[authorize]` and `[evidence]` apply [default: built-in
        /// defaults].
        #[arg(long)]
        config: Option<PathBuf>,
        /// The server's data dir [default: the config's `data_dir`].
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// How far back to replay (`24h`, `7d`, `90m`).
        #[arg(long, default_value = "24h", value_parser = parse_window)]
        since: std::time::Duration,
        /// Only the decisions of this proxy route.
        #[arg(long)]
        route: Option<String>,
        /// Print a machine-readable report.
        #[arg(long)]
        json: bool,
    },
    /// Manage API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Check and maintain the tamper-evident audit log.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Run a witness that cosigns another verdict's audit checkpoints.
    #[command(subcommand)]
    Witness(WitnessCommand),
    /// Copy the data dir consistently while the server runs (SQLite's
    /// online backup, then the key files), and verify the copy's audit log.
    /// Restore by stopping the server and starting it on the copy.
    Backup {
        #[arg(long, default_value = "data")]
        data_dir: PathBuf,
        /// A new (or empty) directory for the copy.
        #[arg(long)]
        to: PathBuf,
    },
    /// List, show, approve and reject held requests on a running server
    /// (the Review API, with the key in VERDICT_KEY).
    Reviews(ReviewsArgs),
}

/// What `verdict test` and `verdict explain` decide against.
#[derive(Args)]
struct CasesArgs {
    /// Policies directory, holding the test files too [default: the
    /// config's `[policies] dir`, else policies].
    #[arg(long)]
    policies: Option<PathBuf>,
    /// Config file whose `[defaults]`, `[authorize]`, `[evidence]` and
    /// `[proxy]` settings apply (exit 64 when it is bad) [default: the
    /// built-in defaults].
    #[arg(long)]
    config: Option<PathBuf>,
}

impl CasesArgs {
    /// The config and the policies directory, or the exit code of a bad
    /// config.
    fn load(&self) -> Result<(Config, PathBuf), ExitCode> {
        match Config::load(self.config.as_deref(), &Overrides::default()) {
            Ok(c) => {
                let dir = self
                    .policies
                    .clone()
                    .unwrap_or_else(|| c.policies_dir.clone());
                Ok((c, dir))
            }
            Err(e) => {
                eprintln!("verdict: config: {e}");
                Err(ExitCode::from(EXIT_CONFIG))
            }
        }
    }
}

/// A `--since` window: a duration such as `24h`.
fn parse_window(text: &str) -> Result<std::time::Duration, String> {
    crate::config::parse_duration(text)
}

/// Prints a command's output and returns its exit code.
fn emit(out: crate::offline::Output) -> ExitCode {
    print!("{}", out.stdout);
    eprint!("{}", out.stderr);
    ExitCode::from(out.code)
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Print a fresh API key once, plus the entry for the keys file.
    New {
        /// The key's name; `proxy`, `anonymous` and `verdict:*` are reserved.
        #[arg(long, value_parser = parse_key_name)]
        name: String,
        /// Comma-separated, at least one: verify, authorize, batch, audit,
        /// review. A key without scopes could call only public endpoints.
        #[arg(long, value_delimiter = ',', value_parser = parse_scope, required = true, num_args = 1..)]
        scopes: Vec<Scope>,
    },
}

fn parse_scope(s: &str) -> Result<Scope, String> {
    Scope::parse(s.trim())
        .ok_or_else(|| format!("unknown scope {s:?} (verify, authorize, batch, audit, review)"))
}

/// A reserved or empty name is a usage error (exit 2), like a bad scope.
fn parse_key_name(s: &str) -> Result<String, String> {
    crate::http::auth::check_key_name(s).map(|()| s.to_string())
}

/// Parses the command line and runs the subcommand; the exit code is the
/// process's.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::command(args),
        Command::Check {
            policies,
            config,
            strict,
        } => check(policies, config, strict),
        Command::Test { on, json } => match on.load() {
            Ok((config, dir)) => emit(crate::offline::test_dir(&dir, config, json)),
            Err(code) => code,
        },
        Command::Replay {
            policies,
            baseline,
            config,
            data_dir,
            since,
            route,
            json,
        } => match Config::load(config.as_deref(), &Overrides::default()) {
            Ok(c) => {
                let args = crate::offline::replay::Args {
                    draft: policies,
                    baseline: baseline.unwrap_or_else(|| c.policies_dir.clone()),
                    data_dir: data_dir.unwrap_or_else(|| c.data_dir.clone()),
                    since,
                    route,
                    json,
                };
                emit(crate::offline::replay::replay(&args, c))
            }
            Err(e) => {
                eprintln!("verdict: config: {e}");
                ExitCode::from(EXIT_CONFIG)
            }
        },
        Command::Explain {
            file,
            case,
            on,
            json,
        } => match on.load() {
            Ok((config, dir)) => emit(crate::offline::explain_file(
                &file,
                case.as_deref(),
                &dir,
                config,
                json,
            )),
            Err(code) => code,
        },
        Command::Audit(cmd) => audit::command(cmd),
        Command::Witness(cmd) => witness::command(cmd),
        Command::Backup { data_dir, to } => backup::command(&data_dir, &to),
        Command::Reviews(args) => reviews::command(args),
        Command::Keys(KeysCommand::New { name, scopes }) => {
            match crate::http::auth::new_key(&name, &scopes) {
                Ok(k) => {
                    println!("API key (shown once, store it now):\n  {}\n", k.token);
                    println!("Add this entry to the keys file:\n\n{}", k.entry);
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("verdict: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `verdict check`: the policies, and with `--config` the config file too.
fn check(policies: Option<PathBuf>, config: Option<PathBuf>, strict: bool) -> ExitCode {
    let mut opts = crate::policy::CheckOptions {
        strict,
        ..Default::default()
    };
    let mut dir = PathBuf::from(crate::config::DEFAULT_POLICIES_DIR);
    let mut shadow = None;
    if let Some(path) = &config {
        match Config::load(Some(path), &Overrides::default()) {
            Ok(c) => {
                opts.review_ttl = c.review_ttl;
                opts.config = Some(path.display().to_string());
                dir = c.policies_dir;
                shadow = c.shadow_policies_dir;
            }
            Err(e) => {
                eprintln!("verdict: config: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        }
    }
    // `--policies` names one set to check; without it, the config's sets:
    // the enforced one and its `[policies] shadow_dir`.
    let sets: Vec<(PathBuf, bool)> = match policies {
        Some(p) => vec![(p, false)],
        None => std::iter::once((dir, false))
            .chain(shadow.map(|s| (s, true)))
            .collect(),
    };
    let mut worst = 0;
    for (dir, is_shadow) in sets {
        let (code, out) = crate::policy::check(&dir, &opts);
        let out = if is_shadow {
            format!("shadow set {}:\n{out}", dir.display())
        } else {
            out
        };
        if code == 0 {
            print!("{out}");
        } else {
            eprint!("{out}");
        }
        worst = worst.max(code);
    }
    ExitCode::from(u8::try_from(worst).unwrap_or(1))
}
