//! Witnessing from the outside: a log sends its checkpoints to a real
//! `verdict` witness over HTTP, serves them cosigned, and is caught when
//! its newest records and checkpoints are deleted (a rollback), whether or
//! not the local copies of the cosignatures go with them. Also: the public
//! checkpoint and consistency endpoints, checked offline by the CLI.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{test_config, TestServer, APP_KEY};
use verdict::audit::{cosign, keys, note};
use verdict::config::{Config, WitnessConfig};
use verdict::witness::{TrustedLog, Witness, WitnessHandler};

const WITNESS: &str = "verdict.test/witness";

struct RunningWitness {
    url: String,
    vkey: String,
    witness: Arc<Witness>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningWitness {
    async fn start(dir: &std::path::Path, log_vkeys: &[String]) -> RunningWitness {
        Self::start_at(dir, log_vkeys, "127.0.0.1:0").await
    }

    /// A witness on `addr` (one that served before, to bring it back).
    async fn start_at(dir: &std::path::Path, log_vkeys: &[String], addr: &str) -> RunningWitness {
        let trusted = TrustedLog::from_vkeys(log_vkeys).unwrap();
        let witness = Arc::new(Witness::open(dir, WITNESS, vec![trusted]).unwrap());
        let vkey = witness.vkey();
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(verdict::server::serve(
            "witness",
            listener,
            None,
            Arc::new(WitnessHandler {
                witness: witness.clone(),
            }),
            verdict::config::ServerConfig::witness_defaults(),
            stopped,
        ));
        RunningWitness {
            url,
            vkey,
            witness,
            stop,
            task,
        }
    }

    fn config(&self) -> WitnessConfig {
        let (name, key) = cosign::parse_verifier_key(&self.vkey).unwrap();
        WitnessConfig {
            url: self.url.clone(),
            name,
            key,
        }
    }

    async fn stop(self) {
        self.stop.send_replace(true);
        self.task.await.unwrap();
    }
}

fn body(i: usize) -> String {
    support::blender_refund(json!({"amount": i}), support::PAID_100)
        .requirements(json!({"citations": "optional"}))
        .body()
}

fn log_vkeys(config: &Config) -> Vec<String> {
    keys::load_docs(&config.data_dir)
        .unwrap()
        .iter()
        .map(|d| note::verifier_key(d.note_name().unwrap(), &d.public_key().unwrap()))
        .collect()
}

/// Serves until the witness has cosigned the newest checkpoint; returns
/// the tree size then.
async fn decide_and_wait_for_cosignature(s: &TestServer, n: usize) -> u64 {
    for i in 0..n {
        let r = s.post_json("/v2/authorize", &body(i), Some(APP_KEY)).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    support::eventually("a cosignature", Duration::from_secs(10), || async {
        let checkpoint = s.get("/v2/audit/checkpoint", None).await.text();
        if checkpoint.contains(&format!("\u{2014} {WITNESS} ")) {
            Ok(checkpoint.lines().nth(1).unwrap().parse().unwrap())
        } else {
            Err(checkpoint)
        }
    })
    .await
}

/// What [`roll_back`] does with the stored cosignatures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cosignatures {
    Keep,
    /// Those of the deleted checkpoints.
    DeleteRolledBack,
    DeleteAll,
}

/// Deletes at least the newest `by` records (back to the newest checkpoint
/// that leaves them out) and their checkpoints, keeping the log internally
/// consistent (the newest remaining checkpoint covers every remaining
/// record): what someone with the data dir can do. Returns the size before
/// and after.
fn roll_back(config: &Config, by: i64, cosignatures: Cosignatures) -> (u64, u64) {
    let conn = rusqlite::Connection::open(config.data_dir.join("verdict.db")).unwrap();
    let newest: i64 = conn
        .query_row("SELECT MAX(tree_size) FROM audit_checkpoints", [], |r| {
            r.get(0)
        })
        .unwrap();
    let cut: i64 = conn
        .query_row(
            "SELECT MAX(tree_size) FROM audit_checkpoints WHERE tree_size <= ?1",
            [newest - by],
            |r| r.get(0),
        )
        .unwrap();
    conn.execute("DELETE FROM audit_records WHERE leaf >= ?1", [cut])
        .unwrap();
    conn.execute("DELETE FROM audit_checkpoints WHERE tree_size > ?1", [cut])
        .unwrap();
    match cosignatures {
        Cosignatures::Keep => {}
        Cosignatures::DeleteRolledBack => {
            conn.execute("DELETE FROM audit_cosignatures WHERE tree_size > ?1", [cut])
                .unwrap();
        }
        Cosignatures::DeleteAll => {
            conn.execute("DELETE FROM audit_cosignatures", []).unwrap();
        }
    }
    (u64::try_from(newest).unwrap(), u64::try_from(cut).unwrap())
}

#[tokio::test]
async fn a_witnessed_log_that_rolls_back_refuses_to_start() {
    // First start: the log creates its key, which the witness must trust.
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&dir);
    let s = TestServer::attach(verdict::app::start(config.clone()).await.unwrap(), dir);
    let dir = s.shutdown().await;
    let wdir = tempfile::tempdir().unwrap();
    let witness = RunningWitness::start(wdir.path(), &log_vkeys(&config)).await;

    let mut with_witness = config.clone();
    with_witness.audit.witnesses = vec![witness.config()];
    let s = TestServer::attach(
        verdict::app::start(with_witness.clone()).await.unwrap(),
        dir,
    );
    let cosigned = decide_and_wait_for_cosignature(&s, 8).await;
    assert!(cosigned >= 8, "{cosigned}");
    // The cosignature verifies with the witness's key.
    let note_text = s.get("/v2/audit/checkpoint", None).await.text();
    let parsed = note::parse(&note_text).unwrap();
    let (name, key) = cosign::parse_verifier_key(&witness.vkey).unwrap();
    let lines: String = note_text
        .lines()
        .filter(|l| l.starts_with(&format!("\u{2014} {name} ")))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        cosign::verify_lines(parsed.text, &lines, &name, &key)
            .unwrap()
            .len(),
        1
    );
    let h = s.get("/health/detailed", None).await.text();
    assert!(h.contains(WITNESS), "{h}");
    let m = s.get("/metrics", None).await.text();
    assert!(
        m.contains("verdict_audit_witness_lag{witness=\"verdict.test/witness\"}"),
        "{m}"
    );
    let dir = s.shutdown().await;

    // Rollback with the local cosignatures left in place: the log itself
    // refuses, and so does `audit verify`.
    let (newest, cut) = roll_back(&with_witness, 3, Cosignatures::Keep);
    assert!(cut < newest);
    let err = verdict::app::start(with_witness.clone())
        .await
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(msg.contains(WITNESS) && msg.contains("rollback"), "{msg}");
    let verify = verdict::audit::verify_log(
        &with_witness.data_dir.join("verdict.db"),
        &with_witness.data_dir,
        |_, _| {},
    );
    assert!(
        matches!(verify, Err(verdict::audit::VerifyError::RolledBack(
            verdict::audit::WitnessFailure::RolledBack { ref witness, cosigned: c, size }))
            if witness == WITNESS && c >= cosigned && size == cut),
        "{verify:?}"
    );

    // The local cosignatures deleted too: the witness still remembers, and
    // its 409 at start-up refuses the log.
    let (_, cut) = roll_back(&with_witness, 3, Cosignatures::DeleteAll);
    let err = verdict::app::start(with_witness.clone())
        .await
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(
        msg.contains(WITNESS)
            && msg.contains("rollback")
            && msg.contains(&format!("holds only {cut}")),
        "{msg}"
    );
    // Without the witness configured the rolled-back log starts: the limit
    // of a log nobody outside watches (docs/audit.md).
    let alone = verdict::app::start(config.clone()).await.unwrap();
    alone.shutdown().await;
    witness.stop().await;
    drop(dir);
}

/// The newest checkpoint's size, as `GET /v2/audit/checkpoint` serves it.
async fn checkpoint_size(s: &TestServer) -> u64 {
    let note = s.get("/v2/audit/checkpoint", None).await.text();
    note.lines().nth(1).unwrap().parse().unwrap()
}

/// Attack round 3, row 3: the newest records, their checkpoints and
/// cosignatures deleted, the log started while its witness is away and
/// grown past the size the witness cosigned. The witness, back, answers
/// 422 (the proof from its size does not verify): a fork, which is a
/// rollback. The running server stops deciding (`/ready` and `/health`
/// 503 naming it, authorize 503, no lag shown against the forked tree), a
/// restart is refused with exit 64, and `audit verify` fails: restarted
/// twice, the rollback is still reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_rolled_back_while_its_witness_was_away_is_stopped_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&dir);
    let s = TestServer::attach(verdict::app::start(config.clone()).await.unwrap(), dir);
    let dir = s.shutdown().await;
    let vkeys = log_vkeys(&config);
    let origin = vkeys[0].split('+').next().unwrap().to_string();
    let wdir = tempfile::tempdir().unwrap();
    let witness = RunningWitness::start(wdir.path(), &vkeys).await;
    let mut with_witness = config.clone();
    with_witness.audit.witnesses = vec![witness.config()];
    let s = TestServer::attach(
        verdict::app::start(with_witness.clone()).await.unwrap(),
        dir,
    );
    decide_and_wait_for_cosignature(&s, 8).await;
    let dir = s.shutdown().await;
    let cosigned = witness.witness.cosigned_size(&origin).unwrap();
    // The witness counts what it cosigns, at GET /metrics.
    let wm = support::call(&witness.url, http::Method::GET, "/metrics", &[], "").await;
    assert_eq!(wm.status, 200, "{}", wm.text());
    assert!(
        wm.text()
            .contains("verdict_witness_requests_total{outcome=\"cosigned\"}"),
        "{}",
        wm.text()
    );
    let (url, vkey) = (witness.url.clone(), witness.vkey.clone());
    witness.stop().await;

    let (_, cut) = roll_back(&with_witness, 5, Cosignatures::DeleteRolledBack);
    assert!(cut + 5 <= cosigned, "cut {cut}, cosigned {cosigned}");
    // The witness is away: the log starts (an unreachable witness does not
    // block start-up) and decides until it is larger than the witness's
    // tree.
    let s = TestServer::attach(
        verdict::app::start(with_witness.clone()).await.unwrap(),
        dir,
    );
    let mut i = 100;
    let size = loop {
        let r = s.post_json("/v2/authorize", &body(i), Some(APP_KEY)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        i += 1;
        let size = checkpoint_size(&s).await;
        if size > cosigned + 1 {
            break size;
        }
    };
    let names_both = |text: &str| {
        text.contains(WITNESS)
            && text.contains(&format!("tree size {cosigned}"))
            && text.contains(&format!("{size} records"))
    };

    // The witness comes back at the same address.
    let witness =
        RunningWitness::start_at(wdir.path(), &vkeys, url.trim_start_matches("http://")).await;
    let ready = support::eventually("/ready to fail", Duration::from_secs(20), || async {
        let r = s.get("/ready", None).await;
        if r.status == 503 {
            Ok(r.text())
        } else {
            Err(r.text())
        }
    })
    .await;
    assert!(names_both(&ready), "{ready}");
    let health = s.get("/health", None).await;
    assert_eq!(health.status, 503, "{}", health.text());
    assert!(names_both(&health.text()), "{}", health.text());
    let detailed = s.get("/health/detailed", None).await.json();
    let audit = &detailed["components"]["audit"];
    assert_eq!(audit["status"], "failing", "{detailed}");
    // No lag against the tree the log forked from: at most against a
    // smaller one whose cosignature the log still holds.
    let w = &audit["witnesses"][0];
    match w["cosigned_size"].as_u64() {
        None => assert!(w["lag"].is_null(), "{detailed}"),
        Some(c) => {
            assert!(c <= cut, "{detailed}");
            assert_eq!(w["lag"].as_u64(), Some(size - c), "{detailed}");
        }
    }
    let m = s.get("/metrics", None).await.text();
    assert!(
        m.contains("verdict_audit_witness_submissions_total{witness=\"verdict.test/witness\",outcome=\"forked\"}"),
        "{m}"
    );
    // Fail closed: nothing is decided, nothing appended.
    let r = s.post_json("/v2/authorize", &body(i), Some(APP_KEY)).await;
    r.assert_error(503, "unavailable");
    assert_eq!(checkpoint_size(&s).await, size);
    let dir = s.shutdown().await;

    // Restarted: `serve` refuses, exit 64.
    let cfg = dir.path().join("witnessed.toml");
    std::fs::write(
        &cfg,
        format!("[[audit.witnesses]]\nurl = \"{url}\"\nvkey = \"{vkey}\"\n"),
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_verdict");
    let (root, cfg_arg) = (dir.path().to_path_buf(), cfg.display().to_string());
    let out = tokio::task::spawn_blocking(move || {
        support::serve_until_exit(bin, &root, &["--config", &cfg_arg], Duration::from_secs(20))
    })
    .await
    .unwrap()
    .unwrap_or_else(|out| {
        panic!(
            "serve started on the rolled-back log: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    support::assert_exit(&out, 64);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(names_both(&err), "{err}");

    // And `audit verify`, given the config, asks the witness and fails.
    let data = dir.path().join("data");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin)
            .args(["audit", "verify", "--config"])
            .arg(&cfg)
            .arg("--data-dir")
            .arg(&data)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    support::assert_exit(&out, 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(names_both(&err), "{err}");

    // The witness refused the forked tree three times: the running server,
    // the restart, `audit verify`.
    let wm = support::call(&witness.url, http::Method::GET, "/metrics", &[], "").await;
    assert!(
        wm.text()
            .contains("verdict_witness_requests_total{outcome=\"bad_proof\"} 3"),
        "{}",
        wm.text()
    );
    witness.stop().await;
    drop(dir);
}

#[tokio::test]
async fn a_dead_witness_never_delays_a_decision() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(&dir);
    // Nothing listens here: every submission fails.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let k =
        ring::signature::Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).unwrap();
    let pair = ring::signature::Ed25519KeyPair::from_pkcs8(k.as_ref()).unwrap();
    let vkey = cosign::verifier_key(
        WITNESS,
        ring::signature::KeyPair::public_key(&pair).as_ref(),
    );
    let (name, key) = cosign::parse_verifier_key(&vkey).unwrap();
    config.audit.witnesses = vec![WitnessConfig { url, name, key }];
    let s = TestServer::attach(verdict::app::start(config).await.unwrap(), dir);
    let t = Instant::now();
    for i in 0..5 {
        let r = s.post_json("/v2/authorize", &body(i), Some(APP_KEY)).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    support::eventually(
        "the witness failure reported",
        Duration::from_secs(5),
        || async {
            let h = s.get("/health/detailed", None).await.text();
            if h.contains("last_error") && h.contains(WITNESS) && !h.contains("\"last_error\":null")
            {
                Ok(())
            } else {
                Err(h)
            }
        },
    )
    .await;
    let m = s.get("/metrics", None).await.text();
    assert!(
        m.contains("verdict_audit_witness_submissions_total{witness=\"verdict.test/witness\",outcome=\"failed\"}"),
        "{m}"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn consistency_proofs_between_served_checkpoints_verify_offline() {
    let s = TestServer::start().await;
    let save = |name: &str, text: &str| {
        let p = s.path(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    s.post_json("/v2/authorize", &body(0), Some(APP_KEY)).await;
    let old = s.get("/v2/audit/checkpoint", None).await.text();
    for i in 1..6 {
        s.post_json("/v2/authorize", &body(i), Some(APP_KEY)).await;
    }
    let new = s.get("/v2/audit/checkpoint", None).await.text();
    let size = |t: &str| t.lines().nth(1).unwrap().to_string();
    let (m, n) = (size(&old), size(&new));
    let proof = s
        .get(&format!("/v2/audit/consistency?first={m}&second={n}"), None)
        .await;
    assert_eq!(proof.status, 200, "{}", proof.text());
    let kid = keys::load_docs(&s.path("data")).unwrap()[0].kid.clone();
    let key = s.get(&format!("/v2/audit/keys/{kid}"), None).await.text();
    let (old_p, new_p, proof_p, key_p) = (
        save("old.note", &old),
        save("new.note", &new),
        save("proof.json", &proof.text()),
        save("key.json", &key),
    );
    let bin = env!("CARGO_BIN_EXE_verdict");
    let run = |old: &std::path::Path, new: &std::path::Path, proof: &std::path::Path| {
        std::process::Command::new(bin)
            .args(["audit", "verify-consistency"])
            .arg(old)
            .arg(new)
            .arg("--proof")
            .arg(proof)
            .arg("--key")
            .arg(&key_p)
            .output()
            .unwrap()
    };
    let ok = run(&old_p, &new_p, &proof_p);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    // A flipped proof hash, or the checkpoints swapped, fail with exit 1.
    let mut doc: serde_json::Value = proof.json();
    let first = doc["proof"][0].as_str().unwrap().to_string();
    let flipped = if first.starts_with('A') { "B" } else { "A" };
    doc["proof"][0] = json!(format!("{flipped}{}", &first[1..]));
    let bad = save("bad.json", &doc.to_string());
    assert_eq!(run(&old_p, &new_p, &bad).status.code(), Some(1));
    assert_eq!(run(&new_p, &old_p, &proof_p).status.code(), Some(1));

    // Bad queries are 400 with a JSON error.
    for q in [
        "",
        "?first=0&second=1",
        "?first=3&second=2",
        "?first=1&second=999999",
        "?first=x&second=1",
        "?first=1&second=2&third=3",
    ] {
        s.get(&format!("/v2/audit/consistency{q}"), None)
            .await
            .assert_error(400, "invalid_request");
    }
    s.shutdown().await;
}

/// `verdict audit vkey` and `verdict witness vkey` print one verifier key
/// per line, each ending in a newline, so `"$(...)"` and a file both work.
#[tokio::test]
async fn vkey_commands_print_whole_lines() {
    let s = TestServer::start().await;
    let data = s.path("data");
    let bin = env!("CARGO_BIN_EXE_verdict");
    let witness_dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["audit", "vkey", "--data-dir", data.to_str().unwrap()],
        vec![
            "witness",
            "vkey",
            "--data-dir",
            witness_dir.path().to_str().unwrap(),
            "--name",
            "w1.example",
        ],
    ] {
        let out = std::process::Command::new(bin)
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.ends_with('\n'), "{args:?}: {text:?}");
        for line in text.lines() {
            assert_eq!(
                line.splitn(3, '+').filter(|p| !p.is_empty()).count(),
                3,
                "{args:?}: {line:?}"
            );
        }
    }
    s.shutdown().await;
}
