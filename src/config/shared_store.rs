//! `[store]`: where the state that people share lives. Reviews (and their
//! held requests) and batch jobs stay in the data dir's SQLite file by
//! default; with a `postgres://` URL they live in a PostgreSQL database
//! that several replicas share, so a reviewer sees every replica's held
//! calls in one queue and any replica runs and answers for any job.
//!
//! The keys live in their own file because the password is read
//! differently from the rest: from the URL, from an environment variable or
//! from a file of its own, and it must never reach a log line, so
//! [`PostgresConfig`] prints without it. Every error names its key.

use std::path::PathBuf;
use std::time::Duration;

use super::{duration, ConfigError};

/// `[store] pool_size` when unset.
pub const DEFAULT_POOL_SIZE: usize = 16;
/// The smallest `pool_size`: a resolution holds the turn's connection
/// while its store call takes another, and the lease, the job workers and
/// the checkpoints need theirs.
pub const MIN_POOL_SIZE: usize = 4;
/// The largest `pool_size`.
pub const MAX_POOL_SIZE: usize = 256;
/// The environment variable read for the password when `password_env` is
/// unset and neither the URL nor `password_file` gives one.
pub const DEFAULT_PASSWORD_ENV: &str = "VERDICT_STORE_PASSWORD";

/// Which store holds reviews.
#[derive(Debug, Clone, Default)]
pub enum StoreConfig {
    /// `sqlite:` (the default): the data dir's `verdict.db`, one replica.
    #[default]
    Sqlite,
    /// `postgres://…`: a database several replicas share.
    Postgres(Box<PostgresConfig>),
}

/// A PostgreSQL store. Prints without its password.
#[derive(Clone)]
pub struct PostgresConfig {
    /// The parsed URL, password included when one was given anywhere.
    pub pg: tokio_postgres::Config,
    /// The URL as written, with any password in it replaced by `***`: for
    /// logs and `/health/detailed`.
    pub display: String,
    /// `ca_file`: PEM roots that the server's certificate must chain to,
    /// for `sslmode=require` (the system's roots when unset).
    pub ca_file: Option<PathBuf>,
    /// `pool_size`: connections this replica keeps at most.
    pub pool_size: usize,
    /// `lease`: how long a replica counts as alive after it last renewed
    /// its lease (it renews every third of it). An approved review held by
    /// a replica whose lease lapsed may be forwarded by another.
    pub lease: Duration,
}

impl std::fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &self.display)
            .field("ca_file", &self.ca_file)
            .field("pool_size", &self.pool_size)
            .field("lease", &self.lease)
            .finish()
    }
}

/// The `[store]` table as written.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileStore {
    pub url: Option<String>,
    pub password_env: Option<String>,
    pub password_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    pub pool_size: Option<usize>,
    pub lease: Option<String>,
}

/// Validates `[store]`; `env` reads an environment variable (a parameter so
/// tests need not set real ones).
pub(super) fn store_config(
    f: FileStore,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<StoreConfig, ConfigError> {
    let invalid = |m: String| ConfigError::Invalid(m);
    let url = match f.url.as_deref().map(str::trim) {
        None | Some("sqlite:") => {
            if f.password_env.is_some()
                || f.password_file.is_some()
                || f.ca_file.is_some()
                || f.pool_size.is_some()
                || f.lease.is_some()
            {
                return Err(invalid(
                    "store: password_env, password_file, ca_file, pool_size and lease apply only \
                     to a postgres:// url"
                        .into(),
                ));
            }
            return Ok(StoreConfig::Sqlite);
        }
        Some(u) if u.starts_with("postgres://") || u.starts_with("postgresql://") => u,
        Some(u) => {
            return Err(invalid(format!(
                "store.url: {:?} must be `sqlite:` or start with postgres://",
                redact(u)
            )))
        }
    };
    let mut pg: tokio_postgres::Config = url.parse().map_err(|e: tokio_postgres::Error| {
        let why = match bad_param(url) {
            Some(param) => format!("the parameter {param:?}: {e}"),
            None => e.to_string(),
        };
        invalid(format!("store.url: {}: {why}", redact(url)))
    })?;
    if pg.get_password().is_none() {
        let password = match (&f.password_file, &f.password_env) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "store: set password_file or password_env, not both".into(),
                ))
            }
            (Some(path), None) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    invalid(format!("store.password_file: {}: {e}", path.display()))
                })?;
                let text = text.trim_end_matches(['\r', '\n']).to_string();
                if text.is_empty() {
                    return Err(invalid(format!(
                        "store.password_file: {} is empty",
                        path.display()
                    )));
                }
                Some(text)
            }
            (None, Some(name)) => Some(env(name).ok_or_else(|| {
                invalid(format!(
                    "store.password_env: the environment variable {name} is not set"
                ))
            })?),
            (None, None) => env(DEFAULT_PASSWORD_ENV),
        };
        if let Some(p) = password {
            pg.password(p);
        }
    }
    if pg.get_hosts().is_empty() {
        return Err(invalid(format!("store.url: {} names no host", redact(url))));
    }
    if pg.get_dbname().is_none() {
        return Err(invalid(format!(
            "store.url: {} names no database (postgres://user@host:5432/DATABASE)",
            redact(url)
        )));
    }
    let pool_size = f.pool_size.unwrap_or(DEFAULT_POOL_SIZE);
    if !(MIN_POOL_SIZE..=MAX_POOL_SIZE).contains(&pool_size) {
        return Err(invalid(format!(
            "store.pool_size: {pool_size} must be between {MIN_POOL_SIZE} and {MAX_POOL_SIZE}"
        )));
    }
    let lease = duration("store.lease", f.lease, "10s")?;
    if lease < Duration::from_secs(1) {
        return Err(invalid(
            "store.lease: must be at least 1s (a replica renews it every third of it)".into(),
        ));
    }
    if let Some(path) = &f.ca_file {
        if !path.is_file() {
            return Err(invalid(format!(
                "store.ca_file: {} is not a readable file",
                path.display()
            )));
        }
    }
    Ok(StoreConfig::Postgres(Box::new(PostgresConfig {
        pg,
        display: redact(url),
        ca_file: f.ca_file,
        pool_size,
        lease,
    })))
}

impl StoreConfig {
    /// The store a command-line `--store URL` names, the password read as
    /// for `[store] url` (from the URL or `VERDICT_STORE_PASSWORD`).
    pub fn from_url(url: &str) -> Result<StoreConfig, ConfigError> {
        store_config(
            FileStore {
                url: Some(url.to_string()),
                ..FileStore::default()
            },
            &|name| std::env::var(name).ok(),
        )
    }
}

/// `url` with the password of its user-info part (if any) replaced by
/// `***`, and any `password=` query parameter likewise.
pub fn redact(url: &str) -> String {
    // The user-info part ends at the last `@`, and a password may hold `?`
    // or `/`: split it off before looking for the query.
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (auth, after) = match rest.rsplit_once('@') {
        Some((a, h)) => (Some(a), h),
        None => (None, rest),
    };
    let (host, query) = match after.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (after, None),
    };
    let prefix = if scheme.is_empty() {
        String::new()
    } else {
        format!("{scheme}://")
    };
    let mut out = match auth {
        Some(a) => match a.split_once(':') {
            Some((user, _)) => format!("{prefix}{user}:***@{host}"),
            None => format!("{prefix}{a}@{host}"),
        },
        None => format!("{prefix}{host}"),
    };
    if let Some(q) = query {
        let parts: Vec<String> = q
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => p.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&parts.join("&"));
    }
    out
}

/// The first query parameter of a postgres url that the driver refuses on
/// its own: its error does not say which one.
fn bad_param(url: &str) -> Option<String> {
    let (_, query) = url.split_once('?')?;
    query.split('&').find_map(|pair| {
        let key = pair.split('=').next().unwrap_or(pair);
        let alone = format!("postgres://h/d?{pair}");
        alone
            .parse::<tokio_postgres::Config>()
            .is_err()
            .then(|| key.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(f: FileStore) -> Result<StoreConfig, ConfigError> {
        store_config(f, &|name| (name == "PGPW").then(|| "from-env".to_string()))
    }

    fn url(u: &str) -> FileStore {
        FileStore {
            url: Some(u.into()),
            ..FileStore::default()
        }
    }

    #[test]
    fn sqlite_is_the_default_and_takes_no_postgres_keys() {
        assert!(matches!(
            parse(FileStore::default()),
            Ok(StoreConfig::Sqlite)
        ));
        assert!(matches!(parse(url("sqlite:")), Ok(StoreConfig::Sqlite)));
        let err = parse(FileStore {
            pool_size: Some(4),
            ..FileStore::default()
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("only to a postgres:// url"),
            "{err}"
        );
    }

    #[test]
    fn a_postgres_url_is_parsed_and_prints_without_its_password() {
        let StoreConfig::Postgres(c) =
            parse(url("postgres://verdict:s3cret@127.0.0.1:5432/verdict")).unwrap()
        else {
            panic!("not postgres")
        };
        assert_eq!(c.pg.get_password(), Some(&b"s3cret"[..]));
        assert_eq!(c.display, "postgres://verdict:***@127.0.0.1:5432/verdict");
        assert!(!format!("{c:?}").contains("s3cret"));
        assert_eq!(c.pool_size, DEFAULT_POOL_SIZE);
        assert_eq!(c.lease, Duration::from_secs(10));
    }

    #[test]
    fn the_password_comes_from_the_env_or_a_file() {
        let StoreConfig::Postgres(c) = parse(FileStore {
            password_env: Some("PGPW".into()),
            ..url("postgres://verdict@127.0.0.1/verdict")
        })
        .unwrap() else {
            panic!("not postgres")
        };
        assert_eq!(c.pg.get_password(), Some(&b"from-env"[..]));
        let err = parse(FileStore {
            password_env: Some("UNSET_VAR".into()),
            ..url("postgres://verdict@127.0.0.1/verdict")
        })
        .unwrap_err();
        assert!(err.to_string().contains("UNSET_VAR is not set"), "{err}");
        let dir = std::env::temp_dir().join(format!("verdict-pw-{}", uuid::Uuid::new_v4()));
        std::fs::write(&dir, "from-file\n").unwrap();
        let StoreConfig::Postgres(c) = parse(FileStore {
            password_file: Some(dir.clone()),
            ..url("postgres://verdict@127.0.0.1/verdict")
        })
        .unwrap() else {
            panic!("not postgres")
        };
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(c.pg.get_password(), Some(&b"from-file"[..]));
    }

    /// A parameter the driver does not know, or one with a bad value, is
    /// named in the error; a password in the url is not shown.
    #[test]
    fn a_bad_url_parameter_is_named() {
        let err = parse(url(
            "postgres://u:secret@127.0.0.1/d?sslmode=require&bogus_param=1",
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("the parameter \"bogus_param\""), "{err}");
        assert!(!err.contains("secret"), "{err}");
        let err = parse(url("postgres://u@127.0.0.1/d?connect_timeout=soon"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("the parameter \"connect_timeout\""), "{err}");
    }

    #[test]
    fn bad_values_name_their_key() {
        for (f, key) in [
            (url("mysql://x/y"), "store.url"),
            (url("postgres://127.0.0.1"), "names no database"),
            (
                FileStore {
                    pool_size: Some(0),
                    ..url("postgres://u@127.0.0.1/d")
                },
                "store.pool_size",
            ),
            (
                FileStore {
                    lease: Some("100ms".into()),
                    ..url("postgres://u@127.0.0.1/d")
                },
                "store.lease",
            ),
            (
                FileStore {
                    ca_file: Some("/nonexistent/ca.pem".into()),
                    ..url("postgres://u@127.0.0.1/d")
                },
                "store.ca_file",
            ),
        ] {
            let err = parse(f).unwrap_err().to_string();
            assert!(err.contains(key), "{err} should name {key}");
        }
    }

    #[test]
    fn redact_hides_passwords_everywhere() {
        assert_eq!(
            redact("postgres://u:p@h:1/d?sslmode=require&password=x"),
            "postgres://u:***@h:1/d?sslmode=require&password=***"
        );
        assert_eq!(redact("postgres://u@h/d"), "postgres://u@h/d");
        assert_eq!(redact("postgres://h/d"), "postgres://h/d");
        assert_eq!(
            redact("postgres://u:p?a/ss@h:1/d?sslmode=disable"),
            "postgres://u:***@h:1/d?sslmode=disable"
        );
    }
}
