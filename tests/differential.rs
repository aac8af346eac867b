//! The gate against real upstream frameworks: no gated handler ever runs
//! for a request that verdict did not decide.
//!
//! Two deliberately forgiving upstreams (Starlette under uvicorn, and
//! Express with `method-override`; see `tests/differential/`) route path
//! spellings, method overrides, form bodies, case-variant keys and number
//! spellings the way the most lenient frameworks do, and log every call that
//! reaches their refund or delete handler with the `X-Verdict-Decision`
//! header it carried. A corpus of over 200 requests goes through the proxy in
//! front of each, over raw sockets so that odd spellings and framings go out
//! exactly as written. The test fails if any handler call lacks
//! `x-verdict-decision: allow`, and prints each such call with the request
//! that caused it.
//!
//! `scripts/differential-setup.sh` installs the frameworks (the test runs it;
//! it does nothing when they are installed). Set
//! `VERDICT_SKIP_DIFFERENTIAL=1` to skip on a machine without python3 or npm.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{TestServer, APP_KEY, DELETE_POLICY};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request of the corpus: an id and its exact bytes.
struct Case {
    id: String,
    bytes: Vec<u8>,
}

/// Kills the upstream when the test ends, passed or not.
struct Upstream {
    child: Child,
    port: u16,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_upstream(framework: &str, log: &Path) -> Upstream {
    let port = free_port();
    let root = repo();
    let mut cmd = match framework {
        "starlette" => {
            let mut c = Command::new(root.join("target/differential/venv/bin/python"));
            c.arg(root.join("tests/differential/starlette_app.py"));
            c
        }
        _ => {
            let mut c = Command::new("node");
            c.arg(root.join("tests/differential/express_app.js")).env(
                "NODE_PATH",
                root.join("target/differential/node/node_modules"),
            );
            c
        }
    };
    let child = cmd
        .arg(port.to_string())
        .env("DIFF_LOG", log)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the {framework} upstream: {e}"));
    let up = Upstream { child, port };
    // Bounded: 30 s for the interpreter to start listening.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the {framework} upstream did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    up
}

/// A request with a JSON-ish body and the given extra headers.
fn request(id: &str, method: &str, target: &str, headers: &[(&str, &str)], body: &str) -> Case {
    let mut head = format!(
        "{method} {target} HTTP/1.1\r\nhost: shop.example\r\nx-diff-id: {id}\r\nconnection: close\r\n"
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    Case {
        id: id.to_string(),
        bytes,
    }
}

/// A refund body whose claims agree with 6 000, with `amount` spelled as
/// given.
fn refund(amount: &str) -> String {
    format!(
        r#"{{"amount":{amount},"currency":"USD","justification":{{"claims":[{{"text":"Order 1 was charged $6,000.00.","citations":[{{"source_id":"inv"}}]}}],"evidence":[{{"source_id":"inv","text":"Invoice INV-1 for order 1: amount charged $6,000.00."}}]}}}}"#
    )
}

const JSON: (&str, &str) = ("content-type", "application/json");

fn corpus() -> Vec<Case> {
    let mut out = Vec::new();
    let paths = [
        "/api/orders/1/refunds",
        "/API/ORDERS/1/REFUNDS",
        "/api//orders/1/refunds",
        "/api/orders/1/./refunds",
        "/api/orders/x/../1/refunds",
        "/api/orders/1/%72efunds",
        "/%61pi/orders/1/refunds",
        "/api/orders/1/refunds/",
        "/api\\orders\\1\\refunds",
        "/api/orders/1/refunds;jsessionid=abc",
        "/api;x=1/orders/1/refunds",
        "/api/x/..;/orders/1/refunds",
        "/api%5Corders%5C1%5Crefunds",
        "/api/orders/1/refunds.",
        "/api/orders/1/refunds..",
        "/api/orders/1/refunds%20",
        "/api/orders/1/refunds%09",
        "/api/orders/1/refunds.json",
        "/api/orders/1/REFUNDS.JSON",
        "/api/orders/1/refunds%2Ejson",
        "/api/orders/1%2Frefunds",
        "/api/orders/1/%2572efunds",
        "/api/orders/1/refunds%00",
    ];
    let amounts = [
        "6000",
        r#""6_000""#,
        "[6000]",
        r#""0x1770""#,
        "\"\u{ff16}\u{ff10}\u{ff10}\u{ff10}\"",
        r#"{"value":6000}"#,
    ];
    for (p, path) in paths.iter().enumerate() {
        for (a, amount) in amounts.iter().enumerate() {
            out.push(request(
                &format!("path-{p:02}-amount-{a}"),
                "POST",
                path,
                &[JSON],
                &refund(amount),
            ));
        }
    }
    for (i, amount) in [
        r#""6_000""#,
        r#""0x1770""#,
        "[6000]",
        "\"\u{ff16}\u{ff10}\u{ff10}\u{ff10}\"",
        r#""$6000""#,
        r#""Infinity""#,
        r#""6000""#,
        "6e3",
        "6000.0",
        r#""6,000""#,
        r#"" 6000 ""#,
        "true",
        r#"{"value":6000}"#,
        "-1",
        "0",
    ]
    .iter()
    .enumerate()
    {
        out.push(request(
            &format!("number-{i:02}"),
            "POST",
            "/api/orders/1/refunds",
            &[JSON],
            &refund(amount),
        ));
    }
    let smuggled = refund("100").replacen('{', r#"{"x":"&amount=6000&","#, 1);
    for (i, headers) in [
        vec![("content-type", "application/x-www-form-urlencoded")],
        vec![("content-type", "text/plain")],
        vec![("content-type", "multipart/form-data; boundary=x")],
        vec![],
        vec![JSON, ("content-type", "application/x-www-form-urlencoded")],
        vec![(
            "content-type",
            "application/json, application/x-www-form-urlencoded",
        )],
    ]
    .into_iter()
    .enumerate()
    {
        out.push(request(
            &format!("ctype-{i}-json"),
            "POST",
            "/api/orders/1/refunds",
            &headers,
            &smuggled,
        ));
        out.push(request(
            &format!("ctype-{i}-form"),
            "POST",
            "/api/orders/1/refunds",
            &headers,
            "amount=6000&currency=USD",
        ));
    }
    for (i, prefix) in [
        r#"{"AMOUNT":6000,"amount":100,"#,
        r#"{"amount":100,"amount":6000,"#,
        r#"{"Amount":6000,"#,
        r#"{"amount":100,"aMoUnT":6000,"#,
        r#"{"amount":100,"am\u006fUNT":6000,"#,
        r#"{"amount":6000,"AMOUNT":6000,"#,
    ]
    .iter()
    .enumerate()
    {
        let body = refund("100").replacen(r#"{"amount":100,"#, prefix, 1);
        out.push(request(
            &format!("dup-{i}"),
            "POST",
            "/api/orders/1/refunds",
            &[JSON],
            &body,
        ));
    }
    let dup_nested = refund("6000").replacen(
        r#""justification":{"#,
        r#""justification":{"claims":[],"#,
        1,
    );
    out.push(request(
        "dup-nested",
        "POST",
        "/api/orders/1/refunds",
        &[JSON],
        &dup_nested,
    ));
    for (p, path) in [
        "/api/orders/1",
        "/api/orders/1/",
        "/API/orders/1",
        "/api//orders/1",
    ]
    .iter()
    .enumerate()
    {
        for (h, name) in [
            "x-http-method-override",
            "x-http-method",
            "x-method-override",
        ]
        .iter()
        .enumerate()
        {
            out.push(request(
                &format!("override-{p}-header-{h}"),
                "POST",
                path,
                &[(name, "DELETE")],
                "",
            ));
        }
        out.push(request(
            &format!("override-{p}-query"),
            "POST",
            &format!("{path}?_method=DELETE"),
            &[],
            "",
        ));
        out.push(request(
            &format!("override-{p}-form"),
            "POST",
            path,
            &[("content-type", "application/x-www-form-urlencoded")],
            "_method=DELETE",
        ));
    }
    // Framings a smuggler uses; the proxy must not let a second request
    // through to a gated handler undecided.
    let body = refund("6000");
    let inner = format!(
        "POST /api/orders/1/refunds HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let framings: Vec<(&str, String)> = vec![
        ("cl-te", format!("POST /api/orders/1 HTTP/1.1\r\nhost: x\r\nx-diff-id: smuggle-cl-te\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n{inner}")),
        ("te-cl", format!("POST /api/orders/1 HTTP/1.1\r\nhost: x\r\nx-diff-id: smuggle-te-cl\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n0\r\n\r\n{inner}")),
        ("two-cl", format!("POST /api/orders/1 HTTP/1.1\r\nhost: x\r\nx-diff-id: smuggle-two-cl\r\ncontent-length: 0\r\ncontent-length: {}\r\n\r\n{inner}", inner.len())),
        ("te-list", format!("POST /api/orders/1 HTTP/1.1\r\nhost: x\r\nx-diff-id: smuggle-te-list\r\ntransfer-encoding: chunked, identity\r\n\r\n0\r\n\r\n{inner}")),
        ("obs-fold", format!("POST /api/orders/1 HTTP/1.1\r\nhost: x\r\nx-diff-id: smuggle-obs-fold\r\ncontent-length: 0\r\nx-a: b\r\n c\r\n\r\n{inner}")),
        ("absolute", format!("POST http://shop.example/api/orders/1/refunds HTTP/1.1\r\nhost: x\r\nx-diff-id: smuggle-absolute\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len())),
        ("pipelined", format!("GET /api/orders/1 HTTP/1.1\r\nhost: x\r\nx-diff-id: smuggle-pipelined\r\n\r\n{inner}")),
        ("space-colon", format!("POST /api/orders/1/refunds HTTP/1.1\r\nhost: x\r\nx-diff-id: smuggle-space-colon\r\ncontent-type: application/json\r\ncontent-length : {}\r\n\r\n{body}", body.len())),
    ];
    for (name, raw) in framings {
        out.push(Case {
            id: format!("smuggle-{name}"),
            bytes: raw.into_bytes(),
        });
    }
    // Allowed calls: the gate forwards what the evidence supports.
    let ok = json!({"amount": 100, "currency": "USD",
        "justification": {
            "claims": [{"text": "Order 1 was charged $100.00.", "citations": [{"source_id": "inv"}]}],
            "evidence": [{"source_id": "inv", "text": "Invoice INV-1 for order 1: amount charged $100.00."}]}})
    .to_string();
    out.push(request(
        "allowed-0",
        "POST",
        "/api/orders/1/refunds",
        &[JSON],
        &ok,
    ));
    out.push(request(
        "allowed-1",
        "POST",
        "/api/orders/1/refunds",
        &[("content-type", "application/json; charset=utf-8")],
        &ok,
    ));
    out
}

/// Sends one case and returns the first line of the answer (bounded).
async fn send(addr: SocketAddr, case: &Case) -> String {
    let Ok(Ok(mut sock)) =
        tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr)).await
    else {
        return "connect failed".into();
    };
    let _ = sock.write_all(&case.bytes).await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), sock.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf)
        .lines()
        .next()
        .unwrap_or("(no answer)")
        .to_string()
}

#[tokio::test]
async fn no_gated_handler_runs_undecided() {
    if std::env::var_os("VERDICT_SKIP_DIFFERENTIAL").is_some() {
        eprintln!("VERDICT_SKIP_DIFFERENTIAL is set: the differential test did not run");
        return;
    }
    let setup = Command::new("bash")
        .arg(repo().join("scripts/differential-setup.sh"))
        .status()
        .expect("run scripts/differential-setup.sh");
    assert!(
        setup.success(),
        "scripts/differential-setup.sh failed; set VERDICT_SKIP_DIFFERENTIAL=1 to skip on a machine without python3 and npm"
    );
    let cases = corpus();
    assert!(
        cases.len() >= 200,
        "the corpus has {} requests",
        cases.len()
    );
    let shipped = std::fs::read_to_string(repo().join("policies/refunds.toml")).unwrap();

    let mut offences = Vec::new();
    for framework in ["starlette", "express"] {
        let logdir = tempfile::tempdir().unwrap();
        let log = logdir.path().join("calls.jsonl");
        std::fs::write(&log, "").unwrap();
        let up = start_upstream(framework, &log);
        let url = format!("http://127.0.0.1:{}", up.port);
        let s = TestServer::start_with(|c| {
            std::fs::write(c.policies_dir.join("refunds.toml"), &shipped).unwrap();
            std::fs::write(c.policies_dir.join("orders.toml"), DELETE_POLICY).unwrap();
            c.proxy.upstream = Some(url);
        })
        .await;
        let proxy = s.running.as_ref().unwrap().proxy_addr.unwrap();
        let mut answers = std::collections::HashMap::new();
        for case in &cases {
            answers.insert(case.id.clone(), send(proxy, case).await);
        }
        let text = std::fs::read_to_string(&log).unwrap();
        let calls: Vec<Value> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let allowed = calls.iter().filter(|c| c["decision"] == "allow").count();
        assert!(
            allowed >= 2,
            "{framework}: the allowed refunds never reached the handler: {calls:?}"
        );
        for c in &calls {
            if c["decision"] != "allow" {
                let id = c["tag"].as_str().unwrap_or("?").to_string();
                offences.push(format!(
                    "{framework:<9} {id:<28} verdict answered {:<40} handler {} ran with decision {} and amount {}",
                    answers.get(&id).map_or("?", String::as_str),
                    c["handler"],
                    c["decision"],
                    c["amount"],
                ));
            }
        }
        // Every refused gated request is on record: spot-check one.
        let r = s.get("/v2/audit/nonexistent-id", Some(APP_KEY)).await;
        assert_eq!(r.status, 404);
        s.shutdown().await;
        drop(up);
        eprintln!(
            "{framework}: {} requests, {} handler calls, {allowed} allowed",
            cases.len(),
            calls.len()
        );
    }
    assert!(
        offences.is_empty(),
        "{} gated handler calls ran without an allow decision:\n{}",
        offences.len(),
        offences.join("\n")
    );
}
