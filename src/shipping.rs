//! Decision-log shipping: every audit record, with its inclusion proof, is
//! `POST`ed to `[audit] export_url` in batches of JSON lines, so that a
//! platform keeps its decision logs off the pod (as OPA's decision-log
//! plugin does) without giving up what makes the audit log worth keeping:
//! each line verifies alone against the log's public key.
//!
//! Shipping is a reader of the log and never part of a decision: records are
//! read from the committed log (a record is shipped once the checkpoint that
//! covers it is signed, which is before its decision is answered), so a slow
//! or dead receiver delays and blocks nothing. Delivery is at least once: a
//! batch is sent again until the receiver answers `2xx`, and the cursor (the
//! next leaf to ship) is written to the data directory only after that, so a
//! restart resumes from the last acknowledged batch and may send the
//! batch after it twice. Each line carries its `record_id` for dedup. Nothing
//! is ever skipped: every failure, whatever its status, is retried with a
//! doubling backoff.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http::Request;
use http_body_util::{BodyExt, Full, Limited};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::audit::export::ShipBatch;
use crate::audit::AuditLog;
use crate::config::{origin_only, ExportConfig};
use crate::support::fence::{self, FencedClient};
use crate::support::time::try_rfc3339;
use crate::telemetry::health::{Component, Report, Status};

/// The cursor's file in the data directory.
pub const CURSOR_FILE: &str = "audit-export.json";
/// The leaf range of a batch, `<first>-<end>` (end exclusive): a receiver
/// may dedup whole batches by it as well as lines by `record_id`.
pub const BATCH_HEADER: &str = "x-verdict-batch";
/// The most of a receiver's answer that is read (so the connection can be
/// reused); the rest is dropped.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    outcome: &'static str,
}

#[derive(Clone)]
struct Metrics {
    records: Counter,
    attempts: Family<AttemptLabels, Counter>,
    lag: Gauge,
}

impl Metrics {
    fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            records: Counter::default(),
            attempts: Family::default(),
            lag: Gauge::default(),
        };
        registry.register(
            "verdict_audit_export_records",
            "Audit records the export_url receiver has acknowledged",
            m.records.clone(),
        );
        registry.register(
            "verdict_audit_export_attempts",
            "POSTs of record batches to export_url, by outcome (ok, connect, timeout, status, read_log)",
            m.attempts.clone(),
        );
        registry.register(
            "verdict_audit_export_lag_records",
            "Records committed to the audit log and not yet acknowledged by export_url",
            m.lag.clone(),
        );
        m
    }

    fn attempt(&self, outcome: &'static str) {
        self.attempts
            .get_or_create(&AttemptLabels { outcome })
            .inc();
    }
}

/// What `/health/detailed` shows of the shipping.
#[derive(Debug, Default)]
struct State {
    next_leaf: u64,
    lag: u64,
    last_error: Option<String>,
    last_success: Option<SystemTime>,
}

/// The cursor file: the next leaf to ship, for one URL (a different URL
/// starts from the first record). The URL is kept as a hash: its path may be
/// a credential.
#[derive(Debug, Serialize, Deserialize)]
struct Cursor {
    url_sha256: String,
    next_leaf: u64,
}

/// Why one attempt failed, as the metric's outcome and a message.
struct Failure {
    outcome: &'static str,
    reason: String,
}

/// Ships the decision log; built at start-up, run by [`Shipper::spawn`].
pub struct Shipper {
    cfg: ExportConfig,
    audit: AuditLog,
    cursor_path: PathBuf,
    url_hash: String,
    client: FencedClient<Full<Bytes>>,
    metrics: Metrics,
    state: Arc<Mutex<State>>,
}

/// The shipper's part of `/health/detailed`: `degraded` while the last
/// attempt failed (decisions go on; records wait in the log).
#[derive(Clone)]
pub struct ShipperHealth {
    url: String,
    state: Arc<Mutex<State>>,
}

impl Shipper {
    /// A shipper for `cfg`, its cursor in `data_dir`, its metrics in
    /// `registry`.
    pub fn new(
        cfg: ExportConfig,
        audit: AuditLog,
        data_dir: &std::path::Path,
        registry: &mut Registry,
    ) -> Result<Shipper, String> {
        let tls = crate::config::client_tls(None, "an https export_url cannot be verified")?;
        let client = fence::client(cfg.timeout, tls);
        let url_hash = hex::encode(Sha256::digest(cfg.url.to_string().as_bytes()));
        Ok(Shipper {
            client,
            audit,
            cursor_path: data_dir.join(CURSOR_FILE),
            url_hash,
            metrics: Metrics::register(registry),
            state: Arc::default(),
            cfg,
        })
    }

    /// Its `/health/detailed` component.
    pub fn health(&self) -> ShipperHealth {
        ShipperHealth {
            url: origin_only(&self.cfg.url),
            state: self.state.clone(),
        }
    }

    /// Ships until `shutdown`. A batch in flight then is cut short; it is
    /// sent again after the restart.
    pub fn spawn(self, shutdown: watch::Receiver<bool>) -> JoinHandle<()> {
        tokio::spawn(self.run(shutdown))
    }

    async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut next = self.load_cursor().await;
        self.set_state(|s| s.next_leaf = next);
        let mut pause = self.cfg.backoff;
        tracing::info!(url = %origin_only(&self.cfg.url), next_leaf = next, "shipping the decision log");
        loop {
            let step = tokio::select! {
                _ = shutdown.wait_for(|s| *s) => break,
                step = self.step(&mut next) => step,
            };
            let wait = match step {
                Ok(more) => {
                    pause = self.cfg.backoff;
                    if more {
                        continue;
                    }
                    self.cfg.interval
                }
                Err(f) => {
                    self.metrics.attempt(f.outcome);
                    tracing::warn!(
                        url = %origin_only(&self.cfg.url),
                        next_leaf = next,
                        retry_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                        error = %f.reason,
                        "decision log batch not shipped; will retry"
                    );
                    self.set_state(|s| s.last_error = Some(f.reason));
                    let wait = pause;
                    pause = pause
                        .saturating_mul(2)
                        .min(crate::config::EXPORT_MAX_BACKOFF);
                    wait
                }
            };
            tokio::select! {
                _ = shutdown.wait_for(|s| *s) => break,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Reads and ships one batch from `next`. `Ok(true)` when a full batch
    /// was shipped (more may be waiting), `Ok(false)` when the log had less.
    async fn step(&self, next: &mut u64) -> Result<bool, Failure> {
        let batch = self
            .audit
            .ship_batch(*next, self.cfg.batch)
            .await
            .map_err(|e| Failure {
                outcome: "read_log",
                reason: format!("cannot read the audit log: {e}"),
            })?;
        if batch.log_size < *next {
            // The cursor is of another log (the data dir was replaced):
            // ship this one from its start.
            tracing::warn!(
                next_leaf = *next,
                log_size = batch.log_size,
                "the export cursor is past the end of the log; shipping from the first record"
            );
            *next = 0;
            return Ok(true);
        }
        let lag = batch.log_size - *next;
        self.metrics.lag.set(i64::try_from(lag).unwrap_or(i64::MAX));
        self.set_state(|s| s.lag = lag);
        if batch.body.is_empty() {
            return Ok(false);
        }
        self.post(&batch).await?;
        let shipped = batch.end - batch.first;
        *next = batch.end;
        self.metrics.attempt("ok");
        self.metrics.records.inc_by(shipped);
        let lag = batch.log_size.saturating_sub(batch.end);
        self.metrics.lag.set(i64::try_from(lag).unwrap_or(i64::MAX));
        self.set_state(|s| {
            s.next_leaf = batch.end;
            s.lag = lag;
            s.last_error = None;
            s.last_success = Some(SystemTime::now());
        });
        self.save_cursor(batch.end).await;
        Ok(shipped >= self.cfg.batch as u64)
    }

    /// One `POST` of the batch, within `export_timeout`.
    async fn post(&self, batch: &ShipBatch) -> Result<(), Failure> {
        let mut req = Request::post(self.cfg.url.clone())
            .header(CONTENT_TYPE, "application/x-ndjson")
            .header(USER_AGENT, concat!("verdict/", env!("CARGO_PKG_VERSION")))
            .header(BATCH_HEADER, format!("{}-{}", batch.first, batch.end));
        if let Some(a) = self
            .cfg
            .authorization
            .as_deref()
            .and_then(|a| HeaderValue::from_str(a).ok())
        {
            req = req.header(AUTHORIZATION, a);
        }
        let req = req
            .body(Full::new(Bytes::from(batch.body.clone())))
            .map_err(|e| Failure {
                outcome: "connect",
                reason: format!("cannot build the request: {e}"),
            })?;
        let call = async {
            let resp = self.client.request(req).await.map_err(|e| Failure {
                outcome: "connect",
                reason: format!("cannot reach export_url: {}", crate::http::error_chain(&e)),
            })?;
            let status = resp.status();
            let _ = Limited::new(resp.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await;
            if status.is_success() {
                Ok(())
            } else {
                Err(Failure {
                    outcome: "status",
                    reason: format!("export_url answered {status}"),
                })
            }
        };
        tokio::time::timeout(self.cfg.timeout, call)
            .await
            .unwrap_or_else(|_| {
                Err(Failure {
                    outcome: "timeout",
                    reason: format!("no answer within {:?}", self.cfg.timeout),
                })
            })
    }

    fn set_state(&self, f: impl FnOnce(&mut State)) {
        if let Ok(mut s) = self.state.lock() {
            f(&mut s);
        }
    }

    /// The next leaf to ship: the cursor's, when it is of this URL; else 0.
    async fn load_cursor(&self) -> u64 {
        let path = self.cursor_path.clone();
        let text = match tokio::fs::read(&path).await {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 0,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the export cursor; shipping from the first record");
                return 0;
            }
        };
        match serde_json::from_slice::<Cursor>(&text) {
            Ok(c) if c.url_sha256 == self.url_hash => c.next_leaf,
            Ok(_) => {
                tracing::info!("export_url changed; shipping the whole log to the new URL");
                0
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "the export cursor is not readable; shipping from the first record");
                0
            }
        }
    }

    /// Writes the cursor (a new file, synced, renamed into place). A failed
    /// write is logged: the next restart sends some batches again.
    async fn save_cursor(&self, next_leaf: u64) {
        let path = self.cursor_path.clone();
        let cursor = Cursor {
            url_sha256: self.url_hash.clone(),
            next_leaf,
        };
        let written = tokio::task::spawn_blocking(move || write_cursor(&path, &cursor)).await;
        if let Some(e) = match written {
            Ok(r) => r.err(),
            Err(e) => Some(e.to_string()),
        } {
            tracing::warn!(error = %e, "cannot write the export cursor; a restart will ship some records again");
        }
    }
}

fn write_cursor(path: &std::path::Path, cursor: &Cursor) -> Result<(), String> {
    use std::io::Write;
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_vec(cursor).map_err(|e| e.to_string())?;
    let mut f = std::fs::File::create(&tmp).map_err(|e| e.to_string())?;
    f.write_all(&text).map_err(|e| e.to_string())?;
    f.sync_all().map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, path).map_err(|e| e.to_string())
}

impl Component for ShipperHealth {
    fn name(&self) -> &'static str {
        "audit_export"
    }

    fn report(&self) -> Report {
        let Ok(s) = self.state.lock() else {
            return Report::new(Status::Degraded).fact("last_error", "state poisoned");
        };
        let status = if s.last_error.is_some() {
            Status::Degraded
        } else {
            Status::Ok
        };
        let mut r = Report::new(status)
            .fact("url", self.url.clone())
            .fact("next_leaf", s.next_leaf)
            .fact("lag", s.lag);
        if let Some(at) = s.last_success.and_then(try_rfc3339) {
            r = r.fact("last_success", at);
        }
        if let Some(e) = &s.last_error {
            r = r.fact("last_error", e.clone());
        }
        r
    }
}
