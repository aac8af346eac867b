//! Real-process crash safety of the audit log (docs/audit.md): the real
//! binary serves `/v2/authorize` to a few concurrent clients and is killed
//! with SIGKILL at a random moment, again and again, on the same data dir.
//!
//! After every kill: `verdict audit verify --data-dir` exits 0 (the whole log
//! re-checks: records, tree, signed checkpoints). After every restart: every
//! decision whose 200 response arrived before the kill has its record
//! (`GET /v2/audit/{id}` hashes to the receipt's `record_hash`) and a proof
//! that verifies offline against the published key. Decisions answered in
//! earlier rounds are checked again on a rolling sample, and all of them once
//! more at the end.
//!
//! Bounded: `ROUNDS` kills, each after a random 40–400 ms of load, clients
//! capped in requests per round. Seeded xorshift: set `VERDICT_CRASH_SEED` to
//! replay a run.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use support::APP_KEY;

const ROUNDS: usize = 22;
const CLIENTS: usize = 4;
const MAX_REQUESTS_PER_CLIENT: usize = 400;
/// Older receipts re-checked after each restart.
const OLD_SAMPLE: usize = 16;

/// A decision whose 200 response arrived.
#[derive(Clone, Debug)]
struct Acked {
    record_id: String,
    record_hash: String,
    round: usize,
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn body(round: usize, client: usize, i: usize) -> String {
    let params = json!({"amount": i % 1000, "round": round, "client": client});
    support::blender_refund(params, support::PAID_100)
        .requirements(json!({"citations": "optional"}))
        .verbose()
        .body()
}

/// Starts the binary on 127.0.0.1:0 and returns it with its API address.
fn start(root: &Path) -> (Child, String) {
    support::spawn_binary(env!("CARGO_BIN_EXE_verdict"), root)
}

type HttpClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

async fn call(
    client: &HttpClient,
    method: Method,
    url: String,
    body: Option<String>,
) -> Result<(u16, Bytes), String> {
    let mut b = Request::builder()
        .method(method)
        .uri(url)
        .header("authorization", format!("Bearer {APP_KEY}"));
    if body.is_some() {
        b = b.header("content-type", "application/json");
    }
    let req = b
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .unwrap();
    let resp = client.request(req).await.map_err(|e| e.to_string())?;
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((parts.status.as_u16(), bytes))
}

fn verify_data_dir(data: &Path, round: usize) {
    let out = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["audit", "verify", "--data-dir"])
        .arg(data)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "round {round}: audit verify after kill -9: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `GET <path>` on the restarted server, which must answer.
async fn get(client: &HttpClient, addr: &str, path: &str) -> (u16, Bytes) {
    let url = format!("http://{addr}{path}");
    call(client, Method::GET, url, None).await.unwrap()
}

/// The record is stored with the acknowledged hash and its proof verifies
/// against the published key.
async fn check(
    client: &HttpClient,
    addr: &str,
    a: &Acked,
    keys: &mut HashMap<String, String>,
    now: usize,
) {
    let ctx = format!(
        "round {now}: record {} (acked in round {})",
        a.record_id, a.round
    );
    let (status, rec) = get(client, addr, &format!("/v2/audit/{}", a.record_id)).await;
    assert_eq!(status, 200, "{ctx}: lost after kill -9");
    assert_eq!(
        format!("sha256:{}", hex::encode(Sha256::digest(&rec))),
        a.record_hash,
        "{ctx}: stored bytes differ"
    );
    let (status, proof) = get(client, addr, &format!("/v2/audit/{}/proof", a.record_id)).await;
    assert_eq!(status, 200, "{ctx}: no proof");
    let proof = String::from_utf8(proof.to_vec()).unwrap();
    let pj: Value = serde_json::from_str(&proof).unwrap();
    assert_eq!(pj["record_hash"], a.record_hash.as_str(), "{ctx}");
    let kid = pj["key_id"].as_str().unwrap().to_string();
    if !keys.contains_key(&kid) {
        let (status, key) = get(client, addr, &format!("/v2/audit/keys/{kid}")).await;
        assert_eq!(status, 200, "{ctx}: key {kid}");
        keys.insert(kid.clone(), String::from_utf8(key.to_vec()).unwrap());
    }
    if let Err(e) = verdict::audit::verify_proof(&proof, &keys[&kid]) {
        panic!("{ctx}: proof does not verify: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_never_loses_an_acknowledged_decision() {
    let seed = std::env::var("VERDICT_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15_u64)
        | 1;
    let mut rng = XorShift(seed);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("policies")).unwrap();
    std::fs::write(root.join("keys.toml"), support::keys_toml()).unwrap();
    let data = root.join("data");
    let client = support::client();
    let mut all: Vec<Acked> = Vec::new();
    let mut keys: HashMap<String, String> = HashMap::new();
    let started = Instant::now();
    let mut kills = 0;
    let mut unanswered = 0usize;

    let (mut child, mut addr) = start(root);
    for round in 0..ROUNDS {
        // Load: CLIENTS tasks, each a bounded loop, until the process dies.
        let acked = Arc::new(Mutex::new(Vec::<Acked>::new()));
        let mut tasks = Vec::new();
        for c in 0..CLIENTS {
            let (client, addr, acked) = (client.clone(), addr.clone(), acked.clone());
            tasks.push(tokio::spawn(async move {
                let mut lost = 0usize;
                for i in 0..MAX_REQUESTS_PER_CLIENT {
                    let url = format!("http://{addr}/v2/authorize");
                    match call(&client, Method::POST, url, Some(body(round, c, i))).await {
                        Ok((200, b)) => {
                            let v: Value = serde_json::from_slice(&b).unwrap();
                            let a = &v["audit"];
                            acked.lock().unwrap().push(Acked {
                                record_id: a["record_id"].as_str().unwrap().to_string(),
                                record_hash: a["record_hash"].as_str().unwrap().to_string(),
                                round,
                            });
                        }
                        Ok((status, b)) => {
                            panic!("authorize: {status} {}", String::from_utf8_lossy(&b))
                        }
                        // The process was killed: this request has no answer.
                        Err(_) => {
                            lost += 1;
                            break;
                        }
                    }
                }
                lost
            }));
        }
        // Kill at a random moment while the clients run.
        let wait = 40 + rng.below(360);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
        for t in tasks {
            unanswered += tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .expect("clients stop once the server is gone")
                .unwrap();
        }
        let acked = std::mem::take(&mut *acked.lock().unwrap());

        // The log on disk re-checks with the server dead.
        verify_data_dir(&data, round);

        // Restart on the same data dir; every acknowledged decision is there.
        (child, addr) = start(root);
        for a in &acked {
            check(&client, &addr, a, &mut keys, round).await;
        }
        for _ in 0..OLD_SAMPLE.min(all.len()) {
            let a = &all[rng.below(all.len() as u64) as usize];
            check(&client, &addr, a, &mut keys, round).await;
        }
        eprintln!(
            "round {round}: killed after {wait} ms, {} acknowledged, all present",
            acked.len()
        );
        all.extend(acked);
    }
    // Finally every acknowledged decision of every round, on the last restart.
    for a in &all {
        check(&client, &addr, a, &mut keys, ROUNDS).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    verify_data_dir(&data, ROUNDS);
    eprintln!(
        "kill -9 loop: {kills} kills, {} decisions acknowledged and verified, \
         {unanswered} requests cut off, {:.1}s",
        all.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(kills >= 20);
    assert!(
        all.len() >= ROUNDS,
        "too few decisions were acknowledged to test anything"
    );
}
