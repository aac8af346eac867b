//! The reverse proxy against a mock upstream on loopback: allow, deny, hold
//! and review, pass-through (streaming and HTTP/2), failures, extraction, and
//! an audit record behind every forwarded call.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use support::{Gated, RefundPolicy, TestServer, APP_KEY, DAMAGED, INVOICE_77_BLENDER, REVIEW_KEY};

/// The refund route held for review above 500, denied without a customer
/// header or on the fax channel; `hold` is its hold timeout.
pub(crate) fn policy(hold: &str) -> String {
    RefundPolicy::new("strict")
        .review_over(500)
        .rule(
            "customer",
            "absent",
            None,
            "deny",
            Some("a refund needs a customer id"),
        )
        .rule("channel", "eq", Some("\"fax\""), "deny", None)
        .param("customer", "header:X-Customer-Id")
        .param("channel", "body:/meta/a~1b")
        .hold(hold)
        .build()
}

async fn env_with(hold: &str, edit: impl FnOnce(&mut verdict::config::Config)) -> Gated {
    Gated::start(&[("refunds.toml", &policy(hold))], |c| {
        c.proxy.response_timeout = Duration::from_secs(1);
        edit(c);
    })
    .await
}

async fn env(hold: &str) -> Gated {
    env_with(hold, |_| {}).await
}

pub(crate) fn refund_body(amount: u64, claim: &str) -> String {
    // Deliberately odd spacing: the forwarded bytes must be these bytes.
    format!(
        "{{ \"amount\": {amount},  \"claims\": [{}], \"evidence\": [{{\"source_id\":\"inv\",\"text\":{}}}] }}",
        serde_json::to_string(claim).unwrap(),
        serde_json::to_string(INVOICE_77_BLENDER).unwrap()
    )
}

const JSON: (&str, &str) = ("content-type", "application/json");

/// POSTs `body` to the refund route on order 77 with these headers only.
async fn post_refund(e: &Gated, headers: &[(&str, &str)], body: impl Into<Bytes>) -> support::Resp {
    support::call(
        &e.proxy,
        Method::POST,
        "/api/orders/77/refunds",
        headers,
        body,
    )
    .await
}

/// A refund by customer C-9 through the proxy; returns the answer and the
/// bytes sent.
async fn refund(e: &Gated, amount: u64, claim: &str) -> (support::Resp, String) {
    let body = refund_body(amount, claim);
    let r = post_refund(
        e,
        &[
            JSON,
            ("x-customer-id", "C-9"),
            ("x-verdict-decision", "allow"),
        ],
        body.clone(),
    )
    .await;
    (r, body)
}

async fn wait_for(what: &str, f: impl FnMut() -> bool) {
    support::wait_for(what, Duration::from_secs(10), f).await
}

async fn approve(e: &Gated, id: &str) -> support::Resp {
    e.s.resolve(id, "approve", "ops@example.com", Some(REVIEW_KEY))
        .await
}

#[tokio::test]
async fn allow_forwards_byte_identical_with_decision_headers() {
    let e = env("1s").await;
    let (r, body) = refund(&e, 100, DAMAGED).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["path"], "/api/orders/77/refunds");
    let calls = e.up.calls();
    assert_eq!(calls.len(), 1);
    let c = &calls[0];
    assert_eq!(c.body, Bytes::from(body));
    assert_eq!(c.headers["x-verdict-decision"], "allow");
    let record_id = c.headers["x-verdict-record-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(c.headers.get("x-request-id").is_some());
    assert_eq!(c.headers["x-forwarded-for"], "127.0.0.1");
    assert_eq!(c.headers["x-forwarded-proto"], "http");
    assert!(c.headers.get("x-forwarded-host").is_some());
    assert_eq!(c.headers["x-customer-id"], "C-9");
    // The caller sees the decision and its record too.
    assert_eq!(r.header("x-verdict-decision"), Some("allow"));
    assert_eq!(r.header("x-verdict-record-id"), Some(record_id.as_str()));
    // The record behind the forward exists, with the route and the decision.
    let rec =
        e.s.get(&format!("/v2/audit/{record_id}"), Some(REVIEW_KEY))
            .await;
    assert_eq!(rec.status, 200);
    let rec = rec.json();
    assert_eq!(
        (rec["decision"].as_str(), rec["route"].as_str()),
        (Some("allow"), Some("create-refund"))
    );
    assert_eq!(rec["action"]["params"]["order_id"], "77");
    assert_eq!(rec["action"]["params"]["customer"], "C-9");
    // The call's stages are timed once each, for the breakdown in /metrics.
    let metrics = e.s.get("/metrics", None).await.text();
    for series in [
        r#"verdict_proxy_gated_stage_seconds_count{stage="body"} 1"#,
        r#"verdict_proxy_gated_stage_seconds_count{stage="input"} 1"#,
        r#"verdict_proxy_gated_stage_seconds_count{stage="forward"} 1"#,
        r#"verdict_decision_stage_seconds_count{source="proxy",stage="evaluate"} 1"#,
        r#"verdict_decision_stage_seconds_count{source="proxy",stage="engine"} 1"#,
        r#"verdict_decision_stage_seconds_count{source="proxy",stage="record"} 1"#,
    ] {
        assert!(
            metrics.lines().any(|l| l == series),
            "{series} in {metrics}"
        );
    }
    e.s.shutdown().await;
}

#[tokio::test]
async fn deny_never_reaches_the_upstream() {
    let e = env("1s").await;
    let (r, _) = refund(&e, 100, "The customer was charged $400 for the blender.").await;
    assert_eq!(r.status, 403, "{}", r.text());
    let j = r.json();
    assert_eq!(j["error"]["code"], "denied");
    assert_eq!(j["decision"], "deny");
    assert_eq!(j["reason"], "unsupported_claims");
    assert!(j["record_id"].is_string() && j["request_id"].is_string());
    // Header extraction is case-insensitive, and a missing header is absent.
    let r = post_refund(&e, &[JSON], refund_body(100, DAMAGED)).await;
    assert_eq!(
        (r.status, r.json()["reason"].as_str()),
        (403, Some("policy_violation"))
    );
    // A JSON pointer with an escaped '/' (`~1`) reaches the rules.
    let body = refund_body(100, DAMAGED).replacen('{', r#"{"meta":{"a/b":"fax"},"#, 1);
    let r = post_refund(&e, &[JSON, ("X-CUSTOMER-ID", "C-9")], body).await;
    assert_eq!(
        (r.status, r.json()["reason"].as_str()),
        (403, Some("policy_violation")),
        "{}",
        r.text()
    );
    // Not JSON on a route that reads the body: 400, not forwarded.
    let r = post_refund(&e, &[JSON], "not json").await;
    assert_eq!(r.status, 400);
    assert_eq!(e.up.count(), 0);
    e.s.shutdown().await;
}

#[tokio::test]
async fn hold_then_approve_in_time_returns_the_upstream_answer() {
    let e = env("10s").await;
    let e = std::sync::Arc::new(e);
    let e2 = e.clone();
    let held = tokio::spawn(async move { refund(&e2, 900, DAMAGED).await.0 });
    let id = support::eventually("the pending review", Duration::from_secs(10), || async {
        let list =
            e.s.get("/v2/reviews?status=pending", Some(REVIEW_KEY))
                .await
                .json();
        match list["reviews"].as_array().and_then(|a| a.first()) {
            Some(r) => Ok(r["review_id"].as_str().unwrap().to_string()),
            None => Err(list),
        }
    })
    .await;
    assert_eq!(e.up.count(), 0, "nothing is forwarded before the approval");
    let a = approve(&e, &id).await;
    assert_eq!(a.status, 200, "{}", a.text());
    let r = held.await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["path"], "/api/orders/77/refunds");
    assert_eq!(e.up.count(), 1);
    let call = &e.up.calls()[0];
    assert_eq!(call.headers["x-verdict-review-id"], id.as_str());
    let g0 = e.s.review(&id, Some(REVIEW_KEY)).await.json();
    assert_eq!(
        call.headers["x-verdict-record-id"],
        g0["record_id"].as_str().unwrap()
    );
    let g = e.s.review(&id, Some(REVIEW_KEY)).await.json();
    assert_eq!(g["status"], "approved");
    assert_eq!(g["forward"]["upstream_status"], 200, "{g}");
}

#[tokio::test]
async fn hold_timeout_then_approve_forwards_exactly_once_and_reject_never() {
    let e = env("300ms").await;
    let t0 = Instant::now();
    let (r, body) = refund(&e, 900, DAMAGED).await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert!(t0.elapsed() >= Duration::from_millis(290));
    let j = r.json();
    assert_eq!(j["status"], "pending");
    let id = j["review_id"].as_str().unwrap().to_string();
    assert_eq!(j["poll"], format!("/v2/reviews/{id}"));
    assert_eq!(e.up.count(), 0);
    // An app key cannot approve (the review scope is required).
    let r = e.s.resolve(&id, "approve", "me", Some(APP_KEY)).await;
    r.assert_error(403, "forbidden");
    assert_eq!(approve(&e, &id).await.status, 200);
    wait_for("the background forward", || e.up.count() == 1).await;
    assert_eq!(e.up.calls()[0].body, Bytes::from(body));
    approve(&e, &id).await.assert_error(409, "conflict");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(e.up.count(), 1, "exactly once");
    let g = e.s.review(&id, Some(REVIEW_KEY)).await.json();
    assert_eq!(g["forward"]["state"], "done", "{g}");

    // Reject: never forwarded.
    let (r, _) = refund(&e, 800, DAMAGED).await;
    let id2 = r.json()["review_id"].as_str().unwrap().to_string();
    let rj =
        e.s.post_json(
            &format!("/v2/reviews/{id2}/reject"),
            r#"{"reviewer":"ops","note":"no"}"#,
            Some(REVIEW_KEY),
        )
        .await;
    assert_eq!(rj.status, 200);
    assert_eq!(rj.json()["status"], "rejected");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(e.up.count(), 1);
    e.s.get("/v2/reviews/nope", Some(REVIEW_KEY))
        .await
        .assert_error(404, "not_found");
    e.s.resolve(&id2, "approve", "", Some(REVIEW_KEY))
        .await
        .assert_error(422, "invalid_request");
    e.s.shutdown().await;
}

/// What fired travels with the decision: the 403 and 202 bodies, the
/// review and the decision's audit record carry the rule messages, and the
/// review and its record carry one request_hash, which the review checks
/// again before it forwards.
#[tokio::test]
async fn held_and_denied_calls_carry_their_rules_and_one_request_hash() {
    let e = env("200ms").await;
    // The record keeps each rule as {param, effect, message}.
    let messages = |rec: &Value| -> Value {
        rec["detail"]["rules"]
            .as_array()
            .map(|a| a.iter().map(|r| r["message"].clone()).collect())
            .unwrap_or_default()
    };
    // Denied by a rule with a message (no customer header): 403 and record.
    let r = post_refund(&e, &[JSON], refund_body(100, DAMAGED)).await;
    assert_eq!(r.status, 403, "{}", r.text());
    let j = r.json();
    assert_eq!(
        j["rules"],
        serde_json::json!(["a refund needs a customer id"])
    );
    let rec =
        e.s.get(
            &format!("/v2/audit/{}", j["record_id"].as_str().unwrap()),
            Some(REVIEW_KEY),
        )
        .await
        .json();
    assert_eq!(messages(&rec), j["rules"], "{rec}");
    assert!(rec["request_hash"].as_str().unwrap().starts_with("sha256:"));

    // Held by a rule: the 202, the review and the record agree.
    let (r, _) = refund(&e, 900, DAMAGED).await;
    assert_eq!(r.status, 202, "{}", r.text());
    let j = r.json();
    let rules = j["rules"].clone();
    assert_eq!(rules, serde_json::json!(["amount gt 500"]), "{j}");
    let id = j["review_id"].as_str().unwrap().to_string();
    let review = e.s.review(&id, Some(REVIEW_KEY)).await.json();
    assert_eq!(review["rules"], rules, "{review}");
    let record_id = review["record_id"].as_str().unwrap().to_string();
    let rec =
        e.s.get(&format!("/v2/audit/{record_id}"), Some(REVIEW_KEY))
            .await
            .json();
    assert_eq!(messages(&rec), rules, "{rec}");
    let hash = review["request"]["hash"].as_str().unwrap().to_string();
    assert!(hash.starts_with("sha256:") && hash.len() == 71, "{hash}");
    assert_eq!(rec["request_hash"], hash.as_str(), "{rec}");

    // The forward (which checks the held bytes against that hash) happens,
    // and the upstream learns the decision record the approval released.
    let a = approve(&e, &id).await;
    assert_eq!(a.status, 200, "{}", a.text());
    wait_for("the background forward", || e.up.count() == 1).await;
    assert_eq!(
        e.up.calls()[0].headers["x-verdict-record-id"],
        record_id.as_str()
    );
    let review = e.s.review(&id, Some(REVIEW_KEY)).await.json();
    assert_eq!(review["forward"]["state"], "done", "{review}");
    e.s.shutdown().await;
}

/// A client that gives up during a hold and sends the same call again joins
/// the pending review instead of opening a second one, so approving it
/// forwards the refund once. A different body is a different call.
#[tokio::test]
async fn a_retried_held_call_joins_its_pending_review_and_forwards_once() {
    let e = env("200ms").await;
    let claim = DAMAGED;
    let (r1, body) = refund(&e, 900, claim).await;
    assert_eq!(r1.status, 202, "{}", r1.text());
    let id = r1.json()["review_id"].as_str().unwrap().to_string();
    let (r2, _) = refund(&e, 900, claim).await;
    assert_eq!(r2.status, 202, "{}", r2.text());
    assert_eq!(r2.json()["review_id"], id.as_str(), "the retry joined");
    let (r3, _) = refund(&e, 901, claim).await;
    let other = r3.json()["review_id"].as_str().unwrap().to_string();
    assert_ne!(other, id, "a different amount is a different call");
    let listed =
        e.s.get("/v2/reviews?status=pending", Some(REVIEW_KEY))
            .await
            .json();
    let n = listed["reviews"].as_array().map_or(0, Vec::len);
    assert_eq!(n, 2, "{listed}");

    assert_eq!(approve(&e, &id).await.status, 200);
    wait_for("the background forward", || e.up.count() == 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(e.up.count(), 1, "exactly once");
    assert_eq!(e.up.calls()[0].body, Bytes::from(body));
    // Once resolved, the same call again is a new hold.
    let (r4, _) = refund(&e, 900, claim).await;
    assert_eq!(r4.status, 202);
    assert_ne!(r4.json()["review_id"], id.as_str());
    e.s.shutdown().await;
}

/// Approvals racing on one review: one wins, the rest get 409, and the log
/// gains exactly what a single approval adds (no record for a loser).
#[tokio::test]
async fn racing_approvals_resolve_once_and_audit_once() {
    let e = env("100ms").await;
    let audit = e.s.app().audit.clone();
    let claim = DAMAGED;
    let mut deltas = Vec::new();
    for (amount, racers) in [(900u64, 1usize), (901, 8)] {
        let (r, _) = refund(&e, amount, claim).await;
        assert_eq!(r.status, 202, "{}", r.text());
        let id = r.json()["review_id"].as_str().unwrap().to_string();
        let forwarded = e.up.count();
        let before = audit.health().size;
        let mut tasks = Vec::new();
        for _ in 0..racers {
            let url = e.s.url(&format!("/v2/reviews/{id}/approve"));
            tasks.push(tokio::spawn(async move {
                let req = Request::post(url)
                    .header("authorization", format!("Bearer {REVIEW_KEY}"))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(br#"{"reviewer":"ops"}"#)))
                    .unwrap();
                support::client()
                    .request(req)
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            }));
        }
        let mut codes = Vec::new();
        for t in tasks {
            codes.push(t.await.unwrap());
        }
        codes.sort_unstable();
        assert_eq!(codes.iter().filter(|&&c| c == 200).count(), 1, "{codes:?}");
        assert!(codes.iter().all(|&c| c == 200 || c == 409), "{codes:?}");
        wait_for("the forward", || e.up.count() == forwarded + 1).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        deltas.push(audit.health().size - before);
    }
    assert_eq!(deltas[0], deltas[1], "a losing approval left a record");
    e.s.shutdown().await;
}

#[tokio::test]
async fn a_pending_review_survives_a_restart_and_forwards_once() {
    let e = env("200ms").await;
    let (r, _) = refund(&e, 900, DAMAGED).await;
    assert_eq!(r.status, 202);
    let id = r.json()["review_id"].as_str().unwrap().to_string();
    let Gated { s, up, .. } = e;
    let dir = s.shutdown().await;
    let mut config = support::test_config(&dir);
    config.proxy.upstream = Some(up.url());
    let running = verdict::app::start(config).await.unwrap();
    let s = TestServer::attach(running, dir);
    let g = s.review(&id, Some(REVIEW_KEY)).await.json();
    assert_eq!(g["status"], "pending", "{g}");
    let a = s.resolve(&id, "approve", "ops", Some(REVIEW_KEY)).await;
    assert_eq!(a.status, 200, "{}", a.text());
    wait_for("the forward after restart", || up.count() == 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.count(), 1);
    s.shutdown().await;
}

#[tokio::test]
async fn unmatched_routes_stream_through_including_http2() {
    let e = env("1s").await;
    let r = e.get("/api/orders/77?x=1").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["path"], "/api/orders/77?x=1");
    // Streaming: the first chunk arrives before the upstream sends the rest.
    let client = support::client();
    let resp = client
        .request(
            Request::get(format!("{}/stream", e.proxy))
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    let mut body = resp.into_body();
    let first = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("the first chunk is not held back")
        .unwrap()
        .unwrap();
    assert_eq!(
        first.into_data().unwrap(),
        Bytes::from_static(b"first-chunk;")
    );
    e.up.release_stream();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(rest.len(), 8 << 20);
    // HTTP/2 (h2c prior knowledge) from the client.
    let h2: hyper_util::client::legacy::Client<_, Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .build_http();
    let resp = h2
        .request(
            Request::get(format!("{}/h2-path", e.proxy))
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    e.s.shutdown().await;
}

#[tokio::test]
async fn upstream_down_is_502_slow_is_504() {
    let e = env("1s").await;
    let r = e.get("/slow").await;
    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "upstream_timeout");
    e.s.shutdown().await;

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let e = env_with("1s", |c| {
        c.proxy.upstream = Some(format!("http://127.0.0.1:{port}"))
    })
    .await;
    let r = e.get("/anything").await;
    assert_eq!(r.status, 502, "{}", r.text());
    let (r, _) = refund(&e, 100, DAMAGED).await;
    assert_eq!(r.status, 502, "{}", r.text());
    let h = e.s.get("/health/detailed", None).await.json();
    assert_eq!(h["components"]["upstream"]["status"], "degraded", "{h}");
    e.s.shutdown().await;
}

#[tokio::test]
async fn audit_failure_fails_closed_with_no_upstream_call() {
    let e = env("1s").await;
    e.s.app().audit.inject_write_failure(true);
    let (r, _) = refund(&e, 100, DAMAGED).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "unavailable");
    assert_eq!(e.up.count(), 0);
    // Unmatched traffic is not gated and still flows.
    assert_eq!(e.get("/free").await.status, 200);
    e.s.app().audit.inject_write_failure(false);
    let (r, _) = refund(&e, 100, DAMAGED).await;
    assert_eq!(r.status, 200);
    e.s.shutdown().await;
}

#[tokio::test]
async fn oversized_bodies_are_413_and_unmatched_deny_blocks() {
    let e = env_with("1s", |c| {
        c.limits.max_body_bytes = 1024;
        c.proxy.unmatched = verdict::config::Unmatched::Deny;
    })
    .await;
    let (r, _) = refund(&e, 100, &"word ".repeat(400)).await;
    assert_eq!(r.status, 413, "{}", r.text());
    let r = e.get("/elsewhere").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"]["code"], "denied");
    assert_eq!(e.up.count(), 0);
    e.s.shutdown().await;
}

#[tokio::test]
async fn every_forwarded_call_has_an_audit_record() {
    let e = env("1s").await;
    for i in 0..10 {
        let claim = if i % 3 == 0 {
            "The customer was charged $999 for the blender."
        } else {
            DAMAGED
        };
        refund(&e, 100, claim).await;
    }
    let calls = e.up.calls();
    assert!(calls.len() >= 6, "{}", calls.len());
    for c in calls {
        let id = c.headers["x-verdict-record-id"]
            .to_str()
            .unwrap()
            .to_string();
        let rec: Value =
            e.s.get(&format!("/v2/audit/{id}"), Some(REVIEW_KEY))
                .await
                .json();
        assert_eq!(rec["decision"], "allow", "{rec}");
    }
    e.s.shutdown().await;
}

#[tokio::test]
async fn https_upstream_with_a_configured_ca() {
    // The upstream is another verdict serving its API over TLS.
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();
    let upstream = TestServer::start_with(|c| {
        c.api.tls = Some(verdict::config::TlsFiles {
            cert: cert_path.clone(),
            key: key_path.clone(),
        })
    })
    .await;
    let url = format!("https://localhost:{}", upstream.addr.port());

    let (u, ca) = (url.clone(), cert_path.clone());
    let s = TestServer::start_with(move |c| {
        c.proxy.upstream = Some(u);
        c.proxy.ca_file = Some(ca);
    })
    .await;
    let health = |s: &TestServer| {
        let proxy = format!("http://{}", s.proxy_addr());
        async move { support::call(&proxy, Method::GET, "/health", &[], Bytes::new()).await }
    };
    let r = health(&s).await;
    assert_eq!(r.status, 200);
    assert_eq!(&r.body[..], br#"{"status":"ok"}"#);
    s.shutdown().await;

    // Without the CA the self-signed upstream is not trusted: 502.
    let s = TestServer::start_with(move |c| c.proxy.upstream = Some(url)).await;
    assert_eq!(health(&s).await.status, 502);
    s.shutdown().await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn failure_mode_open_forwards_when_the_gate_cannot_decide() {
    let policy = policy("1s").replace(
        "on_review = \"hold\"",
        "on_review = \"hold\"\nfailure_mode = \"open\"",
    );
    let e = Gated::start(&[("refunds.toml", &policy)], |_| {}).await;
    e.s.app().audit.inject_write_failure(true);
    let (r, _) = refund(&e, 100, "The customer was charged $400 for the blender.").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(e.up.calls()[0].headers["x-verdict-decision"], "unavailable");
    e.s.app().audit.inject_write_failure(false);
    e.s.shutdown().await;
}

/// The address a server spawned with [`support::spawn_binary_with`] logged
/// for its proxy.
fn proxy_addr(log: &std::sync::Arc<std::sync::Mutex<Vec<u8>>>) -> String {
    support::logged_addr(log, "proxy listening")
}

/// A pass-through request is the tax every call pays: at the default level
/// it writes no log line (it still answers with its request id); at debug it
/// writes one.
#[tokio::test]
async fn a_pass_through_logs_nothing_at_info_and_one_line_at_debug() {
    let up = support::MockUpstream::start().await;
    for (filter, logged) in [("info", false), ("debug", true)] {
        let dir = tempfile::tempdir().unwrap();
        let (mut child, _api, log) = support::spawn_binary_with(
            env!("CARGO_BIN_EXE_verdict"),
            dir.path(),
            filter,
            &["--proxy-listen", "127.0.0.1:0", "--upstream", &up.url()],
            &[],
        );
        let base = format!("http://{}", proxy_addr(&log));
        let id = format!("pass-through-{filter}");
        let r = support::call(
            &base,
            Method::GET,
            "/api/items/42",
            &[("x-request-id", &id)],
            "",
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-request-id"), Some(id.as_str()));
        support::terminate(&mut child, &log);
        let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(&id)).collect();
        assert_eq!(!lines.is_empty(), logged, "RUST_LOG={filter}: {lines:?}");
        if logged {
            assert!(
                lines.iter().any(|l| l.contains("passed through")),
                "{lines:?}"
            );
        }
    }
}

/// The `proxied` and `request done` lines carry the request id among their
/// own fields, not only inside their span, so a log query on the line's
/// fields finds every line of one request.
#[tokio::test]
async fn request_lines_carry_their_request_id() {
    let up = support::MockUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("policies")).unwrap();
    std::fs::write(
        dir.path().join("policies/refunds.toml"),
        support::shipped_refunds(),
    )
    .unwrap();
    let (mut child, api, log) = support::spawn_binary_with(
        env!("CARGO_BIN_EXE_verdict"),
        dir.path(),
        "info",
        &["--proxy-listen", "127.0.0.1:0", "--upstream", &up.url()],
        &[],
    );
    let proxy = format!("http://{}", proxy_addr(&log));
    let gated = support::call(
        &proxy,
        Method::POST,
        "/api/orders/1/refunds",
        &[
            ("x-request-id", "id-gated"),
            ("content-type", "application/json"),
        ],
        "{}",
    )
    .await;
    assert_eq!(gated.header("x-request-id"), Some("id-gated"));
    let health = support::call(
        &format!("http://{api}"),
        Method::GET,
        "/health",
        &[("x-request-id", "id-api")],
        "",
    )
    .await;
    assert_eq!(health.status, 200);
    support::terminate(&mut child, &log);
    let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    for (message, id) in [("proxied", "id-gated"), ("request done", "id-api")] {
        let line: Value = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["message"] == message && v["span"]["request_id"] == id)
            .unwrap_or_else(|| panic!("no {message:?} line for {id}: {text}"));
        assert_eq!(line["request_id"], id, "{line}");
    }
}
