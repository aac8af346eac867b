//! A consistent copy of a data dir, taken while the server runs.
//!
//! Copying `verdict.db` with `cp` while the server writes can catch the
//! database, its write-ahead log and the audit tree at different moments,
//! and the copy may then fail `verdict audit verify` or lose the newest
//! commits. `VACUUM INTO` writes the database as one read transaction sees
//! it (SQLite's online backup), so the copy is a state the log really was
//! in. The key files are copied after it: keys are only ever added (a
//! rotation keeps the retired key), so every key the copied log names is
//! there. The lock file is not copied; the copy is a data dir of its own.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::audit::keys::KEYS_FILE;
use crate::audit::redaction::REDACTION_KEY_FILE;

/// What a backup wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    pub database: PathBuf,
    /// The key files copied beside it.
    pub key_files: Vec<String>,
    pub database_bytes: u64,
}

/// Copies `data_dir` into `out`, which must not exist or be empty.
pub fn backup(data_dir: &Path, out: &Path) -> Result<BackupReport, String> {
    let db = data_dir.join("verdict.db");
    if !db.is_file() {
        return Err(format!("no database at {}", db.display()));
    }
    if out.exists() {
        let empty = std::fs::read_dir(out)
            .map_err(|e| format!("{}: {e}", out.display()))?
            .next()
            .is_none();
        if !empty {
            return Err(format!(
                "{} exists and is not empty; back up into a new directory",
                out.display()
            ));
        }
    }
    create_private_dir(out)?;
    let target = out.join("verdict.db");
    let conn = rusqlite::Connection::open_with_flags(
        &db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| format!("open {}: {e}", db.display()))?;
    conn.busy_timeout(std::time::Duration::from_secs(30))
        .map_err(|e| e.to_string())?;
    let target_text = target
        .to_str()
        .ok_or_else(|| format!("{}: not a UTF-8 path", target.display()))?;
    conn.execute("VACUUM INTO ?1", [target_text])
        .map_err(|e| format!("copy the database: {e}"))?;
    drop(conn);
    let mut key_files = Vec::new();
    let entries =
        std::fs::read_dir(data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| e.to_string())?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_key = name == KEYS_FILE
            || name == REDACTION_KEY_FILE
            || (name.starts_with("audit_key_") && name.ends_with(".p8"));
        if is_key {
            copy_private(&entry.path(), &out.join(&name))?;
            key_files.push(name);
        }
    }
    key_files.sort();
    let database_bytes = std::fs::metadata(&target).map(|m| m.len()).unwrap_or(0);
    Ok(BackupReport {
        database: target,
        key_files,
        database_bytes,
    })
}

fn create_private_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    Ok(())
}

/// Copies a secret file, readable by its owner only.
fn copy_private(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to).map_err(|e| format!("copy {}: {e}", from.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("{}: {e}", to.display()))?;
    }
    Ok(())
}

/// `verdict backup`: copy, then prove the copy verifies.
pub(crate) fn command(data_dir: &std::path::Path, to: &std::path::Path) -> ExitCode {
    let report = match backup(data_dir, to) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("verdict: backup: {e}");
            return ExitCode::from(2);
        }
    };
    match crate::audit::verify_log(&report.database, to, |_, _| {}) {
        Ok(r) => {
            println!(
                "backed up {} ({} bytes) and {} key file(s) to {}; audit log ok: {} records, tree size {}",
                data_dir.display(),
                report.database_bytes,
                report.key_files.len(),
                to.display(),
                r.records,
                r.tree_size
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "verdict: backup written to {} but its audit log does not verify: {e}",
                to.display()
            );
            ExitCode::FAILURE
        }
    }
}
