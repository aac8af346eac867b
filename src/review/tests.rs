//! The async shell against a real store: the hold workflow end to end,
//! restarts, expiry, tenants and racing claims. One set of tests, two
//! backends: a SQLite file in a temp dir, or, with
//! `VERDICT_TEST_STORE=postgres`, a fresh PostgreSQL database (started by
//! scripts/postgres.sh; `.ci/run` runs this module both ways). The few
//! tests about one backend's own behaviour say so and return early on the
//! other.

use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use tempfile::TempDir;

use super::view::rfc3339;
use super::*;

const HOUR: Duration = Duration::from_secs(3600);

/// The key held credentials are sealed with in these tests.
const TEST_SEAL: [u8; 32] = [42; 32];

fn db(place: &Place) -> std::path::PathBuf {
    place.dir.path().join("verdict.db")
}

use crate::store::postgres::testing::on_postgres;

/// Where one test's reviews live: a temp dir (for SQLite, and for files a
/// test writes) and, on PostgreSQL, a fresh database of its own.
struct Place {
    dir: TempDir,
    pg: Option<String>,
}

fn place() -> Place {
    let pg = on_postgres().then(crate::store::postgres::testing::fresh_database);
    Place {
        dir: TempDir::new().unwrap(),
        pg,
    }
}

impl Place {
    async fn open(&self, ttl: Duration) -> Reviews {
        self.open_sealed(ttl, TEST_SEAL).await
    }

    /// Another open of the same store: a restart on SQLite, a second
    /// replica on PostgreSQL.
    async fn open_sealed(&self, ttl: Duration, seal: [u8; 32]) -> Reviews {
        match &self.pg {
            None => Reviews::open(&db(self), ttl, seal).unwrap(),
            Some(url) => {
                let shared = crate::store::postgres::testing::connect(url).await;
                tokio::task::spawn_blocking(move || Reviews::open_shared(shared, ttl, seal))
                    .await
                    .unwrap()
                    .unwrap()
            }
        }
    }
}

/// A review deadline that passes within a test, yet outlasts the store
/// calls before it: on PostgreSQL a new pooled connection (SCRAM, debug
/// build) can take a good part of 200 ms.
fn short_ttl() -> Duration {
    if on_postgres() {
        Duration::from_secs(1)
    } else {
        Duration::from_millis(200)
    }
}

/// Returns early (the test passes trivially) on PostgreSQL: for tests of
/// SQLite's own file handling and single-process restarts, which the
/// PostgreSQL backend replaces with leases (tests/replicas.rs).
macro_rules! sqlite_only {
    () => {
        if on_postgres() {
            eprintln!("SQLite only: not run against PostgreSQL");
            return;
        }
    };
}

fn held() -> HeldRequest {
    HeldRequest {
        method: "POST".into(),
        path: "/api/orders/7/refunds?dry=0".into(),
        headers: vec![
            (
                "content-type".into(),
                Bytes::from_static(b"application/json"),
            ),
            ("x-opaque".into(), Bytes::from_static(b"\xff\x00raw")),
            ("x-dup".into(), Bytes::from_static(b"1")),
            ("x-dup".into(), Bytes::from_static(b"2")),
        ],
        body: Bytes::from_static(b"{\"amount\":900}"),
    }
}

fn new_review(owner: &str) -> NewReview {
    NewReview {
        review_id: None,
        owner: owner.into(),
        route: "create-refund".into(),
        action: "refund.create".into(),
        reason: "review_required".into(),
        rules: vec!["refunds above 500 need a second pair of eyes".into()],
        record_id: Some("rec-1".into()),
        request: held(),
        detail: None,
        requesters: vec![],
        join_key: held().join_key(|_| false),
        credential_headers: vec![],
        approvals_required: None,
    }
}

fn admin() -> Viewer {
    Viewer {
        name: "reviewer-key".into(),
        sees_all: true,
    }
}

fn app(name: &str) -> Viewer {
    Viewer {
        name: name.into(),
        sees_all: false,
    }
}

async fn approve(r: &Reviews, id: &str) -> Result<ReviewView, ReviewError> {
    alice_resolves(r, id, true, "looks fine").await
}

/// Reviewer `alice` resolves review `id` now, with a note. Also used by the
/// observer's tests (`observe.rs`).
pub(super) async fn alice_resolves(
    r: &Reviews,
    id: &str,
    approve: bool,
    note: &str,
) -> Result<ReviewView, ReviewError> {
    r.resolve(
        id,
        approve,
        "alice",
        "alice",
        Some(note.into()),
        SystemTime::now(),
    )
    .await
}

/// A fresh store (ttl an hour) holding one pending review of
/// `refund-app`, and its id; the dir must outlive the store.
async fn one_pending() -> (Place, Reviews, String) {
    let dir = place();
    let r = dir.open(HOUR).await;
    let id = r.create(new_review("refund-app")).await.unwrap().review_id;
    (dir, r, id)
}

/// A task that waits (up to 30 s) for review `id` to be resolved.
fn waiter(
    r: &Reviews,
    id: &str,
) -> tokio::task::JoinHandle<Result<Option<Resolution>, ReviewError>> {
    let (r, id) = (r.clone(), id.to_string());
    tokio::spawn(async move { r.wait(&id, Duration::from_secs(30)).await })
}

/// Returns once `n` waiters listen on the review's channel (10 s at most).
async fn until_waiting(r: &Reviews, id: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let listening = lock(&r.inner.waiters)
            .get(id)
            .map_or(0, |tx| tx.receiver_count());
        if listening >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{listening} of {n} waiters");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn hold_wait_approve_then_claim_exactly_once() {
    let dir = place();
    let r = dir.open(HOUR).await;
    let v = r.create(new_review("refund-app")).await.unwrap();
    assert_eq!(v.status, ReviewStatus::Pending);
    assert_eq!(v.forward.state, "not_started");
    assert_eq!(v.expires_at.duration_since(v.created_at).unwrap(), HOUR);
    let id = v.review_id.clone();

    assert_eq!(r.wait(&id, Duration::from_millis(50)).await.unwrap(), None);
    assert_eq!(
        r.claim_forward(&id).await.unwrap(),
        None,
        "pending cannot be claimed"
    );
    assert!(r.approved_unforwarded().await.unwrap().is_empty());

    let v = approve(&r, &id).await.unwrap();
    assert_eq!(v.status, ReviewStatus::Approved);
    assert_eq!(v.reviewer.as_deref(), Some("alice"));
    assert_eq!(v.note.as_deref(), Some("looks fine"));
    assert!(v.resolved_at.is_some());
    assert_eq!(
        r.wait(&id, Duration::from_secs(5)).await.unwrap(),
        Some(Resolution::Approved)
    );
    assert_eq!(r.approved_unforwarded().await.unwrap(), vec![id.clone()]);

    assert_eq!(r.claim_forward(&id).await.unwrap(), Some(held()));
    assert_eq!(r.claim_forward(&id).await.unwrap(), None);
    assert!(r.approved_unforwarded().await.unwrap().is_empty());
    let v = r.get(&id, &admin()).await.unwrap().unwrap();
    assert_eq!(v.forward.state, "started");
    assert_eq!(r.upstream_response(&id, &admin()).await.unwrap(), None);

    let big = Bytes::from(vec![b'x'; MAX_STORED_UPSTREAM_BODY + 10]);
    r.finish_forward(
        &id,
        ForwardOutcome::Done {
            status: 201,
            body: big,
            content_type: Some("application/json".into()),
        },
    )
    .await
    .unwrap();
    let v = r.get(&id, &admin()).await.unwrap().unwrap();
    assert_eq!(
        v.forward,
        ForwardView {
            state: "done",
            upstream_status: Some(201)
        }
    );
    assert_eq!(
        r.finish_forward(
            &id,
            ForwardOutcome::Failed {
                error: "late".into()
            }
        )
        .await,
        Err(ReviewError::NotForwarding("done"))
    );
    assert_eq!(r.claim_forward(&id).await.unwrap(), None);

    let answer = r
        .upstream_response(&id, &app("refund-app"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer.status, 201);
    assert_eq!(answer.content_type.as_deref(), Some("application/json"));
    assert_eq!(answer.body.len(), MAX_STORED_UPSTREAM_BODY);
    assert_eq!(
        r.upstream_response(&id, &app("other-app")).await.unwrap(),
        None
    );
    assert_eq!(
        r.upstream_response("unknown", &admin()).await.unwrap(),
        None
    );

    let stored: usize = {
        let (r, id) = (r.clone(), id.clone());
        on_store(&r.inner, move |s, _| Ok(s.upstream_body_len(&id)))
            .await
            .unwrap()
    };
    assert_eq!(stored, MAX_STORED_UPSTREAM_BODY);
}

#[tokio::test]
async fn second_resolution_is_a_conflict() {
    let (_dir, r, id) = one_pending().await;
    approve(&r, &id).await.unwrap();
    let again = approve(&r, &id).await.unwrap_err();
    assert_eq!(again, ReviewError::AlreadyResolved(ReviewStatus::Approved));
    let reject = r
        .resolve(&id, false, "bob", "bob", None, SystemTime::now())
        .await
        .unwrap_err();
    assert_eq!(reject, ReviewError::AlreadyResolved(ReviewStatus::Approved));
    assert_eq!(
        crate::api::error::ApiError::from(reject).status(),
        http::StatusCode::CONFLICT
    );
    // The first resolution stands.
    let v = r.get(&id, &admin()).await.unwrap().unwrap();
    assert_eq!(
        (v.status, v.reviewer.as_deref()),
        (ReviewStatus::Approved, Some("alice"))
    );

    let missing = approve(&r, "00000000-0000-4000-8000-000000000000")
        .await
        .unwrap_err();
    assert_eq!(missing, ReviewError::NotFound);
    assert_eq!(
        crate::api::error::ApiError::from(missing).status(),
        http::StatusCode::NOT_FOUND
    );
    assert_eq!(
        r.wait("nope", Duration::from_millis(10)).await,
        Err(ReviewError::NotFound)
    );
    assert_eq!(r.claim_forward("nope").await, Err(ReviewError::NotFound));
}

#[tokio::test]
async fn rejected_review_is_never_forwarded() {
    let (_dir, r, id) = one_pending().await;
    let v = r
        .resolve(&id, false, "bob", "bob", None, SystemTime::now())
        .await
        .unwrap();
    assert_eq!(v.status, ReviewStatus::Rejected);
    assert_eq!(v.note, None);
    assert_eq!(
        r.wait(&id, Duration::from_secs(5)).await.unwrap(),
        Some(Resolution::Rejected)
    );
    assert_eq!(r.claim_forward(&id).await.unwrap(), None);
    assert!(r.approved_unforwarded().await.unwrap().is_empty());
    assert_eq!(
        r.finish_forward(&id, ForwardOutcome::Failed { error: "x".into() })
            .await,
        Err(ReviewError::NotForwarding("not_started"))
    );
}

#[tokio::test]
async fn wait_returns_as_soon_as_another_task_resolves() {
    let (_dir, r, id) = one_pending().await;
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let (r, id) = (r.clone(), id.clone());
            tokio::spawn(async move {
                let started = Instant::now();
                (
                    r.wait(&id, Duration::from_secs(30)).await,
                    started.elapsed(),
                )
            })
        })
        .collect();
    until_waiting(&r, &id, 3).await;
    assert_eq!(lock(&r.inner.waiters).len(), 1, "one channel per review");
    r.resolve(&id, false, "bob", "bob", None, SystemTime::now())
        .await
        .unwrap();
    for w in waiters {
        let (got, elapsed) = w.await.unwrap();
        assert_eq!(got.unwrap(), Some(Resolution::Rejected));
        assert!(
            elapsed < Duration::from_secs(10),
            "woken, not timed out: {elapsed:?}"
        );
    }
    assert!(
        lock(&r.inner.waiters).is_empty(),
        "channels are removed with their last waiter"
    );
}

#[tokio::test]
async fn sweeper_expires_and_wakes_waiters() {
    let dir = place();
    let mut registry = prometheus_client::registry::Registry::default();
    let r = dir.open(Duration::from_millis(300)).await;
    r.register_metrics(&mut registry);
    let v = r.create(new_review("refund-app")).await.unwrap();
    let id = v.review_id.clone();
    assert_eq!(r.health().pending, 1);

    let started = Instant::now();
    assert_eq!(
        r.wait(&id, Duration::from_secs(30)).await.unwrap(),
        Some(Resolution::Expired)
    );
    assert!(started.elapsed() < Duration::from_secs(10));

    let v = r.get(&id, &admin()).await.unwrap().unwrap();
    assert_eq!(v.status, ReviewStatus::Expired);
    assert_eq!(v.resolved_at, Some(v.expires_at));
    assert_eq!(approve(&r, &id).await, Err(ReviewError::Expired));
    assert_eq!(r.claim_forward(&id).await.unwrap(), None);
    let h = r.health();
    assert_eq!((h.pending, h.oldest_pending_age), (0, None));

    crate::runtime::metrics::assert_encodes(
        &registry,
        &[
            "verdict_review_held_requests 0",
            "verdict_review_resolutions_total{outcome=\"expired\"} 1",
            "verdict_review_hold_duration_seconds_count 1",
        ],
    );
}

#[tokio::test]
async fn the_sweeper_waits_for_a_resolution_in_progress() {
    let dir = place();
    let ttl = short_ttl();
    let r = dir.open(ttl).await;
    let id = r.create(new_review("refund-app")).await.unwrap().review_id;
    // The Review API's order: turn, check as of `now`, audit, resolve.
    let turn = r.resolution_turn().await.unwrap();
    let now = SystemTime::now();
    let v = r.get_at(&id, &admin(), now).await.unwrap().unwrap();
    assert_eq!(v.status, ReviewStatus::Pending);
    // The deadline passes while the resolution is being audited.
    tokio::time::sleep(ttl * 3).await;
    let v = r
        .resolve(&id, true, "alice", "alice", None, now)
        .await
        .unwrap();
    assert_eq!(v.status, ReviewStatus::Approved);
    drop(turn);
    // The sweeper ran after the turn and found nothing left to expire.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let v = r.get(&id, &admin()).await.unwrap().unwrap();
    assert_eq!(v.status, ReviewStatus::Approved);
}

#[tokio::test]
async fn resolving_past_the_deadline_stores_the_expiry() {
    let (_dir, r, id) = one_pending().await;
    let waiter = waiter(&r, &id);
    let late = SystemTime::now() + 2 * HOUR;
    let err = r
        .resolve(&id, true, "alice", "alice", None, late)
        .await
        .unwrap_err();
    assert_eq!(err, ReviewError::Expired);
    assert_eq!(err.to_string(), "review expired before it was resolved");
    assert_eq!(waiter.await.unwrap().unwrap(), Some(Resolution::Expired));
    let v = r.get(&id, &admin()).await.unwrap().unwrap();
    assert_eq!((v.status, v.reviewer), (ReviewStatus::Expired, None));
    assert_eq!(
        r.resolve(&id, true, "alice", "alice", None, SystemTime::now())
            .await,
        Err(ReviewError::Expired)
    );
}

#[tokio::test]
async fn restart_turns_an_in_flight_forward_into_outcome_unknown() {
    sqlite_only!();
    let dir = place();
    let id = {
        let r = dir.open(HOUR).await;
        let id = r.create(new_review("refund-app")).await.unwrap().review_id;
        approve(&r, &id).await.unwrap();
        assert!(r.claim_forward(&id).await.unwrap().is_some());
        id
    };
    let r = dir.open(HOUR).await;
    let v = r.get(&id, &admin()).await.unwrap().unwrap();
    assert_eq!(v.status, ReviewStatus::Approved);
    assert_eq!(
        v.forward,
        ForwardView {
            state: "outcome_unknown",
            upstream_status: None
        }
    );
    assert_eq!(r.claim_forward(&id).await.unwrap(), None);
    assert!(r.approved_unforwarded().await.unwrap().is_empty());
    assert_eq!(
        r.finish_forward(
            &id,
            ForwardOutcome::Done {
                status: 200,
                body: Bytes::new(),
                content_type: None
            }
        )
        .await,
        Err(ReviewError::NotForwarding("outcome_unknown"))
    );
    assert_eq!(
        r.wait(&id, Duration::from_secs(5)).await.unwrap(),
        Some(Resolution::Approved)
    );
}

#[tokio::test]
async fn a_failed_forward_is_outcome_unknown() {
    let (_dir, r, id) = one_pending().await;
    approve(&r, &id).await.unwrap();
    assert!(r.claim_forward(&id).await.unwrap().is_some());
    r.finish_forward(
        &id,
        ForwardOutcome::Failed {
            error: "upstream timed out".into(),
        },
    )
    .await
    .unwrap();
    let v = r.get(&id, &admin()).await.unwrap().unwrap();
    assert_eq!(v.forward.state, "outcome_unknown");
    assert_eq!(r.claim_forward(&id).await.unwrap(), None);
}

#[tokio::test]
async fn pending_and_approved_reviews_survive_a_restart() {
    sqlite_only!();
    let dir = place();
    let (pending_id, approved_id) = {
        let r = dir.open(HOUR).await;
        let p = r.create(new_review("refund-app")).await.unwrap().review_id;
        let a = r.create(new_review("refund-app")).await.unwrap().review_id;
        approve(&r, &a).await.unwrap();
        (p, a)
    };
    let r = dir.open(HOUR).await;
    assert_eq!(r.health().pending, 1);
    assert!(r.health().oldest_pending_age.is_some());
    assert_eq!(
        r.approved_unforwarded().await.unwrap(),
        vec![approved_id.clone()]
    );
    assert_eq!(r.claim_forward(&approved_id).await.unwrap(), Some(held()));

    let v = r.get(&pending_id, &admin()).await.unwrap().unwrap();
    assert_eq!(v.status, ReviewStatus::Pending);
    approve(&r, &pending_id).await.unwrap();
    assert_eq!(r.health().pending, 0);
    assert_eq!(r.claim_forward(&pending_id).await.unwrap(), Some(held()));
    assert_eq!(r.claim_forward(&pending_id).await.unwrap(), None);
}

#[tokio::test]
async fn tenants_see_only_their_own_reviews() {
    let dir = place();
    let r = dir.open(HOUR).await;
    let a1 = r.create(new_review("app-a")).await.unwrap().review_id;
    let a2 = r.create(new_review("app-a")).await.unwrap().review_id;
    let b1 = r.create(new_review("app-b")).await.unwrap().review_id;
    approve(&r, &a2).await.unwrap();

    assert!(r.get(&a1, &app("app-a")).await.unwrap().is_some());
    assert_eq!(
        r.get(&b1, &app("app-a")).await.unwrap(),
        None,
        "another tenant's review"
    );
    assert_eq!(
        r.get(&b1, &app("app-b")).await.unwrap().map(|v| v.owner),
        Some("app-b".into())
    );
    assert!(r.get(&b1, &admin()).await.unwrap().is_some());
    assert_eq!(r.get("unknown", &admin()).await.unwrap(), None);

    let ids = |vs: Vec<ReviewView>| vs.into_iter().map(|v| v.review_id).collect::<Vec<_>>();
    // Newest first without a filter; oldest first for the pending queue.
    assert_eq!(
        ids(r.list(None, &admin(), 100).await.unwrap()),
        vec![b1.clone(), a2.clone(), a1.clone()]
    );
    assert_eq!(
        ids(r.list(None, &app("app-a"), 100).await.unwrap()),
        vec![a2.clone(), a1.clone()]
    );
    assert_eq!(
        ids(r
            .list(Some(ReviewStatus::Pending), &admin(), 100)
            .await
            .unwrap()),
        vec![a1.clone(), b1.clone()]
    );
    assert_eq!(
        ids(r
            .list(Some(ReviewStatus::Pending), &app("app-b"), 100)
            .await
            .unwrap()),
        vec![b1.clone()]
    );
    assert_eq!(
        ids(r
            .list(Some(ReviewStatus::Approved), &app("app-b"), 100)
            .await
            .unwrap()),
        Vec::<String>::new()
    );
    assert_eq!(
        ids(r
            .list(Some(ReviewStatus::Approved), &admin(), 100)
            .await
            .unwrap()),
        vec![a2.clone()]
    );
    assert_eq!(
        ids(r.list(None, &admin(), 1).await.unwrap()),
        vec![b1.clone()]
    );
    assert!(r
        .list(Some(ReviewStatus::Expired), &admin(), 100)
        .await
        .unwrap()
        .is_empty());
    assert!(r.list(None, &app("nobody"), 100).await.unwrap().is_empty());
}

#[tokio::test]
async fn list_shows_overdue_pending_reviews_as_expired() {
    let dir = place();
    // A zero ttl: every review is overdue at once, whether or not the
    // sweeper has written it down yet.
    let r = dir.open(Duration::ZERO).await;
    let id = r.create(new_review("app-a")).await.unwrap().review_id;
    let expired = r
        .list(Some(ReviewStatus::Expired), &admin(), 10)
        .await
        .unwrap();
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].review_id, id);
    assert_eq!(expired[0].resolved_at, Some(expired[0].expires_at));
    assert!(r
        .list(Some(ReviewStatus::Pending), &admin(), 10)
        .await
        .unwrap()
        .is_empty());
}

type Claim = tokio::task::JoinHandle<Result<Option<HeldRequest>, ReviewError>>;

/// How many of the racing claims were handed the request.
async fn claims_won(tasks: Vec<Claim>) -> usize {
    let mut won = 0;
    for t in tasks {
        if t.await.unwrap().unwrap().is_some() {
            won += 1;
        }
    }
    won
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_claims_forward_exactly_once() {
    let (_dir, r, id) = one_pending().await;
    approve(&r, &id).await.unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (r, id, barrier) = (r.clone(), id.clone(), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                r.claim_forward(&id).await
            })
        })
        .collect();
    assert_eq!(claims_won(tasks).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_claims_through_two_handles_forward_exactly_once() {
    // Two opens of the same file (two connections, like two processes)
    // still hand the request out once.
    let dir = place();
    let r1 = dir.open(HOUR).await;
    let r2 = dir.open(HOUR).await;
    let id = r1.create(new_review("refund-app")).await.unwrap().review_id;
    approve(&r2, &id).await.unwrap();
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let (r, id) = (if i % 2 == 0 { r1.clone() } else { r2.clone() }, id.clone());
            tokio::spawn(async move { r.claim_forward(&id).await })
        })
        .collect();
    assert_eq!(claims_won(tasks).await, 1);
}

/// A review's own `approvals_required` (its action's `approvals`) wins
/// over the server's count, on every backend, and is stored with it.
#[tokio::test]
async fn a_review_needs_the_approvals_its_action_asks_for() {
    let dir = place();
    let r = dir.open(HOUR).await;
    r.set_approvals(1);
    let mut new = new_review("refund-app");
    new.approvals_required = Some(2);
    let id = r.create(new).await.unwrap().review_id;
    let v = approve(&r, &id).await.unwrap();
    assert_eq!((v.status, v.approvals_required), (ReviewStatus::Pending, 2));
    let v = r
        .resolve(&id, true, "bob", "bob", None, SystemTime::now())
        .await
        .unwrap();
    assert_eq!((v.status, v.approvals.len()), (ReviewStatus::Approved, 2));
    // Without one, the server's count, read when the review is resolved.
    r.set_approvals(2);
    let plain = r.create(new_review("refund-app")).await.unwrap().review_id;
    let v = approve(&r, &plain).await.unwrap();
    assert_eq!((v.status, v.approvals_required), (ReviewStatus::Pending, 2));
    let mut new = new_review("refund-app");
    new.approvals_required = Some(1);
    let one = r.create(new).await.unwrap().review_id;
    assert_eq!(
        approve(&r, &one).await.unwrap().status,
        ReviewStatus::Approved
    );
}

#[tokio::test]
async fn view_json_never_shows_the_held_request() {
    let dir = place();
    let r = dir.open(HOUR).await;
    let mut new = new_review("refund-app");
    new.record_id = None;
    new.review_id = Some(uuid::Uuid::from_u128(0x1234));
    let v = r.create(new).await.unwrap();
    assert_eq!(v.review_id, "00000000-0000-0000-0000-000000001234");
    let json = serde_json::to_value(&v).unwrap();
    let keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        vec![
            "action",
            "approvals",
            "approvals_required",
            "created_at",
            "expires_at",
            "forward",
            "reason",
            "request",
            "review_id",
            "route",
            "rules",
            "status"
        ]
    );
    assert_eq!(json["status"], "pending");
    assert_eq!(
        json["rules"],
        serde_json::json!(["refunds above 500 need a second pair of eyes"])
    );
    assert_eq!(json["forward"], serde_json::json!({"state": "not_started"}));
    assert_eq!(
        json["request"],
        serde_json::json!({"method": "POST", "path": "/api/orders/7/refunds", "hash": held().hash()})
    );
    let created = json["created_at"].as_str().unwrap();
    assert!(created.ends_with('Z') && created.contains('T'), "{created}");
    assert!(!json.to_string().contains("amount"), "no body in the view");

    approve(&r, &v.review_id).await.unwrap();
    r.claim_forward(&v.review_id).await.unwrap();
    r.finish_forward(
        &v.review_id,
        ForwardOutcome::Done {
            status: 204,
            body: Bytes::new(),
            content_type: None,
        },
    )
    .await
    .unwrap();
    let json = serde_json::to_value(r.get(&v.review_id, &admin()).await.unwrap().unwrap()).unwrap();
    assert_eq!(json["status"], "approved");
    assert_eq!(json["reviewer"], "alice");
    assert_eq!(json["note"], "looks fine");
    assert!(json["resolved_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        json["forward"],
        serde_json::json!({"state": "done", "upstream_status": 204})
    );
}

#[tokio::test]
async fn health_counts_pending_reviews() {
    let dir = place();
    let r = dir.open(HOUR).await;
    assert_eq!(
        r.health(),
        ReviewsHealth {
            pending: 0,
            stored: 0,
            oldest_pending_age: None,
            last_error: None
        }
    );
    let a = r.create(new_review("x")).await.unwrap().review_id;
    r.create(new_review("x")).await.unwrap();
    assert_eq!(r.health().pending, 2);
    approve(&r, &a).await.unwrap();
    assert_eq!(r.health().pending, 1);
    let report = crate::runtime::health::Component::report(&r);
    assert_eq!(report.status, crate::runtime::health::Status::Ok);
    assert_eq!(report.facts["pending"], 1);
}

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
async fn a_dropped_resolve_call_still_wakes_the_held_request() {
    // hyper drops a handler future when the reviewer hangs up; once the
    // resolution is on its way to disk, the held request must still hear it.
    let (_dir, r, id) = one_pending().await;
    let waiter = waiter(&r, &id);
    until_waiting(&r, &id, 1).await;
    let resolve = approve(&r, &id);
    tokio::select! {
        biased;
        _ = resolve => panic!("a blocking store call cannot finish in one poll"),
        () = std::future::ready(()) => {}
    }
    let started = Instant::now();
    assert_eq!(waiter.await.unwrap().unwrap(), Some(Resolution::Approved));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(r.health().pending, 0);
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
fn times_format_as_rfc3339_utc() {
    let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_795_000_000_123_456);
    assert_eq!(rfc3339(t).unwrap(), "2026-11-18T11:06:40.123456Z");
    assert_eq!(
        rfc3339(SystemTime::UNIX_EPOCH).unwrap(),
        "1970-01-01T00:00:00Z"
    );
    let far = SystemTime::UNIX_EPOCH + Duration::from_secs(400_000_000_000);
    assert!(rfc3339(far).is_err(), "an error, not a panic");
}

#[tokio::test]
async fn approvals_go_to_the_live_hold_or_else_to_the_background_queue() {
    let dir = place();
    let r = dir.open(HOUR).await;
    let mut queue = r.take_unattended_approvals().unwrap();
    assert!(r.take_unattended_approvals().is_none(), "taken once");

    // Approved while the hold waits: the hold owns it, nothing is queued.
    let live = r.create(new_review("refund-app")).await.unwrap().review_id;
    let waiter = waiter(&r, &live);
    until_waiting(&r, &live, 1).await;
    approve(&r, &live).await.unwrap();
    assert_eq!(waiter.await.unwrap().unwrap(), Some(Resolution::Approved));

    // Approved after the hold timed out: queued.
    let late = r.create(new_review("refund-app")).await.unwrap().review_id;
    assert_eq!(
        r.wait(&late, Duration::from_millis(20)).await.unwrap(),
        None
    );
    approve(&r, &late).await.unwrap();

    // Rejected after the hold timed out: nothing to forward.
    let no = r.create(new_review("refund-app")).await.unwrap().review_id;
    r.resolve(&no, false, "bob", "bob", None, SystemTime::now())
        .await
        .unwrap();

    // Sent to a waiter whose future was dropped before it saw it: queued.
    let dropped = r.create(new_review("refund-app")).await.unwrap().review_id;
    let sub = Subscription::new(&r.inner, &dropped);
    approve(&r, &dropped).await.unwrap();
    drop(sub);

    // An approval that lands as the hold times out goes to the hold.
    let raced = r.create(new_review("refund-app")).await.unwrap().review_id;
    let mut sub = Subscription::new(&r.inner, &raced);
    approve(&r, &raced).await.unwrap();
    assert_eq!(sub.give_up(), Some(Resolution::Approved));
    drop(sub);

    assert_eq!(queue.recv().await, Some(late));
    assert_eq!(queue.recv().await, Some(dropped));
    assert!(
        queue.try_recv().is_err(),
        "the live hold's approval is not queued"
    );
    assert!(lock(&r.inner.waiters).is_empty());
}

#[tokio::test]
async fn approvals_of_reviews_pending_across_a_restart_are_queued() {
    let dir = place();
    let id = {
        let r = dir.open(HOUR).await;
        r.create(new_review("refund-app")).await.unwrap().review_id
    };
    let r = dir.open(HOUR).await;
    let mut queue = r.take_unattended_approvals().unwrap();
    approve(&r, &id).await.unwrap();
    assert_eq!(queue.recv().await, Some(id.clone()));
    assert!(r.claim_forward(&id).await.unwrap().is_some());
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

/// Runs a store test hook on one review, on a blocking thread.
async fn on_review(r: &Reviews, id: &str, hook: fn(&mut dyn Backend, &str)) {
    let id = id.to_string();
    on_store(&r.inner, move |s, _| {
        hook(s, &id);
        Ok(())
    })
    .await
    .unwrap();
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

fn with_creds(auth: Option<&str>, cookie: Option<&str>) -> NewReview {
    let mut n = new_review("proxy");
    if let Some(a) = auth {
        n.request
            .headers
            .push(("authorization".into(), Bytes::from(a.to_string())));
    }
    if let Some(c) = cookie {
        n.request
            .headers
            .push(("cookie".into(), Bytes::from(c.to_string())));
    }
    n.join_key = n.request.join_key(|_| false);
    n
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

/// A reviewer sees the held request with its credentials sealed, and the
/// decision snapshot as it was stored.
#[tokio::test]
async fn inspection_shows_the_request_without_its_credentials() {
    let dir = place();
    let r = dir.open(HOUR).await;
    let mut new = with_creds(Some("Bearer s3cret"), Some("session=abc"));
    new.detail = Some(serde_json::json!({"v": 1, "reason": "review_required"}));
    let v = r.create(new.clone()).await.unwrap();
    let i = r.inspect(&v.review_id, &admin()).await.unwrap().unwrap();
    assert_eq!(i.body, new.request.body);
    assert_eq!(i.path, new.request.path);
    assert_eq!(i.detail, new.detail);
    assert!(i.upstream.is_none());
    let shown = |name: &str| {
        i.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    assert_eq!(shown("authorization"), "[sealed]");
    assert_eq!(shown("cookie"), "[sealed]");
    assert_eq!(i.headers.len(), new.request.headers.len());
    // Another app's key does not see it; an unknown id is None.
    let other = Viewer {
        name: "someone-else".into(),
        sees_all: false,
    };
    assert!(r.inspect(&v.review_id, &other).await.unwrap().is_none());
    assert!(r.inspect("nope", &admin()).await.unwrap().is_none());
}

/// With a shared store the resolution turn holds across replicas: while
/// one replica checks, audits and stores a resolution, another's sweeper
/// does not expire the review in between.
#[tokio::test]
async fn another_replicas_sweeper_waits_for_a_resolution_in_progress() {
    if !on_postgres() {
        // Two handles on one SQLite file are two processes' worth of
        // turns; SQLite runs one replica, so there is nothing to test.
        eprintln!("PostgreSQL only: not run against SQLite");
        return;
    }
    let dir = place();
    let ttl = short_ttl();
    let r1 = dir.open(ttl).await;
    let r2 = dir.open(ttl).await;
    let id = r1.create(new_review("refund-app")).await.unwrap().review_id;
    let turn = r1.resolution_turn().await.unwrap();
    let now = SystemTime::now();
    let v = r1.get_at(&id, &admin(), now).await.unwrap().unwrap();
    assert_eq!(v.status, ReviewStatus::Pending);
    // A hold on r2 wakes its sweeper, which plans for the earliest
    // deadline in the store: this review's. Past it, the sweeper would
    // expire the review, but it waits for the turn.
    r2.create(new_review("other-app")).await.unwrap();
    tokio::time::sleep(ttl * 3).await;
    let v = r1
        .resolve(&id, true, "alice", "alice", None, now)
        .await
        .unwrap();
    assert_eq!(v.status, ReviewStatus::Approved);
    drop(turn);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let v = r2.get(&id, &admin()).await.unwrap().unwrap();
    assert_eq!(v.status, ReviewStatus::Approved);
}
