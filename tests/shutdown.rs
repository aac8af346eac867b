//! Graceful shutdown: a request in flight when the drain starts (in-process)
//! or when SIGTERM arrives (the real binary) still completes.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::io::{Read, Write};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BODY: &str = r#"{"claims":[{"text":"The sky is blue."}],"sources":[{"source_id":"s1","text":"The sky is blue today."}]}"#;

fn head(key: &str) -> String {
    format!(
        "POST /v2/verify HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        BODY.len()
    )
}

#[tokio::test]
async fn drain_lets_an_in_flight_request_finish() {
    let s = support::TestServer::start().await;
    let mut sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let (first, rest) = BODY.split_at(20);
    sock.write_all(head(support::APP_KEY).as_bytes())
        .await
        .unwrap();
    sock.write_all(first.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    let shutdown = tokio::spawn(s.shutdown());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !shutdown.is_finished(),
        "drain must wait for the request in flight"
    );

    sock.write_all(rest.as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), sock.read_to_string(&mut out))
        .await
        .expect("response before timeout")
        .unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("\"verdict\""), "{out}");
    tokio::time::timeout(Duration::from_secs(10), shutdown)
        .await
        .expect("drain completes")
        .unwrap();
}

#[test]
fn sigterm_drains_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = support::spawn_binary(env!("CARGO_BIN_EXE_verdict"), dir.path());

    let mut sock = std::net::TcpStream::connect(&addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (first, rest) = BODY.split_at(20);
    sock.write_all(head(support::APP_KEY).as_bytes()).unwrap();
    sock.write_all(first.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    support::sigterm(&child);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "must wait for the request in flight"
    );
    sock.write_all(rest.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = sock.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");

    let status = support::wait_exit(&mut child, Duration::from_secs(15))
        .expect("server did not exit after the drain");
    assert_eq!(status.code(), Some(0));
}

/// A request refused during the drain whose body comes after its head
/// still gets its 503: the server reads the body before it closes, so the
/// close is not a reset that takes the answer with it.
#[tokio::test]
async fn a_refused_request_whose_body_comes_late_still_gets_its_answer() {
    let s = support::TestServer::start().await;
    let addr = s.addr;
    // A request in flight keeps the drain (and the listener) going.
    let in_flight = half_sent(addr, &head(support::APP_KEY)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let shutdown = tokio::spawn(s.shutdown());
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut late = tokio::net::TcpStream::connect(addr).await.unwrap();
    late.write_all(head(support::APP_KEY).as_bytes())
        .await
        .unwrap();
    // The head alone is enough to refuse, but an answer before the body is
    // read means a close with the body still arriving, which the kernel
    // turns into a reset (the client then loses the answer, as a client
    // whose body was a packet behind its head did). So no answer yet.
    let mut first = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), late.read(&mut first)).await;
    assert!(
        early.is_err(),
        "answered before the body was read: {early:?}"
    );
    late.write_all(BODY.as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), late.read_to_string(&mut out))
        .await
        .expect("answer before timeout")
        .expect("the answer, not a reset");
    assert!(out.starts_with("HTTP/1.1 503"), "{out}");
    assert!(out.to_ascii_lowercase().contains("retry-after: 1"), "{out}");

    let out = finish(in_flight).await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    tokio::time::timeout(Duration::from_secs(10), shutdown)
        .await
        .expect("drain completes")
        .unwrap();
}

/// Sends `head` and half of a body of `len` bytes on a new connection to
/// `addr`: a request in flight that the drain must wait for.
async fn half_sent(addr: std::net::SocketAddr, head: &str) -> tokio::net::TcpStream {
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(head.as_bytes()).await.unwrap();
    sock.write_all(&BODY.as_bytes()[..20]).await.unwrap();
    sock
}

/// Sends the rest of [`half_sent`]'s body and reads the answer.
async fn finish(mut sock: tokio::net::TcpStream) -> String {
    sock.write_all(&BODY.as_bytes()[20..]).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), sock.read_to_string(&mut out))
        .await
        .expect("response before timeout")
        .unwrap();
    out
}

/// A refund of 900 through the proxy at `proxy`, which the test policies
/// hold for review; the answer and how long it took.
async fn held_refund(proxy: String) -> (support::Resp, Duration) {
    let body = serde_json::json!({
        "amount": 900,
        "claims": [support::DAMAGED],
        "evidence": [{"source_id": "inv", "text": support::INVOICE_77_BLENDER}],
    });
    let started = std::time::Instant::now();
    let r = support::call(
        &proxy,
        http::Method::POST,
        "/api/orders/7/refunds",
        &[("content-type", "application/json")],
        body.to_string(),
    )
    .await;
    (r, started.elapsed())
}

/// The 202 a held caller gets when the drain begins, long before its
/// 15 s hold timeout.
fn assert_answered_at_the_drain(r: &support::Resp, took: Duration) {
    assert_eq!(r.status, 202, "{}", r.text());
    let j = r.json();
    assert!(
        j["review_id"].is_string() && j["result_url"].is_string(),
        "{j}"
    );
    assert!(
        took < Duration::from_secs(10),
        "answered at the drain: {took:?}"
    );
}

/// A drain answers everyone: a caller held for review gets its 202 with
/// the review id and result link at once (not at its 15 s hold timeout,
/// not a closed connection), requests in flight finish, and while they
/// do the listeners still accept: `/health` says 503 draining and any
/// other new request gets 503 with `Retry-After`.
#[tokio::test]
async fn a_drain_answers_held_callers_and_new_requests() {
    let policy = support::RefundPolicy::new("strict")
        .review_over(500)
        .hold("15s")
        .build();
    let g = support::Gated::start(&[("refunds.toml", &policy)], |_| {}).await;
    let proxy = g.proxy.clone();
    let held = tokio::spawn(held_refund(proxy));
    support::eventually("the call is held", Duration::from_secs(10), || async {
        let r =
            g.s.get("/v2/reviews?status=pending", Some(support::REVIEW_KEY))
                .await
                .json();
        match r["reviews"].as_array().map(Vec::len) {
            Some(1) => Ok(()),
            _ => Err(r),
        }
    })
    .await;
    // One request in flight on each listener keeps the drain going.
    let api_in_flight = half_sent(g.s.addr, &head(support::APP_KEY)).await;
    let pass_head = format!(
        "POST /api/other HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        BODY.len()
    );
    let proxy_in_flight = half_sent(g.proxy_addr(), &pass_head).await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    let (api, proxy) = (format!("http://{}", g.s.addr), g.proxy.clone());
    let support::Gated { s, up, .. } = g;
    let shutdown = tokio::spawn(s.shutdown());

    let (r, took) = held.await.unwrap();
    assert_answered_at_the_drain(&r, took);

    let health = support::call(&api, http::Method::GET, "/health", &[], String::new()).await;
    assert_eq!(health.status, 503, "{}", health.text());
    assert!(health.text().contains("draining"), "{}", health.text());
    for (base, path) in [(&api, "/v2/verify"), (&proxy, "/api/orders/8/refunds")] {
        let r = support::call(
            base,
            http::Method::POST,
            path,
            &[("content-type", "application/json")],
            BODY.to_string(),
        )
        .await;
        r.assert_error(503, "unavailable");
        assert_eq!(
            r.headers.get("retry-after").map(|v| v.as_bytes()),
            Some(&b"1"[..]),
            "{path}"
        );
    }
    assert!(
        !shutdown.is_finished(),
        "the drain waits for the requests in flight"
    );

    let out = finish(api_in_flight).await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let out = finish(proxy_in_flight).await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    tokio::time::timeout(Duration::from_secs(10), shutdown)
        .await
        .expect("drain completes")
        .unwrap();
    // The held call was never forwarded; only the pass-through reached it.
    assert_eq!(up.count(), 1);
}

/// The real binary: a call held for review (hold_timeout 15 s) when
/// SIGTERM arrives gets its 202 with the review id and result link within
/// the drain, and the process exits 0.
#[tokio::test]
async fn sigterm_answers_a_held_caller() {
    let up = support::MockUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("policies")).unwrap();
    let policy = support::RefundPolicy::new("strict")
        .review_over(500)
        .hold("15s")
        .build();
    std::fs::write(dir.path().join("policies/refunds.toml"), policy).unwrap();
    let (mut child, _api, log) = support::spawn_binary_with(
        env!("CARGO_BIN_EXE_verdict"),
        dir.path(),
        "info",
        &["--proxy-listen", "127.0.0.1:0", "--upstream", &up.url()],
        &[],
    );
    let proxy = format!("http://{}", support::logged_addr(&log, "proxy listening"));
    let held = tokio::spawn(held_refund(proxy));
    support::wait_for("the call is held", Duration::from_secs(10), || {
        String::from_utf8_lossy(&log.lock().unwrap()).contains("request held for review")
    })
    .await;
    support::sigterm(&child);
    let (r, took) = held.await.unwrap();
    assert_answered_at_the_drain(&r, took);
    let status = support::wait_exit(&mut child, Duration::from_secs(15))
        .expect("the server exits after the drain");
    assert_eq!(status.code(), Some(0));
    assert_eq!(up.count(), 0);
}
