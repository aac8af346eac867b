//! End-to-end cost of the durable audit log on `POST /v2/authorize`.
//!
//! Starts the real server in-process on 127.0.0.1:0 and drives it with a
//! bounded closed loop of concurrent HTTP clients (verbose authorize requests,
//! each answered only after its audit record is durable and signed). The same
//! load runs against the server with the durable log and with the log replaced
//! by a no-op sink (`AuditLog::noop_for_benchmarks`, reachable only from code),
//! with `audit.max_wait` 0 (the default) and 2 ms (the setting documented for
//! disks that charge per flush). The no-op runs bracket the
//! durable ones so drift in machine load shows.
//!
//! `cargo run --release --features bench --example audit_e2e_bench -- [secs] [clients] [sweep]`
//!
//! `sweep`, a comma-separated list of `max_wait` values in microseconds
//! (e.g. `0,250,500,1000,2000`), runs the durable log once per value
//! between the two no-op runs instead of the 2 ms and 0 pair.
//!
//! `clients` may also be a comma-separated list (e.g. `64,128,256,512`):
//! the four runs then repeat at each count, and the bench reports each
//! variant's peak rate over the counts and the ratio of the peaks. A closed
//! loop of N clients measures N divided by the latency, so where the
//! durable log adds latency but little CPU, one count shows the wait and
//! the peaks show the capacity. Both are reported (docs/benchmarks.md).

// A harness reads as one run, top to bottom; the 100-line limit is for src/.
#![allow(clippy::too_many_lines)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sha2::{Digest, Sha256};
use verdict::audit::AuditLog;
use verdict::config::{Config, Overrides};

/// The allocator the `verdict` binary ships with (see `src/main.rs`), so the
/// bench measures the same code paths the sidecar runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const KEY: &str = "bench-app-key-0123456789";

fn body(i: u64) -> String {
    serde_json::json!({
        "action": {"type": "refund", "params": {"amount": i % 1000, "order_id": format!("o-{i}")}},
        "claims": [{"text": "The customer paid $100 for the blender."}],
        "sources": [{"source_id": "inv", "text": "Invoice: blender, amount charged $100.00."}],
        "requirements": {"citations": "optional"},
        "response": {"mode": "verbose"}
    })
    .to_string()
}

/// CPU seconds (user + system) of this whole process, server and clients,
/// from /proc (10 ms ticks): on a shared 2-core machine the CPU cost per
/// request tells a costlier path from one that only waits longer.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / 100.0
}

struct Outcome {
    rps: f64,
    mean_ms: f64,
    p99_ms: f64,
    n: u64,
}

async fn run(
    label: &str,
    noop: bool,
    max_wait: Duration,
    secs: u64,
    clients: u64,
) -> Result<Outcome, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    std::fs::create_dir_all(root.join("policies"))?;
    std::fs::write(
        root.join("keys.toml"),
        format!(
            "[[key]]\nname = \"app\"\nhash = \"sha256:{}\"\nscopes = [\"verify\", \"authorize\", \"audit\"]\n",
            hex::encode(Sha256::digest(KEY.as_bytes()))
        ),
    )?;
    let overrides = Overrides {
        api_listen: Some("127.0.0.1:0".parse()?),
        policies: Some(root.join("policies")),
        data_dir: Some(root.join("data")),
        keys: Some(root.join("keys.toml")),
        ..Default::default()
    };
    let mut config = Config::defaults(&overrides)?;
    config.audit.max_wait = max_wait;
    config.audit.origin = Some("verdict/bench".into());
    let running = if noop {
        verdict::app::start_with_audit_for_benchmarks(config, AuditLog::noop_for_benchmarks()?)
            .await?
    } else {
        verdict::app::start(config).await?
    };
    let url = format!("http://{}/v2/authorize", running.api_addr);
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();

    // Warm up connections and caches; not measured.
    for i in 0..clients {
        send(&client, &url, i).await.map_err(|e| e.to_string())?;
    }
    let done = Arc::new(AtomicU64::new(0));
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, url, done) = (client.clone(), url.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut i = c << 32;
            while Instant::now() < deadline {
                let t = Instant::now();
                if let Err(e) = send(&client, &url, i).await {
                    eprintln!("request failed: {e}");
                    break;
                }
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
                done.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await?);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    // The log's own view of the run: how large the groups were and how long
    // a commit (SQLite write, fsync, signature) took.
    let metrics = get_text(&client, &format!("http://{}/metrics", running.api_addr)).await;
    running.shutdown().await;
    lat.sort_by(|a, b| a.total_cmp(b));
    let n = done.load(Ordering::Relaxed);
    let out = Outcome {
        rps: n as f64 / elapsed,
        mean_ms: lat.iter().sum::<f64>() / lat.len().max(1) as f64,
        p99_ms: lat
            .get((lat.len() * 99 / 100).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0),
        n,
    };
    let metric = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let groups = metric("verdict_audit_group_size_count");
    let audit = if noop || groups == 0.0 {
        String::new()
    } else {
        format!(
            "   mean group {:.1}, mean commit {:.2} ms",
            metric("verdict_audit_group_size_sum") / groups,
            metric("verdict_audit_commit_seconds_sum") * 1000.0
                / metric("verdict_audit_commit_seconds_count").max(1.0)
        )
    };
    println!(
        "{label:<26} {:>8} {:>10.0} {:>9.2} {:>9.2} {:>8.0}{audit}",
        out.n,
        out.rps,
        out.mean_ms,
        out.p99_ms,
        cpu * 1e6 / n.max(1) as f64
    );
    Ok(out)
}

/// GET `url` as text; empty on any failure (the caller only reports it).
async fn get_text(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    url: &str,
) -> String {
    let Ok(req) = Request::builder()
        .method(Method::GET)
        .uri(url)
        .body(Full::new(Bytes::new()))
    else {
        return String::new();
    };
    let Ok(resp) = client.request(req).await else {
        return String::new();
    };
    match resp.into_body().collect().await {
        Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        Err(_) => String::new(),
    }
}

async fn send(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    url: &str,
    i: u64,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let req = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header("authorization", format!("Bearer {KEY}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body(i))))?;
    let resp = client.request(req).await?;
    let status = resp.status();
    let bytes = resp.into_body().collect().await?.to_bytes();
    if status != 200 || !bytes.windows(11).any(|w| w == b"\"record_id\"") {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&bytes)).into());
    }
    Ok(())
}

/// The first three fields of /proc/loadavg, to show how busy the machine was.
fn loadavg() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn print_columns() {
    println!(
        "{:<26} {:>8} {:>10} {:>9} {:>9} {:>8}",
        "run", "requests", "req/s", "mean ms", "p99 ms", "CPU us/r"
    );
}

/// The default runs at one client count: no-op, durable at 2 ms and at 0,
/// no-op again. Returns the no-op mean and the two durable rates (req/s).
async fn four_runs(secs: u64, clients: u64) -> Result<[f64; 3], Box<dyn std::error::Error>> {
    let ms2 = Duration::from_millis(2);
    let a = run("no-op sink", true, ms2, secs, clients).await?;
    let d2 = run("durable, max_wait=2ms", false, ms2, secs, clients).await?;
    let d0 = run("durable, max_wait=0", false, Duration::ZERO, secs, clients).await?;
    let b = run("no-op sink (again)", true, ms2, secs, clients).await?;
    Ok([(a.rps + b.rps) / 2.0, d2.rps, d0.rps])
}

fn goal(ratio: f64) -> &'static str {
    if ratio >= 0.8 {
        "met"
    } else {
        "NOT met"
    }
}

/// [`four_runs`] at each client count, then each variant's peak rate over
/// the counts and the ratio of the peaks.
async fn peaks(secs: u64, counts: &[u64]) -> Result<(), Box<dyn std::error::Error>> {
    // Per variant: (peak rate, the count it came at).
    let mut best = [(0.0f64, 0u64); 3];
    for &clients in counts {
        println!("-- {clients} clients");
        print_columns();
        let rates = four_runs(secs, clients).await?;
        let [base, d2, d0] = rates;
        println!(
            "durable / no-op at {clients} clients: {:.2}x (2 ms), {:.2}x (0)",
            d2 / base,
            d0 / base
        );
        for (slot, rps) in best.iter_mut().zip(rates) {
            if rps > slot.0 {
                *slot = (rps, clients);
            }
        }
    }
    let [(noop, at), (p2, at2), (p0, at0)] = best;
    println!("peak req/s: no-op {noop:.0} ({at} clients), durable 2 ms {p2:.0} ({at2}), durable 0 {p0:.0} ({at0})");
    for (label, peak) in [("max_wait=2ms", p2), ("max_wait=0", p0)] {
        let ratio = peak / noop;
        println!(
            "peak durable / peak no-op, {label}: {ratio:.2}x (goal >= 0.80x: {})",
            goal(ratio)
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(4);
    let counts: Vec<u64> = match args.next() {
        None => vec![64],
        Some(list) => list
            .split(',')
            .map(|v| v.trim().parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("clients {list:?}: a count or a comma-separated list: {e}"))?,
    };
    let clients = match counts.as_slice() {
        [] => return Err("clients: give at least one count".into()),
        _ if counts.contains(&0) => return Err("clients: every count must be at least 1".into()),
        [one] => *one,
        _ => {
            if args.next().is_some() {
                return Err("a max_wait sweep takes one client count, not a list".into());
            }
            println!(
                "POST /v2/authorize (verbose), {counts:?} clients, {secs}s per run, loadavg {}",
                loadavg()
            );
            return peaks(secs, &counts).await;
        }
    };
    println!(
        "POST /v2/authorize (verbose), {clients} clients, {secs}s per run, loadavg {}",
        loadavg()
    );
    print_columns();
    if let Some(list) = args.next() {
        let waits: Vec<u64> = list
            .split(',')
            .map(|v| v.trim().parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("sweep {list:?}: microseconds, comma-separated: {e}"))?;
        let ms2 = Duration::from_millis(2);
        let a = run("no-op sink", true, ms2, secs, clients).await?;
        let mut durable = Vec::new();
        for us in waits {
            let label = format!("durable, max_wait={us}us");
            durable.push((
                us,
                run(&label, false, Duration::from_micros(us), secs, clients).await?,
            ));
        }
        let b = run("no-op sink (again)", true, ms2, secs, clients).await?;
        let base = (a.rps + b.rps) / 2.0;
        for (us, d) in &durable {
            println!("durable / no-op, max_wait={us}us: {:.2}x", d.rps / base);
        }
        return Ok(());
    }
    let [base, d2, d0] = four_runs(secs, clients).await?;
    for (label, d) in [("max_wait=2ms", d2), ("max_wait=0", d0)] {
        let ratio = d / base;
        println!(
            "durable / no-op, {label}: {ratio:.2}x (goal >= 0.80x: {})",
            goal(ratio)
        );
    }
    println!("loadavg after: {}", loadavg());
    Ok(())
}
