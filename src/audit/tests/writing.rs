//! The log at work: records, group commit, failures, key rotation and
//! restarts.

use super::*;
use rusqlite::OptionalExtension as _;

#[test]
fn records_omit_absent_fields_and_redact() {
    let at = time::macros::datetime!(2026-11-22 10:44:11.000123 UTC);
    let mut r = AuditRecord::new_at(RecordKind::Decision, at);
    r.record_id = uuid::Uuid::parse_str("6f0c1c3e-8a3b-4d2e-9f1a-2b3c4d5e6f70").unwrap();
    r.decision = Some("deny".into());
    r.enforced = Some(true);
    r.coverage_score = Some(0.5);
    let mut params = serde_json::json!({"card_number": "4111111111111111", "amount": 120, "nested": {"ssn": "x"}});
    // The key bytes 0, 1, ..., 31; expected values from Python's
    // `hmac.new(bytes(range(32)), b'"4111111111111111"', hashlib.sha256)`.
    let key = RedactionKey::from_bytes(&std::array::from_fn(|i| i as u8));
    redact(
        &mut params,
        &[
            "params.card_number".into(),
            "params.nested.ssn".into(),
            "params.missing".into(),
        ],
        &key,
    );
    assert_eq!(
        params["card_number"],
        "hmac-sha256:5b90d95161237ce2385af94f39d0f420ad1569ee25feb7ed5f87c18cd39ff079"
    );
    assert_eq!(
        params["nested"]["ssn"],
        "hmac-sha256:e1a4395ebb8c89a5e1068ac3dee16bd6ed67f7f2b852a86b28fe4ebe95ba6015"
    );
    assert_eq!(params["amount"], 120);
    r.action = Some(serde_json::json!({"type": "refund.create", "params": params}));
    let c = r.canonical().unwrap();
    assert!(!c.contains("4111111111111111"), "{c}");
    assert!(
        c.starts_with(r#"{"action":{"params":{"amount":120,"card_number":"hmac-sha256:5b90d951"#),
        "{c}"
    );
    assert!(c.contains(r#""at":"2026-11-22T10:44:11.000123Z""#), "{c}");
    assert!(
        c.contains(r#""coverage_score":0.5,"decision":"deny","enforced":true,"kind":"decision""#),
        "{c}"
    );
    assert!(!c.contains("null"), "{c}");
    let back: AuditRecord = serde_json::from_str(&c).unwrap();
    assert_eq!(back, r);

    let mut bad = r.clone();
    bad.at = "2026-11-22T10:44:11Z".into();
    assert!(bad.canonical().is_err());
    let mut bad = r.clone();
    bad.coverage_score = Some(f64::NAN);
    assert!(bad.canonical().is_err());
    let mut bad = r;
    bad.schema = "other".into();
    assert!(bad.canonical().is_err());
}

#[test]
fn principal_of_reads_the_hashed_bytes_only() {
    let with = decision(1).canonical().unwrap();
    assert_eq!(record::principal_of(&with).as_deref(), Some("tenant-1"));
    let without = AuditRecord::new(RecordKind::PolicyReload)
        .canonical()
        .unwrap();
    assert_eq!(record::principal_of(&without), None);
    for damaged in [
        "",
        "{",
        "[]",
        r#"{"principal":7}"#,
        r#"{"principal":"a","principal":"b"}"#,
    ] {
        assert_eq!(record::principal_of(damaged), None, "{damaged}");
    }
}

#[tokio::test]
async fn append_proof_record_and_restart() {
    let e = env();
    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    assert_eq!(log.health().size, 0);
    let mut receipts = Vec::new();
    for i in 0..5 {
        let rec = decision(i);
        let r = log.append(rec.clone()).await.unwrap();
        assert_eq!(r.leaf_index, i);
        assert_eq!(r.tree_size, i + 1);
        check_receipt(&r);
        let stored = log.record(rec.record_id).await.unwrap().unwrap();
        assert_eq!(stored.canonical, rec.canonical().unwrap());
        assert_eq!(stored.principal, rec.principal);
        assert_eq!(r.record_hash, hash_string(&record_hash(&stored.canonical)));
        receipts.push(r);
    }
    let h = log.health();
    assert_eq!(h.size, 5);
    assert!(!h.failing);
    assert!(h.last_checkpoint_at.is_some());
    let kid = h.key_id.clone();
    let key = log.key(&kid).unwrap();
    assert_eq!(key.status, KeyStatus::Active);
    assert!(key.verifier_key.starts_with("verdict/test+"));

    // The proof is against the first covering checkpoint: the receipt's.
    let p = log.proof(receipts[2].record_id).await.unwrap().unwrap();
    assert_eq!(p.tree_size, 3);
    assert_eq!(p.merkle_root, receipts[2].merkle_root);
    assert_eq!(p.proof, receipts[2].proof);
    let bytes = p.to_json();
    assert_eq!(proof_json(&log, receipts[2].record_id).await, bytes);
    verify_proof(&bytes, &key_json(&log, &kid)).unwrap();
    assert!(log.proof(uuid::Uuid::new_v4()).await.unwrap().is_none());
    assert!(log.record(uuid::Uuid::new_v4()).await.unwrap().is_none());
    log.shutdown().await;
    assert!(matches!(
        log.append(decision(9)).await,
        Err(AuditError::Unavailable(_))
    ));
    assert!(log.health().failing, "a stopped writer is reported");

    // Reopen: same key, tree continues; the origin is the log's, not the default.
    let mut c = cfg(0);
    c.origin = None;
    let log = AuditLog::open(&e.db, &e.keys, &c).unwrap();
    assert_eq!(log.health().size, 5);
    assert_eq!(log.health().key_id, kid);
    let r = log.append(decision(5)).await.unwrap();
    assert_eq!(r.leaf_index, 5);
    check_receipt(&r);
    assert_eq!(proof_json(&log, receipts[2].record_id).await, bytes);
    log.shutdown().await;
    let mut other = cfg(0);
    other.origin = Some("verdict/other".into());
    assert!(matches!(
        AuditLog::open(&e.db, &e.keys, &other),
        Err(AuditError::Config(_))
    ));
    let report = verify_log(&e.db, &e.keys, |_, _| {}).unwrap();
    assert_eq!(report.records, 6);
    assert_eq!(report.checkpoints, 7);
}

#[cfg(unix)]
#[tokio::test]
async fn key_file_is_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let e = env();
    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    let kid = log.health().key_id;
    let meta = std::fs::metadata(e.keys.join(format!("audit_key_{kid}.p8"))).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    log.shutdown().await;
}

#[tokio::test]
async fn group_commit_with_many_concurrent_appends() {
    let e = env();
    let log = AuditLog::open(&e.db, &e.keys, &cfg(2)).unwrap();
    assert_eq!(append_all(&log, 0..400).await, (0..400).collect::<Vec<_>>());
    assert_eq!(log.health().size, 400);
    let mut reg = prometheus_client::registry::Registry::default();
    log.register_metrics(&mut reg);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
    assert!(text.contains("verdict_audit_records_total 400"), "{text}");
    let report = shut_and_verify(&log, &e).await;
    assert_eq!(report.records, 400);
    // Far fewer checkpoints than records: records were grouped.
    assert!(report.checkpoints < 200, "{report:?}");
}

/// Appends the decisions `ids` concurrently, each on its own task; checks
/// every receipt and returns the leaves, sorted.
async fn append_all(log: &AuditLog, ids: std::ops::Range<u64>) -> Vec<u64> {
    let tasks: Vec<_> = ids
        .map(|i| {
            let log = log.clone();
            tokio::spawn(async move { log.append(decision(i)).await })
        })
        .collect();
    let mut leaves = Vec::new();
    for t in tasks {
        let r = t.await.unwrap().unwrap();
        check_receipt(&r);
        assert!(r.leaf_index < r.tree_size);
        leaves.push(r.leaf_index);
    }
    leaves.sort_unstable();
    leaves
}

/// On the server's runtime the appending task commits in place (a leader)
/// and hands what queued meanwhile to the committer thread: every record is
/// placed once, the groups still form, and shutdown in the middle of a
/// stream commits everything that was accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_lead_commits_on_a_multi_threaded_runtime() {
    let e = env();
    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    // A lone append on a quiet log: its own caller commits it.
    let r = log.append(decision(0)).await.unwrap();
    check_receipt(&r);
    assert_eq!((r.leaf_index, r.tree_size), (0, 1));
    assert_eq!(append_all(&log, 1..301).await, (1..301).collect::<Vec<_>>());
    // Appends racing a shutdown: each either fails or is in the log.
    let mut racing = Vec::new();
    for i in 301..=400u64 {
        let log = log.clone();
        racing.push(tokio::spawn(async move { log.append(decision(i)).await }));
    }
    log.shutdown().await;
    let mut accepted = 0;
    for t in racing {
        match t.await.unwrap() {
            Ok(r) => {
                check_receipt(&r);
                accepted += 1;
            }
            Err(err) => assert!(matches!(err, AuditError::Unavailable(_)), "{err}"),
        }
    }
    assert!(!log.writer_running());
    let report = shut_and_verify(&log, &e).await;
    assert_eq!(report.records, 301 + accepted);
    assert!(report.checkpoints < report.records, "{report:?}");
}

#[tokio::test]
async fn wal_frames_reach_the_database_file_beside_the_writer() {
    let e = env();
    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    let db_len = || std::fs::metadata(&e.db).map(|m| m.len()).unwrap_or(0);
    let wal = e.db.with_file_name("verdict.db-wal");
    let before = db_len();
    // One record per commit: a few hundred WAL frames, far below the
    // writer's auto-checkpoint threshold (8192), so only the background
    // checkpointer can copy them into the database file.
    for i in 0..60u64 {
        log.append(decision(i)).await.unwrap();
    }
    let wal_frames = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0) / 4120;
    assert!(wal_frames < 8192, "{wal_frames} frames");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while db_len() <= before && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(db_len() > before, "database file still {before} bytes");
    assert_eq!(shut_and_verify(&log, &e).await.records, 60);
}

#[tokio::test]
async fn a_quiet_queue_closes_the_group_before_max_wait() {
    let e = env();
    // A 20 s max_wait: a group would linger up to 2 s for a next record,
    // but never longer than half the previous commit took, and a lone record
    // with no company does not linger at all.
    let log = AuditLog::open(&e.db, &e.keys, &cfg(20_000)).unwrap();
    let started = std::time::Instant::now();
    let r = log.append(decision(0)).await.unwrap();
    check_receipt(&r);
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "a lone record lingered: {:?}",
        started.elapsed()
    );
    // Records that arrive together still share a group: a record the writer
    // takes while nothing is queued behind it commits alone (how many do
    // depends on scheduling), but once two are queued the group lingers and
    // takes the rest, so the last group holds several. A writer that kept
    // pace with the senders (a starved test thread) groups nothing, so a
    // burst is sent again, at most five times.
    let mut sent = 1u64;
    let mut bursts = Vec::new();
    let mut grouped = false;
    while !grouped && bursts.len() < 5 {
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let log = log.clone();
            let r = decision(sent);
            sent += 1;
            tasks.push(tokio::spawn(async move { log.append(r).await }));
        }
        let mut sizes = Vec::new();
        for t in tasks {
            sizes.push(t.await.unwrap().unwrap().tree_size);
        }
        grouped = sizes.iter().filter(|s| **s == sent).count() >= 2;
        bursts.push(sizes);
    }
    assert!(grouped, "no burst shared its last group: {bursts:?}");
    // After a group of several, a record reaching the idle writer alone
    // lingers for company, but no longer than half the previous commit took,
    // not the 2 s quiet gap.
    let started = std::time::Instant::now();
    log.append(decision(sent)).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "the group lingered: {:?}",
        started.elapsed()
    );
    assert!(shut_and_verify(&log, &e).await.checkpoints <= sent + 1);
}

#[tokio::test]
async fn write_failure_fails_every_waiter_and_recovers() {
    let e = env();
    let log = AuditLog::open(&e.db, &e.keys, &cfg(1)).unwrap();
    for i in 0..3 {
        log.append(decision(i)).await.unwrap();
    }
    log.inject_write_failure(true);
    let mut tasks = Vec::new();
    for i in 0..50u64 {
        let log = log.clone();
        tasks.push(tokio::spawn(
            async move { log.append(decision(100 + i)).await },
        ));
    }
    for t in tasks {
        assert!(matches!(t.await.unwrap(), Err(AuditError::WriteFailed(_))));
    }
    let h = log.health();
    assert!(h.failing);
    assert!(h.last_error.is_some());
    assert_eq!(h.size, 3);
    log.inject_write_failure(false);
    let r = log.append(decision(4)).await.unwrap();
    assert_eq!(r.leaf_index, 3);
    check_receipt(&r);
    assert!(!log.health().failing);
    assert_eq!(shut_and_verify(&log, &e).await.records, 4);
}

#[tokio::test]
async fn a_halted_log_appends_nothing_and_says_why_for_good() {
    let e = env();
    let (log, _, _) = log_with_decisions(&e, 3).await;
    assert_eq!(log.halted(), None);
    let why = "witness w cosigned tree size 5, which this log of 3 records does not extend";
    log.halt(why.into());
    // A second reason does not replace the first.
    log.halt("another".into());
    assert_eq!(log.halted().as_deref(), Some(why));
    match log.append(decision(3)).await {
        Err(AuditError::RolledBack(m)) => assert_eq!(m, why),
        other => panic!("{other:?}"),
    }
    let h = log.health();
    assert!(h.failing);
    assert_eq!(h.last_error.as_deref(), Some(why));
    assert_eq!(h.size, 3);
    assert_eq!(shut_and_verify(&log, &e).await.records, 3);
}

#[tokio::test]
async fn duplicate_record_id_fails_alone() {
    let e = env();
    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    let rec = decision(1);
    log.append(rec.clone()).await.unwrap();
    assert!(matches!(
        log.append(rec.clone()).await,
        Err(AuditError::InvalidRecord(_))
    ));
    let r = log.append(decision(2)).await.unwrap();
    assert_eq!(r.leaf_index, 1);
    let mut bad = decision(3);
    bad.at = "yesterday".into();
    assert!(matches!(
        log.append(bad).await,
        Err(AuditError::InvalidRecord(_))
    ));
    // Duplicates among concurrent appends (one of a stored record, one pair
    // within the burst): wherever they land in a group, only they fail.
    let twin = decision(30);
    let mut burst = vec![rec, twin.clone(), twin];
    burst.extend((10..20).map(decision));
    let tasks: Vec<_> = burst
        .into_iter()
        .map(|r| {
            let log = log.clone();
            tokio::spawn(async move { log.append(r).await })
        })
        .collect();
    let mut leaves = Vec::new();
    let mut refused = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(r) => leaves.push(r.leaf_index),
            Err(AuditError::InvalidRecord(_)) => refused += 1,
            Err(other) => panic!("{other}"),
        }
    }
    leaves.sort_unstable();
    assert_eq!(refused, 2);
    assert_eq!(leaves, (2..13).collect::<Vec<_>>());
    assert_eq!(shut_and_verify(&log, &e).await.records, 13);
}

#[tokio::test]
async fn key_rotation_signs_with_both_and_keeps_old_published() {
    let e = env();
    let (log, ids, old_key) = log_with_decisions(&e, 1).await;
    let old_kid = log.health().key_id;
    let new = log.rotate_key().await.unwrap();
    assert_ne!(new.kid, old_kid);
    assert_eq!(log.health().key_id, new.kid);
    assert_eq!(log.key(&old_kid).unwrap().status, KeyStatus::Retired);
    assert_eq!(log.key(&new.kid).unwrap().status, KeyStatus::Active);
    // The old proof still verifies with the old key.
    let p = log.proof(ids[0]).await.unwrap().unwrap();
    verify_proof(&p.to_json(), &old_key).unwrap();
    // The key-change checkpoint carries both signatures.
    let conn = rusqlite::Connection::open(&e.db).unwrap();
    let newest = sqlite::newest_checkpoint(&conn).unwrap().unwrap();
    assert_eq!(newest.tree_size, 2);
    let n = note::parse(&newest.note).unwrap();
    assert_eq!(n.signatures.len(), 2);
    let canonical = sqlite::record_by_leaf(&conn, 1).unwrap().unwrap();
    assert!(canonical.contains(r#""kind":"key_change""#), "{canonical}");
    let later = decision(2);
    let r = log.append(later.clone()).await.unwrap();
    assert_eq!(r.key_id, new.kid);
    let p = log.proof(later.record_id).await.unwrap().unwrap();
    verify_proof(&p.to_json(), &serde_json::to_string(&new).unwrap()).unwrap();
    assert!(verify_proof(&p.to_json(), &old_key).is_err());
    log.shutdown().await;

    // Offline rotation on the closed log.
    let third = rotate_key(&e.db, &e.keys, &cfg(0)).unwrap();
    assert_ne!(third.kid, new.kid);
    let report = verify_log(&e.db, &e.keys, |_, _| {}).unwrap();
    assert_eq!(report.records, 4);
    assert_eq!(report.keys, 3);
    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    assert_eq!(log.health().key_id, third.kid);
    log.shutdown().await;
}

#[tokio::test]
async fn a_rotation_whose_record_failed_is_committed_before_the_next_group() {
    let e = env();
    let (log, old_kid) = failed_rotation(&e).await;
    // The new key is published and active, its key_change record is not
    // stored: the rotation is pending.
    let new_kid = log.health().key_id;
    assert_ne!(new_kid, old_kid);
    assert!(log.append(decision(1)).await.is_err(), "fails closed");
    log.inject_write_failure(false);
    let r = log.append(decision(2)).await.unwrap();
    // Leaf 1 is the key change, in a checkpoint signed by both keys; the
    // decision comes after it, signed by the new key.
    assert_eq!((r.leaf_index, r.tree_size), (2, 3));
    assert_eq!(r.key_id, new_kid);
    assert_key_change_at_leaf_1(&e, &old_kid, &new_kid);
    shut_and_verify(&log, &e).await;
}

#[tokio::test]
async fn a_rotation_cut_off_before_its_record_is_completed_at_start() {
    let e = env();
    let (log, old_kid) = failed_rotation(&e).await;
    let new_kid = log.health().key_id;
    // Stop as a crash would leave it: keys file names the new key, the
    // newest checkpoint is signed by the old one only.
    log.shutdown().await;
    assert_eq!(stored(&e, 1, 0).0, 1);

    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    assert_eq!(log.health().key_id, new_kid);
    assert_eq!(log.health().size, 2, "the key change was committed at open");
    assert_key_change_at_leaf_1(&e, &old_kid, &new_kid);
    let r = log.append(decision(1)).await.unwrap();
    assert_eq!((r.leaf_index, r.key_id.as_str()), (2, new_kid.as_str()));
    shut_and_verify(&log, &e).await;
    // A clean reopen finds nothing to resume.
    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    assert_eq!(log.health().size, 3);
    log.shutdown().await;
}

/// The `CREATE` statement of `table` in the log at `db`, if it has one.
fn table_sql(db: &Path, table: &str) -> Option<String> {
    let c = rusqlite::Connection::open(db).unwrap();
    c.query_row(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [table],
        |r| r.get(0),
    )
    .optional()
    .unwrap()
}

/// Appends decisions `from..from + n`, each with a captured input of about
/// 6 KB (overflow pages, as real inputs have).
async fn append_inputs(log: &AuditLog, from: u64, n: u64) {
    for i in from..from + n {
        let input = CapturedInput {
            canonical: format!("{{\"input\":{i},\"text\":\"{}\"}}", "x".repeat(6000)),
        };
        log.append_with_input(decision(i), Some(input))
            .await
            .unwrap();
    }
}

/// Each decision's captured input as `inputs::for_each_from` reads it back.
fn inputs_read_back(db: &Path) -> Vec<Option<String>> {
    let c = rusqlite::Connection::open(db).unwrap();
    let mut out = Vec::new();
    inputs::for_each_from(&c, 0, |row| {
        out.push(row.input);
        true
    })
    .unwrap();
    out
}

/// Turns the log's `audit_inputs` into the `WITHOUT ROWID` table that logs
/// created before 2026-11-30 have, rows and all.
fn make_inputs_without_rowid(db: &Path) {
    rusqlite::Connection::open(db)
        .unwrap()
        .execute_batch(
            "BEGIN;
             CREATE TABLE t (record_id BLOB PRIMARY KEY, input TEXT NOT NULL) WITHOUT ROWID;
             INSERT INTO t SELECT record_id, input FROM audit_inputs;
             DROP TABLE audit_inputs;
             ALTER TABLE t RENAME TO audit_inputs;
             COMMIT;",
        )
        .unwrap();
}

#[tokio::test]
async fn captured_inputs_go_in_a_rowid_table_and_an_older_table_drains_away() {
    let e = env();
    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    append_inputs(&log, 0, 40).await;
    shut_and_verify(&log, &e).await;
    // A new log: rowids, so an insert compares record ids, not inputs.
    let sql = table_sql(&e.db, "audit_inputs").unwrap();
    assert!(!sql.contains("WITHOUT ROWID"), "{sql}");

    // The same log as one created before 2026-11-30: read as it is...
    make_inputs_without_rowid(&e.db);
    assert!(table_sql(&e.db, "audit_inputs")
        .unwrap()
        .contains("WITHOUT ROWID"));
    let read = inputs_read_back(&e.db);
    assert_eq!(read.len(), 40);
    assert!(read.iter().all(Option::is_some));

    // ...and at the writer's next open its table is moved aside, new
    // inputs go into a rowid table, and reads find both.
    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    append_inputs(&log, 40, 2).await;
    let report = shut_and_verify(&log, &e).await;
    assert_eq!(report.records, 42);
    assert!(!table_sql(&e.db, "audit_inputs")
        .unwrap()
        .contains("WITHOUT ROWID"));
    assert!(table_sql(&e.db, "audit_inputs_old").is_some());
    let read = inputs_read_back(&e.db);
    assert_eq!(read.len(), 42);
    assert!(read[39].as_deref().unwrap().starts_with("{\"input\":39,"));
    assert!(read[41].as_deref().unwrap().starts_with("{\"input\":41,"));
    let c = rusqlite::Connection::open(&e.db).unwrap();
    assert_eq!(inputs::count(&c).unwrap(), 42);

    // The retention sweep takes the old table's rows first and drops it
    // once it is empty.
    let later = ms_from_now(60_000);
    assert_eq!(inputs::sweep(&c, later, 30).unwrap(), 30);
    assert!(table_sql(&e.db, "audit_inputs_old").is_some(), "10 left");
    assert_eq!(inputs::sweep(&c, later, 30).unwrap(), 12);
    assert!(table_sql(&e.db, "audit_inputs_old").is_none());
    assert_eq!(inputs::count(&c).unwrap(), 0);
    drop(c);
    // The log still verifies, and the next open finds nothing to move.
    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    append_inputs(&log, 42, 1).await;
    assert_eq!(shut_and_verify(&log, &e).await.records, 43);
    assert!(table_sql(&e.db, "audit_inputs_old").is_none());
}

/// Milliseconds since 1970, `ms` from now.
fn ms_from_now(ms: i64) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    now + ms
}
