//! C2SP `tlog-cosignature` v1 (Ed25519, signature type 0x04): the statement
//! a witness signs that, as of a time, the largest consistent tree it has
//! seen for a log has this root.
//!
//! Both sides use it: `verdict witness serve` signs cosignatures, and the log
//! checks the ones it collects before it stores or serves them. A log's own
//! signature proves who wrote a checkpoint; only a cosignature by someone
//! who remembers earlier checkpoints proves the log did not roll back.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ring::signature::{Ed25519KeyPair, KeyPair as _};

use super::note::{self, NoteError};

/// Signature type byte of a timestamped Ed25519 cosignature.
const ALG_COSIGNATURE: u8 = crate::config::vkey::COSIGNATURE_KEY_TYPE;

/// `SHA-256(name ‖ 0x0A ‖ 0x04 ‖ public key)[:4]`.
pub fn key_hash(name: &str, public_key: &[u8]) -> [u8; 4] {
    note::typed_key_hash(name, ALG_COSIGNATURE, public_key)
}

/// The cosigner's verifier key `<name>+<hex key hash>+base64(0x04 ‖ key)`.
pub fn verifier_key(name: &str, public_key: &[u8]) -> String {
    note::typed_verifier_key(name, ALG_COSIGNATURE, public_key)
}

/// Parses a cosigner verifier key into `(name, public key)`.
pub fn parse_verifier_key(vkey: &str) -> Result<(String, [u8; 32]), NoteError> {
    note::parse_typed_verifier_key(vkey, ALG_COSIGNATURE)
}

/// The signed message: `cosignature/v1\ntime <t>\n` and the checkpoint body.
fn message(time: u64, body: &str) -> String {
    format!("cosignature/v1\ntime {time}\n{body}")
}

/// A note signature line (`— name base64(key hash ‖ time ‖ signature)\n`)
/// cosigning the checkpoint `body` at `time` (POSIX seconds).
pub fn sign(body: &str, time: u64, name: &str, key: &Ed25519KeyPair) -> String {
    let sig = key.sign(message(time, body).as_bytes());
    let mut blob = Vec::with_capacity(4 + 8 + 64);
    blob.extend_from_slice(&key_hash(name, key.public_key().as_ref()));
    blob.extend_from_slice(&time.to_be_bytes());
    blob.extend_from_slice(sig.as_ref());
    format!("\u{2014} {name} {}\n", B64.encode(blob))
}

/// A verified cosignature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cosignature {
    /// The signature line as received, newline included.
    pub line: String,
    /// When the witness signed, POSIX seconds.
    pub time: u64,
}

/// The cosignatures by `(name, public_key)` among the signature lines in
/// `lines` (a witness's response body) over checkpoint `body`. Lines by other
/// keys are ignored; a line by this key that does not verify is an error.
pub fn verify_lines(
    body: &str,
    lines: &str,
    name: &str,
    public_key: &[u8; 32],
) -> Result<Vec<Cosignature>, NoteError> {
    // The response concatenated to the checkpoint is a signed note.
    let whole = format!("{body}\n{lines}");
    let parsed = note::parse(&whole)?;
    let kh = key_hash(name, public_key);
    let mut out = Vec::new();
    for (s, line) in parsed.signatures.iter().zip(lines.lines()) {
        if s.name != name || s.key_hash != kh {
            continue;
        }
        let (Some(time), Some(sig)) = (s.signature.get(..8), s.signature.get(8..)) else {
            return Err(NoteError(format!("cosignature by {name} is too short")));
        };
        let mut t = [0u8; 8];
        t.copy_from_slice(time);
        let time = u64::from_be_bytes(t);
        if sig.len() != 64 || !note::verify_signature(&message(time, body), sig, public_key) {
            return Err(NoteError(format!("cosignature by {name} does not verify")));
        }
        out.push(Cosignature {
            line: format!("{line}\n"),
            time,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ring::rand::SystemRandom;

    fn pair() -> Ed25519KeyPair {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap()
    }

    #[test]
    fn a_cosignature_verifies_and_a_changed_body_or_time_does_not() {
        let k = pair();
        let pk: [u8; 32] = k.public_key().as_ref().try_into().unwrap();
        let body = "example.com/log\n5\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n";
        let line = sign(body, 1_700_000_000, "w.example/w1", &k);
        let got = verify_lines(body, &line, "w.example/w1", &pk).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].time, 1_700_000_000);
        assert_eq!(got[0].line, line);

        let other = body.replace("\n5\n", "\n6\n");
        assert!(verify_lines(&other, &line, "w.example/w1", &pk).is_err());

        // Another time in the blob than the one signed.
        let blob = B64
            .decode(line.trim_end().rsplit(' ').next().unwrap())
            .unwrap();
        let mut forged = blob.clone();
        forged[11] ^= 1;
        let forged = format!("\u{2014} w.example/w1 {}\n", B64.encode(forged));
        assert!(verify_lines(body, &forged, "w.example/w1", &pk).is_err());

        // Lines by unknown keys are ignored.
        let stranger = sign(body, 1, "w.example/w2", &pair());
        assert!(verify_lines(body, &stranger, "w.example/w1", &pk)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn verifier_keys_round_trip_and_carry_the_cosignature_type() {
        let k = pair();
        let vkey = verifier_key("w.example/w1", k.public_key().as_ref());
        let (name, pk) = parse_verifier_key(&vkey).unwrap();
        assert_eq!(name, "w.example/w1");
        assert_eq!(pk.as_slice(), k.public_key().as_ref());
        // A log's (type 0x01) key is not a cosigner key.
        let log_key = note::verifier_key("w.example/w1", k.public_key().as_ref());
        assert!(parse_verifier_key(&log_key).is_err());
    }

    #[test]
    fn a_verifier_key_whose_base64_holds_a_plus_parses() {
        // About half of all keys have a '+' in their base64; find one.
        let (k, vkey) = (0..200)
            .map(|_| {
                let k = pair();
                let v = verifier_key("w.example/w1", k.public_key().as_ref());
                (k, v)
            })
            .find(|(_, v)| v.splitn(3, '+').nth(2).is_some_and(|b| b.contains('+')))
            .unwrap();
        assert_eq!(
            parse_verifier_key(&vkey).unwrap().1,
            k.public_key().as_ref()
        );
        let (k, log_key) = (0..200)
            .map(|_| {
                let k = pair();
                let v = note::verifier_key("log.example", k.public_key().as_ref());
                (k, v)
            })
            .find(|(_, v)| v.splitn(3, '+').nth(2).is_some_and(|b| b.contains('+')))
            .unwrap();
        assert_eq!(
            note::parse_verifier_key(&log_key).unwrap().1,
            k.public_key().as_ref()
        );
    }
}
