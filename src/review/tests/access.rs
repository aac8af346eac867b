//! Who sees which review, and what a view, a list, an inspection and health
//! show.

use super::*;

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
    let report = crate::telemetry::health::Component::report(&r);
    assert_eq!(report.status, crate::telemetry::health::Status::Ok);
    assert_eq!(report.facts["pending"], 1);
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
