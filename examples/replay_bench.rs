//! How fast `verdict replay` re-decides captured traffic.
//!
//! Records `--inputs` authorize decisions (default 100 000) into a fresh
//! data dir's durable audit log, with their inputs captured, on the same
//! decision path the server uses (`decide::authorize`, `Recorder::Durable`),
//! then times `verdict replay` on them (the library call the CLI makes): the
//! baseline set, which must reproduce every decision, and a draft that
//! lowers the review threshold. Prints the recording and replay rates.
//!
//! `cargo run --release --example replay_bench -- [--inputs 100000]`
//!
//! Everything is local and bounded by `--inputs`.

// A harness reads as one run, top to bottom; the 100-line limit is for src/.
#![allow(clippy::too_many_lines)]

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use verdict::audit::{AuditLog, RedactionKey};
use verdict::config::{Config, Overrides};
use verdict::decide::input::{ClaimIn, SourceIn};
use verdict::decide::{self, DecisionMetrics, Handles, Input, Recorder};
use verdict::evidence::Resolver;
use verdict::offline::replay::{self, Args};

type Error = Box<dyn std::error::Error + Send + Sync>;

fn policy(limit: u64) -> String {
    format!(
        "[[action]]\ntype = \"refund.create\"\nrequirements = {{ decision_mode = \"strict\", min_coverage = 0.85, citations = \"optional\" }}\n\n  [[action.rule]]\n  param = \"amount\"\n  op = \"gt\"\n  value = {limit}\n  effect = \"review\"\n"
    )
}

const EVIDENCE: &str = "Invoice 7: amount charged $400.00 for order 7 on 3 March 2026. \
    The parcel was delivered to the customer on 6 March 2026 and signed for at the door.";

fn input(i: u64) -> Input {
    let claim = if i.is_multiple_of(10) {
        "Order 7 was charged $900.00."
    } else {
        "Order 7 was charged $400.00 and delivered on 6 March 2026."
    };
    let mut params = serde_json::Map::new();
    params.insert("order_id".into(), serde_json::json!("7"));
    params.insert("amount".into(), serde_json::json!((i * 37) % 1000 + 1));
    Input {
        action_type: "refund.create".into(),
        params,
        claims: Some(vec![ClaimIn {
            text: claim.into(),
            id: None,
            citations: Vec::new(),
        }]),
        answer: None,
        sources: vec![SourceIn {
            source_id: Some("inv".into()),
            id: None,
            kind: None,
            text: Some(EVIDENCE.into()),
            uri: None,
            checksum: None,
            unavailable: None,
            captured: false,
        }],
        requested: Default::default(),
    }
}

struct Env {
    config: Config,
    resolver: Resolver,
    redaction: RedactionKey,
    metrics: DecisionMetrics,
    log: AuditLog,
    set: verdict::policy::PolicySet,
}

impl Env {
    fn handles(&self) -> Handles<'_> {
        Handles {
            resolver: &self.resolver,
            audit: Recorder::Durable(&self.log),
            redaction: &self.redaction,
            defaults: &self.config.defaults,
            unknown_action: self.config.authorize.unknown_action,
            metrics: &self.metrics,
            clock: SystemTime::now,
            shadow: None,
            capture: true,
        }
    }
}

fn main() -> Result<(), Error> {
    let mut n: u64 = 100_000;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--inputs" => n = it.next().ok_or("--inputs: missing value")?.parse()?,
            other => {
                return Err(
                    format!("unknown flag {other}; usage: replay_bench [--inputs N]").into(),
                )
            }
        }
    }
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    for (name, limit) in [("policies", 500), ("draft", 300)] {
        std::fs::create_dir_all(root.join(name))?;
        std::fs::write(root.join(name).join("refunds.toml"), policy(limit))?;
    }
    let data = root.join("data");
    std::fs::create_dir_all(&data)?;
    let config = Config::defaults(&Overrides::default())?;
    let set = verdict::policy::load_dir(&root.join("policies"))
        .map_err(|e| format!("policies: {e:?}"))?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let recorded = rt.block_on(async {
        let log = AuditLog::open(&data.join("verdict.db"), &data, &config.audit)?;
        let env = Arc::new(Env {
            resolver: Resolver::new(&config.evidence),
            redaction: RedactionKey::from_bytes(&[7; verdict::audit::redaction::KEY_LEN]),
            metrics: DecisionMetrics::default(),
            log: log.clone(),
            set,
            config: config.clone(),
        });
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..n {
            if tasks.len() >= 256 {
                if let Some(r) = tasks.join_next().await {
                    r??;
                }
            }
            let env = env.clone();
            tasks.spawn(async move {
                let id = format!("bench-{i}");
                let ctx = decide::Ctx {
                    source: decide::Source::Api,
                    principal: "bench",
                    request_id: &id,
                    request_hash: "sha256:00",
                    route: None,
                };
                decide::authorize(&env.handles(), &env.set, input(i), &ctx)
                    .await
                    .map(|_| ())
                    .map_err(|e| Error::from(e.to_string()))
            });
        }
        while let Some(r) = tasks.join_next().await {
            r??;
        }
        let took = started.elapsed();
        log.shutdown().await;
        Ok::<_, Error>(took)
    })?;
    drop(rt);
    println!(
        "recorded {n} decisions with captured inputs in {:.1} s ({:.0}/s)",
        recorded.as_secs_f64(),
        n as f64 / recorded.as_secs_f64()
    );
    let db_bytes = std::fs::metadata(data.join("verdict.db"))?.len()
        + std::fs::metadata(data.join("verdict.db-wal")).map_or(0, |m| m.len());
    let conn = verdict::audit::sqlite::open_reader(&data.join("verdict.db"))?;
    let (record, input): (f64, f64) = conn.query_row(
        "SELECT (SELECT AVG(LENGTH(canonical)) FROM audit_records),
                (SELECT AVG(LENGTH(input)) FROM audit_inputs)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    drop(conn);
    println!(
        "data dir database: {:.1} MiB; mean record {record:.0} bytes, mean captured input {input:.0} bytes",
        db_bytes as f64 / (1 << 20) as f64
    );

    let args = Args {
        draft: root.join("draft"),
        baseline: root.join("policies"),
        data_dir: data.clone(),
        since: std::time::Duration::from_secs(86_400),
        route: None,
        json: true,
    };
    let started = Instant::now();
    let out = replay::replay(&args, config);
    let took = started.elapsed();
    let report: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|e| format!("{e}: {} {}", out.stdout, out.stderr))?;
    println!(
        "replayed {} inputs (baseline reproduced {} of {}; {} flips to review) in {:.1} s ({:.0} inputs/s, two decisions each)",
        report["replayed"],
        report["baseline_reproduced"],
        report["baseline_compared"],
        report["newly_review"],
        took.as_secs_f64(),
        report["replayed"].as_f64().unwrap_or(0.0) / took.as_secs_f64()
    );
    if out.code != 0 {
        return Err(format!("replay exited {}: {}", out.code, out.stderr).into());
    }
    Ok(())
}
