//! Hot reload: watch a directory (or one file) and react to changes as soon
//! as a write has ended.
//!
//! We watch the *directory*, never the file: editors and `kubectl` replace
//! files by writing a temp file and renaming it over the old one, and a watch
//! on the old inode would go quiet after the first save. A burst of events
//! (one save is several) is collected until it has been quiet for a few
//! milliseconds, then judged: on Linux, a change counts only once it is
//! finished (a file closed after writing, a rename into place, a removal, a
//! Kubernetes `..data` swap) and no other watched file is still being
//! written, so a file is never read half way and nothing waits on a timer
//! (a write left open for 2 s counts as a change that must settle); elsewhere, where the watcher reports
//! no close events, any change counts and the reader waits for the files to
//! settle first. The callback runs on the watch's own thread, so the
//! blocking file IO of a reload never runs on the async runtime.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind};
use notify::{Event, EventKind, RecursiveMode, Watcher};

use super::live::{PolicyStore, ReloadOutcome};

/// The quiet time that ends a burst of events.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(5);

/// A burst is judged after this long even if it has not gone quiet (a file
/// written without pause).
const MAX_BURST: Duration = Duration::from_millis(50);

/// Whether this platform's watcher reports a file closed after writing
/// (inotify's `IN_CLOSE_WRITE`): then a write in progress is never read.
const SEES_WRITE_ENDS: bool = cfg!(any(target_os = "linux", target_os = "android"));

/// Where write ends are not seen, the quiet time that ends a burst, and
/// its limit: a writer that pauses shorter than this is not read half way.
const UNSEEN_QUIET: Duration = Duration::from_millis(200);
const UNSEEN_MAX_BURST: Duration = Duration::from_secs(2);

/// What a burst of events came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Every write it saw has ended: the files may be read at once.
    Ended,
    /// Something changed, but the watcher cannot tell whether a write is
    /// still under way: wait for the files to settle before reading.
    Unsettled,
}

/// The watch could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot watch {path}: {source}")]
    Notify { path: String, source: notify::Error },
    #[error("cannot start the watch thread for {path}: {source}")]
    Thread {
        path: String,
        source: std::io::Error,
    },
}

/// Keeps a watch alive; dropping it stops the watch (and its thread, which
/// sees the watcher's channel close).
pub struct WatchHandle {
    _watcher: notify::RecommendedWatcher,
}

impl std::fmt::Debug for WatchHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WatchHandle")
    }
}

/// Calls `on_change` (on a background thread) after each burst of events
/// that changed something, once the burst has been quiet for `debounce`.
///
/// - `path` is a directory: any entry in it (not recursive).
/// - `path` is a file: its parent directory is watched and only events that
///   name the file, or a Kubernetes `..data`-style entry, count, so atomic
///   renames over it, writes in place and a Secret's symlink swap are seen
///   (use this for the keys file and the TLS certificate and key).
///
/// Reads (open and close-after-read events) never count, so a callback that
/// reads the watched files does not trigger itself.
pub fn watch_path(
    path: &Path,
    debounce: Duration,
    mut on_change: impl FnMut(Change) + Send + 'static,
) -> Result<WatchHandle, WatchError> {
    let shown = path.display().to_string();
    let (watch_dir, only): (PathBuf, Option<std::ffi::OsString>) = if path.is_dir() {
        (path.to_path_buf(), None)
    } else {
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        (parent, path.file_name().map(|n| n.to_os_string()))
    };
    let (tx, rx) = mpsc::channel::<notify::Result<Event>>();
    let mut watcher = notify::recommended_watcher(tx).map_err(|source| WatchError::Notify {
        path: shown.clone(),
        source,
    })?;
    watcher
        .watch(&watch_dir, RecursiveMode::NonRecursive)
        .map_err(|source| WatchError::Notify {
            path: shown.clone(),
            source,
        })?;
    let (quiet, max_burst) = if SEES_WRITE_ENDS {
        (debounce, MAX_BURST.max(debounce))
    } else {
        (debounce.max(UNSEEN_QUIET), UNSEEN_MAX_BURST)
    };
    std::thread::Builder::new()
        .name("verdict-watch".into())
        .spawn(move || {
            // Files whose write has begun and not yet ended (kept across
            // bursts), and since when.
            let mut open: Open = HashMap::new();
            loop {
                // While a write is open, wait for it at most `OPEN_LIMIT`:
                // a writer that never closes (or an event lost) then counts
                // as a change that must settle.
                let first = match open.values().min() {
                    None => match rx.recv() {
                        Ok(ev) => ev,
                        // The watcher (and with it the sender) was dropped.
                        Err(_) => return,
                    },
                    Some(since) => {
                        let left = OPEN_LIMIT.saturating_sub(since.elapsed());
                        match rx.recv_timeout(left) {
                            Ok(ev) => ev,
                            Err(mpsc::RecvTimeoutError::Timeout) => {
                                open.clear();
                                on_change(Change::Unsettled);
                                continue;
                            }
                            Err(mpsc::RecvTimeoutError::Disconnected) => return,
                        }
                    }
                };
                let started = Instant::now();
                let mut burst = vec![first];
                while started.elapsed() < max_burst {
                    match rx.recv_timeout(quiet) {
                        Ok(ev) => burst.push(ev),
                        Err(mpsc::RecvTimeoutError::Timeout) => break,
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
                if let Some(change) = judge(&burst, only.as_deref(), SEES_WRITE_ENDS, &mut open) {
                    on_change(change);
                }
            }
        })
        .map_err(|source| WatchError::Thread {
            path: shown,
            source,
        })?;
    Ok(WatchHandle { _watcher: watcher })
}

/// Files being written: path → when the first write of it was seen.
type Open = HashMap<PathBuf, Instant>;

/// How long a write may stay open before the watch stops waiting for its
/// end and reports the change as [`Change::Unsettled`].
const OPEN_LIMIT: Duration = Duration::from_secs(2);

/// What a burst means, given the writes still `open` from earlier bursts
/// (updated here). `None` when nothing in it changed a watched entry, or,
/// where write ends are seen, while any watched file is still being
/// written: a directory is read only when every write in it has ended.
fn judge(
    burst: &[notify::Result<Event>],
    only: Option<&std::ffi::OsStr>,
    sees_write_ends: bool,
    open: &mut Open,
) -> Option<Change> {
    let mut change = None;
    for ev in burst {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!(error = %e, "file watch error");
                continue;
            }
        };
        // Events were lost (the kernel's queue overflowed): read, settled.
        if ev.need_rescan() {
            change = Some(Change::Unsettled);
            continue;
        }
        // Kubernetes mounts a Secret or ConfigMap as `name -> ..data/name`
        // and updates it by swapping the `..data` symlink to a new
        // `..<timestamp>` directory: those events name `..data`, never the
        // file.
        let named = only.is_none_or(|name| {
            ev.paths.iter().any(|p| {
                p.file_name()
                    .is_some_and(|f| f == name || f.to_str().is_some_and(|f| f.starts_with("..")))
            })
        });
        if !named {
            continue;
        }
        let ended = match ev.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
            // Reads, and opens (a write has not begun, or has not ended).
            EventKind::Access(_) => continue,
            EventKind::Modify(ModifyKind::Name(_)) | EventKind::Remove(_) => true,
            EventKind::Create(CreateKind::Folder) => true,
            // A symlink appears whole; a regular file is written after it
            // is created, and counts when it is closed.
            EventKind::Create(_) => ev
                .paths
                .iter()
                .any(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())),
            _ => false,
        };
        if !sees_write_ends {
            // A rename or removal is whole; anything else may be a write
            // under way, which only settling tells.
            change = match (ended, change) {
                (true, None) => Some(Change::Ended),
                (true, c) => c,
                (false, _) => Some(Change::Unsettled),
            };
            continue;
        }
        for p in &ev.paths {
            if ended {
                open.remove(p);
            } else {
                open.entry(p.clone()).or_insert_with(Instant::now);
            }
        }
        if ended && change.is_none() {
            change = Some(Change::Ended);
        }
    }
    // Where write ends are seen, a write still open holds every reload back
    // (the one that ends it brings the change along).
    if sees_write_ends && !open.is_empty() && change == Some(Change::Ended) {
        return None;
    }
    change
}

/// How often the watcher checks that the watched directory is still the one
/// it watches. A watch dies with its directory, so a directory that is
/// deleted and created again would otherwise never be reloaded.
pub const REWATCH_INTERVAL: Duration = Duration::from_secs(1);

/// Watches the store's directory and reloads it on every change until
/// `shutdown` resolves. Every outcome is logged (`file:line:col` for each
/// error) and passed to `on_reload` for the audit record and metrics.
///
/// If the directory is removed, the reload that follows fails and the last
/// good set keeps serving. When a directory appears again at the same path,
/// it is watched afresh and reloaded, so the store recovers without a
/// restart.
///
/// Must be called inside a Tokio runtime. The watch is set up before this
/// returns, so a setup failure is reported to the caller.
pub fn spawn_watcher(
    store: Arc<PolicyStore>,
    on_reload: impl Fn(ReloadOutcome) + Send + 'static,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<tokio::task::JoinHandle<()>, WatchError> {
    let dir = store.dir().to_path_buf();
    // std `Mutex`: only so that the debouncer thread and a re-watch reload
    // can share one callback; held for one reload, never across an `.await`.
    let on_reload = Arc::new(std::sync::Mutex::new(on_reload));
    let reload = move |change: Change| {
        let outcome = match change {
            Change::Ended => store.reload_now(),
            Change::Unsettled => store.reload(),
        };
        log_outcome(&outcome);
        let f = on_reload.lock().unwrap_or_else(|e| e.into_inner());
        f(outcome);
    };
    let reload = Arc::new(reload);
    let r = reload.clone();
    let handle = watch_path(&dir, DEFAULT_DEBOUNCE, move |c| r(c))?;
    Ok(tokio::spawn(async move {
        let mut handle = handle;
        let mut watched = dir_identity(&dir).await;
        let mut tick = tokio::time::interval(REWATCH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tick.tick() => {}
            }
            let now = dir_identity(&dir).await;
            if now == watched {
                continue;
            }
            watched = now;
            if now.is_none() {
                continue;
            }
            let r = reload.clone();
            match watch_path(&dir, DEFAULT_DEBOUNCE, move |c| r(c)) {
                Ok(h) => {
                    tracing::info!(dir = %dir.display(), "policy directory is back; watching it again");
                    handle = h;
                    let r = reload.clone();
                    let _ = tokio::task::spawn_blocking(move || r(Change::Unsettled)).await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch the policy directory again");
                    // Try again at the next tick.
                    watched = None;
                }
            }
        }
        drop(handle);
    }))
}

/// Which directory is at `dir` right now: `None` when there is none.
///
/// (device, inode, birth time) on Unix, so a directory deleted and made
/// again between two checks still counts as new, even when the file system
/// hands the new one the old inode number (ext4 and tmpfs do).
async fn dir_identity(dir: &Path) -> Option<DirIdentity> {
    let m = tokio::fs::metadata(dir).await.ok()?;
    if !m.is_dir() {
        return None;
    }
    let born = m.created().ok();
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some((m.dev(), m.ino(), born))
    }
    #[cfg(not(unix))]
    {
        Some((0, 0, born))
    }
}

type DirIdentity = (u64, u64, Option<std::time::SystemTime>);

fn log_outcome(outcome: &ReloadOutcome) {
    match outcome {
        ReloadOutcome::Applied {
            previous_revision,
            revision,
            actions,
            routes,
            ..
        } => tracing::info!(
            %previous_revision, %revision, actions, routes,
            "policy reload applied"
        ),
        ReloadOutcome::Unchanged { revision } => {
            tracing::debug!(%revision, "policy files unchanged")
        }
        ReloadOutcome::Rejected {
            kept_revision,
            errors,
        } => {
            for e in errors {
                tracing::error!(error = %e, "policy error");
            }
            tracing::warn!(
                %kept_revision, errors = errors.len(),
                "policy reload rejected; keeping the previous set"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Instant;

    const GOOD_A: &str = "[[action]]\ntype = \"a\"\n";
    const GOOD_B: &str = "[[action]]\ntype = \"b\"\n";

    /// Waits for an outcome matching `want`, skipping others, for at most
    /// `limit`.
    fn wait_for(
        rx: &mpsc::Receiver<ReloadOutcome>,
        limit: Duration,
        want: impl Fn(&ReloadOutcome) -> bool,
    ) -> Option<ReloadOutcome> {
        let deadline = Instant::now() + limit;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(o) if want(&o) => return Some(o),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
        None
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn bad_edit_is_kept_out_and_atomic_rename_applies() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.toml");
        std::fs::write(&file, GOOD_A).unwrap();
        let store = Arc::new(PolicyStore::open(dir.path()).unwrap());
        let first = store.load_full().revision.clone();

        let (tx, rx) = mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = spawn_watcher(
            store.clone(),
            move |o| {
                let _ = tx.send(o);
            },
            async move {
                let _ = stop_rx.await;
            },
        )
        .unwrap();

        // A broken edit: rejected, old set kept, error has file:line:col.
        // Renamed into place so no reload can see a half-written file.
        let tmp = dir.path().join(".p.toml.tmp");
        std::fs::write(&tmp, "[[action]]\ntype = \"a\"\nbogus = 1\n").unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        let rejected = tokio::task::spawn_blocking(move || {
            let o = wait_for(&rx, Duration::from_secs(5), |o| {
                matches!(o, ReloadOutcome::Rejected { .. })
            });
            (o, rx)
        })
        .await
        .unwrap();
        let (outcome, rx) = rejected;
        let Some(ReloadOutcome::Rejected { errors, .. }) = outcome else {
            panic!("no rejection reported");
        };
        assert!(
            errors[0].to_string().contains("p.toml:3:1: "),
            "{}",
            errors[0]
        );
        assert_eq!(store.load_full().revision, first);
        assert!(store.status().degraded);

        // A good file written elsewhere and renamed into place, as editors do.
        std::fs::write(&tmp, GOOD_B).unwrap();
        let started = Instant::now();
        std::fs::rename(&tmp, &file).unwrap();
        let (outcome, _rx) = tokio::task::spawn_blocking(move || {
            let o = wait_for(&rx, Duration::from_secs(5), |o| {
                matches!(o, ReloadOutcome::Applied { .. })
            });
            (o, rx)
        })
        .await
        .unwrap();
        assert!(outcome.is_some(), "no reload after rename");
        // The brief asks for ~1 s; allow slack for a loaded CI machine.
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        let now = store.load_full();
        assert!(now.action("b").is_some());
        assert!(!store.status().degraded);

        stop_tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }

    fn ev(kind: EventKind, path: &Path) -> Event {
        Event::new(kind).add_path(path.to_path_buf())
    }

    /// Where write ends are seen, a burst counts once a write has ended
    /// (close after write, rename, removal, a symlink or directory made),
    /// never while one is under way; elsewhere any change counts, unsettled.
    #[test]
    fn a_burst_counts_when_its_writes_have_ended() {
        use notify::event::{DataChange, RemoveKind, RenameMode};
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.toml");
        std::fs::write(&file, GOOD_A).unwrap();
        let link = dir.path().join("..data");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let writing = ev(EventKind::Modify(ModifyKind::Data(DataChange::Any)), &file);
        let opened = ev(
            EventKind::Access(AccessKind::Open(AccessMode::Write)),
            &file,
        );
        let closed = ev(
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            &file,
        );
        let read = ev(
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            &file,
        );
        let created = ev(EventKind::Create(CreateKind::File), &file);
        let renamed = ev(EventKind::Modify(ModifyKind::Name(RenameMode::To)), &file);
        let removed = ev(EventKind::Remove(RemoveKind::File), &file);
        let linked = ev(EventKind::Create(CreateKind::File), &link);
        let cases: Vec<(Vec<&Event>, Option<Change>, Option<Change>)> = vec![
            // (burst, where write ends are seen, where they are not)
            (vec![&opened, &writing], None, Some(Change::Unsettled)),
            (vec![&created, &writing], None, Some(Change::Unsettled)),
            (
                vec![&writing, &closed],
                Some(Change::Ended),
                Some(Change::Unsettled),
            ),
            (vec![&read], None, None),
            (vec![&renamed], Some(Change::Ended), Some(Change::Ended)),
            (vec![&removed], Some(Change::Ended), Some(Change::Ended)),
            (vec![&linked], Some(Change::Ended), Some(Change::Ended)),
        ];
        for (burst, seen, unseen) in cases {
            let burst: Vec<notify::Result<Event>> =
                burst.into_iter().map(|e| Ok(e.clone())).collect();
            assert_eq!(
                judge(&burst, None, true, &mut Open::new()),
                seen,
                "{burst:?}"
            );
            assert_eq!(
                judge(&burst, None, false, &mut Open::new()),
                unseen,
                "{burst:?}"
            );
        }
        // One file closed while another is still being written: nothing is
        // read until that one is closed too, in a later burst.
        let other = dir.path().join("q.toml");
        let writing_other = ev(EventKind::Modify(ModifyKind::Data(DataChange::Any)), &other);
        let closed_other = ev(
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            &other,
        );
        let mut open = Open::new();
        let burst = [Ok(closed.clone()), Ok(writing_other)];
        assert_eq!(judge(&burst, None, true, &mut open), None);
        assert_eq!(open.len(), 1);
        assert_eq!(
            judge(&[Ok(closed_other)], None, true, &mut open),
            Some(Change::Ended)
        );
        assert!(open.is_empty());
        // Lost events: read, after the files settle.
        let rescan = Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan);
        assert_eq!(
            judge(&[Ok(rescan)], None, true, &mut Open::new()),
            Some(Change::Unsettled)
        );
        // A watch of one file ignores its siblings' writes.
        let sibling = ev(
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            &dir.path().join("other.toml"),
        );
        let only = Some(std::ffi::OsStr::new("p.toml"));
        assert_eq!(judge(&[Ok(sibling)], only, true, &mut Open::new()), None);
    }

    #[test]
    fn watch_single_file_ignores_siblings() {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys.toml");
        std::fs::write(&keys, "a").unwrap();
        let (tx, rx) = mpsc::channel();
        let _h = watch_path(&keys, Duration::from_millis(50), move |_| {
            let _ = tx.send(());
        })
        .unwrap();
        std::fs::write(dir.path().join("other.toml"), "x").unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(600)).is_err());
        let tmp = dir.path().join("keys.tmp");
        std::fs::write(&tmp, "b").unwrap();
        std::fs::rename(&tmp, &keys).unwrap();
        assert!(rx.recv_timeout(Duration::from_secs(5)).is_ok());
    }
}
