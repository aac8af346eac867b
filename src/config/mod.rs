//! Configuration: the TOML file, the built-in defaults and the command-line
//! overrides, merged into one validated [`Config`].
//!
//! Every key is optional, so `verdict serve` with no file at all runs on
//! loopback. Unknown keys are an error that names the key and its line, because
//! a misspelt limit that silently falls back to a default is how a sidecar ends
//! up guarding money with the wrong settings.

mod keys;
pub use keys::file_keys;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

mod export;
mod traces;
pub use export::{ExportConfig, MAX_BACKOFF as EXPORT_MAX_BACKOFF};
pub use traces::{OtlpProtocol, TracesConfig};
mod notify;
pub use notify::{origin_only, NotifyConfig, NotifySecret};
mod origin;
pub use origin::{bare_origin, normalize_origin, uri_origin};
mod shared_store;
pub mod vkey;
pub use shared_store::{redact as redact_url, PostgresConfig, StoreConfig};

/// Default API listener address.
pub const DEFAULT_API_LISTEN: &str = "127.0.0.1:8181";
/// Default policies directory.
pub const DEFAULT_POLICIES_DIR: &str = "policies";
/// Default proxy listener address.
pub const DEFAULT_PROXY_LISTEN: &str = "127.0.0.1:8080";
/// The most distinct approvers `review.approvals` may ask for.
pub const MAX_REVIEW_APPROVALS: u32 = 10;

/// Default `review.ttl`: how long a review stays pending before it expires.
pub const DEFAULT_REVIEW_TTL: Duration = Duration::from_secs(24 * 3600);

/// A configuration that could not be read or is invalid. `main` exits 64 on it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    File(#[from] TomlFileError),
    #[error("{0}")]
    Invalid(String),
}

/// A TOML file (the config, the keys file) that could not be read, or not
/// parsed: a parse error names the file, line and column.
#[derive(Debug, thiserror::Error)]
pub enum TomlFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{col}: {message}")]
    Parse {
        path: String,
        line: usize,
        col: usize,
        message: String,
    },
}

impl TomlFileError {
    /// The text of the file at `path`.
    pub fn read(path: &Path) -> Result<String, TomlFileError> {
        std::fs::read_to_string(path).map_err(|source| TomlFileError::Read {
            path: path.display().to_string(),
            source,
        })
    }

    /// `text` (named `path` in errors) as a `T`; an error without a
    /// position points at 1:1.
    pub fn parse<T: serde::de::DeserializeOwned>(
        path: &str,
        text: &str,
    ) -> Result<T, TomlFileError> {
        toml::from_str(text).map_err(|e| {
            let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
            TomlFileError::Parse {
                path: path.to_string(),
                line,
                col,
                message: e.message().to_string(),
            }
        })
    }
}

/// The whole, validated configuration of one `verdict serve` process.
#[derive(Debug, Clone)]
pub struct Config {
    pub api: ApiConfig,
    pub proxy: ProxyConfig,
    pub keys_file: Option<PathBuf>,
    pub policies_dir: PathBuf,
    /// `[policies] shadow_dir`: a second policy set decided beside the
    /// enforced one on live traffic, never enforced; disagreements are
    /// counted, logged and recorded.
    pub shadow_policies_dir: Option<PathBuf>,
    pub data_dir: PathBuf,
    pub evidence: EvidenceConfig,
    pub audit: AuditConfig,
    pub review_ttl: Duration,
    /// `[review] retention`: resolved and expired reviews (and their held
    /// bodies) are deleted this long after they ended (default 30 days).
    pub review_retention: Duration,
    /// `[review] console_session_ttl`: how long a review console sign-in
    /// lasts (default 8 hours).
    pub console_session_ttl: Duration,
    /// `[review] approvals`: how many distinct reviewers (API keys) must
    /// approve a held call before it is forwarded (default 1).
    pub review_approvals: u32,
    /// `[review] notify_*`: the webhook told of every held and resolved
    /// review (`None`: no notifications).
    pub review_notify: Option<NotifyConfig>,
    pub jobs: JobsConfig,
    /// `[store]`: the SQLite file in the data dir (the default) or a
    /// PostgreSQL database that several replicas share.
    pub store: StoreConfig,
    pub limits: Limits,
    pub server: ServerConfig,
    pub log_format: LogFormat,
    /// `[telemetry]`: OpenTelemetry traces.
    pub traces: TracesConfig,
    /// `[ext_authz] listen`: Envoy's external authorization over gRPC
    /// (`envoy.service.auth.v3.Authorization/Check`); `None`: not served.
    pub ext_authz_listen: Option<SocketAddr>,
    /// Floors for an action type that no policy names (`[defaults]`).
    pub defaults: DefaultFloors,
    pub authorize: AuthorizeConfig,
}

/// `[defaults]`: the floors an action type with no policy gets, as if a
/// policy said them. Unset keys set no floor.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DefaultFloors {
    pub decision_mode: Option<crate::engine::DecisionMode>,
    pub min_coverage: Option<f64>,
    pub citations: Option<crate::engine::Citations>,
    pub deny_if_any_unsupported: Option<bool>,
}

/// `[authorize]`.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthorizeConfig {
    /// What an action type with no policy gets.
    pub unknown_action: UnknownAction,
}

/// `[authorize] unknown_action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownAction {
    /// Every undeclared type is refused in every mode (reason
    /// `unknown_action`).
    Deny,
    /// Every undeclared type is sent to review in every mode.
    Review,
    /// An undeclared type that reads as a declared one misspelt
    /// (`refund.crate` for `refund.create`; see
    /// `PolicySet::near_miss` in `policy`) is
    /// refused in every mode; any other is decided under the `[defaults]`
    /// floors. The default whenever a keys file is configured.
    #[serde(rename = "near_miss")]
    NearMiss,
    /// Every undeclared type is decided under the `[defaults]` floors: the
    /// default without keys.
    Allow,
}

/// `[proxy] method_override`: what to do with `X-HTTP-Method-Override`,
/// `X-HTTP-Method`, `X-Method-Override` and `_method`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MethodOverride {
    /// 400 (the default).
    Refuse,
    /// Route and gate the request as the method it asks for.
    Route,
}

#[derive(Debug, Clone)]
pub struct ApiConfig {
    pub listen: SocketAddr,
    pub tls: Option<TlsFiles>,
}

#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub listen: SocketAddr,
    pub upstream: Option<String>,
    pub unmatched: Unmatched,
    pub tls: Option<TlsFiles>,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// PEM roots for an https upstream; the system roots when `None`.
    pub ca_file: Option<PathBuf>,
    pub method_override: MethodOverride,
    /// Path prefixes whose paths may hold `\\`, `;`, encoded `/` and the
    /// like (they are still refused when they could reach a gated route).
    pub raw_path_prefixes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unmatched {
    Forward,
    Deny,
}

#[derive(Debug, Clone)]
pub struct EvidenceConfig {
    pub roots: Vec<PathBuf>,
    pub allow_origins: Vec<String>,
    pub fetch_timeout: Duration,
    pub max_source_bytes: usize,
    /// `[evidence] date_order`: how "03/05/2024" is read, in sources and
    /// claims alike ("mdy", "dmy"; unset: both readings, which back only
    /// the same literal).
    pub date_order: crate::engine::DateOrder,
}

#[derive(Debug, Clone)]
pub struct AuditConfig {
    /// `None` means `verdict/<hostname>`, resolved when the log opens.
    pub origin: Option<String>,
    /// The longest a group commit collects records (`audit.max_wait`). A
    /// forming group also closes once no record has arrived for a tenth of
    /// this, and lingers only when its first record found no commit running
    /// and it has company, for at most half as long as the previous commit
    /// took (see `audit::line`). The default is 0: a group forms by itself
    /// while the previous flush runs; 2 ms suits disks that charge per
    /// flush.
    pub max_wait: Duration,
    pub max_batch: usize,
    /// `[[audit.witnesses]]`: witnesses the log sends its checkpoints to
    /// (C2SP tlog-witness), and whose cosignatures it keeps.
    pub witnesses: Vec<WitnessConfig>,
    /// `audit.capture_inputs`: keep each authorize decision's input for
    /// `verdict replay` (default on).
    pub capture_inputs: bool,
    /// `audit.input_retention`: how long captured inputs are kept (7 days).
    pub input_retention: Duration,
    /// `audit.export_*`: where every record is shipped, if anywhere.
    pub export: Option<ExportConfig>,
}

/// One witness of the audit log.
#[derive(Debug, Clone)]
pub struct WitnessConfig {
    /// Submission prefix: `add-checkpoint` is posted to `<url>/add-checkpoint`.
    pub url: String,
    /// The witness's key name, from its verifier key.
    pub name: String,
    /// Its Ed25519 cosigning key.
    pub key: [u8; 32],
}

#[derive(Debug, Clone)]
pub struct JobsConfig {
    pub retention: Duration,
    pub workers: usize,
}

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_batch_body_bytes: usize,
    pub max_batch_items: usize,
}

/// The default `server.body_min_rate`: 1 KiB/s.
pub const DEFAULT_BODY_MIN_RATE: u64 = 1024;

/// Listener behaviour shared by the API and proxy listeners.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// A client that has not sent its full request head by then is dropped
    /// (slowloris protection).
    pub header_read_timeout: Duration,
    /// Connections beyond this are closed right after accept.
    pub max_connections: usize,
    /// How long in-flight requests may take to finish after SIGTERM.
    pub shutdown_grace: Duration,
    /// A connection (HTTP/1 keep-alive or HTTP/2) with no request in flight
    /// for this long is closed, so idle connections cannot hold every
    /// `max_connections` slot.
    pub idle_timeout: Duration,
    /// Connections one peer address may hold at once (default a quarter of
    /// `max_connections`); beyond it a connection is refused like one over
    /// the cap.
    pub max_connections_per_ip: usize,
    /// A request body must have arrived this long after its head, plus one
    /// second for every `body_min_rate` bytes received; else 408.
    pub body_read_timeout: Duration,
    /// Bytes per second a slow body must keep up to earn more time.
    pub body_min_rate: u64,
}

impl ServerConfig {
    /// Limits for `verdict witness serve`, which has no config file: the
    /// API's defaults.
    pub fn witness_defaults() -> ServerConfig {
        ServerConfig {
            header_read_timeout: Duration::from_secs(10),
            max_connections: 256,
            shutdown_grace: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections_per_ip: 64,
            body_read_timeout: Duration::from_secs(10),
            body_min_rate: DEFAULT_BODY_MIN_RATE,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Json,
    Pretty,
}

/// Command-line values that override the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub api_listen: Option<SocketAddr>,
    pub proxy_listen: Option<SocketAddr>,
    pub ext_authz_listen: Option<SocketAddr>,
    pub upstream: Option<String>,
    pub policies: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
    pub keys: Option<PathBuf>,
    pub log_format: Option<LogFormat>,
}

// === file format ===

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    api: FileApi,
    #[serde(default)]
    proxy: FileProxy,
    #[serde(default)]
    auth: FileAuth,
    #[serde(default)]
    policies: FilePolicies,
    #[serde(default)]
    data: FileData,
    #[serde(default)]
    evidence: FileEvidence,
    #[serde(default)]
    audit: FileAudit,
    #[serde(default)]
    review: FileReview,
    #[serde(default)]
    jobs: FileJobs,
    #[serde(default)]
    store: shared_store::FileStore,
    #[serde(default)]
    limits: FileLimits,
    #[serde(default)]
    server: FileServer,
    #[serde(default)]
    log: FileLog,
    #[serde(default)]
    telemetry: traces::FileTelemetry,
    #[serde(default)]
    ext_authz: FileExtAuthz,
    #[serde(default)]
    defaults: FileDefaults,
    #[serde(default)]
    authorize: FileAuthorize,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDefaults {
    decision_mode: Option<String>,
    min_coverage: Option<f64>,
    citations: Option<String>,
    deny_if_any_unsupported: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileExtAuthz {
    listen: Option<SocketAddr>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAuthorize {
    unknown_action: Option<UnknownAction>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileApi {
    listen: Option<SocketAddr>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileProxy {
    listen: Option<SocketAddr>,
    upstream: Option<String>,
    unmatched: Option<Unmatched>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    connect_timeout: Option<String>,
    response_timeout: Option<String>,
    ca_file: Option<PathBuf>,
    method_override: Option<MethodOverride>,
    raw_path_prefixes: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAuth {
    keys_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePolicies {
    dir: Option<PathBuf>,
    shadow_dir: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileData {
    dir: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEvidence {
    roots: Option<Vec<PathBuf>>,
    allow_origins: Option<Vec<String>>,
    fetch_timeout: Option<String>,
    max_source_bytes: Option<usize>,
    date_order: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAudit {
    origin: Option<String>,
    max_wait: Option<String>,
    max_batch: Option<usize>,
    witnesses: Option<Vec<FileWitness>>,
    capture_inputs: Option<bool>,
    input_retention: Option<String>,
    export_url: Option<String>,
    export_batch: Option<usize>,
    export_interval: Option<String>,
    export_timeout: Option<String>,
    export_backoff: Option<String>,
    export_authorization_env: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWitness {
    url: String,
    vkey: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileReview {
    ttl: Option<String>,
    retention: Option<String>,
    console_session_ttl: Option<String>,
    approvals: Option<u32>,
    notify_url: Option<String>,
    notify_secret: Option<String>,
    notify_secret_env: Option<String>,
    notify_secret_file: Option<PathBuf>,
    console_url: Option<String>,
    notify_attempts: Option<u32>,
    notify_backoff: Option<String>,
    notify_timeout: Option<String>,
    notify_queue: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileJobs {
    retention: Option<String>,
    workers: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLimits {
    max_body_bytes: Option<usize>,
    max_batch_body_bytes: Option<usize>,
    max_batch_items: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileServer {
    header_read_timeout: Option<String>,
    max_connections: Option<usize>,
    shutdown_grace: Option<String>,
    idle_timeout: Option<String>,
    max_connections_per_ip: Option<usize>,
    body_read_timeout: Option<String>,
    body_min_rate: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLog {
    format: Option<LogFormat>,
}

// === impl Config ===

impl Config {
    /// Loads `path` (or the defaults when `None`) and applies `overrides`.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let file = match path {
            None => FileConfig::default(),
            Some(p) => {
                let text = TomlFileError::read(p)?;
                parse_file(&p.display().to_string(), &text)?
            }
        };
        Self::from_file(file, overrides)
    }

    /// Parses config text; used by tests and by [`Config::load`].
    pub fn from_toml(name: &str, text: &str, overrides: &Overrides) -> Result<Config, ConfigError> {
        Self::from_file(parse_file(name, text)?, overrides)
    }

    /// Built-in defaults with the overrides applied.
    pub fn defaults(overrides: &Overrides) -> Result<Config, ConfigError> {
        Self::from_file(FileConfig::default(), overrides)
    }
}

mod build;
mod parse;
#[cfg(test)]
mod tests;
pub use parse::{client_tls, format_duration, line_col, parse_duration, pem_roots};
use parse::{duration, parse_addr, parse_file, tls_pair, witnesses};
