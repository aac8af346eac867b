//! A batch job survives `kill -9` of the real server: after a restart on the
//! same data dir it finishes with every result present exactly once.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn start(dir: &Path) -> (std::process::Child, String) {
    support::spawn_binary(env!("CARGO_BIN_EXE_verdict"), dir)
}

async fn call(addr: &str, method: http::Method, path: &str, body: String) -> (u16, Value) {
    let client = support::client();
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {}", support::APP_KEY))
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn a_job_finishes_after_the_server_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("policies")).unwrap();
    std::fs::write(dir.path().join("keys.toml"), support::keys_toml()).unwrap();
    let (mut child, addr) = start(dir.path());
    let n = 10_000;
    let items: Vec<Value> = (0..n)
        .map(|i| json!({"claims": [format!("Order {i} was refunded.")], "sources": [{"id": "s", "text": format!("Order {i} was refunded in full.")}]}))
        .collect();
    let (status, v) = call(
        &addr,
        http::Method::POST,
        "/v1/verify-claims-batch",
        json!({"jobs": items}).to_string(),
    )
    .await;
    assert_eq!(status, 202, "{v}");
    let id = v["job_id"].as_str().unwrap().to_string();
    // Kill once the job is under way but far from done.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, j) = call(
            &addr,
            http::Method::GET,
            &format!("/v2/jobs/{id}"),
            String::new(),
        )
        .await;
        let done = j["progress"]["done"].as_u64().unwrap_or(0);
        if done > 0 {
            assert!(done < n as u64, "finished before the kill: {j}");
            break;
        }
        assert!(Instant::now() < deadline, "the job never started: {j}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let (mut child, addr) = start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(120);
    let done = loop {
        let (_, j) = call(
            &addr,
            http::Method::GET,
            &format!("/v2/jobs/{id}?limit=10000"),
            String::new(),
        )
        .await;
        if j["status"] == "succeeded" {
            break j;
        }
        assert_ne!(j["status"], "failed", "{j}");
        assert!(
            Instant::now() < deadline,
            "the job did not finish after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let results = done["results"].as_array().unwrap();
    assert_eq!(results.len(), n);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["index"], i, "every index exactly once, in order");
        assert_eq!(r["checks"][0]["status"], "supported", "{r}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
