//! Who may resolve a held call and what the held caller learns: four eyes
//! (the key behind a held call cannot resolve it), `review.approvals = N`
//! distinct approvers before one forward, and the caller's own result link.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::time::Duration;

use http::Method;
use serde_json::{json, Value};
use support::{sha, MockUpstream, Resp, TestServer, REVIEW_KEY};

/// Refunds above 500 are held for review (`hold_timeout`).
fn policy(hold: &str) -> String {
    support::RefundPolicy::new("strict")
        .review_over(500)
        .hold(hold)
        .build()
}

/// [`policy`] with `approvals = n` on the action.
fn policy_with_approvals(hold: &str, n: u32) -> String {
    support::RefundPolicy::new("strict")
        .action_line(&format!("approvals = {n}"))
        .review_over(500)
        .hold(hold)
        .build()
}

const SECOND_REVIEWER: &str = "test-second-reviewer-key-0123456789";

async fn env(approvals: u32) -> (TestServer, MockUpstream) {
    env_with(approvals, "").await
}

/// [`env`] with `route_extra` (TOML lines) added to the refund route.
async fn env_with(approvals: u32, route_extra: &str) -> (TestServer, MockUpstream) {
    env_policy(approvals, policy("50ms") + route_extra).await
}

/// A sidecar with `review.approvals = approvals` gating `policy_text`.
async fn env_policy(approvals: u32, policy_text: String) -> (TestServer, MockUpstream) {
    let up = MockUpstream::start().await;
    let url = up.url();
    let s = TestServer::start_with(|c| {
        std::fs::write(c.policies_dir.join("refunds.toml"), &policy_text).unwrap();
        let keys = c.keys_file.clone().unwrap();
        let mut text = std::fs::read_to_string(&keys).unwrap();
        text.push_str(&format!(
            "\n[[key]]\nname = \"second-reviewer\"\nhash = \"{}\"\nscopes = [\"review\"]\n",
            sha(SECOND_REVIEWER)
        ));
        std::fs::write(&keys, text).unwrap();
        c.proxy.upstream = Some(url);
        c.review_approvals = approvals;
    })
    .await;
    (s, up)
}

/// The refund body every held call here sends.
fn refund_body() -> String {
    json!({
        "amount": 900,
        "claims": ["The customer was charged $100.00."],
        "evidence": [{"source_id": "inv", "text": "Invoice 7: amount charged $100.00."}],
    })
    .to_string()
}

/// The refund for order 7 through the proxy with these extra headers.
async fn send_refund(s: &TestServer, headers: &[(&str, &str)]) -> Resp {
    let proxy = format!("http://{}", s.running.as_ref().unwrap().proxy_addr.unwrap());
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    support::call(
        &proxy,
        Method::POST,
        "/api/orders/7/refunds",
        &all,
        refund_body(),
    )
    .await
}

/// A held refund through the proxy, sent with `authorization`; its 202 body.
async fn hold(s: &TestServer, authorization: Option<&str>) -> Value {
    hold_order(s, authorization, 7).await
}

/// The same for another order (an identical call would join the first
/// review).
async fn hold_order(s: &TestServer, authorization: Option<&str>, order: u32) -> Value {
    let proxy = format!("http://{}", s.running.as_ref().unwrap().proxy_addr.unwrap());
    let body = json!({
        "amount": 900,
        "claims": ["The customer was charged $100.00."],
        "evidence": [{"source_id": "inv", "text": "Invoice 7: amount charged $100.00."}],
    })
    .to_string();
    let mut headers = vec![("content-type", "application/json")];
    if let Some(a) = authorization {
        headers.push(("authorization", a));
    }
    let path = format!("/api/orders/{order}/refunds");
    let r = support::call(&proxy, Method::POST, &path, &headers, body).await;
    assert_eq!(r.status, 202, "{}", r.text());
    r.json()
}

async fn resolve(s: &TestServer, id: &str, verb: &str, key: &str) -> Resp {
    s.post_json(
        &format!("/v2/reviews/{id}/{verb}"),
        r#"{"reviewer":"someone","note":"checked"}"#,
        Some(key),
    )
    .await
}

async fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    support::wait_for(what, Duration::from_secs(5), cond).await;
}

#[tokio::test]
async fn the_key_that_made_a_held_call_cannot_resolve_it() {
    let (s, up) = env(1).await;
    let held = hold(&s, Some(&format!("Bearer {REVIEW_KEY}"))).await;
    let id = held["review_id"].as_str().unwrap();
    for verb in ["approve", "reject"] {
        let r = resolve(&s, id, verb, REVIEW_KEY).await;
        r.assert_error(403, "forbidden");
        assert!(r.text().contains("cannot resolve it"), "{}", r.text());
    }
    assert_eq!(up.count(), 0);
    // Nothing was recorded for the refused attempts: another key resolves.
    assert_eq!(
        resolve(&s, id, "approve", SECOND_REVIEWER).await.status,
        200
    );
    wait_until("the forward", || up.count() == 1).await;
    // A call made without a verdict key has no requester.
    let held = hold(&s, Some("Bearer some-customer-token")).await;
    let id = held["review_id"].as_str().unwrap();
    assert_eq!(resolve(&s, id, "approve", REVIEW_KEY).await.status, 200);
}

#[tokio::test]
async fn two_approvals_means_two_people_and_one_forward() {
    let (s, up) = env(2).await;
    let held = hold(&s, None).await;
    let id = held["review_id"].as_str().unwrap();
    let r = resolve(&s, id, "approve", REVIEW_KEY).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (&v["status"], &v["approvals_required"]),
        (&json!("pending"), &json!(2)),
        "{v}"
    );
    assert_eq!(v["approvals"][0]["by"], "reviewer");
    // The same key again does not count twice.
    resolve(&s, id, "approve", REVIEW_KEY)
        .await
        .assert_error(409, "conflict");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(up.count(), 0, "one approval of two forwards nothing");
    let r = resolve(&s, id, "approve", SECOND_REVIEWER).await;
    assert_eq!(r.json()["status"], "approved", "{}", r.text());
    wait_until("the forward", || up.count() == 1).await;
    resolve(&s, id, "approve", SECOND_REVIEWER)
        .await
        .assert_error(409, "conflict");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(up.count(), 1, "exactly once");

    // Both approvals and the final one are on record, in order.
    let page = s
        .get(
            "/v2/audit/records?kind=review_resolution",
            Some(support::APP_KEY),
        )
        .await
        .json();
    let reasons: Vec<&str> = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["review_id"] == id)
        .map(|r| r["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        ["review_approval_recorded", "review_approved"],
        "{page}"
    );

    // One rejection is enough.
    let held = hold_order(&s, None, 8).await;
    let id = held["review_id"].as_str().unwrap();
    assert_eq!(
        resolve(&s, id, "reject", REVIEW_KEY).await.json()["status"],
        "rejected"
    );
}

/// An action's `approvals` overrides `review.approvals` both ways, and
/// the review says how many it needs.
#[tokio::test]
async fn an_action_sets_its_own_number_of_approvals() {
    // The server asks for one; the refund action for two.
    let (s, up) = env_policy(1, policy_with_approvals("50ms", 2)).await;
    let id = hold(&s, None).await["review_id"]
        .as_str()
        .unwrap()
        .to_string();
    let v = resolve(&s, &id, "approve", REVIEW_KEY).await.json();
    assert_eq!(
        (&v["status"], &v["approvals_required"]),
        (&json!("pending"), &json!(2)),
        "{v}"
    );
    let listed = s
        .get(&format!("/v2/reviews/{id}"), Some(REVIEW_KEY))
        .await
        .json();
    assert_eq!(listed["approvals_required"], 2, "{listed}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(up.count(), 0, "one approval of two forwards nothing");
    let v = resolve(&s, &id, "approve", SECOND_REVIEWER).await.json();
    assert_eq!(v["status"], "approved", "{v}");
    wait_until("the forward", || up.count() == 1).await;
    drop(s);

    // The server asks for two; the action for one.
    let (s, up) = env_policy(2, policy_with_approvals("50ms", 1)).await;
    let id = hold(&s, None).await["review_id"]
        .as_str()
        .unwrap()
        .to_string();
    let v = resolve(&s, &id, "approve", REVIEW_KEY).await.json();
    assert_eq!(
        (&v["status"], &v["approvals_required"]),
        (&json!("approved"), &json!(1)),
        "{v}"
    );
    wait_until("the forward", || up.count() == 1).await;
}

#[tokio::test]
async fn the_held_caller_polls_its_result_without_a_key() {
    let (s, up) = env(1).await;
    let held = hold(&s, None).await;
    let id = held["review_id"].as_str().unwrap();
    let url = held["result_url"].as_str().unwrap().to_string();
    assert!(
        url.starts_with(&format!("/v2/reviews/{id}/result/")),
        "{url}"
    );
    let r = s.get(&url, None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    assert_eq!(
        (&j["status"], &j["response"]),
        (&json!("pending"), &Value::Null),
        "{j}"
    );

    // A wrong token, a token of another review, or no token: 404.
    let other = hold_order(&s, None, 8).await;
    let other_token = other["result_url"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap();
    for bad in [
        format!("/v2/reviews/{id}/result/{}", "0".repeat(64)),
        format!("/v2/reviews/{id}/result/{other_token}"),
        format!("/v2/reviews/{id}/result/not-hex"),
        format!("/v2/reviews/nope/result/{other_token}"),
    ] {
        s.get(&bad, None).await.assert_error(404, "not_found");
    }

    assert_eq!(resolve(&s, id, "approve", REVIEW_KEY).await.status, 200);
    wait_until("the forward", || up.count() == 1).await;
    let j = support::eventually("the stored response", Duration::from_secs(5), || async {
        let j = s.get(&url, None).await.json();
        if j["response"].is_null() {
            Err(j)
        } else {
            Ok(j)
        }
    })
    .await;
    assert_eq!(j["status"], "approved", "{j}");
    assert_eq!(j["forward"]["state"], "done", "{j}");
    assert_eq!(j["response"]["status"], 200, "{j}");
    assert!(j["response"]["body"].is_string(), "{j}");
}

/// A call approved while its client still waits gets the upstream's answer
/// with verdict's decision headers, like any forward.
#[tokio::test]
async fn an_approval_within_the_hold_timeout_carries_the_decision_headers() {
    let up = MockUpstream::start().await;
    let url = up.url();
    let s = TestServer::start_with(|c| {
        std::fs::write(c.policies_dir.join("refunds.toml"), policy("10s")).unwrap();
        c.proxy.upstream = Some(url);
    })
    .await;
    let proxy = format!("http://{}", s.running.as_ref().unwrap().proxy_addr.unwrap());
    let call = tokio::spawn(async move {
        let body = json!({
            "amount": 900,
            "claims": ["The customer was charged $100.00."],
            "evidence": [{"source_id": "inv", "text": "Invoice 7: amount charged $100.00."}],
        })
        .to_string();
        support::call(
            &proxy,
            Method::POST,
            "/api/orders/7/refunds",
            &[("content-type", "application/json")],
            body,
        )
        .await
    });
    let id = support::eventually("a held review", Duration::from_secs(5), || async {
        let list = s
            .get("/v2/reviews?status=pending", Some(REVIEW_KEY))
            .await
            .json();
        match list["reviews"][0]["review_id"].as_str() {
            Some(id) => Ok(id.to_string()),
            None => Err(list),
        }
    })
    .await;
    assert_eq!(resolve(&s, &id, "approve", REVIEW_KEY).await.status, 200);
    let r = call.await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-verdict-decision"), Some("allow"));
    assert_eq!(r.header("x-verdict-review-id"), Some(id.as_str()));
    assert!(r.header("x-verdict-record-id").is_some());
}

/// With a short `review.retention`, ended reviews and their held bodies go
/// after the sweep, pending ones stay, and the audit log still verifies
/// (its records never held the bodies).
#[tokio::test]
async fn retention_purges_ended_reviews_and_the_log_still_verifies() {
    let up = MockUpstream::start().await;
    let url = up.url();
    let s = TestServer::start_with(|c| {
        std::fs::write(c.policies_dir.join("refunds.toml"), policy("50ms")).unwrap();
        c.proxy.upstream = Some(url);
        c.review_retention = Duration::from_millis(200);
    })
    .await;
    let ended = hold_order(&s, None, 1).await;
    let ended = ended["review_id"].as_str().unwrap().to_string();
    let pending = hold_order(&s, None, 2).await;
    let pending = pending["review_id"].as_str().unwrap().to_string();
    assert_eq!(resolve(&s, &ended, "reject", REVIEW_KEY).await.status, 200);
    let url = format!("/v2/reviews/{ended}");
    support::eventually_every(
        "the rejected review to be purged",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            match s.get(&url, Some(REVIEW_KEY)).await.status {
                404 => Ok(()),
                other => Err(format!("still answered {other}")),
            }
        },
    )
    .await;
    let p = s
        .get(&format!("/v2/reviews/{pending}"), Some(REVIEW_KEY))
        .await;
    assert_eq!(p.json()["status"], "pending", "{}", p.text());
    let health = s.get("/health/detailed", None).await.json();
    assert_eq!(health["components"]["reviews"]["stored"], 1, "{health}");

    let bin = env!("CARGO_BIN_EXE_verdict");
    let dir = s.shutdown().await;
    let data = dir.path().join("data");
    // The held body is gone from the database file's live rows.
    let db = rusqlite::Connection::open(data.join("verdict.db")).unwrap();
    let rows: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM review_reviews WHERE review_id = ?1",
            [&ended],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, 0);
    let out = support::cli(bin, &["audit", "verify", "--data-dir"], &data);
    support::assert_exit(&out, 0);
}

/// Two clients that authenticate to the service with their own `X-Api-Key`
/// send the same held call: each gets its own review, so neither can read
/// the other's upstream answer through its `result_url`, and the second
/// call is forwarded with its own key once approved.
#[tokio::test]
async fn a_held_call_never_joins_another_callers_review() {
    let (s, up) = env(1).await;
    let a = send_refund(&s, &[("x-api-key", "customer-a")]).await;
    assert_eq!(a.status, 202, "{}", a.text());
    let b = send_refund(&s, &[("x-api-key", "customer-b")]).await;
    assert_eq!(b.status, 202, "{}", b.text());
    let (a, b) = (a.json(), b.json());
    assert_ne!(a["review_id"], b["review_id"], "B joined A's review");
    assert_ne!(a["result_url"], b["result_url"]);
    // Any other header that differs is another request too.
    let c = send_refund(&s, &[("x-api-key", "customer-a"), ("x-tenant", "t2")])
        .await
        .json();
    assert_ne!(c["review_id"], a["review_id"]);

    let b_id = b["review_id"].as_str().unwrap();
    assert_eq!(resolve(&s, b_id, "approve", REVIEW_KEY).await.status, 200);
    wait_until("the forward", || up.count() == 1).await;
    let sent = &up.calls()[0];
    assert_eq!(
        sent.headers.get("x-api-key").map(|v| v.as_bytes()),
        Some(&b"customer-b"[..]),
        "B's approved call went out with another caller's key"
    );
}

/// The same caller retrying: verdict's per-try headers (`X-Request-Id`,
/// `traceparent`) and the route's `join_ignore_headers` may differ and the
/// retry still joins; nothing else may.
#[tokio::test]
async fn a_retry_joins_despite_per_try_headers_only() {
    let (s, _up) = env_with(1, "join_ignore_headers = [\"X-Attempt\"]\n").await;
    let first = send_refund(
        &s,
        &[
            ("x-api-key", "customer-a"),
            ("x-request-id", "try-1"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            ("x-attempt", "1"),
        ],
    )
    .await
    .json();
    let retry = send_refund(
        &s,
        &[
            ("x-api-key", "customer-a"),
            ("x-request-id", "try-2"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",
            ),
            ("x-attempt", "2"),
        ],
    )
    .await
    .json();
    assert_eq!(first["review_id"], retry["review_id"], "{first} {retry}");
    let other = send_refund(
        &s,
        &[
            ("x-api-key", "customer-a"),
            ("x-attempt", "3"),
            ("accept", "text/plain"),
        ],
    )
    .await
    .json();
    assert_ne!(first["review_id"], other["review_id"]);
}

/// A held call with two `Authorization` headers is refused (and recorded),
/// so a verdict key hidden in the second one cannot approve the call it
/// rode in on.
#[tokio::test]
async fn two_credentials_on_a_held_call_are_refused() {
    let (s, up) = env(1).await;
    let bearer = format!("Bearer {REVIEW_KEY}");
    for headers in [
        vec![
            ("authorization", "Basic Y3VzdG9tZXI6cHc="),
            ("authorization", bearer.as_str()),
        ],
        vec![("cookie", "a=1"), ("cookie", "b=2")],
    ] {
        let r = send_refund(&s, &headers).await;
        r.assert_error(400, "denied");
        let j = r.json();
        assert_eq!(j["reason"], "ambiguous_credentials", "{j}");
        assert!(j["record_id"].is_string(), "not recorded: {j}");
    }
    let pending = s
        .get("/v2/reviews?status=pending", Some(REVIEW_KEY))
        .await
        .json();
    assert_eq!(pending["reviews"].as_array().unwrap().len(), 0, "{pending}");
    assert_eq!(up.count(), 0);
}

/// Every verdict key in any credential header of a held call is a
/// requester: a key in a route's `credential_headers` or in a cookie cannot
/// approve the call either.
#[tokio::test]
async fn every_key_behind_a_held_call_is_refused_as_its_approver() {
    use base64::Engine as _;
    let (s, up) = env_with(1, "credential_headers = [\"X-Api-Key\"]\n").await;
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("ops:{SECOND_REVIEWER}"))
    );
    let cookie = format!("vk={REVIEW_KEY}; session=abc; again={SECOND_REVIEWER}");
    let mut ids = Vec::new();
    for headers in [
        // Two keys in one cookie header: both are requesters.
        vec![("cookie", cookie.as_str())],
        // One in a route's credential header, one as a Basic password.
        vec![("x-api-key", REVIEW_KEY), ("authorization", basic.as_str())],
    ] {
        let r = send_refund(&s, &headers).await;
        assert_eq!(r.status, 202, "{}", r.text());
        ids.push(r.json()["review_id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        for key in [REVIEW_KEY, SECOND_REVIEWER] {
            let r = resolve(&s, id, "approve", key).await;
            r.assert_error(403, "forbidden");
        }
    }
    // `X_Api_Key` is `X-Api-Key` to a CGI-style server: two credentials.
    let r = send_refund(&s, &[("x-api-key", "a"), ("x_api_key", "b")]).await;
    r.assert_error(400, "denied");
    assert_eq!(r.json()["reason"], "ambiguous_credentials");
    let id = ids[1].clone();
    assert_eq!(up.count(), 0);
    // The route's credential header is sealed at rest like Authorization.
    let db = rusqlite::Connection::open(s.path("data/verdict.db")).unwrap();
    let stored: Vec<u8> = db
        .query_row(
            "SELECT value FROM review_request_headers WHERE review_id = ?1 AND name = 'x-api-key'",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        !stored
            .windows(REVIEW_KEY.len())
            .any(|w| w == REVIEW_KEY.as_bytes()),
        "x-api-key stored in plain text"
    );
}
