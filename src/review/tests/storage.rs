//! What the review store keeps and how: times, limits, the held request hash,
//! sealed credentials, corrupt rows, upgrades and retention.

use super::*;

#[test]
fn open_needs_a_runtime() {
    sqlite_only!();
    let dir = place();
    assert_eq!(
        Reviews::open(&db(&dir), HOUR, TEST_SEAL).unwrap_err(),
        ReviewError::NoRuntime
    );
}

#[tokio::test]
async fn an_absurd_ttl_is_capped_and_still_printable() {
    let dir = place();
    let r = dir.open(Duration::MAX).await;
    let v = r.create(new_review("refund-app")).await.unwrap();
    assert_eq!(v.expires_at.duration_since(v.created_at).unwrap(), MAX_TTL);
    let json = serde_json::to_value(&v).unwrap();
    assert!(
        json["expires_at"].as_str().unwrap().starts_with("21"),
        "{json}"
    );
}

#[test]
fn held_request_hash_covers_every_byte_and_the_boundaries() {
    let base = held();
    let h = base.hash();
    assert!(h.starts_with("sha256:") && h.len() == 7 + 64, "{h}");
    assert_eq!(held().hash(), h, "deterministic");
    let mut variants = Vec::new();
    let mut v = held();
    v.method = "PUT".into();
    variants.push(v);
    let mut v = held();
    v.path = "/api/orders/7/refunds?dry=1".into();
    variants.push(v);
    let mut v = held();
    v.headers.swap(2, 3);
    variants.push(v);
    let mut v = held();
    v.headers.pop();
    variants.push(v);
    let mut v = held();
    v.body = Bytes::from_static(b"{\"amount\":901}");
    variants.push(v);
    // Moving bytes between fields changes the hash too.
    let mut v = held();
    v.headers[0] = (
        "content-typea".into(),
        Bytes::from_static(b"pplication/json"),
    );
    variants.push(v);
    for v in variants {
        assert_ne!(v.hash(), h, "{v:?}");
    }
}

#[tokio::test]
async fn a_corrupted_held_request_is_never_handed_out() {
    let (_dir, r, id) = one_pending().await;
    approve(&r, &id).await.unwrap();
    on_review(&r, &id, |s, id| s.corrupt_body(id)).await;
    assert_eq!(
        r.claim_forward(&id).await,
        Err(ReviewError::Corrupt(id.clone()))
    );
    let v = r.get(&id, &admin()).await.unwrap().unwrap();
    assert_eq!(v.forward.state, "not_started", "the claim was rolled back");
}

#[tokio::test]
async fn a_row_the_code_never_wrote_is_a_storage_error_and_the_rest_still_reads() {
    let (_dir, r, id) = one_pending().await;
    let other = r.create(new_review("refund-app")).await.unwrap().review_id;
    on_review(&r, &id, |s, id| s.corrupt_rules(id)).await;
    match r.get(&id, &admin()).await {
        Err(ReviewError::Storage(m)) => assert!(m.contains("bad stored rule messages"), "{m}"),
        other => panic!("{other:?}"),
    }
    let v = r.get(&other, &admin()).await.unwrap().unwrap();
    assert_eq!(v.status, ReviewStatus::Pending);
}

/// A retried call joins its pending review only with the same credentials:
/// another client sending the same request gets its own review, and so never
/// the answer to the first client's call.
#[tokio::test]
async fn retries_join_only_with_the_same_credentials() {
    let dir = place();
    let r = dir.open(HOUR).await;
    let (a, joined, _) = r
        .hold(with_creds(Some("Bearer alice"), None))
        .await
        .unwrap();
    assert!(!joined);
    let (again, joined, _) = r
        .hold(with_creds(Some("Bearer alice"), None))
        .await
        .unwrap();
    assert!(joined);
    assert_eq!(again.review_id, a.review_id);
    for other in [
        with_creds(Some("Bearer mallory"), None),
        with_creds(None, None),
        with_creds(Some("Bearer alice"), Some("session=x")),
    ] {
        let (v, joined, _) = r.hold(other).await.unwrap();
        assert!(!joined, "other credentials joined a pending review");
        assert_ne!(v.review_id, a.review_id);
    }
}

/// Credentials are sealed in the database: the token's bytes are nowhere in
/// the file, the forward gets them back, and a tampered or foreign-key
/// value is never forwarded.
#[tokio::test]
async fn held_credentials_are_sealed_at_rest() {
    sqlite_only!();
    use std::os::unix::fs::PermissionsExt as _;
    let dir = place();
    let r = dir.open(HOUR).await;
    let token = "Bearer tok-5f2c9a-very-secret";
    let new = with_creds(Some(token), Some("sid=cookie-secret-77"));
    let want = new.request.clone();
    let v = r.create(new).await.unwrap();
    let id = v.review_id.clone();
    approve(&r, &id).await.unwrap();
    // Nothing on disk holds the plain values (the WAL included).
    for entry in std::fs::read_dir(dir.dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        for secret in [&b"tok-5f2c9a-very-secret"[..], b"cookie-secret-77"] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret),
                "{} holds a plain credential",
                path.display()
            );
        }
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", path.display());
    }
    assert_eq!(r.claim_forward(&id).await.unwrap(), Some(want));
    drop(r);

    // Another key cannot open them: the claim fails, nothing is forwarded.
    let v2 = {
        let r = dir.open(HOUR).await;
        let v = r.create(with_creds(Some(token), None)).await.unwrap();
        approve(&r, &v.review_id).await.unwrap();
        v.review_id
    };
    let r = dir.open_sealed(HOUR, [9; 32]).await;
    assert!(r.claim_forward(&v2).await.is_err());
    assert!(r.claim_forward(&v2).await.is_err(), "still not forwardable");
}

/// A database from before reviews kept rule messages gains the column on
/// open; its reviews list none, and new ones keep theirs.
#[tokio::test]
async fn a_database_without_rule_messages_is_upgraded() {
    sqlite_only!();
    let dir = place();
    let path = db(&dir);
    let id = {
        let r = Reviews::open(&path, HOUR, TEST_SEAL).unwrap();
        r.create(new_review("refund-app")).await.unwrap().review_id
    };
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("ALTER TABLE review_reviews DROP COLUMN rules")
            .unwrap();
    }
    let r = Reviews::open(&path, HOUR, TEST_SEAL).unwrap();
    let old = r.get(&id, &admin()).await.unwrap().unwrap();
    assert!(old.rules.is_empty());
    let new = r.create(new_review("other-app")).await.unwrap();
    assert_eq!(new.rules, ["refunds above 500 need a second pair of eyes"]);
}

/// The review store writes no temporary files: `temp_store` is MEMORY.
#[tokio::test]
async fn the_review_store_keeps_temp_data_in_memory() {
    sqlite_only!();
    let dir = place();
    let (store, _) = sqlite::SqliteStore::open(&db(&dir), sealer(&TEST_SEAL).unwrap()).unwrap();
    assert_eq!(sqlite::tests_support::temp_store(&store), 2);
}

/// Resolved and expired reviews go after `review.retention`, with their
/// held bodies and headers; pending ones and approvals not yet forwarded
/// stay.
#[tokio::test]
async fn retention_deletes_ended_reviews_and_keeps_pending_ones() {
    let dir = place();
    let r = dir.open(HOUR).await;
    let rejected = r.create(new_review("x")).await.unwrap().review_id;
    let headers = |id: &str| {
        let (inner, id) = (r.inner.clone(), id.to_string());
        async move { on_store(&inner, move |s, _| Ok(s.header_rows(&id))).await }
    };
    assert!(
        headers(&rejected).await.unwrap() > 0,
        "the held request has headers"
    );
    let approved = r.create(new_review("x")).await.unwrap().review_id;
    let pending = r.create(new_review("x")).await.unwrap().review_id;
    alice_resolves(&r, &rejected, false, "no").await.unwrap();
    approve(&r, &approved).await.unwrap();
    r.set_retention(Duration::from_millis(200));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let all = admin();
    while r.get(&rejected, &all).await.unwrap().is_some() {
        assert!(std::time::Instant::now() < deadline, "not purged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The held body and headers went with the review.
    assert_eq!(headers(&rejected).await.unwrap(), 0);
    // An approval whose forward has not run is kept until it has.
    assert!(r.get(&approved, &all).await.unwrap().is_some());
    assert!(r.get(&pending, &all).await.unwrap().is_some());
    assert_eq!(r.health().stored, 2);
}
