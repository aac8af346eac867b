//! Decision-log shipping (`[audit] export_url`): every record reaches a
//! receiver that fails half its calls, is down for five seconds and sees the
//! sidecar restart in the middle; none is lost, a duplicate carries the same
//! record id, and every line verifies alone against the log's key.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use support::{TestServer, APP_KEY};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};
use verdict::config::{Config, ExportConfig};

const POLICY: &str = "[[action]]\ntype = \"refund\"\nrequirements = { citations = \"optional\" }\n";

/// What the receiver got: for each record id, the first line that carried
/// it, its record, and how many lines did; and the calls it answered.
#[derive(Default)]
struct Received {
    ids: Mutex<HashMap<String, (String, String, usize)>>,
    calls: AtomicU64,
}

impl Received {
    /// Keeps a batch's lines. A duplicate carries the same record (its
    /// proof may be against a later checkpoint).
    fn keep(&self, text: &str) {
        let mut ids = self.ids.lock().unwrap();
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            let id = v["record"]["record_id"].as_str().unwrap().to_string();
            let record = v["record"].to_string();
            let seen = ids
                .entry(id)
                .or_insert_with(|| (line.to_string(), record.clone(), 0));
            assert_eq!(seen.1, record, "a duplicate carries the same record");
            seen.2 += 1;
        }
    }
}

/// A receiver that fails half its calls: of every four, the second keeps
/// the lines and still answers 500 (so verdict sends them again), the
/// fourth answers 503 without keeping them.
async fn receiver(listener: TcpListener, got: Arc<Received>) {
    let mut conns = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            break;
        };
        let got = got.clone();
        conns.spawn(async move {
            let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let got = got.clone();
                async move {
                    let batch = req
                        .headers()
                        .get("x-verdict-batch")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string();
                    assert_eq!(
                        req.headers()["content-type"],
                        "application/x-ndjson",
                        "{batch}"
                    );
                    assert_eq!(req.headers()["authorization"], "Bearer ship-test");
                    let body = req.into_body().collect().await.unwrap().to_bytes();
                    let n = got.calls.fetch_add(1, Ordering::SeqCst);
                    let keep = n % 4 != 3;
                    if keep {
                        got.keep(std::str::from_utf8(&body).unwrap());
                    }
                    let status = match n % 4 {
                        1 => 500,
                        3 => 503,
                        _ => 200,
                    };
                    let mut r = http::Response::new(Full::new(Bytes::new()));
                    *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
                    Ok::<_, std::convert::Infallible>(r)
                }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// Starts the receiver on `addr` (port 0 for a fresh one). Aborting the
/// task closes the listener and every connection it accepted.
async fn receiver_on(addr: SocketAddr, got: &Arc<Received>) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    (addr, tokio::spawn(receiver(listener, got.clone())))
}

fn export_to(c: &mut Config, addr: SocketAddr) {
    std::fs::write(c.policies_dir.join("refund.toml"), POLICY).unwrap();
    c.audit.export = Some(ExportConfig {
        url: format!("http://{addr}/v1/decisions").parse().unwrap(),
        batch: 250,
        interval: Duration::from_millis(50),
        timeout: Duration::from_secs(2),
        backoff: Duration::from_millis(20),
        authorization: Some("Bearer ship-test".into()),
    });
}

/// `n` decisions, from 16 clients at once.
async fn decide(s: &TestServer, n: usize) {
    let body =
        Bytes::from(support::blender_refund(json!({"amount": 10}), support::PAID_100).body());
    let url = s.url("/v2/authorize");
    let mut clients = JoinSet::new();
    for c in 0..16 {
        let (body, url) = (body.clone(), url.clone());
        let mine = n / 16 + usize::from(c < n % 16);
        clients.spawn(async move {
            let client = support::client();
            for _ in 0..mine {
                let req = http::Request::post(url.as_str())
                    .header("content-type", "application/json")
                    .header("authorization", format!("Bearer {APP_KEY}"))
                    .body(Full::new(body.clone()))
                    .unwrap();
                let r = support::Resp::read(client.request(req).await.unwrap()).await;
                assert_eq!(r.status, 200, "{}", r.text());
            }
        });
    }
    while let Some(done) = clients.join_next().await {
        done.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_arrives_through_failures_an_outage_and_a_restart() {
    let total: usize = std::env::var("SHIP_TEST_DECISIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let got = Arc::new(Received::default());
    let (addr, up) = receiver_on("127.0.0.1:0".parse().unwrap(), &got).await;
    let s = TestServer::start_with(|c| export_to(c, addr)).await;
    decide(&s, total / 2).await;

    // The receiver goes down for five seconds, and the sidecar restarts
    // while it is down, with decisions before and after.
    up.abort();
    let _ = up.await;
    let down_at = Instant::now();
    decide(&s, total / 4).await;
    let dir = s.shutdown().await;
    let mut config = support::test_config(&dir);
    export_to(&mut config, addr);
    let running = verdict::app::start(config).await.unwrap();
    let s = TestServer::attach(running, dir);
    decide(&s, total - total / 2 - total / 4).await;
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(down_at.elapsed())).await;
    let health = s.get("/health/detailed", None).await.json();
    let export = &health["components"]["audit_export"];
    assert_eq!(export["status"], "degraded", "{health}");
    assert!(export["last_error"].is_string(), "{health}");
    let (_, up) = receiver_on(addr, &got).await;
    let back_up = Instant::now();

    // Every record of the log arrives.
    let log_ids = log_record_ids(&s).await;
    assert!(log_ids.len() >= total, "{}", log_ids.len());
    let deadline = Instant::now() + Duration::from_secs(120);
    let received = loop {
        {
            let ids = got.ids.lock().unwrap();
            if ids.len() >= log_ids.len() && log_ids.iter().all(|id| ids.contains_key(id)) {
                break ids.clone();
            }
        }
        if Instant::now() > deadline {
            let health = s.get("/health/detailed", None).await.json();
            panic!(
                "{} of {} records arrived; {}",
                got.ids.lock().unwrap().len(),
                log_ids.len(),
                health["components"]["audit_export"]
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(
        received.len(),
        log_ids.len(),
        "nothing but the log's records"
    );
    let lines: usize = received.values().map(|(_, _, n)| n).sum();
    let dups = lines - received.len();
    assert!(
        dups > 0,
        "the receiver's kept-then-failed calls make duplicates"
    );
    eprintln!(
        "{} records, {} lines received ({dups} duplicates), {} calls; caught up {:?} after the receiver came back",
        received.len(),
        lines,
        got.calls.load(Ordering::SeqCst),
        back_up.elapsed()
    );

    // Each line verifies alone against the log's published key (each
    // distinct line once: a duplicate is the same line).
    let kid = verdict::audit::keys::load_docs(&s.path("data")).unwrap()[0]
        .kid
        .clone();
    let key = s.get(&format!("/v2/audit/keys/{kid}"), None).await.text();
    let text = received
        .values()
        .map(|(line, _, _)| line.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let n = verdict::audit::export::verify_export(text.as_bytes(), &key, |_| {}).unwrap();
    assert_eq!(n as usize, received.len());

    // Caught up: no lag, no error, and the metric counts what was acked.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let health = s.get("/health/detailed", None).await.json();
    let export = &health["components"]["audit_export"];
    assert_eq!(export["status"], "ok", "{health}");
    assert_eq!(export["lag"], 0, "{health}");
    assert_eq!(export["url"], format!("http://{addr}"), "{health}");
    let metrics = s.get("/metrics", None).await.text();
    assert!(
        metrics.contains("verdict_audit_export_attempts_total{outcome=\"status\"}"),
        "{metrics}"
    );
    up.abort();
    s.shutdown().await;
}

/// Every record id the log holds, through the audit API.
async fn log_record_ids(s: &TestServer) -> HashSet<String> {
    let mut ids = HashSet::new();
    let mut cursor = String::new();
    loop {
        let p = s
            .get(
                &format!("/v2/audit/records?limit=1000{cursor}"),
                Some(APP_KEY),
            )
            .await
            .json();
        for r in p["records"].as_array().unwrap() {
            ids.insert(r["record_id"].as_str().unwrap().to_string());
        }
        match p["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return ids,
        }
    }
}
