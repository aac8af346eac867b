//! Hot reload: watch a directory (or one file) and react to changes after a
//! short debounce.
//!
//! We watch the *directory*, never the file: editors and `kubectl` replace
//! files by writing a temp file and renaming it over the old one, and a watch
//! on the old inode would go quiet after the first save. Events are debounced
//! (~200 ms) so that one save, which is several events, causes one reload.
//! The callback runs on the debouncer's own thread, so the blocking file IO of
//! a reload never runs on the async runtime.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode};
use notify_debouncer_full::{new_debouncer, DebounceEventResult, Debouncer, RecommendedCache};

use super::store::{PolicyStore, ReloadOutcome};

/// How long events settle before a reload.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(200);

/// The watch could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot watch {path}: {source}")]
    Notify { path: String, source: notify::Error },
}

/// Keeps a watch alive; dropping it stops the watch.
pub struct WatchHandle {
    _debouncer: Debouncer<notify::RecommendedWatcher, RecommendedCache>,
}

impl std::fmt::Debug for WatchHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WatchHandle")
    }
}

/// Calls `on_change` (on a background thread) after changes settle for
/// `debounce`.
///
/// - `path` is a directory: any create, modify, remove or rename of an
///   entry in it (not recursive).
/// - `path` is a file: its parent directory is watched and only events that
///   name the file, or a Kubernetes `..data`-style entry, count, so atomic
///   renames over it, writes in place and a Secret's symlink swap are seen
///   (use this for the keys file and the TLS certificate and key).
///
/// Reads (open/close events) never count, so a callback that reads the
/// watched files does not trigger itself.
pub fn watch_path(
    path: &Path,
    debounce: Duration,
    mut on_change: impl FnMut() + Send + 'static,
) -> Result<WatchHandle, WatchError> {
    let err = |source| WatchError::Notify {
        path: path.display().to_string(),
        source,
    };
    let (watch_dir, only): (PathBuf, Option<std::ffi::OsString>) = if path.is_dir() {
        (path.to_path_buf(), None)
    } else {
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        (parent, path.file_name().map(|n| n.to_os_string()))
    };
    let mut debouncer =
        new_debouncer(
            debounce,
            None,
            move |result: DebounceEventResult| match result {
                Ok(events) => {
                    // Kubernetes mounts a Secret or ConfigMap as
                    // `name -> ..data/name` and updates it by swapping the
                    // `..data` symlink to a new `..<timestamp>` directory:
                    // those events name `..data`, never the file.
                    let relevant = events.iter().any(|ev| {
                        !matches!(ev.kind, EventKind::Access(_))
                            && only.as_ref().is_none_or(|name| {
                                ev.paths.iter().any(|p| {
                                    p.file_name().is_some_and(|f| {
                                        f == name.as_os_str()
                                            || f.to_str().is_some_and(|f| f.starts_with(".."))
                                    })
                                })
                            })
                    });
                    if relevant {
                        on_change();
                    }
                }
                Err(errors) => {
                    for e in errors {
                        tracing::warn!(error = %e, "file watch error");
                    }
                }
            },
        )
        .map_err(err)?;
    debouncer
        .watch(&watch_dir, RecursiveMode::NonRecursive)
        .map_err(err)?;
    Ok(WatchHandle {
        _debouncer: debouncer,
    })
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
    let reload = move || {
        let outcome = store.reload();
        log_outcome(&outcome);
        let f = on_reload.lock().unwrap_or_else(|e| e.into_inner());
        f(outcome);
    };
    let reload = Arc::new(reload);
    let r = reload.clone();
    let handle = watch_path(&dir, DEFAULT_DEBOUNCE, move || r())?;
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
            match watch_path(&dir, DEFAULT_DEBOUNCE, move || r()) {
                Ok(h) => {
                    tracing::info!(dir = %dir.display(), "policy directory is back; watching it again");
                    handle = h;
                    let r = reload.clone();
                    let _ = tokio::task::spawn_blocking(move || r()).await;
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

    #[test]
    fn watch_single_file_ignores_siblings() {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys.toml");
        std::fs::write(&keys, "a").unwrap();
        let (tx, rx) = mpsc::channel();
        let _h = watch_path(&keys, Duration::from_millis(50), move || {
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
