//! Audit log throughput: durable records per second, each answered with an
//! inclusion receipt against a signed checkpoint, from concurrent writers.
//!
//! Exists to keep the group-commit path honest: it measures the whole path
//! (canonicalize, queue, SQLite WAL+FULL commit, tree hashes, Ed25519 checkpoint,
//! receipts) in a temp dir, bounded in time.
//!
//! `cargo run --release --example audit_bench -- [secs] [writers]`
//!
//! Each `max_wait` runs twice, side by side: with random UUID v4 record ids
//! (what `AuditRecord::new` produced before) and with the time-ordered UUID v7
//! ids it produces now.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use verdict::audit::{verify_log, AuditLog, AuditRecord, RecordKind};
use verdict::config::AuditConfig;

/// The allocator the `verdict` binary ships with (see `src/main.rs`), so the
/// bench measures the same code paths the sidecar runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// CPU seconds (user + system) of this process and of the writer thread, from
/// /proc (clock ticks of 10 ms): the machine is shared, so wall-clock rates
/// alone understate what the code can do.
fn cpu_seconds() -> (f64, f64) {
    let ticks = |stat: &str| -> f64 {
        let after = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = after.split_whitespace().collect();
        let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        (t(11) + t(12)) / 100.0
    };
    let process = std::fs::read_to_string("/proc/self/stat")
        .map(|s| ticks(&s))
        .unwrap_or(0.0);
    let mut writer = 0.0;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for t in dir.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.trim() == "audit-writer" {
                writer += std::fs::read_to_string(t.path().join("stat"))
                    .map(|s| ticks(&s))
                    .unwrap_or(0.0);
            }
        }
    }
    (process, writer)
}

fn record(i: u64, ordered_ids: bool) -> AuditRecord {
    let mut r = AuditRecord::new(RecordKind::Decision);
    if !ordered_ids {
        // Random ids, as before UUID v7: one random index page per record.
        r.record_id = uuid::Uuid::new_v4();
    }
    r.request_id = Some(format!("req-{i}"));
    r.request_hash =
        Some("sha256:5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8".into());
    r.principal = Some("refund-app".into());
    r.action = Some(serde_json::json!({
        "type": "refund.create",
        "params": {"order_id": format!("o-{i}"), "amount": i % 1000, "customer": "c-42"}
    }));
    r.decision = Some("allow".into());
    r.reason = Some("coverage_sufficient".into());
    r.enforced = Some(true);
    r.coverage_score = Some(0.9231);
    r.claims_total = Some(3);
    r.claims_supported = Some(3);
    r.policy_revision = Some("sha256:0f1e2d3c".into());
    r.route = Some("create-refund".into());
    r
}

async fn run(
    max_wait: Duration,
    writers: u64,
    secs: u64,
    ordered_ids: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("verdict.db");
    let keys = dir.path().join("keys");
    let cfg = AuditConfig {
        origin: Some("verdict/bench".into()),
        max_wait,
        max_batch: 512,
        witnesses: Vec::new(),
        capture_inputs: true,
        input_retention: std::time::Duration::from_secs(7 * 86_400),
        export: None,
    };
    let log = AuditLog::open(&db, &keys, &cfg)?;
    let mut registry = prometheus_client::registry::Registry::default();
    log.register_metrics(&mut registry);
    let (cpu0, _) = cpu_seconds();
    let done = Arc::new(AtomicU64::new(0));
    let lat_us = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (log, done, lat_us) = (log.clone(), done.clone(), lat_us.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = w << 32;
            while Instant::now() < deadline {
                let t = Instant::now();
                match log.append(record(i, ordered_ids)).await {
                    Ok(r) => {
                        debug_assert!(r.leaf_index < r.tree_size);
                        done.fetch_add(1, Ordering::Relaxed);
                        lat_us.fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
                    }
                    Err(e) => {
                        eprintln!("append failed: {e}");
                        return;
                    }
                }
                i += 1;
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let (cpu1, writer_cpu) = cpu_seconds();
    log.shutdown().await;
    let mut metrics = String::new();
    prometheus_client::encoding::text::encode(&mut metrics, &registry)?;
    let metric = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let commits = metric("verdict_audit_commit_seconds_count");
    let commit_ms = metric("verdict_audit_commit_seconds_sum") * 1000.0 / commits.max(1.0);
    let n = done.load(Ordering::Relaxed);
    let t = Instant::now();
    let report = tokio::task::spawn_blocking(move || verify_log(&db, &keys, |_, _| {})).await??;
    println!(
        "max_wait={:?} writers={writers} ordered_ids={ordered_ids}: {n} records in {elapsed:.2}s = {:.0} records/s, \
         mean append latency {:.2} ms, {} checkpoints (mean group {:.1}), \
         mean commit {commit_ms:.2} ms (writer busy {:.0}%); verify_log {:.2}s",
        max_wait,
        n as f64 / elapsed,
        lat_us.load(Ordering::Relaxed) as f64 / n.max(1) as f64 / 1000.0,
        report.checkpoints,
        n as f64 / (report.checkpoints.saturating_sub(1)).max(1) as f64,
        commits * commit_ms / 10.0 / elapsed,
        t.elapsed().as_secs_f64()
    );
    let per = |s: f64| s * 1e6 / n.max(1) as f64;
    println!(
        "    CPU: process {:.1} us/record, writer thread {:.1} us/record \
         (writer alone could sustain ~{:.0} records/s)",
        per(cpu1 - cpu0),
        per(writer_cpu),
        n as f64 / writer_cpu.max(0.01)
    );
    assert_eq!(report.records, n);
    Ok(())
}

/// Median seconds for one write of `bytes` plus `fdatasync` in a fresh temp
/// dir (200 rounds, bounded): appended, so that every sync also records
/// the file's new size (a WAL's first pass), or overwriting blocks already
/// written (a WAL restarted after its first checkpoint).
fn fsync_seconds(bytes: usize, append: bool) -> std::io::Result<f64> {
    use std::os::unix::fs::FileExt as _;
    let dir = tempfile::tempdir()?;
    let f = std::fs::File::create(dir.path().join("fsync.probe"))?;
    let block = vec![7u8; bytes];
    let rounds = 200u64;
    let len = bytes as u64;
    if !append {
        for i in 0..rounds {
            f.write_all_at(&block, i * len)?;
        }
        f.sync_all()?;
    }
    let mut took = Vec::with_capacity(rounds as usize);
    for i in 0..rounds {
        let t = Instant::now();
        f.write_all_at(&block, i * len)?;
        f.sync_data()?;
        took.push(t.elapsed().as_secs_f64());
    }
    took.sort_by(f64::total_cmp);
    Ok(took[took.len() / 2])
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let writers: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(64);
    // Caller-side cost alone: building and canonicalizing one record.
    let t = Instant::now();
    let mut bytes = 0usize;
    for i in 0..20_000u64 {
        bytes += record(i, true).canonical().map(|c| c.len()).unwrap_or(0);
    }
    println!(
        "build + RFC 8785 canonicalize one record ({} bytes): {:.1} us",
        bytes / 20_000,
        t.elapsed().as_secs_f64() * 1e6 / 20_000.0
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("loadavg {}", load.trim());
    // The physical floor: every writer waits for its record to be durable,
    // so at most `writers` records are in flight per commit, and a commit
    // costs at least one fsync of the WAL. No code change beats this bound.
    let fsync = fsync_seconds(4096, true)?;
    println!(
        "fdatasync of a 4 KiB append in the temp dir, p50: {:.3} ms -> closed-loop ceiling with {writers} writers ~{:.0} records/s",
        fsync * 1e3,
        writers as f64 / fsync
    );
    // A gated call's group of one writes about 8 WAL frames of 4 KiB.
    for bytes in [4096, 8 * 4120] {
        println!(
            "fdatasync of a {} KiB overwrite (a restarted WAL), p50: {:.3} ms",
            bytes / 1024,
            fsync_seconds(bytes, false)? * 1e3
        );
    }
    for max_wait in [Duration::from_millis(2), Duration::ZERO] {
        for ordered_ids in [false, true] {
            run(max_wait, writers, secs, ordered_ids).await?;
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("loadavg after {}", load.trim());
    Ok(())
}
