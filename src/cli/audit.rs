//! `verdict audit ...`: the local log verified whole, proofs and
//! consistency checked offline, records exported and shown, the signing key
//! rotated, and the checkpoints replicas publish to a shared store checked.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::{start_runtime, EXIT_CONFIG};
use crate::config::{Config, Overrides};

#[derive(Subcommand)]
pub(crate) enum AuditCommand {
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
pub(crate) struct FilterArgs {
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
    fn filter(&self) -> Result<crate::audit::export::Filter, String> {
        let mut f = crate::audit::export::Filter::default();
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

/// Runs one `verdict audit` subcommand.
pub(crate) fn command(cmd: AuditCommand) -> ExitCode {
    match cmd {
        AuditCommand::VerifyRemote { store } => verify_remote(&store),
        AuditCommand::Verify { data_dir, config } => verify(data_dir, config.as_deref()),
        AuditCommand::VerifyConsistency {
            old,
            new,
            proof,
            key,
        } => verify_consistency(&old, &new, &proof, &key),
        AuditCommand::Export {
            data_dir,
            output,
            filter,
        } => export(&data_dir, output.as_deref(), &filter),
        AuditCommand::VerifyExport { export, key } => verify_export(&export, &key),
        AuditCommand::Show {
            record_id,
            data_dir,
        } => show(&record_id, &data_dir),
        AuditCommand::Vkey { data_dir } => vkey(&data_dir),
        AuditCommand::VerifyProof { proof, key, record } => {
            verify_proof(&proof, &key, record.as_deref())
        }
        AuditCommand::RotateKey { data_dir, config } => rotate_key(&data_dir, config.as_deref()),
    }
}

/// `verdict audit verify`: re-verifies the local log whole, then asks the
/// config's witnesses.
fn verify(data_dir: Option<PathBuf>, config: Option<&Path>) -> ExitCode {
    let cfg = match Config::load(config, &Overrides::default()) {
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
    match crate::audit::verify_log(&db, &data_dir, progress) {
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

/// `verdict audit verify-consistency`: checks offline that the newer
/// checkpoint extends the older one.
fn verify_consistency(old: &Path, new: &Path, proof: &Path, key: &Path) -> ExitCode {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let files = (|| Ok::<_, String>((read(old)?, read(new)?, read(proof)?, read(key)?)))();
    let (old, new, proof, key) = match files {
        Ok(f) => f,
        Err(e) => {
            eprintln!("verdict: {e}");
            return ExitCode::from(2);
        }
    };
    match crate::audit::verify_consistency_documents(&old, &new, &proof, &key) {
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

/// `verdict audit export`: writes the matching records, each with its
/// proof, as JSON lines to `output` or stdout.
fn export(data_dir: &Path, output: Option<&Path>, filter: &FilterArgs) -> ExitCode {
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
    let mut sink: Box<dyn std::io::Write> = match output {
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
    match crate::audit::export::export(&db, data_dir, &filter, &mut sink, progress) {
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

/// `verdict audit verify-export`: checks every line of an export against
/// the log's public key.
fn verify_export(export: &Path, key: &Path) -> ExitCode {
    let key = match std::fs::read_to_string(key) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("verdict: {}: {e}", key.display());
            return ExitCode::from(2);
        }
    };
    let file = match std::fs::File::open(export) {
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
    match crate::audit::export::verify_export(file, &key, progress) {
        Ok(n) => {
            println!("ok: {n} records, each proven against a checkpoint signed by the given key");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("verdict: INVALID: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `verdict audit show`: prints one record and where it sits in the tree.
fn show(record_id: &str, data_dir: &Path) -> ExitCode {
    let Ok(id) = uuid::Uuid::parse_str(record_id) else {
        eprintln!("verdict: {record_id:?} is not a record id (a UUID)");
        return ExitCode::from(2);
    };
    match crate::audit::export::show(&data_dir.join("verdict.db"), id) {
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

/// `verdict audit vkey`: prints the log's verifier keys, active first.
fn vkey(data_dir: &Path) -> ExitCode {
    match crate::audit::keys::load_docs(data_dir) {
        Ok(docs) if !docs.is_empty() => {
            let mut docs = docs;
            docs.sort_by_key(|d| d.status != crate::audit::KeyStatus::Active);
            for d in &docs {
                match (d.note_name(), d.public_key()) {
                    (Some(name), Ok(pk)) => {
                        println!("{}", crate::audit::note::verifier_key(name, &pk));
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
    }
}

/// `verdict audit verify-proof`: checks a proof against a trusted key, and
/// that it proves `record` when one is given.
fn verify_proof(proof: &Path, key: &Path, record: Option<&Path>) -> ExitCode {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let (proof_text, key_text) = match (read(proof), read(key)) {
        (Ok(p), Ok(k)) => (p, k),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("verdict: {e}");
            return ExitCode::from(2);
        }
    };
    let record_text = match record.map(read).transpose() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("verdict: {e}");
            return ExitCode::from(2);
        }
    };
    let checked =
        crate::audit::verify_proof(&proof_text, &key_text).and_then(|()| match &record_text {
            Some(r) => crate::audit::verify_record(&proof_text, r),
            None => Ok(()),
        });
    match checked {
        Ok(()) if record_text.is_some() => {
            println!("ok: the proof is valid, signed by the given key, and proves this record");
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

/// `verdict audit rotate-key`: publishes a new signing key and retires the
/// old one, with the server stopped.
fn rotate_key(data_dir: &Path, config: Option<&Path>) -> ExitCode {
    let cfg = match Config::load(config, &Overrides::default()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("verdict: config: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    // The running server owns the log: rotating under it would fork
    // the log and leave it answering 503 until a restart.
    let _lock = match crate::store::datalock::acquire(data_dir) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("verdict: cannot rotate the key now: {e}");
            return ExitCode::FAILURE;
        }
    };
    match crate::audit::rotate_key(&data_dir.join("verdict.db"), data_dir, &cfg.audit) {
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

/// The witness half of `verdict audit verify --config`: each witness must
/// cosign the newest checkpoint.
fn ask_witnesses(db: &std::path::Path, witnesses: &[crate::config::WitnessConfig]) -> ExitCode {
    if witnesses.is_empty() {
        return ExitCode::SUCCESS;
    }
    let rt = match start_runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let checks = match rt.block_on(crate::audit::ask_witnesses(db, witnesses)) {
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
    let pg = match crate::config::StoreConfig::from_url(url) {
        Ok(crate::config::StoreConfig::Postgres(pg)) => pg,
        Ok(crate::config::StoreConfig::Sqlite) => {
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
        let client = crate::store::postgres::SharedStore::connect_reader(&pg)
            .await
            .map_err(|e| e.to_string())?;
        crate::witness::remote::verify_remote(&client).await
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
