//! The review subsystem's shared state at work: waking the callers that wait
//! on a review, counting resolutions, and the bookkeeping that follows each
//! commit.

use super::*;

impl Inner {
    /// Bookkeeping after a new review is stored.
    pub(super) fn created(&self, row: &Row) {
        {
            let mut pending = lock(&self.pending);
            pending.insert((row.created_at, row.review_id.clone()));
            self.metrics.held.set(gauge_value(pending.len()));
        }
        // The new deadline may be the next one.
        self.sweeper.notify_one();
        tracing::info!(review_id = %row.review_id, owner = %row.owner, route = %row.route, "request held for review");
        self.tell(ReviewEvent::Held, row);
    }

    /// Bookkeeping after a review left `pending` (resolved or expired):
    /// health, metrics, and waking its waiters.
    pub(super) fn resolved(&self, row: &Row) {
        let Some(resolution) = Resolution::of(row.status) else {
            return;
        };
        let (attended, was_pending) = self.deliver(row, resolution);
        self.metrics
            .resolutions
            .get_or_create(&OutcomeLabels {
                outcome: row.status.as_str().to_string(),
            })
            .inc();
        if let Some(at) = row.resolved_at {
            let held = at.duration_since(row.created_at).unwrap_or_default();
            self.metrics.hold_duration.observe(held.as_secs_f64());
        }
        // Another replica's held call is that replica's to forward (it is
        // told by NOTIFY); the claim would refuse this one anyway. And only
        // the first bookkeeping of a resolution here decides: this
        // replica's own NOTIFY can reach `resolved_elsewhere` before this
        // runs, which then delivered it already. A record-only review has
        // nothing to forward.
        if resolution.is_approved() && row.forwards && !attended && was_pending && self.holds(row) {
            self.unattended(&row.review_id);
        }
        self.tell(ReviewEvent::Resolved, row);
    }

    /// Takes a resolved review out of the pending ones and sends the
    /// resolution to its waiters, as one step under the `waiters` lock (a
    /// waiter that reads the store checks both under it too, see
    /// `Subscription::read_from_store`). Returns whether a waiter owns the
    /// resolution (it got it, or read it from the store first), and
    /// whether the review was pending here.
    pub(super) fn deliver(&self, row: &Row, resolution: Resolution) -> (bool, bool) {
        // Lock order: `waiters`, then `pending`, then `taken`.
        let waiters = lock(&self.waiters);
        let was_pending = {
            let mut pending = lock(&self.pending);
            let was = pending.remove(&(row.created_at, row.review_id.clone()));
            self.metrics.held.set(gauge_value(pending.len()));
            was
        };
        let attended = match waiters.get(&row.review_id) {
            Some(tx) if tx.receiver_count() > 0 => {
                tx.send_replace(Some(resolution));
                // A mark left by a waiter that read the store is spent.
                lock(&self.taken).remove(&row.review_id);
                true
            }
            _ => lock(&self.taken).remove(&row.review_id),
        };
        (attended, was_pending)
    }

    /// Bookkeeping after a review this replica holds was resolved on
    /// another replica: the same as [`Inner::resolved`] but for the webhook
    /// and the resolution metrics, which the resolving replica did.
    pub(super) fn resolved_elsewhere(&self, row: &Row) {
        let Some(resolution) = Resolution::of(row.status) else {
            return;
        };
        let (attended, was_pending) = self.deliver(row, resolution);
        if was_pending && resolution.is_approved() && row.forwards && !attended && self.holds(row) {
            self.unattended(&row.review_id);
        }
    }

    /// Whether this replica holds the review's call (always, without a
    /// shared store).
    pub(super) fn holds(&self, row: &Row) -> bool {
        match (&self.shared, &row.replica) {
            (Some(shared), Some(replica)) => replica == shared.replica(),
            _ => true,
        }
    }

    /// Queues an approval that no held connection will forward.
    pub(super) fn unattended(&self, review_id: &str) {
        tracing::debug!(
            review_id,
            "approved with no held connection waiting: queued for the background forwarder"
        );
        // Fails only when the receiver was dropped: then nobody forwards in
        // the background, and `approved_unforwarded` still lists it.
        let _ = self.unattended_tx.send(review_id.to_string());
    }
}
