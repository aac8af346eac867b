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

/// Creates the database file at `path` readable by its owner only (0600)
/// when it does not exist yet, and narrows an existing one to 0600. SQLite
/// gives the `-wal` and `-shm` files it creates the main file's mode, so
/// they are private too. The database holds decisions, held requests and
/// job inputs: no other local user has a reason to read it.
pub(crate) fn create_private(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            for p in [
                path.to_path_buf(),
                wal_sibling(path, "-wal"),
                wal_sibling(path, "-shm"),
            ] {
                match std::fs::metadata(&p) {
                    Ok(m) if m.permissions().mode() & 0o077 != 0 => {
                        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))?;
                    }
                    _ => {}
                }
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

fn wal_sibling(path: &std::path::Path, suffix: &str) -> std::path::PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    std::path::PathBuf::from(s)
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
