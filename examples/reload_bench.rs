//! How long a policy edit takes to reach the decisions: from the end of the
//! file write to the first `/v2/authorize` answer decided by the new set,
//! while other clients keep calling.
//!
//! Starts a whole sidecar in-process (temp data dir, generated keys file,
//! loopback port 0) and drives it over real HTTP from a separate runtime:
//!
//! 1. `--clients` closed-loop clients call `/v2/authorize` for the whole
//!    run (each bounded to 200 000 calls), counting every answer that is
//!    not a 200;
//! 2. `--edits` times, the policy file is rewritten in place (truncate,
//!    write, close, as `echo > file` or most editors' "save" do) so that a
//!    refund of 300 flips between allow and deny, and a probe client asks
//!    every millisecond until the answer is the new one (at most 5 s);
//! 3. a table: write-to-decision latency (median, p95, max), the calls
//!    made meanwhile and how many failed.
//!
//! `cargo run --release --example reload_bench -- [--edits 20] [--clients 2]`
//!
//! Every loop is bounded in count and in time; everything is on 127.0.0.1.

mod bench_support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench_support::{bench_dir, send, Error, HttpClient};
use bytes::Bytes;
use http::Method;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use verdict::config::Config;

/// The longest one edit may take to show.
const EDIT_LIMIT: Duration = Duration::from_secs(5);
/// Upper bound on the calls of one load client.
const MAX_CALLS_PER_CLIENT: usize = 200_000;

/// Refunds above `limit` are denied.
fn policy(limit: u32) -> String {
    format!(
        "[[action]]\ntype = \"refund.create\"\n\
         requirements = {{ decision_mode = \"strict\", min_coverage = 0.5, citations = \"optional\" }}\n\
         [[action.rule]]\nparam = \"amount\"\nop = \"gt\"\nvalue = {limit}\neffect = \"deny\"\n"
    )
}

fn body() -> Bytes {
    json!({
        "action": {"type": "refund.create", "params": {"amount": 300}},
        "claims": [{"text": "Order 7 was charged $300.00."}],
        "sources": [{"source_id": "inv", "text": "Invoice for order 7: amount charged $300.00."}],
    })
    .to_string()
    .into()
}

async fn decision(client: &HttpClient, url: &str) -> Result<String, Error> {
    let (status, body) = send(client, Method::POST, url, body()).await?;
    if status != 200 {
        return Err(format!("authorize: {status} {}", String::from_utf8_lossy(&body)).into());
    }
    let v: Value = serde_json::from_slice(&body)?;
    Ok(v["decision"].as_str().unwrap_or_default().to_string())
}

fn q(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn main() -> Result<(), Error> {
    let (mut edits, mut clients) = (20usize, 2usize);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--edits" => edits = value()?.parse()?,
            "--clients" => clients = value()?.parse()?,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    if edits == 0 || edits > 1000 {
        return Err("--edits must be 1 to 1000".into());
    }
    // Above 500: every refund of 300 is allowed; above 100: denied.
    let (dir, overrides) = bench_dir(&policy(500))?;
    let file = dir.path().join("policies/refunds.toml");
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let config = Config::from_toml("bench", "", &overrides)?;
    let running = server_rt.block_on(verdict::app::start(config))?;
    let url = format!("http://{}/v2/authorize", running.api_addr);
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let client: HttpClient =
        client_rt.block_on(async { Client::builder(TokioExecutor::new()).build_http() });

    let stop = Arc::new(AtomicBool::new(false));
    let (calls, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut load = Vec::new();
    for _ in 0..clients {
        let (client, url, stop) = (client.clone(), url.clone(), stop.clone());
        let (calls, failed) = (calls.clone(), failed.clone());
        load.push(client_rt.spawn(async move {
            for _ in 0..MAX_CALLS_PER_CLIENT {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                calls.fetch_add(1, Ordering::Relaxed);
                if decision(&client, &url).await.is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }

    let mut ms = Vec::with_capacity(edits);
    for i in 0..edits {
        let (limit, want) = if i % 2 == 0 {
            (100, "deny")
        } else {
            (500, "allow")
        };
        let text = policy(limit);
        let took = client_rt.block_on(async {
            // Let the previous edit's events pass.
            tokio::time::sleep(Duration::from_millis(100)).await;
            std::fs::write(&file, &text)?;
            let written = Instant::now();
            loop {
                if decision(&client, &url).await? == want {
                    return Ok::<_, Error>(written.elapsed());
                }
                if written.elapsed() > EDIT_LIMIT {
                    return Err(format!("edit {i} not live after {EDIT_LIMIT:?}").into());
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })?;
        eprintln!("edit {}: {:.1} ms", i + 1, took.as_secs_f64() * 1000.0);
        ms.push(took.as_secs_f64() * 1000.0);
    }
    stop.store(true, Ordering::Relaxed);
    for t in load {
        client_rt.block_on(t)?;
    }
    server_rt.block_on(running.shutdown());
    ms.sort_by(|a, b| a.total_cmp(b));
    println!("| edits | median ms | p95 ms | max ms | calls meanwhile | failed |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| {edits} | {:.1} | {:.1} | {:.1} | {} | {} |",
        q(&ms, 0.5),
        q(&ms, 0.95),
        ms.last().copied().unwrap_or(f64::NAN),
        calls.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    Ok(())
}
