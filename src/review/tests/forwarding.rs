//! Approvals and the forward they allow: exactly once, to the live hold or
//! the background queue, with the approvals an action asks for.

use super::*;

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
