//! Finding and exporting audit records: `GET /v2/audit/records` filters and
//! pages, `verdict audit export` writes lines that `verdict audit
//! verify-export` checks offline (and a tampered line fails), and audit-mode
//! decisions are counted by what they would have decided.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::process::Command;

use serde_json::{json, Value};
use support::{TestServer, APP_KEY, VERIFY_ONLY_KEY};

const POLICY: &str = "[[action]]\ntype = \"refund\"\nrequirements = { decision_mode = \"audit\", citations = \"optional\" }\n";

fn body(claim: &str) -> String {
    support::blender_refund(json!({"amount": 10}), claim).body()
}

#[tokio::test]
async fn records_are_found_paged_exported_and_verified() {
    let s = TestServer::with_policies(&[("refund.toml", POLICY)], |_| {}).await;
    // 4 that would be allowed, 6 that would be denied ($400 against $100):
    // audit mode allows them all.
    let over = "The customer paid $400 for the blender.";
    for (n, claim) in [(4, support::PAID_100), (6, over)] {
        for _ in 0..n {
            let r = s
                .post_json("/v2/authorize", &body(claim), Some(APP_KEY))
                .await;
            assert_eq!(r.json()["decision"], "allow", "{}", r.text());
        }
    }

    let r = s
        .get(
            "/v2/audit/records?would_decide=deny&action=refund",
            Some(APP_KEY),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let page = r.json();
    let records = page["records"].as_array().unwrap();
    assert_eq!(records.len(), 6, "{page}");
    assert!(records
        .iter()
        .all(|r| r["would_decide"] == "deny" && r["enforced"] == false));

    // Pages of 4 over the 10 decisions (the policy load is a record too).
    let mut seen = Vec::new();
    let mut cursor = String::new();
    for _ in 0..10 {
        let q = format!("/v2/audit/records?kind=decision&limit=4{cursor}");
        let p = s.get(&q, Some(APP_KEY)).await.json();
        seen.extend(
            p["records"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["record_id"].clone()),
        );
        match p["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 10, "{seen:?}");
    let mut unique = seen.clone();
    unique.dedup();
    assert_eq!(unique.len(), 10);

    let since_future = s
        .get(
            "/v2/audit/records?since=2999-01-01T00:00:00Z",
            Some(APP_KEY),
        )
        .await
        .json();
    assert_eq!(since_future["records"].as_array().unwrap().len(), 0);
    let last_hour = s
        .get("/v2/audit/records?since=1h&kind=decision", Some(APP_KEY))
        .await
        .json();
    assert_eq!(last_hour["records"].as_array().unwrap().len(), 10);

    for q in [
        "?limit=0",
        "?limit=5000",
        "?cursor=x",
        "?colour=red",
        "?since=soon",
        "?route=%ZZ",
        // Values no record holds are typos, not filters that match
        // nothing (attack round 3, row 6), and a repeated parameter has no
        // one meaning.
        "?decision=DENY",
        "?decision=Deny",
        "?kind=decisions",
        "?would_decide=maybe",
        "?since=1h&since=200000h",
        "?decision=deny&decision=allow",
    ] {
        let r = s.get(&format!("/v2/audit/records{q}"), Some(APP_KEY)).await;
        r.assert_error(400, "invalid_request");
        let param = q[1..].split('=').next().unwrap();
        assert!(r.text().contains(param), "{q}: {}", r.text());
    }
    let r = s
        .get("/v2/audit/records?decision=DENY", Some(APP_KEY))
        .await;
    assert!(
        r.text().contains("allow, deny, needs_review"),
        "{}",
        r.text()
    );
    for q in ["first=1&first=2&second=3", "first=1&second=2&second=3"] {
        s.get(&format!("/v2/audit/consistency?{q}"), Some(APP_KEY))
            .await
            .assert_error(400, "invalid_request");
    }
    assert_eq!(s.get("/v2/audit/records", None).await.status, 401);
    assert_eq!(
        s.get("/v2/audit/records", Some(VERIFY_ONLY_KEY))
            .await
            .status,
        403
    );

    let m = s.get("/metrics", None).await.text();
    assert!(
        m.contains(
            "verdict_audit_unenforced_decisions_total{decision=\"allow\",would_decide=\"deny\"} 6"
        ),
        "{m}"
    );
    assert!(m.contains("verdict_audit_checkpoints_signed_total"), "{m}");

    let kid = verdict::audit::keys::load_docs(&s.path("data")).unwrap()[0]
        .kid
        .clone();
    let key = s.get(&format!("/v2/audit/keys/{kid}"), None).await.text();
    let dir = s.shutdown().await;
    let data = dir.path().join("data");
    let key_path = dir.path().join("key.json");
    std::fs::write(&key_path, key).unwrap();

    let bin = env!("CARGO_BIN_EXE_verdict");
    let export = dir.path().join("export.jsonl");
    let out = Command::new(bin)
        .args(["audit", "export", "--would-decide", "deny", "--data-dir"])
        .arg(&data)
        .arg("--output")
        .arg(&export)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&export).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6);
    // Every line is proven against the same (newest) checkpoint.
    let sizes: Vec<u64> = lines
        .iter()
        .map(|l| l["proof"]["tree_size"].as_u64().unwrap())
        .collect();
    assert!(sizes.iter().all(|&n| n == sizes[0] && n >= 10), "{sizes:?}");

    let verify = |path: &std::path::Path| {
        Command::new(bin)
            .args(["audit", "verify-export"])
            .arg(path)
            .arg("--key")
            .arg(&key_path)
            .output()
            .unwrap()
    };
    let ok = verify(&export);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("ok: 6 records"));

    // Change the decision in the third record: that line fails.
    let tampered = dir.path().join("tampered.jsonl");
    let mut bad: Vec<String> = text.lines().map(str::to_string).collect();
    bad[2] = bad[2].replacen("\"would_decide\":\"deny\"", "\"would_decide\":\"allow\"", 1);
    std::fs::write(&tampered, bad.join("\n")).unwrap();
    let failed = verify(&tampered);
    assert_eq!(failed.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&failed.stderr).contains("line 3"),
        "{}",
        String::from_utf8_lossy(&failed.stderr)
    );

    // `audit show` prints one record readably.
    let id = lines[0]["record"]["record_id"].as_str().unwrap();
    let show = Command::new(bin)
        .args(["audit", "show", id, "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(show.status.success());
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(
        shown.contains(id) && shown.contains("\"would_decide\": \"deny\""),
        "{shown}"
    );
    let missing = Command::new(bin)
        .args([
            "audit",
            "show",
            "00000000-0000-7000-8000-000000000000",
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
}
