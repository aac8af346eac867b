//! How connections to the shared `verdict.db` wait for its write lock.
//!
//! The audit log, reviews and batch jobs write to one SQLite file, so they
//! take turns at its single write lock. SQLite's own busy handler
//! (`busy_timeout`) backs off to sleeps of up to 100 ms, so a connection
//! that loses the lock once may sleep through every gap between another's
//! short transactions (a large batch submit stores its items in many).
//! These handlers poll at a fixed short interval instead, up to a limit,
//! so whoever waits gets the first gap. A decision waits on the audit
//! writer's and a held call on the review store's; batch jobs wait longest.

use std::time::Duration;

/// Polls every `every` until `limit` has passed (in attempts × `every`).
fn poll(attempts: i32, every: Duration, limit: Duration) -> bool {
    let attempts = u32::try_from(attempts).unwrap_or(0);
    if every.saturating_mul(attempts) >= limit {
        return false;
    }
    std::thread::sleep(every);
    true
}

/// For connections a decision or a held call waits on (the audit writer,
/// the review store): every 200 µs, for up to 5 s.
pub(crate) fn busy_decision_path(attempts: i32) -> bool {
    poll(attempts, Duration::from_micros(200), Duration::from_secs(5))
}

/// For batch jobs: every 1 ms, for up to 10 s.
pub(crate) fn busy_background(attempts: i32) -> bool {
    poll(attempts, Duration::from_millis(1), Duration::from_secs(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_until_the_limit() {
        let every = Duration::from_micros(1);
        assert!(poll(0, every, Duration::from_micros(3)));
        assert!(poll(2, every, Duration::from_micros(3)));
        assert!(!poll(3, every, Duration::from_micros(3)));
        assert!(!poll(i32::MAX, every, Duration::from_secs(1)));
        // A negative count (SQLite never passes one) counts as zero.
        assert!(poll(-1, every, Duration::from_micros(3)));
    }
}
