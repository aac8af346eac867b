//! Credentials of a held request, sealed at rest.
//!
//! A held request is stored so that an approval can forward it byte for
//! byte, and its `Authorization` and `Cookie` headers (and any header its
//! route names in `credential_headers`) are live credentials of
//! the caller. In plain text in the database they would outlive the hold
//! and travel with every copy or backup of the file. So the values of those
//! headers are sealed with AES-256-GCM under a key derived from the data
//! dir's secret (mode 0600, outside the database), with a fresh random nonce
//! per value and the review id and header name as associated data, so a
//! sealed value cannot be moved to another review or header. A value that
//! does not open (wrong key, tampered bytes) is never forwarded.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom as _, SystemRandom};

/// Headers whose values are sealed.
pub const SEALED_HEADERS: [&str; 3] = ["authorization", "cookie", "proxy-authorization"];

/// What a sealed value starts with: never the start of a header value
/// (header values cannot hold a NUL byte).
const MAGIC: &[u8] = b"\0vs1";

/// The label the review key is derived under from the data dir's secret.
pub const KEY_LABEL: &[u8] = b"verdict/review-seal/v1";

/// Seals and opens header values.
pub struct Sealer {
    key: LessSafeKey,
    rng: SystemRandom,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(..)")
    }
}

/// A sealed value that does not open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsealable;

impl Sealer {
    pub fn new(key: &[u8; 32]) -> Result<Sealer, Unsealable> {
        let unbound = UnboundKey::new(&AES_256_GCM, key).map_err(|_| Unsealable)?;
        Ok(Sealer {
            key: LessSafeKey::new(unbound),
            rng: SystemRandom::new(),
        })
    }

    /// Whether `name` (lowercase) is a header whose value is sealed.
    pub fn applies(name: &str) -> bool {
        SEALED_HEADERS.contains(&name)
    }

    /// Whether a stored value was sealed (a route's `credential_headers`
    /// are sealed too, so the name alone does not say).
    pub fn is_sealed(stored: &[u8]) -> bool {
        stored.starts_with(MAGIC)
    }

    /// `MAGIC ‖ nonce ‖ ciphertext+tag` of `value`, bound to the review and
    /// the header name. `None` only when the system RNG fails.
    pub fn seal(&self, review_id: &str, name: &str, value: &[u8]) -> Option<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut buf = value.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(review_id, name)),
                &mut buf,
            )
            .ok()?;
        let mut out = Vec::with_capacity(MAGIC.len() + NONCE_LEN + buf.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&buf);
        Some(out)
    }

    /// The plain value of a stored one: sealed values are opened, others
    /// (rows from before sealing) are returned as they are.
    pub fn open(&self, review_id: &str, name: &str, stored: &[u8]) -> Result<Vec<u8>, Unsealable> {
        let Some(rest) = stored.strip_prefix(MAGIC) else {
            return Ok(stored.to_vec());
        };
        if rest.len() < NONCE_LEN {
            return Err(Unsealable);
        }
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| Unsealable)?;
        let mut buf = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(aad(review_id, name)), &mut buf)
            .map_err(|_| Unsealable)?;
        Ok(plain.to_vec())
    }
}

fn aad(review_id: &str, name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(review_id.len() + name.len() + 1);
    out.extend_from_slice(review_id.as_bytes());
    out.push(0);
    out.extend_from_slice(name.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_open_only_where_they_were_sealed() {
        let s = Sealer::new(&[7u8; 32]).unwrap();
        let sealed = s
            .seal("r1", "authorization", b"Bearer secret-token")
            .unwrap();
        assert!(!sealed.windows(12).any(|w| w == b"secret-token"));
        assert_eq!(
            s.open("r1", "authorization", &sealed).unwrap(),
            b"Bearer secret-token"
        );
        // Another review, another header, another key, a flipped bit: no.
        assert_eq!(s.open("r2", "authorization", &sealed), Err(Unsealable));
        assert_eq!(s.open("r1", "cookie", &sealed), Err(Unsealable));
        assert_eq!(
            Sealer::new(&[8u8; 32])
                .unwrap()
                .open("r1", "authorization", &sealed),
            Err(Unsealable)
        );
        let mut flipped = sealed.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(s.open("r1", "authorization", &flipped), Err(Unsealable));
        // Two seals of one value differ (fresh nonces).
        assert_ne!(
            sealed,
            s.seal("r1", "authorization", b"Bearer secret-token")
                .unwrap()
        );
        // A plain value from before sealing reads as itself.
        assert_eq!(
            s.open("r1", "authorization", b"Bearer old").unwrap(),
            b"Bearer old"
        );
        assert!(Sealer::applies("cookie") && !Sealer::applies("x-customer-id"));
    }
}
