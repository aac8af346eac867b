//! `[audit] export_*`: where every decision record is shipped, in batches,
//! as it is committed (the decision log a platform keeps off the pod), and
//! how. Validated when the config loads, each error naming its key. The
//! `Authorization` value comes from an environment variable and never
//! reaches a log line: [`ExportConfig`] prints without it.

use std::time::Duration;

use super::notify::http_url;
use super::{duration, origin_only, ConfigError};

/// `export_batch` when unset.
pub const DEFAULT_BATCH: usize = 500;
/// The largest `export_batch`.
pub const MAX_BATCH: usize = 10_000;

/// Where and how the decision log is shipped.
#[derive(Clone)]
pub struct ExportConfig {
    /// `export_url`: an absolute `http://` or `https://` URL that takes a
    /// `POST` of JSON lines.
    pub url: http::Uri,
    /// `export_batch`: the most records in one `POST`.
    pub batch: usize,
    /// `export_interval`: how often the log is looked at for new records
    /// once everything committed has been shipped.
    pub interval: Duration,
    /// `export_timeout`: the longest one `POST` may take, answer included.
    pub timeout: Duration,
    /// `export_backoff`: the wait after the first failed `POST`; it doubles
    /// after each further failure, up to [`MAX_BACKOFF`].
    pub backoff: Duration,
    /// The value of the environment variable `export_authorization_env`
    /// names, sent as the `Authorization` header of every `POST`.
    pub authorization: Option<String>,
}

/// The longest wait between two tries.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl std::fmt::Debug for ExportConfig {
    /// The URL's path and query may be a credential themselves, and the
    /// authorization is one: neither is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportConfig")
            .field("url", &origin_only(&self.url))
            .field("batch", &self.batch)
            .field("interval", &self.interval)
            .field("timeout", &self.timeout)
            .field("backoff", &self.backoff)
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

/// The `[audit] export_*` keys as the file gives them.
#[derive(Default)]
pub(super) struct FileExport {
    pub url: Option<String>,
    pub batch: Option<usize>,
    pub interval: Option<String>,
    pub timeout: Option<String>,
    pub backoff: Option<String>,
    pub authorization_env: Option<String>,
}

/// Validates the keys; `None` when `export_url` is unset (and so is every
/// other export key).
pub(super) fn export_config(
    f: FileExport,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<ExportConfig>, ConfigError> {
    let invalid = |msg: String| ConfigError::Invalid(msg);
    let Some(url_text) = f.url else {
        let stray = [
            ("export_batch", f.batch.is_some()),
            ("export_interval", f.interval.is_some()),
            ("export_timeout", f.timeout.is_some()),
            ("export_backoff", f.backoff.is_some()),
            ("export_authorization_env", f.authorization_env.is_some()),
        ];
        if let Some((key, _)) = stray.iter().find(|(_, set)| *set) {
            return Err(invalid(format!(
                "audit.{key}: set without audit.export_url, so nothing would use it"
            )));
        }
        return Ok(None);
    };
    let url = http_url(
        "audit.export_url",
        &url_text,
        "name an Authorization value with audit.export_authorization_env instead",
    )?;
    let batch = f.batch.unwrap_or(DEFAULT_BATCH);
    if !(1..=MAX_BATCH).contains(&batch) {
        return Err(invalid(format!(
            "audit.export_batch: must be 1 to {MAX_BATCH}, got {batch}"
        )));
    }
    let positive = |key: &str, d: Duration| {
        if d.is_zero() {
            Err(invalid(format!("{key}: must be greater than 0")))
        } else {
            Ok(d)
        }
    };
    let interval = positive(
        "audit.export_interval",
        duration("audit.export_interval", f.interval, "1s")?,
    )?;
    let timeout = positive(
        "audit.export_timeout",
        duration("audit.export_timeout", f.timeout, "10s")?,
    )?;
    let backoff = positive(
        "audit.export_backoff",
        duration("audit.export_backoff", f.backoff, "500ms")?,
    )?;
    let authorization = match f.authorization_env {
        None => None,
        Some(name) => {
            let key = "audit.export_authorization_env";
            if name.is_empty() {
                return Err(invalid(format!("{key}: must name an environment variable")));
            }
            let v = env(&name).ok_or_else(|| {
                invalid(format!("{key}: the environment variable {name} is not set"))
            })?;
            let v = v.trim().to_string();
            if v.is_empty() || http::HeaderValue::from_str(&v).is_err() {
                return Err(invalid(format!(
                    "{key}: the value of {name} is empty or not a valid header value"
                )));
            }
            Some(v)
        }
    };
    Ok(Some(ExportConfig {
        url,
        batch,
        interval,
        timeout,
        backoff: backoff.min(MAX_BACKOFF),
        authorization,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(url: Option<&str>) -> FileExport {
        FileExport {
            url: url.map(str::to_string),
            ..FileExport::default()
        }
    }

    fn err(f: FileExport, env: &dyn Fn(&str) -> Option<String>) -> String {
        match export_config(f, env) {
            Err(e) => e.to_string(),
            Ok(c) => panic!("accepted: {c:?}"),
        }
    }

    #[test]
    fn unset_url_is_off_and_stray_keys_are_named() {
        assert!(export_config(file(None), &|_| None).unwrap().is_none());
        let mut f = file(None);
        f.batch = Some(10);
        assert!(err(f, &|_| None).contains("audit.export_batch: set without audit.export_url"));
    }

    #[test]
    fn defaults_and_bounds() {
        let c = export_config(file(Some("http://127.0.0.1:9/ingest")), &|_| None)
            .unwrap()
            .unwrap();
        assert_eq!(c.batch, DEFAULT_BATCH);
        assert_eq!(c.interval, Duration::from_secs(1));
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert_eq!(c.backoff, Duration::from_millis(500));
        assert!(c.authorization.is_none());
        let mut f = file(Some("http://127.0.0.1:9/"));
        f.batch = Some(MAX_BATCH + 1);
        assert!(err(f, &|_| None).contains("audit.export_batch: must be 1 to 10000"));
        let mut f = file(Some("http://127.0.0.1:9/"));
        f.interval = Some("0s".into());
        assert!(err(f, &|_| None).contains("audit.export_interval: must be greater than 0"));
        assert!(err(file(Some("ftp://x/")), &|_| None).contains("audit.export_url"));
        assert!(err(file(Some("http://u:p@x/")), &|_| None)
            .contains("export_authorization_env instead"));
    }

    #[test]
    fn authorization_comes_from_the_environment_and_is_never_printed() {
        let mut f = file(Some("https://logs.example/v1"));
        f.authorization_env = Some("SHIP_TOKEN".into());
        let env = |n: &str| (n == "SHIP_TOKEN").then(|| "Bearer s3cret\n".to_string());
        let c = export_config(f, &env).unwrap().unwrap();
        assert_eq!(c.authorization.as_deref(), Some("Bearer s3cret"));
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("/v1"),
            "{shown}"
        );
        let mut f = file(Some("https://logs.example/v1"));
        f.authorization_env = Some("UNSET".into());
        assert!(err(f, &|_| None).contains("the environment variable UNSET is not set"));
    }
}
