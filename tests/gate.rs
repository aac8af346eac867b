//! The gate stays closed: every request an outside tester found that reached
//! the refund handler undecided (path spellings, number spellings, other
//! media types, duplicate keys, method overrides, a truncated policy file)
//! is refused or decided, through a real proxy in front of a recording
//! upstream, with the shipped refund policy.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use support::{Gated, APP_KEY, DELETE_POLICY};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The shipped refund policy and [`DELETE_POLICY`] in front of a mock
/// upstream.
async fn env() -> Gated {
    let shipped = support::shipped_refunds();
    Gated::start(
        &[("refunds.toml", &shipped), ("orders.toml", DELETE_POLICY)],
        |_| {},
    )
    .await
}

/// A refund body whose claims and evidence agree with `amount`.
fn refund(amount: Value) -> String {
    json!({"amount": amount, "currency": "USD",
        "justification": {
            "claims": [{"text": "Order 1 was charged $6,000.00.", "citations": [{"source_id": "inv"}]}],
            "evidence": [{"source_id": "inv", "text": "Invoice INV-1 for order 1: amount charged $6,000.00."}]}})
    .to_string()
}

/// Sends one request as raw bytes (so odd paths go out as written) and
/// returns the status line's code and the whole answer.
async fn raw(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut req = format!("{method} {target} HTTP/1.1\r\nhost: shop.example\r\nconnection: close\r\ncontent-length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = sock.write_all(req.as_bytes()).await;
    let mut buf = Vec::new();
    let read = sock.read_to_end(&mut buf);
    let _ = tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("an answer in time");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response to {target}: {text:?}"));
    (status, text)
}

/// POSTs a JSON refund body to `/api/orders/1/refunds` through the proxy.
async fn post_refund(e: &Gated, body: &str) -> (u16, String) {
    raw(
        e.proxy_addr(),
        "POST",
        "/api/orders/1/refunds",
        &[JSON],
        body,
    )
    .await
}

fn body_json(answer: &str) -> Value {
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    serde_json::from_str(body).unwrap_or(Value::Null)
}

const JSON: (&str, &str) = ("content-type", "application/json");

/// (row of the table, method, target, headers, body, status, reason)
type Row = (
    &'static str,
    &'static str,
    String,
    Vec<(&'static str, &'static str)>,
    String,
    u16,
    &'static str,
);

/// Every row of the tester's table, replayed as written: refused or decided,
/// never forwarded undecided, and a refusal of a request that could reach
/// the gated route is on record.
#[tokio::test]
async fn every_attack_row_is_refused_or_decided() {
    let e = env().await;
    // (row, method, target, headers, body, status, reason)
    let six_k = refund(json!(6000));
    let mut rows: Vec<Row> = Vec::new();
    for path in [
        "/api\\orders\\1\\refunds",
        "/api/orders/1/refunds;jsessionid=abc",
        "/api;x=1/orders/1/refunds",
        "/api/x/..;/orders/1/refunds",
        "/api%5Corders%5C1%5Crefunds",
        "/api/orders/1/refunds.",
        "/api/orders/1/refunds%20",
        "/api/orders/1/refunds.json",
        "/api/orders/1%2Frefunds",
        "/api/orders/1/%2572efunds",
        "/api/orders/1/%EF%BD%92efunds",
        "/api/orders/%EF%BC%91/refunds",
    ] {
        rows.push((
            "C1",
            "POST",
            path.to_string(),
            vec![JSON],
            six_k.clone(),
            400,
            "ambiguous_path",
        ));
    }
    for amount in [
        json!("6_000"),
        json!("0x1770"),
        json!([6000]),
        json!("\u{ff16}\u{ff10}\u{ff10}\u{ff10}"),
        json!("$6000"),
        json!("Infinity"),
        json!("6000"),
    ] {
        rows.push((
            "C2",
            "POST",
            "/api/orders/1/refunds".into(),
            vec![JSON],
            refund(amount),
            403,
            "param_type_mismatch",
        ));
    }
    let mut d3: Value = serde_json::from_str(&refund(json!(100))).unwrap();
    d3["x"] = json!("&amount=6000&");
    for headers in [
        vec![("content-type", "application/x-www-form-urlencoded")],
        vec![],
        vec![(
            "content-type",
            "application/json; x=application/x-www-form-urlencoded",
        )],
    ] {
        rows.push((
            "D3",
            "POST",
            "/api/orders/1/refunds".into(),
            headers,
            d3.to_string(),
            415,
            "unsupported_content_type",
        ));
    }
    // Another spelling of `amount` next to it: other case, padded, twice.
    for first in [
        r#"{"AMOUNT":6000,"#,
        r#"{" amount":6000,"#,
        r#"{"amount":6000,"#,
    ] {
        rows.push((
            "D4",
            "POST",
            "/api/orders/1/refunds".into(),
            vec![JSON],
            refund(json!(100)).replacen('{', first, 1),
            400,
            "ambiguous_body",
        ));
    }
    for (target, headers) in [
        ("/api/orders/1", vec![("x-http-method-override", "DELETE")]),
        ("/api/orders/1", vec![("x-http-method", "DELETE")]),
        ("/api/orders/1", vec![("x-method-override", "DELETE")]),
        ("/api/orders/1?_method=DELETE", vec![]),
        (
            "/api/orders/1",
            vec![("content-type", "application/x-www-form-urlencoded")],
        ),
    ] {
        let body = if headers.iter().any(|(k, _)| *k == "content-type") {
            "_method=DELETE".to_string()
        } else {
            String::new()
        };
        rows.push((
            "D5",
            "POST",
            target.to_string(),
            headers,
            body,
            400,
            "method_override",
        ));
    }
    rows.push((
        "D5",
        "POST",
        "/api/orders/1".into(),
        vec![JSON],
        r#"{"_method":"DELETE"}"#.into(),
        400,
        "method_override",
    ));
    // Row 5 of attack round 3: an upstream that parses JSON whatever the
    // media type (Flask's `get_json(force=True)`) honours `_method` in a
    // body labelled otherwise, or not labelled at all.
    for headers in [
        vec![("content-type", "text/plain")],
        vec![],
        vec![("content-type", "application/octet-stream")],
    ] {
        rows.push((
            "R3.5",
            "POST",
            "/api/orders/1".into(),
            headers,
            " \n{\"_method\":\"DELETE\"}".into(),
            400,
            "method_override",
        ));
    }
    // A compressed body is bytes the gate cannot read and an upstream may
    // decompress (Express's body parsers do), on either kind of path.
    rows.push((
        "R3.5",
        "POST",
        "/api/orders/1".into(),
        vec![JSON, ("content-encoding", "gzip")],
        "compressed bytes".into(),
        400,
        "method_override",
    ));
    rows.push((
        "R3.5",
        "POST",
        "/api/orders/1/refunds".into(),
        vec![JSON, ("content-encoding", "gzip")],
        "compressed bytes".into(),
        415,
        "unsupported_content_type",
    ));
    rows.push((
        "D5",
        "POST",
        "/api/orders/1/refunds".into(),
        vec![JSON],
        refund(json!(100)).replacen('{', r#"{"_method":"PUT","#, 1),
        400,
        "method_override",
    ));
    rows.push((
        "path header",
        "POST",
        "/api/orders/1/notes".into(),
        vec![JSON, ("x-original-url", "/api/orders/1/refunds")],
        six_k.clone(),
        400,
        "ambiguous_path",
    ));
    rows.push((
        "json",
        "POST",
        "/api/orders/1/refunds".into(),
        vec![JSON],
        "{not json".into(),
        400,
        "policy_violation",
    ));

    let mut failures = Vec::new();
    for (row, method, target, headers, body, status, reason) in &rows {
        let before = e.up.count();
        let (got, answer) = raw(e.proxy_addr(), method, target, headers, body).await;
        let j = body_json(&answer);
        let forwarded = e.up.count() != before;
        let ok = got == *status && j["reason"] == *reason && !forwarded;
        if !ok {
            failures.push(format!(
                "{row} {method} {target}: got {got} {} (forwarded: {forwarded}), want {status} {reason}",
                j["reason"]
            ));
            continue;
        }
        // Refusals of a request that could reach a gated route are decisions
        // on record.
        let record = answer
            .lines()
            .find_map(|l| l.strip_prefix("x-verdict-record-id: "))
            .map(str::to_string);
        let Some(record) = record else {
            failures.push(format!("{row} {method} {target}: no record id"));
            continue;
        };
        let r = e.s.get(&format!("/v2/audit/{record}"), Some(APP_KEY)).await;
        if r.status != 200 || r.json()["reason"] != *reason || r.json()["decision"] != "deny" {
            failures.push(format!("{row} {target}: record {record}: {}", r.text()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows leaked:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );

    // The same refund, spelled plainly, is decided (denied: above 5000), and
    // the answer and the record say which rules fired.
    let (got, answer) = post_refund(&e, &six_k).await;
    let rules = body_json(&answer)["rules"].clone();
    assert!(
        rules.as_array().is_some_and(|r| r
            .iter()
            .any(|m| m.as_str().unwrap_or("").contains("handled by finance"))),
        "{answer}"
    );
    let record = answer
        .lines()
        .find_map(|l| l.strip_prefix("x-verdict-record-id: "))
        .unwrap()
        .to_string();
    let r = e.s.get(&format!("/v2/audit/{record}"), Some(APP_KEY)).await;
    assert!(
        r.json()["detail"]["rules"]
            .as_array()
            .is_some_and(|r| !r.is_empty()),
        "{}",
        r.text()
    );
    assert_eq!(
        (got, body_json(&answer)["reason"].clone()),
        (403, json!("policy_violation")),
        "{answer}"
    );
    assert_eq!(e.up.count(), 0, "{:?}", e.up.calls());
}

/// A refund the evidence supports, spelled plainly, still goes through; a
/// declared suffix makes `.json` part of the route.
#[tokio::test]
async fn plain_requests_still_pass() {
    let e = env().await;
    let ok = json!({"amount": 100, "currency": "USD",
        "justification": {
            "claims": [{"text": "Order 1 was charged $100.00.", "citations": [{"source_id": "inv"}]}],
            "evidence": [{"source_id": "inv", "text": "Invoice INV-1 for order 1: amount charged $100.00."}]}})
    .to_string();
    let (got, answer) = raw(
        e.proxy_addr(),
        "POST",
        "/api/orders/1/refunds",
        &[("content-type", "application/json; charset=utf-8")],
        &ok,
    )
    .await;
    assert_eq!(got, 200, "{answer}");
    assert_eq!(e.up.count(), 1);
    assert_eq!(e.up.calls()[0].headers["x-verdict-decision"], "allow");
    // $100 of evidence does not justify a refund of 450.
    let more = ok.replace("\"amount\":100", "\"amount\":450");
    let (got, answer) = post_refund(&e, &more).await;
    assert_eq!(
        (got, body_json(&answer)["reason"].clone()),
        (403, json!("unbound_param")),
        "{answer}"
    );
    // Unmatched routes, odd or not, pass through untouched.
    let (got, _) = raw(e.proxy_addr(), "GET", "/api/orders/1", &[], "").await;
    assert_eq!(got, 200);
    assert_eq!(e.up.count(), 2);
    let (got, _) = raw(e.proxy_addr(), "GET", "/shop/%EF%BD%92efunds", &[], "").await;
    assert_eq!(got, 200);
    assert_eq!(e.up.count(), 3);
    // A JSON body to a path gated under another method is read for
    // `_method`, and forwarded as sent when it has none.
    let note = r#"{"note":"gift wrap","method":"card"}"#;
    let (got, _) = raw(e.proxy_addr(), "POST", "/api/orders/1", &[JSON], note).await;
    assert_eq!(got, 200);
    assert_eq!(e.up.count(), 4);
    assert_eq!(&e.up.calls()[3].body[..], note.as_bytes());
    // So is a body of any other media type, and one that is no JSON
    // object goes through as sent.
    let text = ("content-type", "text/plain");
    let (got, _) = raw(e.proxy_addr(), "POST", "/api/orders/1", &[text], note).await;
    assert_eq!(got, 200);
    let (got, _) = raw(
        e.proxy_addr(),
        "POST",
        "/api/orders/1",
        &[text],
        "_method DELETE",
    )
    .await;
    assert_eq!(got, 200);
    assert_eq!(e.up.count(), 6);
    assert_eq!(&e.up.calls()[5].body[..], b"_method DELETE");
    // An upload larger than limits.max_body_bytes streams through: only
    // its first bytes are read, to see that it is no JSON object.
    let upload = "x".repeat(3 << 20);
    let (got, _) = raw(e.proxy_addr(), "PUT", "/api/orders/1", &[text], &upload).await;
    assert_eq!(got, 200);
    assert_eq!(e.up.count(), 7);
    assert_eq!(e.up.calls()[6].body.len(), upload.len());
}

/// Waits (up to 10 s) until `/health/detailed` reports the policies as
/// `status`.
async fn policies_status(e: &Gated, status: &str) {
    let what = format!("policies {status}");
    e.s.health_until(&what, Duration::from_secs(10), |h| {
        h["components"]["policies"]["status"] == status
    })
    .await;
}

/// Deleting the pinned refund policy, or truncating it, keeps the gate:
/// the reload is refused and audited, and a 6000 refund is still denied.
#[tokio::test]
async fn a_deleted_or_truncated_policy_keeps_the_gate() {
    let e = env().await;
    let file = e.s.path("policies/refunds.toml");
    let six_k = refund(json!(6000));
    for edit in ["delete", "truncate"] {
        match edit {
            "delete" => std::fs::remove_file(&file).unwrap(),
            _ => std::fs::write(&file, "").unwrap(),
        }
        // Past the debounce and the settle wait: the refused reload shows.
        policies_status(&e, "degraded").await;
        let (got, answer) = post_refund(&e, &six_k).await;
        assert_eq!(got, 403, "{edit}: {answer}");
        assert_eq!(e.up.count(), 0, "{edit}");
        let h = e.s.get("/health/detailed", None).await.json();
        assert_eq!(
            h["components"]["policies"]["status"], "degraded",
            "{edit}: {h}"
        );
        assert!(
            h["components"]["policies"]["last_error"]
                .as_str()
                .unwrap_or("")
                .contains("refunds.toml")
                || h["components"]["policies"]["last_error"]
                    .as_str()
                    .unwrap_or("")
                    .contains("pinned"),
            "{edit}: {h}"
        );
        std::fs::write(&file, support::shipped_refunds()).unwrap();
        policies_status(&e, "ok").await;
    }
}

/// A policy edit done as truncate-then-write, 20 times while requests flow:
/// no refund that both the old and the new set deny is ever forwarded.
#[tokio::test]
async fn truncate_then_write_never_opens_the_gate() {
    let e = env().await;
    let file = e.s.path("policies/refunds.toml");
    let shipped = support::shipped_refunds();
    // The new set moves the review threshold; both deny 6000.
    let edited = shipped.replace("value = 500", "value = 400");
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let mut load = Vec::new();
    for _ in 0..4 {
        let (stop, sent, proxy) = (stop.clone(), sent.clone(), e.proxy_addr());
        let body = refund(json!(6000));
        load.push(tokio::spawn(async move {
            // Bounded: at most 2 000 requests per task, and the edits below
            // end the loop well before that.
            for _ in 0..2_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let (got, _) = raw(proxy, "POST", "/api/orders/1/refunds", &[JSON], &body).await;
                assert_ne!(got, 200, "a 6000 refund was forwarded");
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for i in 0..20 {
        let text = if i % 2 == 0 { &edited } else { &shipped };
        let mut f = std::fs::File::create(&file).unwrap(); // truncates
        tokio::time::sleep(Duration::from_millis(30)).await;
        let (head, tail) = text.split_at(text.len() / 2);
        std::io::Write::write_all(&mut f, head.as_bytes()).unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        std::io::Write::write_all(&mut f, tail.as_bytes()).unwrap();
        drop(f);
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    assert!(sent.load(Ordering::Relaxed) > 20, "the load ran");
    assert_eq!(e.up.count(), 0, "{:?}", e.up.calls());
}

/// D6: a second client sending the same held request with other credentials
/// gets its own review, never the first client's; the same client retrying
/// joins its own.
#[tokio::test]
async fn held_calls_stay_per_client() {
    let shipped =
        support::shipped_refunds().replace("hold_timeout = \"30s\"", "hold_timeout = \"100ms\"");
    let e = Gated::start(&[("refunds.toml", &shipped)], |_| {}).await;
    let proxy = e.proxy_addr();
    let body = json!({"amount": 750, "currency": "USD",
        "justification": {
            "claims": [{"text": "Order 2 was charged $750.00.", "citations": [{"source_id": "inv"}]}],
            "evidence": [{"source_id": "inv", "text": "Invoice INV-2 for order 2: amount charged $750.00."}]}})
    .to_string();
    let hold = |auth: &'static str| {
        let body = body.clone();
        async move {
            let (status, answer) = raw(
                proxy,
                "POST",
                "/api/orders/2/refunds",
                &[JSON, ("authorization", auth)],
                &body,
            )
            .await;
            assert_eq!(status, 202, "{answer}");
            let j = body_json(&answer);
            assert_eq!(
                j["rules"],
                json!(["refunds above 500 need a second pair of eyes"]),
                "{answer}"
            );
            j["review_id"].as_str().unwrap().to_string()
        }
    };
    let alice = hold("Bearer alice-token").await;
    let mallory = hold("Bearer mallory-token").await;
    assert_ne!(alice, mallory, "another client joined alice's review");
    assert_eq!(hold("Bearer alice-token").await, alice, "a retry joins");
    assert_eq!(e.up.count(), 0);
}
