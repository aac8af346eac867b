//! Request bodies that never finish, and one host that opens every
//! connection it can (attack round 3, row 4): a body must arrive within
//! `server.body_read_timeout` at `server.body_min_rate` or gets 408, one
//! peer address holds at most `server.max_connections_per_ip`
//! connections, and probes are answered on a reserved connection when
//! the cap is reached.
//!
//! The attacker connects from 127.0.0.2 and the honest clients from
//! 127.0.0.1 (both loopback), so the per-peer limit can tell them apart.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request};
use http_body::{Body, Frame};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use support::{Gated, RefundPolicy, APP_KEY, DAMAGED, INVOICE_77};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Where the attacker connects from.
const ATTACKER: &str = "127.0.0.2";

/// A connection from `from` (an address on loopback) to `to`.
async fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let sock = TcpSocket::new_v4()?;
    sock.bind(format!("{from}:0").parse().unwrap())?;
    sock.connect(to).await
}

/// Everything the server sends on `sock` until it closes it (within 5 s).
async fn read_all(sock: &mut TcpStream) -> String {
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), sock.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}

/// A refund the shipped-style policy allows: $100 with its invoice.
fn refund() -> String {
    json!({"amount": 100, "claims": [DAMAGED, "The customer was charged $100.00."],
           "evidence": [{"source_id": "inv", "text": INVOICE_77}]})
    .to_string()
}

async fn gated(edit: impl FnOnce(&mut verdict::config::Config)) -> Gated {
    let policy = RefundPolicy::new("strict").build();
    Gated::start(&[("refunds.toml", &policy)], edit).await
}

/// A POST whose head promises `len` bytes and whose body never comes:
/// the status code the server answers with (0 when it only closes), and
/// how long that took.
async fn never_finishing_post(
    from: &str,
    to: SocketAddr,
    target: &str,
    headers: &str,
) -> (u16, Duration) {
    let started = Instant::now();
    let mut sock = connect_from(from, to).await.unwrap();
    let head = format!(
        "POST {target} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n{headers}\r\n{{\"a"
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, started.elapsed())
}

/// A body stuck after its head: 408 near the deadline on the API, on a
/// gated route and on the pass-through, and the connection is closed.
#[tokio::test]
async fn a_body_that_stops_is_cut_with_408() {
    let g = gated(|c| c.server.body_read_timeout = Duration::from_millis(600)).await;
    let bearer = format!("authorization: Bearer {APP_KEY}\r\n");
    let cases = [
        (g.s.addr, "/v2/verify", bearer.as_str()),
        (g.proxy_addr(), "/api/orders/77/refunds", ""),
        (g.proxy_addr(), "/somewhere/else", ""),
    ];
    for (to, target, headers) in cases {
        let (status, took) = never_finishing_post("127.0.0.1", to, target, headers).await;
        assert_eq!(status, 408, "{target}");
        assert!(
            took >= Duration::from_millis(550) && took < Duration::from_secs(5),
            "{target}: {took:?}"
        );
    }
    // The cut gated call is not on the upstream.
    assert!(g
        .up
        .calls()
        .iter()
        .all(|c| c.path != "/api/orders/77/refunds"));
}

/// A body that keeps a fair pace earns time past `body_read_timeout`.
#[tokio::test]
async fn a_body_at_a_fair_pace_is_not_cut() {
    let s = support::TestServer::start_with(|c| {
        c.server.body_read_timeout = Duration::from_millis(400);
        c.server.body_min_rate = 100;
    })
    .await;
    let body = json!({"claims": ["Refunds are issued within 14 days."],
                      "sources": [{"id": "p", "text": "Refunds are issued within 14 days of delivery."}]})
    .to_string();
    let mut sock = connect_from("127.0.0.1", s.addr).await.unwrap();
    let head = format!(
        "POST /v2/verify HTTP/1.1\r\nhost: x\r\nconnection: close\r\nauthorization: Bearer {APP_KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    // 20 bytes every 100 ms (200 B/s, twice the floor): past the 400 ms
    // the body gets by itself.
    let started = Instant::now();
    for chunk in body.as_bytes().chunks(20) {
        sock.write_all(chunk).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(started.elapsed() > Duration::from_millis(600));
    let out = read_all(&mut sock).await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
}

/// Past the connection cap, a reserved connection still answers `/health`,
/// `/ready` and `/metrics`, and refuses anything else with 503.
#[tokio::test]
async fn probes_are_answered_when_every_slot_is_taken() {
    // The per-peer limit is set above the cap: this is about the cap.
    let s = support::TestServer::start_with(|c| {
        c.server.max_connections = 2;
        c.server.max_connections_per_ip = 8;
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut sock = TcpStream::connect(s.addr).await.unwrap();
        sock.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = sock.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        held.push(sock);
    }
    for (target, want) in [
        ("/health", "HTTP/1.1 200"),
        ("/ready", "HTTP/1.1 200"),
        ("/metrics", "HTTP/1.1 200"),
        ("/v2/audit/checkpoint", "HTTP/1.1 503"),
    ] {
        let mut sock = TcpStream::connect(s.addr).await.unwrap();
        let req = format!("GET {target} HTTP/1.1\r\nhost: x\r\n\r\n");
        sock.write_all(req.as_bytes()).await.unwrap();
        let out = read_all(&mut sock).await;
        assert!(out.starts_with(want), "{target}: {out}");
    }
    drop(held);
    s.shutdown().await;
}

/// One peer holds at most `max_connections_per_ip`: its next connection is
/// refused while another peer still gets in.
#[tokio::test]
async fn one_peer_cannot_take_every_slot() {
    let s = support::TestServer::start_with(|c| {
        c.server.max_connections = 8;
        c.server.max_connections_per_ip = 2;
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(connect_from(ATTACKER, s.addr).await.unwrap());
    }
    let mut third = connect_from(ATTACKER, s.addr).await.unwrap();
    let out = read_all(&mut third).await;
    assert!(out.starts_with("HTTP/1.1 503"), "{out}");
    let r = s.get("/health", None).await;
    assert_eq!(r.status, 200);
    // The count goes down as connections close.
    drop(held);
    support::eventually(
        "a slot for the peer again",
        Duration::from_secs(5),
        || async {
            let mut sock = connect_from(ATTACKER, s.addr)
                .await
                .map_err(|e| e.to_string())?;
            sock.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                .await
                .map_err(|e| e.to_string())?;
            let mut out = String::new();
            let _ = sock.read_to_string(&mut out).await;
            if out.starts_with("HTTP/1.1 200") {
                Ok(())
            } else {
                Err(out)
            }
        },
    )
    .await;
    s.shutdown().await;
}

/// A request body that never ends (no data, no end of stream).
struct Stalled;

impl Body for Stalled {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Pending
    }
}

/// 60 HTTP/2 streams left open without END_STREAM on one connection from
/// the attacker, to `target` on `to`. Runs until the connection ends or
/// `stop` is set; opens a new connection when one ends.
async fn stalled_streams(to: SocketAddr, target: &'static str, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(stream) = connect_from(ATTACKER, to).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Ok((send, conn)) = hyper::client::conn::http2::handshake::<_, _, Stalled>(
            TokioExecutor::new(),
            TokioIo::new(stream),
        )
        .await
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let driver = tokio::spawn(conn);
        let mut streams = Vec::new();
        for _ in 0..60 {
            let mut send = send.clone();
            let req = Request::builder()
                .method(Method::POST)
                .uri(format!("http://x{target}"))
                .header("content-type", "application/json")
                .header("authorization", format!("Bearer {APP_KEY}"))
                .body(Stalled)
                .unwrap();
            streams.push(tokio::spawn(async move { send.send_request(req).await }));
        }
        for s in streams {
            let _ = s.await;
        }
        let _ = driver.await;
    }
}

/// Slow HTTP/1 bodies from the attacker, `n` at a time, to `target` on
/// `to`: one byte every 4 s after the head, reopened when the server ends
/// one.
async fn slow_bodies(n: usize, to: SocketAddr, target: &'static str, stop: Arc<AtomicBool>) {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut sock) = connect_from(ATTACKER, to).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let head = format!(
                    "POST {target} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {APP_KEY}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n"
                );
                if sock.write_all(head.as_bytes()).await.is_err() {
                    continue;
                }
                let mut buf = [0u8; 1024];
                loop {
                    if stop.load(Ordering::Relaxed) || sock.write_all(b" ").await.is_err() {
                        break;
                    }
                    // Any answer (503, 408) or a close ends this connection.
                    match tokio::time::timeout(Duration::from_secs(4), sock.read(&mut buf)).await {
                        Err(_) => {}
                        Ok(_) => break,
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// The acceptance run of row 4: with `max_connections = 60`, 70 slow-body
/// HTTP/1 connections and 60 stalled HTTP/2 streams from one peer against
/// each listener, for `VERDICT_SLOW_BODY_SECS` (30 s): `/health` answers
/// 200 within 100 ms and an ordinary gated request is answered within 1 s,
/// every time they are asked (every 250 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_from_one_peer_leave_health_and_the_gate_answering() {
    let secs: u64 = std::env::var("VERDICT_SLOW_BODY_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    // A config file with `max_connections = 60` gets a quarter of it per
    // peer (`config::tests::per_ip_limit_defaults_to_a_quarter_of_the_cap`);
    // the struct is edited here, so both are set.
    let g = gated(|c| {
        c.server.max_connections = 60;
        c.server.max_connections_per_ip = 15;
    })
    .await;
    let (api, proxy) = (g.s.addr, g.proxy_addr());
    let stop = Arc::new(AtomicBool::new(false));
    let attack = vec![
        tokio::spawn(slow_bodies(70, api, "/v2/verify", stop.clone())),
        tokio::spawn(slow_bodies(
            70,
            proxy,
            "/api/orders/77/refunds",
            stop.clone(),
        )),
        tokio::spawn(stalled_streams(api, "/v2/verify", stop.clone())),
        tokio::spawn(stalled_streams(
            proxy,
            "/api/orders/77/refunds",
            stop.clone(),
        )),
    ];
    // Let the attack take what it can before measuring.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let checks = AtomicUsize::new(0);
    let mut worst_health = Duration::ZERO;
    let mut worst_gated = Duration::ZERO;
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        let started = Instant::now();
        let health = tokio::time::timeout(Duration::from_secs(2), async {
            let mut sock = connect_from("127.0.0.1", api).await.unwrap();
            sock.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                .await
                .unwrap();
            let mut out = String::new();
            let _ = sock.read_to_string(&mut out).await;
            out
        })
        .await
        .unwrap_or_default();
        let took = started.elapsed();
        assert!(health.starts_with("HTTP/1.1 200"), "/health: {health:?}");
        worst_health = worst_health.max(took);

        let started = Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(3),
            support::call(
                &format!("http://{proxy}"),
                Method::POST,
                "/api/orders/77/refunds",
                &[("content-type", "application/json")],
                refund(),
            ),
        )
        .await
        .expect("the gated call was not answered within 3 s");
        let took_gated = started.elapsed();
        assert_eq!(r.status, 200, "{}", r.text());
        worst_gated = worst_gated.max(took_gated);
        checks.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let n = checks.load(Ordering::Relaxed);
    eprintln!("{n} checks: worst /health {worst_health:?}, worst gated call {worst_gated:?}");
    assert!(
        worst_health < Duration::from_millis(100),
        "{worst_health:?}"
    );
    assert!(worst_gated < Duration::from_secs(1), "{worst_gated:?}");
    for t in attack {
        t.abort();
    }
    g.s.shutdown().await;
}
