//! The review subsystem's background tasks: the expiry sweeper, and with a
//! shared store the follower that learns of other replicas' resolutions and
//! takes over what replicas that are gone left.

use super::*;

/// The expiry sweeper: expires every pending review at its deadline and
/// wakes its waiters, then sleeps until the next deadline (or a new review).
/// Holds only a `Weak`, so it stops once every [`Reviews`] is dropped.
pub(super) async fn sweep(inner: Weak<Inner>, wake: Arc<Notify>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        // Not in the middle of a resolution (see `resolution_turn`), on
        // any replica.
        let turn = match Turn::take(&strong).await {
            Ok(turn) => Some(turn),
            Err(e) => {
                tracing::warn!(error = %e, "review expiry sweep cannot take its turn");
                *lock(&strong.last_sweep_error) = Some(e.to_string());
                None
            }
        };
        let Some(turn) = turn else {
            drop(strong);
            tokio::select! {
                () = tokio::time::sleep(SWEEP_RETRY) => {}
                () = wake.notified() => {}
            }
            continue;
        };
        let swept = on_store(&strong, |s, inner| {
            let now = SystemTime::now();
            let (expired, next) = s.expire_due(now)?;
            for row in &expired {
                tracing::info!(review_id = %row.review_id, "review expired");
                inner.resolved(row);
            }
            // Retention, in bounded batches so a large backlog never holds
            // the store for long; what is left goes on the next run.
            let retention = Duration::from_millis(inner.retention_ms.load(Ordering::Relaxed));
            let mut purged = 0;
            if let Some(before) = now.checked_sub(retention) {
                purged = s.purge_resolved(before, PURGE_BATCH)?;
                if purged > 0 {
                    tracing::info!(purged, "deleted reviews past review.retention");
                }
            }
            inner.stored.store(s.count()?, Ordering::Relaxed);
            // A full batch: come back soon for the rest.
            Ok(if purged == PURGE_BATCH {
                Some(now)
            } else {
                next
            })
        })
        .await;
        drop(turn);
        let pause = match swept {
            Ok(next) => {
                *lock(&strong.last_sweep_error) = None;
                next.map_or(MAX_SWEEP_INTERVAL, |t| {
                    t.duration_since(SystemTime::now())
                        .unwrap_or_default()
                        .min(MAX_SWEEP_INTERVAL)
                })
            }
            Err(e) => {
                tracing::warn!(error = %e, "review expiry sweep failed");
                *lock(&strong.last_sweep_error) = Some(e.to_string());
                SWEEP_RETRY
            }
        };
        // Resolved reviews wait for their retention: with a short one, come
        // back within it (never more often than every 100 ms).
        let resolved_stored = strong.stored.load(Ordering::Relaxed)
            > u64::try_from(lock(&strong.pending).len()).unwrap_or(u64::MAX);
        let retention = Duration::from_millis(strong.retention_ms.load(Ordering::Relaxed));
        let pause = if resolved_stored {
            pause.min(retention.max(Duration::from_millis(100)))
        } else {
            pause
        };
        drop(strong);
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = wake.notified() => {}
        }
    }
}

/// With a shared store: learns of resolutions made on other replicas (by
/// `NOTIFY`, and by polling this replica's pending reviews every second in
/// case a notification was lost), and every third of the lease takes over
/// what replicas that are gone left: their forwards in flight become
/// `outcome_unknown`, and their approved reviews go to this replica's
/// background forwarder (the claim lets only one replica have each).
pub(super) async fn follow_shared(
    inner: Weak<Inner>,
    mut notified: mpsc::UnboundedReceiver<String>,
    lease: Duration,
) {
    let mut poll = tokio::time::interval(Duration::from_secs(1));
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut takeover = tokio::time::interval(lease / 3);
    takeover.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Only reviews this replica holds (pending in its memory) or waits
        // on: the rest are other replicas' business.
        let ids: Vec<String> = tokio::select! {
            id = notified.recv() => {
                let Some(id) = id else { return };
                let Some(strong) = inner.upgrade() else { return };
                let waiters = lock(&strong.waiters);
                let ours = waiters.contains_key(&id)
                    || lock(&strong.pending).iter().any(|(_, p)| *p == id);
                if !ours {
                    continue;
                }
                vec![id]
            }
            _ = poll.tick() => {
                let Some(strong) = inner.upgrade() else { return };
                let waiters = lock(&strong.waiters);
                let mut ids: BTreeSet<String> =
                    lock(&strong.pending).iter().map(|(_, id)| id.clone()).collect();
                ids.extend(waiters.keys().cloned());
                ids.into_iter().collect()
            }
            _ = takeover.tick() => {
                let Some(strong) = inner.upgrade() else { return };
                let taken = on_store(&strong, |s, inner| {
                    for review_id in s.recover_lapsed()? {
                        tracing::warn!(review_id, "forward was in flight on a replica that is gone: outcome unknown, not retried");
                    }
                    for review_id in s.orphaned_approvals()? {
                        inner.unattended(&review_id);
                    }
                    Ok(())
                })
                .await;
                if let Err(e) = taken {
                    tracing::warn!(error = %e, "cannot take over the reviews of replicas that are gone");
                }
                continue;
            }
        };
        let Some(strong) = inner.upgrade() else {
            return;
        };
        if ids.is_empty() {
            continue;
        }
        let followed = on_store(&strong, move |s, inner| {
            for row in s.resolved_among(&ids)? {
                inner.resolved_elsewhere(&row);
            }
            Ok(())
        })
        .await;
        if let Err(e) = followed {
            tracing::warn!(error = %e, "cannot read reviews resolved on another replica");
        }
    }
}
