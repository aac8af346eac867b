//! POST /v2/authorize over HTTP: the spec's four cases, the compact and
//! verbose shapes, floors, rules, output mode and validation.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use serde_json::{json, Value};
use support::{Authorize, RefundPolicy, TestServer, APP_KEY};
use verdict::config::UnknownAction;

const EV: &str = "Invoice INV-2291. Item: Vitamix E310 blender. Amount charged: $100.00 on Visa ending 4421. Delivered 2026-03-03, box crushed, carafe cracked.";

/// Declared with no floors: they get the defaults. Under a keys file an
/// action type no policy names is refused (`unknown_action`).
const DECLARED: &str = r#"
[[action]]
type = "issue_refund"

[[action]]
type = "reply"

[[action]]
type = "x"
"#;

/// Refunds: strict at 0.9, review above 500, denied above 5000; and the
/// [`DECLARED`] types.
async fn server() -> TestServer {
    let refunds = RefundPolicy::new("strict")
        .min_coverage(Some("0.9"))
        .review_over(500)
        .rule("amount", "gt", Some("5000"), "deny", None)
        .action_only()
        .build();
    TestServer::with_policies(&[("refunds.toml", &(refunds + DECLARED))], |_| {}).await
}

/// A `refund.create` request for `amount` with `claims` against the
/// invoice [`EV`].
fn refund_create(amount: u64, claims: Value) -> Authorize {
    Authorize::new("refund.create")
        .params(json!({ "amount": amount }))
        .claims(claims)
        .source("inv", EV)
}

/// An `issue_refund` request with `claims` against the invoice [`EV`].
fn refund(claims: Value) -> Authorize {
    Authorize::new("issue_refund")
        .claims(claims)
        .source("inv", EV)
}

async fn authorize(s: &TestServer, body: impl Into<Value>) -> Value {
    let body: Value = body.into();
    let r = s
        .post_json("/v2/authorize", &body.to_string(), Some(APP_KEY))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[tokio::test]
async fn the_four_spec_cases() {
    let s = server().await;
    // strict, one claim, no sources: deny, 0; and strict with
    // deny_if_any_unsupported, empty sources: deny, 0.
    for (field, value) in [
        ("requirements", json!({"decision_mode": "strict"})),
        ("options", json!({"deny_if_any_unsupported": true})),
    ] {
        let no_sources = Authorize::new("issue_refund")
            .claims(json!([{"text": "The customer was charged twice."}]))
            .with("sources", json!([]))
            .with(field, value);
        let j = authorize(&s, no_sources).await;
        assert_eq!(
            (j["decision"].as_str(), j["coverage_score"].as_f64()),
            (Some("deny"), Some(0.0)),
            "{j}"
        );
    }
    // balanced, partial coverage: needs_review with a score between the floor and the threshold.
    let j = authorize(
        &s,
        refund(json!([{"text": "The blender box was crushed and the customer was charged $100 twice in March."}]))
            .requirements(json!({"decision_mode": "balanced", "citations": "optional"}))
            .verbose(),
    )
    .await;
    assert_eq!(j["decision"], "needs_review", "{j}");
    let score = j["coverage_score"].as_f64().unwrap();
    assert!(score > 0.0 && score < 0.85, "{j}");
    // audit, supported: allow.
    let j = authorize(
        &s,
        refund(json!([{"text": "The customer was charged $100.00 for the Vitamix E310 blender."}]))
            .requirements(json!({"decision_mode": "audit", "citations": "optional"}))
            .verbose(),
    )
    .await;
    assert_eq!(j["decision"], "allow", "{j}");
    assert_eq!(j["reason"], "coverage_sufficient", "{j}");
    assert!(j["coverage_score"].as_f64().unwrap() >= 0.85, "{j}");
    s.shutdown().await;
}

#[tokio::test]
async fn compact_has_exactly_six_fields_and_verbose_adds_details() {
    let s = server().await;
    let body = refund(json!(["The customer was charged $100.00."])).json();
    let j = authorize(&s, body.clone()).await;
    let mut keys: Vec<_> = j.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "coverage_score",
            "decision",
            "evaluated_at",
            "metrics",
            "request_hash",
            "request_id"
        ]
    );
    let m = &j["metrics"];
    for k in [
        "latency_ms",
        "claims_total",
        "claims_supported",
        "sources_total",
    ] {
        assert!(m[k].is_number(), "{m}");
    }
    assert_eq!(m["claims_total"], 1);
    assert_eq!(m["sources_total"], 1);
    assert!(j["evaluated_at"].as_str().unwrap().ends_with('Z'));

    let mut verbose = body;
    verbose["response"] = json!({"mode": "verbose"});
    let j = authorize(&s, verbose).await;
    for k in [
        "reason",
        "diagnostics",
        "requirements",
        "rules",
        "policy_revision",
    ] {
        assert!(j.get(k).is_some(), "{k} missing: {j}");
    }
    let d = &j["diagnostics"][0];
    for k in [
        "claim_id",
        "claim_text",
        "status",
        "coverage",
        "citations",
        "evidence",
        "reasons",
    ] {
        assert!(d.get(k).is_some(), "{k} missing: {d}");
    }
    // Default citations = required: an uncited claim cannot pass.
    assert_eq!(j["decision"], "deny");
    assert_eq!(j["reason"], "missing_citations");
    let metrics = s.get("/metrics", None).await.text();
    assert!(
        metrics.contains(
            r#"verdict_decisions_total{source="api",decision="deny",reason="missing_citations"} 2"#
        ),
        "{metrics}"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn caller_citations_and_fabricated_quotes() {
    let s = server().await;
    let claim = "The customer was charged $100.00 for the Vitamix E310 blender.";
    let quoting = |quote: &str| {
        refund(json!([{"text": claim, "citations": [{"source_id": "inv", "quote": quote}]}]))
            .verbose()
    };
    let j = authorize(&s, quoting("Amount charged: $100.00")).await;
    assert_eq!(j["decision"], "allow", "{j}");
    let j = authorize(&s, quoting("Amount charged: $999.00")).await;
    assert_ne!(j["decision"], "allow", "{j}");
    s.shutdown().await;
}

#[tokio::test]
async fn audit_mode_allows_but_records_what_it_would_do() {
    let s = server().await;
    let j = authorize(
        &s,
        refund(json!(["The customer was charged $300 for the blender."]))
            .requirements(json!({"decision_mode": "audit"}))
            .verbose(),
    )
    .await;
    assert_eq!(j["decision"], "allow", "{j}");
    assert_eq!(j["enforced"], false, "{j}");
    assert_eq!(j["would_decide"], "deny", "{j}");
    s.shutdown().await;
}

#[tokio::test]
async fn policy_floors_and_rules_apply() {
    let s = server().await;
    // The request asks for audit mode and a tiny threshold; the strict policy floor wins.
    let j = authorize(
        &s,
        refund_create(
            100,
            json!(["The customer was charged $300 for the blender."]),
        )
        .requirements(json!({"decision_mode": "audit", "min_coverage": 0.1}))
        .verbose(),
    )
    .await;
    assert_eq!(j["decision"], "deny", "{j}");
    let floors: Vec<&str> = j["requirements"]["floors_applied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert_eq!(floors, ["decision_mode", "min_coverage"], "{j}");
    assert_eq!(j["requirements"]["decision_mode"], "strict");
    let good = "The Vitamix E310 blender was charged $100.00 on the Visa ending 4421.";
    for (amount, decision, reason) in [
        (100, "allow", "coverage_sufficient"),
        (900, "needs_review", "review_required"),
        (9000, "deny", "policy_violation"),
    ] {
        let j = authorize(&s, refund_create(amount, json!([good])).verbose()).await;
        assert_eq!(
            (j["decision"].as_str(), j["reason"].as_str()),
            (Some(decision), Some(reason)),
            "{amount}: {j}"
        );
    }
    s.shutdown().await;
}

#[tokio::test]
async fn output_mode_catches_a_hallucinated_number() {
    let s = server().await;
    // A verbose reply checked against refund RF-9's record.
    let reply = |answer: Value| {
        Authorize::new("reply")
            .with("answer", answer)
            .source("t", "Refund RF-9 for $25 approved on 2026-03-03.")
            .verbose()
    };
    let j = authorize(
        &s,
        reply(json!(
            "Your refund of $250 was approved on March 3. Is there anything else I can help with?"
        ))
        .requirements(json!({"decision_mode": "strict", "citations": "optional"})),
    )
    .await;
    assert_eq!(j["decision"], "deny", "{j}");
    let diags = j["diagnostics"].as_array().unwrap();
    assert_eq!(diags.len(), 1, "the question is not a claim: {j}");
    assert_eq!(diags[0]["status"], "unsupported");
    // The same answer with the right amount passes.
    let j = authorize(
        &s,
        reply(json!({"text": "Your refund of $25 was approved on March 3, 2026 [t]."})),
    )
    .await;
    assert_eq!(j["decision"], "allow", "{j}");
    s.shutdown().await;
}

#[tokio::test]
async fn no_claims_fails_closed_and_unreadable_sources_are_fetch_failed() {
    let s = server().await;
    let j = authorize(&s, Authorize::new("x").verbose()).await;
    assert_eq!(
        (j["decision"].as_str(), j["reason"].as_str()),
        (Some("deny"), Some("no_claims")),
        "{j}"
    );
    let j = authorize(
        &s,
        Authorize::new("x")
            .claims(json!([{"text": "a", "citations": [{"source_id": "f"}]}]))
            .with(
                "sources",
                json!([{"source_id": "f", "uri": "file:///etc/passwd"}]),
            )
            .verbose(),
    )
    .await;
    assert_eq!(
        (j["decision"].as_str(), j["reason"].as_str()),
        (Some("deny"), Some("fetch_failed")),
        "{j}"
    );
    assert_eq!(j["unavailable_sources"][0]["source_id"], "f");
    s.shutdown().await;
}

#[tokio::test]
async fn invalid_requirements_are_422() {
    let s = server().await;
    for body in [
        json!({"action": {"type": "x"}, "claims": ["a"], "requirements": {"min_coverage": 1.7}}),
        json!({"action": {"type": "x"}, "claims": ["a"], "requirements": {"decision_mode": "lenient"}}),
        json!({"action": {"type": "x"}, "claims": ["a"], "requirements": {"citations": "sometimes"}}),
        json!({"action": {"type": "x"}, "claims": ["a"], "requirements": {"min_coverage": 0.9}, "options": {"min_coverage": 0.5}}),
        json!({"action": {"type": "x"}, "claims": ["a"], "answer": "b"}),
        json!({"action": {"type": ""}, "claims": ["a"]}),
    ] {
        let r = s
            .post_json("/v2/authorize", &body.to_string(), Some(APP_KEY))
            .await;
        r.assert_error(422, "invalid_request");
    }
    let r = s
        .post_json("/v2/authorize", r#"{"claims":["a"]}"#, Some(APP_KEY))
        .await;
    r.assert_error(400, "invalid_request");
    assert!(r.text().contains("action"), "{}", r.text());
    let r = s
        .post_json(
            "/v2/authorize",
            r#"{"action":{"type":"x"},"answer":7}"#,
            Some(APP_KEY),
        )
        .await;
    r.assert_error(400, "invalid_request");
    assert!(r.text().contains("answer"), "{}", r.text());
    s.shutdown().await;
}

#[tokio::test]
async fn same_input_gives_the_same_bytes() {
    let s = server().await;
    let body = refund(json!([
        "The customer was charged $100.00 for the Vitamix E310 blender.",
        "The carafe was cracked."
    ]))
    .source("b", "Unrelated text about shipping.")
    .requirements(json!({"citations": "optional"}))
    .verbose()
    .json();
    let strip = |mut v: Value| {
        let o = v.as_object_mut().unwrap();
        o.remove("request_id");
        o.remove("evaluated_at");
        o.remove("audit");
        o["metrics"].as_object_mut().unwrap().remove("latency_ms");
        v.to_string()
    };
    let a = strip(authorize(&s, body.clone()).await);
    let b = strip(authorize(&s, body).await);
    assert_eq!(a, b);
    s.shutdown().await;
}

/// Under a keys file, an action type that no policy names is refused in
/// every mode, so a typo (`refund.crate`) cannot escape the refund floors by
/// asking for audit mode; `[authorize] unknown_action` and `[defaults]`
/// change that.
#[tokio::test]
async fn unknown_action_types_are_refused_under_keys() {
    let body = Authorize::new("refund.crate")
        .params(json!({"amount": 6000}))
        .claims(json!([{"text": "The customer was charged $100.00 for the Vitamix E310 blender.", "citations": [{"source_id": "inv"}]}]))
        .source("inv", EV)
        .requirements(json!({"decision_mode": "audit"}))
        .verbose()
        .json();
    let s = server().await;
    let j = authorize(&s, body.clone()).await;
    assert_eq!(
        (&j["decision"], &j["reason"], j.get("enforced")),
        (&json!("deny"), &json!("unknown_action"), None),
        "{j}"
    );
    let rec = s
        .get(
            &format!("/v2/audit/{}", j["audit"]["record_id"].as_str().unwrap()),
            Some(APP_KEY),
        )
        .await;
    assert_eq!(rec.json()["reason"], "unknown_action", "{}", rec.text());

    // The default refuses near misses of a declared type only: an unrelated
    // undeclared type is decided under `[defaults]` (none here), so the
    // caller's audit mode allows it.
    let mut unrelated = body.clone();
    unrelated["action"]["type"] = json!("issue_refund");
    for variant in ["Refund_Create", "create.refund", "refunds.create"] {
        let mut b = body.clone();
        b["action"]["type"] = json!(variant);
        let j = authorize(&s, b).await;
        assert_eq!(
            (&j["decision"], &j["reason"]),
            (&json!("deny"), &json!("unknown_action")),
            "{variant}: {j}"
        );
    }
    let j = authorize(&s, unrelated.clone()).await;
    assert_eq!(
        (&j["decision"], &j["enforced"]),
        (&json!("allow"), &json!(false)),
        "{j}"
    );

    for (setting, near, other) in [
        (UnknownAction::Deny, "deny", "deny"),
        (UnknownAction::Review, "needs_review", "needs_review"),
        (UnknownAction::Allow, "allow", "allow"),
    ] {
        let s = TestServer::start_with(|c| c.authorize.unknown_action = setting).await;
        let j = authorize(&s, body.clone()).await;
        assert_eq!(j["decision"], near, "{setting:?}: {j}");
        let j = authorize(&s, unrelated.clone()).await;
        assert_eq!(j["decision"], other, "{setting:?}: {j}");
    }

    // `[defaults]` floors apply to undeclared types: audit mode is lifted to
    // strict, and an uncited claim is then refused.
    let s = TestServer::start_with(|c| {
        c.authorize.unknown_action = UnknownAction::Allow;
        c.defaults.decision_mode = Some(verdict::policy::DecisionMode::Strict);
    })
    .await;
    let mut uncited = body.clone();
    uncited["claims"][0]
        .as_object_mut()
        .unwrap()
        .remove("citations");
    let j = authorize(&s, uncited).await;
    assert_eq!(
        (&j["decision"], &j["reason"]),
        (&json!("deny"), &json!("missing_citations")),
        "{j}"
    );
    assert_eq!(
        j["requirements"]["floors_applied"][0]["field"],
        "decision_mode"
    );
    // The uncited claim is not counted as supported, whatever its coverage.
    assert_eq!(j["metrics"]["claims_supported"], 0, "{j}");
    assert_eq!(j["diagnostics"][0]["status"], "supported", "{j}");
}

/// Params are typed and bound to the claims the evidence supports.
#[tokio::test]
async fn params_are_typed_and_bound_to_supported_claims() {
    const BOUND: &str = r#"
[[action]]
type = "refund.create"
requirements = { decision_mode = "strict", citations = "optional" }
param_types = { amount = "number", order_id = "string" }
bind = ["amount", "order_id"]

  [[action.rule]]
  param = "amount"
  op = "gt"
  value = 500
  effect = "review"
"#;
    let s = TestServer::with_policies(&[("refunds.toml", BOUND)], |_| {}).await;
    let ev = "Invoice INV-1001 for order 1001: amount charged $100.00.";
    let ask = |amount: Value, order: Value| {
        Authorize::new("refund.create")
            .params(json!({"amount": amount, "order_id": order}))
            .claims(json!([{"text": "Order 1001 was charged $100.00."}]))
            .source("inv", ev)
            .verbose()
    };
    let j = authorize(&s, ask(json!(100), json!("1001"))).await;
    assert_eq!(j["decision"], "allow", "{j}");
    // $100 of evidence does not justify 450, nor another order.
    for (amount, order) in [(json!(450), json!("1001")), (json!(100), json!("1002"))] {
        let j = authorize(&s, ask(amount.clone(), order.clone())).await;
        assert_eq!(
            (&j["decision"], &j["reason"]),
            (&json!("deny"), &json!("unbound_param")),
            "{amount} {order}: {j}"
        );
        assert_eq!(j["unbound_params"].as_array().unwrap().len(), 1, "{j}");
    }
    // Spellings another parser reads as 6000 are a mismatch, never a miss
    // of the `amount gt 500` rule.
    for amount in [
        json!("6000"),
        json!("6_000"),
        json!([6000]),
        json!("\u{ff16}\u{ff10}\u{ff10}\u{ff10}"),
    ] {
        let j = authorize(&s, ask(amount.clone(), json!("1001"))).await;
        assert_eq!(
            (&j["decision"], &j["reason"]),
            (&json!("deny"), &json!("param_type_mismatch")),
            "{amount}: {j}"
        );
        assert_eq!(j["param_mismatches"][0]["param"], "amount", "{j}");
    }
    let j = authorize(&s, ask(json!(100), json!(1001))).await;
    assert_eq!(j["reason"], "param_type_mismatch", "{j}");
}

/// `min_claims = 2`: one claim, or one claim sent twice, is `no_claims`;
/// two separate supported claims are allowed. The verbose requirements
/// show `min_claims` only where a policy raises it.
#[tokio::test]
async fn min_claims_asks_for_separate_claims() {
    let policy = r#"
[[action]]
type = "two_facts"
requirements = { decision_mode = "strict", citations = "optional" }
min_claims = 2
"#;
    let s =
        TestServer::with_policies(&[("two.toml", &(policy.to_string() + DECLARED))], |_| {}).await;
    let ask = |claims: Value| {
        Authorize::new("two_facts")
            .claims(claims)
            .source("inv", EV)
            .verbose()
    };
    let paid = "The amount charged was $100.00.";
    let item = "The item was a Vitamix E310 blender.";
    let j = authorize(&s, ask(json!([{ "text": paid }]))).await;
    assert_eq!(
        (&j["decision"], &j["reason"]),
        (&json!("deny"), &json!("no_claims")),
        "{j}"
    );
    assert_eq!(j["requirements"]["min_claims"], 2, "{j}");
    let twice = json!([{ "text": paid }, { "text": paid.to_uppercase() }]);
    let j = authorize(&s, ask(twice)).await;
    assert_eq!(
        (&j["decision"], &j["reason"]),
        (&json!("deny"), &json!("no_claims")),
        "{j}"
    );
    let j = authorize(&s, ask(json!([{ "text": paid }, { "text": item }]))).await;
    assert_eq!(j["decision"], "allow", "{j}");
    let j = authorize(&s, refund(json!([{ "text": paid }])).verbose()).await;
    assert!(j["requirements"].get("min_claims").is_none(), "{j}");
    s.shutdown().await;
}
