//! One owner per data dir: `serve` holds an exclusive OS lock on
//! `<data dir>/verdict.lock` for as long as it runs.
//!
//! Two writers of one audit log fork it: a second `serve` on the same dir,
//! or `verdict audit rotate-key` while `serve` runs, leaves the running
//! server answering 503 "the log was changed by another writer" until a
//! restart. So `serve` takes the lock before it opens anything, offline
//! commands that write take it too, and whoever comes second is refused
//! with the holder's pid. The OS releases the lock when the holder exits or
//! crashes, so a stale file never blocks a restart.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The lock file's name in the data dir.
pub const LOCK_FILE: &str = "verdict.lock";

/// Held while alive; the OS lock goes with the file handle.
#[derive(Debug)]
pub struct DataLock {
    _file: File,
    pub path: PathBuf,
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{path} is held by another verdict process (pid {holder}): one process owns a data dir; stop it first")]
    Held { path: String, holder: String },
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
}

/// Takes the exclusive lock on `dir`'s lock file, writing this process's
/// pid into it, or says who holds it.
pub fn acquire(dir: &Path) -> Result<DataLock, LockError> {
    let path = dir.join(LOCK_FILE);
    let io = |error| LockError::Io {
        path: path.display().to_string(),
        error,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(LockError::Held {
                path: path.display().to_string(),
                holder: if holder.is_empty() {
                    "unknown".into()
                } else {
                    holder.into()
                },
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
    }
    file.set_len(0).map_err(io)?;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    writeln!(file, "{}", std::process::id()).map_err(io)?;
    Ok(DataLock { _file: file, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let held = acquire(dir.path()).unwrap();
        let err = acquire(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(held);
        let again = acquire(dir.path()).unwrap();
        assert!(again.path.ends_with(LOCK_FILE));
    }
}
