//! The audit log through its public API only, the way the server and the CLI
//! use it: open at startup, append per decision, serve records, proofs and
//! keys, verify offline, rotate, and fail closed while writes fail.

use crate::support;

use std::time::Duration;

use verdict::audit::{
    redact, rotate_key, verify_log, verify_proof, AuditError, AuditLog, AuditRecord, RecordKind,
    RedactionKey,
};
use verdict::config::AuditConfig;

fn cfg() -> AuditConfig {
    AuditConfig {
        origin: None,
        max_wait: Duration::from_millis(2),
        max_batch: 512,
        witnesses: Vec::new(),
        capture_inputs: true,
        input_retention: std::time::Duration::from_secs(7 * 86_400),
        export: None,
    }
}

#[tokio::test]
async fn server_and_cli_flow() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("verdict.db");
    let log = AuditLog::open(&db, dir.path(), &cfg()).unwrap();

    let mut rec = AuditRecord::new(RecordKind::Decision);
    rec.principal = Some("refund-app".into());
    rec.decision = Some("deny".into());
    rec.reason = Some("unsupported_claims".into());
    let mut params = serde_json::json!({"amount": 120, "card_number": "4111"});
    let (key, _) = RedactionKey::open(dir.path()).unwrap();
    redact(&mut params, &["params.card_number".to_string()], &key);
    rec.action = Some(serde_json::json!({"type": "refund.create", "params": params}));
    let receipt = log.append(rec.clone()).await.unwrap();
    support::assert_receipt(&serde_json::to_value(&receipt).unwrap());

    let stored = log.record(rec.record_id).await.unwrap().unwrap();
    assert_eq!(stored.principal.as_deref(), Some("refund-app"));
    // The value is gone (a random id or hash may hold the digits `4111`).
    assert!(
        !stored.canonical.contains("\"4111\""),
        "{}",
        stored.canonical
    );
    assert!(stored.canonical.contains("\"card_number\":\"hmac-sha256:"));

    let proof = log.proof(rec.record_id).await.unwrap().unwrap().to_json();
    let key = log.key(&receipt.key_id).unwrap();
    let key_json = serde_json::to_string(&key).unwrap();
    verify_proof(&proof, &key_json).unwrap();
    let health = log.health();
    assert_eq!(health.size, 1);
    assert!(health.key_id == receipt.key_id && !health.failing);

    // Fail closed while the log cannot be written, then recover.
    log.inject_write_failure(true);
    assert!(matches!(
        log.append(AuditRecord::new(RecordKind::PolicyReload)).await,
        Err(AuditError::WriteFailed(_))
    ));
    log.inject_write_failure(false);
    log.append(AuditRecord::new(RecordKind::ReviewResolution))
        .await
        .unwrap();
    log.shutdown().await;

    // CLI: rotate-key, verify, verify-proof with the old key still works.
    let new_key = rotate_key(&db, dir.path(), &cfg()).unwrap();
    assert_ne!(new_key.kid, key.kid);
    let mut seen = 0;
    let report = verify_log(&db, dir.path(), |done, total| {
        assert!(done <= total);
        seen += 1;
    })
    .unwrap();
    assert!(seen > 0);
    assert_eq!(report.records, 3);
    verify_proof(&proof, &key_json).unwrap();
}
