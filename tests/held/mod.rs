//! Test support for the review tests outside tests/proxy.rs: a sidecar with
//! a proxy in front of a mock upstream and one route whose refunds above
//! 500 are held for review, and a loopback webhook receiver.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};

use crate::support::{self, MockUpstream, TestServer};

const EV: &str = "Invoice INV-2291 for order 77: Vitamix blender, amount charged $100.00. Courier note: package damaged in transit.";

/// A sidecar with a proxy, and its upstream.
pub struct Env {
    pub s: TestServer,
    pub up: MockUpstream,
    pub proxy: String,
}

/// Starts the sidecar with `hold` as the route's hold timeout; `edit`
/// adjusts the config first.
pub async fn env_with(hold: &str, edit: impl FnOnce(&mut verdict::config::Config)) -> Env {
    let up = MockUpstream::start().await;
    let url = up.url();
    let policy = support::RefundPolicy::new("strict")
        .rule(
            "amount",
            "gt",
            Some("500"),
            "review",
            Some("refunds above 500 need a reviewer"),
        )
        .hold(hold)
        .build();
    let s = TestServer::start_with(|c| {
        std::fs::write(c.policies_dir.join("refunds.toml"), &policy).expect("policy");
        c.proxy.upstream = Some(url);
        c.proxy.response_timeout = std::time::Duration::from_secs(2);
        edit(c);
    })
    .await;
    let proxy = format!(
        "http://{}",
        s.running
            .as_ref()
            .and_then(|r| r.proxy_addr)
            .expect("a proxy")
    );
    Env { s, up, proxy }
}

/// POSTs a refund of `amount` through the proxy; above 500 it is held.
pub async fn refund(e: &Env, amount: u64) -> support::Resp {
    let body = format!(
        "{{\"amount\": {amount}, \"claims\": [\"The package was damaged in transit.\"], \"evidence\": [{{\"source_id\":\"inv\",\"text\":{}}}]}}",
        serde_json::to_string(EV).expect("json")
    );
    let req = Request::builder()
        .method(Method::POST)
        .uri(format!("{}/api/orders/77/refunds", e.proxy))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let resp = support::client().request(req).await.expect("response");
    let (parts, body) = resp.into_parts();
    support::Resp {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: body.collect().await.expect("body").to_bytes(),
    }
}

/// One POST the webhook receiver got.
#[derive(Debug, Clone)]
pub struct Hook {
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Hook {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON notification")
    }
}

/// A loopback webhook: every POST goes to `rx`; the first `fail_first`
/// are answered 503, the rest 204.
pub struct Receiver {
    pub url: String,
    pub rx: tokio::sync::mpsc::UnboundedReceiver<Hook>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start(fail_first: usize) -> Receiver {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let seen = Arc::new(AtomicUsize::new(0));
        let (addr, task) = support::serve_http(move |parts, body| {
            let (tx, seen) = (tx.clone(), seen.clone());
            async move {
                let _ = tx.send(Hook {
                    headers: parts.headers,
                    body,
                });
                let mut resp = http::Response::new(Full::new(Bytes::new()).boxed());
                *resp.status_mut() = if seen.fetch_add(1, Ordering::SeqCst) < fail_first {
                    http::StatusCode::SERVICE_UNAVAILABLE
                } else {
                    http::StatusCode::NO_CONTENT
                };
                resp
            }
        })
        .await;
        Receiver {
            url: format!("http://{addr}/hooks/verdict"),
            rx,
            task,
        }
    }

    /// The next POST, or a panic after `within`.
    pub async fn next(&mut self, within: std::time::Duration) -> Hook {
        tokio::time::timeout(within, self.rx.recv())
            .await
            .expect("a notification in time")
            .expect("the receiver runs")
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A loopback URL nothing listens on.
pub async fn dead_url() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    drop(l);
    format!("http://{addr}/hooks/verdict")
}

/// Waits until the metric line `series` reads `value`.
pub async fn metric_reaches(
    s: &TestServer,
    series: &str,
    value: f64,
    what: &str,
    within: std::time::Duration,
) {
    crate::support::eventually(what, within, || async {
        match metric(s, series).await {
            Some(v) if v == value => Ok(()),
            other => Err(format!("{series} is {other:?}")),
        }
    })
    .await;
}

/// The value of a metric line `name{labels} value` in `/metrics`.
pub async fn metric(s: &TestServer, series: &str) -> Option<f64> {
    let text = s.get("/metrics", None).await.text();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}
