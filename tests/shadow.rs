//! Shadow policies: a second set decided beside the enforced one on live
//! traffic, never enforced. The caller sees the enforced decision; the
//! metric, the log and the audit record show the disagreement; a broken
//! shadow edit keeps the last good shadow set and never touches the
//! enforced one.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{MockUpstream, TestServer, APP_KEY};

/// Strict, refunds above `limit` to review; the enforced set has the
/// route, a shadow set only the action policy.
fn refunds(limit: u64, min_coverage: &'static str, route: bool) -> String {
    let p = support::RefundPolicy::new("strict")
        .min_coverage(Some(min_coverage))
        .rule(
            "amount",
            "gt",
            Some(&limit.to_string()),
            "review",
            Some(&format!("refunds above {limit} need a second pair of eyes")),
        );
    if route { p } else { p.action_only() }.build()
}

const EV: &str = "Invoice 7: amount charged $400.00 for order 7.";

/// The enforced set (refunds above 500 to review, with the route) and
/// `shadow` as the shadow set, in front of `up`.
async fn server(up: &MockUpstream, shadow: String) -> TestServer {
    let url = up.url();
    TestServer::start_with(|c| {
        std::fs::write(
            c.policies_dir.join("refunds.toml"),
            refunds(500, "0.85", true),
        )
        .unwrap();
        let dir = c.policies_dir.parent().unwrap().join("policies-next");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("refunds.toml"), shadow).unwrap();
        c.shadow_policies_dir = Some(dir);
        c.proxy.upstream = Some(url);
    })
    .await
}

async fn authorize(s: &TestServer, amount: u64) -> Value {
    let body = json!({
        "action": {"type": "refund.create", "params": {"order_id": "7", "amount": amount}},
        "claims": [{"text": "Order 7 was charged $400.00."}],
        "sources": [{"source_id": "inv", "text": EV}],
        "response": {"mode": "verbose"},
    });
    let r = s
        .post_json("/v2/authorize", &body.to_string(), Some(APP_KEY))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

async fn record(s: &TestServer, id: &str) -> Value {
    s.get(&format!("/v2/audit/{id}"), Some(APP_KEY))
        .await
        .json()
}

fn disagreements(metrics: &str, route: &str) -> u64 {
    metrics
        .lines()
        .find(|l| {
            l.starts_with("verdict_shadow_disagreements_total{")
                && l.contains(&format!("route=\"{route}\""))
                && l.contains("from=\"allow\"")
                && l.contains("to=\"needs_review\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test]
async fn the_shadow_set_is_decided_beside_and_never_enforced() {
    let up = MockUpstream::start().await;
    // The change being tried: refunds above 300 go to review.
    let s = server(&up, refunds(300, "0.85", false)).await;

    // 400: the enforced set allows, the shadow set would review.
    let j = authorize(&s, 400).await;
    assert_eq!(
        j["decision"], "allow",
        "the caller gets the enforced decision: {j}"
    );
    let rec = record(&s, j["audit"]["record_id"].as_str().unwrap()).await;
    assert_eq!(rec["decision"], "allow");
    let shadow = &rec["detail"]["shadow"];
    assert_eq!(
        (&shadow["decision"], &shadow["reason"]),
        (&json!("needs_review"), &json!("review_required")),
        "{rec}"
    );
    assert!(shadow["revision"].as_str().unwrap().starts_with("sha256:"));
    assert_ne!(shadow["revision"], rec["policy_revision"]);

    // 100: both allow; nothing is recorded about the shadow.
    let j = authorize(&s, 100).await;
    let rec = record(&s, j["audit"]["record_id"].as_str().unwrap()).await;
    assert!(rec["detail"].get("shadow").is_none(), "{rec}");

    // Through the proxy too: forwarded as the enforced set says.
    let proxy = format!("http://{}", s.running.as_ref().unwrap().proxy_addr.unwrap());
    let body = json!({"amount": 400, "claims": ["Order 7 was charged $400.00."],
        "evidence": [{"source_id": "inv", "text": EV}]});
    let r = support::call(
        &proxy,
        http::Method::POST,
        "/api/orders/7/refunds",
        &[("content-type", "application/json")],
        body.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(up.count(), 1);

    let metrics = s.get("/metrics", None).await.text();
    assert_eq!(disagreements(&metrics, "api"), 1, "{metrics}");
    assert_eq!(disagreements(&metrics, "create-refund"), 1, "{metrics}");
    let health = s.get("/health/detailed", None).await.json();
    assert_eq!(
        health["components"]["shadow_policies"]["status"], "ok",
        "{health}"
    );

    // A broken shadow edit keeps the last good shadow set; the enforced
    // set is untouched.
    let shadow_file = s.path("policies-next/refunds.toml");
    std::fs::write(&shadow_file, "[[action]]\ntype = ").unwrap();
    let h = support::eventually(
        "the broken shadow edit to be noticed",
        Duration::from_secs(10),
        || async {
            let h = s.get("/health/detailed", None).await.json();
            if h["components"]["shadow_policies"]["status"] == "degraded" {
                Ok(h)
            } else {
                Err(h)
            }
        },
    )
    .await;
    assert_eq!(h["components"]["policies"]["status"], "ok", "{h}");
    let j = authorize(&s, 400).await;
    assert_eq!(j["decision"], "allow");
    let rec = record(&s, j["audit"]["record_id"].as_str().unwrap()).await;
    assert_eq!(
        rec["detail"]["shadow"]["decision"], "needs_review",
        "the last good shadow set still decides: {rec}"
    );
}

#[tokio::test]
async fn a_shadow_set_that_fails_to_load_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = support::test_config(&dir);
    let shadow = dir.path().join("broken");
    std::fs::create_dir_all(&shadow).unwrap();
    std::fs::write(shadow.join("x.toml"), "[[action]]\ntype = ").unwrap();
    config.shadow_policies_dir = Some(shadow);
    let err = match verdict::app::start(config).await {
        Ok(_) => panic!("started with a broken shadow set"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("policies.shadow_dir") && err.contains("x.toml"),
        "{err}"
    );
}

/// A shadow set with another `min_coverage` reads each claim's status at
/// its own threshold, without verifying the claims again.
#[tokio::test]
async fn a_shadow_threshold_is_read_at_the_shadows_own_line() {
    let up = MockUpstream::start().await;
    let s = server(&up, refunds(500, "0.3", false)).await;
    let body = json!({
        "action": {"type": "refund.create", "params": {"order_id": "7", "amount": 100}},
        "claims": [{"text": "The customer was charged $400.00 for a broken blender that arrived late."}],
        "sources": [{"source_id": "inv", "text": EV}],
        "response": {"mode": "verbose"},
    });
    let j = s
        .post_json("/v2/authorize", &body.to_string(), Some(APP_KEY))
        .await
        .json();
    let coverage = j["diagnostics"][0]["coverage"].as_f64().unwrap();
    assert!(
        (0.3..0.85).contains(&coverage),
        "the claim must sit between the two lines: {j}"
    );
    assert_eq!(j["decision"], "deny", "{j}");
    let rec = record(&s, j["audit"]["record_id"].as_str().unwrap()).await;
    assert_eq!(
        (
            &rec["detail"]["shadow"]["decision"],
            &rec["detail"]["shadow"]["reason"]
        ),
        (&json!("allow"), &json!("coverage_sufficient")),
        "{rec}"
    );
}
