//! `verdict reviews` (the real binary) against a real sidecar holding a
//! call: list shows it, show reads it, approve resolves it, a second
//! approve prints the server's 409 and exits non-zero, `--json` parses, and
//! a missing key, an unknown id or a key without the review scope each get
//! a one-line error.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::held;
use crate::support;

use std::process::Output;

use held::{env_with, refund};
use support::{APP_KEY, REVIEW_KEY};

/// Runs `verdict reviews --url URL <args>` off the runtime (the server
/// runs on it), with `key` as VERDICT_KEY.
async fn cli(url: &str, key: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_verdict"));
    cmd.arg("reviews")
        .args(args)
        .args(["--url", url])
        .env_remove("VERDICT_KEY")
        .env_remove("VERDICT_URL")
        .env_remove("VERDICT_REVIEWER")
        .env("USER", "cli-tester");
    if let Some(k) = key {
        cmd.env("VERDICT_KEY", k);
    }
    tokio::task::spawn_blocking(move || cmd.output().expect("the binary runs"))
        .await
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test]
async fn reviews_cli_lists_shows_approves_and_reports_refusals() {
    let e = env_with("200ms", |_| {}).await;
    let r = refund(&e, 900).await;
    assert_eq!(r.status, 202, "{}", r.text());
    let id = r.json()["review_id"].as_str().unwrap().to_string();
    let url = format!("http://{}", e.s.addr);

    let list = cli(&url, Some(REVIEW_KEY), &["list", "--status", "pending"]).await;
    assert!(list.status.success(), "{}", stderr(&list));
    let out = stdout(&list);
    let mut lines = out.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("REVIEW ID") && header.contains("ROUTE"),
        "{out}"
    );
    let row = lines.next().unwrap();
    assert!(row.starts_with(&id), "{out}");
    assert!(
        row.contains("pending") && row.contains("create-refund"),
        "{out}"
    );

    let json = cli(&url, Some(REVIEW_KEY), &["list", "--json", "--limit", "5"]).await;
    assert!(json.status.success(), "{}", stderr(&json));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("--json is JSON");
    assert_eq!(v["reviews"][0]["review_id"], id.as_str());

    let show = cli(&url, Some(REVIEW_KEY), &["show", &id]).await;
    assert!(show.status.success(), "{}", stderr(&show));
    let out = stdout(&show);
    assert!(out.contains("refunds above 500 need a reviewer"), "{out}");
    assert!(out.contains("POST /api/orders/77/refunds"), "{out}");
    // The reviewer sees what is being approved: the amount and the claims.
    assert!(out.contains("amount = 900"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("claims") && l.contains("[supported]")),
        "{out}"
    );

    let ok = cli(
        &url,
        Some(REVIEW_KEY),
        &["approve", &id, "--note", "matches the invoice"],
    )
    .await;
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert_eq!(
        stdout(&ok),
        format!("approved {id} (reviewer cli-tester)\n")
    );
    let g =
        e.s.get(&format!("/v2/reviews/{id}"), Some(REVIEW_KEY))
            .await
            .json();
    assert_eq!(g["status"], "approved");
    assert_eq!(g["note"], "matches the invoice");

    // A second approval: the server's 409, one line, exit 1.
    let again = cli(
        &url,
        Some(REVIEW_KEY),
        &["approve", &id, "--note", "again", "--reviewer", "bob"],
    )
    .await;
    assert_eq!(again.status.code(), Some(1));
    let err = stderr(&again);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("review {id} is already approved")) && err.contains("409"),
        "{err}"
    );
    assert!(stdout(&again).is_empty());

    let shown = cli(&url, Some(REVIEW_KEY), &["show", &id, "--json"]).await;
    let v: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("--json is JSON");
    assert_eq!(v["reviewer"], "cli-tester");

    // Unknown id: 404. A key without the review scope: 403. No key: exit 2.
    let unknown = cli(&url, Some(REVIEW_KEY), &["reject", "nope", "--note", "x"]).await;
    assert_eq!(unknown.status.code(), Some(1));
    assert!(stderr(&unknown).contains("404"), "{}", stderr(&unknown));
    let forbidden = cli(&url, Some(APP_KEY), &["list"]).await;
    assert_eq!(forbidden.status.code(), Some(1));
    assert!(
        stderr(&forbidden).contains("403") && stderr(&forbidden).contains("review"),
        "{}",
        stderr(&forbidden)
    );
    let keyless = cli(&url, None, &["list"]).await;
    assert_eq!(keyless.status.code(), Some(2));
    assert!(
        stderr(&keyless).contains("VERDICT_KEY"),
        "{}",
        stderr(&keyless)
    );
    e.s.shutdown().await;
}

/// Nothing listens at the URL: one line saying so, exit 1.
#[tokio::test]
async fn an_unreachable_server_is_one_line_and_exit_1() {
    let url = held::dead_url().await;
    let url = url.trim_end_matches("/hooks/verdict");
    let o = cli(url, Some(REVIEW_KEY), &["list"]).await;
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.starts_with("verdict: cannot reach"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
