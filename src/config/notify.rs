//! `[review] notify_*` and `console_url`: where review notifications go and
//! the secret they are signed with, validated when the config loads.
//!
//! The keys live in their own file because they are read differently from
//! the rest of `[review]`: the secret may come from the file, from an
//! environment variable or from a file of its own, and it must never reach
//! a log line, so [`NotifyConfig`] and [`NotifySecret`] print without it.
//! Every error names the key it is about.

use std::path::PathBuf;
use std::time::Duration;

use super::{duration, ConfigError};

/// The shortest secret accepted: an HMAC key much shorter than its 32-byte
/// output is a guessable password, not a key.
pub const MIN_SECRET_BYTES: usize = 16;

/// `[review] notify_attempts` when unset.
pub const DEFAULT_ATTEMPTS: u32 = 5;
/// The most attempts `notify_attempts` may ask for.
pub const MAX_ATTEMPTS: u32 = 20;
/// `[review] notify_queue` when unset.
pub const DEFAULT_QUEUE: usize = 1000;
/// The largest `notify_queue`.
pub const MAX_QUEUE: usize = 100_000;

/// Where notifications of held and resolved reviews are posted.
#[derive(Clone)]
pub struct NotifyConfig {
    /// `notify_url`: an absolute `http://` or `https://` URL.
    pub url: http::Uri,
    pub secret: NotifySecret,
    /// `console_url`: the base of the console link in each notification;
    /// `None` derives it from the API's address when the server starts.
    pub console_url: Option<String>,
    /// `notify_attempts`: tries per notification, the first included.
    pub attempts: u32,
    /// `notify_backoff`: the wait after the first failed attempt; it
    /// doubles after each further one.
    pub backoff: Duration,
    /// `notify_timeout`: the longest one attempt may take.
    pub timeout: Duration,
    /// `notify_queue`: notifications waiting to be sent; more are dropped.
    pub queue: usize,
}

/// The HMAC key of the notifications. Prints as `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct NotifySecret(Vec<u8>);

impl NotifySecret {
    pub fn new(bytes: Vec<u8>) -> NotifySecret {
        NotifySecret(bytes)
    }

    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for NotifySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl std::fmt::Debug for NotifyConfig {
    /// The URL's path and query may be a credential themselves (many chat
    /// webhooks are), so only its scheme and authority are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyConfig")
            .field("url", &origin_only(&self.url))
            .field("secret", &self.secret)
            .field("console_url", &self.console_url)
            .field("attempts", &self.attempts)
            .field("backoff", &self.backoff)
            .field("timeout", &self.timeout)
            .field("queue", &self.queue)
            .finish()
    }
}

/// `scheme://authority` of a URL, for logs.
pub fn origin_only(uri: &http::Uri) -> String {
    format!(
        "{}://{}",
        uri.scheme_str().unwrap_or("?"),
        uri.authority().map(|a| a.as_str()).unwrap_or("?")
    )
}

/// The `[review]` keys this file reads, as the file gives them. No
/// `Debug`: it holds the secret in the clear.
#[derive(Default)]
pub(super) struct FileNotify {
    pub url: Option<String>,
    pub secret: Option<String>,
    pub secret_env: Option<String>,
    pub secret_file: Option<PathBuf>,
    pub console_url: Option<String>,
    pub attempts: Option<u32>,
    pub backoff: Option<String>,
    pub timeout: Option<String>,
    pub queue: Option<usize>,
}

/// Validates the keys; `None` when `notify_url` is unset (and so is every
/// other notify key).
pub(super) fn notify_config(
    f: FileNotify,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<NotifyConfig>, ConfigError> {
    let invalid = |msg: String| ConfigError::Invalid(msg);
    let Some(url_text) = f.url else {
        let stray = [
            ("notify_secret", f.secret.is_some()),
            ("notify_secret_env", f.secret_env.is_some()),
            ("notify_secret_file", f.secret_file.is_some()),
            ("console_url", f.console_url.is_some()),
            ("notify_attempts", f.attempts.is_some()),
            ("notify_backoff", f.backoff.is_some()),
            ("notify_timeout", f.timeout.is_some()),
            ("notify_queue", f.queue.is_some()),
        ];
        if let Some((key, _)) = stray.iter().find(|(_, set)| *set) {
            return Err(invalid(format!(
                "review.{key}: set without review.notify_url, so nothing would use it"
            )));
        }
        return Ok(None);
    };
    let url = http_url("review.notify_url", &url_text, SIGNED)?;
    let secret = secret(f.secret, f.secret_env, f.secret_file, env)?;
    let console_url = match f.console_url {
        None => None,
        Some(text) => {
            let base = text.trim_end_matches('/');
            let uri = http_url("review.console_url", base, SIGNED)?;
            if uri.query().is_some() || text.contains('#') {
                return Err(invalid(format!(
                    "review.console_url: {text:?} must be a base URL without a query or fragment"
                )));
            }
            Some(base.to_string())
        }
    };
    let attempts = f.attempts.unwrap_or(DEFAULT_ATTEMPTS);
    if !(1..=MAX_ATTEMPTS).contains(&attempts) {
        return Err(invalid(format!(
            "review.notify_attempts: must be 1 to {MAX_ATTEMPTS}, got {attempts}"
        )));
    }
    let backoff = duration("review.notify_backoff", f.backoff, "1s")?;
    let timeout = duration("review.notify_timeout", f.timeout, "5s")?;
    if timeout.is_zero() {
        return Err(invalid(
            "review.notify_timeout: must be greater than 0".into(),
        ));
    }
    let queue = f.queue.unwrap_or(DEFAULT_QUEUE);
    if !(1..=MAX_QUEUE).contains(&queue) {
        return Err(invalid(format!(
            "review.notify_queue: must be 1 to {MAX_QUEUE}, got {queue}"
        )));
    }
    Ok(Some(NotifyConfig {
        url,
        secret,
        console_url,
        attempts,
        backoff,
        timeout,
        queue,
    }))
}

/// How calls to the notify URL are authenticated.
const SIGNED: &str = "notifications are signed with review.notify_secret instead";

/// An absolute http(s) URL with a host.
/// `instead` says how calls to it are authenticated, for the error when the
/// URL carries credentials.
pub(super) fn http_url(key: &str, text: &str, instead: &str) -> Result<http::Uri, ConfigError> {
    let bad = || {
        ConfigError::Invalid(format!(
            "{key}: must be an http:// or https:// URL with a host, got {text:?}"
        ))
    };
    let uri: http::Uri = text.parse().map_err(|_| bad())?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none_or(str::is_empty) {
        return Err(bad());
    }
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(ConfigError::Invalid(format!(
            "{key}: must not carry credentials (user:password@); {instead}"
        )));
    }
    Ok(uri)
}

/// Exactly one of `notify_secret`, `notify_secret_env` (the name of an
/// environment variable) and `notify_secret_file`, read now. Whitespace
/// around the value (a file's trailing newline) is trimmed.
fn secret(
    inline: Option<String>,
    env_name: Option<String>,
    file: Option<PathBuf>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<NotifySecret, ConfigError> {
    let invalid = |msg: String| ConfigError::Invalid(msg);
    let given = [inline.is_some(), env_name.is_some(), file.is_some()]
        .iter()
        .filter(|s| **s)
        .count();
    if given != 1 {
        return Err(invalid(format!(
            "review.notify_secret: review.notify_url needs exactly one of notify_secret, notify_secret_env or notify_secret_file ({given} set)"
        )));
    }
    let (key, value) = if let Some(v) = inline {
        ("review.notify_secret", v)
    } else if let Some(name) = env_name {
        let key = "review.notify_secret_env";
        if name.is_empty() {
            return Err(invalid(format!("{key}: must name an environment variable")));
        }
        let v = env(&name)
            .ok_or_else(|| invalid(format!("{key}: the environment variable {name} is not set")))?;
        (key, v)
    } else if let Some(path) = file {
        let key = "review.notify_secret_file";
        let v = std::fs::read_to_string(&path)
            .map_err(|e| invalid(format!("{key}: cannot read {}: {e}", path.display())))?;
        (key, v)
    } else {
        return Err(invalid("review.notify_secret: no secret given".into()));
    };
    let value = value.trim();
    if value.len() < MIN_SECRET_BYTES {
        return Err(invalid(format!(
            "{key}: the secret must be at least {MIN_SECRET_BYTES} bytes"
        )));
    }
    Ok(NotifySecret(value.as_bytes().to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123";

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn base() -> FileNotify {
        FileNotify {
            url: Some("https://hooks.example.com/verdict/T0/secret-path".into()),
            secret: Some(SECRET.into()),
            ..Default::default()
        }
    }

    fn err(f: FileNotify) -> String {
        notify_config(f, &no_env).unwrap_err().to_string()
    }

    #[test]
    fn defaults_and_debug_without_secrets() {
        let c = notify_config(base(), &no_env).unwrap().unwrap();
        assert_eq!(c.attempts, 5);
        assert_eq!(c.backoff, Duration::from_secs(1));
        assert_eq!(c.timeout, Duration::from_secs(5));
        assert_eq!(c.queue, 1000);
        assert_eq!(c.console_url, None);
        assert_eq!(c.secret.expose(), SECRET.as_bytes());
        let printed = format!("{c:?}");
        assert!(!printed.contains(SECRET), "{printed}");
        assert!(!printed.contains("secret-path"), "{printed}");
        assert!(printed.contains("https://hooks.example.com"), "{printed}");
        assert!(notify_config(FileNotify::default(), &no_env)
            .unwrap()
            .is_none());
    }

    #[test]
    fn secrets_come_from_one_place() {
        let env = |name: &str| (name == "HOOK_SECRET").then(|| format!(" {SECRET}\n"));
        let from_env = FileNotify {
            secret: None,
            secret_env: Some("HOOK_SECRET".into()),
            ..base()
        };
        let c = notify_config(from_env, &env).unwrap().unwrap();
        assert_eq!(c.secret.expose(), SECRET.as_bytes());

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hook.secret");
        std::fs::write(&path, format!("{SECRET}\n")).unwrap();
        let from_file = FileNotify {
            secret: None,
            secret_file: Some(path),
            ..base()
        };
        let c = notify_config(from_file, &no_env).unwrap().unwrap();
        assert_eq!(c.secret.expose(), SECRET.as_bytes());

        let missing = FileNotify {
            secret: None,
            secret_env: Some("NOPE".into()),
            ..base()
        };
        assert!(err(missing).starts_with("review.notify_secret_env:"));
        let none = FileNotify {
            secret: None,
            ..base()
        };
        assert!(err(none).starts_with("review.notify_secret:"));
        let two = FileNotify {
            secret_env: Some("HOOK_SECRET".into()),
            ..base()
        };
        assert!(err(two).contains("exactly one"));
        let short = FileNotify {
            secret: Some("short".into()),
            ..base()
        };
        let e = err(short);
        assert!(e.starts_with("review.notify_secret:"), "{e}");
        assert!(!e.contains("short\""), "the secret is not echoed: {e}");
    }

    #[test]
    fn bad_values_name_their_key() {
        // `base()` with one field changed.
        let with = |change: fn(&mut FileNotify)| {
            let mut f = base();
            change(&mut f);
            f
        };
        let cases: Vec<(FileNotify, &str)> = vec![
            (
                with(|f| f.url = Some("ftp://x/hook".into())),
                "review.notify_url:",
            ),
            (
                with(|f| f.url = Some("/relative".into())),
                "review.notify_url:",
            ),
            (
                with(|f| f.url = Some("http://user:pw@127.0.0.1:9/hook".into())),
                "review.notify_url:",
            ),
            (
                with(|f| f.console_url = Some("console".into())),
                "review.console_url:",
            ),
            (
                with(|f| f.console_url = Some("https://verdict.internal/?x=1".into())),
                "review.console_url:",
            ),
            (with(|f| f.attempts = Some(0)), "review.notify_attempts:"),
            (
                with(|f| f.backoff = Some("soon".into())),
                "review.notify_backoff:",
            ),
            (
                with(|f| f.timeout = Some("0".into())),
                "review.notify_timeout:",
            ),
            (with(|f| f.queue = Some(0)), "review.notify_queue:"),
            (with(|f| f.url = None), "review.notify_secret:"),
        ];
        for (f, key) in cases {
            let e = err(f);
            assert!(e.starts_with(key), "{key}: {e}");
        }
    }

    #[test]
    fn console_url_loses_its_trailing_slash() {
        let f = FileNotify {
            console_url: Some("https://verdict.internal:8443/".into()),
            ..base()
        };
        let c = notify_config(f, &no_env).unwrap().unwrap();
        assert_eq!(
            c.console_url.as_deref(),
            Some("https://verdict.internal:8443")
        );
    }
}
