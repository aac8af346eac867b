//! `POST /v2/authorize` with `"response": {"mode": "explain"}`: the
//! decision's trace, on the shipped refunds policy, and the same decision
//! (durably audited) as in the other modes.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use serde_json::{json, Value};
use support::{TestServer, APP_KEY};

const REFUNDS: &str = include_str!("../policies/refunds.toml");

async fn server() -> TestServer {
    TestServer::start_with(|c| {
        std::fs::write(c.policies_dir.join("refunds.toml"), REFUNDS).unwrap();
    })
    .await
}

/// A $750 refund its evidence supports, from a caller that asks for looser
/// requirements than the policy's floors.
fn over_threshold(mode: &str) -> Value {
    json!({
        "action": {"type": "refund.create", "params": {"order_id": "1002", "amount": 750, "currency": "USD"}},
        "claims": [{"text": "Order 1002 was charged $750.00.", "citations": [{"source_id": "inv-1002"}]}],
        "sources": [{"source_id": "inv-1002", "text": "Invoice INV-1002 for order 1002: espresso machine, amount charged $750.00."}],
        "requirements": {"decision_mode": "balanced", "min_coverage": 0.5},
        "options": {"evidence_limit": 2},
        "response": {"mode": mode}
    })
}

fn field<'a>(explain: &'a Value, name: &str) -> &'a Value {
    explain["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["field"] == name)
        .unwrap_or_else(|| panic!("no requirement {name}: {explain}"))
}

#[tokio::test]
async fn explain_names_the_floors_that_won_and_the_rule_that_hit() {
    let s = server().await;
    let r = s
        .post_json(
            "/v2/authorize",
            &over_threshold("explain").to_string(),
            Some(APP_KEY),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    assert_eq!(j["decision"], "needs_review", "{j}");
    // Explain is verbose plus the trace.
    assert_eq!(j["reason"], "review_required", "{j}");
    let e = &j["explain"];
    assert!(e["route"].is_null(), "{e}");
    assert_eq!(
        e["action"],
        json!({"type": "refund.create", "policy": "declared"})
    );
    assert_eq!(e["params"]["amount"], 750);

    // The floors that won over the looser request, and the sides that did not.
    let mode = field(e, "decision_mode");
    assert_eq!(
        (
            &mode["value"],
            &mode["won"],
            &mode["floor"],
            &mode["requested"]
        ),
        (
            &json!("strict"),
            &json!("floor_over_request"),
            &json!("strict"),
            &json!("balanced")
        ),
        "{mode}"
    );
    let cov = field(e, "min_coverage");
    assert_eq!(
        (&cov["value"], &cov["won"], &cov["requested"]),
        (&json!(0.9), &json!("floor_over_request"), &json!(0.5)),
        "{cov}"
    );
    assert_eq!(field(e, "citations")["won"], "floor");
    assert_eq!(field(e, "deny_if_any_unsupported")["won"], "floor");
    let limit = field(e, "evidence_limit");
    assert_eq!(
        (&limit["value"], &limit["won"]),
        (&json!(2), &json!("request"))
    );

    // Every rule, the one above 500 hit, the others not.
    let rules = e["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 4, "{e}");
    let results: Vec<&str> = rules
        .iter()
        .map(|r| r["result"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["hit", "miss", "miss", "miss"], "{e}");
    assert_eq!(
        rules[0]["message"],
        "refunds above 500 need a second pair of eyes"
    );
    assert_eq!(rules[0]["op"], "gt 500");
    assert_eq!(rules[0]["value"], "number 750");

    // The claim, counted, with its cited span; bind satisfied.
    let c = &e["claims"][0];
    assert_eq!(
        (&c["status"], &c["cited"], &c["counted"]),
        (&json!("supported"), &json!(true), &json!(true)),
        "{c}"
    );
    assert!(c["citations"][0]["end"].as_u64().unwrap() > 0, "{c}");
    assert_eq!(
        e["bind"],
        json!([{"param": "amount", "stated": true}, {"param": "order_id", "stated": true}])
    );

    // The row of the table that decided, in every mode.
    assert_eq!(
        e["decision_table"],
        json!({
            "condition": "a review rule hit",
            "reason": "review_required",
            "outcomes": {"strict": "needs_review", "balanced": "needs_review", "audit": "allow"},
            "audit_would_decide": "needs_review",
            "mode": "strict",
            "outcome": "needs_review",
            "enforced": true
        })
    );

    // Explaining is not a dry run: the decision has its durable record.
    let record_id = j["audit"]["record_id"].as_str().unwrap();
    let rec = s
        .get(&format!("/v2/audit/{record_id}"), Some(APP_KEY))
        .await;
    assert_eq!(rec.status, 200, "{}", rec.text());
    assert_eq!(rec.json()["decision"], "needs_review");
    assert!(s
        .running
        .as_ref()
        .unwrap()
        .app
        .decide_handles()
        .audit
        .is_durable());
}

#[tokio::test]
async fn explain_decides_what_the_other_modes_decide() {
    let s = server().await;
    for body in [
        over_threshold("explain"),
        json!({
            "action": {"type": "refund.create", "params": {"order_id": "7781", "amount": 400}},
            "claims": [{"text": "A refund of $400 was approved for order 7781.", "citations": [{"source_id": "t"}]}],
            "sources": [{"source_id": "t", "text": "On 2024-03-03 the store manager approved a refund of $100 for order 7781."}],
            "response": {"mode": "explain"}
        }),
    ] {
        let explained = s
            .post_json("/v2/authorize", &body.to_string(), Some(APP_KEY))
            .await
            .json();
        let mut verbose = body.clone();
        verbose["response"]["mode"] = json!("verbose");
        let v = s
            .post_json("/v2/authorize", &verbose.to_string(), Some(APP_KEY))
            .await
            .json();
        assert!(v.get("explain").is_none(), "{v}");
        for k in ["decision", "reason", "rules", "requirements", "diagnostics"] {
            assert_eq!(explained[k], v[k], "{k}: {explained} vs {v}");
        }
        assert_eq!(
            explained["explain"]["decision_table"]["reason"],
            v["reason"]
        );
    }
}

#[tokio::test]
async fn an_undeclared_action_is_explained_as_defaults() {
    let s = server().await;
    let body = json!({
        "action": {"type": "gift.card", "params": {}},
        "claims": ["A gift card was promised."],
        "response": {"mode": "explain"}
    });
    let j = s
        .post_json("/v2/authorize", &body.to_string(), Some(APP_KEY))
        .await
        .json();
    // The test server has a keys file: unknown_action = near_miss, and
    // gift.card reads as no declared type, so [defaults] apply.
    assert_eq!(j["explain"]["action"]["policy"], "defaults", "{j}");
    assert_eq!(j["explain"]["rules"], json!([]));
    assert_eq!(field(&j["explain"], "decision_mode")["won"], "default");
    let body = json!({
        "action": {"type": "refund.crate", "params": {"amount": 1}},
        "claims": ["x y z"],
        "response": {"mode": "explain"}
    });
    let j = s
        .post_json("/v2/authorize", &body.to_string(), Some(APP_KEY))
        .await
        .json();
    assert_eq!(
        j["explain"]["action"],
        json!({"type": "refund.crate", "policy": "unknown_action", "unknown_action": "deny", "near_miss": "refund.create"}),
        "{j}"
    );
    assert_eq!(j["explain"]["decision_table"]["reason"], "unknown_action");
    assert!(j["explain"]["decision_table"]["audit_would_decide"].is_null());
}

#[tokio::test]
async fn explain_is_a_mode_of_authorize_only() {
    let s = server().await;
    let mut body = over_threshold("explian");
    let r = s
        .post_json("/v2/authorize", &body.to_string(), Some(APP_KEY))
        .await;
    r.assert_error(422, "invalid_request");
    assert!(
        r.text().contains("(compact, verbose, explain)"),
        "{}",
        r.text()
    );
    body["response"]["mode"] = json!("compact");
    let j = s
        .post_json("/v2/authorize", &body.to_string(), Some(APP_KEY))
        .await
        .json();
    assert!(
        j.get("explain").is_none() && j.get("reason").is_none(),
        "{j}"
    );
    let verify = json!({
        "claims": ["Order 1002 was charged $750.00."],
        "sources": [{"source_id": "s", "text": "Order 1002 was charged $750.00."}],
        "response": {"mode": "explain"}
    });
    s.post_json("/v2/verify", &verify.to_string(), Some(APP_KEY))
        .await
        .assert_error(422, "invalid_request");
}
