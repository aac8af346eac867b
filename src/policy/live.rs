//! The live policy set: an `ArcSwap` that requests read without locking, and
//! a reload that swaps in a new set only when the whole directory is valid.
//!
//! Each request takes **one** snapshot with [`PolicyStore::load_full`] and
//! uses it for every phase, so a reload in the middle of a request can never
//! mix two revisions. A broken edit keeps the previous set, marks the store
//! `degraded` and records the error for `/health/detailed`; the next good
//! reload clears it.
//!
//! A valid set can still open the gate, so a reload is also refused when it
//! would leave nothing gated where the live set gated something (unless the
//! files say `[set] allow_empty = true`), or when it would drop a route
//! marked `pinned`. Dropping any other route applies, but keeps the store
//! `degraded` until a reload acknowledges it (`[set] removed_routes`). The
//! watcher reloads when a write has ended (`reload_now`); where it cannot
//! tell, a reload first waits for the files to stop changing (`reload`), so
//! a truncate-then-write edit is read once it is whole.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;

use super::{load_dir, PolicyError, PolicySet};

/// The live set plus what happened at the last reload.
#[derive(Debug)]
pub struct PolicyStore {
    dir: PathBuf,
    current: ArcSwap<PolicySet>,
    /// std `Mutex`: held only to copy or update a few fields, never across
    /// IO or an `.await`.
    status: Mutex<ReloadStatus>,
    /// Serialises reloads so that two overlapping ones (watcher and a manual
    /// trigger) cannot swap in an older directory state after a newer one.
    reloading: Mutex<()>,
}

/// Reload bookkeeping for health and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadStatus {
    /// When the last reload attempt finished (not set by the initial load).
    pub last_reload_at: Option<SystemTime>,
    /// Every error of the last failed reload, one `file:line:col: message`
    /// per line; cleared by the next successful one.
    pub last_error: Option<String>,
    /// True while the directory on disk is broken and an older set serves.
    pub degraded: bool,
    pub reloads_ok: u64,
    pub reloads_failed: u64,
    /// Routes that a reload removed and no later reload acknowledged with
    /// `[set] removed_routes`; the store reports `degraded` while any is
    /// left.
    pub unacknowledged_removals: Vec<String>,
}

/// The result of one reload, for the caller's audit record and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// A new set is live.
    Applied {
        previous_revision: String,
        revision: String,
        files: Vec<String>,
        actions: usize,
        routes: usize,
        /// Routes (by name) the live set had and the new one does not.
        removed_routes: Vec<String>,
    },
    /// The directory is valid and identical to the live set; nothing swapped.
    Unchanged { revision: String },
    /// The directory is invalid; the previous set stays live.
    Rejected {
        kept_revision: String,
        errors: Vec<PolicyError>,
    },
}

// === impl PolicyStore ===

impl PolicyStore {
    /// Loads `dir` for the first time. Failure here is fatal for `serve`.
    pub fn open(dir: impl Into<PathBuf>) -> Result<PolicyStore, Vec<PolicyError>> {
        let dir = dir.into();
        let set = load_dir(&dir)?;
        Ok(PolicyStore::new(dir, set))
    }

    /// A store serving `set`, reloading from `dir`.
    pub fn new(dir: impl Into<PathBuf>, set: PolicySet) -> PolicyStore {
        PolicyStore {
            dir: dir.into(),
            current: ArcSwap::from_pointee(set),
            status: Mutex::new(ReloadStatus::default()),
            reloading: Mutex::new(()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The live set. Take it once per request and keep it for the request.
    pub fn load_full(&self) -> Arc<PolicySet> {
        self.current.load_full()
    }

    /// The live set for a look that ends before any `.await` (routing a
    /// request): no count taken on the set's `Arc`, which every proxy
    /// thread would otherwise move between their cores on each request.
    pub fn load(&self) -> arc_swap::Guard<Arc<PolicySet>> {
        self.current.load()
    }

    /// A copy of the reload bookkeeping.
    pub fn status(&self) -> ReloadStatus {
        lock(&self.status).clone()
    }

    /// Re-reads the directory once its files have stopped changing.
    /// Blocking file IO: call it from a blocking thread (the watcher does)
    /// or through `spawn_blocking`.
    pub fn reload(&self) -> ReloadOutcome {
        self.reload_after(true)
    }

    /// Re-reads the directory at once: for a watcher that saw every write
    /// end (a file closed after writing, a rename into place). A file that
    /// does not parse is rejected and the last good set kept until the next
    /// change.
    pub fn reload_now(&self) -> ReloadOutcome {
        self.reload_after(false)
    }

    fn reload_after(&self, settle: bool) -> ReloadOutcome {
        let _serial = lock(&self.reloading);
        if settle {
            wait_settled(&self.dir);
        }
        let result = load_dir(&self.dir);
        let old = self.current.load_full();
        let outcome = match result.and_then(|set| keeps_the_gate(&old, set)) {
            Ok(set) if set.revision == old.revision => ReloadOutcome::Unchanged {
                revision: set.revision,
            },
            Ok(set) => {
                let removed_routes: Vec<String> = old
                    .routes
                    .iter()
                    .filter(|r| !set.routes.iter().any(|n| n.name == r.name))
                    .map(|r| r.name.clone())
                    .collect();
                let outcome = ReloadOutcome::Applied {
                    previous_revision: old.revision.clone(),
                    revision: set.revision.clone(),
                    files: set.files.clone(),
                    actions: set.actions.len(),
                    routes: set.routes.len(),
                    removed_routes: removed_routes.clone(),
                };
                let mut st = lock(&self.status);
                let mut pending = std::mem::take(&mut st.unacknowledged_removals);
                pending.extend(removed_routes);
                pending.sort();
                pending.dedup();
                pending.retain(|name| {
                    !set.removed_routes.contains(name)
                        && !set.routes.iter().any(|r| &r.name == name)
                });
                st.unacknowledged_removals = pending;
                drop(st);
                self.current.store(Arc::new(set));
                outcome
            }
            Err(errors) => ReloadOutcome::Rejected {
                kept_revision: old.revision.clone(),
                errors,
            },
        };
        let mut st = lock(&self.status);
        st.last_reload_at = Some(SystemTime::now());
        match &outcome {
            ReloadOutcome::Applied { .. } | ReloadOutcome::Unchanged { .. } => {
                st.reloads_ok += 1;
                st.degraded = !st.unacknowledged_removals.is_empty();
                st.last_error = (!st.unacknowledged_removals.is_empty()).then(|| {
                    format!(
                        "gated routes removed without acknowledgement: {}; list them in [set] removed_routes to acknowledge",
                        st.unacknowledged_removals.join(", ")
                    )
                });
            }
            ReloadOutcome::Rejected { errors, .. } => {
                st.reloads_failed += 1;
                st.degraded = true;
                let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
                st.last_error = Some(lines.join("\n"));
            }
        }
        outcome
    }
}

/// Refuses a valid set that would open the gate: one that gates nothing
/// where the live set gated something (without `[set] allow_empty`), or one
/// that drops a pinned route or changes its method or path.
fn keeps_the_gate(old: &PolicySet, new: PolicySet) -> Result<PolicySet, Vec<PolicyError>> {
    let mut errors = Vec::new();
    let dir_error = |message: String| PolicyError::Io {
        path: "policies".into(),
        message,
    };
    if old.gates_anything() && !new.gates_anything() && !new.allow_empty {
        errors.push(dir_error(format!(
            "this reload would remove every action and route (the live set has {} and {}); a set that means to gate nothing says [set] allow_empty = true",
            plural(old.actions.len(), "action"),
            plural(old.routes.len(), "route"),
        )));
    }
    for pinned in old.routes.iter().filter(|r| r.pinned) {
        let kept = new
            .routes
            .iter()
            .any(|r| r.name == pinned.name && r.method == pinned.method && r.path == pinned.path);
        if !kept {
            errors.push(dir_error(format!(
                "route {:?} ({} {}, from {}) is pinned; this reload would remove it or change its method or path. Unpin it (pinned = false) in one reload, then change it",
                pinned.name, pinned.method, pinned.path, pinned.file
            )));
        }
    }
    if errors.is_empty() {
        Ok(new)
    } else {
        Err(errors)
    }
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// How long a reload waits at most for the files to stop changing.
const SETTLE_LIMIT: Duration = Duration::from_secs(2);
/// The quiet time that counts as settled.
const SETTLE_QUIET: Duration = Duration::from_millis(50);

/// Waits until the policy files' names, sizes and modification times are
/// the same twice, `SETTLE_QUIET` apart (at most `SETTLE_LIMIT`).
fn wait_settled(dir: &Path) {
    let snapshot = || -> Vec<(std::ffi::OsString, u64, Option<SystemTime>)> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut out: Vec<_> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_str().is_some_and(super::is_policy_file))
            .filter_map(|e| {
                let m = std::fs::metadata(e.path()).ok()?;
                Some((e.file_name(), m.len(), m.modified().ok()))
            })
            .collect();
        out.sort();
        out
    };
    let started = std::time::Instant::now();
    let mut last = snapshot();
    while started.elapsed() < SETTLE_LIMIT {
        std::thread::sleep(SETTLE_QUIET);
        let now = snapshot();
        if now == last {
            return;
        }
        last = now;
    }
}

/// Locks, ignoring poisoning: the guarded data is plain values that a panic
/// elsewhere cannot leave half-updated in a harmful way.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "[[action]]\ntype = \"a\"\n";
    const GOOD2: &str = "[[action]]\ntype = \"b\"\n";

    /// A store over a temp dir whose one file, `p.toml`, holds `text`; the
    /// dir lives as long as the returned guard.
    fn store_with(text: &str) -> (tempfile::TempDir, PathBuf, PolicyStore) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.toml");
        std::fs::write(&file, text).unwrap();
        let store = PolicyStore::open(dir.path()).unwrap();
        (dir, file, store)
    }

    /// The revision a reload that had to be rejected (`why`) kept, and its
    /// errors.
    fn rejected(outcome: ReloadOutcome, why: &str) -> (String, Vec<PolicyError>) {
        match outcome {
            ReloadOutcome::Rejected {
                kept_revision,
                errors,
            } => (kept_revision, errors),
            other => panic!("{why}, got {other:?}"),
        }
    }

    #[test]
    fn reload_applies_keeps_and_recovers() {
        let (_dir, file, store) = store_with(GOOD);
        let first = store.load_full();
        assert!(first.action("a").is_some());

        assert_eq!(
            store.reload(),
            ReloadOutcome::Unchanged {
                revision: first.revision.clone()
            }
        );

        std::fs::write(&file, "[[action]]\ntype = 5\n").unwrap();
        let (kept_revision, errors) = rejected(store.reload(), "bad file must be rejected");
        assert_eq!(kept_revision, first.revision);
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].to_string().contains("p.toml:2:8: "),
            "{}",
            errors[0]
        );
        // The old set still serves, and the status says why.
        assert!(Arc::ptr_eq(&store.load_full(), &first));
        let st = store.status();
        assert!(st.degraded);
        assert_eq!(st.reloads_failed, 1);
        assert_eq!(st.reloads_ok, 1);
        assert!(st.last_error.unwrap().contains("p.toml:2:8"));

        std::fs::write(&file, GOOD2).unwrap();
        let ReloadOutcome::Applied {
            previous_revision,
            revision,
            ..
        } = store.reload()
        else {
            panic!("good file must apply");
        };
        assert_eq!(previous_revision, first.revision);
        let now = store.load_full();
        assert_eq!(now.revision, revision);
        assert!(now.action("b").is_some() && now.action("a").is_none());
        // A snapshot taken before the swap is untouched.
        assert!(first.action("a").is_some());
        let st = store.status();
        assert!(!st.degraded && st.last_error.is_none() && st.last_reload_at.is_some());
    }

    #[test]
    fn missing_dir_fails_open_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("nope");
        assert!(PolicyStore::open(&gone).is_err());
        let store = PolicyStore::new(&gone, PolicySet::empty());
        assert!(matches!(store.reload(), ReloadOutcome::Rejected { .. }));
        assert!(store.status().degraded);
    }

    const ROUTED: &str = "[[action]]\ntype = \"a\"\n[[route]]\nname = \"r\"\nmethod = \"POST\"\npath = \"/a\"\naction = \"a\"\n";

    #[test]
    fn a_reload_that_gates_nothing_needs_allow_empty() {
        let (_dir, file, store) = store_with(ROUTED);
        let first = store.load_full();
        // Truncated to nothing: an error, the gate stays.
        std::fs::write(&file, "").unwrap();
        assert!(matches!(store.reload(), ReloadOutcome::Rejected { .. }));
        // Deleted: a valid empty directory, refused all the same.
        std::fs::remove_file(&file).unwrap();
        let (_, errors) = rejected(store.reload(), "an empty set must not replace a gating one");
        assert!(errors[0].to_string().contains("allow_empty"), "{errors:?}");
        assert!(Arc::ptr_eq(&store.load_full(), &first));
        assert!(store.status().degraded);
        // Said explicitly, it applies.
        std::fs::write(
            &file,
            "[set]\nallow_empty = true\nremoved_routes = [\"r\"]\n",
        )
        .unwrap();
        assert!(matches!(store.reload(), ReloadOutcome::Applied { .. }));
        assert!(!store.load_full().gates_anything());
        assert!(!store.status().degraded, "{:?}", store.status());
    }

    #[test]
    fn pinned_routes_stay_and_removals_wait_for_acknowledgement() {
        let extra = "[[route]]\nname = \"s\"\nmethod = \"POST\"\npath = \"/s\"\naction = \"a\"\n";
        let (_dir, file, store) = store_with(&format!("{ROUTED}pinned = true\n{extra}"));
        // Removing the pinned route, or moving it, is refused.
        std::fs::write(&file, format!("[[action]]\ntype = \"a\"\n{extra}")).unwrap();
        let (_, errors) = rejected(store.reload(), "a pinned route must not be removed");
        assert!(errors[0].to_string().contains("\"r\""), "{errors:?}");
        std::fs::write(
            &file,
            format!("{}pinned = true\n{extra}", ROUTED.replace("/a\"", "/b\"")),
        )
        .unwrap();
        assert!(matches!(store.reload(), ReloadOutcome::Rejected { .. }));
        assert!(store.load_full().routes.iter().any(|r| r.path == "/a"));
        // An unpinned route goes, and health stays degraded until a reload
        // acknowledges it.
        std::fs::write(&file, format!("{ROUTED}pinned = true\n")).unwrap();
        let ReloadOutcome::Applied { removed_routes, .. } = store.reload() else {
            panic!("an unpinned route may be removed");
        };
        assert_eq!(removed_routes, ["s"]);
        let st = store.status();
        assert!(st.degraded);
        assert_eq!(st.unacknowledged_removals, ["s"]);
        assert!(st.last_error.unwrap().contains("removed_routes"));
        std::fs::write(
            &file,
            format!("[set]\nremoved_routes = [\"s\"]\n{ROUTED}pinned = true\n"),
        )
        .unwrap();
        assert!(matches!(store.reload(), ReloadOutcome::Applied { .. }));
        let st = store.status();
        assert!(
            !st.degraded && st.unacknowledged_removals.is_empty(),
            "{st:?}"
        );
    }
}
