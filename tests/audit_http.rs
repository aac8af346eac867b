//! The audit log through HTTP and the CLI: every authorize decision carries a
//! receipt whose record, proof and key can be fetched and checked offline, and
//! a log that cannot write makes authorize fail closed.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use support::{TestServer, APP_KEY, OTHER_KEY, REVIEW_KEY, VERIFY_ONLY_KEY};

fn body() -> String {
    let params = json!({"amount": 10, "card_number": "4111111111111111"});
    support::blender_refund(params, support::PAID_100)
        .requirements(json!({"citations": "optional"}))
        .verbose()
        .body()
}

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s.strip_prefix("sha256:").unwrap()).unwrap()
}

fn sha(parts: &[&[u8]]) -> Vec<u8> {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().to_vec()
}

/// Adds a policy file and waits (up to 10 s) for the reload's audit record.
async fn reload_policies(s: &TestServer) {
    let audit = &s.app().audit;
    let before = audit.health().size;
    std::fs::write(s.path("policies/a.toml"), "[[action]]\ntype = \"x\"\n").unwrap();
    support::wait_for("the reload record", Duration::from_secs(10), || {
        audit.health().size != before
    })
    .await;
}

#[tokio::test]
async fn receipts_records_proofs_and_keys_agree() {
    let s = TestServer::start_with(|c| {
        std::fs::write(
            c.policies_dir.join("refund.toml"),
            "[[action]]\ntype = \"refund\"\nredact = [\"params.card_number\"]\n",
        )
        .unwrap();
    })
    .await;
    let mut last = Value::Null;
    for _ in 0..5 {
        let r = s.post_json("/v2/authorize", &body(), Some(APP_KEY)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        last = r.json();
    }
    let a = last["audit"].clone();
    support::assert_receipt(&a);
    let id = a["record_id"].as_str().unwrap();

    // The record's bytes hash to record_hash, and the card number is redacted.
    let rec = s.get(&format!("/v2/audit/{id}"), Some(APP_KEY)).await;
    assert_eq!(rec.status, 200);
    assert_eq!(
        format!("sha256:{}", hex::encode(Sha256::digest(&rec.body))),
        a["record_hash"]
    );
    let rv = rec.json();
    assert_eq!(rv["decision"], last["decision"], "{rv}");
    assert_eq!(rv["reason"], last["reason"], "{rv}");
    assert_eq!(rv["request_id"], last["request_id"], "{rv}");
    assert_eq!(rv["principal"], "app");
    assert!(!rec.text().contains("4111111111111111"), "{}", rec.text());
    // Redacted as the HMAC-SHA256 of the value's canonical JSON under the
    // data dir's 32-byte, owner-only redaction key.
    let key_path = s.path("data/redaction.key");
    let key_bytes = std::fs::read(&key_path).unwrap();
    assert_eq!(key_bytes.len(), 32);
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key_path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
    let hmac = ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key_bytes),
        b"\"4111111111111111\"",
    );
    let redacted = format!("hmac-sha256:{}", hex::encode(hmac.as_ref()));
    assert_eq!(rv["action"]["params"]["card_number"], redacted, "{rv}");
    // Nothing in the data dir (database, WAL, keys) holds the raw value.
    for entry in std::fs::read_dir(s.path("data")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !bytes.windows(16).any(|w| w == b"4111111111111111"),
                "{}",
                path.display()
            );
        }
    }

    // The inline proof reaches merkle_root.
    let mut h = sha(&[&[0u8], &unhex(a["record_hash"].as_str().unwrap())]);
    for step in a["proof"].as_array().unwrap() {
        let sib = unhex(step["hash"].as_str().unwrap());
        h = if step["position"] == "left" {
            sha(&[&[1u8], &sib, &h])
        } else {
            sha(&[&[1u8], &h, &sib])
        };
    }
    assert_eq!(h, unhex(a["merkle_root"].as_str().unwrap()));

    // The proof endpoint agrees, and never changes.
    let p1 = s.get(&format!("/v2/audit/{id}/proof"), Some(APP_KEY)).await;
    assert_eq!(p1.status, 200, "{}", p1.text());
    let pj = p1.json();
    assert_eq!(pj["proof"], a["proof"]);
    assert_eq!(pj["merkle_root"], a["merkle_root"]);
    assert_eq!(
        pj["algorithm"],
        json!({"hash": "sha256", "tree": "rfc6962", "signature": "ed25519"})
    );
    s.post_json("/v2/authorize", &body(), Some(APP_KEY)).await;
    let p2 = s.get(&format!("/v2/audit/{id}/proof"), Some(APP_KEY)).await;
    assert_eq!(p1.body, p2.body);

    // The key is public and verifies the proof offline through the CLI.
    let key = s
        .get(
            &format!("/v2/audit/keys/{}", a["key_id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(key.status, 200);
    let kj: Value = key.json();
    assert_eq!(
        (kj["kty"].as_str(), kj["crv"].as_str()),
        (Some("OKP"), Some("Ed25519"))
    );
    assert_eq!(kj["status"], "active");
    let proof_file = s.path("proof.json");
    let key_file = s.path("key.json");
    std::fs::write(&proof_file, &p1.body).unwrap();
    std::fs::write(&key_file, &key.body).unwrap();
    let bin = env!("CARGO_BIN_EXE_verdict");
    let run = |proof: &std::path::Path| {
        Command::new(bin)
            .args(["audit", "verify-proof"])
            .arg(proof)
            .arg("--key")
            .arg(&key_file)
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(run(&proof_file), Some(0));
    let tampered = s.path("tampered.json");
    let text = String::from_utf8(p1.body.to_vec()).unwrap();
    let first = a["proof"][0]["hash"].as_str().unwrap();
    let flipped = format!(
        "{}{}",
        &first[..first.len() - 1],
        if first.ends_with('0') { "1" } else { "0" }
    );
    std::fs::write(&tampered, text.replace(first, &flipped)).unwrap();
    assert_eq!(run(&tampered), Some(1));
    assert_eq!(run(&s.path("missing.json")), Some(2));

    // --record ties the proof to a record: the record as served passes; a
    // proof whose record_id was edited, or a record whose bytes were, fails.
    let record = s.get(&format!("/v2/audit/{id}"), Some(APP_KEY)).await;
    assert_eq!(record.status, 200);
    let record_file = s.path("record.json");
    std::fs::write(&record_file, &record.body).unwrap();
    let run_record = |proof: &std::path::Path, rec: &std::path::Path| {
        Command::new(bin)
            .args(["audit", "verify-proof"])
            .arg(proof)
            .arg("--key")
            .arg(&key_file)
            .arg("--record")
            .arg(rec)
            .output()
            .unwrap()
    };
    let ok = run_record(&proof_file, &record_file);
    assert_eq!(ok.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("proves this record"));
    let alone = Command::new(bin)
        .args(["audit", "verify-proof"])
        .arg(&proof_file)
        .arg("--key")
        .arg(&key_file)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&alone.stdout).contains("only the proof was checked"));
    let other_id = "00000000-0000-4000-8000-000000000000";
    let relabelled = s.path("relabelled.json");
    std::fs::write(&relabelled, text.replace(&id.to_string(), other_id)).unwrap();
    assert_eq!(run_record(&relabelled, &record_file).status.code(), Some(1));
    let edited_record = s.path("edited-record.json");
    let rtext = String::from_utf8(record.body.to_vec()).unwrap();
    assert!(rtext.contains("\"decision\":\""));
    std::fs::write(
        &edited_record,
        rtext.replacen("\"decision\":\"", "\"decision\":\"x", 1),
    )
    .unwrap();
    let bad = run_record(&proof_file, &edited_record);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("record_hash"));

    // Records and proofs need the audit scope (docs/api.md): a key without it
    // gets 403; any audit-scope key sees every record.
    for path in [format!("/v2/audit/{id}"), format!("/v2/audit/{id}/proof")] {
        s.get(&path, Some(OTHER_KEY))
            .await
            .assert_error(403, "forbidden");
    }
    assert_eq!(
        s.get(&format!("/v2/audit/{id}"), Some(REVIEW_KEY))
            .await
            .status,
        200
    );
    assert_eq!(s.get(&format!("/v2/audit/{id}"), None).await.status, 401);
    let unknown = format!("{}ffff", &id[..id.len() - 4]);
    s.get(&format!("/v2/audit/{unknown}/proof"), Some(APP_KEY))
        .await
        .assert_error(404, "not_found");
    s.get("/v2/audit/not-a-uuid", Some(APP_KEY))
        .await
        .assert_error(404, "not_found");
    s.get("/v2/audit/keys/nope", None)
        .await
        .assert_error(404, "not_found");

    // The whole log verifies after a clean shutdown.
    let dir = s.shutdown().await;
    let data = dir.path().join("data");
    let out = support::cli(bin, &["audit", "verify", "--data-dir"], &data);
    support::assert_exit(&out, 0);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok: "));

    // Key rotation (server stopped): the log still verifies, the new key
    // signs from now on and the old key stays published as retired.
    let old_kid = a["key_id"].as_str().unwrap().to_string();
    let out = support::cli(bin, &["audit", "rotate-key", "--data-dir"], &data);
    support::assert_exit(&out, 0);
    let out = support::cli(bin, &["audit", "verify", "--data-dir"], &data);
    support::assert_exit(&out, 0);
    let mut config = support::test_config(&dir);
    config.data_dir = data.clone();
    let s = TestServer::attach(verdict::app::start(config).await.unwrap(), dir);
    let old = s
        .get(&format!("/v2/audit/keys/{old_kid}"), None)
        .await
        .json();
    assert_eq!(old["status"], "retired", "{old}");
    let r = s
        .post_json("/v2/authorize", &body(), Some(APP_KEY))
        .await
        .json();
    let new_kid = r["audit"]["key_id"].as_str().unwrap();
    assert_ne!(new_kid, old_kid);
    // The redaction key survives the restart: the same value, the same text.
    let again = s
        .get(
            &format!("/v2/audit/{}", r["audit"]["record_id"].as_str().unwrap()),
            Some(APP_KEY),
        )
        .await
        .json();
    assert_eq!(again["action"]["params"]["card_number"], redacted);
    assert_eq!(
        s.get(&format!("/v2/audit/keys/{new_kid}"), None)
            .await
            .json()["status"],
        "active"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn a_log_that_cannot_write_fails_closed_and_recovers() {
    let s = TestServer::start().await;
    let app = s.app().clone();
    app.audit.inject_write_failure(true);
    let r = s.post_json("/v2/authorize", &body(), Some(APP_KEY)).await;
    r.assert_error(503, "unavailable");
    let h = s.get("/health/detailed", None).await.json();
    assert_eq!(h["status"], "failing", "{h}");
    assert_eq!(h["components"]["audit"]["status"], "failing", "{h}");
    // Verify does not write the log and keeps working.
    let v = s
        .post_json(
            "/v2/verify",
            r#"{"claims":["a b c"],"sources":[{"id":"s","text":"a b c"}]}"#,
            Some(APP_KEY),
        )
        .await;
    assert_eq!(v.status, 200);
    app.audit.inject_write_failure(false);
    let r = s.post_json("/v2/authorize", &body(), Some(APP_KEY)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let h = s.get("/health/detailed", None).await.json();
    assert_eq!(h["components"]["audit"]["status"], "ok", "{h}");
    let dir = s.shutdown().await;
    let data = dir.path().join("data");
    let out = support::cli(
        env!("CARGO_BIN_EXE_verdict"),
        &["audit", "verify", "--data-dir"],
        &data,
    );
    support::assert_exit(&out, 0);
}

#[tokio::test]
async fn policy_reloads_are_audited() {
    let s = TestServer::start().await;
    reload_policies(&s).await;
    s.shutdown().await;
}

/// The `principal` column beside each record is not covered by the record
/// hash, so it must open nothing: rewrite it in SQLite to name another key,
/// on records with a principal and on one without (a policy reload), and
/// that key still gets 403 while `audit` keys read the untouched bytes.
#[tokio::test]
async fn a_tampered_principal_column_opens_nothing() {
    let s = TestServer::start().await;
    let app = s.app().clone();
    let authz = |key| {
        let s = &s;
        async move {
            let r = s.post_json("/v2/authorize", &body(), Some(key)).await;
            assert_eq!(r.status, 200, "{}", r.text());
            r.json()["audit"]["record_id"].as_str().unwrap().to_string()
        }
    };
    let mine = authz(APP_KEY).await;
    let theirs = authz(OTHER_KEY).await;
    // A record without a principal: a policy reload.
    reload_policies(&s).await;
    let db = rusqlite::Connection::open(s.path("data/verdict.db")).unwrap();
    db.busy_timeout(Duration::from_secs(10)).unwrap();
    let reload: String = db
        .query_row(
            "SELECT record_id FROM audit_records WHERE canonical LIKE '%\"kind\":\"policy_reload\"%'",
            [],
            |r| r.get::<_, Vec<u8>>(0),
        )
        .map(|b| uuid::Uuid::from_slice(&b).unwrap().to_string())
        .unwrap();
    let originals: Vec<_> = {
        let mut out = vec![];
        for id in [&mine, &theirs, &reload] {
            out.push(s.get(&format!("/v2/audit/{id}"), Some(APP_KEY)).await.body);
        }
        out
    };
    assert!(!String::from_utf8_lossy(&originals[2]).contains("principal"));
    // Every row now claims to belong to `other` (OTHER_KEY) or `limited`
    // (VERIFY_ONLY_KEY).
    for (name, key) in [("other", OTHER_KEY), ("limited", VERIFY_ONLY_KEY)] {
        let n = db
            .execute("UPDATE audit_records SET principal = ?1", [name])
            .unwrap();
        assert!(n >= 3, "{n}");
        for id in [&mine, &theirs, &reload] {
            for path in [format!("/v2/audit/{id}"), format!("/v2/audit/{id}/proof")] {
                s.get(&path, Some(key)).await.assert_error(403, "forbidden");
            }
        }
    }
    // The library's own view of a record names the principal in the hashed
    // bytes, whatever the column says.
    for (id, want) in [
        (&mine, Some("app")),
        (&theirs, Some("other")),
        (&reload, None),
    ] {
        let stored = app
            .audit
            .record(uuid::Uuid::parse_str(id).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.principal.as_deref(), want, "{id}");
    }
    // Audit keys read the records, byte for byte as before.
    for (id, original) in [&mine, &theirs, &reload].into_iter().zip(&originals) {
        let r = s.get(&format!("/v2/audit/{id}"), Some(REVIEW_KEY)).await;
        assert_eq!(r.status, 200);
        assert_eq!(&r.body, original);
    }
    s.shutdown().await;
}

/// A redaction key file that is there but damaged stops the start-up
/// (exit 64 from `main`) instead of redacting under a new key; an absent
/// one is created.
#[tokio::test]
async fn a_damaged_redaction_key_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("redaction.key"), [1u8; 16]).unwrap();
    let mut config = support::test_config(&dir);
    config.data_dir = data.clone();
    let err = match verdict::app::start(config.clone()).await {
        Ok(_) => panic!("started with a 16-byte redaction key"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("redaction.key") && err.contains("expected 32"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(data.join("redaction.key")).unwrap(),
        [1u8; 16]
    );
    std::fs::remove_file(data.join("redaction.key")).unwrap();
    let s = TestServer::attach(verdict::app::start(config).await.unwrap(), dir);
    assert_eq!(std::fs::read(data.join("redaction.key")).unwrap().len(), 32);
    s.shutdown().await;
}
