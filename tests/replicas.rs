//! Several replicas on one PostgreSQL review store: two real `verdict`
//! processes, each with its own upstream, sharing one database started by
//! scripts/postgres.sh (no mocks of the store). A call held by one replica
//! is listed and resolved through the other, forwarded exactly once, and
//! survives the death of the replica that held it.
//!
//! Needs PostgreSQL: the support code starts a throwaway cluster, or skips
//! loudly with `VERDICT_SKIP_POSTGRES=1`.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use serde_json::Value;
use support::{MockUpstream, RefundPolicy, APP_KEY, DAMAGED, INVOICE_77_BLENDER, REVIEW_KEY};

const BIN: &str = env!("CARGO_BIN_EXE_verdict");

/// One `verdict serve` process on the shared store.
struct Replica {
    child: Child,
    /// `http://` and the API listener.
    api: String,
    /// `http://` and the proxy listener.
    proxy: String,
    dir: tempfile::TempDir,
}

impl Replica {
    /// Starts a replica in front of `upstream` with the refund route held
    /// above 500 for `hold`, on the store at `url` with a 1 s lease. Every
    /// replica gets `redaction_key` (the data dir's secret that seals held
    /// credentials), as a deployment would mount one shared secret.
    fn start(url: &str, upstream: &str, hold: &str, redaction_key: &[u8]) -> Replica {
        Replica::start_as(url, upstream, hold, redaction_key, None)
    }

    /// [`Replica::start`] with its audit log's origin set.
    fn start_as(
        url: &str,
        upstream: &str,
        hold: &str,
        redaction_key: &[u8],
        origin: Option<&str>,
    ) -> Replica {
        let origin = origin
            .map(|o| format!("[audit]\norigin = \"{o}\"\n"))
            .unwrap_or_default();
        let config = format!("[store]\nurl = \"{url}\"\nlease = \"1s\"\n{origin}");
        Replica::with_config(upstream, hold, redaction_key, &config)
    }

    /// A replica whose config file is `config` (its `[store]` and anything
    /// else), with the refund route and `redaction_key` as in
    /// [`Replica::start`].
    fn with_config(upstream: &str, hold: &str, redaction_key: &[u8], config: &str) -> Replica {
        let dir = tempfile::TempDir::new().unwrap();
        std::fs::create_dir_all(dir.path().join("policies")).unwrap();
        std::fs::write(
            dir.path().join("policies/refunds.toml"),
            RefundPolicy::new("strict")
                .review_over(500)
                .hold(hold)
                .build(),
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("data")).unwrap();
        std::fs::write(dir.path().join("data/redaction.key"), redaction_key).unwrap();
        let path = dir.path().join("verdict.toml");
        std::fs::write(&path, config).unwrap();
        let (child, api, log) = support::spawn_binary_with(
            BIN,
            dir.path(),
            "info",
            &[
                "--config",
                path.to_str().unwrap(),
                "--proxy-listen",
                "127.0.0.1:0",
                "--upstream",
                upstream,
            ],
            &[],
        );
        let proxy = support::logged_addr(&log, "proxy listening");
        Replica {
            child,
            api: format!("http://{api}"),
            proxy: format!("http://{proxy}"),
            dir,
        }
    }

    async fn get(&self, path: &str) -> support::Resp {
        support::call(
            &self.api,
            Method::GET,
            path,
            &[("authorization", &format!("Bearer {REVIEW_KEY}"))],
            "",
        )
        .await
    }

    async fn resolve(&self, id: &str, action: &str) -> support::Resp {
        support::call(
            &self.api,
            Method::POST,
            &format!("/v2/reviews/{id}/{action}"),
            &[
                ("authorization", &format!("Bearer {REVIEW_KEY}")),
                ("content-type", "application/json"),
            ],
            r#"{"reviewer":"ops@example.com"}"#,
        )
        .await
    }

    /// A refund of `amount` on order 77 through this replica's proxy.
    async fn refund(&self, amount: u64) -> support::Resp {
        let body = format!(
            "{{\"amount\": {amount}, \"claims\": [{}], \"evidence\": [{{\"source_id\":\"inv\",\"text\":{}}}]}}",
            serde_json::to_string(DAMAGED).unwrap(),
            serde_json::to_string(INVOICE_77_BLENDER).unwrap()
        );
        support::call(
            &self.proxy,
            Method::POST,
            "/api/orders/77/refunds",
            &[
                ("content-type", "application/json"),
                ("authorization", &format!("Bearer {APP_KEY}")),
            ],
            body,
        )
        .await
    }

    /// The one pending review this replica lists, once there is one.
    async fn pending_review(&self) -> String {
        support::eventually("a pending review", Duration::from_secs(10), || async {
            let list = self.get("/v2/reviews?status=pending").await.json();
            match list["reviews"].as_array().map(Vec::as_slice) {
                Some([one]) => Ok(one["review_id"].as_str().unwrap().to_string()),
                _ => Err(list),
            }
        })
        .await
    }

    async fn review(&self, id: &str) -> Value {
        self.get(&format!("/v2/reviews/{id}")).await.json()
    }

    /// The review once its forward is in `state` (within 15 s: a lease
    /// of 1 s to lapse, then a takeover round).
    async fn forward_reaches(&self, id: &str, state: &str) -> Value {
        support::eventually(state, Duration::from_secs(15), || async {
            let v = self.review(id).await;
            if v["forward"]["state"] == state {
                Ok(v)
            } else {
                Err(v)
            }
        })
        .await
    }

    /// `kill -9`: no drain, no lease ended.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two replicas on a fresh database, each in front of its own upstream.
async fn pair(hold: &str) -> Option<(Replica, MockUpstream, Replica, MockUpstream)> {
    let url = support::postgres::fresh_database()?;
    let key = [7u8; 32];
    let (up_a, up_b) = (MockUpstream::start().await, MockUpstream::start().await);
    let a = Replica::start(&url, &up_a.url(), hold, &key);
    let b = Replica::start(&url, &up_b.url(), hold, &key);
    Some((a, up_a, b, up_b))
}

/// Held through A, listed and approved through B: A's waiting client gets
/// the upstream's answer, A's upstream sees the call once, B's never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_held_on_one_replica_is_approved_on_the_other_and_forwarded_once() {
    let Some((a, up_a, b, up_b)) = pair("30s").await else {
        return;
    };
    let a = Arc::new(a);
    let held = tokio::spawn({
        let a = a.clone();
        async move { a.refund(900).await }
    });
    let id = b.pending_review().await;
    assert_eq!(a.pending_review().await, id, "both replicas list it");
    let approved = b.resolve(&id, "approve").await;
    assert_eq!(approved.status, 200, "{}", approved.text());
    let answer = support::within(Duration::from_secs(10), "the held call", held)
        .await
        .unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.json()["path"], "/api/orders/77/refunds");
    assert_eq!(up_a.count(), 1);
    assert_eq!(up_b.count(), 0, "B never forwards A's call");
    let seen = b.review(&id).await;
    assert_eq!(seen["forward"]["state"], "done", "{seen}");
    assert_eq!(seen["forward"]["upstream_status"], 200, "{seen}");
    // A second approval is refused on either replica.
    a.resolve(&id, "approve")
        .await
        .assert_error(409, "conflict");
}

/// The same approval sent to both replicas at the same moment, 200 times:
/// one 200 and one 409 each time, and exactly one forward.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_approvals_on_two_replicas_forward_exactly_once() {
    let Some((a, up_a, b, up_b)) = pair("30s").await else {
        return;
    };
    let (a, b) = (Arc::new(a), Arc::new(b));
    for round in 0..200 {
        let held = tokio::spawn({
            let a = a.clone();
            async move { a.refund(900).await }
        });
        let id = a.pending_review().await;
        let (ra, rb) = tokio::join!(a.resolve(&id, "approve"), b.resolve(&id, "approve"));
        let mut statuses = [ra.status, rb.status];
        statuses.sort_unstable();
        assert_eq!(
            statuses,
            [200, 409],
            "round {round}: {} / {}",
            ra.text(),
            rb.text()
        );
        let answer = support::within(Duration::from_secs(10), "the held call", held)
            .await
            .unwrap();
        assert_eq!(answer.status, 200, "round {round}: {}", answer.text());
        assert_eq!(up_a.count(), round + 1, "round {round}: one forward each");
    }
    assert_eq!(up_b.count(), 0);
}

/// A dies (`kill -9`) with its held call approved but not forwarded: once
/// its lease lapses, B forwards the call to its own upstream, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_left_by_a_dead_replica_is_forwarded_once_by_another() {
    // A short hold: the client gets its 202 and leaves, so only the
    // background forwarders can send the call.
    let Some((mut a, up_a, b, up_b)) = pair("200ms").await else {
        return;
    };
    let r = a.refund(900).await;
    assert_eq!(r.status, 202, "{}", r.text());
    let id = r.json()["review_id"].as_str().unwrap().to_string();
    a.kill();
    let approved = b.resolve(&id, "approve").await;
    assert_eq!(approved.status, 200, "{}", approved.text());
    let seen = b.forward_reaches(&id, "done").await;
    assert_eq!(seen["forward"]["upstream_status"], 200, "{seen}");
    assert_eq!(up_b.count(), 1);
    assert_eq!(up_a.count(), 0);
    // Later takeover rounds find nothing more to send.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(up_b.count(), 1, "forwarded exactly once");
}

/// A dies in the middle of forwarding: the forward ends `outcome_unknown`
/// on the other replica, and nobody sends it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_in_flight_on_a_dead_replica_ends_outcome_unknown() {
    let Some(url) = support::postgres::fresh_database() else {
        return;
    };
    let key = [7u8; 32];
    // A's upstream never answers the refund.
    let received = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (stuck_addr, _stuck) = support::serve_http({
        let received = received.clone();
        move |_parts, _body| {
            let received = received.clone();
            async move {
                received.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(600)).await;
                let body: support::TestBody =
                    http_body_util::BodyExt::boxed(http_body_util::Full::new(bytes::Bytes::new()));
                http::Response::new(body)
            }
        }
    })
    .await;
    let up_b = MockUpstream::start().await;
    let mut a = Replica::start(&url, &format!("http://{stuck_addr}"), "30s", &key);
    let b = Replica::start(&url, &up_b.url(), "30s", &key);
    let held = tokio::spawn({
        let proxy = a.proxy.clone();
        async move {
            support::call(
                &proxy,
                Method::POST,
                "/api/orders/77/refunds",
                &[("content-type", "application/json")],
                refund_body(900),
            )
            .await
        }
    });
    let id = b.pending_review().await;
    assert_eq!(b.resolve(&id, "approve").await.status, 200);
    support::wait_for("A forwards", Duration::from_secs(10), || {
        received.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(b.review(&id).await["forward"]["state"], "started");
    a.kill();
    held.abort();
    let seen = b.forward_reaches(&id, "outcome_unknown").await;
    assert_eq!(seen["status"], "approved", "{seen}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(up_b.count(), 0, "never sent again");
    assert_eq!(received.load(std::sync::atomic::Ordering::SeqCst), 1);
    drop(b);
}

/// `verdict serve` in a replica's `dir` with `config` and a data dir
/// `data` of its own, run to its exit: for a start that must be refused.
fn serve_once(dir: &std::path::Path, config: &std::path::Path, data: &str) -> std::process::Output {
    std::process::Command::new(BIN)
        .args(["serve", "--api-listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .arg("--data-dir")
        .arg(dir.join(data))
        .arg("--policies")
        .arg(dir.join("policies"))
        .arg("--keys")
        .arg(dir.join("keys.toml"))
        .output()
        .unwrap()
}

fn refund_body(amount: u64) -> String {
    format!(
        "{{\"amount\": {amount}, \"claims\": [{}], \"evidence\": [{{\"source_id\":\"inv\",\"text\":{}}}]}}",
        serde_json::to_string(DAMAGED).unwrap(),
        serde_json::to_string(INVOICE_77_BLENDER).unwrap()
    )
}

/// A batch call as the app key, to `base`.
async fn batch_call(
    base: &str,
    method: Method,
    path: &str,
    key: Option<&str>,
    body: String,
) -> support::Resp {
    let auth = format!("Bearer {APP_KEY}");
    let mut headers = vec![
        ("content-type", "application/json"),
        ("authorization", auth.as_str()),
    ];
    if let Some(k) = key {
        headers.push(("idempotency-key", k));
    }
    support::call(base, method, path, &headers, body).await
}

fn batch_body(n: usize) -> String {
    let items: Vec<Value> = (0..n)
        .map(|i| serde_json::json!({"claims": [format!("Order {i} was refunded.")], "sources": [{"id": "s", "text": format!("Order {i} was refunded in full.")}]}))
        .collect();
    serde_json::json!({ "jobs": items }).to_string()
}

/// A job submitted through A is polled through B; A is killed mid-job
/// and B finishes it, with exactly one result for every item, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_submitted_to_one_replica_is_finished_by_the_other_after_a_kill() {
    let Some(url) = support::postgres::fresh_database() else {
        return;
    };
    let key = [7u8; 32];
    let mut a = Replica::start(&url, "http://127.0.0.1:9", "1s", &key);
    let n = 4000;
    let r = batch_call(
        &a.api,
        Method::POST,
        "/v1/verify-claims-batch",
        None,
        batch_body(n),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.text());
    let id = r.json()["job_id"].as_str().unwrap().to_string();
    let path = format!("/v2/jobs/{id}?limit={n}");
    let under_way = support::eventually("the job under way", Duration::from_secs(60), || async {
        let j = batch_call(&a.api, Method::GET, &path, None, String::new())
            .await
            .json();
        match j["progress"]["done"].as_u64() {
            Some(d) if d > 0 => Ok(j),
            _ => Err(j),
        }
    })
    .await;
    assert!(
        under_way["progress"]["done"].as_u64().unwrap() < n as u64,
        "finished before the kill: {under_way}"
    );
    a.kill();
    let b = Replica::start(&url, "http://127.0.0.1:9", "1s", &key);
    let every = Duration::from_millis(100);
    let done = support::eventually_every(
        "B finishes the job",
        Duration::from_secs(120),
        every,
        || async {
            let j = batch_call(&b.api, Method::GET, &path, None, String::new())
                .await
                .json();
            assert_ne!(j["status"], "failed", "{j}");
            if j["status"] == "succeeded" {
                Ok(j)
            } else {
                Err(j["progress"].clone())
            }
        },
    )
    .await;
    assert_eq!(done["progress"]["done"], n, "{}", done["progress"]);
    let results = done["results"].as_array().unwrap();
    assert_eq!(results.len(), n);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["index"], i, "one result per item, in order: {r}");
    }
}

/// The value of the unlabelled Prometheus sample `name` at `base`.
async fn sample(base: &str, name: &str) -> f64 {
    let text = support::call(base, Method::GET, "/metrics", &[], String::new())
        .await
        .text();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0)
}

/// Two replicas with two workers each share one 10 000-item job: no
/// deadlock in the database, none counted, and (almost) no item run twice.
/// Before the item path took its locks in one order, this ran 15 776 items
/// for 10 000 with dozens of deadlocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_a_large_job_without_deadlocks_or_reruns() {
    let Some(url) = support::postgres::fresh_database() else {
        return;
    };
    let key = [7u8; 32];
    let config = format!("[store]\nurl = \"{url}\"\nlease = \"2s\"\n[jobs]\nworkers = 2\n");
    let a = Replica::with_config("http://127.0.0.1:9", "1s", &key, &config);
    let b = Replica::with_config("http://127.0.0.1:9", "1s", &key, &config);
    let n = 10_000;
    let r = batch_call(
        &a.api,
        Method::POST,
        "/v1/verify-claims-batch",
        None,
        batch_body(n),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.text());
    let id = r.json()["job_id"].as_str().unwrap().to_string();
    let path = format!("/v2/jobs/{id}?limit=1");
    support::eventually_every(
        "the job succeeds",
        Duration::from_secs(300),
        Duration::from_millis(250),
        || async {
            let j = batch_call(&b.api, Method::GET, &path, None, String::new())
                .await
                .json();
            assert_ne!(j["status"], "failed", "{j}");
            if j["status"] == "succeeded" {
                Ok(())
            } else {
                Err(j["progress"].clone())
            }
        },
    )
    .await;
    let mut runs = 0.0;
    for r in [&a, &b] {
        let ran = sample(&r.api, "verdict_jobs_items_processed_total").await;
        assert!(ran > 0.0, "both replicas ran items: {ran} on {}", r.api);
        runs += ran;
        let deadlocks = sample(&r.api, "verdict_store_errors_total{kind=\"deadlock\"}").await;
        assert_eq!(deadlocks, 0.0, "deadlocks counted on {}", r.api);
    }
    assert!(runs <= n as f64 * 1.01, "{runs} item runs for {n} items");
    let deadlocks = support::postgres::psql(
        &url,
        "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
    )
    .unwrap();
    assert_eq!(deadlocks.trim(), "0", "deadlocks in the database");
}

/// The same `Idempotency-Key` and body sent to A and B at once: one job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_idempotency_key_sent_to_two_replicas_makes_one_job() {
    let Some((a, _up_a, b, _up_b)) = pair("1s").await else {
        return;
    };
    for round in 0..20 {
        let key = format!("refund-batch-{round}");
        let body = batch_body(3);
        let (ra, rb) = tokio::join!(
            batch_call(
                &a.api,
                Method::POST,
                "/v1/verify-claims-batch",
                Some(&key),
                body.clone()
            ),
            batch_call(
                &b.api,
                Method::POST,
                "/v1/verify-claims-batch",
                Some(&key),
                body
            ),
        );
        let mut statuses = [ra.status, rb.status];
        statuses.sort_unstable();
        assert_eq!(
            statuses,
            [200, 202],
            "round {round}: {} / {}",
            ra.text(),
            rb.text()
        );
        assert_eq!(ra.json()["job_id"], rb.json()["job_id"], "round {round}");
    }
}

/// The shared store goes away under a running replica: a call that needs a
/// hold fails closed (503, nothing reaches the upstream), while
/// `/v2/authorize` and the pass-through keep working and the outage shows
/// in the metrics. When the store comes back, holds work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_fails_holds_closed_and_leaves_the_rest_working() {
    let Some(url) = support::postgres::fresh_database() else {
        return;
    };
    let db = url
        .rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_string();
    // The owner (the URL's role) can close its database to connections
    // and end its own sessions; this runs from the cluster's `verdict` db.
    let control = support::postgres::with_database(&url, "verdict");
    let set_open = |open: bool| {
        support::postgres::psql(
            &control,
            &format!(
                "ALTER DATABASE {db} ALLOW_CONNECTIONS {open}; \
                 SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = '{db}' AND pid <> pg_backend_pid();"
            ),
        )
        .unwrap();
    };
    let up = MockUpstream::start().await;
    let a = Replica::start(&url, &up.url(), "1ms", &[7u8; 32]);
    set_open(false);

    let held = a.refund(900).await;
    held.assert_error(503, "unavailable");
    assert!(
        !held.text().contains("connect"),
        "no driver text: {}",
        held.text()
    );
    assert_eq!(up.count(), 0, "nothing forwarded");

    let authorize = support::call(
        &a.api,
        Method::POST,
        "/v2/authorize",
        &[
            ("content-type", "application/json"),
            ("authorization", &format!("Bearer {APP_KEY}")),
        ],
        serde_json::json!({
            "action": {"type": "refund.create", "params": {"order_id": "77", "amount": 100}},
            "claims": [DAMAGED],
            "sources": [{"source_id": "inv", "text": INVOICE_77_BLENDER}],
        })
        .to_string(),
    )
    .await;
    assert_eq!(authorize.status, 200, "{}", authorize.text());
    let passed = support::call(&a.proxy, Method::GET, "/health-of-the-app", &[], "").await;
    assert_eq!(passed.status, 200, "{}", passed.text());
    assert_eq!(up.count(), 1, "the pass-through reached the upstream");
    // The hold above may have failed on a pooled connection the outage
    // ended (a failed statement, not counted as a connect error); the next
    // attempt to connect, at the latest the lease renewal's, is counted.
    support::eventually(
        "a connect error in the metrics",
        Duration::from_secs(15),
        || async {
            let metrics = support::call(&a.api, Method::GET, "/metrics", &[], "")
                .await
                .text();
            let counted = metrics.lines().any(|l| {
                l.starts_with("verdict_store_errors_total{kind=\"connect\"}") && !l.ends_with(" 0")
            });
            if counted {
                Ok(())
            } else {
                Err(metrics)
            }
        },
    )
    .await;

    set_open(true);
    let again = support::eventually("holds work again", Duration::from_secs(15), || async {
        let r = a.refund(901).await;
        if r.status == 202 {
            Ok(r)
        } else {
            Err(r.text())
        }
    })
    .await;
    assert_eq!(again.json()["status"], "pending");
}

/// Each replica publishes its signed checkpoints to the shared store, and
/// `verdict audit verify-remote` checks every replica's chain; a rewritten
/// checkpoint is caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_remote_checks_every_replicas_published_checkpoints() {
    let Some(url) = support::postgres::fresh_database() else {
        return;
    };
    let key = [7u8; 32];
    let a = Replica::start_as(
        &url,
        "http://127.0.0.1:9",
        "1s",
        &key,
        Some("verdict.test/a"),
    );
    let b = Replica::start_as(
        &url,
        "http://127.0.0.1:9",
        "1s",
        &key,
        Some("verdict.test/b"),
    );
    let decide = |r: &Replica, i: u64| {
        let api = r.api.clone();
        async move {
            let resp = support::call(
                &api,
                Method::POST,
                "/v2/authorize",
                &[
                    ("content-type", "application/json"),
                    ("authorization", &format!("Bearer {APP_KEY}")),
                ],
                serde_json::json!({
                    "action": {"type": "refund.create", "params": {"order_id": "77", "amount": i}},
                    "claims": [DAMAGED],
                    "sources": [{"source_id": "inv", "text": INVOICE_77_BLENDER}],
                })
                .to_string(),
            )
            .await;
            assert_eq!(resp.status, 200, "{}", resp.text());
        }
    };
    let published = |origin: &'static str, at_least: usize| {
        let url = url.clone();
        async move {
            support::eventually(origin, Duration::from_secs(20), || async {
                let n: usize = support::postgres::psql(
                    &url,
                    &format!("SELECT count(*) FROM verdict_checkpoints WHERE origin = '{origin}'"),
                )?
                .parse()
                .map_err(|e| format!("{e}"))?;
                if n >= at_least {
                    Ok(n)
                } else {
                    Err(format!("{n} published"))
                }
            })
            .await
        }
    };
    // Two rounds of decisions on each replica, each round published.
    for round in 1..=2 {
        for i in 0..3 {
            decide(&a, round * 10 + i).await;
            decide(&b, round * 10 + i).await;
        }
        published("verdict.test/a", round as usize).await;
        published("verdict.test/b", round as usize).await;
    }
    let verify = || {
        std::process::Command::new(BIN)
            .args(["audit", "verify-remote", "--store", &url])
            .output()
            .unwrap()
    };
    let out = verify();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("ok: verdict.test/a:"), "{text}");
    assert!(text.contains("ok: verdict.test/b:"), "{text}");

    // A replica rewrites its newest published checkpoint with another
    // (validly signed) one of the same log: it no longer extends the last.
    support::postgres::psql(
        &url,
        "UPDATE verdict_checkpoints SET note = (SELECT note FROM verdict_checkpoints \
         WHERE origin = 'verdict.test/a' ORDER BY tree_size LIMIT 1), proof_json = proof_json \
         WHERE origin = 'verdict.test/a' AND tree_size = (SELECT MAX(tree_size) \
         FROM verdict_checkpoints WHERE origin = 'verdict.test/a')",
    )
    .unwrap();
    let out = verify();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("INVALID: verdict.test/a:"), "{text}");
    assert!(text.contains("ok: verdict.test/b:"), "{text}");

    // A replica with a new, empty log under b's origin (its data dir lost
    // or replaced) would fork b's published chain: it refuses to start.
    let dir = b.dir.path();
    let config = dir.join("forked.toml");
    std::fs::write(
        &config,
        format!("[store]\nurl = \"{url}\"\n[audit]\norigin = \"verdict.test/b\"\n"),
    )
    .unwrap();
    let out = serve_once(dir, &config, "data-new");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(64), "{text}");
    assert!(
        text.contains("\"verdict.test/b\" up to tree size")
            && text.contains("this log has 0 records"),
        "{text}"
    );
    drop((a, b));
}

/// `sslmode=require` with `ca_file`: the replica reaches the store over TLS
/// (rustls) and holds calls there; with roots that do not cover the
/// server's certificate it refuses to start (exit 64) and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_is_reached_over_tls_and_a_wrong_root_refuses_to_start() {
    let Some(url) = support::postgres::fresh_database() else {
        return;
    };
    let Some(ca) = support::postgres::ca_file() else {
        eprintln!("skipping: the test cluster has no TLS (started without openssl, or VERDICT_TEST_POSTGRES_URL)");
        return;
    };
    let tls_url = url.replace("sslmode=disable", "sslmode=require");
    assert!(tls_url.contains("sslmode=require"), "{tls_url}");
    // The right root: a hold is stored over TLS.
    let up = MockUpstream::start().await;
    let store = format!(
        "[store]\nurl = \"{tls_url}\"\nca_file = \"{}\"\n",
        ca.display()
    );
    let replica = Replica::with_config(&up.url(), "1ms", &[7u8; 32], &store);
    let health = support::eventually(
        "the shared store over TLS",
        Duration::from_secs(10),
        || async {
            let h = support::call(&replica.api, Method::GET, "/health/detailed", &[], "")
                .await
                .json();
            if h["components"]["shared_store"]["status"] == "ok" {
                Ok(h)
            } else {
                Err(h)
            }
        },
    )
    .await;
    assert_eq!(
        health["components"]["shared_store"]["schema_version"], 5,
        "{health}"
    );
    let ssl = support::postgres::psql(
        &url,
        "SELECT count(*) FILTER (WHERE NOT s.ssl) || '/' || count(*) FROM pg_stat_ssl s \
         JOIN pg_stat_activity a USING (pid) \
         WHERE a.datname = current_database() AND a.application_name = ''",
    )
    .unwrap();
    assert!(
        ssl.starts_with("0/") && ssl != "0/0",
        "plain/all connections of the replica: {ssl}"
    );
    // Roots that do not cover the server's certificate (the system's), on
    // a second server beside the first.
    let dir = replica.dir.path();
    let config = dir.join("verdict.toml");
    std::fs::write(&config, format!("[store]\nurl = \"{tls_url}\"\n")).unwrap();
    let out = serve_once(dir, &config, "data2");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(64), "{text}");
    assert!(
        text.contains("certificate") || text.contains("UnknownIssuer"),
        "{text}"
    );
    assert!(
        !text.contains(url.split('@').next().unwrap().rsplit(':').next().unwrap()),
        "no password in: {text}"
    );
    // Refused before it wrote anything to its (new) data dir.
    assert!(!dir.join("data2/redaction.key").exists());
    assert!(!dir.join("data2/verdict.db").exists());

    // A wrong password: refused the same way, the data dir left empty.
    let (user, rest) = url.split_once('@').unwrap();
    let user = user.rsplit_once(':').map_or(user, |(u, _)| u);
    std::fs::write(
        &config,
        format!("[store]\nurl = \"{user}:wrong-password@{rest}\"\n"),
    )
    .unwrap();
    let out = serve_once(dir, &config, "data3");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(64), "{text}");
    assert!(!text.contains("wrong-password"), "no password in: {text}");
    assert!(!dir.join("data3/redaction.key").exists());
    assert!(!dir.join("data3/verdict.db").exists());
}
