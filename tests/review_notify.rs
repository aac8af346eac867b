//! Review notifications against a real sidecar and a loopback webhook: a
//! held call is notified, signed, within a second, and so is its
//! resolution; a failing webhook is retried; a dead one delays no hold and
//! loses no review, and its failures are counted in /metrics.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::held;
use crate::support;

use std::time::{Duration, Instant, SystemTime};

use held::{env_with, metric, metric_reaches, refund, Receiver};
use ring::hmac;
use support::REVIEW_KEY;
use verdict::config::{NotifyConfig, NotifySecret};

const SECRET: &[u8] = b"a test secret of more than sixteen bytes";

fn notify(url: &str, attempts: u32, backoff: Duration) -> NotifyConfig {
    NotifyConfig {
        url: url.parse().unwrap(),
        secret: NotifySecret::new(SECRET.to_vec()),
        console_url: None,
        attempts,
        backoff,
        timeout: Duration::from_secs(2),
        queue: 100,
    }
}

/// Checks the signature as a receiver would: HMAC-SHA256 keyed with the
/// shared secret over `<X-Verdict-Timestamp>.<body>`, a fresh timestamp.
fn assert_signed(hook: &held::Hook, secret: &[u8]) {
    let ts = hook.header("x-verdict-timestamp");
    let sig = hook
        .header("x-verdict-signature")
        .strip_prefix("sha256=")
        .expect("sha256=<hex>");
    let mac = hex::decode(sig).expect("hex");
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let signed = [ts.as_bytes(), b".", &hook.body].concat();
    hmac::verify(&key, &signed, &mac).expect("the signature verifies");
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let ts: u64 = ts.parse().expect("unix seconds");
    assert!(now.abs_diff(ts) <= 60, "timestamp {ts} vs now {now}");
    // Another body, or another key, does not verify.
    let tampered = [signed.as_slice(), b" "].concat();
    assert!(hmac::verify(&key, &tampered, &mac).is_err());
    let other = hmac::Key::new(hmac::HMAC_SHA256, b"another secret of sixteen bytes");
    assert!(hmac::verify(&other, &signed, &mac).is_err());
}

#[tokio::test]
async fn a_hold_is_notified_signed_within_a_second_and_so_is_its_resolution() {
    let mut hook = Receiver::start(0).await;
    let url = hook.url.clone();
    let e = env_with("10s", |c| {
        c.review_notify = Some(notify(&url, 3, Duration::from_millis(50)))
    })
    .await;
    let e = std::sync::Arc::new(e);
    let t0 = Instant::now();
    let e2 = e.clone();
    let held_call = tokio::spawn(async move { refund(&e2, 900).await });

    let n = hook.next(Duration::from_secs(1)).await;
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_signed(&n, SECRET);
    assert_eq!(n.header("content-type"), "application/json");
    assert_eq!(n.header("x-verdict-event"), "held");
    assert!(uuid::Uuid::parse_str(n.header("x-verdict-delivery")).is_ok());
    let p = n.json();
    let id = p["review_id"].as_str().unwrap().to_string();
    assert_eq!(p["event"], "held");
    assert_eq!(p["status"], "pending");
    assert_eq!(p["route"], "create-refund");
    assert_eq!(p["action"], "refund.create");
    assert_eq!(p["rules"][0], "refunds above 500 need a reviewer");
    assert!(p["reason"].is_string() && p["record_id"].is_string(), "{p}");
    assert_eq!(p["forwards"], true, "{p}");
    assert!(p["expires_at"].as_str().unwrap().ends_with('Z'), "{p}");
    assert!(p["reviewer"].is_null() && p["note"].is_null(), "{p}");
    assert_eq!(
        p["console_url"],
        format!("http://{}/console/reviews/{id}", e.s.addr)
    );
    // The same review the API lists.
    let g =
        e.s.get(&format!("/v2/reviews/{id}"), Some(REVIEW_KEY))
            .await;
    assert_eq!(g.json()["status"], "pending", "{}", g.text());

    let a =
        e.s.post_json(
            &format!("/v2/reviews/{id}/approve"),
            r#"{"reviewer":"ops@example.com","note":"matches the invoice"}"#,
            Some(REVIEW_KEY),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text());
    let r = hook.next(Duration::from_secs(2)).await;
    assert_signed(&r, SECRET);
    assert_eq!(r.header("x-verdict-event"), "resolved");
    assert_ne!(
        r.header("x-verdict-delivery"),
        n.header("x-verdict-delivery")
    );
    let p = r.json();
    assert_eq!(p["event"], "resolved");
    assert_eq!(p["review_id"], id.as_str());
    assert_eq!(p["status"], "approved");
    assert_eq!(p["reviewer"], "ops@example.com");
    assert_eq!(p["note"], "matches the invoice");
    assert!(p["resolved_at"].is_string(), "{p}");
    assert_eq!(held_call.await.unwrap().status, 200);

    // A second, refused approval resolves nothing and notifies nothing.
    let again =
        e.s.post_json(
            &format!("/v2/reviews/{id}/approve"),
            r#"{"reviewer":"ops@example.com"}"#,
            Some(REVIEW_KEY),
        )
        .await;
    again.assert_error(409, "conflict");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(hook.rx.try_recv().is_err(), "no notification for a 409");
    let sent = r#"verdict_review_notifications_total{outcome="sent"}"#;
    assert_eq!(metric(&e.s, sent).await, Some(2.0));
}

/// A webhook that answers 503 at first gets the same notification again,
/// with the same delivery id and a fresh, valid signature.
#[tokio::test]
async fn a_failing_webhook_is_retried_with_the_same_delivery_id() {
    let mut hook = Receiver::start(1).await;
    let url = hook.url.clone();
    let e = env_with("200ms", |c| {
        c.review_notify = Some(notify(&url, 3, Duration::from_millis(50)))
    })
    .await;
    assert_eq!(refund(&e, 900).await.status, 202);
    let first = hook.next(Duration::from_secs(2)).await;
    let second = hook.next(Duration::from_secs(2)).await;
    assert_eq!(first.body, second.body);
    assert_eq!(
        first.header("x-verdict-delivery"),
        second.header("x-verdict-delivery")
    );
    assert_signed(&second, SECRET);
    let sent = r#"verdict_review_notifications_total{outcome="sent"}"#;
    metric_reaches(
        &e.s,
        sent,
        1.0,
        "the retry counted as sent",
        Duration::from_secs(5),
    )
    .await;
    let failed_attempts = "verdict_review_notification_failed_attempts_total";
    assert_eq!(metric(&e.s, failed_attempts).await, Some(1.0));
    let failed = r#"verdict_review_notifications_total{outcome="failed"}"#;
    assert_eq!(metric(&e.s, failed).await, Some(0.0));
    e.s.shutdown().await;
}

/// Nothing listens at notify_url: the hold answers on time, the approval
/// is stored and forwarded, and each given-up notification is counted.
#[tokio::test]
async fn a_dead_webhook_delays_no_hold_and_is_counted_in_metrics() {
    let url = held::dead_url().await;
    let e = env_with("300ms", |c| {
        c.review_notify = Some(notify(&url, 2, Duration::from_millis(50)))
    })
    .await;
    let t0 = Instant::now();
    let r = refund(&e, 900).await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    let id = r.json()["review_id"].as_str().unwrap().to_string();
    let a =
        e.s.post_json(
            &format!("/v2/reviews/{id}/approve"),
            r#"{"reviewer":"ops"}"#,
            Some(REVIEW_KEY),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text());
    support::wait_for(
        "the approval to be forwarded",
        Duration::from_secs(10),
        || e.up.count() >= 1,
    )
    .await;
    let failed = r#"verdict_review_notifications_total{outcome="failed"}"#;
    let what = "both notifications counted as failed";
    metric_reaches(&e.s, failed, 2.0, what, Duration::from_secs(10)).await;
    let attempts = "verdict_review_notification_failed_attempts_total";
    assert_eq!(metric(&e.s, attempts).await, Some(4.0));
    let sent = r#"verdict_review_notifications_total{outcome="sent"}"#;
    assert_eq!(metric(&e.s, sent).await, Some(0.0));
    let g =
        e.s.get(&format!("/v2/reviews/{id}"), Some(REVIEW_KEY))
            .await;
    assert_eq!(g.json()["status"], "approved", "{}", g.text());
    e.s.shutdown().await;
}

/// A notification waiting out a long backoff does not hold up shutdown:
/// it is dropped and counted.
#[tokio::test]
async fn shutdown_does_not_wait_for_a_retrying_notification() {
    let url = held::dead_url().await;
    let e = env_with("100ms", |c| {
        c.review_notify = Some(notify(&url, 5, Duration::from_secs(30)))
    })
    .await;
    assert_eq!(refund(&e, 900).await.status, 202);
    let attempts = "verdict_review_notification_failed_attempts_total";
    metric_reaches(
        &e.s,
        attempts,
        1.0,
        "the first try to fail",
        Duration::from_secs(5),
    )
    .await;
    let app = e.s.running.as_ref().unwrap().app.clone();
    let t0 = Instant::now();
    e.s.shutdown().await;
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let text = verdict::telemetry::metrics::encode(&app.registry).unwrap();
    assert!(
        text.contains(r#"verdict_review_notifications_total{outcome="dropped"} 1"#),
        "{text}"
    );
}
