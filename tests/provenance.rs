//! Evidence a caller cannot write: an action whose policy says
//! `evidence = { from = "referenced", origins = [...] }` takes its evidence
//! only from documents the service reads by uri from those origins. Two
//! loopback HTTP servers stand in for the billing system and for another
//! allowlisted origin; every request goes through `/v2/authorize` on a real
//! server.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use support::{serve_http, TestServer, APP_KEY};

const INVOICE: &str = "Invoice INV-77 for order 1001: amount charged $600.00 on 2026-03-03.";
const CLAIM: &str = "Order 1001 was charged $600.00.";

/// A document server: answers [`INVOICE`] on `/orders/1001/invoice`, 404
/// elsewhere, and counts what it was asked.
async fn documents() -> (String, Arc<Mutex<Vec<String>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    let (addr, _task) = serve_http(move |parts, _body| {
        let log = log.clone();
        async move {
            let path = parts.uri.path().to_string();
            log.lock().unwrap().push(path.clone());
            let mut r =
                http::Response::new(Full::new(Bytes::from_static(INVOICE.as_bytes())).boxed());
            if path != "/orders/1001/invoice" {
                *r.status_mut() = http::StatusCode::NOT_FOUND;
            }
            r
        }
    })
    .await;
    (format!("http://{addr}"), asked)
}

fn policy(billing: &str) -> String {
    format!(
        r#"
[[action]]
type = "refund.create"
requirements = {{ decision_mode = "balanced", citations = "optional" }}
param_types = {{ amount = "number", order_id = "string" }}
bind = ["amount", "order_id"]
evidence = {{ from = "referenced", origins = ["{billing}"] }}

[[action]]
type = "refund.checked"
requirements = {{ decision_mode = "strict", citations = "optional" }}
evidence = {{ from = "referenced", origins = ["{billing}"], require_checksum = true }}

[[action]]
type = "refund.open"
requirements = {{ decision_mode = "strict", citations = "optional" }}
"#
    )
}

fn body(action: &str, source: Value, mode: Option<&str>) -> String {
    let mut b = json!({
        "action": {"type": action, "params": {"amount": 600, "order_id": "1001"}},
        "claims": [CLAIM],
        "sources": [source],
        "response": {"mode": "verbose"},
    });
    if let Some(m) = mode {
        b["requirements"] = json!({"decision_mode": m});
    }
    b.to_string()
}

async fn decide(s: &TestServer, b: String) -> Value {
    let r = s.post_json("/v2/authorize", &b, Some(APP_KEY)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// A refunds action that takes evidence only from `billing`, and its
/// route; `justification` is the route's lines that say where the claims
/// and sources come from.
fn gated_policy(billing: &str, justification: &str) -> String {
    format!(
        r#"{}
[[route]]
name = "create-refund"
method = "POST"
path = "/api/orders/{{order_id}}/refunds"
action = "refund.create"
params = {{ order_id = "path:order_id", amount = "body:/amount" }}
{justification}
"#,
        strict_refunds(billing, "")
    )
}

/// A strict refunds action that binds amount and order and takes evidence
/// only from `billing`, plus `extra` lines.
fn strict_refunds(billing: &str, extra: &str) -> String {
    format!(
        r#"
[[action]]
type = "refund.create"
requirements = {{ decision_mode = "strict", citations = "optional" }}
param_types = {{ amount = "number", order_id = "string" }}
bind = ["amount", "order_id"]
evidence = {{ from = "referenced", origins = ["{billing}"] }}
{extra}
"#
    )
}

/// The sidecar with `policy`, reading uri sources from `billing` only.
async fn gated(billing: &str, policy: &str) -> support::Gated {
    let origin = billing.to_string();
    support::Gated::start(&[("refunds.toml", policy)], move |c| {
        c.evidence.allow_origins = vec![origin];
    })
    .await
}

/// `POST path` with a JSON body through the proxy.
async fn post(g: &support::Gated, path: &str, body: &Value) -> support::Resp {
    support::call(
        &g.proxy,
        http::Method::POST,
        path,
        &[("content-type", "application/json")],
        body.to_string(),
    )
    .await
}

#[tokio::test]
async fn only_documents_read_from_the_action_origins_support_its_claims() {
    let (billing, billing_asked) = documents().await;
    let (other, other_asked) = documents().await;
    let (b2, o2) = (billing.clone(), other.clone());
    let s = TestServer::with_policies(&[("refunds.toml", &policy(&billing))], move |c| {
        c.evidence.allow_origins = vec![b2, o2];
    })
    .await;
    let invoice_uri = format!("{billing}/orders/1001/invoice");

    // The caller writes the invoice its claim rests on: strict denies,
    // balanced holds for a person, and the claim itself is unsupported.
    let fabricated = json!({"source_id": "inv", "text": INVOICE});
    for (mode, want) in [(Some("strict"), "deny"), (None, "needs_review")] {
        let v = decide(&s, body("refund.create", fabricated.clone(), mode)).await;
        assert_eq!(v["decision"], want, "{v}");
        assert_eq!(v["reason"], "untrusted_source", "{v}");
        assert_eq!(
            v["unavailable_sources"][0]["reason"], "untrusted_source",
            "{v}"
        );
        assert_eq!(v["unavailable_sources"][0]["source_id"], "inv", "{v}");
        assert_ne!(v["diagnostics"][0]["status"], "supported", "{v}");
    }

    // The same claim against the billing system's document: allowed.
    let v = decide(
        &s,
        body(
            "refund.create",
            json!({"source_id": "inv", "uri": invoice_uri}),
            Some("strict"),
        ),
    )
    .await;
    assert_eq!(v["decision"], "allow", "{v}");
    assert_eq!(billing_asked.lock().unwrap().len(), 1);

    // Another allowlisted origin that the action does not take: refused
    // without being read.
    let elsewhere = format!("{other}/orders/1001/invoice");
    let v = decide(
        &s,
        body(
            "refund.create",
            json!({"source_id": "inv", "uri": elsewhere}),
            Some("strict"),
        ),
    )
    .await;
    assert_eq!(
        (&v["decision"], &v["reason"]),
        (&json!("deny"), &json!("untrusted_source")),
        "{v}"
    );
    assert!(
        other_asked.lock().unwrap().is_empty(),
        "the other origin was read"
    );

    // A checksum that does not match what the billing system serves.
    let wrong = format!("sha256:{}", "0".repeat(64));
    let v = decide(
        &s,
        body(
            "refund.create",
            json!({"source_id": "inv", "uri": invoice_uri, "checksum": wrong}),
            Some("strict"),
        ),
    )
    .await;
    assert_eq!(
        (&v["decision"], &v["reason"]),
        (&json!("deny"), &json!("fetch_failed")),
        "{v}"
    );

    // require_checksum: without one the source is refused; with the right
    // one it counts.
    let v = decide(
        &s,
        body(
            "refund.checked",
            json!({"source_id": "inv", "uri": invoice_uri}),
            None,
        ),
    )
    .await;
    assert_eq!(
        (&v["decision"], &v["reason"]),
        (&json!("deny"), &json!("untrusted_source")),
        "{v}"
    );
    let sum = format!("sha256:{}", hex::encode(Sha256::digest(INVOICE.as_bytes())));
    let v = decide(
        &s,
        body(
            "refund.checked",
            json!({"source_id": "inv", "uri": invoice_uri, "checksum": sum}),
            None,
        ),
    )
    .await;
    assert_eq!(v["decision"], "allow", "{v}");

    // An action without an evidence table takes inline text as before.
    let v = decide(&s, body("refund.open", fabricated, None)).await;
    assert_eq!(v["decision"], "allow", "{v}");
    s.shutdown().await;
}

/// A gated route over a `from = "referenced"` action: the caller names the
/// billing system's invoice by uri. A wrong claim is denied with a body
/// that says which claim failed, why, and which of its words found no
/// counterpart, and holds none of the invoice's text; the caller fixes the
/// claim from that and the second try goes through.
#[tokio::test]
async fn a_denied_agent_fixes_its_claim_from_the_body_and_passes() {
    let (billing, _asked) = documents().await;
    let route =
        "claims = \"body:/justification/claims\"\nsources = \"body:/justification/evidence\"";
    let g = gated(&billing, &gated_policy(&billing, route)).await;
    let invoice_uri = format!("{billing}/orders/1001/invoice");
    let call = |claim: &str| {
        json!({
            "amount": 600,
            "justification": {
                "claims": [claim],
                "evidence": [{"source_id": "invoice", "uri": invoice_uri}],
            },
        })
    };

    let path = "/api/orders/1001/refunds";
    let r = post(
        &g,
        path,
        &call("Order 1001 was charged $500.00 by bank transfer."),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text());
    let v = r.json();
    assert_eq!(v["reason"], "unsupported_claims", "{v}");
    let failed = &v["claims"][0];
    assert_eq!(failed["claim_id"], "c1", "{v}");
    assert_eq!(failed["status"], "unsupported", "{v}");
    assert!(
        failed["reasons"]
            .as_array()
            .unwrap()
            .contains(&json!("amount_mismatch")),
        "{v}"
    );
    let unaligned: Vec<&str> = failed["unaligned"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        unaligned.contains(&"$500.00") && unaligned.contains(&"bank"),
        "{v}"
    );
    // The invoice was read by the service, not sent by the caller: nothing
    // of it is in the answer.
    let text = r.text();
    for secret in ["INV-77", "$600.00", "2026-03-03", "amount charged"] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }

    // The agent drops the words that found no counterpart and states the
    // amount it asks for.
    let r = post(&g, path, &call("Order 1001 was charged $600.00.")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-verdict-decision"], "allow");
    g.s.shutdown().await;
}

/// A route that names the record itself: `sources_from` fills the uri
/// from the route's params, percent-encoded into one path segment. The
/// billing system sees exactly one path per call, and never another one
/// or another origin, whatever the param holds; a caller source under the
/// route's id is refused; the record names the document's sha256.
#[tokio::test]
async fn a_route_reads_the_record_its_params_name() {
    let (billing, asked) = documents().await;
    let route = format!(
        "claims = \"body:/claims\"\nsources_from = [{{ id = \"invoice\", uri = \"{billing}/orders/{{order_id}}/invoice\" }}]"
    );
    let policy = gated_policy(&billing, &route);
    let g = gated(&billing, &policy).await;
    let claims = json!({"amount": 600, "claims": [CLAIM]});

    let r = post(&g, "/api/orders/1001/refunds", &claims).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(asked.lock().unwrap().as_slice(), ["/orders/1001/invoice"]);
    // The record names what was read and the sha256 of what it said.
    let record_id = r.headers["x-verdict-record-id"]
        .to_str()
        .unwrap()
        .to_string();
    let rec =
        g.s.get(&format!("/v2/audit/{record_id}"), Some(APP_KEY))
            .await
            .json();
    let read = &rec["detail"]["sources_read"][0];
    assert_eq!(read["source_id"], "invoice", "{rec}");
    assert_eq!(
        read["uri"],
        format!("{billing}/orders/1001/invoice"),
        "{rec}"
    );
    let sum = format!("sha256:{}", hex::encode(Sha256::digest(INVOICE.as_bytes())));
    assert_eq!(read["sha256"], sum, "{rec}");

    // Hostile order ids stay inside one path segment of the billing origin.
    for id in [
        "..%2Fadmin",
        "1001%2F..%2Fx",
        "1001%3Fx%3D",
        "%40evil",
        "1001%23frag",
    ] {
        asked.lock().unwrap().clear();
        let r = post(&g, &format!("/api/orders/{id}/refunds"), &claims).await;
        assert_ne!(r.status, 200, "{id}: {}", r.text());
        for p in asked.lock().unwrap().iter() {
            assert!(
                p.starts_with("/orders/") && p.ends_with("/invoice") && p.matches('/').count() == 3,
                "{id} reached {p}"
            );
            assert!(
                !p.contains("/admin") && !p.contains("?"),
                "{id} reached {p}"
            );
        }
    }
    // The caller may not send the record itself.
    let forged = json!({"amount": 600, "claims": [CLAIM], "sources": [{"source_id": "invoice", "text": INVOICE}]});
    let policy_with_sources = policy.replace(
        "claims = \"body:/claims\"",
        "claims = \"body:/claims\"\nsources = \"body:/sources\"",
    );
    g.s.shutdown().await;
    let g = gated(&billing, &policy_with_sources).await;
    let r = post(&g, "/api/orders/1001/refunds", &forged).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("invoice"), "{}", r.text());
    g.s.shutdown().await;
}

/// `/v2/authorize` over an action that names its record: the service reads
/// the invoice the action's params name; the caller sends only claims; a
/// caller source under the record's id, or a param that names no record,
/// is 422.
#[tokio::test]
async fn an_action_reads_the_record_its_params_name() {
    let (billing, asked) = documents().await;
    let policy = strict_refunds(
        &billing,
        &format!(
            r#"sources_from = [{{ id = "invoice", uri = "{billing}/orders/{{order_id}}/invoice" }}]"#
        ),
    );
    let b2 = billing.clone();
    let s = TestServer::with_policies(&[("refunds.toml", &policy)], move |c| {
        c.evidence.allow_origins = vec![b2];
    })
    .await;
    let ask = |order_id: &str, sources: Value| {
        json!({
            "action": {"type": "refund.create", "params": {"amount": 600, "order_id": order_id}},
            "claims": [CLAIM],
            "sources": sources,
        })
        .to_string()
    };
    let v = decide(&s, ask("1001", json!([]))).await;
    assert_eq!(v["decision"], "allow", "{v}");
    assert_eq!(asked.lock().unwrap().as_slice(), ["/orders/1001/invoice"]);

    // Another order's invoice does not state this claim.
    let v = decide(&s, ask("1002", json!([]))).await;
    assert_eq!(v["decision"], "deny", "{v}");

    for (order_id, sources) in [
        ("1001", json!([{"source_id": "invoice", "text": INVOICE}])),
        ("..", json!([])),
        ("", json!([])),
    ] {
        let r = s
            .post_json(
                "/v2/authorize",
                &ask(order_id, sources.clone()),
                Some(APP_KEY),
            )
            .await;
        assert_eq!(r.status, 422, "{order_id} {sources}: {}", r.text());
        assert!(r.text().contains("invoice"), "{}", r.text());
    }
    s.shutdown().await;
}

/// The walkthrough of `examples/provenance/` (docs/policies.md), with a
/// loopback server in place of the demo refund service's billing endpoint:
/// a fabricated inline invoice is refused, the honest claim checked against
/// the billing record is forwarded, and an amount the record does not state
/// is denied with the claim and the unbound params named.
#[tokio::test]
async fn the_provenance_example_runs_as_documented() {
    const DEMO_INVOICE: &str = "Invoice INV-1001 for order 1001: Vitamix blender, amount charged $100.00. Courier note: package damaged in transit.";
    let (addr, _task) = serve_http(|parts, _body| async move {
        let mut r =
            http::Response::new(Full::new(Bytes::from_static(DEMO_INVOICE.as_bytes())).boxed());
        if parts.uri.path() != "/billing/orders/1001/invoice" {
            *r.status_mut() = http::StatusCode::NOT_FOUND;
        }
        r
    })
    .await;
    let billing = format!("http://{addr}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/provenance");
    let example = std::fs::read_to_string(dir.join("policies/refunds.toml")).unwrap();
    let config = std::fs::read_to_string(dir.join("sidecar.toml")).unwrap();
    // The example reads the demo service on :9000, and allows that origin.
    assert!(config.contains(r#"allow_origins = ["http://127.0.0.1:9000"]"#));
    assert_eq!(
        example.matches("http://127.0.0.1:9000").count(),
        2,
        "{example}"
    );
    let g = gated(
        &billing,
        &example.replace("http://127.0.0.1:9000", &billing),
    )
    .await;

    let fabricated = json!({"amount": 600, "justification": {
        "claims": ["Order 1001 was charged $600.00."],
        "evidence": [{"source_id": "inv", "text": "Invoice INV-1001 for order 1001: amount charged $600.00."}]}});
    let r = post(&g, "/api/orders/1001/refunds", &fabricated).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.json()["reason"], "untrusted_source", "{}", r.text());

    let honest =
        json!({"amount": 100, "justification": {"claims": ["Order 1001 was charged $100.00."]}});
    let r = post(&g, "/api/orders/1001/refunds", &honest).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(g.up.count(), 1);

    let inflated =
        json!({"amount": 600, "justification": {"claims": ["Order 1001 was charged $600.00."]}});
    let r = post(&g, "/api/orders/1001/refunds", &inflated).await;
    assert_eq!(r.status, 403, "{}", r.text());
    let j = r.json();
    assert_eq!(j["reason"], "unsupported_claims", "{j}");
    assert_eq!(j["claims"][0]["unaligned"], json!(["$600.00"]), "{j}");
    assert_eq!(j["unbound_params"], json!(["amount", "order_id"]), "{j}");
    assert!(
        !r.text().contains("Vitamix"),
        "never the record's text: {j}"
    );
    assert_eq!(g.up.count(), 1);
}
