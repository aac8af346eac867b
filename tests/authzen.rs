//! The OpenID AuthZEN Authorization API 1.0 door over HTTP: every request
//! example of the spec answered as the spec shows (with a policy that makes
//! document 2 unreadable, as its semantics examples assume), discovery, a
//! refund decided and recorded as `/v2/authorize` decides it, keys and
//! scopes, and bad input.

use crate::support;

use serde_json::{json, Value};
use support::{TestServer, APP_KEY, VERIFY_ONLY_KEY};

/// `can_read` is open; `read` denies document 2; `can_edit` denies a
/// subject without a `role` property.
const DOCS: &str = r#"
[[action]]
type = "can_read"
require_claims = false

[[action]]
type = "read"
require_claims = false
  [[action.rule]]
  param = "resource.id"
  op = "eq"
  value = "2"
  effect = "deny"
  message = "document 2 is not readable"

[[action]]
type = "can_edit"
require_claims = false
  [[action.rule]]
  param = "subject.properties.role"
  op = "absent"
  effect = "deny"
  message = "only a subject with a role edits"
"#;

const TICKET: &str = "On 2024-03-03 the store manager approved a refund of $100 for order 7781.";

async fn server() -> TestServer {
    TestServer::with_policies(
        &[
            ("docs.toml", DOCS),
            ("refunds.toml", include_str!("../policies/refunds.toml")),
        ],
        |_| {},
    )
    .await
}

async fn post(s: &TestServer, path: &str, body: &Value) -> Value {
    let r = s.post_json(path, &body.to_string(), Some(APP_KEY)).await;
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    r.json()
}

/// The `decision` of each evaluation of a batch answer.
fn decisions(v: &Value) -> Vec<bool> {
    v["evaluations"]
        .as_array()
        .unwrap_or_else(|| panic!("no evaluations: {v}"))
        .iter()
        .map(|d| d["decision"].as_bool().unwrap())
        .collect()
}

fn doc(id: &str) -> Value {
    json!({"resource": {"type": "document", "id": id}})
}

fn alice() -> Value {
    json!({"type": "user", "id": "alice@example.com"})
}

#[tokio::test]
async fn every_request_example_of_the_spec_answers_as_the_spec_shows() {
    let s = server().await;
    // The access evaluation request example.
    let one = post(
        &s,
        "/access/v1/evaluation",
        &json!({
            "subject": alice(),
            "resource": {"type": "account", "id": "123"},
            "action": {"name": "can_read", "properties": {"method": "GET"}},
            "context": {"time": "1985-10-26T01:22-07:00"}
        }),
    )
    .await;
    assert_eq!(one["decision"], true, "{one}");
    assert_eq!(one["context"]["verdict_decision"], "allow", "{one}");

    // Three evaluations with no defaults; then the same with the subject
    // and context as defaults; then with a default action the third
    // overrides (can_edit, which alice, without a role, may not).
    let ctx = json!({"time": "2024-05-31T15:22-07:00"});
    let names = ["boxcarring.md", "subject-search.md", "resource-search.md"];
    let full: Vec<Value> = names
        .iter()
        .map(|n| {
            json!({"subject": alice(), "action": {"name": "can_read"},
                   "resource": {"type": "document", "id": n}, "context": ctx})
        })
        .collect();
    let r = post(
        &s,
        "/access/v1/evaluations",
        &json!({ "evaluations": full }),
    )
    .await;
    assert_eq!(decisions(&r), [true, true, true], "{r}");
    let defaults: Vec<Value> = names
        .iter()
        .map(|n| json!({"action": {"name": "can_read"}, "resource": {"type": "document", "id": n}}))
        .collect();
    let body = json!({"subject": alice(), "context": ctx, "evaluations": defaults});
    assert_eq!(
        decisions(&post(&s, "/access/v1/evaluations", &body).await),
        [true, true, true]
    );
    let mut overridden: Vec<Value> = names.iter().map(|n| doc(n)).collect();
    overridden[2]["action"] = json!({"name": "can_edit"});
    let body = json!({"subject": alice(), "context": ctx, "action": {"name": "can_read"},
                      "evaluations": overridden});
    let r = post(&s, "/access/v1/evaluations", &body).await;
    assert_eq!(decisions(&r), [true, true, false], "{r}");

    // The three semantics over documents 1, 2 and 3 (2 is denied).
    let semantic = |name: &str| {
        json!({"subject": alice(), "action": {"name": "read"},
               "options": {"evaluations_semantic": name},
               "evaluations": [doc("1"), doc("2"), doc("3")]})
    };
    let all = post(&s, "/access/v1/evaluations", &semantic("execute_all")).await;
    assert_eq!(decisions(&all), [true, false, true], "{all}");
    let deny = post(
        &s,
        "/access/v1/evaluations",
        &semantic("deny_on_first_deny"),
    )
    .await;
    assert_eq!(decisions(&deny), [true, false], "{deny}");
    assert_eq!(
        deny["evaluations"][1]["context"]["semantic"],
        "deny_on_first_deny"
    );
    let permit = post(
        &s,
        "/access/v1/evaluations",
        &semantic("permit_on_first_permit"),
    )
    .await;
    assert_eq!(decisions(&permit), [true], "{permit}");
    assert_eq!(
        permit["evaluations"][0]["context"]["semantic"],
        "permit_on_first_permit"
    );

    // The options example leaves out the action everywhere: a required part
    // missing after defaults is a Bad Request, as the spec says.
    let r = s
        .post_json(
            "/access/v1/evaluations",
            &json!({"evaluations": [{"resource": {"type": "doc", "id": "1"},
                                      "subject": {"type": "doc", "id": "2"}}],
                    "options": {"evaluations_semantic": "execute_all", "another_option": "value"}})
            .to_string(),
            Some(APP_KEY),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("evaluations[0].action"), "{}", r.text());

    // The errors example: an evaluation that cannot be decided alone is
    // closed with its error, and the others are still decided.
    let mut broken = doc("9");
    broken["context"] = json!({"claims": "not a list"});
    let body = json!({"subject": alice(), "action": {"name": "read"},
                      "evaluations": [doc("1"), broken, doc("2")]});
    let r = post(&s, "/access/v1/evaluations", &body).await;
    assert_eq!(decisions(&r), [true, false, false], "{r}");
    assert_eq!(
        r["evaluations"][1]["context"]["error"]["status"], 400,
        "{r}"
    );
    assert_eq!(
        r["evaluations"][2]["context"]["reason"], "policy_violation",
        "{r}"
    );

    // With no evaluations the batch endpoint answers one decision.
    let body =
        json!({"subject": alice(), "action": {"name": "read"}, "resource": doc("2")["resource"]});
    let r = post(&s, "/access/v1/evaluations", &body).await;
    assert_eq!(r["decision"], false, "{r}");
    assert!(r.get("evaluations").is_none(), "{r}");
}

#[tokio::test]
async fn discovery_names_both_endpoints_under_the_callers_host() {
    let s = server().await;
    let r = s.get("/.well-known/authzen-configuration", None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let m = r.json();
    let base = format!("http://{}", s.addr);
    assert_eq!(m["policy_decision_point"], base.as_str(), "{m}");
    assert_eq!(
        m["access_evaluation_endpoint"],
        format!("{base}/access/v1/evaluation").as_str()
    );
    assert_eq!(
        m["access_evaluations_endpoint"],
        format!("{base}/access/v1/evaluations").as_str()
    );
    // What it lists answers.
    for key in ["access_evaluation_endpoint", "access_evaluations_endpoint"] {
        let url = m[key].as_str().unwrap();
        let path = url.strip_prefix(&base).unwrap();
        let body = json!({"subject": alice(), "action": {"name": "can_read"}, "resource": doc("1")["resource"]});
        assert_eq!(post(&s, path, &body).await["decision"], true);
    }
}

/// A refund through AuthZEN, allowed and denied as `/v2/authorize` decides
/// the same call, each on record with the evaluation's hash.
#[tokio::test]
async fn a_refund_is_decided_and_recorded_as_authorize_decides_it() {
    let s = server().await;
    for (amount, allowed) in [(100, true), (120, false)] {
        let claim = format!("A refund of ${amount} was approved for order 7781.");
        let claims = json!([{"text": claim, "citations": [{"source_id": "ticket"}]}]);
        let sources = json!([{"source_id": "ticket", "text": TICKET}]);
        let params = json!({"order_id": "7781", "amount": amount});
        let evaluation = json!({
            "subject": {"type": "user", "id": "support-bot"},
            "resource": {"type": "order", "id": "7781"},
            "action": {"name": "refund.create", "properties": params},
            "context": {"claims": claims, "sources": sources}
        });
        let z = post(&s, "/access/v1/evaluation", &evaluation).await;
        let a = post(
            &s,
            "/v2/authorize",
            &json!({"action": {"type": "refund.create", "params": params},
                    "claims": claims, "sources": sources, "response": {"mode": "verbose"}}),
        )
        .await;
        assert_eq!(z["decision"], allowed, "{z}");
        assert_eq!(z["context"]["verdict_decision"], a["decision"], "{z} / {a}");
        assert_eq!(z["context"]["reason"], a["reason"], "{z} / {a}");
        assert_eq!(z["context"]["policy_revision"], a["policy_revision"]);
        // The record: the evaluation's hash, the same decision and reason.
        let id = z["context"]["record_id"].as_str().unwrap();
        let r = s.get(&format!("/v2/audit/{id}"), Some(APP_KEY)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let record = r.json();
        let hash = verdict::http::canonical_hash(&evaluation).unwrap();
        assert_eq!(record["request_hash"], hash.as_str(), "{record}");
        assert_eq!(record["decision"], a["decision"], "{record}");
        assert_eq!(record["reason"], a["reason"], "{record}");
        assert_eq!(record["action"]["type"], "refund.create", "{record}");
    }
}

#[tokio::test]
async fn keys_scopes_and_bad_input_answer_as_authorize_does() {
    let s = server().await;
    let good = json!({"subject": alice(), "action": {"name": "can_read"}, "resource": doc("1")["resource"]});
    for path in ["/access/v1/evaluation", "/access/v1/evaluations"] {
        let r = s.post_json(path, &good.to_string(), None).await;
        assert_eq!(r.status, 401, "{path}: {}", r.text());
        let r = s
            .post_json(path, &good.to_string(), Some(VERIFY_ONLY_KEY))
            .await;
        assert_eq!(r.status, 403, "{path}: {}", r.text());
    }
    let bad = |body: &str, want: &str| {
        let s = &s;
        let (body, want) = (body.to_string(), want.to_string());
        async move {
            let r = s
                .post_json("/access/v1/evaluation", &body, Some(APP_KEY))
                .await;
            assert_eq!(r.status, 400, "{body}: {}", r.text());
            let e = r.json();
            let message = e["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains(&want), "{body}: {e}");
        }
    };
    bad(
        r#"{"action": {"name": "read"}, "resource": {"type": "d", "id": "1"}}"#,
        "subject",
    )
    .await;
    bad(
        r#"{"subject": {"type": "user", "id": 7}, "action": {"name": "read"}, "resource": {"type": "d", "id": "1"}}"#,
        "subject.id",
    )
    .await;
    bad(
        r#"{"subject": {"type": "user", "id": "a"}, "action": {"name": "read", "properties": {"resource": 1}}, "resource": {"type": "d", "id": "1"}}"#,
        "action.properties.resource",
    )
    .await;
    bad("{\"subject\": ", "JSON").await;
    let r = s
        .post_json(
            "/access/v1/evaluations",
            &json!({"subject": alice(), "action": {"name": "read"}, "evaluations": [doc("1")],
                    "options": {"evaluations_semantic": "sometimes"}})
            .to_string(),
            Some(APP_KEY),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("evaluations_semantic"), "{}", r.text());

    // Unknown members are ignored; a request id is echoed.
    let mut extra = good.clone();
    extra["foo"] = json!({"bar": 1});
    extra["subject"]["nickname"] = json!("al");
    let r = s
        .post_json_with(
            "/access/v1/evaluation",
            extra.to_string(),
            Some(APP_KEY),
            &[("x-request-id", "bfe9eb29-ab87-4ca3-be83-a1d5d8305716")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["decision"], true);
    assert_eq!(
        r.header("x-request-id"),
        Some("bfe9eb29-ab87-4ca3-be83-a1d5d8305716")
    );
}
