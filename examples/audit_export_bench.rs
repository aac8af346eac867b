//! `verdict audit export` and `verify-export` at scale: builds a log of N
//! records (default 100 000) in a temp dir, exports all of them with their
//! inclusion proofs, and verifies every line offline, timing each step.
//!
//! `cargo run --release --example audit_export_bench -- [records]`

use std::time::Instant;

use verdict::audit::export::{export, verify_export, Filter};
use verdict::audit::{keys, AuditLog, AuditRecord, RecordKind};
use verdict::config::AuditConfig;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("verdict.db");
    let cfg = AuditConfig {
        origin: Some("verdict/export-bench".into()),
        max_wait: std::time::Duration::ZERO,
        max_batch: 512,
        witnesses: Vec::new(),
        capture_inputs: true,
        input_retention: std::time::Duration::from_secs(7 * 86_400),
        export: None,
    };
    let log = AuditLog::open(&db, dir.path(), &cfg)?;
    let t = Instant::now();
    let writers = 64;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = w;
            while i < n {
                let mut r = AuditRecord::new(RecordKind::Decision);
                r.request_id = Some(format!("req-{i}"));
                r.decision = Some(if i % 3 == 0 { "deny" } else { "allow" }.into());
                r.action = Some(
                    serde_json::json!({"type": "refund.create", "params": {"amount": i % 1000}}),
                );
                log.append(r).await?;
                i += writers;
            }
            Ok::<_, verdict::audit::AuditError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    log.shutdown().await;
    eprintln!("built {n} records in {:.1} s", t.elapsed().as_secs_f64());

    let out_path = dir.path().join("export.jsonl");
    let t = Instant::now();
    let mut out = std::io::BufWriter::new(std::fs::File::create(&out_path)?);
    let report = export(&db, dir.path(), &Filter::default(), &mut out, |_, _| {})?;
    drop(out);
    let export_s = t.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(&out_path)?.len();
    println!(
        "export: {} records in {export_s:.2} s ({:.0} records/s, {:.1} MB)",
        report.exported,
        report.exported as f64 / export_s,
        bytes as f64 / 1e6
    );

    let doc = keys::load_docs(dir.path())?.remove(0);
    let key = serde_json::to_string(&doc)?;
    let t = Instant::now();
    let lines = verify_export(
        std::io::BufReader::new(std::fs::File::open(&out_path)?),
        &key,
        |_| {},
    )?;
    let verify_s = t.elapsed().as_secs_f64();
    println!(
        "verify-export: {lines} lines in {verify_s:.2} s ({:.0} lines/s)",
        lines as f64 / verify_s
    );
    Ok(())
}
