//! Foundation: health, metrics, routing errors, request ids, protected mode,
//! and the CLI's start-up refusals.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

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
    let app = s.app().clone();
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
    let app = s.app().clone();
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

/// Without a keys file every loopback caller is anonymous, the gated app
/// included: the review API refuses, so nobody approves their own refund.
#[tokio::test]
async fn reviews_refuse_without_a_keys_file() {
    let s = support::TestServer::start_with(|c| c.keys_file = None).await;
    for (method, path) in [
        (Method::GET, "/v2/reviews"),
        (
            Method::GET,
            "/v2/reviews/00000000-0000-4000-8000-000000000000",
        ),
        (
            Method::POST,
            "/v2/reviews/00000000-0000-4000-8000-000000000000/approve",
        ),
    ] {
        let r = s
            .send(method, path, &[("content-type", "application/json")], "{}")
            .await;
        r.assert_error(403, "forbidden");
        assert!(
            r.text().contains("reviews need a keys file"),
            "{}",
            r.text()
        );
    }
    // The rest of the API still answers without keys on loopback.
    assert_eq!(s.get("/health", None).await.status, 200);
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
    support::assert_exit(&out, 64);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    for (config, named) in [
        (
            "[limits]\nmax_body_byts = 3\n",
            ["c.toml:2:1", "max_body_byts"],
        ),
        // A proxy listener without an upstream would never run: refused,
        // naming both keys.
        (
            "[proxy]\nlisten = \"127.0.0.1:0\"\n",
            ["proxy.listen", "proxy.upstream"],
        ),
    ] {
        std::fs::write(&cfg, config).unwrap();
        let out = support::cli(bin, &["serve", "--config"], &cfg);
        support::assert_exit(&out, 64);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(named.iter().all(|n| err.contains(n)), "{err}");
    }
}

/// `verdict serve --help` says what each flag sets (its config key) and
/// its default.
#[test]
fn serve_help_describes_every_flag_and_its_default() {
    let out = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for want in [
        "--config <CONFIG>",
        "Config file (TOML)",
        "`[api] listen`",
        "[default: 127.0.0.1:8181]",
        "`[proxy] listen`",
        "[default: 127.0.0.1:8080]",
        "`[proxy] upstream`",
        "`[policies] dir`",
        "[default: policies]",
        "`[data] dir`",
        "[default: data]",
        "`[auth] keys_file`",
        "`[log] format`",
        "[default: json]",
    ] {
        assert!(help.contains(want), "{want:?} missing from:\n{help}");
    }
    // Every flag has a description: no option line stands alone.
    let lines: Vec<&str> = help.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.trim_start().starts_with("--") && !l.contains("--help") {
            let described = l.split_once(">  ").is_some()
                || lines.get(i + 1).is_some_and(|n| !n.trim().is_empty());
            assert!(described, "{l:?} has no description:\n{help}");
        }
    }
}

/// JSON log lines print values, never Rust's Debug form (`Some("…")`), and
/// latencies rounded to microseconds. The proxy's pass-through line is at
/// debug, so the proxy logs at debug here.
#[tokio::test]
async fn json_logs_hold_plain_values_and_rounded_latencies() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr, log) = support::spawn_binary_with(
        env!("CARGO_BIN_EXE_verdict"),
        dir.path(),
        "info,verdict::proxy=debug",
        &[
            "--upstream",
            "http://127.0.0.1:9",
            "--proxy-listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    let base = format!("http://{addr}");
    assert_eq!(
        support::call(&base, Method::GET, "/health", &[], "")
            .await
            .status,
        200
    );
    let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    let proxy = text
        .lines()
        .filter(|l| l.contains("proxy listening"))
        .find_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            v["addr"].as_str().map(str::to_string)
        })
        .expect("the proxy logs its address");
    // An unmatched call to an upstream that is not there: 502, logged.
    let r = support::call(&format!("http://{proxy}"), Method::GET, "/x", &[], "").await;
    assert_eq!(r.status, 502);
    support::terminate(&mut child, &log);
    let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    let mut latencies = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(
            !line.contains("Some(") && !line.contains("None"),
            "Debug formatting: {line}"
        );
        if let Some(l) = v.get("latency_ms") {
            let shown = l.to_string();
            let decimals = shown.split_once('.').map_or(0, |(_, d)| d.len());
            assert!(
                l.is_number() && decimals <= 3,
                "latency not rounded: {line}"
            );
            latencies += 1;
        }
        if v["message"] == "proxy listening" {
            assert_eq!(v["upstream"], "http://127.0.0.1:9", "{line}");
        }
    }
    assert!(latencies >= 2, "no request lines with latencies: {text}");
}

/// With the process's temp dir unwritable (a read-only root filesystem),
/// decisions are still made and audited: SQLite keeps its temporary data in
/// memory, and nothing else writes there.
#[tokio::test]
async fn an_unwritable_temp_dir_does_not_stop_decisions_or_the_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = unwritable_dir(&dir);
    std::fs::create_dir_all(dir.path().join("policies")).unwrap();
    std::fs::write(
        dir.path().join("policies").join("refunds.toml"),
        "[[action]]\ntype = \"refund.create\"\nrequirements = { decision_mode = \"strict\", citations = \"optional\" }\n",
    )
    .unwrap();
    let envs = [("TMPDIR", tmp.as_path()), ("SQLITE_TMPDIR", tmp.as_path())];
    let bin = env!("CARGO_BIN_EXE_verdict");
    let (mut child, addr, log) = support::spawn_binary_with(bin, dir.path(), "info", &[], &envs);
    let base = format!("http://{addr}");
    let auth = format!("Bearer {APP_KEY}");
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    let body = serde_json::json!({
        "action": {"type": "refund.create", "params": {"order_id": "7781", "amount": 100}},
        "claims": ["A refund of $100 was approved for order 7781."],
        "sources": [{"source_id": "ticket", "text": "On 2024-03-03 the store manager approved a refund of $100 for order 7781."}],
        "response": {"mode": "verbose"},
    })
    .to_string();
    let r = support::call(&base, Method::POST, "/v2/authorize", &headers, body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    assert_eq!(j["decision"], "allow", "{j}");
    let id = j["audit"]["record_id"]
        .as_str()
        .expect("a receipt")
        .to_string();
    for path in [format!("/v2/audit/{id}"), format!("/v2/audit/{id}/proof")] {
        let r = support::call(&base, Method::GET, &path, &headers, "").await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    let r = support::call(&base, Method::GET, "/ready", &[], "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    support::terminate(&mut child, &log);
    // The offline check of the whole log runs there too.
    let out = Command::new(bin)
        .args(["audit", "verify", "--data-dir"])
        .arg(dir.path().join("data"))
        .envs(envs)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&log.lock().unwrap())
    );
}

/// A directory this process cannot create files in: a fresh one with mode
/// 0555, or, for root (whom file modes do not stop), a `/proc` directory,
/// which nobody can create files in and which SQLite's own probe
/// (`access(W_OK)`) still accepts, so SQLite would really try to use it.
fn unwritable_dir(dir: &tempfile::TempDir) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let ro = dir.path().join("read-only-tmp");
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(ro.join("probe"), "x").is_err() {
        return ro;
    }
    let _ = std::fs::remove_file(ro.join("probe"));
    let proc_dir = std::path::PathBuf::from("/proc/self/fdinfo");
    assert!(std::fs::write(proc_dir.join("probe"), "x").is_err());
    proc_dir
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
    let out = support::cli(bin, &["audit", "rotate-key", "--data-dir"], &data);
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
    // The lock goes with the server's file handle. Other tests of this
    // binary spawn processes in parallel, and a child forked while the
    // server ran shares that handle until it execs, so the release may take
    // a moment to be seen: retry for up to 3 s.
    let rotate = || {
        support::cli(
            bin,
            &["audit", "rotate-key", "--data-dir"],
            &dir.path().join("data"),
        )
    };
    let every = std::time::Duration::from_millis(100);
    let within = std::time::Duration::from_secs(3);
    let out = support::eventually_every("the data dir lock released", within, every, || {
        let out = rotate();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        std::future::ready(
            if !out.status.success() && err.contains("held by another verdict process") {
                Err(err)
            } else {
                Ok(out)
            },
        )
    })
    .await;
    support::assert_exit(&out, 0);
}
