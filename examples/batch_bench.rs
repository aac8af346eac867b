//! Batch verification throughput, and `/v2/authorize` latency while a large
//! batch runs (issue 6).
//!
//! Starts a whole sidecar in-process (temp data dir, generated keys file,
//! loopback port 0) on its own multi-threaded runtime, exactly as `main` does,
//! and drives it over real HTTP from a separate client runtime:
//!
//! 1. idle baseline: a bounded closed loop of `--clients` concurrent clients
//!    calling `/v2/authorize` for `--duration-secs` (3 claims, 3 sources of
//!    about 2 KB each, citations optional);
//! 2. one batch of `--claims` claims, `--claims-per-item` claims per item,
//!    submitted to `POST /v1/verify-claims-batch` and polled on
//!    `GET /v2/jobs/{id}` until it has succeeded, while the same clients keep
//!    calling `/v2/authorize`;
//! 3. a table: submit and run time, claims/s, authorize p50/p90/p99/max idle
//!    vs under batch load, and whether the issue's goals are met.
//!
//! `cargo run --release --example batch_bench -- [--claims 100000]
//! [--claims-per-item 10] [--workers N] [--clients 4] [--duration-secs 5]
//! [--timeout-secs 300]`
//!
//! Every loop is bounded in count and in time; everything is on 127.0.0.1.

// A harness reads as one run, top to bottom; the 100-line limit is for src/.
#![allow(clippy::too_many_lines)]

mod bench_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench_support::{bench_dir, send, Error, HttpClient};
use bytes::Bytes;
use http::Method;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use verdict::config::Config;

/// Upper bound on the authorize calls of one phase (per client).
const MAX_CALLS_PER_CLIENT: usize = 200_000;

const POLICY: &str = r#"
[[action]]
type = "refund.create"
requirements = { decision_mode = "balanced", min_coverage = 0.8, citations = "optional" }

  [[action.rule]]
  param = "amount"
  op = "gt"
  value = 5000
  effect = "deny"
"#;

struct Args {
    claims: usize,
    claims_per_item: usize,
    workers: Option<usize>,
    clients: usize,
    duration: Duration,
    timeout: Duration,
}

fn parse_args() -> Result<Args, Error> {
    let mut a = Args {
        claims: 100_000,
        claims_per_item: 10,
        workers: None,
        clients: 4,
        duration: Duration::from_secs(5),
        timeout: Duration::from_secs(300),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || -> Result<usize, Error> {
            let v = it.next().ok_or_else(|| format!("{flag}: missing value"))?;
            Ok(v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"))?)
        };
        match flag.as_str() {
            "--claims" => a.claims = value()?,
            "--claims-per-item" => a.claims_per_item = value()?,
            "--workers" => a.workers = Some(value()?),
            "--clients" => a.clients = value()?,
            "--duration-secs" => a.duration = Duration::from_secs(value()? as u64),
            "--timeout-secs" => a.timeout = Duration::from_secs(value()? as u64),
            "-h" | "--help" => {
                println!(
                    "batch_bench [--claims N] [--claims-per-item K] [--workers W] \
                     [--clients C] [--duration-secs S] [--timeout-secs T]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    if a.claims == 0 || a.claims_per_item == 0 || a.clients == 0 {
        return Err("--claims, --claims-per-item and --clients must be > 0".into());
    }
    Ok(a)
}

/// About 2 KB of invoice-like evidence, different per `i`.
fn source_text(i: usize, topic: &str) -> String {
    let mut s = String::with_capacity(2200);
    let mut line = 0;
    while s.len() < 2000 {
        s.push_str(&format!(
            "Record {i}-{line} ({topic}): order ORD-{i}{line} for customer C-{c} was charged ${a}.00 \
             on Visa ending {card}; the parcel shipped on 2026-03-0{d} and arrived damaged. ",
            c = 1000 + i % 97,
            a = 20 + (i * 7 + line) % 400,
            card = 4000 + (i + line) % 999,
            d = 1 + line % 9,
        ));
        line += 1;
    }
    s
}

/// The authorize body: 3 claims, 3 sources of ~2 KB, citations optional.
fn authorize_body(i: usize) -> String {
    json!({
        "action": {"type": "refund.create", "params": {"order_id": format!("ORD-{i}0"), "amount": 100}},
        "claims": [
            {"text": format!("Order ORD-{i}0 for customer C-{} was charged.", 1000 + i % 97)},
            {"text": "The parcel arrived damaged."},
            {"text": format!("The customer paid with the Visa ending {}.", 4000 + i % 999)},
        ],
        "sources": [
            {"source_id": "invoice", "text": source_text(i, "invoice")},
            {"source_id": "shipping", "text": source_text(i + 1, "shipping")},
            {"source_id": "ticket", "text": source_text(i + 2, "ticket")},
        ],
        "requirements": {"citations": "optional"}
    })
    .to_string()
}

/// One batch item: `k` claims and one ~2 KB source (the body limit allows
/// about 3.3 KB per item at 10 000 items).
fn batch_item(i: usize, k: usize) -> Value {
    let claims: Vec<String> = (0..k)
        .map(|c| match c % 3 {
            0 => format!(
                "Order ORD-{i}{c} was charged ${}.00.",
                20 + (i * 7 + c) % 400
            ),
            1 => format!("The parcel for order ORD-{i}{c} arrived damaged."),
            _ => format!("Customer C-{} paid by bank transfer.", 1000 + i % 97),
        })
        .collect();
    json!({"claims": claims, "sources": [{"source_id": "s", "text": source_text(i, "batch")}]})
}

struct Server {
    running: verdict::app::Running,
    _dir: tempfile::TempDir,
    workers: usize,
}

async fn start_server(workers: Option<usize>) -> Result<Server, Error> {
    let (dir, overrides) = bench_dir(POLICY)?;
    let mut config = Config::defaults(&overrides)?;
    if let Some(w) = workers {
        config.jobs.workers = w;
    }
    let workers = config.jobs.workers;
    let running = verdict::app::start(config).await?;
    Ok(Server {
        running,
        _dir: dir,
        workers,
    })
}

/// One authorize call: (when it finished, latency).
type Sample = (Instant, Duration);

/// A closed loop of `clients` concurrent clients, each calling authorize
/// until `stop` is set, `deadline` passes or it made `MAX_CALLS_PER_CLIENT`.
async fn authorize_loop(
    client: HttpClient,
    url: String,
    clients: usize,
    deadline: Instant,
    stop: Arc<AtomicBool>,
) -> Result<Vec<Sample>, Error> {
    let bodies: Arc<Vec<Bytes>> = Arc::new((0..64).map(|i| authorize_body(i).into()).collect());
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, url, stop, bodies) =
            (client.clone(), url.clone(), stop.clone(), bodies.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut i = c;
            while !stop.load(Ordering::Relaxed)
                && Instant::now() < deadline
                && samples.len() < MAX_CALLS_PER_CLIENT
            {
                let body = bodies[i % bodies.len()].clone();
                let t = Instant::now();
                let (status, resp) = send(&client, Method::POST, &url, body).await?;
                let took = t.elapsed();
                if status != 200 {
                    return Err::<_, Error>(
                        format!("authorize: {status} {}", String::from_utf8_lossy(&resp)).into(),
                    );
                }
                samples.push((Instant::now(), took));
                i += clients;
            }
            Ok(samples)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    Ok(all)
}

#[derive(Clone, Copy, Default)]
struct Stats {
    count: usize,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
    rate: f64,
}

fn stats(samples: impl Iterator<Item = Duration>, over: Duration) -> Stats {
    let mut ms: Vec<f64> = samples.map(|d| d.as_secs_f64() * 1000.0).collect();
    if ms.is_empty() {
        return Stats::default();
    }
    ms.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| ms[((ms.len() as f64 * p).ceil() as usize).clamp(1, ms.len()) - 1];
    Stats {
        count: ms.len(),
        p50: q(0.50),
        p90: q(0.90),
        p99: q(0.99),
        max: ms[ms.len() - 1],
        rate: ms.len() as f64 / over.as_secs_f64().max(1e-9),
    }
}

/// CPU seconds (user + system) of this process and of the batch worker
/// threads, from /proc (Linux; zero elsewhere).
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
    let mut workers = 0.0;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for t in dir.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.trim().starts_with("verdict-jobs") {
                workers += std::fs::read_to_string(t.path().join("stat"))
                    .map(|s| ticks(&s))
                    .unwrap_or(0.0);
            }
        }
    }
    (process, workers)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".into())
}

fn main() -> Result<(), Error> {
    let args = parse_args()?;
    // The server gets its own runtime, built as `main` builds it; the load
    // generator runs on a separate one so that the two do not share tasks.
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("server-rt")
        .build()?;
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name("client-rt")
        .build()?;
    let server = server_rt.block_on(start_server(args.workers))?;
    let result = client_rt.block_on(bench(&args, &server));
    server_rt.block_on(server.running.shutdown());
    result
}

async fn bench(args: &Args, server: &Server) -> Result<(), Error> {
    let base = format!("http://{}", server.running.api_addr);
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let authorize_url = format!("{base}/v2/authorize");
    println!(
        "batch_bench: nproc {}, load average {} at start, jobs.workers {}, {} authorize clients",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg(),
        server.workers,
        args.clients
    );

    // Warm-up (connections, first policy snapshot), not measured.
    authorize_loop(
        client.clone(),
        authorize_url.clone(),
        args.clients,
        Instant::now() + Duration::from_millis(500),
        Arc::new(AtomicBool::new(false)),
    )
    .await?;

    // 1. Idle baseline.
    let t0 = Instant::now();
    let idle = authorize_loop(
        client.clone(),
        authorize_url.clone(),
        args.clients,
        t0 + args.duration,
        Arc::new(AtomicBool::new(false)),
    )
    .await?;
    let idle = stats(idle.into_iter().map(|s| s.1), t0.elapsed());

    // 2. The batch.
    let items = args.claims.div_ceil(args.claims_per_item);
    let mut left = args.claims;
    let jobs: Vec<Value> = (0..items)
        .map(|i| {
            let k = left.min(args.claims_per_item);
            left -= k;
            batch_item(i, k)
        })
        .collect();
    let body = Bytes::from(serde_json::to_vec(&json!({ "jobs": jobs }))?);
    drop(jobs);
    println!(
        "batch: {} claims as {items} items of {} claims, body {:.1} MiB",
        args.claims,
        args.claims_per_item,
        body.len() as f64 / (1 << 20) as f64
    );
    let load_avg_before = loadavg();
    let stop = Arc::new(AtomicBool::new(false));
    let hard_deadline = Instant::now() + args.timeout;
    let load = tokio::spawn(authorize_loop(
        client.clone(),
        authorize_url.clone(),
        args.clients,
        hard_deadline,
        stop.clone(),
    ));
    let (cpu0, wcpu0) = cpu_seconds();
    let submit_start = Instant::now();
    let (status, resp) = send(
        &client,
        Method::POST,
        &format!("{base}/v1/verify-claims-batch"),
        body,
    )
    .await?;
    let submitted = Instant::now();
    if status != 202 {
        stop.store(true, Ordering::Relaxed);
        return Err(format!("submit: {status} {}", String::from_utf8_lossy(&resp)).into());
    }
    let job: Value = serde_json::from_slice(&resp)?;
    let id = job["job_id"]
        .as_str()
        .ok_or("submit: no job_id")?
        .to_string();
    let poll_url = format!("{base}/v2/jobs/{id}?limit=1");
    let mut polls = 0usize;
    let final_job = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        polls += 1;
        let (status, resp) = send(&client, Method::GET, &poll_url, Bytes::new()).await?;
        let j: Value = serde_json::from_slice(&resp)?;
        if status != 200 {
            stop.store(true, Ordering::Relaxed);
            return Err(format!("poll: {status} {j}").into());
        }
        if j["status"] == "succeeded" || j["status"] == "failed" {
            break j;
        }
        if Instant::now() >= hard_deadline {
            stop.store(true, Ordering::Relaxed);
            return Err(format!("batch did not finish within {:?}: {j}", args.timeout).into());
        }
    };
    let finished = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let (cpu1, wcpu1) = cpu_seconds();
    let load_avg_after = loadavg();
    let samples = load.await??;
    if final_job["status"] != "succeeded" {
        return Err(format!("batch failed: {final_job}").into());
    }
    // The first result, to show the items did real work.
    let first = &final_job["results"][0];

    let submit_s = (submitted - submit_start).as_secs_f64();
    let run_s = (finished - submitted).as_secs_f64();
    let total_s = (finished - submit_start).as_secs_f64();
    let during_submit = stats(
        samples
            .iter()
            .filter(|(at, _)| *at <= submitted)
            .map(|s| s.1),
        submitted - submit_start,
    );
    let during_run = stats(
        samples
            .iter()
            .filter(|(at, _)| *at > submitted && *at <= finished)
            .map(|s| s.1),
        finished - submitted,
    );
    let whole = stats(samples.iter().map(|s| s.1), finished - submit_start);

    println!();
    println!("load average: before batch {load_avg_before}, after batch {load_avg_after}");
    println!(
        "first result: supported {}/{} claims, {} polls of the job",
        first["metrics"]["claims_supported"], first["metrics"]["claims_total"], polls
    );
    println!();
    println!("| batch | claims | items | submit s | run s | total s | claims/s (total) | items/s (run) |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {} workers | {} | {items} | {submit_s:.2} | {run_s:.2} | {total_s:.2} | {:.0} | {:.0} |",
        server.workers,
        args.claims,
        args.claims as f64 / total_s,
        items as f64 / run_s,
    );
    let cpu = cpu1 - cpu0;
    let wcpu = wcpu1 - wcpu0;
    println!(
        "CPU during batch: process {cpu:.1} s ({:.0}% of {:.1} s wall), batch workers {wcpu:.1} s \
         ({:.2} ms CPU per item)",
        cpu / total_s * 100.0,
        total_s,
        wcpu * 1000.0 / items as f64
    );
    println!();
    println!("| /v2/authorize | calls | calls/s | p50 ms | p90 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, s) in [
        ("idle", idle),
        ("during submit", during_submit),
        ("during run", during_run),
        ("under batch (submit + run)", whole),
    ] {
        println!(
            "| {name} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} |",
            s.count, s.rate, s.p50, s.p90, s.p99, s.max
        );
    }
    let ratio = whole.p99 / idle.p99.max(1e-9);
    let ratio_run = during_run.p99 / idle.p99.max(1e-9);
    println!();
    println!(
        "p99 under batch / p99 idle = {ratio:.2} (run phase only: {ratio_run:.2}); \
         p50 ratio {:.2}",
        whole.p50 / idle.p50.max(1e-9)
    );
    let verdict = |ok: bool| if ok { "MET" } else { "MISSED" };
    println!(
        "goal batch <= 10 s (submit + run): {total_s:.2} s -> {}",
        verdict(total_s <= 10.0)
    );
    println!(
        "goal authorize p99 under batch <= 2 x idle: {ratio:.2} x -> {}",
        verdict(ratio <= 2.0)
    );
    Ok(())
}
