//! What a tampered, split or mismatched log looks like when verified or
//! opened.

use super::*;

#[tokio::test]
async fn tampered_record_is_named_by_verify_log() {
    let e = env();
    let receipts = build_log(&e, 12).await;
    verify_log(&e.db, &e.keys, |_, _| {}).unwrap();
    // Change one digit inside record 5: still valid JSON, different hash.
    edit_stored(
        &e,
        "audit_records",
        "canonical",
        "leaf = 5",
        |text: String| {
            let changed = text.replace("\"amount\":5", "\"amount\":6");
            assert_ne!(changed, text);
            changed
        },
    );
    let err = verify_log(&e.db, &e.keys, |_, _| {}).unwrap_err();
    match &err {
        VerifyError::Record {
            leaf, record_id, ..
        } => {
            assert_eq!(*leaf, 5);
            assert_eq!(*record_id, receipts[5].record_id.to_string());
        }
        other => panic!("{other}"),
    }
    // The server's proof for that record no longer verifies, so it is refused.
    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    assert!(log.proof(receipts[5].record_id).await.is_err());
    log.shutdown().await;
}

#[tokio::test]
async fn tampered_stored_hash_is_named_by_verify_log() {
    // Leaf 5 is not on the frontier of 12 (= 8 + 4): only verify_log sees
    // it. In both layouts: verify_log reads a log not yet merged as it is.
    for split in [false, true] {
        let e = env();
        build_log(&e, 12).await;
        let table = if split {
            split_hashes_layout(&e);
            "audit_hashes"
        } else {
            "audit_records"
        };
        flip_stored_hash(&e, table, 5, 40, 0x10); // level 1 of leaf 5
        let err = verify_log(&e.db, &e.keys, |_, _| {}).unwrap_err();
        assert_eq!(
            err,
            VerifyError::StoredHash { leaf: 5, level: 1 },
            "{table}: {err}"
        );
    }

    let e = env();
    build_log(&e, 12).await;
    flip_stored_hash(&e, "audit_records", 2, 0, 1);
    let err = verify_log(&e.db, &e.keys, |_, _| {}).unwrap_err();
    assert_eq!(err, VerifyError::StoredHash { leaf: 2, level: 0 }, "{err}");
}

#[tokio::test]
async fn open_refuses_a_tree_that_does_not_match_the_newest_checkpoint() {
    // A frontier hash of size 12 (subtree [8, 12) = leaf 11, level 2).
    let e = env();
    build_log(&e, 12).await;
    flip_stored_hash(&e, "audit_records", 11, 64, 1);
    assert!(matches!(
        AuditLog::open(&e.db, &e.keys, &cfg(0)),
        Err(AuditError::Corrupt(_))
    ));
    assert!(verify_log(&e.db, &e.keys, |_, _| {}).is_err());

    // A flipped byte in the newest checkpoint's signature.
    let e = env();
    build_log(&e, 4).await;
    edit_stored(
        &e,
        "audit_checkpoints",
        "note",
        "tree_size = 4",
        |note: String| flip_char(&note, note.chars().count() - 10),
    );
    assert!(matches!(
        AuditLog::open(&e.db, &e.keys, &cfg(0)),
        Err(AuditError::Corrupt(_))
    ));
    assert!(matches!(
        verify_log(&e.db, &e.keys, |_, _| {}),
        Err(VerifyError::Checkpoint { tree_size: 4, .. })
    ));

    // A record appended behind the writer's back.
    let e = env();
    build_log(&e, 3).await;
    let extra = decision(99);
    sql(
        &e,
        "INSERT INTO audit_records (leaf, record_id, canonical, hashes) VALUES (3, ?1, ?2, ?3)",
        rusqlite::params![
            extra.record_id.as_bytes().as_slice(),
            extra.canonical().unwrap(),
            leaf_hash(&record_hash(&extra.canonical().unwrap())).as_slice()
        ],
    );
    assert!(AuditLog::open(&e.db, &e.keys, &cfg(0)).is_err());

    // A lost key: no published key signed the newest checkpoint.
    let e = env();
    build_log(&e, 2).await;
    std::fs::remove_dir_all(&e.keys).unwrap();
    assert!(matches!(
        AuditLog::open(&e.db, &e.keys, &cfg(0)),
        Err(AuditError::Key { .. })
    ));
    assert!(!e.keys.exists(), "no replacement key may be generated");
}

#[tokio::test]
async fn a_log_with_split_hashes_is_verified_then_merged_when_opened() {
    let e = env();
    let before = build_log(&e, 12).await;
    split_hashes_layout(&e);
    assert!(has_table(&e, "audit_hashes"));
    // `verify_log` reads the old layout as it is, before any server opens it.
    let report = verify_log(&e.db, &e.keys, |_, _| {}).unwrap();
    assert_eq!(report.records, 12);

    let log = AuditLog::open(&e.db, &e.keys, &cfg(0)).unwrap();
    assert!(!has_table(&e, "audit_hashes"), "merged at open");
    // The merged log has exactly the tables and indexes of a new one.
    let schema = |db: &Path| -> Vec<(String, String)> {
        let conn = rusqlite::Connection::open(db).unwrap();
        let mut stmt = conn
            .prepare(
                "SELECT name, COALESCE(sql, '') FROM sqlite_master
                 WHERE name LIKE '%audit%' ORDER BY name",
            )
            .unwrap();
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)));
        rows.unwrap().map(Result::unwrap).collect()
    };
    let fresh = env();
    build_log(&fresh, 1).await;
    assert_eq!(schema(&e.db), schema(&fresh.db));
    // Proofs of the records written before still verify, and the log grows.
    let key = key_json(&log, &before[0].key_id);
    for r in [&before[0], &before[5], &before[11]] {
        let doc = log.proof(r.record_id).await.unwrap().unwrap();
        verify_proof(&doc.to_json(), &key).unwrap();
    }
    for i in 12..20 {
        log.append(decision(i)).await.unwrap();
    }
    let report = shut_and_verify(&log, &e).await;
    assert_eq!(report.records, 20);
}

#[tokio::test]
async fn a_split_log_with_a_lost_hash_row_is_refused_and_left_as_it_was() {
    let e = env();
    build_log(&e, 6).await;
    split_hashes_layout(&e);
    sql(&e, "DELETE FROM audit_hashes WHERE leaf = 3", []);
    match AuditLog::open(&e.db, &e.keys, &cfg(0)) {
        Err(AuditError::Corrupt(m)) => assert!(m.contains("leaf 3"), "{m}"),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a log with a lost hash row was opened"),
    }
    // Nothing was changed: the old tables are still there, whole.
    assert!(has_table(&e, "audit_hashes"));
    let conn = rusqlite::Connection::open(&e.db).unwrap();
    let (records, hashes): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT COUNT(*) FROM audit_records), (SELECT COUNT(*) FROM audit_hashes)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((records, hashes), (6, 5));
    assert!(matches!(
        verify_log(&e.db, &e.keys, |_, _| {}),
        Err(VerifyError::StoredHash { .. })
    ));
}

/// No audit connection writes temporary files (a pod's root filesystem,
/// and so its temp dir, may be read-only): `temp_store` is MEMORY (2).
#[test]
fn audit_connections_keep_temp_data_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("verdict.db");
    let temp_store = |c: &rusqlite::Connection| -> i64 {
        c.query_row("PRAGMA temp_store", [], |r| r.get(0)).unwrap()
    };
    let writer = sqlite::open_writer(&path).unwrap();
    assert_eq!(temp_store(&writer), 2);
    assert_eq!(temp_store(&sqlite::open_reader(&path).unwrap()), 2);
    assert_eq!(temp_store(&sqlite::open_checkpointer(&path).unwrap()), 2);
}
