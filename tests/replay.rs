//! `verdict replay`: decisions recorded through the proxy and the API,
//! re-decided from their captured inputs. The set that decided them
//! reproduces every one; a draft reports exactly the flips this test
//! computes on its own; a stored input that does not match its record stops
//! the run; inputs deleted by retention are missing, never flips; and
//! deleting them leaves the log verifiable.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::Method;
use serde_json::json;
use support::{MockUpstream, RefundPolicy, TestServer, APP_KEY};
use verdict::offline::replay::{self, Args, Report};

const EV: &str = "Invoice 7: amount charged $400.00 for order 7.";
const SUPPORTED: &str = "Order 7 was charged $400.00.";
const CONTRADICTED: &str = "Order 7 was charged $900.00.";

/// Strict refunds, above `limit` to review; the route answers a review
/// with 403 (no hold), so every proxied call names its record.
fn policy(limit: u64) -> String {
    RefundPolicy::new("strict").review_over(limit).build() + "on_review = \"deny\"\n"
}

async fn server(up: &MockUpstream, edit: impl FnOnce(&mut verdict::config::Config)) -> TestServer {
    let url = up.url();
    TestServer::start_with(|c| {
        std::fs::write(c.policies_dir.join("refunds.toml"), policy(500)).unwrap();
        c.proxy.upstream = Some(url);
        edit(c);
    })
    .await
}

/// A policy dir holding the refund policy with another review threshold.
fn draft(s: &TestServer, limit: u64) -> PathBuf {
    let dir = s.path(&format!("draft-{limit}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("refunds.toml"), policy(limit)).unwrap();
    dir
}

fn args(s: &TestServer, draft: PathBuf) -> Args {
    Args {
        draft,
        baseline: s.path("policies"),
        data_dir: s.path("data"),
        since: Duration::from_secs(3600),
        route: None,
        json: false,
    }
}

/// Runs the replay off the test's runtime (it starts its own).
async fn run(args: &Args) -> (u8, Report, String) {
    let mut a = args.clone();
    a.json = true;
    let out = tokio::task::spawn_blocking(move || {
        replay::replay(
            &a,
            verdict::config::Config::defaults(&Default::default()).unwrap(),
        )
    })
    .await
    .unwrap();
    let report: Report = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} / {}", out.stdout, out.stderr));
    (out.code, report, out.stdout)
}

/// One refund of `amount`, through the proxy or the API; returns the
/// amount, the decision the caller saw and its record id.
async fn refund(api: String, proxy: String, i: usize, amount: u64) -> (u64, String, String) {
    let claim = if i.is_multiple_of(10) {
        CONTRADICTED
    } else {
        SUPPORTED
    };
    if i.is_multiple_of(2) {
        let body = json!({"amount": amount, "claims": [claim],
            "evidence": [{"source_id": "inv", "text": EV}]});
        let r = support::call(
            &proxy,
            Method::POST,
            "/api/orders/7/refunds",
            &[("content-type", "application/json")],
            body.to_string(),
        )
        .await;
        let id = r
            .header("x-verdict-record-id")
            .unwrap_or_else(|| panic!("{} {}", r.status, r.text()))
            .to_string();
        let decision = match r.status {
            200 => "allow".to_string(),
            _ => r.json()["decision"].as_str().unwrap().to_string(),
        };
        (amount, decision, id)
    } else {
        let mut body = json!({
            "action": {"type": "refund.create", "params": {"order_id": "7", "amount": amount}},
            "claims": [{"text": claim}],
            "sources": [{"source_id": "inv", "text": EV}],
            "response": {"mode": "verbose"},
        });
        // Some calls send an answer (output mode), some a source the
        // server cannot read: both must replay as they were decided.
        if i % 6 == 1 {
            body.as_object_mut().unwrap().remove("claims");
            body["answer"] = json!(claim);
        }
        if i % 6 == 3 {
            body["sources"] = json!([{"source_id": "inv", "text": EV},
                {"source_id": "gone", "uri": "file:///nonexistent/invoice.txt"}]);
        }
        let auth = format!("Bearer {APP_KEY}");
        let r = support::call(
            &api,
            Method::POST,
            "/v2/authorize",
            &[
                ("content-type", "application/json"),
                ("authorization", &auth),
            ],
            body.to_string(),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let j = r.json();
        (
            amount,
            j["decision"].as_str().unwrap().to_string(),
            j["audit"]["record_id"].as_str().unwrap().to_string(),
        )
    }
}

/// `n` refunds, 32 at a time: record id → (amount, decision seen).
async fn record(s: &TestServer, n: usize) -> HashMap<String, (u64, String)> {
    let api = s.url("");
    let proxy = format!("http://{}", s.proxy_addr());
    let mut out = HashMap::new();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let amount = (i as u64 * 37) % 1000 + 1;
        set.spawn(refund(api.clone(), proxy.clone(), i, amount));
        if set.len() >= 32 {
            let (amount, d, id) = set.join_next().await.unwrap().unwrap();
            out.insert(id, (amount, d));
        }
    }
    while let Some(j) = set.join_next().await {
        let (amount, d, id) = j.unwrap();
        out.insert(id, (amount, d));
    }
    assert_eq!(out.len(), n, "every decision has its own record");
    out
}

#[tokio::test]
async fn a_draft_reports_exactly_the_flips_computed_here_and_the_set_reproduces_all() {
    let up = MockUpstream::start().await;
    let s = server(&up, |_| {}).await;
    let seen = record(&s, 1000).await;
    let decided = |d: &str| seen.values().filter(|(_, x)| x == d).count();
    assert!(
        decided("allow") > 100 && decided("needs_review") > 100 && decided("deny") > 50,
        "the traffic mixes outcomes"
    );

    // The set that decided them reproduces every decision.
    let same = s.path("policies");
    let (code, r, out) = run(&args(&s, same)).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        (r.decisions, r.replayed, r.missing, r.not_captured),
        (1000, 1000, 0, 0),
        "{out}"
    );
    assert_eq!(
        (r.baseline_compared, r.baseline_reproduced),
        (1000, 1000),
        "{out}"
    );
    assert!(r.flips.is_empty() && r.unchanged == 1000, "{out}");

    // A draft that sends refunds above 300 (not 500) to review: what it
    // flips, computed here from the amounts and the decisions seen.
    let expected: Vec<&String> = seen
        .iter()
        .filter(|(_, (amount, d))| d == "allow" && *amount > 300)
        .map(|(id, _)| id)
        .collect();
    assert!(expected.len() > 50, "{}", expected.len());
    let (code, r, out) = run(&args(&s, draft(&s, 300))).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(r.flips.len(), 1, "{out}");
    let flip = &r.flips[0];
    assert_eq!(
        (flip.from.as_str(), flip.to.as_str()),
        ("allow", "needs_review")
    );
    assert_eq!(flip.count, expected.len() as u64, "{out}");
    assert_eq!(r.newly_review, expected.len() as u64);
    assert_eq!(r.unchanged, 1000 - expected.len() as u64);
    for id in &flip.examples {
        assert!(expected.contains(&id), "{id} is not a flip: {out}");
    }

    // The text report, through the real binary, beside the running server.
    let out = replay_cli(&s, "draft-300");
    support::assert_exit(&out, 0);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("reproduced 1000 of 1000"), "{text}");
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("allow")
            && l.contains("needs_review")
            && l.contains(&expected.len().to_string())),
        "{text}"
    );
    assert!(
        text.contains(&format!("{} newly sent to review", expected.len())),
        "{text}"
    );

    // --route keeps the proxy's half.
    let mut proxied = args(&s, s.path("policies"));
    proxied.route = Some("create-refund".into());
    let (_, r, out) = run(&proxied).await;
    assert_eq!(r.decisions, 500, "{out}");
}

/// `verdict replay` (the real binary) of the last hour with the draft in
/// `s.path(draft)`, against the server's policies and data dir.
fn replay_cli(s: &TestServer, draft: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["replay", "--since", "1h", "--policies"])
        .arg(s.path(draft))
        .arg("--baseline")
        .arg(s.path("policies"))
        .arg("--data-dir")
        .arg(s.path("data"))
        .output()
        .unwrap()
}

fn tamper(db: &Path, record_id: &str) {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let id = uuid::Uuid::parse_str(record_id).unwrap();
    let input: String = conn
        .query_row(
            "SELECT input FROM audit_inputs WHERE record_id = ?1",
            [id.as_bytes().as_slice()],
            |r| r.get(0),
        )
        .unwrap();
    let changed = input.replace("\"amount\":", "\"amount\":1");
    assert_ne!(changed, input);
    conn.execute(
        "UPDATE audit_inputs SET input = ?1 WHERE record_id = ?2",
        rusqlite::params![changed, id.as_bytes().as_slice()],
    )
    .unwrap();
}

fn inputs_stored(db: &Path) -> u64 {
    let conn = verdict::audit::sqlite::open_reader(db).unwrap();
    verdict::audit::inputs::count(&conn).unwrap()
}

#[tokio::test]
async fn an_input_that_does_not_match_its_record_stops_the_replay() {
    let up = MockUpstream::start().await;
    let s = server(&up, |_| {}).await;
    let seen = record(&s, 20).await;
    let victim = seen.keys().next().unwrap();
    tamper(&s.path("data/verdict.db"), victim);

    let out = replay_cli(&s, "policies");
    support::assert_exit(&out, 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(victim.as_str()) && err.contains("input_hash"),
        "{err}"
    );
}

#[tokio::test]
async fn inputs_deleted_by_retention_are_missing_and_the_log_still_verifies() {
    let up = MockUpstream::start().await;
    let s = server(&up, |c| {
        c.audit.input_retention = Duration::from_millis(400);
    })
    .await;
    let db = s.path("data/verdict.db");
    record(&s, 6).await;
    assert!(inputs_stored(&db) > 0);
    support::wait_for("the retention sweep", Duration::from_secs(10), || {
        inputs_stored(&db) == 0
    })
    .await;
    // Decided after the sweep, and replayed before the next one can reach
    // them (a sweep deletes inputs older than 400 ms).
    let kept = record(&s, 2).await;
    let (code, r, out) = run(&args(&s, s.path("policies"))).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(r.decisions, 8, "{out}");
    assert_eq!(r.missing + r.replayed, 8, "{out}");
    assert!(r.missing >= 6, "{out}");
    assert!(r.flips.is_empty(), "missing inputs are not flips: {out}");
    assert_eq!(kept.len(), 2);

    // The records stand: every leaf still verifies.
    let report = verdict::audit::verify_log(&db, &s.path("data"), |_, _| {}).unwrap();
    assert!(report.records >= 8, "{report:?}");
}

#[tokio::test]
async fn with_capture_off_records_name_no_input() {
    let up = MockUpstream::start().await;
    let s = server(&up, |c| c.audit.capture_inputs = false).await;
    let seen = record(&s, 4).await;
    let id = seen.keys().next().unwrap();
    let rec = s
        .get(&format!("/v2/audit/{id}"), Some(APP_KEY))
        .await
        .json();
    assert!(rec.get("input_hash").is_none(), "{rec}");
    assert_eq!(inputs_stored(&s.path("data/verdict.db")), 0);
    let (code, r, out) = run(&args(&s, s.path("policies"))).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        (r.decisions, r.not_captured, r.replayed),
        (4, 4, 0),
        "{out}"
    );
}

/// A draft that adds a deny rule: a call that was denied for its claims is
/// now denied by the rule. That is a change, as the shadow set counts one,
/// reported apart from the flips and never as unchanged.
#[tokio::test]
async fn a_reason_only_change_is_reported_apart_from_flips() {
    let up = MockUpstream::start().await;
    let s = server(&up, |_| {}).await;
    let seen = record(&s, 300).await;
    let over = |d: Option<&str>| {
        seen.values()
            .filter(|(amount, x)| *amount > 900 && d.is_none_or(|d| x == d))
            .count() as u64
    };
    let denied_over = over(Some("deny"));
    assert!(
        denied_over > 0 && over(None) > denied_over,
        "the traffic has both kinds"
    );
    let dir = s.path("draft-deny");
    std::fs::create_dir_all(&dir).unwrap();
    let text = RefundPolicy::new("strict")
        .review_over(500)
        .rule("amount", "gt", Some("900"), "deny", None)
        .build()
        + "on_review = \"deny\"\n";
    std::fs::write(dir.join("refunds.toml"), text).unwrap();
    let (code, r, out) = run(&args(&s, dir)).await;
    assert_eq!(code, 0, "{out}");
    let reasons: u64 = r.reason_changes.iter().map(|c| c.count).sum();
    assert_eq!(reasons, denied_over, "{out}");
    for c in &r.reason_changes {
        assert_eq!(
            (c.decision.as_str(), c.to.as_str()),
            ("deny", "policy_violation"),
            "{out}"
        );
        assert_ne!(c.from, "policy_violation", "{out}");
    }
    let flipped: u64 = r.flips.iter().map(|f| f.count).sum();
    assert_eq!(flipped, over(None) - denied_over, "{out}");
    assert_eq!(r.unchanged + flipped + reasons, 300, "{out}");
}
