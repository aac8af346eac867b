//! A batch job survives `kill -9` of the real server: after a restart on the
//! same data dir it finishes with every result present exactly once.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

fn start(dir: &Path) -> (std::process::Child, String) {
    support::spawn_binary(env!("CARGO_BIN_EXE_verdict"), dir)
}

async fn call(addr: &str, method: http::Method, path: &str, body: String) -> (u16, Value) {
    let auth = format!("Bearer {}", support::APP_KEY);
    let headers = [
        ("content-type", "application/json"),
        ("authorization", auth.as_str()),
    ];
    let r = support::call(&format!("http://{addr}"), method, path, &headers, body).await;
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
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
    let path = format!("/v2/jobs/{id}");
    let j = support::eventually("the job to start", Duration::from_secs(30), || async {
        let (_, j) = call(&addr, http::Method::GET, &path, String::new()).await;
        if j["progress"]["done"].as_u64().unwrap_or(0) > 0 {
            Ok(j)
        } else {
            Err(j)
        }
    })
    .await;
    let done = j["progress"]["done"].as_u64().unwrap_or(0);
    assert!(done < n as u64, "finished before the kill: {j}");
    child.kill().unwrap();
    child.wait().unwrap();

    let (mut child, addr) = start(dir.path());
    let path = format!("/v2/jobs/{id}?limit=10000");
    let every = Duration::from_millis(100);
    let within = Duration::from_secs(120);
    let done = support::eventually_every("the job after the restart", within, every, || async {
        let (_, j) = call(&addr, http::Method::GET, &path, String::new()).await;
        assert_ne!(j["status"], "failed", "{j}");
        if j["status"] == "succeeded" {
            Ok(j)
        } else {
            Err(j["progress"].clone())
        }
    })
    .await;
    let results = done["results"].as_array().unwrap();
    assert_eq!(results.len(), n);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["index"], i, "every index exactly once, in order");
        assert_eq!(r["checks"][0]["status"], "supported", "{r}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
