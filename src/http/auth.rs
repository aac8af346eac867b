//! API keys: the keys file, scopes, constant-time lookup and protected mode.
//!
//! Keys are stored only as `sha256:<hex>` hashes, so a leaked keys file or a
//! config dump never hands out a working key. A presented bearer token is
//! hashed and compared with every stored hash in constant time, so the time a
//! lookup takes says nothing about how close a guess was. The key set lives
//! behind an `ArcSwap` so that the file can be reloaded while requests run.
//!
//! Some principal names belong to verdict itself: `proxy` (proxied decisions
//! are recorded under it), `anonymous` (every caller when auth is off) and
//! anything starting with `verdict:`. A key with such a name would inherit
//! whatever those principals own, so the keys file and `verdict keys new`
//! refuse them.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::{line_col, TomlFileError};

/// The principal proxied decisions are recorded under: end users of the
/// service carry no verdict key.
pub const PROXY_PRINCIPAL: &str = "proxy";

/// The principal of every caller when protected mode turns auth off.
pub const ANONYMOUS_PRINCIPAL: &str = "anonymous";

/// Names starting with this are kept for verdict's own principals.
pub const RESERVED_PREFIX: &str = "verdict:";

/// Checks that `name` may name an API key: not empty and not one of the
/// principals verdict uses itself. Reserved names are matched ignoring ASCII
/// case and surrounding space, so `Proxy ` cannot pass for `proxy` in a log.
pub fn check_key_name(name: &str) -> Result<(), String> {
    let folded = name.trim().to_ascii_lowercase();
    if folded.is_empty() {
        return Err("name must not be empty".into());
    }
    let why = if folded == PROXY_PRINCIPAL {
        "proxied decisions are recorded under it"
    } else if folded == ANONYMOUS_PRINCIPAL {
        "it is the principal of every caller when auth is off"
    } else if folded.starts_with(RESERVED_PREFIX) {
        "names starting with \"verdict:\" are kept for verdict's own principals"
    } else {
        return Ok(());
    };
    Err(format!("the name {name:?} is reserved: {why}"))
}

/// What a key may do. The routing table (`api::ROUTES`) maps each endpoint
/// to one scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Verify,
    Authorize,
    Batch,
    Audit,
    Review,
}

impl Scope {
    pub const ALL: [Scope; 5] = [
        Scope::Verify,
        Scope::Authorize,
        Scope::Batch,
        Scope::Audit,
        Scope::Review,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Verify => "verify",
            Scope::Authorize => "authorize",
            Scope::Batch => "batch",
            Scope::Audit => "audit",
            Scope::Review => "review",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|sc| sc.as_str() == s)
    }
}

/// The caller behind a request, after authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The key's name from the keys file; `anonymous` when auth is off.
    pub name: String,
    pub scopes: Vec<Scope>,
}

impl Principal {
    /// The principal used when protected mode turns auth off (no keys, API
    /// on loopback): every scope.
    pub fn anonymous() -> Principal {
        Principal {
            name: ANONYMOUS_PRINCIPAL.to_string(),
            scopes: Scope::ALL.to_vec(),
        }
    }

    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }
}

/// An error in the keys file.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    #[error(transparent)]
    File(#[from] TomlFileError),
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    #[serde(default)]
    key: Vec<KeyEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    /// Spanned so that a refused name can point at its line.
    name: toml::Spanned<String>,
    hash: String,
    scopes: Vec<Scope>,
}

/// One stored key: its name, scopes and the 32 bytes of its hash.
#[derive(Clone)]
struct StoredKey {
    name: String,
    hash: [u8; 32],
    scopes: Vec<Scope>,
}

impl fmt::Debug for StoredKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The hash is not the key, but there is no reason to print it either.
        f.debug_struct("StoredKey")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// A validated set of keys.
#[derive(Debug, Clone, Default)]
pub struct KeySet {
    keys: Vec<StoredKey>,
}

impl KeySet {
    /// Parses keys-file text. `name` is used in error messages.
    pub fn parse(name: &str, text: &str) -> Result<KeySet, KeysError> {
        let file: KeysFile = TomlFileError::parse(name, text)?;
        let mut keys = Vec::with_capacity(file.key.len());
        for (i, entry) in file.key.into_iter().enumerate() {
            let (line, col) = line_col(text, entry.name.span().start);
            let entry_name = entry.name.into_inner();
            let invalid = |message: String| KeysError::Invalid {
                path: name.to_string(),
                message: format!("key[{i}] ({entry_name:?}): {message}"),
            };
            if let Err(message) = check_key_name(&entry_name) {
                return Err(TomlFileError::Parse {
                    path: name.to_string(),
                    line,
                    col,
                    message: format!("key[{i}]: {message}"),
                }
                .into());
            }
            let hex_part = entry
                .hash
                .strip_prefix("sha256:")
                .ok_or_else(|| invalid("hash must look like sha256:<64 hex digits>".into()))?;
            let bytes = hex::decode(hex_part)
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .ok_or_else(|| invalid("hash must look like sha256:<64 hex digits>".into()))?;
            if keys.iter().any(|k: &StoredKey| k.name == entry_name) {
                return Err(invalid("duplicate key name".into()));
            }
            keys.push(StoredKey {
                name: entry_name,
                hash: bytes,
                scopes: entry.scopes,
            });
        }
        Ok(KeySet { keys })
    }

    pub fn load(path: &Path) -> Result<KeySet, KeysError> {
        let text = TomlFileError::read(path)?;
        KeySet::parse(&path.display().to_string(), &text)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Finds the key whose hash matches `token`. Every stored hash is compared,
    /// in constant time, whatever matches first.
    pub fn lookup(&self, token: &str) -> Option<Principal> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found: Option<&StoredKey> = None;
        for key in &self.keys {
            if bool::from(key.hash.ct_eq(&digest)) && found.is_none() {
                found = Some(key);
            }
        }
        found.map(|k| Principal {
            name: k.name.clone(),
            scopes: k.scopes.clone(),
        })
    }
}

/// How the API authenticates callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// Bearer keys from the keys file.
    Keys,
    /// No keys configured and the API listens on loopback: every caller is
    /// [`Principal::anonymous`].
    Open,
}

/// The live key set and where it came from.
#[derive(Debug)]
pub struct KeyStore {
    mode: AuthMode,
    path: Option<PathBuf>,
    keys: ArcSwap<KeySet>,
}

/// Why authentication failed.
#[derive(Debug, PartialEq, Eq)]
pub enum AuthFailure {
    /// No bearer token, or an unknown one (401).
    Unauthenticated,
    /// A known key without the scope (403).
    MissingScope(Scope),
}

impl KeyStore {
    /// Opens the key store for a listener. With no keys file, auth is off only
    /// when the API listens on loopback; on any other address this refuses.
    pub fn open(path: Option<&Path>, api_is_loopback: bool) -> Result<KeyStore, KeysError> {
        match path {
            Some(p) => {
                let keys = KeySet::load(p)?;
                if keys.is_empty() && !api_is_loopback {
                    return Err(KeysError::Invalid {
                        path: p.display().to_string(),
                        message: "the keys file holds no keys and the API does not listen on loopback; refusing to start unprotected".into(),
                    });
                }
                Ok(KeyStore {
                    mode: AuthMode::Keys,
                    path: Some(p.to_path_buf()),
                    keys: ArcSwap::from_pointee(keys),
                })
            }
            None if api_is_loopback => Ok(KeyStore {
                mode: AuthMode::Open,
                path: None,
                keys: ArcSwap::from_pointee(KeySet::default()),
            }),
            None => Err(KeysError::Invalid {
                path: "auth.keys_file".into(),
                message: "no API keys are configured and the API does not listen on loopback; refusing to start unprotected (set --keys FILE)".into(),
            }),
        }
    }

    /// A store with a fixed key set, for tests and embedding.
    pub fn with_keys(keys: KeySet) -> KeyStore {
        KeyStore {
            mode: AuthMode::Keys,
            path: None,
            keys: ArcSwap::from_pointee(keys),
        }
    }

    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn key_count(&self) -> usize {
        self.keys.load().len()
    }

    /// Re-reads the keys file; on error the previous set stays in force.
    pub fn reload(&self) -> Result<usize, KeysError> {
        let Some(path) = &self.path else {
            return Ok(0);
        };
        let keys = KeySet::load(path)?;
        let n = keys.len();
        self.keys.store(Arc::new(keys));
        Ok(n)
    }

    /// The names of the keys whose tokens are in a credential header value,
    /// read every way a server behind the proxy might read it: the whole
    /// value, the credentials after any scheme (`Bearer`, `Token`, ...),
    /// both halves of `Basic` user:password, and each `name=value` cookie
    /// pair's value, as sent and percent-decoded. Empty when auth is off.
    pub fn keys_in(&self, value: &str) -> Vec<String> {
        use base64::Engine as _;
        if self.mode != AuthMode::Keys {
            return Vec::new();
        }
        let keys = self.keys.load();
        let whole = value.trim();
        let mut candidates: Vec<String> = vec![whole.to_string()];
        if let Some((scheme, rest)) = whole.split_once(' ') {
            let rest = rest.trim();
            candidates.push(rest.to_string());
            if scheme.eq_ignore_ascii_case("basic") {
                if let Ok(plain) = base64::engine::general_purpose::STANDARD.decode(rest) {
                    let plain = String::from_utf8_lossy(&plain).into_owned();
                    if let Some((user, pass)) = plain.split_once(':') {
                        candidates.push(user.to_string());
                        candidates.push(pass.to_string());
                    }
                }
            }
        }
        for pair in whole.split(';') {
            if let Some((_, v)) = pair.split_once('=') {
                let v = v.trim().trim_matches('"');
                candidates.push(v.to_string());
                if let Ok(decoded) = percent_encoding::percent_decode_str(v).decode_utf8() {
                    candidates.push(decoded.into_owned());
                }
            }
        }
        let mut names: Vec<String> = Vec::new();
        for c in candidates.iter().filter(|c| !c.is_empty()) {
            if let Some(p) = keys.lookup(c) {
                if !names.contains(&p.name) {
                    names.push(p.name);
                }
            }
        }
        names
    }

    /// Authenticates an `Authorization` header value for `scope`.
    pub fn authenticate(
        &self,
        authorization: Option<&str>,
        scope: Option<Scope>,
    ) -> Result<Principal, AuthFailure> {
        let principal = match self.mode {
            AuthMode::Open => Principal::anonymous(),
            AuthMode::Keys => {
                let token = authorization
                    .and_then(bearer_token)
                    .ok_or(AuthFailure::Unauthenticated)?;
                self.keys
                    .load()
                    .lookup(token)
                    .ok_or(AuthFailure::Unauthenticated)?
            }
        };
        match scope {
            Some(s) if !principal.has(s) => Err(AuthFailure::MissingScope(s)),
            _ => Ok(principal),
        }
    }
}

fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// A fresh random API key and the keys-file entry that admits it.
pub struct NewKey {
    pub token: String,
    pub entry: String,
}

/// Makes a new key for `verdict keys new`. The token is 32 random bytes,
/// base64url, prefixed `vk_` so that secret scanners can spot it. A name the
/// keys file would refuse ([`check_key_name`]) is refused here too.
pub fn new_key(name: &str, scopes: &[Scope]) -> Result<NewKey, String> {
    use base64::Engine as _;
    use ring::rand::SecureRandom;
    check_key_name(name)?;
    let mut raw = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut raw)
        .map_err(|_| "the system random number generator failed".to_string())?;
    let token = format!(
        "vk_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    );
    let hash = hex::encode(Sha256::digest(token.as_bytes()));
    let scopes = scopes
        .iter()
        .map(|s| format!("\"{}\"", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    let name_toml = toml::Value::String(name.to_string()).to_string();
    let entry =
        format!("[[key]]\nname = {name_toml}\nhash = \"sha256:{hash}\"\nscopes = [{scopes}]\n");
    Ok(NewKey { token, entry })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(s: &str) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(s.as_bytes())))
    }

    fn store() -> KeyStore {
        let text = format!(
            "[[key]]\nname = \"app\"\nhash = \"{}\"\nscopes = [\"verify\", \"authorize\"]\n\n[[key]]\nname = \"rev\"\nhash = \"{}\"\nscopes = [\"review\"]\n",
            sha("app-key"),
            sha("rev-key")
        );
        KeyStore::with_keys(KeySet::parse("keys.toml", &text).unwrap())
    }

    #[test]
    fn keys_in_finds_every_key_however_it_is_sent() {
        use base64::Engine as _;
        let s = store();
        let basic = |u: &str, p: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )
        };
        for (value, want) in [
            ("Bearer app-key".to_string(), vec!["app"]),
            ("token rev-key".to_string(), vec!["rev"]),
            ("app-key".to_string(), vec!["app"]),
            (basic("ops", "rev-key"), vec!["rev"]),
            (basic("app-key", "x"), vec!["app"]),
            ("a=app-key; b=rev-key".to_string(), vec!["app", "rev"]),
            ("s=\"rev-key\"".to_string(), vec!["rev"]),
            ("s=rev%2Dkey".to_string(), vec!["rev"]),
            ("Bearer nope; x=1".to_string(), vec![]),
        ] {
            assert_eq!(s.keys_in(&value), want, "{value}");
        }
        let open = KeyStore::open(None, true).unwrap();
        assert!(open.keys_in("Bearer app-key").is_empty());
    }

    #[test]
    fn lookup_and_scopes() {
        let s = store();
        let p = s
            .authenticate(Some("Bearer app-key"), Some(Scope::Verify))
            .unwrap();
        assert_eq!(p.name, "app");
        assert_eq!(
            s.authenticate(Some("bearer app-key"), Some(Scope::Review)),
            Err(AuthFailure::MissingScope(Scope::Review))
        );
        assert_eq!(
            s.authenticate(Some("Bearer nope"), Some(Scope::Verify)),
            Err(AuthFailure::Unauthenticated)
        );
        assert_eq!(
            s.authenticate(None, None),
            Err(AuthFailure::Unauthenticated)
        );
        assert_eq!(
            s.authenticate(Some("Basic app-key"), None),
            Err(AuthFailure::Unauthenticated)
        );
        assert_eq!(
            s.authenticate(Some("Bearer rev-key"), None).unwrap().name,
            "rev"
        );
    }

    #[test]
    fn keys_file_errors_name_the_line() {
        let err = KeySet::parse(
            "k.toml",
            "[[key]]\nname = \"a\"\nhash = \"x\"\nscopes = [\"verify\"]\nextra = 1\n",
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("k.toml:5:"), "{err}");
        let err = KeySet::parse(
            "k.toml",
            "[[key]]\nname = \"a\"\nhash = \"x\"\nscopes = [\"fly\"]\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("fly"), "{err}");
        let err = KeySet::parse(
            "k.toml",
            "[[key]]\nname = \"a\"\nhash = \"sha256:zz\"\nscopes = []\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("sha256:<64 hex digits>"), "{err}");
    }

    #[test]
    fn reserved_names_are_refused_with_their_line() {
        for name in [
            "proxy",
            "anonymous",
            "verdict:admin",
            "verdict:",
            "Proxy",
            " anonymous ",
        ] {
            let text = format!(
                "[[key]]\nname = \"ok\"\nhash = \"{}\"\nscopes = []\n\n[[key]]\nname = {:?}\nhash = \"{}\"\nscopes = [\"audit\"]\n",
                sha("a"),
                name,
                sha("b")
            );
            let err = KeySet::parse("k.toml", &text).unwrap_err().to_string();
            assert!(err.starts_with("k.toml:7:8: key[1]: "), "{name}: {err}");
            assert!(err.contains(&format!("{name:?} is reserved")), "{err}");
            assert!(new_key(name, &[Scope::Audit]).is_err(), "{name}");
        }
        for name in ["proxy-app", "anonymous2", "my-verdict:x", "verdict"] {
            assert_eq!(check_key_name(name), Ok(()), "{name}");
        }
        assert!(KeySet::parse("k.toml", &new_key("proxy-app", &[]).unwrap().entry).is_ok());
    }

    #[test]
    fn a_reload_with_a_reserved_name_keeps_the_previous_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        let entry = |name: &str, token: &str| {
            format!(
                "[[key]]\nname = \"{name}\"\nhash = \"{}\"\nscopes = [\"audit\"]\n",
                sha(token)
            )
        };
        std::fs::write(&path, entry("app", "app-key")).unwrap();
        let store = KeyStore::open(Some(&path), true).unwrap();
        std::fs::write(&path, entry("proxy", "proxy-key")).unwrap();
        let err = store.reload().unwrap_err().to_string();
        assert!(err.contains("\"proxy\" is reserved"), "{err}");
        assert_eq!(
            store
                .authenticate(Some("Bearer app-key"), None)
                .unwrap()
                .name,
            "app"
        );
        assert_eq!(
            store.authenticate(Some("Bearer proxy-key"), None),
            Err(AuthFailure::Unauthenticated)
        );
        // On first load the same file is refused outright.
        assert!(KeyStore::open(Some(&path), true).is_err());
    }

    #[test]
    fn protected_mode() {
        assert_eq!(KeyStore::open(None, true).unwrap().mode(), AuthMode::Open);
        assert!(KeyStore::open(None, false).is_err());
        let open = KeyStore::open(None, true).unwrap();
        assert_eq!(
            open.authenticate(None, Some(Scope::Review)).unwrap().name,
            "anonymous"
        );
    }

    #[test]
    fn new_key_round_trips() {
        let k = new_key("ci \"bot\"", &[Scope::Verify, Scope::Batch]).unwrap();
        assert!(k.token.starts_with("vk_"));
        let set = KeySet::parse("new", &k.entry).unwrap();
        let p = set.lookup(&k.token).unwrap();
        assert_eq!(p.name, "ci \"bot\"");
        assert_eq!(p.scopes, vec![Scope::Verify, Scope::Batch]);
        assert_ne!(
            new_key("a", &[]).unwrap().token,
            new_key("a", &[]).unwrap().token
        );
    }
}
