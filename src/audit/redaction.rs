//! The secret behind redaction: a param listed under an action policy's
//! `redact` is stored in the audit record as `hmac-sha256:<hex>` of its
//! canonical JSON, keyed with 32 random bytes kept in the data dir.
//!
//! A plain sha256 would hide nothing worth hiding: card numbers, emails and
//! national ids come from spaces small enough to hash exhaustively in
//! minutes, so their unsalted digest is as good as the value. An HMAC under
//! a key the reader does not hold cannot be reversed that way, and the same
//! value still gives the same text under the same key, so operators can
//! still correlate records. The key lives in its own file (mode 0600), next
//! to the signing keys and outside the database, so that a copy of the
//! database does not carry it. It is created on first start; on a later
//! start a file that is there but unreadable or of the wrong length stops
//! the server rather than redacting under a fresh key that no earlier
//! record matches.

use std::fmt;
use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use ring::hmac;
use ring::rand::{SecureRandom as _, SystemRandom};

/// The key file's name in the data dir.
pub const REDACTION_KEY_FILE: &str = "redaction.key";

/// The key's length in bytes (the file holds exactly these, raw).
pub const KEY_LEN: usize = 32;

/// The prefix of every redacted value.
pub const PREFIX: &str = "hmac-sha256:";

/// Why the redaction key could not be loaded or created.
#[derive(Debug, thiserror::Error)]
#[error("redaction key {path}: {message}")]
pub struct RedactionKeyError {
    pub path: String,
    pub message: String,
}

/// The HMAC-SHA256 key redacted params are tagged with. Cheap to clone.
#[derive(Clone)]
pub struct RedactionKey {
    key: hmac::Key,
}

impl fmt::Debug for RedactionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret, in any form.
        f.write_str("RedactionKey(..)")
    }
}

/// Whether [`RedactionKey::open`] found the key file or made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    Loaded,
    Created,
}

impl RedactionKey {
    /// A key from raw bytes (tests, and the loader).
    pub fn from_bytes(bytes: &[u8; KEY_LEN]) -> RedactionKey {
        RedactionKey {
            key: hmac::Key::new(hmac::HMAC_SHA256, bytes),
        }
    }

    /// Loads `dir/redaction.key`, creating it (32 bytes from the system
    /// CSPRNG, mode 0600) only when it does not exist. A file that exists
    /// but cannot be read or is not exactly 32 bytes is an error: the caller
    /// must refuse to start. Blocking IO: call at start-up, off the runtime.
    pub fn open(dir: &Path) -> Result<(RedactionKey, Opened), RedactionKeyError> {
        let path = dir.join(REDACTION_KEY_FILE);
        match fs::read(&path) {
            Ok(bytes) => {
                let raw: [u8; KEY_LEN] = bytes.as_slice().try_into().map_err(|_| {
                    key_err(
                        &path,
                        format!(
                            "holds {} bytes, expected {KEY_LEN}; refusing to start rather than \
                             redact under a different key (restore the file; removing it makes \
                             a new key, and values redacted before no longer match)",
                            bytes.len()
                        ),
                    )
                })?;
                Ok((RedactionKey::from_bytes(&raw), Opened::Loaded))
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                create(dir, &path).map(|k| (k, Opened::Created))
            }
            Err(e) => Err(key_err(
                &path,
                format!("cannot read it ({e}); refusing to start rather than redact under a different key"),
            )),
        }
    }

    /// A 32-byte key for another purpose, derived from this secret:
    /// HMAC-SHA256(secret, `label`), the one-block HKDF-Expand. The data
    /// dir keeps one secret file; each use gets its own key.
    pub fn derive(&self, label: &[u8]) -> [u8; KEY_LEN] {
        let tag = hmac::sign(&self.key, label);
        let mut out = [0u8; KEY_LEN];
        out.copy_from_slice(&tag.as_ref()[..KEY_LEN]);
        out
    }

    /// `hmac-sha256:<lowercase hex>` of `data` under this key.
    pub fn tag(&self, data: &[u8]) -> String {
        let tag = hmac::sign(&self.key, data);
        format!("{PREFIX}{}", hex::encode(tag.as_ref()))
    }
}

fn key_err(path: &Path, message: impl Into<String>) -> RedactionKeyError {
    RedactionKeyError {
        path: path.display().to_string(),
        message: message.into(),
    }
}

/// Writes a fresh key to a private temporary file, then links it into
/// place: the key file is either absent or whole, never half written, and
/// if another process made one first, that one is used.
fn create(dir: &Path, path: &Path) -> Result<RedactionKey, RedactionKeyError> {
    let mut raw = [0u8; KEY_LEN];
    SystemRandom::new()
        .fill(&mut raw)
        .map_err(|_| key_err(path, "the system random number generator failed"))?;
    let tmp: PathBuf = dir.join(format!("{REDACTION_KEY_FILE}.{}.tmp", std::process::id()));
    let linked =
        super::keys::write_synced(&tmp, 0o600, &raw).and_then(|()| fs::hard_link(&tmp, path));
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            return RedactionKey::open(dir).map(|(k, _)| k);
        }
        Err(e) => return Err(key_err(path, format!("cannot create it: {e}"))),
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| key_err(path, format!("cannot sync its directory: {e}")))?;
    Ok(RedactionKey::from_bytes(&raw))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn fixed() -> RedactionKey {
        let mut raw = [0u8; KEY_LEN];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = u8::try_from(i).unwrap();
        }
        RedactionKey::from_bytes(&raw)
    }

    /// Expected values from Python:
    /// `hmac.new(bytes(range(32)), b'"4111111111111111"', hashlib.sha256).hexdigest()`.
    #[test]
    fn known_answers() {
        let k = fixed();
        assert_eq!(
            k.tag(b"\"4111111111111111\""),
            "hmac-sha256:5b90d95161237ce2385af94f39d0f420ad1569ee25feb7ed5f87c18cd39ff079"
        );
        assert_eq!(
            k.tag(b"120"),
            "hmac-sha256:caaaf7c66637524caa6a0f8036b418a9e686ff860ae3a8103969ab793a44047b"
        );
        assert_eq!(format!("{k:?}"), "RedactionKey(..)");
    }

    #[test]
    fn created_once_private_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let (a, how) = RedactionKey::open(dir.path()).unwrap();
        assert_eq!(how, Opened::Created);
        let path = dir.path().join(REDACTION_KEY_FILE);
        let meta = fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(meta.len(), KEY_LEN as u64);
        let (b, how) = RedactionKey::open(dir.path()).unwrap();
        assert_eq!(how, Opened::Loaded);
        assert_eq!(a.tag(b"x"), b.tag(b"x"));
        // Nothing but the key file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(REDACTION_KEY_FILE)]);
        // Another directory, another key.
        let other = tempfile::tempdir().unwrap();
        let (c, _) = RedactionKey::open(other.path()).unwrap();
        assert_ne!(a.tag(b"x"), c.tag(b"x"));
    }

    #[test]
    fn a_present_but_bad_file_is_refused_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(REDACTION_KEY_FILE);
        for bad in [&b""[..], &[7u8; 31][..], &[7u8; 33][..]] {
            fs::write(&path, bad).unwrap();
            let err = RedactionKey::open(dir.path()).unwrap_err().to_string();
            assert!(err.contains("expected 32"), "{err}");
            assert!(err.contains(REDACTION_KEY_FILE), "{err}");
            assert_eq!(fs::read(&path).unwrap(), bad, "left as it was");
        }
        // Unreadable: a directory where the file should be.
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        let err = RedactionKey::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("cannot read"), "{err}");
        assert!(path.is_dir());
    }
}
