//! Fault injection: what the sidecar does when the world around it breaks.
//!
//! - The audit log cannot be written (test hook, and optionally a real full
//!   disk on a tiny tmpfs): decisions fail closed everywhere, health says so,
//!   and once writes work again the log is whole.
//! - The upstream resets connections in the middle of a response.
//! - Policy files, or the whole policy directory, vanish while serving.
//! - Slowloris connections and a connection flood beyond the cap while a
//!   normal client keeps calling `/v2/verify`.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use support::{MockUpstream, RefundPolicy, TestServer, APP_KEY, DAMAGED, INVOICE_77_BLENDER};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ACCOUNTS: &str = r#"
[[action]]
type = "account.close"
requirements = { decision_mode = "strict", citations = "optional" }

[[route]]
name = "close-account"
method = "POST"
path = "/api/accounts/{id}/close"
action = "account.close"
claims = "body:/claims"
sources = "body:/evidence"
"#;

fn refund_body() -> String {
    json!({"amount": 100,
           "claims": [DAMAGED],
           "evidence": [{"source_id": "inv", "text": INVOICE_77_BLENDER}]})
    .to_string()
}

fn authorize_body() -> String {
    json!({"action": {"type": "refund.create", "params": {"amount": 100}},
           "claims": [DAMAGED],
           "sources": [{"source_id": "inv", "text": INVOICE_77_BLENDER}]})
    .to_string()
}

/// A sidecar with both policy files (refunds: strict, no rules), proxying
/// to `upstream`.
async fn start(upstream: String, edit: impl FnOnce(&mut verdict::config::Config)) -> TestServer {
    let refunds = RefundPolicy::new("strict").build();
    let policies = [
        ("refunds.toml", refunds.as_str()),
        ("accounts.toml", ACCOUNTS),
    ];
    TestServer::with_policies(&policies, |c| {
        c.proxy.upstream = Some(upstream);
        c.proxy.response_timeout = Duration::from_secs(2);
        edit(c);
    })
    .await
}

/// One JSON request to the proxy listener.
async fn via_proxy(s: &TestServer, method: Method, path: &str, body: String) -> support::Resp {
    let proxy = format!("http://{}", s.proxy_addr());
    let json = [("content-type", "application/json")];
    let answer = support::call(&proxy, method, path, &json, body);
    support::within(Duration::from_secs(10), path, answer).await
}

async fn detailed(s: &TestServer) -> Value {
    s.get("/health/detailed", None).await.json()
}

/// Waits up to 10 s for `/health/detailed` to satisfy `reached`.
async fn wait_health(s: &TestServer, what: &str, reached: impl Fn(&Value) -> bool) {
    s.health_until(what, Duration::from_secs(10), reached).await;
}

fn audit_verify(data: &std::path::Path) {
    let out = support::cli(
        env!("CARGO_BIN_EXE_verdict"),
        &["audit", "verify", "--data-dir"],
        data,
    );
    support::assert_exit(&out, 0);
}

// === audit write failure ===

#[tokio::test]
async fn audit_write_failure_fails_closed_on_api_and_proxy_then_recovers() {
    let up = MockUpstream::start().await;
    let s = start(up.url(), |_| {}).await;
    let app = s.app().clone();
    app.audit.inject_write_failure(true);

    let r = s
        .post_json("/v2/authorize", &authorize_body(), Some(APP_KEY))
        .await;
    r.assert_error(503, "unavailable");
    let r = via_proxy(&s, Method::POST, "/api/orders/77/refunds", refund_body()).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "unavailable", "{}", r.text());
    assert_eq!(
        up.count(),
        0,
        "a gated call went upstream without its record"
    );
    let h = detailed(&s).await;
    assert_eq!(h["status"], "failing", "{h}");
    assert_eq!(h["components"]["audit"]["status"], "failing", "{h}");
    // Readiness tells the truth (liveness stays up: the log recovers).
    let ready = s.get("/ready", None).await;
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert_eq!(ready.json()["status"], "not_ready");
    assert_eq!(s.get("/health", None).await.status, 200);

    app.audit.inject_write_failure(false);
    let r = s
        .post_json("/v2/authorize", &authorize_body(), Some(APP_KEY))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = via_proxy(&s, Method::POST, "/api/orders/77/refunds", refund_body()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(up.count(), 1);
    let h = detailed(&s).await;
    assert_eq!(h["components"]["audit"]["status"], "ok", "{h}");
    assert_eq!(s.get("/ready", None).await.status, 200);

    let dir = s.shutdown().await;
    audit_verify(&dir.path().join("data"));
}

/// Unmounts a tmpfs when dropped, so a failing test leaves no mount behind.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` at `at`; `None` when this machine does not
    /// allow it (not root, no CAP_SYS_ADMIN, no `mount`).
    fn mount(at: &std::path::Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Fills a filesystem with one file until the disk is full.
fn fill(path: &std::path::Path) {
    use std::io::Write as _;
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 4096];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
}

#[tokio::test]
async fn a_full_disk_fails_closed_and_recovers_when_space_returns() {
    let outer = tempfile::tempdir().unwrap();
    let data = outer.path().join("data");
    let Some(mount) = Tmpfs::mount(&data, "4m") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN)");
        return;
    };
    let up = MockUpstream::start().await;
    let data2 = data.clone();
    let s = start(up.url(), move |c| c.data_dir = data2).await;
    let r = s
        .post_json("/v2/authorize", &authorize_body(), Some(APP_KEY))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());

    let filler = data.join("filler");
    fill(&filler);
    // SQLite may still have a little room in pages it already owns; a few
    // decisions use it up. Every answer must be a durable 200 or a 503.
    let mut failed = false;
    for _ in 0..200 {
        let r = s
            .post_json("/v2/authorize", &authorize_body(), Some(APP_KEY))
            .await;
        match r.status {
            200 => {}
            503 => {
                r.assert_error(503, "unavailable");
                failed = true;
                break;
            }
            other => panic!("status {other}: {}", r.text()),
        }
    }
    assert!(failed, "a full disk never made a write fail");
    let r = via_proxy(&s, Method::POST, "/api/orders/77/refunds", refund_body()).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(up.count(), 0);
    assert_eq!(
        detailed(&s).await["components"]["audit"]["status"],
        "failing"
    );

    std::fs::remove_file(&filler).unwrap();
    support::eventually("writes to resume", Duration::from_secs(10), || async {
        let r = s
            .post_json("/v2/authorize", &authorize_body(), Some(APP_KEY))
            .await;
        if r.status == 200 {
            Ok(())
        } else {
            Err(r.text())
        }
    })
    .await;
    assert_eq!(detailed(&s).await["components"]["audit"]["status"], "ok");
    let r = via_proxy(&s, Method::POST, "/api/orders/77/refunds", refund_body()).await;
    assert_eq!(r.status, 200, "{}", r.text());

    let _dir = s.shutdown().await;
    audit_verify(&data);
    drop(mount);
}

// === upstream resets ===

/// How the resetting upstream misbehaves.
#[derive(Clone, Copy)]
enum Cut {
    /// Half a status line and header block, then RST.
    InHeaders,
    /// A complete head promising 1000 bytes, 10 of them, then RST.
    InBody,
}

/// A raw TCP upstream that reads a request, writes part of a response and
/// resets the connection (SO_LINGER 0).
async fn resetting_upstream(cut: Cut) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h2 = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                break;
            };
            let hits = h2.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut seen = Vec::new();
                // Read the request head (the body may or may not follow).
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                hits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let partial: &[u8] = match cut {
                    Cut::InHeaders => b"HTTP/1.1 200 OK\r\ncontent-type: appl",
                    Cut::InBody => {
                        b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 1000\r\n\r\n0123456789"
                    }
                };
                let _ = sock.write_all(partial).await;
                let _ = sock.flush().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = sock.set_zero_linger();
                drop(sock);
            });
        }
    });
    (format!("http://{addr}"), hits)
}

#[tokio::test]
async fn upstream_reset_in_the_head_is_a_json_502_and_the_proxy_keeps_serving() {
    let (url, hits) = resetting_upstream(Cut::InHeaders).await;
    let s = start(url, |_| {}).await;
    for _ in 0..3 {
        for (method, path, body) in [
            (Method::GET, "/passthrough", String::new()),
            (Method::POST, "/api/orders/77/refunds", refund_body()),
        ] {
            let r = via_proxy(&s, method, path, body).await;
            assert_eq!(r.status, 502, "{path}: {}", r.text());
            let v = r.json();
            assert_eq!(v["error"]["code"], "upstream_unavailable", "{v}");
            assert!(v["error"]["request_id"].is_string(), "{v}");
        }
    }
    assert!(hits.load(std::sync::atomic::Ordering::SeqCst) >= 6);
    assert_eq!(s.get("/health", None).await.status, 200);
    let r = s
        .post_json("/v2/authorize", &authorize_body(), Some(APP_KEY))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    s.shutdown().await;
}

#[tokio::test]
async fn upstream_reset_in_the_body_ends_the_response_and_the_proxy_keeps_serving() {
    let (url, _) = resetting_upstream(Cut::InBody).await;
    let s = start(url, |_| {}).await;
    for (method, path, body) in [
        (Method::GET, "/passthrough", String::new()),
        (Method::POST, "/api/orders/77/refunds", refund_body()),
    ] {
        let req = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", s.proxy_addr()))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(10), support::client().request(req))
            .await
            .expect("the proxy answers in time");
        // Either the connection is closed before any head, or the head was
        // already relayed, so the status can no longer change: then the
        // body must end in an error, never look complete.
        if let Ok(resp) = resp {
            let status = resp.status();
            let body = tokio::time::timeout(Duration::from_secs(10), resp.collect())
                .await
                .expect("the body ends in time");
            if let Ok(b) = body {
                let b = b.to_bytes();
                assert!(
                    status == 502 && b.starts_with(b"{"),
                    "{path}: a cut body looked complete: {status} {b:?}"
                );
            }
        }
    }
    // The proxy listener still serves: a denied gated call is answered
    // without the upstream, and the API is up.
    let r = via_proxy(
        &s,
        Method::POST,
        "/api/accounts/9/close",
        json!({"claims": ["The account is overdrawn."], "evidence": []}).to_string(),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(s.get("/health", None).await.status, 200);
    s.shutdown().await;
}

// === policy files vanish ===

#[tokio::test]
async fn deleted_policy_files_stop_gating_and_a_deleted_dir_keeps_the_last_good_set() {
    let up = MockUpstream::start().await;
    let s = start(up.url(), |_| {}).await;
    let gated = |r: &support::Resp| r.header("x-verdict-record-id").is_some();
    let refund = || via_proxy(&s, Method::POST, "/api/orders/77/refunds", refund_body());
    let close = || {
        via_proxy(
            &s,
            Method::POST,
            "/api/accounts/9/close",
            json!({"claims": ["x"], "evidence": []}).to_string(),
        )
    };
    let r = refund().await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(gated(&r), "the refund route is gated");
    let r = close().await;
    assert_eq!(r.status, 403, "{}", r.text());

    // One file deleted: a valid, smaller set. Its route is no longer
    // intercepted (unmatched = forward), the other file's still is, and
    // health stays degraded until a reload acknowledges the removal.
    std::fs::remove_file(s.path("policies/accounts.toml")).unwrap();
    wait_health(&s, "the set without accounts.toml", |h| {
        h["components"]["policies"]["files"] == json!(["refunds.toml"])
    })
    .await;
    let h = detailed(&s).await;
    assert_eq!(h["components"]["policies"]["status"], "degraded", "{h}");
    assert_eq!(
        h["components"]["policies"]["removed_routes"],
        json!(["close-account"]),
        "{h}"
    );
    let before = up.count();
    let r = close().await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!gated(&r), "a deleted route is still gated");
    assert_eq!(up.count(), before + 1);
    let r = refund().await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(gated(&r));

    // The whole directory deleted: that is an error, so the last good set
    // keeps serving and health says degraded.
    std::fs::remove_dir_all(s.path("policies")).unwrap();
    wait_health(&s, "a degraded policy store", |h| {
        h["components"]["policies"]["status"] == "degraded"
    })
    .await;
    let h = detailed(&s).await;
    assert_eq!(h["status"], "degraded", "{h}");
    assert!(h["components"]["policies"]["last_error"].is_string(), "{h}");
    let r = refund().await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(gated(&r), "the last good set stopped gating");
    assert_eq!(s.get("/health", None).await.status, 200);

    // The directory comes back: the watcher sees it and recovers. The
    // refund route it no longer holds is acknowledged as removed, and the
    // close-account route is back, so nothing removed is left unacknowledged.
    std::fs::create_dir(s.path("policies")).unwrap();
    std::fs::write(
        s.path("policies/accounts.toml"),
        format!("[set]\nremoved_routes = [\"create-refund\"]\n{ACCOUNTS}"),
    )
    .unwrap();
    wait_health(&s, "recovery after the directory returns", |h| {
        h["components"]["policies"]["files"] == json!(["accounts.toml"])
    })
    .await;
    let h = detailed(&s).await;
    assert_eq!(h["components"]["policies"]["status"], "ok", "{h}");
    assert_eq!(close().await.status, 403);
    s.shutdown().await;
}

// === slowloris and connection flood ===

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// One `/v2/verify` call on `conn`; returns its latency.
async fn verify(
    conn: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    addr: SocketAddr,
    body: &str,
) -> Duration {
    let req = Request::post("/v2/verify")
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {APP_KEY}"))
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let started = Instant::now();
    conn.ready().await.unwrap();
    let resp = conn.send_request(req).await.unwrap();
    let status = resp.status();
    resp.into_body().collect().await.unwrap();
    assert_eq!(status, 200);
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_latency_holds_under_slowloris_and_a_connection_flood() {
    const SLOW: usize = 50;
    const FLOOD: usize = 40;
    const CAP: usize = 80;
    let s = TestServer::start_with(|c| {
        c.server.max_connections = CAP;
        c.server.header_read_timeout = Duration::from_secs(10);
    })
    .await;
    let addr = s.addr;
    let body = json!({"claims": ["Refunds are issued within 14 days of delivery."],
                      "sources": [{"id": "p", "text": "Refunds are issued within 14 days of delivery. Shipping is free."}]})
    .to_string();
    // One keep-alive connection, opened before the flood and used for every
    // call, like a real long-lived client holding one of the permits. (A
    // pooled client can open a fresh connection when the last one has not
    // yet gone back to its pool, and a fresh one past the cap gets a 503.)
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut conn, driver) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(driver);
    for _ in 0..5 {
        verify(&mut conn, addr, &body).await;
    }
    let mut baseline = Vec::new();
    for _ in 0..20 {
        baseline.push(verify(&mut conn, addr, &body).await);
    }
    let baseline = p50(baseline);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut slow = Vec::new();
    for _ in 0..SLOW {
        let stop = stop.clone();
        slow.push(tokio::spawn(async move {
            let Ok(mut sock) = tokio::net::TcpStream::connect(addr).await else {
                return;
            };
            let head = b"POST /v2/verify HTTP/1.1\r\nhost: x\r\nx-padding: ";
            for b in head.iter().chain(std::iter::repeat(&b'a')) {
                if stop.load(std::sync::atomic::Ordering::Relaxed)
                    || sock.write_all(&[*b]).await.is_err()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Past the cap: these get a 503 and are closed, or sit idle holding a
    // permit until the header timeout.
    let mut flood = Vec::new();
    for _ in 0..FLOOD {
        if let Ok(sock) = tokio::net::TcpStream::connect(addr).await {
            flood.push(sock);
        }
    }
    let mut refused = 0;
    for sock in &mut flood {
        let mut buf = [0u8; 64];
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(50), sock.read(&mut buf)).await
        {
            if String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 503") {
                refused += 1;
            }
        }
    }

    let mut attacked = Vec::new();
    for _ in 0..20 {
        attacked.push(verify(&mut conn, addr, &body).await);
    }
    let attacked = p50(attacked);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(flood);
    for t in slow {
        let _ = t.await;
    }
    assert!(
        refused > 0,
        "{SLOW} slow + {FLOOD} flood connections never hit the cap of {CAP}"
    );
    let bound = baseline * 2 + Duration::from_millis(50);
    assert!(
        attacked <= bound,
        "verify p50 {attacked:?} under attack, baseline {baseline:?}, bound {bound:?}"
    );
    eprintln!("verify p50: baseline {baseline:?}, under attack {attacked:?}, {refused} refused");
    assert_eq!(s.get("/health", None).await.status, 200);
    s.shutdown().await;
}
