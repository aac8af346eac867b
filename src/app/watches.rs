//! Watching the files a running sidecar reads again when they change: the
//! policies and the shadow policies (a broken edit keeps the last good
//! set), the keys file and the listeners' TLS files; and the audit records
//! of those reloads. Kept apart from start-up (the parent), which only
//! starts them.

use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{App, StartError};
use crate::audit::{AuditLog, AuditRecord, RecordKind};
use crate::policy::{self, ReloadOutcome};
use crate::server::ReloadingCert;

/// What watches the files a running sidecar reads again: the policy
/// watchers' tasks, which end at shutdown, and the keys file's and TLS
/// files' watches, which stop when dropped.
pub(super) struct Watches {
    pub(super) tasks: Vec<JoinHandle<()>>,
    pub(super) keys: Option<policy::WatchHandle>,
    pub(super) tls: Vec<policy::WatchHandle>,
}

impl Watches {
    /// Starts every watch: the policies, the shadow policies, the keys file
    /// and the TLS files of `certs`.
    pub(super) fn start(
        app: &App,
        certs: [&Option<Arc<ReloadingCert>>; 2],
        shutdown: &watch::Receiver<bool>,
    ) -> Result<Watches, StartError> {
        let rt = Handle::current();
        let mut tasks = Vec::new();
        tasks.extend(watch_policies(app, &rt, shutdown)?);
        tasks.extend(watch_shadow_policies(app, shutdown)?);
        let keys = watch_keys(app, &rt)?;
        let tls = watch_tls(certs)?;
        Ok(Watches { tasks, keys, tls })
    }
}

/// A future that ends when `shutdown` turns true.
fn stop_on(shutdown: &watch::Receiver<bool>) -> impl std::future::Future<Output = ()> {
    let mut rx = shutdown.clone();
    async move {
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// Reloads the enforced policies when their directory changes, auditing
/// each reload; nothing to watch when there is no directory.
fn watch_policies(
    app: &App,
    rt: &Handle,
    shutdown: &watch::Receiver<bool>,
) -> Result<Option<JoinHandle<()>>, StartError> {
    if !app.policies.dir().is_dir() {
        return Ok(None);
    }
    let (audit, rt) = (app.audit.clone(), rt.clone());
    let on_reload = move |outcome: ReloadOutcome| {
        if let Some(record) = reload_record(&outcome) {
            audit_in_background(&audit, &rt, record);
        }
    };
    let task =
        policy::spawn_watcher(app.policies.clone(), on_reload, stop_on(shutdown)).map_err(|e| {
            StartError::Watch {
                what: "policies",
                error: e.to_string(),
            }
        })?;
    Ok(Some(task))
}

/// Reloads the shadow policies when their directory changes.
fn watch_shadow_policies(
    app: &App,
    shutdown: &watch::Receiver<bool>,
) -> Result<Option<JoinHandle<()>>, StartError> {
    // The shadow set reloads like the enforced one (a broken edit keeps the
    // last good set); its reloads are logged, not audited, since they
    // change no decision.
    let Some(shadow) = app.shadow_policies.clone().filter(|s| s.dir().is_dir()) else {
        return Ok(None);
    };
    let on_reload = |outcome: ReloadOutcome| {
        tracing::info!(outcome = ?outcome, "shadow policies reload");
    };
    let task = policy::spawn_watcher(shadow, on_reload, stop_on(shutdown)).map_err(|e| {
        StartError::Watch {
            what: "shadow policies",
            error: e.to_string(),
        }
    })?;
    Ok(Some(task))
}

/// Reloads the keys file when it changes, auditing each reload; nothing to
/// watch when there is no keys file.
fn watch_keys(app: &App, rt: &Handle) -> Result<Option<policy::WatchHandle>, StartError> {
    let Some(path) = app.keys.path() else {
        return Ok(None);
    };
    let keys = app.keys.clone();
    let (audit, rt) = (app.audit.clone(), rt.clone());
    let handle = policy::watch_path(path, policy::DEFAULT_DEBOUNCE, move |_| {
        let mut record = AuditRecord::new(RecordKind::KeyChange);
        match keys.reload() {
            Ok(n) => {
                tracing::info!(keys = n, "keys file reloaded");
                record.detail = Some(serde_json::json!({"what": "api_keys", "applied": true, "keys": n}));
            }
            Err(e) => {
                tracing::error!(error = %e, "keys file reload failed; keeping the previous keys");
                record.detail = Some(serde_json::json!({"what": "api_keys", "applied": false, "error": e.to_string()}));
            }
        }
        audit_in_background(&audit, &rt, record);
    })
    .map_err(|e| StartError::Watch {
        what: "keys file",
        error: e.to_string(),
    })?;
    Ok(Some(handle))
}

/// Reads each listener's certificate and key again when they change.
fn watch_tls(
    certs: [&Option<Arc<ReloadingCert>>; 2],
) -> Result<Vec<policy::WatchHandle>, StartError> {
    // The certificate and key are watched like the keys file (renames, a
    // Secret's `..data` swap, writes in place) and read again on change.
    let mut tls_watches = Vec::new();
    for cert in certs.into_iter().flatten() {
        let files = cert.files();
        let mut paths = vec![files.cert.clone()];
        if files.key != files.cert {
            paths.push(files.key.clone());
        }
        for path in paths {
            let cert = cert.clone();
            let handle = policy::watch_path(&path, policy::DEFAULT_DEBOUNCE, move |_| {
                cert.reload();
            })
            .map_err(|e| StartError::Watch {
                what: "tls files",
                error: e.to_string(),
            })?;
            tls_watches.push(handle);
        }
    }
    Ok(tls_watches)
}

/// Appends a record off the request path (reloads, key changes), logging a
/// failure: there is no caller to answer with a 503.
fn audit_in_background(audit: &AuditLog, rt: &tokio::runtime::Handle, record: AuditRecord) {
    let audit = audit.clone();
    rt.spawn(async move {
        if let Err(e) = audit.append(record).await {
            tracing::error!(error = %e, "could not write an audit record");
        }
    });
}

/// The audit record of a policy reload; `None` when nothing changed.
fn reload_record(outcome: &ReloadOutcome) -> Option<AuditRecord> {
    let mut record = AuditRecord::new(RecordKind::PolicyReload);
    match outcome {
        ReloadOutcome::Unchanged { .. } => return None,
        ReloadOutcome::Applied {
            previous_revision,
            revision,
            files,
            actions,
            routes,
            removed_routes,
        } => {
            record.policy_revision = Some(revision.clone());
            let mut detail = serde_json::json!({
                "applied": true,
                "previous_revision": previous_revision,
                "files": files,
                "actions": actions,
                "routes": routes,
            });
            if !removed_routes.is_empty() {
                detail["removed_routes"] = serde_json::json!(removed_routes);
            }
            record.detail = Some(detail);
        }
        ReloadOutcome::Rejected {
            kept_revision,
            errors,
        } => {
            record.policy_revision = Some(kept_revision.clone());
            record.detail = Some(serde_json::json!({
                "applied": false,
                "errors": errors.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
            }));
        }
    }
    Some(record)
}
