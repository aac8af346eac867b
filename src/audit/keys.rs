//! The log's Ed25519 signing keys: generation on first start, the 0600 key
//! files, the published key documents, RFC 7638 key ids and rotation.
//!
//! Keys live in their own files next to the database rather than in it, so a
//! copy of the database (for a verifier, a backup, a bug report) never carries
//! the private key. The public documents stay published after rotation: old
//! checkpoints must remain checkable forever.

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair as _};
use serde::{Deserialize, Serialize};

use super::merkle::sha256;
use super::note;
use super::AuditError;

/// File holding the public key documents, newest last.
pub const KEYS_FILE: &str = "audit_keys.json";

/// Whether a key signs new checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyStatus {
    Active,
    Retired,
}

/// A published key: an RFC 8037 OKP JWK plus its status and signed-note
/// verifier key. Served at `GET /v2/audit/keys/{kid}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyDocument {
    pub kty: String,
    pub crv: String,
    /// base64url (no padding) of the 32-byte public key.
    pub x: String,
    /// RFC 7638 thumbprint; the `key_id` everywhere in the API.
    pub kid: String,
    pub status: KeyStatus,
    pub created_at: String,
    pub verifier_key: String,
}

/// RFC 7638 JWK SHA-256 thumbprint of an Ed25519 key, base64url.
pub fn thumbprint(x: &str) -> String {
    let members = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    B64URL.encode(sha256(members.as_bytes()))
}

impl KeyDocument {
    pub fn new(public_key: &[u8], origin: &str, status: KeyStatus, created_at: String) -> Self {
        let x = B64URL.encode(public_key);
        KeyDocument {
            kty: "OKP".into(),
            crv: "Ed25519".into(),
            kid: thumbprint(&x),
            x,
            status,
            created_at,
            verifier_key: note::verifier_key(origin, public_key),
        }
    }

    /// The raw public key, after checking that `kid` is its thumbprint.
    pub fn public_key(&self) -> Result<[u8; 32], String> {
        public_key_of(&self.kty, &self.crv, &self.x, Some(&self.kid))
    }

    /// The signed-note key name (the log origin this key signs for).
    pub fn note_name(&self) -> Option<&str> {
        self.verifier_key.split('+').next()
    }
}

fn public_key_of(kty: &str, crv: &str, x: &str, kid: Option<&str>) -> Result<[u8; 32], String> {
    if kty != "OKP" || crv != "Ed25519" {
        return Err("key: expected kty OKP and crv Ed25519".into());
    }
    let raw = B64URL
        .decode(x)
        .map_err(|_| "key: x is not base64url".to_string())?;
    let pk: [u8; 32] = raw
        .try_into()
        .map_err(|_| "key: x is not 32 bytes".to_string())?;
    if let Some(kid) = kid {
        if thumbprint(x) != kid {
            return Err("key: kid is not the RFC 7638 thumbprint of x".into());
        }
    }
    Ok(pk)
}

/// Reads a JWK or key document: returns the public key and its thumbprint.
pub fn parse_key_json(json: &str) -> Result<([u8; 32], String), String> {
    #[derive(Deserialize)]
    struct Jwk {
        kty: String,
        crv: String,
        x: String,
        kid: Option<String>,
    }
    let jwk: Jwk = serde_json::from_str(json).map_err(|e| format!("key: {e}"))?;
    let pk = public_key_of(&jwk.kty, &jwk.crv, &jwk.x, jwk.kid.as_deref())?;
    Ok((pk, thumbprint(&jwk.x)))
}

/// The active signing key.
pub struct SigningKey {
    pub pair: Ed25519KeyPair,
    pub doc: KeyDocument,
}

/// All keys of one log: the published documents and the active private key.
pub struct KeyRing {
    dir: PathBuf,
    origin: String,
    pub docs: Vec<KeyDocument>,
    pub active: SigningKey,
}

fn key_err(path: &Path, message: impl Into<String>) -> AuditError {
    AuditError::Key {
        path: path.display().to_string(),
        message: message.into(),
    }
}

fn private_path(dir: &Path, kid: &str) -> PathBuf {
    dir.join(format!("audit_key_{kid}.p8"))
}

/// Reads the published key documents; an absent file means no keys.
pub fn load_docs(dir: &Path) -> Result<Vec<KeyDocument>, AuditError> {
    let path = dir.join(KEYS_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(key_err(&path, e.to_string())),
    };
    let docs: Vec<KeyDocument> =
        serde_json::from_str(&text).map_err(|e| key_err(&path, e.to_string()))?;
    for d in &docs {
        d.public_key().map_err(|e| key_err(&path, e))?;
    }
    Ok(docs)
}

fn sync_dir(dir: &Path) -> Result<(), AuditError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| key_err(dir, e.to_string()))
}

fn write_docs(dir: &Path, docs: &[KeyDocument]) -> Result<(), AuditError> {
    let path = dir.join(KEYS_FILE);
    let tmp = dir.join(format!("{KEYS_FILE}.tmp"));
    let mut text = serde_json::to_string_pretty(docs).map_err(|e| key_err(&path, e.to_string()))?;
    text.push('\n');
    write_synced(&tmp, 0o644, text.as_bytes())
        .and_then(|()| fs::rename(&tmp, &path))
        .map_err(|e| key_err(&path, e.to_string()))?;
    sync_dir(dir)
}

/// Writes `bytes` to `path` with `mode` (replacing what was there) and syncs
/// them, so that a key file moved into place afterwards is whole.
pub(super) fn write_synced(path: &Path, mode: u32, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn generate(dir: &Path, origin: &str, now: String) -> Result<SigningKey, AuditError> {
    let rng = SystemRandom::new();
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng)
        .map_err(|_| key_err(dir, "cannot generate an Ed25519 key"))?;
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref())
        .map_err(|e| key_err(dir, format!("generated key rejected: {e}")))?;
    let doc = KeyDocument::new(pair.public_key().as_ref(), origin, KeyStatus::Active, now);
    let path = private_path(dir, &doc.kid);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| key_err(&path, e.to_string()))?;
    f.write_all(pkcs8.as_ref())
        .and_then(|_| f.sync_all())
        .map_err(|e| key_err(&path, e.to_string()))?;
    sync_dir(dir)?;
    Ok(SigningKey { pair, doc })
}

fn load_private(dir: &Path, doc: &KeyDocument) -> Result<SigningKey, AuditError> {
    let path = private_path(dir, &doc.kid);
    let bytes = fs::read(&path).map_err(|e| key_err(&path, e.to_string()))?;
    let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&bytes)
        .map_err(|e| key_err(&path, format!("not an Ed25519 PKCS#8 key: {e}")))?;
    let pk = doc.public_key().map_err(|e| key_err(&path, e))?;
    if pair.public_key().as_ref() != pk {
        return Err(key_err(
            &path,
            "private key does not match its published key",
        ));
    }
    Ok(SigningKey {
        pair,
        doc: doc.clone(),
    })
}

impl KeyRing {
    /// Loads the keys in `dir`, generating the first one if there is none.
    pub fn open(dir: &Path, origin: &str, now: String) -> Result<KeyRing, AuditError> {
        fs::create_dir_all(dir).map_err(|e| key_err(dir, e.to_string()))?;
        let mut docs = load_docs(dir)?;
        let active = if docs.is_empty() {
            let k = generate(dir, origin, now)?;
            docs.push(k.doc.clone());
            write_docs(dir, &docs)?;
            k
        } else {
            let mut actives = docs.iter().filter(|d| d.status == KeyStatus::Active);
            let (Some(doc), None) = (actives.next(), actives.next()) else {
                return Err(key_err(
                    &dir.join(KEYS_FILE),
                    "expected exactly one active key",
                ));
            };
            load_private(dir, doc)?
        };
        if active.doc.note_name() != Some(origin) {
            return Err(key_err(
                &dir.join(KEYS_FILE),
                format!("active key signs for another origin than {origin:?}"),
            ));
        }
        Ok(KeyRing {
            dir: dir.to_path_buf(),
            origin: origin.to_string(),
            docs,
            active,
        })
    }

    /// Makes a new key active and retires the current one; both documents
    /// stay published. Returns the previous signing key.
    /// The private key of a published (usually retired) key, from its file.
    pub fn load(&self, doc: &KeyDocument) -> Result<SigningKey, AuditError> {
        load_private(&self.dir, doc)
    }

    pub fn rotate(&mut self, now: String) -> Result<SigningKey, AuditError> {
        let new = generate(&self.dir, &self.origin, now)?;
        let mut docs = self.docs.clone();
        for d in &mut docs {
            d.status = KeyStatus::Retired;
        }
        docs.push(new.doc.clone());
        write_docs(&self.dir, &docs)?;
        self.docs = docs;
        let mut old = std::mem::replace(&mut self.active, new);
        old.doc.status = KeyStatus::Retired;
        Ok(old)
    }
}
