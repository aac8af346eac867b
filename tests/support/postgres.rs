//! A throwaway PostgreSQL for integration tests: one cluster per target
//! directory, started by `scripts/postgres.sh` (which installs Debian's
//! package when missing), and a fresh database per test. It talks to the
//! server through `psql`, so tests need no Rust PostgreSQL client.
//!
//! `VERDICT_TEST_POSTGRES_URL` names a server to use instead (its user must
//! be allowed to CREATE DATABASE); `VERDICT_SKIP_POSTGRES=1` lets the tests
//! that need PostgreSQL skip, loudly, where it cannot be started.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// A server to use instead of starting one.
pub const ENV_URL: &str = "VERDICT_TEST_POSTGRES_URL";
/// Set (to anything) to skip where no cluster can be started.
pub const ENV_SKIP: &str = "VERDICT_SKIP_POSTGRES";

/// The cluster the tests share.
struct Cluster {
    /// The `verdict` role's URL (database `verdict`), or [`ENV_URL`].
    url: String,
    /// A URL that may CREATE DATABASE: the superuser's, or [`ENV_URL`].
    admin_url: String,
    /// Whether new databases go to the `verdict` role (not with [`ENV_URL`],
    /// whose user owns what it creates).
    owner_verdict: bool,
    /// Shared locks on the cluster's `users` file, held for the life of
    /// this process: the script's watchdog stops the cluster once no test
    /// process holds one (`PG_STOP_WHEN_UNUSED`).
    _users: Vec<std::fs::File>,
}

/// `<target>/pg-test`, the one `.ci/run` starts. `CARGO_TARGET_TMPDIR` is
/// `<target>/tmp` whatever `CARGO_TARGET_DIR` says, but cargo sets it only
/// for integration tests; the crate's unit tests (which include this file)
/// fall back to `CARGO_TARGET_DIR` or `target/`.
fn cluster_dir() -> PathBuf {
    match option_env!("CARGO_TARGET_TMPDIR") {
        Some(tmp) => Path::new(tmp)
            .parent()
            .expect("CARGO_TARGET_TMPDIR is <target>/tmp")
            .join("pg-test"),
        None => std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
            .join("pg-test"),
    }
}

/// Starts (or joins) the shared cluster; `Ok(None)` to skip. Errors carry
/// what the script said.
fn start() -> Result<Option<Cluster>, String> {
    if let Some(url) = std::env::var(ENV_URL).ok().filter(|u| !u.is_empty()) {
        return Ok(Some(Cluster {
            admin_url: url.clone(),
            url,
            owner_verdict: false,
            _users: Vec::new(),
        }));
    }
    let dir = cluster_dir();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/postgres.sh");
    // A running cluster's watchdog must see this process before `start`
    // hands the cluster out; the lock is taken again after (the cluster
    // may have been stopped and made anew in between).
    let mut users: Vec<std::fs::File> = user_lock(&dir).into_iter().collect();
    // The script's flock on the dir lets parallel test binaries share one
    // cluster; PG_FAST only applies when it creates the cluster.
    let out = Command::new("bash")
        .arg(&script)
        .arg("start")
        .arg(&dir)
        .env("PG_FAST", "1")
        .env("PG_STOP_WHEN_UNUSED", "1")
        .output();
    let failure = match out {
        Ok(out) if out.status.success() => {
            let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let admin_path = dir.join("admin_url");
            let admin_url = std::fs::read_to_string(&admin_path)
                .map_err(|e| format!("{}: {e}", admin_path.display()))?
                .trim()
                .to_string();
            users.extend(user_lock(&dir));
            return Ok(Some(Cluster {
                url,
                admin_url,
                owner_verdict: true,
                _users: users,
            }));
        }
        Ok(out) => format!(
            "{} start {} failed ({}):\n{}",
            script.display(),
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => format!("bash {}: {e}", script.display()),
    };
    if std::env::var_os(ENV_SKIP).is_some() {
        eprintln!("skipping: no PostgreSQL ({ENV_SKIP} is set)\n{failure}");
        return Ok(None);
    }
    Err(format!(
        "{failure}\nOn a machine without PostgreSQL (and no root to install it), set \
         {ENV_SKIP}=1 to skip the tests that need it, or {ENV_URL} to use another server."
    ))
}

/// A shared lock on `dir/users`, when the file is there: a cluster started
/// by hand or by .ci/run has no watchdog and no such file.
fn user_lock(dir: &Path) -> Option<std::fs::File> {
    let f = std::fs::File::open(dir.join("users")).ok()?;
    f.lock_shared().ok()?;
    Some(f)
}

/// The shared cluster, started once per test process.
fn cluster() -> Option<&'static Cluster> {
    static CLUSTER: OnceLock<Result<Option<Cluster>, String>> = OnceLock::new();
    match CLUSTER.get_or_init(start) {
        Ok(c) => c.as_ref(),
        Err(e) => panic!("{e}"),
    }
}

/// The URL of the shared throwaway cluster (`postgres://verdict:…@127.0.0.1:
/// PORT/verdict`), or [`ENV_URL`] when set; `None` when it cannot be started
/// and [`ENV_SKIP`] is set. Panics when it cannot be started otherwise.
pub fn cluster_url() -> Option<String> {
    cluster().map(|c| c.url.clone())
}

/// A new, empty database `t_<uuid>` in the shared cluster, owned by the
/// `verdict` role (with [`ENV_URL`], by that URL's user), and its URL: one
/// per test, so that tests do not see each other's tables. `None` as for
/// [`cluster_url`].
pub fn fresh_database() -> Option<String> {
    let c = cluster()?;
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let owner = if c.owner_verdict {
        " OWNER verdict"
    } else {
        ""
    };
    if let Err(e) = psql(&c.admin_url, &format!("CREATE DATABASE {name}{owner}")) {
        panic!("creating the test database {name}: {e}");
    }
    Some(with_database(&c.url, &name))
}

/// The CA certificate the shared cluster's TLS certificate chains to
/// (scripts/postgres.sh writes it when openssl is there); `None` with
/// [`ENV_URL`], or for a cluster started without TLS.
pub fn ca_file() -> Option<PathBuf> {
    if std::env::var(ENV_URL).is_ok_and(|u| !u.is_empty()) {
        return None;
    }
    cluster()?;
    Some(cluster_dir().join("ca.crt")).filter(|p| p.exists())
}

/// Runs `sql` with `psql` on `url` (stopping at the first error) and returns
/// its output, unaligned and without headers; `Err` holds psql's stderr.
pub fn psql(url: &str, sql: &str) -> Result<String, String> {
    // No ~/.psqlrc, no notices, bare values.
    let out = Command::new(psql_bin())
        .args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1"])
        .args(["-d", url, "-c", sql])
        .output()
        .map_err(|e| format!("running psql ({}): {e}", psql_bin().display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_string())
    } else {
        Err(format!(
            "psql -c {sql:?} ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        ))
    }
}

/// `psql` on PATH, else the highest `/usr/lib/postgresql/*/bin/psql`, where
/// Debian's server package puts its client next to initdb.
pub fn psql_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let on_path = std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("psql"))
                .find(|p| p.is_file())
        });
        on_path
            .or_else(|| {
                std::fs::read_dir("/usr/lib/postgresql")
                    .ok()?
                    .filter_map(|e| {
                        let e = e.ok()?;
                        let version: u32 = e.file_name().to_str()?.parse().ok()?;
                        let bin = e.path().join("bin/psql");
                        bin.is_file().then_some((version, bin))
                    })
                    .max()
                    .map(|(_, bin)| bin)
            })
            .unwrap_or_else(|| PathBuf::from("psql"))
    })
    .clone()
}

/// `url` with its database (the path) replaced by `db`, query kept.
pub fn with_database(url: &str, db: &str) -> String {
    let authority = url.find("://").map_or(0, |i| i + 3);
    let path = url[authority..]
        .find(['/', '?'])
        .map_or(url.len(), |i| authority + i);
    let query = url[path..].find('?').map_or("", |i| &url[path + i..]);
    format!("{}/{db}{query}", &url[..path])
}
