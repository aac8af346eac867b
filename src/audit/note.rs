//! C2SP signed notes and tlog checkpoints, signed with Ed25519 through `ring`.
//!
//! Checkpoints use the interoperable C2SP format (the one Go sumdb, CT static
//! logs and Rekor v2 publish) so that standard tools and witnesses can check
//! them, rather than a format of our own. Parsing is strict: a verifier that
//! is lenient about the note text is a verifier that can be fooled.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ring::signature::{Ed25519KeyPair, KeyPair as _, UnparsedPublicKey, ED25519};

use super::merkle::Hash;
use crate::config::vkey;

/// Signature type byte for Ed25519 in signed notes.
const ALG_ED25519: u8 = 0x01;
/// The signature line prefix: em dash U+2014 and a space.
const SIG_PREFIX: &str = "\u{2014} ";

/// A note or checkpoint that does not parse or verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NoteError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, NoteError> {
    Err(NoteError(msg.into()))
}

/// `SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key)[:4]`.
pub fn key_hash(name: &str, public_key: &[u8]) -> [u8; 4] {
    typed_key_hash(name, ALG_ED25519, public_key)
}

/// `SHA-256(name ‖ 0x0A ‖ alg ‖ public key)[:4]`: the key id of a signed
/// note's signature of type `alg`.
pub(super) fn typed_key_hash(name: &str, alg: u8, public_key: &[u8]) -> [u8; 4] {
    vkey::typed_key_hash(name, alg, public_key)
}

/// The verifier key string `<name>+<hex key hash>+base64(0x01 ‖ public key)`.
pub fn verifier_key(name: &str, public_key: &[u8]) -> String {
    typed_verifier_key(name, ALG_ED25519, public_key)
}

/// `<name>+<hex key hash>+base64(alg ‖ public key)`.
pub(super) fn typed_verifier_key(name: &str, alg: u8, public_key: &[u8]) -> String {
    vkey::typed_verifier_key(name, alg, public_key)
}

/// Parses a verifier key into `(name, public key)`.
pub fn parse_verifier_key(vkey: &str) -> Result<(String, [u8; 32]), NoteError> {
    parse_typed_verifier_key(vkey, ALG_ED25519)
}

/// Parses a verifier key whose key type must be `alg` (an Ed25519 key).
pub(super) fn parse_typed_verifier_key(
    vkey: &str,
    alg: u8,
) -> Result<(String, [u8; 32]), NoteError> {
    vkey::parse_typed_verifier_key(vkey, alg).map_err(NoteError)
}

/// Checks a key name: non-empty, no whitespace, no `+`.
pub fn valid_name(name: &str) -> bool {
    vkey::valid_key_name(name)
}

/// One signer of a note: its key name and key pair.
pub struct Signer<'a> {
    pub name: &'a str,
    pub key: &'a Ed25519KeyPair,
}

/// Signs `text` (which must end in `\n`) and returns the full note.
pub fn sign(text: &str, signers: &[Signer<'_>]) -> String {
    let mut out = String::with_capacity(text.len() + 1 + signers.len() * 120);
    out.push_str(text);
    out.push('\n');
    for s in signers {
        let pk = s.key.public_key().as_ref();
        let mut blob = Vec::with_capacity(68);
        blob.extend_from_slice(&key_hash(s.name, pk));
        blob.extend_from_slice(s.key.sign(text.as_bytes()).as_ref());
        out.push_str(SIG_PREFIX);
        out.push_str(s.name);
        out.push(' ');
        out.push_str(&B64.encode(blob));
        out.push('\n');
    }
    out
}

/// One signature line of a note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteSignature {
    pub name: String,
    pub key_hash: [u8; 4],
    pub signature: Vec<u8>,
}

/// A note split into its signed text and its signature lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note<'a> {
    /// The signed bytes: the text including its final newline.
    pub text: &'a str,
    pub signatures: Vec<NoteSignature>,
}

/// Splits a note strictly: text ending in `\n`, one blank line, then at
/// least one `— name base64` line, each `\n`-terminated.
pub fn parse(note: &str) -> Result<Note<'_>, NoteError> {
    if note.chars().any(|c| c.is_control() && c != '\n') {
        return err("note: control character");
    }
    let Some(split) = note.rfind("\n\n") else {
        return err("note: no blank line before the signatures");
    };
    let text = &note[..=split];
    let sigs = &note[split + 2..];
    if text.len() < 2 {
        return err("note: empty text");
    }
    if !sigs.ends_with('\n') {
        return err("note: signatures must end with a newline");
    }
    let mut signatures = Vec::new();
    for line in sigs[..sigs.len() - 1].split('\n') {
        let Some(rest) = line.strip_prefix(SIG_PREFIX) else {
            return err("note: signature line must start with an em dash and a space");
        };
        let Some((name, b64)) = rest.split_once(' ') else {
            return err("note: malformed signature line");
        };
        if !valid_name(name) || b64.contains(' ') {
            return err("note: malformed signature line");
        }
        let blob = B64
            .decode(b64)
            .map_err(|_| NoteError("note: signature is not base64".into()))?;
        if blob.len() < 5 {
            return err("note: signature too short");
        }
        signatures.push(NoteSignature {
            name: name.to_string(),
            key_hash: [blob[0], blob[1], blob[2], blob[3]],
            signature: blob[4..].to_vec(),
        });
    }
    if signatures.is_empty() {
        return err("note: no signatures");
    }
    Ok(Note { text, signatures })
}

/// Ed25519 verification of `signature` over `text` by `public_key`.
pub fn verify_signature(text: &str, signature: &[u8], public_key: &[u8]) -> bool {
    UnparsedPublicKey::new(&ED25519, public_key)
        .verify(text.as_bytes(), signature)
        .is_ok()
}

impl Note<'_> {
    /// The signature by `(name, public_key)`, verified. `Ok(None)` if the note
    /// carries no line for that key; `Err` if it carries one that fails.
    pub fn verified_by(
        &self,
        name: &str,
        public_key: &[u8],
    ) -> Result<Option<&NoteSignature>, NoteError> {
        let kh = key_hash(name, public_key);
        let mut found = None;
        for s in &self.signatures {
            if s.name == name && s.key_hash == kh {
                if !verify_signature(self.text, &s.signature, public_key) {
                    return err(format!("note: signature by {name} does not verify"));
                }
                found = found.or(Some(s));
            }
        }
        Ok(found)
    }
}

// === checkpoints ===

/// A parsed tlog checkpoint body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub origin: String,
    pub size: u64,
    pub root: Hash,
}

impl Checkpoint {
    /// `<origin>\n<size>\n<base64 root>\n`.
    pub fn body(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            B64.encode(self.root)
        )
    }

    /// Parses exactly three lines; no extension lines are accepted.
    pub fn parse(text: &str) -> Result<Checkpoint, NoteError> {
        let Some(body) = text.strip_suffix('\n') else {
            return err("checkpoint: text must end with a newline");
        };
        let lines: Vec<&str> = body.split('\n').collect();
        let [origin, size, root_line] = lines.as_slice() else {
            return err("checkpoint: expected exactly three lines");
        };
        if !valid_name(origin) {
            return err("checkpoint: bad origin");
        }
        if size.is_empty()
            || !size.bytes().all(|b| b.is_ascii_digit())
            || (size.len() > 1 && size.starts_with('0'))
        {
            return err("checkpoint: bad tree size");
        }
        let size: u64 = size
            .parse()
            .map_err(|_| NoteError("checkpoint: bad tree size".into()))?;
        let raw = B64
            .decode(root_line)
            .map_err(|_| NoteError("checkpoint: root is not base64".into()))?;
        let root: Hash = raw
            .try_into()
            .map_err(|_| NoteError("checkpoint: root is not 32 bytes".into()))?;
        if B64.encode(root) != **root_line {
            return err("checkpoint: root is not canonical base64");
        }
        Ok(Checkpoint {
            origin: origin.to_string(),
            size,
            root,
        })
    }
}
