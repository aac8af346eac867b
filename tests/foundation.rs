//! Foundation: health, metrics, routing errors, request ids, protected mode,
//! and the CLI's start-up refusals.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

mod support;

use std::process::Command;

use http::Method;
use support::{TestServer, APP_KEY};

#[tokio::test]
async fn health_is_ok_and_detailed_lists_components() {
    let s = TestServer::start().await;
    let r = s.get("/health", None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), serde_json::json!({"status": "ok"}));
    let d = s.get("/health/detailed", None).await.json();
    assert_eq!(d["status"], "ok");
    assert!(d["components"]["auth"]["status"].is_string(), "{d}");
    assert!(d["uptime_s"].is_u64());
    assert!(!d.to_string().contains(support::APP_KEY));
    s.shutdown().await;
}

#[tokio::test]
async fn metrics_are_prometheus_text() {
    let s = TestServer::start().await;
    s.get("/health", None).await;
    let r = s.get("/metrics", None).await;
    assert_eq!(r.status, 200);
    let text = r.text();
    assert!(
        text.contains("# TYPE verdict_http_requests counter"),
        "{text}"
    );
    assert!(
        text.contains(
            r#"verdict_http_requests_total{endpoint="/health",method="GET",status="200"}"#
        ),
        "{text}"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn unknown_path_is_404_and_wrong_method_405_with_allow() {
    let s = TestServer::start().await;
    let r = s.get("/v2/nope", Some(APP_KEY)).await;
    r.assert_error(404, "not_found");
    let r = s.send(Method::DELETE, "/health", &[], "").await;
    r.assert_error(405, "method_not_allowed");
    assert_eq!(r.header("allow"), Some("GET"));
    s.shutdown().await;
}

#[tokio::test]
async fn request_id_is_echoed_or_generated() {
    let s = TestServer::start().await;
    let r = s
        .send(Method::GET, "/health", &[("x-request-id", "req-42")], "")
        .await;
    assert_eq!(r.header("x-request-id"), Some("req-42"));
    let r = s
        .send(
            Method::GET,
            "/nope",
            &[("x-request-id", "bad id with spaces")],
            "",
        )
        .await;
    let id = r.header("x-request-id").expect("generated id").to_string();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
    assert_eq!(r.json()["error"]["request_id"], id.as_str());
    s.shutdown().await;
}

#[tokio::test]
async fn health_turns_503_while_draining() {
    let s = TestServer::start().await;
    let app = s.running.as_ref().expect("running").app.clone();
    app.health.set_draining();
    let r = s.get("/health", None).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["status"], "draining");
    s.shutdown().await;
}

/// Liveness turns when the audit writer is gone for good. Nothing in a
/// running server stops the writer but a panic or `AuditLog::shutdown` (the
/// call a drain makes after the listeners stop); the test makes that call
/// while the listeners still serve, so the process lives on with a log that
/// can never append again: `/health` and `/ready` are 503 and a decision
/// fails closed.
#[tokio::test]
async fn health_turns_503_once_the_audit_writer_has_stopped() {
    let s = TestServer::start().await;
    assert_eq!(s.get("/health", None).await.status, 200);
    let app = s.running.as_ref().expect("running").app.clone();
    app.audit.shutdown().await;
    let r = s.get("/health", None).await;
    assert_eq!(r.status, 503, "{}", r.text());
    let j = r.json();
    assert_eq!(j["status"], "failing", "{j}");
    assert!(
        j["reasons"][0]
            .as_str()
            .is_some_and(|m| m.starts_with("audit: the audit writer has stopped")),
        "{j}"
    );
    let r = s.get("/ready", None).await;
    assert_eq!(r.status, 503, "{}", r.text());
    let d = s.get("/health/detailed", None).await.json();
    assert_eq!(d["components"]["audit"]["status"], "failing", "{d}");
    let body = serde_json::json!({
        "action": {"type": "refund.create", "params": {"amount": 1}},
        "claims": ["A refund was approved."],
        "sources": [{"source_id": "s", "text": "A refund was approved."}],
    })
    .to_string();
    let r = s.post_json("/v2/authorize", &body, Some(APP_KEY)).await;
    r.assert_error(503, "unavailable");
    s.shutdown().await;
}

#[tokio::test]
async fn refuses_a_public_listener_without_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = support::test_config(&dir);
    config.keys_file = None;
    config.api.listen = "0.0.0.0:0".parse().unwrap();
    let err = verdict::app::start(config).await.err().expect("refused");
    assert!(err.to_string().contains("refusing to start"), "{err}");
}

#[test]
fn binary_exits_64_on_a_public_listener_without_keys_or_a_bad_config() {
    let bin = env!("CARGO_BIN_EXE_verdict");
    let out = Command::new(bin)
        .args(["serve", "--api-listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(64),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[limits]\nmax_body_byts = 3\n").unwrap();
    let out = Command::new(bin)
        .args(["serve", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("c.toml:2:1") && err.contains("max_body_byts"),
        "{err}"
    );
}

#[test]
fn keys_new_prints_a_working_entry() {
    let bin = env!("CARGO_BIN_EXE_verdict");
    let out = Command::new(bin)
        .args(["keys", "new", "--name", "ci", "--scopes", "verify,batch"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let token = text
        .split_whitespace()
        .find(|w| w.starts_with("vk_"))
        .expect("a key")
        .to_string();
    let entry = &text[text.find("[[key]]").expect("entry")..];
    assert!(entry.contains(&support::sha(&token)), "{text}");
    let bad = Command::new(bin)
        .args(["keys", "new", "--name", "ci", "--scopes", "fly"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    // A key needs at least one scope: without one it could call only the
    // public endpoints, which need no key.
    for args in [
        vec!["keys", "new", "--name", "ci"],
        vec!["keys", "new", "--name", "ci", "--scopes", ""],
    ] {
        let out = Command::new(bin).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("vk_"),
            "{args:?}"
        );
    }
    // Reserved principal names are a usage error too, and print no key.
    for name in ["proxy", "anonymous", "verdict:x"] {
        let out = Command::new(bin)
            .args(["keys", "new", "--name", name, "--scopes", "audit"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("vk_"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("is reserved"), "{err}");
    }
}

/// One process owns a data dir: `audit rotate-key` and a second server are
/// refused while `serve` runs, naming the holder; after it stops they work.
#[tokio::test]
async fn a_running_server_owns_its_data_dir() {
    let s = support::TestServer::start().await;
    let data = s.path("data");
    let bin = env!("CARGO_BIN_EXE_verdict");
    let out = Command::new(bin)
        .args(["audit", "rotate-key", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("held by another verdict process")
            && err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    let mut second = support::test_config(&s.dir);
    second.data_dir = data.clone();
    let refused = verdict::app::start(second)
        .await
        .err()
        .map(|e| e.to_string());
    assert!(
        refused
            .as_deref()
            .is_some_and(|e| e.contains("held by another verdict process")),
        "{refused:?}"
    );
    let dir = s.shutdown().await;
    let out = Command::new(bin)
        .args(["audit", "rotate-key", "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
