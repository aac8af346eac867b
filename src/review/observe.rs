//! Telling the rest of the process that a review was held or resolved.
//!
//! Notifications (a webhook, later perhaps more) must hear of every new
//! review and every resolution, whichever door caused it: the proxy's hold,
//! the Review API, a console, or the sweeper's expiry. The one place all of
//! those pass is the bookkeeping after a commit (`Inner::created` and
//! `Inner::resolved`), so the observer is called there, on the thread that
//! stored the change, after it is durable. It must therefore return at once
//! and never block: queue the event and do the work elsewhere.

use std::time::SystemTime;

use super::{backend::Row, view, Inner, ReviewView, Reviews};

/// What happened to a review.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewEvent {
    /// A new review is pending (a call joining its pending review is not
    /// new).
    Held,
    /// The review left `pending`: approved, rejected, or expired.
    Resolved,
}

impl ReviewEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewEvent::Held => "held",
            ReviewEvent::Resolved => "resolved",
        }
    }
}

/// Called with each event and the review as it now stands. Runs on a
/// blocking thread with the store locked: it must not block.
pub type Observer = Box<dyn Fn(ReviewEvent, &ReviewView) + Send + Sync>;

impl Reviews {
    /// Sets the one observer of this store. `false` (and `f` is dropped)
    /// when one is set already.
    pub fn observe(&self, f: Observer) -> bool {
        self.inner.observer.set(f).is_ok()
    }
}

impl Inner {
    /// Tells the observer, if any, about `row`.
    pub(super) fn tell(&self, event: ReviewEvent, row: &Row) {
        if let Some(f) = self.observer.get() {
            let required = self
                .approvals_required
                .load(std::sync::atomic::Ordering::Relaxed);
            f(event, &view(row, SystemTime::now(), required));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use bytes::Bytes;

    use super::*;
    use crate::review::{HeldRequest, NewReview, ReviewStatus};

    fn new_review() -> NewReview {
        NewReview::for_test(
            "app",
            HeldRequest {
                method: "POST".into(),
                path: "/api/orders/7/refunds".into(),
                headers: vec![],
                body: Bytes::from_static(b"{\"amount\":900}"),
            },
        )
    }

    type Seen = Arc<Mutex<Vec<(ReviewEvent, String, ReviewStatus)>>>;

    /// A fresh store with reviews that expire after `ttl`, and what its one
    /// observer has seen; the dir must outlive the store.
    fn observed(ttl: Duration) -> (tempfile::TempDir, Reviews, Seen) {
        let dir = tempfile::tempdir().unwrap();
        let r = Reviews::open(&dir.path().join("verdict.db"), ttl, [7; 32]).unwrap();
        let seen: Seen = Arc::default();
        let s = seen.clone();
        assert!(r.observe(Box::new(move |e, v| {
            s.lock().unwrap().push((e, v.review_id.clone(), v.status))
        })));
        assert!(!r.observe(Box::new(|_, _| {})), "one observer only");
        (dir, r, seen)
    }

    #[tokio::test]
    async fn every_new_and_resolved_review_is_observed_once() {
        let (_dir, r, seen) = observed(Duration::from_secs(3600));
        let (a, joined, _) = r.hold(new_review()).await.unwrap();
        assert!(!joined);
        let (again, joined, _) = r.hold(new_review()).await.unwrap();
        assert!(joined && again.review_id == a.review_id);
        crate::review::tests::alice_resolves(&r, &a.review_id, true, "ok")
            .await
            .unwrap();
        assert!(r
            .resolve(&a.review_id, false, "bob", "bob", None, SystemTime::now())
            .await
            .is_err());
        let got = seen.lock().unwrap().clone();
        assert_eq!(
            got,
            vec![
                (
                    ReviewEvent::Held,
                    a.review_id.clone(),
                    ReviewStatus::Pending
                ),
                (ReviewEvent::Resolved, a.review_id, ReviewStatus::Approved),
            ]
        );
    }

    #[tokio::test]
    async fn expiry_is_a_resolution_too() {
        let (_dir, r, seen) = observed(Duration::from_millis(100));
        let v = r.create(new_review()).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while seen.lock().unwrap().len() < 2 {
            assert!(Instant::now() < deadline, "the sweeper expires it");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            seen.lock().unwrap()[1],
            (ReviewEvent::Resolved, v.review_id, ReviewStatus::Expired)
        );
    }
}
