//! Verifier keys as a config file writes them (`[[audit.witnesses]] vkey`):
//! the C2SP signed-note form `<name>+<hex key hash>+base64(type ‖ key)`.
//!
//! It lives here so that a bad key is a config error, named with its field,
//! while config imports no part of the crate but the engine's vocabulary;
//! the audit log's notes and cosignatures (`audit::note`, `audit::cosign`)
//! build on these functions, so the log and its config read a key in one
//! way.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

/// The key type of a witness's cosigning key (C2SP tlog-cosignature).
pub const COSIGNATURE_KEY_TYPE: u8 = 0x04;

/// `SHA-256(name ‖ 0x0A ‖ alg ‖ public key)[:4]`: the key id of a signed
/// note's signature of type `alg`.
pub fn typed_key_hash(name: &str, alg: u8, public_key: &[u8]) -> [u8; 4] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(name.as_bytes());
    ctx.update(b"\n");
    ctx.update(&[alg]);
    ctx.update(public_key);
    let h = ctx.finish();
    let h = h.as_ref();
    [h[0], h[1], h[2], h[3]]
}

/// `<name>+<hex key hash>+base64(alg ‖ public key)`.
pub fn typed_verifier_key(name: &str, alg: u8, public_key: &[u8]) -> String {
    let mut raw = Vec::with_capacity(33);
    raw.push(alg);
    raw.extend_from_slice(public_key);
    format!(
        "{name}+{}+{}",
        hex::encode(typed_key_hash(name, alg, public_key)),
        B64.encode(raw)
    )
}

/// Parses a verifier key whose key type must be `alg` (an Ed25519 key) into
/// `(name, public key)`; the error says what is wrong with it.
pub fn parse_typed_verifier_key(vkey: &str, alg: u8) -> Result<(String, [u8; 32]), String> {
    // The base64 key may itself hold '+': split at the first two only.
    let mut parts = vkey.splitn(3, '+');
    let (Some(name), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
        return Err("verifier key: expected name+id+key".into());
    };
    if !valid_key_name(name) {
        return Err("verifier key: bad name".into());
    }
    let raw = B64
        .decode(key)
        .map_err(|_| "verifier key: bad base64".to_string())?;
    if raw.len() != 33 || raw[0] != alg {
        return Err(format!(
            "verifier key: not an Ed25519 key of type {alg:#04x}"
        ));
    }
    let mut pk = [0u8; 32];
    pk.copy_from_slice(&raw[1..]);
    if hex::encode(typed_key_hash(name, alg, &pk)) != id {
        return Err("verifier key: key hash does not match".into());
    }
    Ok((name.to_string(), pk))
}

/// Checks a key name: non-empty, no whitespace, no `+`.
pub fn valid_key_name(name: &str) -> bool {
    !name.is_empty()
        && !name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '+')
}
