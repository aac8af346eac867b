//! Console sign-ins: server-side sessions behind an opaque cookie, and the
//! CSRF tokens their forms carry.
//!
//! A reviewer signs in once with an API key; the browser then holds only a
//! random session id (`HttpOnly`, `SameSite=Strict`), never the key. The key
//! stays in this process's memory so that every request is authenticated
//! again against the current keys file: removing a key from the file (and
//! reloading) ends its sessions at once. Sessions live in memory only, so a
//! restart signs everyone out, which is the safe direction.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ring::rand::{SecureRandom as _, SystemRandom};
use subtle::ConstantTimeEq as _;

/// The session cookie's name.
pub const COOKIE: &str = "verdict_console";
/// The sign-in form's double-submit cookie (no session exists yet).
pub const SIGNIN_COOKIE: &str = "verdict_console_signin";
/// The most sessions held at once; a sign-in beyond it first drops the
/// expired ones, then the oldest.
pub const MAX_SESSIONS: usize = 10_000;

/// One signed-in reviewer.
#[derive(Clone)]
pub struct Session {
    /// The API key the reviewer signed in with (re-checked on every request).
    pub key: String,
    /// Every form of this session carries it.
    pub csrf: String,
    pub created: Instant,
    pub expires: Instant,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

/// The sessions of one API listener.
#[derive(Debug)]
pub struct Sessions {
    ttl: Duration,
    rng: SystemRandom,
    by_id: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    pub fn new(ttl: Duration) -> Sessions {
        Sessions {
            ttl,
            rng: SystemRandom::new(),
            by_id: Mutex::new(HashMap::new()),
        }
    }

    /// How long a sign-in lasts.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// 32 random bytes as hex; `None` only when the system RNG fails.
    pub fn token(&self) -> Option<String> {
        let mut bytes = [0u8; 32];
        self.rng.fill(&mut bytes).ok()?;
        Some(hex::encode(bytes))
    }

    /// Starts a session for `key`; returns its id.
    pub fn start(&self, key: String, now: Instant) -> Option<String> {
        let id = self.token()?;
        let csrf = self.token()?;
        let mut map = self.lock();
        if map.len() >= MAX_SESSIONS {
            map.retain(|_, s| s.expires > now);
        }
        if map.len() >= MAX_SESSIONS {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.created)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(
            id.clone(),
            Session {
                key,
                csrf,
                created: now,
                expires: now + self.ttl,
            },
        );
        Some(id)
    }

    /// The live session with this id; an expired one is dropped.
    pub fn get(&self, id: &str, now: Instant) -> Option<Session> {
        let mut map = self.lock();
        match map.get(id) {
            Some(s) if s.expires > now => Some(s.clone()),
            Some(_) => {
                map.remove(id);
                None
            }
            None => None,
        }
    }

    pub fn end(&self, id: &str) {
        self.lock().remove(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether a form's token is the expected one, in constant time.
pub fn tokens_match(expected: &str, got: Option<&str>) -> bool {
    let Some(got) = got else { return false };
    !expected.is_empty() && expected.as_bytes().ct_eq(got.as_bytes()).into()
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A `Set-Cookie` value for the console's path.
pub fn set_cookie(name: &str, value: &str, max_age: Duration, secure: bool) -> String {
    format!(
        "{name}={value}; Path=/console; Max-Age={}; HttpOnly; SameSite=Strict{}",
        max_age.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_and_end() {
        let s = Sessions::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let id = s.start("k".into(), t0).unwrap();
        assert_eq!(id.len(), 64);
        let got = s.get(&id, t0 + Duration::from_secs(59)).unwrap();
        assert_eq!(got.key, "k");
        assert_eq!(got.csrf.len(), 64);
        assert_ne!(got.csrf, id);
        assert!(s.get(&id, t0 + Duration::from_secs(60)).is_none());
        assert!(s.get(&id, t0).is_none(), "an expired session is dropped");
        let id = s.start("k".into(), t0).unwrap();
        s.end(&id);
        assert!(s.get(&id, t0).is_none());
        assert!(s.get("nope", t0).is_none());
    }

    #[test]
    fn tokens_and_cookies() {
        assert!(tokens_match("abc", Some("abc")));
        assert!(!tokens_match("abc", Some("abd")));
        assert!(!tokens_match("abc", None));
        assert!(!tokens_match("", Some("")));
        let mut h = http::HeaderMap::new();
        h.append(
            http::header::COOKIE,
            "a=1; verdict_console=xyz".parse().unwrap(),
        );
        h.append(http::header::COOKIE, "b=2".parse().unwrap());
        assert_eq!(cookie(&h, COOKIE), Some("xyz"));
        assert_eq!(cookie(&h, "b"), Some("2"));
        assert_eq!(cookie(&h, "c"), None);
        let c = set_cookie(COOKIE, "v", Duration::from_secs(10), true);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.ends_with("; Secure"));
        assert!(!set_cookie(COOKIE, "v", Duration::from_secs(10), false).contains("Secure"));
    }
}
