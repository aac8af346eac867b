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
        rules: vec!["refunds above 500 need a second pair of eyes".into()],
        join_key: held().join_key(|_| false),
        ..NewReview::for_test(owner, held())
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

// The tests, by what they cover (after the helpers: a macro is seen only
// below its definition).
mod access;
mod forwarding;
mod lifecycle;
mod record_only;
mod storage;
