//! From the parsed file and the command-line overrides to one validated
//! [`Config`]: every key read with its default and checked. Apart from the
//! parent, which defines the file's keys and the config's fields.
//!
//! A file with several mistakes is told of the first in a fixed order: the
//! checks before anything is built (listeners, limits, counts, review
//! sign-ins, defaults, server caps), then the values read as each section
//! is built, section by section.

use super::*;

impl Config {
    /// Builds the config from a parsed file and the overrides.
    pub(super) fn from_file(f: FileConfig, o: &Overrides) -> Result<Config, ConfigError> {
        let api_tls = tls_pair("api", f.api.tls_cert, f.api.tls_key)?;
        let proxy_tls = tls_pair("proxy", f.proxy.tls_cert, f.proxy.tls_key)?;
        let default_api = parse_addr(DEFAULT_API_LISTEN)?;
        let default_proxy = parse_addr(DEFAULT_PROXY_LISTEN)?;
        let upstream = checked_upstream(o.upstream.clone().or(f.proxy.upstream))?;
        let limits = checked_limits(&f.limits)?;
        let max_batch = at_least_one("audit.max_batch", f.audit.max_batch.unwrap_or(512))?;
        let workers = at_least_one("jobs.workers", f.jobs.workers.unwrap_or(1))?;
        if f.proxy.listen.is_some() && upstream.is_none() {
            return Err(ConfigError::Invalid(
                "proxy.listen is set but proxy.upstream is not: the proxy runs only in front of an upstream; set proxy.upstream (or --upstream), or remove proxy.listen".into(),
            ));
        }
        let (console_session_ttl, review_approvals) = checked_review(&f.review)?;
        let defaults = default_floors(&f.defaults)?;
        let keys_file = o.keys.clone().or(f.auth.keys_file);
        let unknown_action = f
            .authorize
            .unknown_action
            .unwrap_or(if keys_file.is_some() {
                UnknownAction::NearMiss
            } else {
                UnknownAction::Allow
            });
        let raw_path_prefixes = checked_prefixes(f.proxy.raw_path_prefixes.unwrap_or_default())?;
        let caps = ServerCaps::of(&f.server)?;
        Ok(Config {
            api: ApiConfig {
                listen: o.api_listen.or(f.api.listen).unwrap_or(default_api),
                tls: api_tls,
            },
            proxy: ProxyConfig {
                listen: o.proxy_listen.or(f.proxy.listen).unwrap_or(default_proxy),
                upstream,
                unmatched: f.proxy.unmatched.unwrap_or(Unmatched::Forward),
                tls: proxy_tls,
                connect_timeout: duration("proxy.connect_timeout", f.proxy.connect_timeout, "5s")?,
                response_timeout: duration(
                    "proxy.response_timeout",
                    f.proxy.response_timeout,
                    "30s",
                )?,
                ca_file: f.proxy.ca_file,
                method_override: f.proxy.method_override.unwrap_or(MethodOverride::Refuse),
                raw_path_prefixes,
            },
            keys_file,
            shadow_policies_dir: f.policies.shadow_dir,
            policies_dir: o
                .policies
                .clone()
                .or(f.policies.dir)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_POLICIES_DIR)),
            data_dir: o
                .data_dir
                .clone()
                .or(f.data.dir)
                .unwrap_or_else(|| PathBuf::from("data")),
            evidence: evidence_config(f.evidence)?,
            audit: audit_config(f.audit, max_batch)?,
            review_ttl: match f.review.ttl.as_deref() {
                None => DEFAULT_REVIEW_TTL,
                ttl => duration("review.ttl", ttl, "24h")?,
            },
            review_retention: duration("review.retention", f.review.retention.as_deref(), "30d")?,
            console_session_ttl,
            review_approvals,
            review_notify: review_notify(f.review)?,
            jobs: JobsConfig {
                retention: duration("jobs.retention", f.jobs.retention, "24h")?,
                workers,
            },
            store: super::shared_store::store_config(f.store, &|name| std::env::var(name).ok())?,
            limits,
            server: server_config(f.server, caps)?,
            log_format: o.log_format.or(f.log.format).unwrap_or(LogFormat::Json),
            traces: super::traces::traces_config(f.telemetry)?,
            ext_authz_listen: o.ext_authz_listen.or(f.ext_authz.listen),
            defaults,
            authorize: AuthorizeConfig { unknown_action },
        })
    }
}

/// `proxy.upstream` (or `--upstream`), which must be an http(s) URL.
fn checked_upstream(upstream: Option<String>) -> Result<Option<String>, ConfigError> {
    if let Some(u) = &upstream {
        if !(u.starts_with("http://") || u.starts_with("https://")) {
            return Err(ConfigError::Invalid(format!(
                "proxy.upstream: {u:?} must start with http:// or https://"
            )));
        }
    }
    Ok(upstream)
}

/// `[limits]`, with their defaults; each must be greater than 0.
fn checked_limits(f: &FileLimits) -> Result<Limits, ConfigError> {
    let limits = Limits {
        max_body_bytes: f.max_body_bytes.unwrap_or(1 << 20),
        max_batch_body_bytes: f.max_batch_body_bytes.unwrap_or(32 << 20),
        max_batch_items: f.max_batch_items.unwrap_or(10_000),
    };
    if limits.max_body_bytes == 0 || limits.max_batch_body_bytes == 0 || limits.max_batch_items == 0
    {
        return Err(ConfigError::Invalid(
            "limits: values must be greater than 0".into(),
        ));
    }
    Ok(limits)
}

/// A count under `key` that must be greater than 0.
fn at_least_one(key: &str, n: usize) -> Result<usize, ConfigError> {
    if n == 0 {
        return Err(ConfigError::Invalid(format!(
            "{key}: must be greater than 0"
        )));
    }
    Ok(n)
}

/// `review.console_session_ttl`, longer than 0, and `review.approvals`, 1
/// to [`MAX_REVIEW_APPROVALS`].
fn checked_review(f: &FileReview) -> Result<(Duration, u32), ConfigError> {
    let console_session_ttl = duration(
        "review.console_session_ttl",
        f.console_session_ttl.as_deref(),
        "8h",
    )?;
    if console_session_ttl.is_zero() {
        return Err(ConfigError::Invalid(
            "review.console_session_ttl: must be longer than 0 (a sign-in that lasts no time)"
                .into(),
        ));
    }
    let review_approvals = f.approvals.unwrap_or(1);
    if !(1..=MAX_REVIEW_APPROVALS).contains(&review_approvals) {
        return Err(ConfigError::Invalid(format!(
            "review.approvals: must be 1 to {MAX_REVIEW_APPROVALS} (distinct reviewers per held call), got {review_approvals}"
        )));
    }
    Ok((console_session_ttl, review_approvals))
}

/// `proxy.raw_path_prefixes`, each of which must start with `/`.
fn checked_prefixes(prefixes: Vec<String>) -> Result<Vec<String>, ConfigError> {
    if let Some(p) = prefixes.iter().find(|p| !p.starts_with('/')) {
        return Err(ConfigError::Invalid(format!(
            "proxy.raw_path_prefixes: {p:?} must start with \"/\""
        )));
    }
    Ok(prefixes)
}

/// The limits of `[server]` checked before anything is built: the
/// connection caps and the pace of request bodies.
struct ServerCaps {
    max_connections: usize,
    max_connections_per_ip: usize,
    body_read_timeout: Duration,
    body_min_rate: u64,
}

impl ServerCaps {
    /// Reads them with their defaults and checks them.
    fn of(f: &FileServer) -> Result<ServerCaps, ConfigError> {
        let max_connections =
            at_least_one("server.max_connections", f.max_connections.unwrap_or(4096))?;
        let max_connections_per_ip = f
            .max_connections_per_ip
            .unwrap_or((max_connections / 4).max(1));
        if max_connections_per_ip == 0 || max_connections_per_ip > max_connections {
            return Err(ConfigError::Invalid(format!(
                "server.max_connections_per_ip: must be 1 to server.max_connections ({max_connections})"
            )));
        }
        let body_read_timeout = duration(
            "server.body_read_timeout",
            f.body_read_timeout.as_deref(),
            "10s",
        )?;
        if body_read_timeout.is_zero() {
            return Err(ConfigError::Invalid(
                "server.body_read_timeout: must be greater than 0".into(),
            ));
        }
        let body_min_rate = f.body_min_rate.unwrap_or(DEFAULT_BODY_MIN_RATE);
        if body_min_rate == 0 {
            return Err(ConfigError::Invalid(
                "server.body_min_rate: must be at least 1 (bytes per second)".into(),
            ));
        }
        Ok(ServerCaps {
            max_connections,
            max_connections_per_ip,
            body_read_timeout,
            body_min_rate,
        })
    }
}

/// `[server]`: the caps checked before, and its other timeouts.
fn server_config(f: FileServer, caps: ServerCaps) -> Result<ServerConfig, ConfigError> {
    Ok(ServerConfig {
        header_read_timeout: duration("server.header_read_timeout", f.header_read_timeout, "10s")?,
        max_connections: caps.max_connections,
        shutdown_grace: duration("server.shutdown_grace", f.shutdown_grace, "10s")?,
        idle_timeout: duration("server.idle_timeout", f.idle_timeout, "60s")?,
        max_connections_per_ip: caps.max_connections_per_ip,
        body_read_timeout: caps.body_read_timeout,
        body_min_rate: caps.body_min_rate,
    })
}

/// `[evidence]`: where sources may be read from, and how.
fn evidence_config(f: FileEvidence) -> Result<EvidenceConfig, ConfigError> {
    Ok(EvidenceConfig {
        roots: f.roots.unwrap_or_default(),
        allow_origins: f.allow_origins.unwrap_or_default(),
        fetch_timeout: duration("evidence.fetch_timeout", f.fetch_timeout, "5s")?,
        max_source_bytes: f.max_source_bytes.unwrap_or(4 << 20),
        date_order: match f.date_order.as_deref() {
            None => crate::engine::DateOrder::Ambiguous,
            Some("mdy") => crate::engine::DateOrder::Mdy,
            Some("dmy") => crate::engine::DateOrder::Dmy,
            Some(other) => {
                return Err(ConfigError::Invalid(format!(
                    "evidence.date_order: {other:?} is not \"mdy\" or \"dmy\""
                )))
            }
        },
    })
}

/// `[audit]`, its batch size checked before.
fn audit_config(f: FileAudit, max_batch: usize) -> Result<AuditConfig, ConfigError> {
    Ok(AuditConfig {
        origin: f.origin,
        max_wait: duration("audit.max_wait", f.max_wait, "0ms")?,
        max_batch,
        witnesses: witnesses(f.witnesses.unwrap_or_default())?,
        capture_inputs: f.capture_inputs.unwrap_or(true),
        input_retention: duration("audit.input_retention", f.input_retention, "7d")?,
        export: super::export::export_config(
            super::export::FileExport {
                url: f.export_url,
                batch: f.export_batch,
                interval: f.export_interval,
                timeout: f.export_timeout,
                backoff: f.export_backoff,
                authorization_env: f.export_authorization_env,
            },
            &|name| std::env::var(name).ok(),
        )?,
    })
}

/// `review.notify_*`: where held calls are announced, if anywhere.
fn review_notify(f: FileReview) -> Result<Option<NotifyConfig>, ConfigError> {
    notify::notify_config(
        notify::FileNotify {
            url: f.notify_url,
            secret: f.notify_secret,
            secret_env: f.notify_secret_env,
            secret_file: f.notify_secret_file,
            console_url: f.console_url,
            attempts: f.notify_attempts,
            backoff: f.notify_backoff,
            timeout: f.notify_timeout,
            queue: f.notify_queue,
        },
        &|name| std::env::var(name).ok(),
    )
}

/// `[defaults]`: the floors an action type with no policy gets, each one
/// checked.
fn default_floors(f: &FileDefaults) -> Result<DefaultFloors, ConfigError> {
    use crate::engine::decide::{citations_from, mode_from};
    let decision_mode = match f.decision_mode.as_deref() {
        None => None,
        Some(s) => Some(mode_from(s).ok_or_else(|| {
            ConfigError::Invalid(format!(
                "defaults.decision_mode: unknown mode {s:?} (strict, balanced, audit)"
            ))
        })?),
    };
    let citations = match f.citations.as_deref() {
        None => None,
        Some(s) => Some(citations_from(s).ok_or_else(|| {
            ConfigError::Invalid(format!(
                "defaults.citations: unknown value {s:?} (required, optional)"
            ))
        })?),
    };
    if let Some(c) = f.min_coverage {
        if !(0.0..=1.0).contains(&c) {
            return Err(ConfigError::Invalid(format!(
                "defaults.min_coverage: must be between 0 and 1, got {c}"
            )));
        }
    }
    Ok(DefaultFloors {
        decision_mode,
        min_coverage: f.min_coverage,
        citations,
        deny_if_any_unsupported: f.deny_if_any_unsupported,
    })
}
