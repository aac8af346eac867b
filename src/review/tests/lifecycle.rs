//! Holding, waiting on, resolving and expiring a review, and what survives a
//! restart.

use super::*;

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
        crate::http::error::ApiError::from(reject).status(),
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
        crate::http::error::ApiError::from(missing).status(),
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

    crate::telemetry::metrics::assert_encodes(
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
