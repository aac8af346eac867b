//! Security properties end to end: extracted values never become headers,
//! tenants cannot see each other's jobs, records, proofs or reviews, only a
//! `review` key resolves a held call, keys never reach the logs (the real
//! binary at debug level), and evidence uris cannot leave their fences
//! (`..`, symlinks, sibling directories, redirects, link-local and metadata
//! addresses, names that resolve to them).
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::time::Duration;

use http::Method;
use serde_json::{json, Value};
use support::{
    Gated, RefundPolicy, TestServer, APP_KEY, DAMAGED, INVOICE_77, OTHER_KEY, REVIEW_KEY,
    VERIFY_ONLY_KEY,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CLAIM: &str = "Refunds are issued within 14 days of delivery.";

/// The refund route, held above 500, extracting a body note, a query value
/// and a header.
async fn env() -> Gated {
    let policy = RefundPolicy::new("balanced")
        .review_over(500)
        .param("note", "body:/note")
        .param("reference", "query:ref")
        .param("agent", "header:x-agent")
        .hold("50ms")
        .build();
    Gated::start(&[("refunds.toml", &policy)], |_| {}).await
}

async fn call(
    base: &str,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: String,
) -> support::Resp {
    let answer = support::call(base, method, path, headers, body);
    support::within(Duration::from_secs(15), path, answer).await
}

fn refund(amount: u64, note: &str) -> String {
    json!({"amount": amount, "note": note, "claims": [DAMAGED], "evidence": [{"id": "inv", "text": INVOICE_77}]}).to_string()
}

/// A body field, a query value, a path segment and a header all full of
/// CR/LF: they reach the audit record as data, and the forwarded request
/// gains no header and no second request.
#[tokio::test]
async fn extracted_crlf_never_becomes_a_header() {
    let e = env().await;
    let note = "ok\r\nX-Injected: body\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: evil\r\n\r\n";
    let paths = [
        "/api/orders/77/refunds?ref=a%0d%0aX-Injected:%20query",
        "/api/orders/77%0d%0aX-Injected:%20path/refunds",
        "/api/orders/77/refunds?ref=%0aX-Injected%3a%20lf",
    ];
    for path in paths {
        let before = e.up.count();
        let r = call(
            &e.proxy,
            Method::POST,
            path,
            &[
                ("content-type", "application/json"),
                ("x-agent", "a: b; X-Injected: header"),
            ],
            refund(5, note),
        )
        .await;
        if path.contains("%0d%0aX-Injected:%20path") {
            // A control character in the path is refused before routing, on
            // record, and never forwarded.
            assert_eq!(r.status, 400, "{path}: {}", r.text());
            assert_eq!(r.json()["reason"], "ambiguous_path", "{path}");
            assert!(r.header("x-verdict-record-id").is_some(), "{path}");
            assert_eq!(e.up.count(), before, "{path}: refused, not forwarded");
            continue;
        }
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(
            e.up.count(),
            before + 1,
            "{path}: exactly one upstream request"
        );
        let c = e.up.calls().pop().unwrap();
        assert!(
            c.headers.get("x-injected").is_none(),
            "{path}: {:?}",
            c.headers
        );
        assert!(!c.path.contains("smuggled"), "{}", c.path);
        assert_eq!(c.path, path, "the path is forwarded as sent");
        // Only the decision headers were added to what the client sent.
        let added: Vec<&str> = c
            .headers
            .keys()
            .map(|k| k.as_str())
            .filter(|k| {
                k.starts_with("x-verdict") || k.starts_with("x-forwarded") || *k == "x-request-id"
            })
            .collect();
        assert_eq!(added.len(), 6, "{added:?}");
        // The record keeps the values as data.
        let id = c.headers["x-verdict-record-id"]
            .to_str()
            .unwrap()
            .to_string();
        let rec =
            e.s.get(&format!("/v2/audit/{id}"), Some(REVIEW_KEY))
                .await
                .json();
        assert_eq!(rec["action"]["params"]["note"], note, "{rec}");
        assert_eq!(
            rec["action"]["params"]["agent"], "a: b; X-Injected: header",
            "{rec}"
        );
    }
    // Nothing ever arrived at the smuggled path.
    assert!(e.up.calls().iter().all(|c| !c.path.contains("smuggled")));
    // A request id the caller cannot be trusted with is replaced, not echoed
    // upstream.
    let long = "r".repeat(200);
    let r = call(
        &e.proxy,
        Method::POST,
        "/api/orders/77/refunds",
        &[
            ("content-type", "application/json"),
            ("x-request-id", &long),
            ("x-verdict-record-id", "forged"),
            ("x-verdict-review-id", "forged"),
            ("x-verdict-decision", "allow"),
        ],
        refund(5, "fine"),
    )
    .await;
    assert_eq!(r.status, 200);
    let c = e.up.calls().pop().unwrap();
    let forwarded = c.headers["x-request-id"].to_str().unwrap();
    assert!(uuid::Uuid::parse_str(forwarded).is_ok(), "{forwarded}");
    // Caller-sent x-verdict-* headers never reach the upstream.
    let record = c.headers["x-verdict-record-id"].to_str().unwrap();
    assert!(uuid::Uuid::parse_str(record).is_ok(), "{record}");
    assert_eq!(c.headers.get_all("x-verdict-record-id").iter().count(), 1);
    assert_eq!(c.headers.get_all("x-verdict-decision").iter().count(), 1);
    assert!(
        c.headers.get("x-verdict-review-id").is_none(),
        "{:?}",
        c.headers
    );
    e.s.shutdown().await;
}

/// OTHER_KEY is a second tenant: it sees none of APP_KEY's jobs (404, as
/// for an unknown id) and shares no idempotency keys with it. Audit records
/// and proofs need the `audit` scope (docs/api.md): a key without it gets 403
/// for every id, its own records included, and `audit` keys see everything.
#[tokio::test]
async fn tenants_cannot_read_each_other() {
    let s = TestServer::start().await;
    let authz = json!({"action": {"type": "refund.create", "params": {"amount": 5}},
        "claims": [CLAIM], "sources": [{"id": "s", "text": CLAIM}],
        "requirements": {"citations": "optional"}, "response": {"mode": "verbose"}})
    .to_string();
    let mine = s.post_json("/v2/authorize", &authz, Some(APP_KEY)).await;
    assert_eq!(mine.status, 200, "{}", mine.text());
    let my_record = mine.json()["audit"]["record_id"]
        .as_str()
        .unwrap()
        .to_string();
    let theirs = s.post_json("/v2/authorize", &authz, Some(OTHER_KEY)).await;
    let their_record = theirs.json()["audit"]["record_id"]
        .as_str()
        .unwrap()
        .to_string();

    let batch =
        json!({"jobs": [{"claims": [CLAIM], "sources": [{"id": "s", "text": CLAIM}]}]}).to_string();
    let submit = |key: &'static str, idem: &'static str, body: String| {
        let s = &s;
        async move {
            let idem = [("idempotency-key", idem)];
            s.post_json_with("/v1/verify-claims-batch", body, Some(key), &idem)
                .await
        }
    };
    let a = submit(APP_KEY, "shared-key", batch.clone()).await;
    assert_eq!(a.status, 202, "{}", a.text());
    let my_job = a.json()["job_id"].as_str().unwrap().to_string();
    // The same Idempotency-Key from another tenant is another job, and a
    // different body under it is no conflict.
    let b = submit(OTHER_KEY, "shared-key", batch.clone()).await;
    assert_eq!(b.status, 202, "{}", b.text());
    assert_ne!(b.json()["job_id"].as_str().unwrap(), my_job);
    let c = submit(OTHER_KEY, "shared-key", batch.replace("14 days", "15 days")).await;
    assert_eq!(
        c.status,
        409,
        "same key, same tenant, other body: {}",
        c.text()
    );

    // Without the audit scope every id is the same 403: another tenant's
    // record, the key's own record, and an id that does not exist.
    let unknown = uuid::Uuid::new_v4().to_string();
    for key in [OTHER_KEY, VERIFY_ONLY_KEY] {
        for id in [&my_record, &their_record, &unknown] {
            for path in [format!("/v2/audit/{id}"), format!("/v2/audit/{id}/proof")] {
                s.get(&path, Some(key)).await.assert_error(403, "forbidden");
            }
        }
    }
    s.get(&format!("/v2/jobs/{my_job}"), Some(OTHER_KEY))
        .await
        .assert_error(404, "not_found");
    // With it, an unknown id is a 404.
    s.get(&format!("/v2/audit/{unknown}"), Some(REVIEW_KEY))
        .await
        .assert_error(404, "not_found");
    // Owners see their own jobs; an audit key sees everyone's records, and
    // every job even without the batch scope (REVIEW_KEY: review, audit).
    for key in [APP_KEY, REVIEW_KEY] {
        let r = s.get(&format!("/v2/jobs/{my_job}"), Some(key)).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    s.get(&format!("/v2/jobs/{my_job}"), Some(VERIFY_ONLY_KEY))
        .await
        .assert_error(403, "forbidden");
    for key in [APP_KEY, REVIEW_KEY] {
        for id in [&my_record, &their_record] {
            for path in [format!("/v2/audit/{id}"), format!("/v2/audit/{id}/proof")] {
                assert_eq!(s.get(&path, Some(key)).await.status, 200, "{path}");
            }
        }
    }
    // Reviews need the review scope: an app key cannot even list them.
    for key in [APP_KEY, OTHER_KEY] {
        s.get("/v2/reviews", Some(key))
            .await
            .assert_error(403, "forbidden");
    }
    s.shutdown().await;
}

/// A held call can only be resolved by a `review` key: the app whose call
/// it is (or any other app key) gets 403 and the call stays held.
#[tokio::test]
async fn only_review_keys_resolve_held_calls() {
    let e = env().await;
    let r = call(
        &e.proxy,
        Method::POST,
        "/api/orders/77/refunds",
        &[("content-type", "application/json")],
        refund(900, "big"),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.text());
    let id = r.json()["review_id"].as_str().unwrap().to_string();
    for key in [APP_KEY, OTHER_KEY, VERIFY_ONLY_KEY] {
        for action in ["approve", "reject"] {
            e.s.resolve(&id, action, "me", Some(key))
                .await
                .assert_error(403, "forbidden");
        }
        e.s.review(&id, Some(key))
            .await
            .assert_error(403, "forbidden");
    }
    let r = e.s.resolve(&id, "approve", "me", None).await;
    r.assert_error(401, "unauthorized");
    let g = e.s.review(&id, Some(REVIEW_KEY)).await.json();
    assert_eq!(g["status"], "pending", "{g}");
    assert_eq!(e.up.count(), 0);
    let a = e.s.resolve(&id, "approve", "ops", Some(REVIEW_KEY)).await;
    assert_eq!(a.status, 200, "{}", a.text());
    e.s.shutdown().await;
}

/// The real binary at debug level: bearer keys, right or wrong, never reach
/// stdout or stderr, in any form.
#[tokio::test]
async fn keys_never_reach_the_logs() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr, log) =
        support::spawn_binary_logged(env!("CARGO_BIN_EXE_verdict"), dir.path(), "debug");
    let base = format!("http://{addr}");
    const WRONG: &str = "wrong-secret-key-7f3a9c0e55d1";
    let body = json!({"claims": [CLAIM], "sources": [{"id": "s", "text": CLAIM}]}).to_string();
    let mut statuses = vec![];
    for (key, path) in [
        (APP_KEY, "/v2/verify"),
        (WRONG, "/v2/verify"),
        (VERIFY_ONLY_KEY, "/v2/authorize"),
        (REVIEW_KEY, "/v2/reviews/nope"),
        (OTHER_KEY, "/v2/nowhere"),
    ] {
        let auth = format!("Bearer {key}");
        let method = if path.starts_with("/v2/reviews") {
            Method::GET
        } else {
            Method::POST
        };
        let r = call(
            &base,
            method,
            path,
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            body.clone(),
        )
        .await;
        statuses.push(r.status);
    }
    // Malformed authorization headers are not echoed either.
    let basic = format!("Basic {}", b64(&format!("user:{APP_KEY}")));
    let r = call(
        &base,
        Method::POST,
        "/v2/verify",
        &[
            ("authorization", &basic),
            ("content-type", "application/json"),
        ],
        body.clone(),
    )
    .await;
    statuses.push(r.status);
    let odd = format!("Bearer  {WRONG} extra");
    let r = call(
        &base,
        Method::POST,
        "/v2/verify",
        &[
            ("authorization", &odd),
            ("content-type", "application/json"),
        ],
        "{bad".into(),
    )
    .await;
    statuses.push(r.status);
    assert_eq!(statuses, vec![200, 401, 403, 404, 404, 401, 401]);
    // A request hyper refuses while parsing, carrying a key: its connection
    // error is logged at debug level, without the request's bytes.
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let raw = format!("POST /v2/verify HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {WRONG}\r\ncontent-length: {APP_KEY}\r\n\r\n");
    sock.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 400"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    support::wait_for(
        "a debug line for the refused request",
        Duration::from_secs(10),
        || contains(&log.lock().unwrap(), b"connection ended with an error"),
    )
    .await;

    // Graceful stop (SIGTERM), so that every buffered line is written.
    support::terminate(&mut child, &log);
    let bytes = log.lock().unwrap().clone();
    let text = String::from_utf8_lossy(&bytes);
    // The log is there and at debug level, so its silence means something.
    assert!(text.matches("request done").count() >= 7, "{text}");
    assert!(text.contains("\"DEBUG\""), "not at debug level: {text}");
    for secret in [APP_KEY, WRONG, VERIFY_ONLY_KEY, REVIEW_KEY, OTHER_KEY] {
        let forms = [
            secret.to_string(),
            b64(secret),
            b64(&format!("user:{secret}")),
            hex::encode(secret.as_bytes()),
            secret.chars().rev().collect::<String>(),
        ];
        for form in forms {
            assert!(
                !contains(&bytes, form.as_bytes()),
                "{form} appears in the log"
            );
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

/// A loopback server that answers `/evidence` with [`CLAIM`] and redirects
/// `/to?<target>` to the percent-decoded target.
async fn redirector() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        for _ in 0..200 {
            let Ok((mut sock, _)) = listener.accept().await else {
                break;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut n = 0;
                while n < buf.len() {
                    match sock.read(&mut buf[n..]).await {
                        Ok(0) | Err(_) => break,
                        Ok(m) => n += m,
                    }
                    if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                let target = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let resp = if let Some(to) = target.strip_prefix("/to?") {
                    let to = to.replace("%3A", ":").replace("%2F", "/");
                    format!("HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                } else {
                    format!("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{CLAIM}", CLAIM.len())
                };
                let _ = sock.write_all(resp.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (addr, task)
}

/// Evidence uris stay inside `evidence.roots` and `evidence.allow_origins`:
/// every escape below would read a file or page that fully supports the
/// claim, so a leak shows up as `supported`.
#[tokio::test]
async fn evidence_uris_cannot_escape_their_fences() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    let sibling = base.path().join("root-evil");
    let outside = base.path().join("outside");
    for d in [&root, &sibling, &outside] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(root.join("policy.txt"), CLAIM).unwrap();
    std::fs::write(sibling.join("secret.txt"), CLAIM).unwrap();
    std::fs::write(outside.join("secret.txt"), CLAIM).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("file-link.txt")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("dir-link")).unwrap();
    std::fs::create_dir_all(root.join("sub")).unwrap();

    let (redir, task) = redirector().await;
    let port = redir.port();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let origins = vec![
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
        // 169.254.169.254 written as one number: a hostname to the
        // allowlist, the metadata address once resolved.
        format!("http://2852039166:{port}"),
    ];
    let r2 = root.clone();
    let s = TestServer::start_with(move |c| {
        c.evidence.roots = vec![r2];
        c.evidence.allow_origins = origins;
        c.evidence.fetch_timeout = Duration::from_millis(500);
    })
    .await;
    let root_s = root.display().to_string();
    let to = |target: &str| format!("http://127.0.0.1:{port}/to?{target}");
    let cases: Vec<(String, &str)> = vec![
        // Controls: inside the fences.
        (format!("file://{root_s}/policy.txt"), "supported"),
        (format!("file://localhost{root_s}/policy.txt"), "supported"),
        (format!("http://127.0.0.1:{port}/evidence"), "supported"),
        (format!("http://localhost:{port}/evidence"), "supported"),
        (
            to(&format!("http://127.0.0.1:{port}/evidence")),
            "supported",
        ),
        // Files.
        (
            format!("file://{root_s}/../outside/secret.txt"),
            "unsupported",
        ),
        (
            format!("file://{root_s}/sub/../../outside/secret.txt"),
            "unsupported",
        ),
        (
            format!("file://{root_s}/%2e%2e/outside/secret.txt"),
            "unsupported",
        ),
        (
            format!("file://{root_s}/sub/%2E%2E/%2E%2E/outside/secret.txt"),
            "unsupported",
        ),
        (format!("file://{root_s}/file-link.txt"), "unsupported"),
        (
            format!("file://{root_s}/dir-link/secret.txt"),
            "unsupported",
        ),
        (
            format!("file://{}/secret.txt", sibling.display()),
            "unsupported",
        ),
        (format!("file://{root_s}/policy.txt%00.png"), "unsupported"),
        (format!("file:{root_s}/policy.txt"), "unsupported"),
        (
            format!("file://evil.example{root_s}/policy.txt"),
            "unsupported",
        ),
        // Addresses that are not on the allowlist.
        (
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "unsupported",
        ),
        ("http://[fe80::1]/".to_string(), "unsupported"),
        (
            format!("http://127.0.0.1:{closed_port}/evidence"),
            "unsupported",
        ),
        (format!("http://[::1]:{port}/evidence"), "unsupported"),
        (format!("http://127.0.0.2:{port}/evidence"), "unsupported"),
        (format!("gopher://127.0.0.1:{port}/evidence"), "unsupported"),
        // A name on the allowlist that resolves to the metadata address.
        (format!("http://2852039166:{port}/evidence"), "unsupported"),
        // Redirects out of the allowlist.
        (
            to("http://169.254.169.254/latest/meta-data/"),
            "unsupported",
        ),
        (to("http://[fe80::1]/x"), "unsupported"),
        (
            to(&format!("http://127.0.0.1:{closed_port}/evidence")),
            "unsupported",
        ),
        (
            to(&format!("http://2852039166:{port}/evidence")),
            "unsupported",
        ),
        (to(&format!("file://{root_s}/policy.txt")), "unsupported"),
        (
            to(&to(&to(&to(&format!("http://127.0.0.1:{port}/evidence"))))),
            "unsupported",
        ),
    ];
    for (uri, want) in &cases {
        let body = json!({"claims": [CLAIM], "sources": [{"source_id": "p", "uri": uri}], "response": {"mode": "verbose"}}).to_string();
        let r = s.post_json("/v2/verify", &body, Some(APP_KEY)).await;
        assert_eq!(r.status, 200, "{uri}: {}", r.text());
        let v: Value = r.json();
        assert_eq!(v["checks"][0]["status"], *want, "{uri}: {v}");
        if *want == "unsupported" {
            let reasons = v["checks"][0]["reasons"].as_array().unwrap();
            assert!(
                reasons.iter().any(|r| r == "source_unavailable"),
                "{uri}: {v}"
            );
        }
    }
    eprintln!("evidence fences: {} uris tried", cases.len());
    task.abort();
    s.shutdown().await;
}
