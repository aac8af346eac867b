//! Proxy metrics (requests by route and decision, upstream errors, the
//! gated path's time by stage) and the `upstream` component of
//! `/health/detailed`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::telemetry::health::{self, Component};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ProxyLabels {
    route: String,
    decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ErrorLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct StageLabels {
    stage: &'static str,
}

/// Proxy metrics and upstream reachability.
#[derive(Clone, Debug)]
pub struct ProxyStats {
    requests: Family<ProxyLabels, Counter>,
    upstream_errors: Family<ErrorLabels, Counter>,
    /// The gated path's own stages; the decision's are
    /// `verdict_decision_stage_seconds`.
    stages: Family<StageLabels, Histogram, fn() -> Histogram>,
    /// `requests{route="unmatched",decision="pass"}`, looked up once: the
    /// pass-through path then counts without building label strings.
    pub(super) unmatched_pass: Counter,
    /// Unix ms of the last upstream success and failure.
    last_ok_ms: Arc<AtomicU64>,
    last_err_ms: Arc<AtomicU64>,
}

impl Default for ProxyStats {
    fn default() -> ProxyStats {
        ProxyStats {
            requests: Family::default(),
            upstream_errors: Family::default(),
            stages: Family::new_with_constructor(crate::decide::stage_histogram),
            unmatched_pass: Counter::default(),
            last_ok_ms: Arc::default(),
            last_err_ms: Arc::default(),
        }
    }
}

impl ProxyStats {
    /// Unregistered stats whose `unmatched_pass` is the `requests` entry.
    fn counting_passes() -> ProxyStats {
        let mut s = ProxyStats::default();
        s.unmatched_pass = s
            .requests
            .get_or_create(&ProxyLabels {
                route: "unmatched".into(),
                decision: "pass".into(),
            })
            .clone();
        s
    }

    pub fn register(registry: &mut Registry) -> ProxyStats {
        let s = ProxyStats::counting_passes();
        registry.register(
            "verdict_proxy_requests",
            "Proxied requests by route (or 'unmatched') and decision",
            s.requests.clone(),
        );
        registry.register(
            "verdict_proxy_upstream_errors",
            "Upstream failures by kind (connect, timeout, body)",
            s.upstream_errors.clone(),
        );
        registry.register(
            "verdict_proxy_gated_stage_seconds",
            "Time of a gated call by stage: body (read and buffered), input (checked, extracted, the forwarded request hashed), forward (an allowed call, until the upstream's response head)",
            s.stages.clone(),
        );
        s
    }

    /// The metrics of Envoy's checks (the ext_authz door), apart from the
    /// proxy's: checks by route and decision, and the stages of a gated
    /// check.
    pub fn register_checks(registry: &mut Registry) -> ProxyStats {
        let s = ProxyStats::counting_passes();
        registry.register(
            "verdict_ext_authz_checks",
            "Envoy ext_authz checks by route (or 'unmatched') and decision",
            s.requests.clone(),
        );
        registry.register(
            "verdict_ext_authz_stage_seconds",
            "Time of a gated check by stage: body (read), input (checked, extracted, the request hashed)",
            s.stages.clone(),
        );
        s
    }

    /// Counts `took` against a stage of the gated path.
    pub(super) fn stage(&self, stage: &'static str, took: std::time::Duration) {
        self.stages
            .get_or_create(&StageLabels { stage })
            .observe(took.as_secs_f64());
    }

    pub(super) fn count(&self, route: &str, decision: &str) {
        self.requests
            .get_or_create(&ProxyLabels {
                route: route.to_string(),
                decision: decision.to_string(),
            })
            .inc();
    }

    pub(super) fn upstream(&self, result: Result<(), &'static str>) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        match result {
            // Stored only when it changed: both proxy threads answer here
            // many times a millisecond, and a store on every answer would
            // bounce the line between their cores.
            Ok(()) if self.last_ok_ms.load(Ordering::Relaxed) != now => {
                self.last_ok_ms.store(now, Ordering::Relaxed);
            }
            Ok(()) => {}
            Err(kind) => {
                self.last_err_ms.store(now, Ordering::Relaxed);
                self.upstream_errors
                    .get_or_create(&ErrorLabels {
                        kind: kind.to_string(),
                    })
                    .inc();
            }
        }
    }
}

/// `/health/detailed` `upstream`: degraded while the last call failed.
pub struct UpstreamComponent {
    pub upstream: Option<String>,
    pub stats: ProxyStats,
}

impl Component for UpstreamComponent {
    fn name(&self) -> &'static str {
        "upstream"
    }

    fn report(&self) -> health::Report {
        let Some(url) = &self.upstream else {
            return health::Report::new(health::Status::Ok).fact("configured", false);
        };
        let ok = self.stats.last_ok_ms.load(Ordering::Relaxed);
        let err = self.stats.last_err_ms.load(Ordering::Relaxed);
        let status = if err > ok {
            health::Status::Degraded
        } else {
            health::Status::Ok
        };
        health::Report::new(status)
            .fact("configured", true)
            .fact("url", url.clone())
            .fact("reachable", err <= ok)
    }
}
