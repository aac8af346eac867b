//! Batch verification over HTTP: submit, poll, idempotency, tenancy, limits,
//! and a restart in the middle of a job.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{TestServer, APP_KEY, OTHER_KEY, REVIEW_KEY};

fn item(i: usize) -> Value {
    json!({"claims": [format!("Order {i} was refunded $10{i}."), "The parcel was lost."],
           "sources": [{"source_id": "s", "text": format!("Order {i}: refund of $10{i} issued. The parcel was lost in transit.")}],
           "response": {"mode": if i.is_multiple_of(2) { "verbose" } else { "compact" }}})
}

async fn submit(s: &TestServer, body: &Value, key: &str, idem: Option<&str>) -> support::Resp {
    let idem: Vec<_> = idem.map(|k| ("idempotency-key", k)).into_iter().collect();
    s.post_json_with(
        "/v1/verify-claims-batch",
        body.to_string(),
        Some(key),
        &idem,
    )
    .await
}

/// Polls the job (up to 60 s) until it has finished, and returns it.
async fn wait_done(s: &TestServer, id: &str, key: &str) -> Value {
    let path = format!("/v2/jobs/{id}");
    let every = Duration::from_millis(50);
    support::eventually_every(
        "the job to finish",
        Duration::from_secs(60),
        every,
        || async {
            let j = s.get(&path, Some(key)).await.json();
            if j["status"] == "succeeded" || j["status"] == "failed" {
                Ok(j)
            } else {
                Err(j)
            }
        },
    )
    .await
}

fn strip(mut v: Value) -> Value {
    let o = v.as_object_mut().unwrap();
    o.remove("request_id");
    o.remove("index");
    o["metrics"].as_object_mut().unwrap().remove("latency_ms");
    v
}

#[tokio::test]
async fn submit_poll_and_results_match_verify() {
    let s = TestServer::start().await;
    let items: Vec<Value> = (0..6).map(item).collect();
    let r = submit(&s, &json!({"jobs": items}), APP_KEY, None).await;
    assert_eq!(r.status, 202, "{}", r.text());
    let j = r.json();
    assert_eq!(j["status"], "queued");
    assert_eq!(j["items_total"], 6);
    let id = j["job_id"].as_str().unwrap().to_string();
    let done = wait_done(&s, &id, APP_KEY).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["progress"], json!({"total": 6, "done": 6}));
    for k in ["created_at", "started_at", "finished_at"] {
        assert!(done[k].is_string(), "{k}: {done}");
    }
    let results = done["results"].as_array().unwrap();
    assert_eq!(results.len(), 6);
    for (i, res) in results.iter().enumerate() {
        assert_eq!(res["index"], i);
        let direct = s
            .post_json("/v2/verify", &items[i].to_string(), Some(APP_KEY))
            .await
            .json();
        assert_eq!(strip(res.clone()), strip(direct), "item {i}");
    }
    // Paging.
    let page = s
        .get(&format!("/v2/jobs/{id}?offset=4&limit=5"), Some(APP_KEY))
        .await
        .json();
    let idx: Vec<_> = page["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["index"].clone())
        .collect();
    assert_eq!(idx, [json!(4), json!(5)]);
    s.get(&format!("/v2/jobs/{id}?limit=0"), Some(APP_KEY))
        .await
        .assert_error(422, "invalid_request");
    s.shutdown().await;
}

#[tokio::test]
async fn idempotency_is_per_key_and_body() {
    let s = TestServer::start().await;
    let a = json!({"jobs": [item(1)]});
    let b = json!({"jobs": [item(2)]});
    let first = submit(&s, &a, APP_KEY, Some("nightly-1")).await;
    assert_eq!(first.status, 202);
    let id = first.json()["job_id"].clone();
    let again = submit(&s, &a, APP_KEY, Some("nightly-1")).await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.json()["job_id"], id);
    submit(&s, &b, APP_KEY, Some("nightly-1"))
        .await
        .assert_error(409, "idempotency_conflict");
    let other = submit(&s, &a, OTHER_KEY, Some("nightly-1")).await;
    assert_eq!(other.status, 202);
    assert_ne!(other.json()["job_id"], id);
    let no_key = submit(&s, &a, APP_KEY, None).await;
    assert_ne!(no_key.json()["job_id"], id);
    s.shutdown().await;
}

#[tokio::test]
async fn jobs_are_private_to_their_key() {
    let s = TestServer::start().await;
    let r = submit(&s, &json!({"jobs": [item(1)]}), APP_KEY, None).await;
    let id = r.json()["job_id"].as_str().unwrap().to_string();
    wait_done(&s, &id, APP_KEY).await;
    s.get(&format!("/v2/jobs/{id}"), Some(OTHER_KEY))
        .await
        .assert_error(404, "not_found");
    s.get(
        "/v2/jobs/00000000-0000-4000-8000-000000000000",
        Some(APP_KEY),
    )
    .await
    .assert_error(404, "not_found");
    s.get("/v2/jobs/not-a-job", Some(APP_KEY))
        .await
        .assert_error(404, "not_found");
    // An audit key reads any job without the batch scope (REVIEW_KEY:
    // review, audit); a key with neither gets 403.
    assert_eq!(
        s.get(&format!("/v2/jobs/{id}"), Some(REVIEW_KEY))
            .await
            .status,
        200
    );
    s.get(&format!("/v2/jobs/{id}"), Some(support::VERIFY_ONLY_KEY))
        .await
        .assert_error(403, "forbidden");
    s.shutdown().await;
}

#[tokio::test]
async fn bad_batches_are_rejected_whole() {
    let s = TestServer::start_with(|c| {
        c.limits.max_batch_items = 3;
        c.limits.max_batch_body_bytes = 64 * 1024;
    })
    .await;
    let mut items: Vec<Value> = (0..3).map(item).collect();
    items[2]["claims"][0] = json!({"text": ""});
    let r = submit(&s, &json!({"jobs": items}), APP_KEY, None).await;
    r.assert_error(422, "invalid_request");
    assert!(r.text().contains("jobs[2].claims[0].text"), "{}", r.text());
    let r = submit(
        &s,
        &json!({"jobs": [item(0), {"claims": [{"id": "x"}]}]}),
        APP_KEY,
        None,
    )
    .await;
    r.assert_error(400, "invalid_request");
    assert!(r.text().contains("jobs[1].claims[0]"), "{}", r.text());
    let r = submit(
        &s,
        &json!({"jobs": (0..4).map(item).collect::<Vec<_>>()}),
        APP_KEY,
        None,
    )
    .await;
    r.assert_error(422, "invalid_request");
    let big = json!({"jobs": [{"claims": ["x".repeat(70 * 1024)]}]});
    submit(&s, &big, APP_KEY, None)
        .await
        .assert_error(413, "payload_too_large");
    submit(&s, &json!({"jobs": []}), APP_KEY, None)
        .await
        .assert_error(422, "invalid_request");
    let bad_key = submit(&s, &json!({"jobs": [item(0)]}), APP_KEY, Some("has space")).await;
    bad_key.assert_error(400, "invalid_request");
    s.shutdown().await;
}

#[tokio::test]
async fn a_job_survives_a_restart_with_every_result_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = support::test_config(&dir);
    let s = TestServer::attach(verdict::app::start(config.clone()).await.unwrap(), dir);
    let n = 10_000;
    let body = json!({"jobs": (0..n).map(item).collect::<Vec<_>>()});
    let r = submit(&s, &body, APP_KEY, None).await;
    assert_eq!(r.status, 202);
    let id = r.json()["job_id"].as_str().unwrap().to_string();
    // Stop once the job is under way but far from done.
    let path = format!("/v2/jobs/{id}");
    let j = support::eventually("the job to start", Duration::from_secs(30), || async {
        let j = s.get(&path, Some(APP_KEY)).await.json();
        if j["progress"]["done"].as_u64().unwrap() > 0 {
            Ok(j)
        } else {
            Err(j)
        }
    })
    .await;
    let done = j["progress"]["done"].as_u64().unwrap();
    assert!(done < n as u64, "the job finished before the restart: {j}");
    let dir = s.shutdown().await;

    let running = verdict::app::start(config).await.unwrap();
    let s = TestServer::attach(running, dir);
    let done = wait_done(&s, &id, APP_KEY).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let all = s
        .get(&format!("/v2/jobs/{id}?limit=10000"), Some(APP_KEY))
        .await
        .json();
    let results = all["results"].as_array().unwrap();
    assert_eq!(results.len(), n);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["index"], i, "every index exactly once, in order");
    }
    s.shutdown().await;
}
