//! Record-only reviews ([`NewReview::forwards`] `false`): the decision was
//! answered elsewhere (Envoy ext_authz, AuthZEN), so the review is resolved
//! like any other but holds nothing to forward. It is never claimed, listed
//! or queued for the background forwarder, nor touched by the recovery of
//! forwards left in flight; it goes after `review.retention` once resolved,
//! and a retried call joins only a review of its own kind. A database from
//! before them reads every old review as one that forwards.

use super::*;

/// [`new_review`] as a record-only review: the same request, so the same
/// join key.
fn record_only(owner: &str) -> NewReview {
    NewReview {
        forwards: false,
        ..new_review(owner)
    }
}

const NONE: ForwardView = ForwardView {
    state: "none",
    upstream_status: None,
};

#[tokio::test]
async fn a_record_only_review_is_approved_but_never_handed_out() {
    let dir = place();
    let r = dir.open(HOUR).await;
    let mut queue = r.take_unattended_approvals().unwrap();
    let (v, joined, waiter) = r.hold(record_only("authzen-app")).await.unwrap();
    // The record-only caller holds no call: it drops its waiter at once.
    drop(waiter);
    assert!(!joined);
    assert_eq!(v.forward, NONE);
    assert_eq!(
        serde_json::to_value(&v).unwrap()["forward"],
        serde_json::json!({"state": "none"})
    );
    let id = v.review_id.clone();
    assert_eq!(r.claim_forward(&id).await.unwrap(), None, "pending");

    // A held call approved alongside it: that one is listed and queued.
    let held_id = r.create(new_review("refund-app")).await.unwrap().review_id;
    let v = approve(&r, &id).await.unwrap();
    assert_eq!(
        (v.status, v.forward.clone()),
        (ReviewStatus::Approved, NONE)
    );
    approve(&r, &held_id).await.unwrap();
    assert_eq!(
        r.approved_unforwarded().await.unwrap(),
        vec![held_id.clone()]
    );
    assert_eq!(queue.recv().await, Some(held_id.clone()));
    assert!(
        queue.try_recv().is_err(),
        "a record-only approval is not queued"
    );

    // Never claimed, however often asked; nothing to finish.
    assert_eq!(r.claim_forward(&id).await.unwrap(), None);
    assert_eq!(r.claim_forward(&id).await.unwrap(), None);
    assert!(matches!(
        r.finish_forward(&id, ForwardOutcome::Failed { error: "x".into() })
            .await,
        Err(ReviewError::NotForwarding(_))
    ));
    assert_eq!(r.get(&id, &admin()).await.unwrap().unwrap().forward, NONE);
    assert_eq!(r.upstream_response(&id, &admin()).await.unwrap(), None);
    let (v, upstream) = r.result(&id, &r.result_token(&id)).await.unwrap().unwrap();
    assert_eq!((v.status, v.forward), (ReviewStatus::Approved, NONE));
    assert_eq!(upstream, None);
    let listed = r
        .list(Some(ReviewStatus::Approved), &admin(), 10)
        .await
        .unwrap();
    let mine = listed.iter().find(|l| l.review_id == id).unwrap();
    assert_eq!(mine.forward, NONE);
    // The held call is still the forwarder's, once.
    assert!(r.claim_forward(&held_id).await.unwrap().is_some());
}

#[tokio::test]
async fn a_record_only_review_keeps_four_eyes_approvals_and_expiry() {
    let dir = place();
    let r = dir.open(HOUR).await;
    let mut new = record_only("app");
    new.requesters = vec!["app".into()];
    new.approvals_required = Some(2);
    let id = r.create(new).await.unwrap().review_id;
    assert_eq!(
        r.resolve(&id, true, "app", "app", None, SystemTime::now())
            .await,
        Err(ReviewError::OwnCall)
    );
    let v = approve(&r, &id).await.unwrap();
    assert_eq!((v.status, v.approvals.len()), (ReviewStatus::Pending, 1));
    assert_eq!(approve(&r, &id).await, Err(ReviewError::AlreadyApprovedBy));
    let v = r
        .resolve(&id, true, "bob", "bob", None, SystemTime::now())
        .await
        .unwrap();
    assert_eq!((v.status, v.forward), (ReviewStatus::Approved, NONE));

    let no = r.create(record_only("app")).await.unwrap().review_id;
    let v = alice_resolves(&r, &no, false, "no").await.unwrap();
    assert_eq!((v.status, v.forward), (ReviewStatus::Rejected, NONE));

    let short = place();
    let r = short.open(short_ttl()).await;
    let late = r.create(record_only("app")).await.unwrap().review_id;
    assert_eq!(
        r.wait(&late, Duration::from_secs(10)).await.unwrap(),
        Some(Resolution::Expired)
    );
    let v = r.get(&late, &admin()).await.unwrap().unwrap();
    assert_eq!((v.status, v.forward), (ReviewStatus::Expired, NONE));
}

/// The same call held by the proxy and recorded by a door that answered it
/// are two reviews: approving the record must never forward the held call,
/// and a held call's retry must never land on a review that forwards
/// nothing.
#[tokio::test]
async fn a_retry_joins_only_a_pending_review_of_its_own_kind() {
    let dir = place();
    let r = dir.open(HOUR).await;
    let (held, joined, _) = r.hold(new_review("app")).await.unwrap();
    assert!(!joined);
    let (record, joined, _) = r.hold(record_only("app")).await.unwrap();
    assert!(!joined, "a record-only review joined a held call");
    assert_ne!(record.review_id, held.review_id);
    assert_eq!(record.forward, NONE);
    let (again, joined, _) = r.hold(record_only("app")).await.unwrap();
    assert!(joined);
    assert_eq!(again.review_id, record.review_id);
    let (again, joined, _) = r.hold(new_review("app")).await.unwrap();
    assert!(joined);
    assert_eq!(again.review_id, held.review_id);
    assert_eq!(again.forward.state, "not_started");
}

#[tokio::test]
async fn dropping_a_record_only_waiter_queues_nothing() {
    let dir = place();
    let r = dir.open(HOUR).await;
    let mut queue = r.take_unattended_approvals().unwrap();
    // A held call's waiter dropped after an approval it never saw: its
    // forward goes to the background forwarder.
    let (held, _, waiter) = r.hold(new_review("app")).await.unwrap();
    approve(&r, &held.review_id).await.unwrap();
    drop(waiter);
    assert_eq!(queue.recv().await, Some(held.review_id.clone()));
    // The same for a record-only review: nothing to forward.
    let (record, _, waiter) = r.hold(record_only("app")).await.unwrap();
    approve(&r, &record.review_id).await.unwrap();
    drop(waiter);
    assert!(
        queue.try_recv().is_err(),
        "a record-only approval was queued"
    );
    assert!(lock(&r.inner.waiters).is_empty());
    assert_eq!(r.approved_unforwarded().await.unwrap(), [held.review_id]);
}

/// An approved review whose forward has not run is kept past its
/// retention; an approved record-only one has nothing left to run and goes.
#[tokio::test]
async fn retention_deletes_approved_record_only_reviews() {
    let dir = place();
    let r = dir.open(HOUR).await;
    let record = r.create(record_only("x")).await.unwrap().review_id;
    let held = r.create(new_review("x")).await.unwrap().review_id;
    approve(&r, &record).await.unwrap();
    approve(&r, &held).await.unwrap();
    r.set_retention(Duration::from_millis(200));
    let deadline = Instant::now() + Duration::from_secs(5);
    while r.get(&record, &admin()).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "not purged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(r.get(&held, &admin()).await.unwrap().is_some());
}

/// What a process or replica that is gone left behind: the forward of a held
/// call is taken over (listed, recovered as `outcome_unknown`), a
/// record-only review's never, in the SQL of either store.
#[tokio::test]
async fn what_a_gone_process_left_never_includes_a_record_only_review() {
    let dir = place();
    let r = dir.open(HOUR).await;
    let mut ids = Vec::new();
    for (new, started) in [
        (new_review("x"), false),
        (record_only("x"), false),
        (new_review("x"), true),
        (record_only("x"), true),
    ] {
        let id = r.create(new).await.unwrap().review_id;
        approve(&r, &id).await.unwrap();
        let hook: fn(&mut dyn Backend, &str) = if started {
            |s, id| s.leave_behind(id, true)
        } else {
            |s, id| s.leave_behind(id, false)
        };
        on_review(&r, &id, hook).await;
        ids.push(id);
    }
    let [held, record, held_started, record_started] = <[String; 4]>::try_from(ids).unwrap();
    assert_eq!(r.approved_unforwarded().await.unwrap(), vec![held.clone()]);
    let recovered = if on_postgres() {
        let orphaned = on_store(&r.inner, |s, _| s.orphaned_approvals())
            .await
            .unwrap();
        assert_eq!(orphaned, vec![held.clone()]);
        // The follower may have taken over already: the stored states
        // below are what counts.
        on_store(&r.inner, |s, _| s.recover_lapsed()).await.unwrap();
        r
    } else {
        drop(r);
        let (_, recovered) =
            sqlite::SqliteStore::open(&db(&dir), sealer(&TEST_SEAL).unwrap()).unwrap();
        assert_eq!(recovered, vec![held_started.clone()]);
        dir.open(HOUR).await
    };
    let stored = |id: &str| {
        let (inner, id) = (recovered.inner.clone(), id.to_string());
        async move {
            on_store(&inner, move |s, _| Ok(s.stored_forward_state(&id)))
                .await
                .unwrap()
        }
    };
    assert_eq!(stored(&held_started).await, "outcome_unknown");
    assert_eq!(stored(&record_started).await, "started", "left alone");
    assert_eq!(stored(&record).await, "not_started");
    for id in [&record, &record_started] {
        let v = recovered.get(id, &admin()).await.unwrap().unwrap();
        assert_eq!(v.forward, NONE);
        assert_eq!(recovered.claim_forward(id).await.unwrap(), None);
    }
}

/// `review_reviews` as databases from before record-only reviews have it,
/// written out by hand.
const SCHEMA_BEFORE_RECORD_ONLY: &str = "
CREATE TABLE review_reviews (
    review_id             TEXT PRIMARY KEY NOT NULL,
    created_at            INTEGER NOT NULL,
    expires_at            INTEGER NOT NULL,
    owner                 TEXT NOT NULL,
    route                 TEXT NOT NULL,
    action                TEXT NOT NULL,
    reason                TEXT NOT NULL,
    record_id             TEXT,
    req_method            TEXT NOT NULL,
    req_path              TEXT NOT NULL,
    req_body              BLOB NOT NULL,
    req_hash              TEXT NOT NULL,
    req_creds             TEXT NOT NULL DEFAULT '',
    rules                 TEXT NOT NULL DEFAULT '[]',
    detail                TEXT,
    requester             TEXT,
    approvals             TEXT NOT NULL DEFAULT '[]',
    approvals_required    INTEGER,
    status                TEXT NOT NULL
        CHECK (status IN ('pending', 'approved', 'rejected', 'expired')),
    reviewer              TEXT,
    note                  TEXT,
    resolved_at           INTEGER,
    forward_state         TEXT NOT NULL DEFAULT 'not_started'
        CHECK (forward_state IN ('not_started', 'started', 'done', 'outcome_unknown')),
    forward_started_at    INTEGER,
    forward_finished_at   INTEGER,
    forward_error         TEXT,
    upstream_status       INTEGER,
    upstream_body         BLOB,
    upstream_content_type TEXT
) STRICT;
CREATE TABLE review_request_headers (
    review_id TEXT NOT NULL REFERENCES review_reviews (review_id) ON DELETE CASCADE,
    position  INTEGER NOT NULL,
    name      TEXT NOT NULL,
    value     BLOB NOT NULL,
    PRIMARY KEY (review_id, position)
) STRICT;
";

/// A database from before record-only reviews gains the column on open,
/// and every review in it reads as one that forwards: an approval still
/// waiting is listed and claimed once, a forward left in flight is
/// recovered as before.
#[tokio::test]
async fn a_database_without_record_only_reviews_reads_every_review_as_forwarding() {
    sqlite_only!();
    let dir = place();
    let path = db(&dir);
    let request = HeldRequest {
        method: "POST".into(),
        path: "/api/orders/7/refunds".into(),
        headers: vec![],
        body: Bytes::from_static(b"{\"amount\":900}"),
    };
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(SCHEMA_BEFORE_RECORD_ONLY).unwrap();
        let now = backend::micros(SystemTime::now());
        for (id, forward) in [("old-approved", "not_started"), ("old-started", "started")] {
            conn.execute(
                "INSERT INTO review_reviews (review_id, created_at, expires_at, owner, route, \
                 action, reason, req_method, req_path, req_body, req_hash, status, resolved_at, \
                 forward_state) \
                 VALUES (?1, ?2, ?3, 'refund-app', 'create-refund', 'refund.create', \
                 'review_required', ?4, ?5, ?6, ?7, 'approved', ?2, ?8)",
                rusqlite::params![
                    id,
                    now,
                    now + 3_600_000_000,
                    request.method,
                    request.path,
                    request.body.as_ref(),
                    request.hash(),
                    forward
                ],
            )
            .unwrap();
        }
    }
    let r = Reviews::open(&path, HOUR, TEST_SEAL).unwrap();
    let started = r.get("old-started", &admin()).await.unwrap().unwrap();
    assert_eq!(started.forward.state, "outcome_unknown", "recovered");
    let approved = r.get("old-approved", &admin()).await.unwrap().unwrap();
    assert_eq!(approved.forward.state, "not_started");
    assert_eq!(r.approved_unforwarded().await.unwrap(), ["old-approved"]);
    assert_eq!(
        r.claim_forward("old-approved").await.unwrap(),
        Some(request)
    );
    assert_eq!(r.claim_forward("old-approved").await.unwrap(), None);
    // The column, as a new database has it.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let (notnull, default): (i64, String) = conn
        .query_row(
            "SELECT \"notnull\", dflt_value FROM pragma_table_info('review_reviews') \
             WHERE name = 'forwards'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!((notnull, default.as_str()), (1, "1"));
    // And record-only reviews work in it.
    let v = r.create(record_only("x")).await.unwrap();
    assert_eq!(v.forward, NONE);
    approve(&r, &v.review_id).await.unwrap();
    assert!(r.approved_unforwarded().await.unwrap().is_empty());
}

/// The shared store's upgrade: a database from before record-only reviews
/// (its `forwards` column dropped and the step that added it unrecorded)
/// gains the column when a replica connects, and its reviews read as ones
/// that forward.
#[tokio::test]
async fn a_shared_store_without_record_only_reviews_reads_every_review_as_forwarding() {
    if !on_postgres() {
        eprintln!("PostgreSQL only: the SQLite upgrade has its own test");
        return;
    }
    let dir = place();
    let url = dir.pg.clone().unwrap();
    let request = HeldRequest {
        method: "POST".into(),
        path: "/api/orders/7/refunds".into(),
        headers: vec![],
        body: Bytes::from_static(b"{\"amount\":900}"),
    };
    {
        let shared = crate::store::postgres::testing::connect(&url).await;
        let client = shared.client().await.unwrap();
        client
            .batch_execute(
                "ALTER TABLE review_reviews DROP COLUMN forwards;
                 DELETE FROM verdict_schema_migrations WHERE version = 5;",
            )
            .await
            .unwrap();
        let now = backend::micros(SystemTime::now());
        client
            .execute(
                "INSERT INTO review_reviews (review_id, created_at, expires_at, owner, route, \
                 action, reason, req_method, req_path, req_body, req_hash, req_creds, rules, \
                 status, resolved_at, replica) \
                 VALUES ('old-approved', $1, $2, 'refund-app', 'create-refund', 'refund.create', \
                 'review_required', $3, $4, $5, $6, '', '[]', 'approved', $1, 'gone')",
                &[
                    &now,
                    &(now + 3_600_000_000),
                    &request.method,
                    &request.path,
                    &request.body.as_ref(),
                    &request.hash(),
                ],
            )
            .await
            .unwrap();
    }
    let r = dir.open(HOUR).await;
    let v = r.get("old-approved", &admin()).await.unwrap().unwrap();
    assert_eq!(v.forward.state, "not_started");
    assert_eq!(r.approved_unforwarded().await.unwrap(), ["old-approved"]);
    assert_eq!(
        r.claim_forward("old-approved").await.unwrap(),
        Some(request)
    );
    let v = r.create(record_only("x")).await.unwrap();
    assert_eq!(v.forward, NONE);
}
