//! Review notifications: a signed JSON POST to `[review] notify_url` for
//! every held review and every resolution, so that a reviewer learns of a
//! waiting refund without polling the Review API.
//!
//! A notification is a side channel, never part of the decision: the hold
//! and the resolution are durable before it is even queued, it is queued
//! without waiting (a full queue drops it and counts the drop), and a
//! background task sends it with bounded retries. A slow or dead webhook
//! therefore delays and loses no review; it only costs notifications, which
//! `/metrics` counts (`verdict_review_notifications_total{outcome}`).
//!
//! Each POST is signed with HMAC-SHA256 over `<timestamp>.<body>`, the
//! exact body bytes (see [`signature`] and docs/reviews.md). The URL obeys
//! the same fences as http(s) evidence (`src/evidence.rs`): a hostname that
//! resolves to a link-local or cloud metadata address is refused before any
//! connection (only an IP literal in the URL is taken as the operator's
//! explicit choice), and redirects are not followed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use crate::support::fence;
use crate::support::time::try_rfc3339;
use http::header::{HeaderValue, CONTENT_TYPE, USER_AGENT};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use ring::hmac;
use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::config::{origin_only, NotifyConfig};
use crate::review::{ReviewEvent, ReviewView, Reviews, NO_FORWARD};

/// The header with `sha256=<hex>`.
pub const SIGNATURE_HEADER: &str = "x-verdict-signature";
/// The header with the Unix time (seconds) the signature covers.
pub const TIMESTAMP_HEADER: &str = "x-verdict-timestamp";
/// `held` or `resolved`.
pub const EVENT_HEADER: &str = "x-verdict-event";
/// One id per notification, the same on each of its retries.
pub const DELIVERY_HEADER: &str = "x-verdict-delivery";

/// Notifications sent at once; the rest wait in the queue.
const MAX_IN_FLIGHT: usize = 4;
/// The longest pause between two attempts, however many have failed.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How much of a webhook's answer is read (and thrown away).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

type WebhookClient = fence::FencedClient<Full<Bytes>>;

/// `sha256=<hex>`: HMAC-SHA256 keyed with the secret over the ASCII
/// decimal timestamp, one `.`, and the body bytes exactly as sent.
pub fn signature(key: &hmac::Key, timestamp: u64, body: &[u8]) -> String {
    let mut ctx = hmac::Context::with_key(key);
    ctx.update(timestamp.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    format!("sha256={}", hex::encode(ctx.sign().as_ref()))
}

/// The JSON body of a notification. Fields that do not apply are `null`.
#[derive(Debug, Serialize)]
struct Payload<'a> {
    event: &'static str,
    review_id: &'a str,
    /// `pending` for `held`; `approved`, `rejected` or `expired` for
    /// `resolved`.
    status: &'static str,
    route: &'a str,
    action: &'a str,
    reason: &'a str,
    rules: &'a [String],
    record_id: Option<&'a str>,
    /// Whether an approval sends the held request on; `false` for a
    /// record-only review (Envoy's ext_authz, AuthZEN), whose caller
    /// retries after the approval.
    forwards: bool,
    created_at: Option<String>,
    expires_at: Option<String>,
    resolved_at: Option<String>,
    /// Who resolved it; `null` while pending and for an expiry.
    reviewer: Option<&'a str>,
    note: Option<&'a str>,
    /// The review's page in the console.
    console_url: String,
}

/// The exact bytes posted for `event` on `view`.
pub fn payload(event: ReviewEvent, view: &ReviewView, console_base: &str) -> Vec<u8> {
    let p = Payload {
        event: event.as_str(),
        review_id: &view.review_id,
        status: view.status.as_str(),
        route: &view.route,
        action: &view.action,
        reason: &view.reason,
        rules: &view.rules,
        record_id: view.record_id.as_deref(),
        forwards: view.forward.state != NO_FORWARD,
        created_at: try_rfc3339(view.created_at),
        expires_at: try_rfc3339(view.expires_at),
        resolved_at: view.resolved_at.and_then(try_rfc3339),
        reviewer: view.reviewer.as_deref(),
        note: view.note.as_deref(),
        console_url: console_link(console_base, &view.review_id),
    };
    // A struct of strings cannot fail to serialise; an empty body would
    // still be signed and counted as sent, so say so if it ever did.
    serde_json::to_vec(&p).unwrap_or_else(|e| {
        tracing::error!(error = %e, "cannot encode a review notification");
        Vec::new()
    })
}

/// `<base>/console/reviews/<id>`.
pub fn console_link(base: &str, review_id: &str) -> String {
    format!("{}/console/reviews/{review_id}", base.trim_end_matches('/'))
}

/// The console's base URL when `[review] console_url` is unset: the API's
/// own address (loopback for an unspecified one), `https` when it has TLS.
pub fn derived_console_base(api_addr: SocketAddr, tls: bool) -> String {
    let scheme = if tls { "https" } else { "http" };
    let mut addr = api_addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr.ip() {
            std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("{scheme}://{addr}")
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// `verdict_review_notifications_total{outcome="sent"|"failed"|"dropped"}`
/// and `verdict_review_notification_failed_attempts_total`.
#[derive(Clone, Debug)]
struct Metrics {
    outcomes: Family<OutcomeLabels, Counter>,
    failed_attempts: Counter,
    /// Drops so far, for rate-limiting the warning about them.
    drops: Arc<AtomicU64>,
}

impl Metrics {
    fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            outcomes: Family::default(),
            failed_attempts: Counter::default(),
            drops: Arc::default(),
        };
        // Zeros from the start, so a dashboard sees the series before the
        // first failure.
        for outcome in ["sent", "failed", "dropped"] {
            drop(m.outcomes.get_or_create(&OutcomeLabels { outcome }));
        }
        registry.register(
            "verdict_review_notifications",
            "Review notifications by outcome: sent (2xx), failed (every attempt failed, or a permanent refusal) or dropped (queue full, or left at shutdown)",
            m.outcomes.clone(),
        );
        registry.register(
            "verdict_review_notification_failed_attempts",
            "Notification attempts that failed (each retry counts)",
            m.failed_attempts.clone(),
        );
        m
    }

    fn count(&self, outcome: &'static str, n: u64) {
        self.outcomes
            .get_or_create(&OutcomeLabels { outcome })
            .inc_by(n);
    }

    fn dropped(&self, why: &str) {
        self.count("dropped", 1);
        let n = self.drops.fetch_add(1, Ordering::Relaxed) + 1;
        // The first drop and then every hundredth: a dead webhook under load
        // must not flood the log.
        if n == 1 || n.is_multiple_of(100) {
            tracing::warn!(dropped_total = n, why, "review notification dropped");
        }
    }
}

/// One queued notification.
struct Notice {
    event: ReviewEvent,
    view: ReviewView,
}

/// The notification queue and its sender. Built before the server starts
/// ([`Notifier::new`] registers the metrics), attached to the review store,
/// then started once the API's address is known.
pub struct Notifier {
    cfg: NotifyConfig,
    tx: mpsc::Sender<Notice>,
    rx: mpsc::Receiver<Notice>,
    metrics: Metrics,
}

impl Notifier {
    /// The queue (`notify_queue` long) and the metrics.
    pub fn new(cfg: NotifyConfig, registry: &mut Registry) -> Notifier {
        let (tx, rx) = mpsc::channel(cfg.queue);
        Notifier {
            metrics: Metrics::register(registry),
            cfg,
            tx,
            rx,
        }
    }

    /// Queues a notification for every review `reviews` holds or resolves
    /// from now on. Never waits: a full queue drops the notification.
    /// `false` when the store has another observer already.
    pub fn attach(&self, reviews: &Reviews) -> bool {
        let tx = self.tx.clone();
        let metrics = self.metrics.clone();
        reviews.observe(Box::new(move |event, view| {
            let notice = Notice {
                event,
                view: view.clone(),
            };
            match tx.try_send(notice) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => metrics.dropped("queue full"),
                Err(mpsc::error::TrySendError::Closed(_)) => metrics.dropped("sender stopped"),
            }
        }))
    }

    /// Starts sending on the current runtime, with links under
    /// `console_base` (`[review] console_url` wins over it). Stops at
    /// `shutdown`; what is still queued or in flight then is dropped and
    /// counted.
    pub fn spawn(self, console_base: String, shutdown: watch::Receiver<bool>) -> JoinHandle<()> {
        let base = self.cfg.console_url.clone().unwrap_or(console_base);
        tracing::info!(
            url = %origin_only(&self.cfg.url),
            console = %base,
            "review notifications on"
        );
        let client = match build_client(self.cfg.timeout) {
            Ok(client) => client,
            Err(e) => {
                // The queue closes with `self.rx`: every notification from
                // now on is dropped and counted ("sender stopped").
                tracing::error!(error = %e, "review notifications off: no TLS configuration");
                return tokio::spawn(async {});
            }
        };
        let sender = Arc::new(Sender {
            client,
            key: hmac::Key::new(hmac::HMAC_SHA256, self.cfg.secret.expose()),
            metrics: self.metrics.clone(),
            base,
            cfg: self.cfg,
        });
        // The queue outlives the sender task only through `attach`'s clone.
        drop(self.tx);
        tokio::spawn(run(self.rx, sender, shutdown))
    }
}

/// Takes notifications off the queue, at most [`MAX_IN_FLIGHT`] at a time.
async fn run(
    mut rx: mpsc::Receiver<Notice>,
    sender: Arc<Sender>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut in_flight = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => break,
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
            notice = rx.recv(), if in_flight.len() < MAX_IN_FLIGHT => match notice {
                Some(n) => {
                    in_flight.spawn(Arc::clone(&sender).deliver(n));
                }
                None => break,
            },
        }
    }
    rx.close();
    // Deliveries that finished have counted themselves; only the others
    // are cut short.
    while in_flight.try_join_next().is_some() {}
    let mut left = in_flight.len() as u64;
    in_flight.abort_all();
    while rx.try_recv().is_ok() {
        left += 1;
    }
    if left > 0 {
        sender.metrics.count("dropped", left);
        tracing::warn!(
            left,
            "review notifications not sent before shutdown (the reviews themselves are stored)"
        );
    }
}

/// Why one attempt failed, and whether another may succeed.
struct Failure {
    reason: String,
    retry: bool,
}

struct Sender {
    cfg: NotifyConfig,
    client: WebhookClient,
    key: hmac::Key,
    metrics: Metrics,
    base: String,
}

impl Sender {
    /// Sends one notification: up to `notify_attempts` tries, pausing
    /// `notify_backoff`, then twice as long after each further failure.
    async fn deliver(self: Arc<Self>, n: Notice) {
        let body = Bytes::from(payload(n.event, &n.view, &self.base));
        let delivery = uuid::Uuid::new_v4().to_string();
        let id = n.view.review_id.as_str();
        let mut pause = self.cfg.backoff;
        for attempt in 1..=self.cfg.attempts {
            let failure = match tokio::time::timeout(
                self.cfg.timeout,
                self.attempt(n.event, &delivery, body.clone()),
            )
            .await
            {
                Ok(Ok(())) => {
                    self.metrics.count("sent", 1);
                    tracing::debug!(
                        review_id = id,
                        event = n.event.as_str(),
                        attempt,
                        "review notification sent"
                    );
                    return;
                }
                Ok(Err(f)) => f,
                Err(_) => Failure {
                    reason: format!("no answer within {:?}", self.cfg.timeout),
                    retry: true,
                },
            };
            self.metrics.failed_attempts.inc();
            if !failure.retry || attempt == self.cfg.attempts {
                self.metrics.count("failed", 1);
                tracing::warn!(
                    review_id = id,
                    event = n.event.as_str(),
                    attempt,
                    url = %origin_only(&self.cfg.url),
                    error = %failure.reason,
                    "review notification failed; giving up (the review itself is stored)"
                );
                return;
            }
            tracing::info!(
                review_id = id,
                event = n.event.as_str(),
                attempt,
                retry_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                error = %failure.reason,
                "review notification failed; will retry"
            );
            tokio::time::sleep(pause).await;
            pause = pause.saturating_mul(2).min(MAX_BACKOFF);
        }
    }

    /// One POST: a fresh timestamp and signature each time, the same body
    /// and delivery id.
    async fn attempt(
        &self,
        event: ReviewEvent,
        delivery: &str,
        body: Bytes,
    ) -> Result<(), Failure> {
        let timestamp = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let req = Request::post(self.cfg.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, concat!("verdict/", env!("CARGO_PKG_VERSION")))
            .header(EVENT_HEADER, HeaderValue::from_static(event.as_str()))
            .header(DELIVERY_HEADER, delivery)
            .header(TIMESTAMP_HEADER, timestamp)
            .header(SIGNATURE_HEADER, signature(&self.key, timestamp, &body))
            .body(Full::new(body))
            .map_err(|e| Failure {
                reason: format!("cannot build the request: {e}"),
                retry: false,
            })?;
        let resp = self.client.request(req).await.map_err(|e| Failure {
            reason: format!("cannot reach the webhook: {}", crate::http::error_chain(&e)),
            retry: true,
        })?;
        let status = resp.status();
        // Read a little of the answer so the connection can be reused.
        let _ = Limited::new(resp.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await;
        if status.is_success() {
            return Ok(());
        }
        let retry = status.is_server_error()
            || status == StatusCode::REQUEST_TIMEOUT
            || status == StatusCode::TOO_MANY_REQUESTS;
        let reason = if status.is_redirection() {
            format!("the webhook answered {status}; redirects are not followed")
        } else {
            format!("the webhook answered {status}")
        };
        Err(Failure { reason, retry })
    }
}

/// The webhook client: http and https (rustls with the system roots),
/// resolving hostnames through the fence ([`crate::support::fence`]).
fn build_client(timeout: Duration) -> Result<WebhookClient, String> {
    // Without system roots an http webhook still works; an https one
    // fails its certificate check, counted as a failed notification.
    let tls = crate::config::client_tls(None, "an https notify_url cannot be verified")?;
    Ok(fence::client(timeout, tls))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NotifySecret;
    use crate::review::{ForwardView, RequestView, ReviewStatus};

    fn cfg(queue: usize) -> NotifyConfig {
        NotifyConfig {
            url: "http://127.0.0.1:9/hook".parse().unwrap(),
            secret: NotifySecret::new(b"0123456789abcdef".to_vec()),
            console_url: None,
            attempts: 2,
            backoff: Duration::from_millis(10),
            timeout: Duration::from_secs(1),
            queue,
        }
    }

    fn view(status: ReviewStatus) -> ReviewView {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        ReviewView {
            review_id: "4b0e3c1a-0000-4000-8000-000000000001".into(),
            status,
            created_at: t,
            expires_at: t + Duration::from_secs(3600),
            route: "create-refund".into(),
            action: "refund.create".into(),
            reason: "review_required".into(),
            rules: vec!["refunds above 500".into()],
            record_id: Some("rec-1".into()),
            reviewer: (status != ReviewStatus::Pending).then(|| "alice".into()),
            note: (status != ReviewStatus::Pending).then(|| "ok".into()),
            resolved_at: (status != ReviewStatus::Pending).then_some(t + Duration::from_secs(60)),
            forward: ForwardView {
                state: "not_started",
                upstream_status: None,
            },
            request: RequestView {
                method: "POST".into(),
                path: "/api/orders/7/refunds".into(),
                hash: "sha256:00".into(),
            },
            approvals: vec![],
            approvals_required: 1,
            requesters: vec![],
            owner: "proxy".into(),
        }
    }

    /// The MAC is plain HMAC-SHA256 over `<timestamp>.<body>`: the value
    /// below is Python's `hmac.new(key, b"1767225600." + body, sha256)`.
    #[test]
    fn signature_is_hmac_sha256_over_timestamp_dot_body() {
        let key = hmac::Key::new(hmac::HMAC_SHA256, b"0123456789abcdef");
        assert_eq!(
            signature(&key, 1_767_225_600, br#"{"event":"held"}"#),
            "sha256=dc35f334cce6c6de2afd381c2a1b4009281cdd47ff41308193ae41e62d97e9af"
        );
    }

    /// The payload of `event` for a review in `status`, parsed back.
    fn payload_json(event: ReviewEvent, status: ReviewStatus, base: &str) -> serde_json::Value {
        serde_json::from_slice(&payload(event, &view(status), base)).unwrap()
    }

    #[test]
    fn payloads_carry_the_review_and_a_console_link() {
        let held = payload_json(
            ReviewEvent::Held,
            ReviewStatus::Pending,
            "https://verdict.internal/",
        );
        let done = payload_json(
            ReviewEvent::Resolved,
            ReviewStatus::Approved,
            "http://127.0.0.1:8181",
        );
        let console =
            "https://verdict.internal/console/reviews/4b0e3c1a-0000-4000-8000-000000000001";
        let expected: [(&serde_json::Value, &[(&str, &str)]); 2] = [
            (
                &held,
                &[
                    ("event", "held"),
                    ("status", "pending"),
                    ("route", "create-refund"),
                    ("action", "refund.create"),
                    ("expires_at", "2026-01-01T01:00:00Z"),
                    ("console_url", console),
                ],
            ),
            (
                &done,
                &[
                    ("event", "resolved"),
                    ("status", "approved"),
                    ("reviewer", "alice"),
                    ("note", "ok"),
                    ("resolved_at", "2026-01-01T00:01:00Z"),
                ],
            ),
        ];
        for (got, fields) in expected {
            for (key, want) in fields {
                assert_eq!(got[*key], *want, "{key}");
            }
        }
        assert_eq!(held["forwards"], true);
        let mut record_only = view(ReviewStatus::Pending);
        record_only.forward.state = NO_FORWARD;
        let got: serde_json::Value =
            serde_json::from_slice(&payload(ReviewEvent::Held, &record_only, "http://x")).unwrap();
        assert_eq!(got["forwards"], false);
        assert_eq!(held["rules"][0], "refunds above 500");
        assert!(held["reviewer"].is_null() && held["resolved_at"].is_null());
        assert!(held.get("request").is_none(), "no held request details");
    }

    #[test]
    fn derived_console_bases() {
        let a: SocketAddr = "0.0.0.0:8181".parse().unwrap();
        assert_eq!(derived_console_base(a, false), "http://127.0.0.1:8181");
        let b: SocketAddr = "[::]:8443".parse().unwrap();
        assert_eq!(derived_console_base(b, true), "https://[::1]:8443");
        let c: SocketAddr = "10.1.2.3:80".parse().unwrap();
        assert_eq!(derived_console_base(c, false), "http://10.1.2.3:80");
    }

    /// A full queue never waits: the hold goes on and the drop is counted.
    #[tokio::test]
    async fn a_full_queue_drops_and_counts() {
        let dir = tempfile::tempdir().unwrap();
        let reviews = Reviews::open(
            &dir.path().join("verdict.db"),
            Duration::from_secs(60),
            [1; 32],
        )
        .unwrap();
        let mut registry = Registry::default();
        let n = Notifier::new(cfg(1), &mut registry);
        assert!(n.attach(&reviews));
        for i in 0..3 {
            let new = crate::review::NewReview::for_test(
                "app",
                crate::review::HeldRequest {
                    method: "POST".into(),
                    path: format!("/x/{i}"),
                    headers: vec![],
                    body: Bytes::new(),
                },
            );
            reviews.create(new).await.unwrap();
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"verdict_review_notifications_total{outcome="dropped"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"verdict_review_notifications_total{outcome="sent"} 0"#),
            "{text}"
        );
    }
}
