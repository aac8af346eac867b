//! Record-only reviews ([`NewReview::forwards`] `false`): the decision was
//! answered elsewhere (Envoy ext_authz, AuthZEN), so verdict holds no call.
//! Both stores keep the kind, a retried call joins only a review of its own
//! kind, and a database from before them reads every old review as one
//! that forwards.

use super::*;

/// [`new_review`] as a record-only review: the same request, so the same
/// join key.
fn record_only(owner: &str) -> NewReview {
    NewReview {
        forwards: false,
        ..new_review(owner)
    }
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
    let (again, joined, _) = r.hold(record_only("app")).await.unwrap();
    assert!(joined);
    assert_eq!(again.review_id, record.review_id);
    let (again, joined, _) = r.hold(new_review("app")).await.unwrap();
    assert!(joined);
    assert_eq!(again.review_id, held.review_id);
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
}
