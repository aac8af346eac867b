//! The `verdict` binary: parse the command line, load the config, run.
//!
//! Kept thin on purpose: everything that can be tested lives in the library.
//! Exit codes: 0 on success and after a graceful drain, 1 when a check fails,
//! 2 on a usage error, 64 when the configuration is bad or start-up is refused.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use verdict::api::auth::Scope;
use verdict::config::{Config, LogFormat, Overrides};

/// mimalloc instead of glibc's malloc: the engine's tokenizer and the proxy
/// allocate many small short-lived objects per request, and glibc's
/// malloc/free were 10 % of pass-through and 28 % of gated CPU in a perf
/// profile of the proxy.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

#[derive(Args)]
struct ReviewsArgs {
    /// The server's API URL.
    #[arg(long, global = true, env = "VERDICT_URL", default_value_t = verdict::review_cli::default_url())]
    url: String,
    /// Print the server's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    /// PEM roots for an https URL (the system roots otherwise).
    #[arg(long, global = true)]
    ca_file: Option<PathBuf>,
    #[command(subcommand)]
    command: ReviewsCommand,
}

#[derive(Subcommand)]
enum ReviewsCommand {
    /// Reviews, pending oldest first, others newest first.
    List {
        #[arg(long, value_parser = ["pending", "approved", "rejected", "expired"])]
        status: Option<String>,
        /// At most this many (the server's default is 100).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: Option<u32>,
    },
    /// One review: its rules, request, resolution and forward.
    Show { id: String },
    /// Approve a held request: it is then forwarded exactly once.
    Approve {
        id: String,
        /// Why (stored with the resolution and in its audit record).
        #[arg(long)]
        note: String,
        /// Who approves [default: $USER].
        #[arg(long, env = "VERDICT_REVIEWER")]
        reviewer: Option<String>,
    },
    /// Reject a held request: it is never forwarded.
    Reject {
        id: String,
        /// Why (stored with the resolution and in its audit record).
        #[arg(long)]
        note: String,
        /// Who rejects [default: $USER].
        #[arg(long, env = "VERDICT_REVIEWER")]
        reviewer: Option<String>,
    },
}

#[derive(Subcommand)]
enum WitnessCommand {
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

#[derive(Subcommand)]
enum AuditCommand {
    /// Re-verify the whole local log: record hashes, tree nodes, checkpoint
    /// signatures and consistency. Exit 1 naming the first bad item.
    ///
    /// With --config, also ask each of its [[audit.witnesses]], as `serve`
    /// does, whether the log extends the tree it cosigned last (the newest
    /// checkpoint is submitted to it): exit 1 naming the witness and both
    /// sizes when it holds a larger tree or one the log does not extend (a
    /// rollback), or when it cannot be asked.
    Verify {
        /// [default: the config's `data.dir`, else data]
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// The server's config file: its `[[audit.witnesses]]` are asked
        /// (exit 64 when it is bad).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Check every replica's audit checkpoints published to a shared store
    /// (`[store] url`): each log's checkpoints are signed by the key
    /// published with them, only grow, and each extends the one before.
    /// The password is read from the URL or VERDICT_STORE_PASSWORD. Exit 0
    /// all consistent, 1 a log is not, 2 the store cannot be read.
    VerifyRemote {
        /// The store's URL, e.g. postgres://verdict@db:5432/verdict.
        #[arg(long)]
        store: String,
    },
    /// Check a proof from GET /v2/audit/{id}/proof against a trusted public
    /// key file. Exit 0 valid, 1 invalid, 2 usage error.
    VerifyProof {
        proof: PathBuf,
        #[arg(long)]
        key: PathBuf,
        /// The record (as `GET /v2/audit/{id}` returns it) the proof is
        /// claimed to prove; without it only the proof itself is checked.
        #[arg(long)]
        record: Option<PathBuf>,
    },
    /// Check offline that a newer checkpoint extends an older one: both
    /// signed by KEY, and the proof (GET /v2/audit/consistency) holds.
    /// Exit 0 valid, 1 invalid, 2 usage error.
    VerifyConsistency {
        /// The older checkpoint note (GET /v2/audit/checkpoint, saved).
        old: PathBuf,
        /// The newer checkpoint note.
        new: PathBuf,
        /// The proof from GET /v2/audit/consistency?first=OLD&second=NEW.
        #[arg(long)]
        proof: PathBuf,
        /// The log's public key (GET /v2/audit/keys/{kid}).
        #[arg(long)]
        key: PathBuf,
    },
    /// Write the records that match the filters as JSON lines, each with its
    /// inclusion proof against the newest checkpoint, so that the export
    /// verifies on its own (`verdict audit verify-export`). Progress goes to
    /// stderr. Safe while the server runs.
    Export {
        #[arg(long, default_value = "data")]
        data_dir: PathBuf,
        /// Write here instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
        #[command(flatten)]
        filter: FilterArgs,
    },
    /// Check every line of an export against the log's public key.
    /// Exit 0 valid, 1 invalid (naming the first bad line), 2 usage error.
    VerifyExport {
        export: PathBuf,
        /// The log's public key (GET /v2/audit/keys/{kid}).
        #[arg(long)]
        key: PathBuf,
    },
    /// Print one record, readably, with where it sits in the tree.
    Show {
        record_id: String,
        #[arg(long, default_value = "data")]
        data_dir: PathBuf,
    },
    /// Print the log's verifier keys (`origin+id+key`, active first), for
    /// a witness's `--log`.
    Vkey {
        #[arg(long, default_value = "data")]
        data_dir: PathBuf,
    },
    /// Publish a new signing key, retire the old one (still published) and
    /// sign one checkpoint with both. Run with the server stopped.
    RotateKey {
        #[arg(long, default_value = "data")]
        data_dir: PathBuf,
        /// Config file, for `audit.origin`.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// Record filters shared by `audit export` (and the `GET /v2/audit/records`
/// query parameters of the same names).
#[derive(Args)]
struct FilterArgs {
    /// Records at or after: an RFC 3339 time, or a duration before now
    /// (24h, 7d).
    #[arg(long)]
    since: Option<String>,
    /// Records before: an RFC 3339 time, or a duration before now.
    #[arg(long)]
    until: Option<String>,
    /// decision, review_resolution, policy_reload or key_change.
    #[arg(long)]
    kind: Option<String>,
    /// The action type, e.g. refund.create.
    #[arg(long)]
    action: Option<String>,
    /// allow, deny or needs_review.
    #[arg(long)]
    decision: Option<String>,
    /// What an audit-mode action would have decided.
    #[arg(long)]
    would_decide: Option<String>,
    /// The proxy route's name.
    #[arg(long)]
    route: Option<String>,
    /// The API key name (or `proxy`).
    #[arg(long)]
    principal: Option<String>,
}

impl FilterArgs {
    fn filter(&self) -> Result<verdict::audit::export::Filter, String> {
        let mut f = verdict::audit::export::Filter::default();
        for (k, v) in [
            ("since", &self.since),
            ("until", &self.until),
            ("kind", &self.kind),
            ("action", &self.action),
            ("decision", &self.decision),
            ("would_decide", &self.would_decide),
            ("route", &self.route),
            ("principal", &self.principal),
        ] {
            if let Some(v) = v {
                f.set(k, v)
                    .map_err(|e| format!("--{}: {e}", k.replace('_', "-")))?;
            }
        }
        Ok(f)
    }
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
    verdict::config::parse_duration(text)
}

/// Prints a command's output and returns its exit code.
fn emit(out: verdict::cases::Output) -> ExitCode {
    print!("{}", out.stdout);
    eprint!("{}", out.stderr);
    ExitCode::from(out.code)
}

#[derive(Args)]
struct ServeArgs {
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
    verdict::api::auth::check_key_name(s).map(|()| s.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(args),
        Command::Check {
            policies,
            config,
            strict,
        } => check(policies, config, strict),
        Command::Test { on, json } => match on.load() {
            Ok((config, dir)) => emit(verdict::cases::test_dir(&dir, config, json)),
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
                let args = verdict::cases::replay::Args {
                    draft: policies,
                    baseline: baseline.unwrap_or_else(|| c.policies_dir.clone()),
                    data_dir: data_dir.unwrap_or_else(|| c.data_dir.clone()),
                    since,
                    route,
                    json,
                };
                emit(verdict::cases::replay::replay(&args, c))
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
            Ok((config, dir)) => emit(verdict::cases::explain_file(
                &file,
                case.as_deref(),
                &dir,
                config,
                json,
            )),
            Err(code) => code,
        },
        Command::Audit(cmd) => audit(cmd),
        Command::Witness(cmd) => witness(cmd),
        Command::Backup { data_dir, to } => backup(&data_dir, &to),
        Command::Reviews(args) => reviews(args),
        Command::Keys(KeysCommand::New { name, scopes }) => {
            match verdict::api::auth::new_key(&name, &scopes) {
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

/// `verdict backup`: copy, then prove the copy verifies.
fn backup(data_dir: &std::path::Path, to: &std::path::Path) -> ExitCode {
    let report = match verdict::backup::backup(data_dir, to) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("verdict: backup: {e}");
            return ExitCode::from(2);
        }
    };
    match verdict::audit::verify_log(&report.database, to, |_, _| {}) {
        Ok(r) => {
            println!(
                "backed up {} ({} bytes) and {} key file(s) to {}; audit log ok: {} records, tree size {}",
                data_dir.display(),
                report.database_bytes,
                report.key_files.len(),
                to.display(),
                r.records,
                r.tree_size
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "verdict: backup written to {} but its audit log does not verify: {e}",
                to.display()
            );
            ExitCode::FAILURE
        }
    }
}

/// `verdict reviews ...`: one call to the Review API of a running server.
fn reviews(args: ReviewsArgs) -> ExitCode {
    use verdict::review_cli::{default_reviewer, run, Action, Options, KEY_ENV};
    let reviewer =
        |r: Option<String>| r.unwrap_or_else(|| default_reviewer(std::env::var("USER").ok()));
    let action = match args.command {
        ReviewsCommand::List { status, limit } => Action::List { status, limit },
        ReviewsCommand::Show { id } => Action::Show { id },
        ReviewsCommand::Approve {
            id,
            note,
            reviewer: r,
        } => Action::Resolve {
            id,
            approve: true,
            reviewer: reviewer(r),
            note,
        },
        ReviewsCommand::Reject {
            id,
            note,
            reviewer: r,
        } => Action::Resolve {
            id,
            approve: false,
            reviewer: reviewer(r),
            note,
        },
    };
    let opts = Options {
        url: args.url,
        key: std::env::var(KEY_ENV).ok(),
        json: args.json,
        ca_file: args.ca_file,
    };
    let rt = match start_runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match rt.block_on(run(&opts, &action)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("verdict: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `verdict check`: the policies, and with `--config` the config file too.
fn check(policies: Option<PathBuf>, config: Option<PathBuf>, strict: bool) -> ExitCode {
    let mut opts = verdict::policy::CheckOptions {
        strict,
        ..Default::default()
    };
    let mut dir = PathBuf::from(verdict::config::DEFAULT_POLICIES_DIR);
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
        let (code, out) = verdict::policy::check(&dir, &opts);
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

fn audit(cmd: AuditCommand) -> ExitCode {
    match cmd {
        AuditCommand::VerifyRemote { store } => verify_remote(&store),
        AuditCommand::Verify { data_dir, config } => {
            let cfg = match Config::load(config.as_deref(), &Overrides::default()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("verdict: config: {e}");
                    return ExitCode::from(EXIT_CONFIG);
                }
            };
            let data_dir = data_dir.unwrap_or(cfg.data_dir);
            let db = data_dir.join("verdict.db");
            if !db.exists() {
                eprintln!("verdict: no audit log at {}", db.display());
                return ExitCode::from(2);
            }
            let mut last_print = std::time::Instant::now();
            let progress = |done: u64, total: u64| {
                if last_print.elapsed() >= std::time::Duration::from_secs(1) || done == total {
                    eprintln!("verified {done}/{total} records");
                    last_print = std::time::Instant::now();
                }
            };
            match verdict::audit::verify_log(&db, &data_dir, progress) {
                Ok(r) => {
                    println!(
                        "ok: {} records, {} checkpoints, tree size {}, root {}, {} key(s)",
                        r.records, r.checkpoints, r.tree_size, r.root, r.keys
                    );
                    ask_witnesses(&db, &cfg.audit.witnesses)
                }
                Err(e) => {
                    eprintln!("verdict: audit log INVALID: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        AuditCommand::VerifyConsistency {
            old,
            new,
            proof,
            key,
        } => {
            let read = |p: &PathBuf| {
                std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))
            };
            let files =
                (|| Ok::<_, String>((read(&old)?, read(&new)?, read(&proof)?, read(&key)?)))();
            let (old, new, proof, key) = match files {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("verdict: {e}");
                    return ExitCode::from(2);
                }
            };
            match verdict::audit::verify_consistency_documents(&old, &new, &proof, &key) {
                Ok(summary) => {
                    println!("{summary}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("verdict: INVALID: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        AuditCommand::Export {
            data_dir,
            output,
            filter,
        } => {
            let filter = match filter.filter() {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("verdict: {e}");
                    return ExitCode::from(2);
                }
            };
            let db = data_dir.join("verdict.db");
            if !db.exists() {
                eprintln!("verdict: no audit log at {}", db.display());
                return ExitCode::from(2);
            }
            let mut sink: Box<dyn std::io::Write> = match &output {
                Some(p) => match std::fs::File::create(p) {
                    Ok(f) => Box::new(std::io::BufWriter::new(f)),
                    Err(e) => {
                        eprintln!("verdict: {}: {e}", p.display());
                        return ExitCode::from(2);
                    }
                },
                None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
            };
            let started = std::time::Instant::now();
            let mut last = started;
            let progress = |done: u64, total: u64| {
                if last.elapsed() >= std::time::Duration::from_secs(1) {
                    eprintln!("read {done}/{total} records");
                    last = std::time::Instant::now();
                }
            };
            match verdict::audit::export::export(&db, &data_dir, &filter, &mut sink, progress) {
                Ok(r) => {
                    eprintln!(
                        "exported {} of {} records against the checkpoint of size {} in {:.1} s",
                        r.exported,
                        r.scanned,
                        r.tree_size,
                        started.elapsed().as_secs_f64()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("verdict: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        AuditCommand::VerifyExport { export, key } => {
            let key = match std::fs::read_to_string(&key) {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("verdict: {}: {e}", key.display());
                    return ExitCode::from(2);
                }
            };
            let file = match std::fs::File::open(&export) {
                Ok(f) => std::io::BufReader::new(f),
                Err(e) => {
                    eprintln!("verdict: {}: {e}", export.display());
                    return ExitCode::from(2);
                }
            };
            let mut last = std::time::Instant::now();
            let progress = |n: u64| {
                if last.elapsed() >= std::time::Duration::from_secs(1) {
                    eprintln!("verified {n} lines");
                    last = std::time::Instant::now();
                }
            };
            match verdict::audit::export::verify_export(file, &key, progress) {
                Ok(n) => {
                    println!(
                        "ok: {n} records, each proven against a checkpoint signed by the given key"
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("verdict: INVALID: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        AuditCommand::Show {
            record_id,
            data_dir,
        } => {
            let Ok(id) = uuid::Uuid::parse_str(&record_id) else {
                eprintln!("verdict: {record_id:?} is not a record id (a UUID)");
                return ExitCode::from(2);
            };
            match verdict::audit::export::show(&data_dir.join("verdict.db"), id) {
                Ok(Some(text)) => {
                    println!("{text}");
                    ExitCode::SUCCESS
                }
                Ok(None) => {
                    eprintln!("verdict: no record {id}");
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("verdict: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        AuditCommand::Vkey { data_dir } => match verdict::audit::keys::load_docs(&data_dir) {
            Ok(docs) if !docs.is_empty() => {
                let mut docs = docs;
                docs.sort_by_key(|d| d.status != verdict::audit::KeyStatus::Active);
                for d in &docs {
                    match (d.note_name(), d.public_key()) {
                        (Some(name), Ok(pk)) => {
                            println!("{}", verdict::audit::note::verifier_key(name, &pk));
                        }
                        _ => {
                            eprintln!("verdict: key {} has no origin or key", d.kid);
                            return ExitCode::FAILURE;
                        }
                    }
                }
                ExitCode::SUCCESS
            }
            Ok(_) => {
                eprintln!("verdict: no audit keys in {}", data_dir.display());
                ExitCode::from(2)
            }
            Err(e) => {
                eprintln!("verdict: {e}");
                ExitCode::FAILURE
            }
        },
        AuditCommand::VerifyProof { proof, key, record } => {
            let read = |p: &PathBuf| {
                std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))
            };
            let (proof_text, key_text) = match (read(&proof), read(&key)) {
                (Ok(p), Ok(k)) => (p, k),
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("verdict: {e}");
                    return ExitCode::from(2);
                }
            };
            let record_text = match record.as_ref().map(read).transpose() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("verdict: {e}");
                    return ExitCode::from(2);
                }
            };
            let checked = verdict::audit::verify_proof(&proof_text, &key_text).and_then(|()| {
                match &record_text {
                    Some(r) => verdict::audit::verify_record(&proof_text, r),
                    None => Ok(()),
                }
            });
            match checked {
                Ok(()) if record_text.is_some() => {
                    println!(
                        "ok: the proof is valid, signed by the given key, and proves this record"
                    );
                    ExitCode::SUCCESS
                }
                Ok(()) => {
                    println!("ok: the proof is valid and signed by the given key (only the proof was checked; pass --record RECORD.json to check that it proves that record)");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("verdict: proof INVALID: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        AuditCommand::RotateKey { data_dir, config } => {
            let cfg = match Config::load(config.as_deref(), &Overrides::default()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("verdict: config: {e}");
                    return ExitCode::from(EXIT_CONFIG);
                }
            };
            // The running server owns the log: rotating under it would fork
            // the log and leave it answering 503 until a restart.
            let _lock = match verdict::datalock::acquire(&data_dir) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("verdict: cannot rotate the key now: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match verdict::audit::rotate_key(&data_dir.join("verdict.db"), &data_dir, &cfg.audit) {
                Ok(doc) => {
                    println!("new active key: {}", doc.kid);
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

fn witness(cmd: WitnessCommand) -> ExitCode {
    use verdict::witness::{TrustedLog, Witness};
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
            verdict::runtime::telemetry::init(LogFormat::Json);
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
                let server = tokio::spawn(verdict::server::serve(
                    "witness",
                    listener,
                    None,
                    std::sync::Arc::new(verdict::witness::WitnessHandler { witness }),
                    verdict::config::ServerConfig::witness_defaults(),
                    stopped,
                ));
                verdict::runtime::telemetry::shutdown_signal().await;
                stop.send_replace(true);
                let _ = server.await;
                ExitCode::SUCCESS
            })
        }
    }
}

/// The witness half of `verdict audit verify --config`: each witness must
/// cosign the newest checkpoint.
fn ask_witnesses(db: &std::path::Path, witnesses: &[verdict::config::WitnessConfig]) -> ExitCode {
    if witnesses.is_empty() {
        return ExitCode::SUCCESS;
    }
    let rt = match start_runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let checks = match rt.block_on(verdict::audit::ask_witnesses(db, witnesses)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("verdict: cannot ask the witnesses: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut code = ExitCode::SUCCESS;
    for c in checks {
        match c.result {
            Ok(size) => println!(
                "ok: witness {} cosigned tree size {size}: the log extends every tree it saw",
                c.witness
            ),
            Err(e) if e.is_rollback() => {
                eprintln!("verdict: audit log INVALID: {e}");
                code = ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("verdict: witness {} could not be asked: {e}", c.witness);
                code = ExitCode::FAILURE;
            }
        }
    }
    code
}

/// `verdict audit verify-remote`.
fn verify_remote(url: &str) -> ExitCode {
    let pg = match verdict::config::StoreConfig::from_url(url) {
        Ok(verdict::config::StoreConfig::Postgres(pg)) => pg,
        Ok(verdict::config::StoreConfig::Sqlite) => {
            eprintln!("verdict: --store: a single SQLite replica publishes no checkpoints; give a postgres:// URL");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("verdict: --store: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match start_runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let verdicts = rt.block_on(async {
        let client = verdict::shared::Shared::connect_reader(&pg)
            .await
            .map_err(|e| e.to_string())?;
        verdict::witness::remote::verify_remote(&client).await
    });
    let verdicts = match verdicts {
        Ok(v) => v,
        Err(e) => {
            eprintln!("verdict: cannot read the published checkpoints: {e}");
            return ExitCode::from(2);
        }
    };
    if verdicts.is_empty() {
        println!("no checkpoints published yet");
        return ExitCode::SUCCESS;
    }
    let mut bad = 0;
    for v in &verdicts {
        match &v.result {
            Ok(c) => println!(
                "ok: {}: {} checkpoints, each extending the one before, tree size {}",
                v.origin, c.checkpoints, c.tree_size
            ),
            Err(e) => {
                bad += 1;
                println!("INVALID: {}: {e}", v.origin);
            }
        }
    }
    if bad > 0 {
        eprintln!(
            "verdict: {bad} of {} logs are not consistent",
            verdicts.len()
        );
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// A tokio runtime with IO and timers, or the exit code after saying why
/// there is none (`verdict reviews` runs on one thread, `serve` and the
/// witness on many).
fn start_runtime(
    mut builder: tokio::runtime::Builder,
) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        eprintln!("verdict: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
}

fn serve(args: ServeArgs) -> ExitCode {
    let overrides = Overrides {
        api_listen: args.api_listen,
        proxy_listen: args.proxy_listen,
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
    verdict::runtime::telemetry::init(config.log_format);
    let runtime = match start_runtime(tokio::runtime::Builder::new_multi_thread()) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let running = match verdict::app::start(config).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "start-up refused");
                eprintln!("verdict: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        };
        verdict::runtime::telemetry::shutdown_signal().await;
        tracing::info!("signal received; draining");
        running.shutdown().await;
        ExitCode::SUCCESS
    })
}
