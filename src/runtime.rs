//! What a running sidecar is made of, below its doors: the shared state
//! ([`App`]) that the API, the proxy and the background tasks read.
//!
//! It sits under the doors (`api`, `proxy`) and under start-up (`app`), and
//! imports none of them, so that they can all use it without a cycle.

use std::sync::Arc;

use prometheus_client::registry::Registry;

use crate::audit::{AuditLog, RedactionKey};
use crate::config::Config;
use crate::evidence::Resolver;
use crate::http::auth::KeyStore;
use crate::policy::PolicyStore;
use crate::telemetry::health::Health;
use crate::telemetry::metrics::HttpMetrics;

/// Shared state of a running sidecar. Built once; subsystems hold `Arc`s.
pub struct App {
    pub config: Arc<Config>,
    pub keys: Arc<KeyStore>,
    pub health: Arc<Health>,
    /// Read-only after start-up: every subsystem registers before serving.
    pub registry: Registry,
    pub http_metrics: HttpMetrics,
    pub decision_metrics: crate::decide::DecisionMetrics,
    /// Reads `uri` sources within the operator's fences.
    pub resolver: Resolver,
    /// The live policy set; each request takes one snapshot.
    pub policies: Arc<PolicyStore>,
    /// `[policies] shadow_dir`, when set: decided beside, never enforced.
    pub shadow_policies: Option<Arc<PolicyStore>>,
    /// The tamper-evident log every decision is written to before it returns.
    pub audit: AuditLog,
    /// Keys the HMAC that replaces `redact`ed params in audit records; read
    /// from the data dir at start-up, so the gate does no IO for it.
    pub redaction: RedactionKey,
    /// Durable batch verification jobs.
    pub jobs: crate::jobs::Jobs,
    /// Held proxy requests and their review.
    pub reviews: crate::review::Reviews,
}

impl App {
    /// What a decision needs of this process (see [`crate::decide::Handles`]).
    pub fn decide_handles(&self) -> crate::decide::Handles<'_> {
        crate::decide::Handles {
            resolver: &self.resolver,
            audit: crate::decide::Recorder::Durable(&self.audit),
            redaction: &self.redaction,
            defaults: &self.config.defaults,
            unknown_action: self.config.authorize.unknown_action,
            metrics: &self.decision_metrics,
            clock: std::time::SystemTime::now,
            shadow: self.shadow_policies.as_deref(),
            capture: self.config.audit.capture_inputs,
        }
    }
}

/// The data dir's SQLite file: the audit log's tables, and the reviews' and
/// jobs' unless `[store] url` puts those in PostgreSQL.
pub fn db_path(config: &Config) -> std::path::PathBuf {
    config.data_dir.join("verdict.db")
}
