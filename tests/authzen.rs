//! The OpenID AuthZEN Authorization API 1.0 door over HTTP: every request
//! example of the spec answered as the spec shows (with a policy that makes
//! document 2 unreadable, as its semantics examples assume), discovery, a
//! refund decided and recorded as `/v2/authorize` decides it, keys and
//! scopes, bad input, and the record-only review a `needs_review` stores.

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{sha, MockUpstream, TestServer, APP_KEY, REVIEW_KEY, VERIFY_ONLY_KEY};

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

/// Deleting anything named `prod` needs a person.
const DELETES: &str = r#"
[[action]]
type = "delete"
require_claims = false
  [[action.rule]]
  param = "resource.id"
  op = "eq"
  value = "prod"
  effect = "review"
  message = "deleting prod needs a second pair of eyes"
"#;

/// A key with both `authorize` and `review`: it may ask and review, but
/// never review what it asked.
const BOTH_KEY: &str = "test-authorize-and-review-key-0123456789";

/// A server deciding [`DELETES`] with a proxy upstream that must never be
/// called, and [`BOTH_KEY`] in its keys file.
async fn review_server() -> (TestServer, MockUpstream) {
    let up = MockUpstream::start().await;
    let url = up.url();
    let s = TestServer::with_policies(&[("deletes.toml", DELETES)], |c| {
        let keys = c.keys_file.clone().unwrap();
        let mut text = std::fs::read_to_string(&keys).unwrap();
        text.push_str(&format!(
            "\n[[key]]\nname = \"both\"\nhash = \"{}\"\nscopes = [\"authorize\", \"review\"]\n",
            sha(BOTH_KEY)
        ));
        std::fs::write(&keys, text).unwrap();
        c.proxy.upstream = Some(url);
    })
    .await;
    (s, up)
}

/// `sha256:<hex>` of some bytes.
fn sha_of(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

fn delete(id: &str) -> Value {
    json!({"subject": alice(), "action": {"name": "delete"},
           "resource": {"type": "env", "id": id}})
}

async fn approve(s: &TestServer, id: &str, key: &str) -> support::Resp {
    s.post_json(
        &format!("/v2/reviews/{id}/approve"),
        r#"{"reviewer":"rita","note":"checked"}"#,
        Some(key),
    )
    .await
}

/// A `needs_review` answers `false` with a record-only review: the caller
/// follows it on its result link, a reviewer approves it on the Review
/// API, and nothing is forwarded anywhere.
#[tokio::test]
async fn needs_review_stores_a_record_only_review_the_caller_follows() {
    let (s, up) = review_server().await;
    let evaluation = delete("prod");
    let d = post(&s, "/access/v1/evaluation", &evaluation).await;
    assert_eq!(d["decision"], false, "{d}");
    let ctx = &d["context"];
    assert_eq!(ctx["verdict_decision"], "needs_review", "{d}");
    assert_eq!(ctx["reason"], "review_required", "{d}");
    let id = ctx["review_id"].as_str().unwrap_or_else(|| panic!("{d}"));
    let url = ctx["result_url"].as_str().unwrap_or_else(|| panic!("{d}"));
    assert!(url.starts_with(&format!("/v2/reviews/{id}/result/")), "{d}");

    // The caller's link needs no key.
    let r = s.get(url, None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let result = r.json();
    assert_eq!(result["status"], "pending", "{result}");
    assert_eq!(result["forward"], json!({"state": "none"}), "{result}");
    assert_eq!(result["response"], Value::Null, "{result}");

    // What a reviewer sees: the evaluation as the request, the decision's
    // record and rules.
    let r = s.get(&format!("/v2/reviews/{id}"), Some(REVIEW_KEY)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["route"], "authzen", "{v}");
    assert_eq!(v["action"], "delete", "{v}");
    assert_eq!(v["record_id"], ctx["record_id"], "{v}");
    assert_eq!(
        v["rules"],
        json!(["deleting prod needs a second pair of eyes"]),
        "{v}"
    );
    assert_eq!(v["forward"], json!({"state": "none"}), "{v}");
    assert_eq!(v["request"]["method"], "POST", "{v}");
    assert_eq!(v["request"]["path"], "/access/v1/evaluation", "{v}");
    // The request it holds: no headers, and as the body the evaluation in
    // its canonical form, the bytes the decision record's hash is of.
    let all = verdict::review::Viewer {
        name: "test".into(),
        sees_all: true,
    };
    let held = s.app().reviews.inspect(id, &all).await.unwrap().unwrap();
    assert!(held.headers.is_empty(), "{:?}", held.headers);
    assert_eq!(
        serde_json::from_slice::<Value>(&held.body).unwrap(),
        evaluation
    );
    let record = s
        .get(
            &format!("/v2/audit/{}", ctx["record_id"].as_str().unwrap()),
            Some(APP_KEY),
        )
        .await
        .json();
    assert_eq!(record["request_hash"], sha_of(&held.body), "{record}");
    let listed = s
        .get("/v2/reviews?status=pending", Some(REVIEW_KEY))
        .await
        .json();
    assert!(
        listed["reviews"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["review_id"] == id),
        "{listed}"
    );

    // The same evaluation again, while pending: the same review.
    let again = post(&s, "/access/v1/evaluation", &evaluation).await;
    assert_eq!(again["context"]["review_id"], id, "{again}");
    assert_eq!(again["context"]["result_url"], url, "{again}");
    assert_ne!(again["context"]["record_id"], ctx["record_id"], "{again}");

    // The asking key lacks the review scope; a reviewer approves.
    assert_eq!(approve(&s, id, APP_KEY).await.status, 403);
    let r = approve(&s, id, REVIEW_KEY).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["status"], "approved", "{v}");
    assert_eq!(v["forward"], json!({"state": "none"}), "{v}");
    let result = s.get(url, None).await.json();
    assert_eq!(result["status"], "approved", "{result}");
    assert_eq!(result["forward"], json!({"state": "none"}), "{result}");
    assert_eq!(result["response"], Value::Null, "{result}");

    // Nothing is forwarded, now or by the background forwarder.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.count(), 0, "an approval forwarded something");
    let v = s
        .get(&format!("/v2/reviews/{id}"), Some(REVIEW_KEY))
        .await
        .json();
    assert_eq!(v["forward"], json!({"state": "none"}), "{v}");

    // Allowed evaluations store no review.
    let allowed = post(&s, "/access/v1/evaluation", &delete("staging")).await;
    assert_eq!(allowed["decision"], true, "{allowed}");
    assert!(allowed["context"].get("review_id").is_none(), "{allowed}");
}

/// A batch stores one review per `needs_review` evaluation; the key that
/// asked can never resolve its own.
#[tokio::test]
async fn a_batch_stores_one_review_per_needs_review_and_keeps_four_eyes() {
    let (s, _up) = review_server().await;
    let body = json!({"subject": alice(), "action": {"name": "delete"},
                      "evaluations": [
                          {"resource": {"type": "env", "id": "prod"}},
                          {"resource": {"type": "env", "id": "staging"}},
                          {"resource": {"type": "env", "id": "prod"},
                           "context": {"ticket": "OPS-7"}}]});
    let r = s
        .post_json("/access/v1/evaluations", &body.to_string(), Some(BOTH_KEY))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = r.json();
    assert_eq!(decisions(&r), [false, true, false], "{r}");
    let ids: Vec<&str> = [0, 2]
        .iter()
        .map(|&i| {
            r["evaluations"][i]["context"]["review_id"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_ne!(ids[0], ids[1], "{r}");
    assert!(
        r["evaluations"][1]["context"].get("review_id").is_none(),
        "{r}"
    );
    let all = verdict::review::Viewer {
        name: "test".into(),
        sees_all: true,
    };
    for (id, i) in ids.iter().zip([0, 2]) {
        let v = s.get(&format!("/v2/reviews/{id}"), Some(REVIEW_KEY)).await;
        let v = v.json();
        assert_eq!(v["request"]["path"], "/access/v1/evaluations", "{v}");
        assert_eq!(v["forward"], json!({"state": "none"}), "{v}");
        // Each holds its own evaluation, the batch's defaults applied.
        let held = s.app().reviews.inspect(id, &all).await.unwrap().unwrap();
        let mut want = json!({"subject": alice(), "action": {"name": "delete"}});
        want["resource"] = body["evaluations"][i]["resource"].clone();
        if let Some(c) = body["evaluations"][i].get("context") {
            want["context"] = c.clone();
        }
        assert_eq!(serde_json::from_slice::<Value>(&held.body).unwrap(), want);
    }
    // Four eyes: the key that asked cannot approve, another can.
    let r = approve(&s, ids[0], BOTH_KEY).await;
    r.assert_error(403, "forbidden");
    assert_eq!(approve(&s, ids[0], REVIEW_KEY).await.status, 200);
}

/// A `needs_review` whose review cannot be stored is not answered: 503,
/// alone or in a batch. Allowed evaluations still are.
#[tokio::test]
async fn a_review_that_cannot_be_stored_fails_the_call() {
    let (s, _up) = review_server().await;
    let db = rusqlite::Connection::open(s.path("data/verdict.db")).unwrap();
    db.execute_batch(
        "CREATE TRIGGER refuse_reviews BEFORE INSERT ON review_reviews \
         BEGIN SELECT RAISE(ABORT, 'no reviews today'); END;",
    )
    .unwrap();
    let r = s
        .post_json(
            "/access/v1/evaluation",
            &delete("prod").to_string(),
            Some(APP_KEY),
        )
        .await;
    r.assert_error(503, "unavailable");
    assert!(!r.text().contains("no reviews today"), "{}", r.text());
    let body = json!({"subject": alice(), "action": {"name": "delete"},
                      "evaluations": [{"resource": {"type": "env", "id": "staging"}},
                                      {"resource": {"type": "env", "id": "prod"}}]});
    let r = s
        .post_json("/access/v1/evaluations", &body.to_string(), Some(APP_KEY))
        .await;
    r.assert_error(503, "unavailable");
    assert_eq!(
        post(&s, "/access/v1/evaluation", &delete("staging")).await["decision"],
        true
    );
}
