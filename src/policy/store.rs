//! The live policy set: an `ArcSwap` that requests read without locking, and
//! a reload that swaps in a new set only when the whole directory is valid.
//!
//! Each request takes **one** snapshot with [`PolicyStore::load_full`] and
//! uses it for every phase, so a reload in the middle of a request can never
//! mix two revisions. A broken edit keeps the previous set, marks the store
//! `degraded` and records the error for `/health/detailed`; the next good
//! reload clears it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

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

    /// A copy of the reload bookkeeping.
    pub fn status(&self) -> ReloadStatus {
        lock(&self.status).clone()
    }

    /// Re-reads the directory. Blocking file IO: call it from a blocking
    /// thread (the watcher does) or through `spawn_blocking`.
    pub fn reload(&self) -> ReloadOutcome {
        let _serial = lock(&self.reloading);
        let result = load_dir(&self.dir);
        let old = self.current.load_full();
        let outcome = match result {
            Ok(set) if set.revision == old.revision => ReloadOutcome::Unchanged {
                revision: set.revision,
            },
            Ok(set) => {
                let outcome = ReloadOutcome::Applied {
                    previous_revision: old.revision.clone(),
                    revision: set.revision.clone(),
                    files: set.files.clone(),
                    actions: set.actions.len(),
                    routes: set.routes.len(),
                };
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
                st.degraded = false;
                st.last_error = None;
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

    #[test]
    fn reload_applies_keeps_and_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.toml");
        std::fs::write(&file, GOOD).unwrap();
        let store = PolicyStore::open(dir.path()).unwrap();
        let first = store.load_full();
        assert!(first.action("a").is_some());

        assert_eq!(
            store.reload(),
            ReloadOutcome::Unchanged {
                revision: first.revision.clone()
            }
        );

        std::fs::write(&file, "[[action]]\ntype = 5\n").unwrap();
        let ReloadOutcome::Rejected {
            kept_revision,
            errors,
        } = store.reload()
        else {
            panic!("bad file must be rejected");
        };
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
}
