//! The shared store's cost, side by side with SQLite: hold-to-202 latency
//! through the proxy, and batch job throughput.
//!
//! Each round starts a whole sidecar in-process twice, once on the data
//! dir's SQLite file and once on a fresh database in a PostgreSQL cluster
//! started by `scripts/postgres.sh` (durable commits on both: SQLite
//! `synchronous=FULL`, PostgreSQL `fsync=on`), alternating which goes
//! first. On each it measures:
//!
//! 1. **hold-to-202**: `--holds` refunds through the proxy, `--concurrency`
//!    at a time, each held for review (a rule sends every refund above 500
//!    to review) with `hold_timeout = "1ms"`, so the answer is the 202 and
//!    the time is the decision, the audit record and the stored hold;
//! 2. **job throughput**: one batch of `--job-items` verify items submitted
//!    and polled until it succeeded, with one worker.
//!
//! The table gives each figure per backend and round, and the ratio
//! PostgreSQL / SQLite with the median over rounds.
//!
//! With `--replicas` it measures instead one job of `--job-items` items on
//! PostgreSQL run by one replica and by two (in-process, on one database,
//! `--workers` each, alternating which goes first): items per second from
//! the submit and from the job's start, the machine's CPU use split into
//! this process and the rest (PostgreSQL), and item runs against items (a
//! run lost to a store error is run again).
//!
//! `cargo run --release --example store_bench -- [--rounds 3] [--holds 2000]
//! [--concurrency 8] [--job-items 20000] [--postgres-dir DIR]
//! [--replicas [--workers 2]]`
//!
//! Every loop is bounded in count and in time; everything is on 127.0.0.1.

mod bench_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench_support::{bench_dir, send, Error, HttpClient};
use bytes::Bytes;
use http::Method;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use verdict::config::Config;

/// The longest one phase may take.
const PHASE_LIMIT: Duration = Duration::from_secs(600);

const POLICY: &str = r#"
[[action]]
type = "refund.create"
requirements = { decision_mode = "balanced", min_coverage = 0.5, citations = "optional" }

  [[action.rule]]
  param = "amount"
  op = "gt"
  value = 500
  effect = "review"

[[route]]
name = "create-refund"
method = "POST"
path = "/api/orders/{order_id}/refunds"
action = "refund.create"
params = { order_id = "path:order_id", amount = "body:/amount" }
claims = "body:/claims"
sources = "body:/evidence"
on_review = "hold"
hold_timeout = "1ms"
"#;

struct Args {
    rounds: usize,
    holds: usize,
    concurrency: usize,
    job_items: usize,
    postgres_dir: Option<PathBuf>,
    replicas: bool,
    workers: usize,
}

fn args() -> Result<Args, Error> {
    let mut a = Args {
        rounds: 3,
        holds: 2000,
        concurrency: 8,
        job_items: 20_000,
        postgres_dir: None,
        replicas: false,
        workers: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--rounds" => a.rounds = value()?.parse()?,
            "--holds" => a.holds = value()?.parse()?,
            "--concurrency" => a.concurrency = value()?.parse()?,
            "--job-items" => a.job_items = value()?.parse()?,
            "--postgres-dir" => a.postgres_dir = Some(value()?.into()),
            "--replicas" => a.replicas = true,
            "--workers" => a.workers = value()?.parse()?,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    if a.rounds == 0 || a.holds == 0 || a.concurrency == 0 || a.job_items == 0 || a.workers == 0 {
        return Err("every count must be greater than 0".into());
    }
    Ok(a)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// The throwaway cluster: its admin URL makes one database per run.
struct Cluster {
    admin_url: String,
    url: String,
}

fn start_cluster(dir: &Path) -> Result<Cluster, Error> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/postgres.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("start")
        .arg(dir)
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "{} start failed:\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(Cluster {
        url: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        admin_url: std::fs::read_to_string(dir.join("admin_url"))?
            .trim()
            .to_string(),
    })
}

fn psql_bin() -> PathBuf {
    if Command::new("psql").arg("--version").output().is_ok() {
        return "psql".into();
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin/psql"))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| "psql".into())
}

/// A new database in the cluster, and its URL.
fn fresh_database(c: &Cluster) -> Result<String, Error> {
    let name = format!("bench_{}", uuid::Uuid::new_v4().simple());
    let out = Command::new(psql_bin())
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-c"])
        .arg(format!("CREATE DATABASE {name} OWNER verdict"))
        .arg(&c.admin_url)
        .output()?;
    if !out.status.success() {
        return Err(format!("psql: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let (base, rest) = c
        .url
        .rsplit_once('/')
        .ok_or("a cluster URL without a database")?;
    let query = rest.split_once('?').map(|(_, q)| q).unwrap_or("");
    Ok(if query.is_empty() {
        format!("{base}/{name}")
    } else {
        format!("{base}/{name}?{query}")
    })
}

struct Server {
    running: verdict::app::Running,
    _dir: tempfile::TempDir,
}

async fn start_server(store_url: Option<&str>, workers: usize) -> Result<Server, Error> {
    let (dir, mut overrides) = bench_dir(POLICY)?;
    // Never contacted: every refund is held and never approved.
    overrides.upstream = Some("http://127.0.0.1:9".into());
    let text = match store_url {
        Some(url) => format!("[store]\nurl = \"{url}\"\n[log]\nformat = \"json\"\n"),
        None => String::new(),
    };
    let mut config = Config::from_toml("bench", &text, &overrides)?;
    config.jobs.workers = workers;
    let running = verdict::app::start(config).await?;
    Ok(Server { running, _dir: dir })
}

fn refund_body(i: usize) -> String {
    json!({
        "amount": 600 + i,
        "claims": [format!("Order {i} was charged ${}.00.", 600 + i)],
        "evidence": [{"source_id": "invoice", "text": format!("Invoice for order {i}: amount charged ${}.00, paid by card.", 600 + i)}],
    })
    .to_string()
}

/// Hold latencies (ms, sorted) and the wall time of the phase.
async fn holds(
    client: &HttpClient,
    proxy: &str,
    n: usize,
    concurrency: usize,
) -> Result<(Vec<f64>, Duration), Error> {
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, proxy, next) = (client.clone(), proxy.to_string(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut ms = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n || started.elapsed() > PHASE_LIMIT {
                    return Ok::<_, Error>(ms);
                }
                let url = format!("{proxy}/api/orders/{i}/refunds");
                let t = Instant::now();
                let (status, body) =
                    send(&client, Method::POST, &url, refund_body(i).into()).await?;
                if status != 202 {
                    return Err(format!("hold: {status} {}", String::from_utf8_lossy(&body)).into());
                }
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }));
    }
    let mut all = Vec::with_capacity(n);
    for t in tasks {
        all.extend(t.await??);
    }
    let wall = started.elapsed();
    all.sort_by(|a, b| a.total_cmp(b));
    Ok((all, wall))
}

/// One job's timings: the submit, and submit to succeeded.
struct JobTimes {
    /// Items per second from the submit to `succeeded`.
    items_per_s: f64,
    /// Seconds the submit call took (the item rows are inserted in it).
    submit_s: f64,
    /// Items per second from the job's `started_at` to its `finished_at`,
    /// the part more replicas can share.
    run_items_per_s: f64,
}

/// Seconds between two of the job view's RFC 3339 timestamps.
fn between(v: &Value, from: &str, to: &str) -> Result<f64, Error> {
    let at = |k: &str| -> Result<time::OffsetDateTime, Error> {
        let s = v[k]
            .as_str()
            .ok_or_else(|| format!("the job view has no {k}"))?;
        Ok(time::OffsetDateTime::parse(
            s,
            &time::format_description::well_known::Rfc3339,
        )?)
    };
    Ok((at(to)? - at(from)?).as_seconds_f64())
}

/// One job of `n` items, submitted and polled until it succeeds.
async fn job(client: &HttpClient, api: &str, n: usize) -> Result<JobTimes, Error> {
    let items: Vec<Value> = (0..n)
        .map(|i| json!({"claims": [format!("Order {i} was refunded.")], "sources": [{"id": "s", "text": format!("Order {i} was refunded in full.")}]}))
        .collect();
    let started = Instant::now();
    let (status, body) = send(
        client,
        Method::POST,
        &format!("{api}/v1/verify-claims-batch"),
        json!({ "jobs": items }).to_string().into(),
    )
    .await?;
    let submit_s = started.elapsed().as_secs_f64();
    if status != 202 {
        return Err(format!("submit: {status} {}", String::from_utf8_lossy(&body)).into());
    }
    let v: Value = serde_json::from_slice(&body)?;
    let id = v["job_id"].as_str().ok_or("no job_id")?.to_string();
    loop {
        if started.elapsed() > PHASE_LIMIT {
            return Err("the job did not finish in time".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (_, body) = send(
            client,
            Method::GET,
            &format!("{api}/v2/jobs/{id}?limit=1"),
            Bytes::new(),
        )
        .await?;
        let v: Value = serde_json::from_slice(&body)?;
        match v["status"].as_str() {
            Some("succeeded") => {
                let items_per_s = n as f64 / started.elapsed().as_secs_f64();
                let run_s = between(&v, "started_at", "finished_at")?.max(0.001);
                return Ok(JobTimes {
                    items_per_s,
                    submit_s,
                    run_items_per_s: n as f64 / run_s,
                });
            }
            Some("failed") => return Err(format!("the job failed: {v}").into()),
            _ => {}
        }
    }
}

/// CPU jiffies (user and system) this process has used so far, from
/// /proc/self/stat (Linux only; `None` elsewhere).
fn own_jiffies() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at state;
    // utime and stime are the 14th and 15th fields of the whole line.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Busy and total jiffies of all CPUs, from the first line of /proc/stat
/// (Linux only; `None` elsewhere).
fn cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let f: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = f.iter().sum();
    // idle and iowait are the 4th and 5th fields.
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

struct Row {
    backend: Backend,
    round: usize,
    p50: f64,
    p90: f64,
    p99: f64,
    holds_per_s: f64,
    items_per_s: f64,
}

fn q(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() -> Result<(), Error> {
    let a = args()?;
    let pg_dir = match &a.postgres_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("verdict-bench-pg-{}", std::process::id())),
    };
    let cluster = start_cluster(&pg_dir)?;
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let client: HttpClient = client_rt
        .block_on(async { Client::builder(TokioExecutor::new()).build(HttpConnector::new()) });
    if a.replicas {
        replica_rounds(&a, &cluster, &server_rt, &client_rt, &client)?;
        stop_cluster(&a, &pg_dir);
        return Ok(());
    }
    let mut rows = Vec::new();
    for round in 0..a.rounds {
        let order = if round % 2 == 0 {
            [Backend::Sqlite, Backend::Postgres]
        } else {
            [Backend::Postgres, Backend::Sqlite]
        };
        for backend in order {
            let url = match backend {
                Backend::Sqlite => None,
                Backend::Postgres => Some(fresh_database(&cluster)?),
            };
            let server = server_rt.block_on(start_server(url.as_deref(), 1))?;
            let proxy = format!(
                "http://{}",
                server.running.proxy_addr.ok_or("no proxy listener")?
            );
            let api = format!("http://{}", server.running.api_addr);
            let (lat, wall) = client_rt.block_on(holds(&client, &proxy, a.holds, a.concurrency))?;
            let items_per_s = client_rt
                .block_on(job(&client, &api, a.job_items))?
                .items_per_s;
            let row = Row {
                backend,
                round,
                p50: q(&lat, 0.50),
                p90: q(&lat, 0.90),
                p99: q(&lat, 0.99),
                holds_per_s: lat.len() as f64 / wall.as_secs_f64(),
                items_per_s,
            };
            eprintln!(
                "round {} {:<8} hold p50 {:.2} ms p99 {:.2} ms, {:.0} holds/s; job {:.0} items/s",
                round + 1,
                backend.name(),
                row.p50,
                row.p99,
                row.holds_per_s,
                row.items_per_s
            );
            rows.push(row);
            server_rt.block_on(server.running.shutdown());
        }
    }
    println!("| round | store | hold p50 ms | hold p90 ms | hold p99 ms | holds/s | job items/s |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} |",
            r.round + 1,
            r.backend.name(),
            r.p50,
            r.p90,
            r.p99,
            r.holds_per_s,
            r.items_per_s
        );
    }
    let ratio = |f: &dyn Fn(&Row) -> f64| {
        let per_round: Vec<f64> = (0..a.rounds)
            .filter_map(|round| {
                let get = |b: Backend| rows.iter().find(|r| r.round == round && r.backend == b);
                Some(f(get(Backend::Postgres)?) / f(get(Backend::Sqlite)?))
            })
            .collect();
        median(per_round)
    };
    println!();
    println!("PostgreSQL / SQLite, median of {} rounds:", a.rounds);
    println!("- hold p50: {:.2}x", ratio(&|r| r.p50));
    println!("- hold p99: {:.2}x", ratio(&|r| r.p99));
    println!("- holds/s: {:.2}x", ratio(&|r| r.holds_per_s));
    println!("- job items/s: {:.2}x", ratio(&|r| r.items_per_s));
    stop_cluster(&a, &pg_dir);
    Ok(())
}

/// Stops the cluster this run started (not one it was pointed at).
fn stop_cluster(a: &Args, pg_dir: &Path) {
    if a.postgres_dir.is_none() {
        let _ = Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/postgres.sh"))
            .arg("stop")
            .arg(pg_dir)
            .output();
    }
}

/// The unlabelled sample `name` of `api`'s /metrics.
async fn sample(client: &HttpClient, api: &str, name: &str) -> Result<f64, Error> {
    let (_, body) = send(client, Method::GET, &format!("{api}/metrics"), Bytes::new()).await?;
    let text = String::from_utf8_lossy(&body);
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0))
}

/// One job on one replica and on two, per round: items/s and item runs.
fn replica_rounds(
    a: &Args,
    cluster: &Cluster,
    server_rt: &tokio::runtime::Runtime,
    client_rt: &tokio::runtime::Runtime,
    client: &HttpClient,
) -> Result<(), Error> {
    println!(
        "| round | replicas | workers each | items/s | submit s | run items/s | machine CPU busy | CPU µs/item: this process | CPU µs/item: the rest (PostgreSQL) | item runs / items | deadlocks |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut run_rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..a.rounds {
        let order = if round % 2 == 0 { [1, 2] } else { [2, 1] };
        for replicas in order {
            let url = fresh_database(cluster)?;
            let mut servers = Vec::new();
            for _ in 0..replicas {
                servers.push(server_rt.block_on(start_server(Some(&url), a.workers))?);
            }
            let apis: Vec<String> = servers
                .iter()
                .map(|s| format!("http://{}", s.running.api_addr))
                .collect();
            let (cpu_before, own_before) = (cpu_jiffies(), own_jiffies());
            let t = client_rt.block_on(job(client, &apis[0], a.job_items))?;
            // Jiffies are 1/100 s on Linux: 10 000 µs each.
            let per_item = |j: u64| format!("{:.0}", j as f64 * 10_000.0 / a.job_items as f64);
            let (busy, own, rest) = match (cpu_before, cpu_jiffies(), own_before, own_jiffies()) {
                (Some((b0, t0)), Some((b1, t1)), Some(o0), Some(o1)) if t1 > t0 => (
                    format!("{:.0} %", 100.0 * (b1 - b0) as f64 / (t1 - t0) as f64),
                    per_item(o1 - o0),
                    per_item((b1 - b0).saturating_sub(o1 - o0)),
                ),
                _ => ("n/a".into(), "n/a".into(), "n/a".into()),
            };
            let (mut runs, mut deadlocks) = (0.0, 0.0);
            for api in &apis {
                runs += client_rt.block_on(sample(
                    client,
                    api,
                    "verdict_jobs_items_processed_total",
                ))?;
                deadlocks += client_rt.block_on(sample(
                    client,
                    api,
                    "verdict_store_errors_total{kind=\"deadlock\"}",
                ))?;
            }
            println!(
                "| {} | {replicas} | {} | {:.0} | {:.2} | {:.0} | {busy} | {own} | {rest} | {:.3} | {deadlocks} |",
                round + 1,
                a.workers,
                t.items_per_s,
                t.submit_s,
                t.run_items_per_s,
                runs / a.job_items as f64
            );
            rates[replicas - 1].push(t.items_per_s);
            run_rates[replicas - 1].push(t.run_items_per_s);
            for s in servers {
                server_rt.block_on(s.running.shutdown());
            }
        }
    }
    let ratio =
        |r: &[Vec<f64>; 2]| median(r[1].iter().zip(&r[0]).map(|(two, one)| two / one).collect());
    println!();
    println!(
        "two replicas / one, median of {} rounds: {:.2}x submit to succeeded, {:.2}x started to finished",
        a.rounds,
        ratio(&rates),
        ratio(&run_rates)
    );
    Ok(())
}
