//! The reverse proxy: intercept the routes named in policy files, decide,
//! then forward, block or hold; pass every other route through untouched.
//!
//! A request runs through a fixed order on one policy snapshot: [`guard`]
//! (refuse paths and method overrides some upstream could read differently),
//! route match (strict, and lenient to catch what a forgiving upstream would
//! still route to a gated handler), a bounded body checked for its media type
//! and for keys two parsers could read differently, the decision (the same
//! [`crate::gate`] the API uses, which writes the audit record before it
//! answers), then forward, block or hold. A refusal of a request that could
//! reach a gated route is recorded like any other decision. Unmatched
//! requests stream through without buffering, except a JSON body to a path
//! gated under another method, which is read to refuse a `_method` in it.
//! Anything that keeps the engine
//! or the audit log from doing its job fails closed (503) unless the route
//! says `failure_mode = "open"`.

mod guard;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONNECTION, CONTENT_TYPE, HOST};
use http::{HeaderMap, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use rustls_pki_types::pem::PemObject;
use serde_json::{json, Value};
use tracing::Instrument;

use crate::app::App;
use crate::config::{MethodOverride, ProxyConfig, Unmatched};
use crate::decide::input::{from_json, Claims};
use crate::decide::{self, DecideError, Input, Refusal};
use crate::engine::decide::{DecisionReason, Outcome};
use crate::error::ApiError;
use crate::health::{self, Component};
use crate::http_util::{self, full, BoxError, RespBody, REQUEST_ID};
use crate::policy::{
    Extractor, FailureMode, OnReview, PathParams, PolicySet, RequestParts, Route, RouteMatch,
};
use crate::review::{ForwardOutcome, HeldRequest, NewReview, Resolution, Viewer};
use crate::server::{ConnInfo, Handler};

/// Headers that describe one hop and are never forwarded (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The largest upstream answer buffered for a held request's reply.
const MAX_HELD_RESPONSE: usize = 16 << 20;

/// The principal a proxied decision is recorded under; reserved, so no API
/// key can be named after it (see `crate::auth`).
pub use crate::auth::PROXY_PRINCIPAL;

type UpstreamClient = Client<HttpsConnector<HttpConnector>, RespBody>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProxyLabels {
    route: String,
    decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    kind: String,
}

/// Proxy metrics and upstream reachability.
#[derive(Clone, Debug, Default)]
pub struct ProxyStats {
    requests: Family<ProxyLabels, Counter>,
    upstream_errors: Family<ErrorLabels, Counter>,
    /// `requests{route="unmatched",decision="pass"}`, looked up once: the
    /// pass-through path then counts without building label strings.
    unmatched_pass: Counter,
    /// Unix ms of the last upstream success and failure.
    last_ok_ms: Arc<AtomicU64>,
    last_err_ms: Arc<AtomicU64>,
}

impl ProxyStats {
    pub fn register(registry: &mut Registry) -> ProxyStats {
        let mut s = ProxyStats::default();
        s.unmatched_pass = s
            .requests
            .get_or_create(&ProxyLabels {
                route: "unmatched".into(),
                decision: "pass".into(),
            })
            .clone();
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
        s
    }

    fn count(&self, route: &str, decision: &str) {
        self.requests
            .get_or_create(&ProxyLabels {
                route: route.to_string(),
                decision: decision.to_string(),
            })
            .inc();
    }

    fn upstream(&self, result: Result<(), &'static str>) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        match result {
            Ok(()) => self.last_ok_ms.store(now, Ordering::Relaxed),
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

/// Builds the one pooled upstream client: http, and https through rustls
/// (ring) with the configured CA file or else the system roots.
fn build_client(cfg: &ProxyConfig) -> Result<UpstreamClient, String> {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(cfg.connect_timeout));
    http.set_nodelay(true);
    http.enforce_http(false);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = match &cfg.ca_file {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            let certs = rustls_pki_types::CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("proxy.ca_file {}: {e}", path.display()))?;
            for cert in certs {
                let cert = cert.map_err(|e| format!("proxy.ca_file {}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("proxy.ca_file {}: {e}", path.display()))?;
            }
            if roots.is_empty() {
                return Err(format!(
                    "proxy.ca_file {}: no certificate found",
                    path.display()
                ));
            }
            let tls = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls)
        }
        None => match hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(provider.clone())
        {
            Ok(b) => b,
            Err(e) => {
                // Plain http upstreams still work; an https one fails its
                // certificate check (502) until proxy.ca_file is set.
                tracing::warn!(error = %e, "no system root certificates; set proxy.ca_file for an https upstream");
                let tls = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| e.to_string())?
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth();
                hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls)
            }
        },
    };
    let connector = builder.https_or_http().enable_http1().wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(1024)
        .pool_timer(TokioTimer::new())
        .build(connector))
}

/// The proxy as a [`Handler`].
pub struct Proxy {
    app: Arc<App>,
    upstream: Uri,
    client: UpstreamClient,
    cfg: ProxyConfig,
    stats: ProxyStats,
    /// Where held requests are forwarded from.
    held: HeldSender,
}

/// The runtime [`Proxy::new`] ran on (the main one) and a client whose pool
/// lives there: held forwards run on it, so that they outlive the proxy
/// thread that released them.
#[derive(Clone)]
struct HeldSender {
    runtime: tokio::runtime::Handle,
    client: UpstreamClient,
}

/// Why forwarding failed.
enum UpstreamError {
    Connect(String),
    Timeout,
}

impl Proxy {
    pub fn new(
        app: Arc<App>,
        upstream: Uri,
        cfg: ProxyConfig,
        stats: ProxyStats,
    ) -> Result<Proxy, String> {
        let client = build_client(&cfg)?;
        let held = HeldSender {
            runtime: tokio::runtime::Handle::try_current().map_err(|e| e.to_string())?,
            client: client.clone(),
        };
        Ok(Proxy {
            client,
            app,
            upstream,
            cfg,
            stats,
            held,
        })
    }

    /// A proxy for another thread's runtime: the same settings, its own
    /// upstream pool (a pooled connection is driven by the runtime that
    /// opened it), the same sender of held requests.
    pub fn for_thread(&self) -> Result<Proxy, String> {
        Ok(Proxy {
            client: build_client(&self.cfg)?,
            app: self.app.clone(),
            upstream: self.upstream.clone(),
            cfg: self.cfg.clone(),
            stats: self.stats.clone(),
            held: self.held.clone(),
        })
    }

    // === phases ===

    async fn route(
        &self,
        req: Request<Incoming>,
        conn: ConnInfo,
        request_id: &str,
    ) -> Response<RespBody> {
        let set = self.app.policies.load_full();
        let raw_path = req.uri().path();
        let opted_out = self
            .cfg
            .raw_path_prefixes
            .iter()
            .any(|p| raw_path.starts_with(p.as_str()));
        if !opted_out {
            if let Some(why) = guard::path_problem(raw_path) {
                let route = set.reach_any_method(raw_path);
                let refusal = RefuseWith {
                    route,
                    reason: DecisionReason::AmbiguousPath,
                    status: StatusCode::BAD_REQUEST,
                    message: format!("the request path holds {why}"),
                };
                return self.refuse(&set, &req, refusal, request_id).await;
            }
        }
        if let Some(other) = guard::path_override(req.headers()) {
            let other_path = other.split(['?', '#']).next().unwrap_or("").to_string();
            let route = set
                .reach_any_method(raw_path)
                .or_else(|| set.reach_any_method(&other_path));
            let refusal = RefuseWith {
                route,
                reason: DecisionReason::AmbiguousPath,
                status: StatusCode::BAD_REQUEST,
                message: "the request names another path in X-Original-URL or X-Rewrite-URL, which some servers route by".into(),
            };
            return self.refuse(&set, &req, refusal, request_id).await;
        }
        let mut method = req.method().as_str().to_string();
        match guard::override_method(req.headers(), req.uri().query()) {
            Ok(None) => {}
            Ok(Some(m))
                if self.cfg.method_override == MethodOverride::Route
                    && http::Method::from_bytes(m.as_bytes()).is_ok() =>
            {
                method = m;
            }
            asked => {
                let message = match asked {
                    Err(e) => e,
                    Ok(m) => format!(
                        "the request asks to be treated as {} (method override), which this proxy refuses",
                        m.unwrap_or_default()
                    ),
                };
                let route = set.reach_any_method(raw_path);
                let refusal = RefuseWith {
                    route,
                    reason: DecisionReason::MethodOverride,
                    status: StatusCode::BAD_REQUEST,
                    message,
                };
                return self.refuse(&set, &req, refusal, request_id).await;
            }
        }
        let (route, path_params) = match set.classify(&method, raw_path) {
            RouteMatch::Matched(route, params) => (route.clone(), params),
            RouteMatch::Ambiguous(route) => {
                let refusal = RefuseWith {
                    route: Some(route),
                    reason: DecisionReason::AmbiguousPath,
                    status: StatusCode::BAD_REQUEST,
                    message: format!(
                        "the path is not the route's path {:?} as written, but some servers would route it there",
                        route.path
                    ),
                };
                return self.refuse(&set, &req, refusal, request_id).await;
            }
            RouteMatch::Unmatched => {
                // A form or JSON body can carry `_method`, which a framework
                // may honour to reach a route gated under another method. A
                // form is refused outright; a JSON body is read to look.
                let kind = guard::body_kind(req.headers());
                let gated_elsewhere = match kind {
                    guard::BodyKind::Other => None,
                    _ => set.reach_any_method(raw_path),
                };
                match (kind, gated_elsewhere) {
                    (guard::BodyKind::Form, Some(route)) => {
                        let refusal = RefuseWith {
                            route: Some(route),
                            reason: DecisionReason::MethodOverride,
                            status: StatusCode::BAD_REQUEST,
                            message: format!(
                                "a form body to a path gated under {} could ask for that method with _method",
                                route.method
                            ),
                        };
                        return self.refuse(&set, &req, refusal, request_id).await;
                    }
                    (guard::BodyKind::Json, Some(route))
                        if self.cfg.unmatched == Unmatched::Forward =>
                    {
                        return self
                            .unmatched_json(req, conn, request_id, &set, route)
                            .await;
                    }
                    _ => return self.unmatched(req, conn, request_id).await,
                }
            }
        };
        match self
            .gated(req, conn, request_id, &set, &route, &path_params)
            .await
        {
            Ok(resp) => resp,
            Err(e) => {
                self.stats.count(&route.name, "error");
                e.into_response(request_id)
            }
        }
    }

    /// Refuses a request before it is decided. When it could reach a gated
    /// route, the refusal is a recorded `deny` decision of that route (and
    /// fails closed with 503 if the record cannot be written).
    async fn refuse<B>(
        &self,
        set: &PolicySet,
        req: &Request<B>,
        refusal: RefuseWith<'_>,
        request_id: &str,
    ) -> Response<RespBody> {
        let reason = refusal.reason.as_str();
        let Some(route) = refusal.route else {
            self.stats.count("unmatched", reason);
            let mut resp = blocked(request_id, "deny", reason, None, &refusal.message);
            *resp.status_mut() = refusal.status;
            return resp;
        };
        self.stats.count(&route.name, "deny");
        let target = json!({
            "refused": {
                "method": req.method().as_str(),
                "target": req.uri().path_and_query().map(|pq| pq.as_str()).unwrap_or("/"),
            }
        });
        let request_hash = match http_util::canonical_hash(&target) {
            Ok(h) => h,
            Err(e) => return e.into_response(request_id),
        };
        let ctx = decide::Ctx {
            principal: PROXY_PRINCIPAL,
            request_id,
            request_hash: &request_hash,
            route: Some(&route.name),
        };
        // Params that need no body: path params are unknown (the path is the
        // problem), query and headers are as sent.
        let no_path = PathParams::default();
        let params = route
            .extract(&RequestParts {
                path_params: &no_path,
                query: req.uri().query(),
                headers: req.headers(),
                body: None,
            })
            .params;
        let outcome = decide::refuse(
            &self.app.decide_handles(),
            set,
            Refusal {
                action_type: &route.action,
                params,
                reason: refusal.reason,
            },
            &ctx,
        )
        .await;
        match outcome {
            Ok(receipt) => {
                let record_id = receipt.record_id.to_string();
                let mut resp = blocked(
                    request_id,
                    "deny",
                    reason,
                    Some(&record_id),
                    &refusal.message,
                );
                *resp.status_mut() = refusal.status;
                resp
            }
            Err(e) => ApiError::Unavailable(format!(
                "the refusal cannot be recorded, failing closed: {e}"
            ))
            .into_response(request_id),
        }
    }

    /// Unmatched: stream through, or block when `proxy.unmatched = "deny"`.
    async fn unmatched(
        &self,
        req: Request<Incoming>,
        conn: ConnInfo,
        request_id: &str,
    ) -> Response<RespBody> {
        if self.cfg.unmatched == Unmatched::Deny {
            self.stats.count("unmatched", "deny");
            return blocked(
                request_id,
                "deny",
                "unmatched_route",
                None,
                "no policy route matches this request",
            );
        }
        self.stats.unmatched_pass.inc();
        let (parts, body) = req.into_parts();
        let body = body.map_err(|e| Box::new(e) as BoxError).boxed_unsync();
        self.forward(
            parts.method,
            parts.uri,
            parts.headers,
            body,
            conn,
            request_id,
            &[],
        )
        .await
    }

    /// Unmatched, with a JSON body, on a path that `route` gates under
    /// another method: the body is read (within `limits.max_body_bytes`) and
    /// refused if it asks for another method with `_method`, else forwarded
    /// as read.
    async fn unmatched_json(
        &self,
        req: Request<Incoming>,
        conn: ConnInfo,
        request_id: &str,
        set: &PolicySet,
        route: &Route,
    ) -> Response<RespBody> {
        let (parts, body) = req.into_parts();
        let limit = self.app.config.limits.max_body_bytes;
        let bytes = match http_util::read_body(&parts.headers, body, limit).await {
            Ok(b) => b,
            Err(e) => return e.into_response(request_id),
        };
        if let Some(message) = guard::body_method_override("application/json", &bytes, None) {
            let probe = Request::from_parts(parts, ());
            let refusal = RefuseWith {
                route: Some(route),
                reason: DecisionReason::MethodOverride,
                status: StatusCode::BAD_REQUEST,
                message: format!("{message} (the path is gated under {})", route.method),
            };
            return self.refuse(set, &probe, refusal, request_id).await;
        }
        self.stats.unmatched_pass.inc();
        self.forward(
            parts.method,
            parts.uri,
            parts.headers,
            full(bytes),
            conn,
            request_id,
            &[],
        )
        .await
    }

    async fn gated(
        &self,
        req: Request<Incoming>,
        conn: ConnInfo,
        request_id: &str,
        set: &crate::policy::PolicySet,
        route: &Route,
        path_params: &PathParams,
    ) -> Result<Response<RespBody>, ApiError> {
        let (parts, body) = req.into_parts();
        let limit = self.app.config.limits.max_body_bytes;
        let bytes = http_util::read_body(&parts.headers, body, limit).await?;
        let refuse = |reason, status, message: String| RefuseWith {
            route: Some(route),
            reason,
            status,
            message,
        };
        let probe = Request::from_parts(parts.clone(), ());

        // The body must be of the media type the route gates, and readable
        // one way only.
        if route.reads_body() || !bytes.is_empty() {
            let problem = match guard::media_type(&parts.headers) {
                Ok(Some(m)) if m == route.content_type => guard::parameter_problem(&parts.headers),
                Ok(Some(m)) => Some(format!(
                    "this route gates {} bodies, not {m}",
                    route.content_type
                )),
                Ok(None) => Some(format!(
                    "this route gates {} bodies and the request has no Content-Type",
                    route.content_type
                )),
                Err(e) => Some(e),
            };
            if let Some(message) = problem {
                let r = refuse(
                    DecisionReason::UnsupportedContentType,
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    message,
                );
                return Ok(self.refuse(set, &probe, r, request_id).await);
            }
        }
        let json_body = if route.reads_body() {
            let pointers = body_pointers(route);
            match guard::parse_json(&bytes, &pointers) {
                Ok(v) => Some(v),
                Err(guard::BodyError::Invalid(e)) => {
                    let r = refuse(
                        DecisionReason::PolicyViolation,
                        StatusCode::BAD_REQUEST,
                        format!("this route reads a JSON body and the body is not valid JSON: {e}"),
                    );
                    return Ok(self.refuse(set, &probe, r, request_id).await);
                }
                Err(guard::BodyError::Ambiguous(e)) => {
                    let r = refuse(
                        DecisionReason::AmbiguousBody,
                        StatusCode::BAD_REQUEST,
                        format!("the body is ambiguous: {e}"),
                    );
                    return Ok(self.refuse(set, &probe, r, request_id).await);
                }
            }
        } else {
            None
        };
        // A `_method` in the body asks for another route, as the override
        // headers and query do.
        if !bytes.is_empty() {
            if let Some(message) =
                guard::body_method_override(&route.content_type, &bytes, json_body.as_ref())
            {
                let r = refuse(
                    DecisionReason::MethodOverride,
                    StatusCode::BAD_REQUEST,
                    message,
                );
                return Ok(self.refuse(set, &probe, r, request_id).await);
            }
        }
        let extracted = route.extract(&RequestParts {
            path_params,
            query: parts.uri.query(),
            headers: &parts.headers,
            body: json_body.as_ref(),
        });
        // The request as the upstream gets it once allowed (or approved):
        // its hash is the decision record's request_hash and, when the call
        // is held, the review's, which an approval is bound to.
        let held = HeldRequest {
            method: parts.method.as_str().to_string(),
            path: parts
                .uri
                .path_and_query()
                .map(|pq| pq.as_str().to_string())
                .unwrap_or_else(|| "/".into()),
            headers: forward_headers(&parts.headers, conn, request_id)
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), Bytes::copy_from_slice(v.as_bytes())))
                .collect(),
            body: bytes.clone(),
        };
        let request_hash = held.hash();
        // The decision's input, read from the parts the extractors found.
        let input = (|| {
            Ok::<_, DecideError>(Input {
                action_type: route.action.clone(),
                params: extracted.params,
                // A JSON null is no claims or no answer, as in an API body.
                claims: extracted
                    .claims
                    .filter(|c| !c.is_null())
                    .map(|c| from_json::<Claims>("claims", c).map(|c| c.0))
                    .transpose()?,
                answer: extracted
                    .answer
                    .filter(|a| !a.is_null())
                    .map(|a| from_json("answer", a))
                    .transpose()?,
                sources: extracted
                    .sources
                    .map(|s| from_json("sources", s))
                    .transpose()?
                    .unwrap_or_default(),
                requested: Default::default(),
            })
        })();
        let input = match input {
            Ok(i) => i,
            Err(e) => {
                let r = refuse(
                    DecisionReason::PolicyViolation,
                    StatusCode::BAD_REQUEST,
                    format!("the request's justification is malformed: {e}"),
                );
                return Ok(self.refuse(set, &probe, r, request_id).await);
            }
        };

        // Decide (and audit) on the same path as /v2/authorize.
        let ctx = decide::Ctx {
            principal: PROXY_PRINCIPAL,
            request_id,
            request_hash: &request_hash,
            route: Some(&route.name),
        };
        let outcome = match decide::authorize(&self.app.decide_handles(), set, input, &ctx).await {
            Ok(o) => o,
            Err(e @ (DecideError::Unavailable(_) | DecideError::Internal(_))) => {
                if route.failure_mode == FailureMode::Open {
                    tracing::warn!(route = %route.name, error = %e, "gate failed; route is fail-open, forwarding");
                    self.stats.count(&route.name, "fail_open");
                    let body = full(bytes);
                    let extra = [("x-verdict-decision", "unavailable".to_string())];
                    return Ok(self
                        .forward(
                            parts.method,
                            parts.uri,
                            parts.headers,
                            body,
                            conn,
                            request_id,
                            &extra,
                        )
                        .await);
                }
                return Err(ApiError::Unavailable(format!(
                    "the gate cannot decide, failing closed: {e}"
                )));
            }
            Err(e @ (DecideError::Malformed(_) | DecideError::Invalid(_))) => {
                // A justification the decision cannot use is a refusal like
                // any other, and on record.
                let status = ApiError::from(e.clone()).status();
                let r = refuse(DecisionReason::PolicyViolation, status, e.to_string());
                return Ok(self.refuse(set, &probe, r, request_id).await);
            }
        };
        let record_id = outcome.receipt.record_id.to_string();
        // The caller (and the reviewer's 202 poller) learn which rules fired.
        let rules: Vec<String> = outcome
            .rule_hits
            .iter()
            .map(|h| h.message.clone())
            .collect();
        let decision = outcome.decision;
        let reason = decision.reason.as_str();
        self.stats.count(&route.name, decision.outcome.as_str());
        match decision.outcome {
            Outcome::Allow => {
                let extra = [
                    ("x-verdict-decision", "allow".to_string()),
                    ("x-verdict-record-id", record_id.clone()),
                ];
                let mut resp = self
                    .forward(
                        parts.method,
                        parts.uri,
                        parts.headers,
                        full(bytes),
                        conn,
                        request_id,
                        &extra,
                    )
                    .await;
                // The caller learns the decision and its record too.
                resp.headers_mut()
                    .insert("x-verdict-decision", HeaderValue::from_static("allow"));
                if let Ok(v) = HeaderValue::from_str(&record_id) {
                    resp.headers_mut().insert("x-verdict-record-id", v);
                }
                Ok(resp)
            }
            Outcome::Deny => Ok(with_rules(
                blocked(
                    request_id,
                    "deny",
                    reason,
                    Some(&record_id),
                    "denied by policy",
                ),
                &rules,
            )
            .await),
            Outcome::NeedsReview if route.on_review == OnReview::Deny => Ok(with_rules(
                blocked(
                    request_id,
                    "needs_review",
                    reason,
                    Some(&record_id),
                    "this call needs review and the route does not hold calls",
                ),
                &rules,
            )
            .await),
            Outcome::NeedsReview => {
                let resp = self
                    .hold(route, held, reason, &rules, &record_id, request_id)
                    .await?;
                Ok(with_rules(resp, &rules).await)
            }
        }
    }

    /// Stores the call for a reviewer and waits up to the route's hold timeout.
    async fn hold(
        &self,
        route: &Route,
        held: HeldRequest,
        reason: &str,
        rules: &[String],
        record_id: &str,
        request_id: &str,
    ) -> Result<Response<RespBody>, ApiError> {
        let reviews = &self.app.reviews;
        let (view, joined) = reviews
            .create_or_join(NewReview {
                review_id: None,
                owner: PROXY_PRINCIPAL.to_string(),
                route: route.name.clone(),
                action: route.action.clone(),
                reason: reason.to_string(),
                rules: rules.to_vec(),
                record_id: Some(record_id.to_string()),
                request: held,
            })
            .await
            .map_err(|e| {
                ApiError::Unavailable(format!("cannot hold the request for review: {e}"))
            })?;
        let id = view.review_id.clone();
        if joined {
            tracing::info!(review_id = %id, route = %route.name, record_id = %record_id, "retried call joined its pending review");
        } else {
            tracing::info!(review_id = %id, route = %route.name, "request held for review");
        }
        match reviews.wait(&id, route.hold_timeout).await {
            Ok(Some(Resolution::Approved)) => match forward_held(&self.app, self, &id).await {
                Some(resp) => Ok(resp),
                None => Ok(pending(&id, request_id)),
            },
            Ok(Some(Resolution::Rejected | Resolution::Expired)) => Ok(blocked(
                request_id,
                "deny",
                "review_rejected",
                Some(record_id),
                "a reviewer rejected this call",
            )),
            Ok(None) => Ok(pending(&id, request_id)),
            Err(e) => Err(ApiError::Unavailable(format!("review store failed: {e}"))),
        }
    }

    /// Sends one request upstream; an upstream failure becomes its 502/504.
    #[allow(clippy::too_many_arguments)]
    async fn forward(
        &self,
        method: http::Method,
        uri: Uri,
        headers: HeaderMap,
        body: RespBody,
        conn: ConnInfo,
        request_id: &str,
        extra: &[(&str, String)],
    ) -> Response<RespBody> {
        match self
            .send(method, uri, headers, body, conn, request_id, extra)
            .await
        {
            Ok(resp) => resp,
            Err(e) => self.upstream_failure(e, request_id),
        }
    }

    /// Sends one request upstream and returns its streamed response.
    #[allow(clippy::too_many_arguments)]
    async fn send(
        &self,
        method: http::Method,
        uri: Uri,
        headers: HeaderMap,
        body: RespBody,
        conn: ConnInfo,
        request_id: &str,
        extra: &[(&str, String)],
    ) -> Result<Response<RespBody>, UpstreamError> {
        let target = self.target(&uri);
        let mut req = Request::new(body);
        *req.method_mut() = method;
        *req.uri_mut() = target;
        *req.headers_mut() = forward_headers(&headers, conn, request_id);
        for (k, v) in extra {
            if let (Ok(k), Ok(v)) = (
                HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(v),
            ) {
                req.headers_mut().insert(k, v);
            }
        }
        self.send_request(req).await
    }

    async fn send_request(
        &self,
        req: Request<RespBody>,
    ) -> Result<Response<RespBody>, UpstreamError> {
        let result =
            tokio::time::timeout(self.cfg.response_timeout, self.client.request(req)).await;
        match result {
            Err(_) => {
                self.stats.upstream(Err("timeout"));
                Err(UpstreamError::Timeout)
            }
            Ok(Err(e)) => {
                self.stats.upstream(Err("connect"));
                Err(UpstreamError::Connect(e.to_string()))
            }
            Ok(Ok(resp)) => {
                self.stats.upstream(Ok(()));
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Ok(Response::from_parts(
                    parts,
                    body.map_err(|e| Box::new(e) as BoxError).boxed_unsync(),
                ))
            }
        }
    }

    fn target(&self, uri: &Uri) -> Uri {
        let base = self.upstream.path().trim_end_matches('/');
        let mut parts = self.upstream.clone().into_parts();
        if base.is_empty() {
            // The common case: no base path, so the incoming path-and-query
            // is reused as is (a refcount, not a copy and re-parse).
            parts.path_and_query = Some(
                uri.path_and_query()
                    .cloned()
                    .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
            );
            return Uri::from_parts(parts).unwrap_or_else(|_| self.upstream.clone());
        }
        let pq = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        parts.path_and_query = format!("{base}{pq}").parse().ok();
        Uri::from_parts(parts).unwrap_or_else(|_| self.upstream.clone())
    }

    fn upstream_failure(&self, e: UpstreamError, request_id: &str) -> Response<RespBody> {
        let err = match e {
            UpstreamError::Timeout => ApiError::UpstreamTimeout(self.cfg.response_timeout),
            UpstreamError::Connect(m) => ApiError::UpstreamUnavailable(m),
        };
        tracing::warn!(request_id, status = err.status().as_u16(), message = %err, "upstream failure");
        err.into_response(request_id)
    }
}

/// Claims the forward of an approved review and sends it, exactly once.
/// Returns the upstream answer (buffered, so it can also be stored), or
/// `None` when another task owns the forward or the claim failed.
pub async fn forward_held(app: &App, proxy: &Proxy, review_id: &str) -> Option<Response<RespBody>> {
    let reviews = app.reviews.clone();
    let held = match reviews.claim_forward(review_id).await {
        Ok(Some(h)) => h,
        Ok(None) => return None,
        Err(e) => {
            tracing::error!(review_id, error = %e, "cannot claim the forward of an approved review");
            return None;
        }
    };
    let mut headers = HeaderMap::new();
    for (k, v) in &held.headers {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_bytes(v),
        ) {
            headers.append(k, v);
        }
    }
    headers.insert("x-verdict-decision", HeaderValue::from_static("allow"));
    if let Ok(v) = HeaderValue::from_str(review_id) {
        headers.insert("x-verdict-review-id", v);
    }
    // The upstream learns which decision record the approval released, as
    // for any allowed call. It is added here, not held, so the held request
    // hashes as it did when it was decided.
    if !headers.contains_key("x-verdict-record-id") {
        let admin = Viewer {
            name: PROXY_PRINCIPAL.to_string(),
            sees_all: true,
        };
        if let Ok(Some(view)) = reviews.get(review_id, &admin).await {
            if let Some(v) = view
                .record_id
                .as_deref()
                .and_then(|id| HeaderValue::from_str(id).ok())
            {
                headers.insert("x-verdict-record-id", v);
            }
        }
    }
    let method = http::Method::from_bytes(held.method.as_bytes()).unwrap_or(http::Method::POST);
    let uri: Uri = held.path.parse().unwrap_or_else(|_| Uri::from_static("/"));
    let mut req = Request::new(full(held.body.clone()));
    *req.method_mut() = method;
    *req.uri_mut() = proxy.target(&uri);
    *req.headers_mut() = headers;
    // The send runs in its own task so that a client hanging up cannot leave
    // the forward stuck at `started`.
    let client = proxy.held.client.clone();
    let timeout = proxy.cfg.response_timeout;
    let stats = proxy.stats.clone();
    let id = review_id.to_string();
    let task = proxy.held.runtime.spawn(async move {
        let outcome = match tokio::time::timeout(timeout, client.request(req)).await {
            Err(_) => Err("the upstream timed out".to_string()),
            Ok(Err(e)) => Err(format!("the upstream could not be reached: {e}")),
            Ok(Ok(resp)) => {
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                match Limited::new(body, MAX_HELD_RESPONSE).collect().await {
                    Ok(c) => Ok((parts, c.to_bytes())),
                    Err(e) => Err(format!("reading the upstream answer failed: {e}")),
                }
            }
        };
        match outcome {
            Ok((parts, body)) => {
                stats.upstream(Ok(()));
                let ct = parts
                    .headers
                    .get(CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                let done = ForwardOutcome::Done {
                    status: parts.status.as_u16(),
                    body: body.clone(),
                    content_type: ct,
                };
                if let Err(e) = reviews.finish_forward(&id, done).await {
                    tracing::error!(review_id = %id, error = %e, "cannot store the forward outcome");
                }
                tracing::info!(review_id = %id, status = parts.status.as_u16(), "held request forwarded");
                Some(Response::from_parts(parts, full(body)))
            }
            Err(error) => {
                stats.upstream(Err("held_forward"));
                tracing::error!(review_id = %id, %error, "forwarding a held request failed");
                if let Err(e) = reviews
                    .finish_forward(&id, ForwardOutcome::Failed { error })
                    .await
                {
                    tracing::error!(review_id = %id, error = %e, "cannot store the forward outcome");
                }
                None
            }
        }
    });
    task.await.ok().flatten()
}

/// Forwards approvals that no live connection is waiting for: the ones left
/// from before a restart, then each new one as it arrives.
pub async fn run_background_forwarder(
    app: Arc<App>,
    proxy: Arc<Proxy>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let Some(mut rx) = app.reviews.take_unattended_approvals() else {
        return;
    };
    match app.reviews.approved_unforwarded().await {
        Ok(ids) => {
            for id in ids {
                forward_held(&app, &proxy, &id).await;
            }
        }
        Err(e) => tracing::error!(error = %e, "cannot list approved reviews to forward"),
    }
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => break,
            id = rx.recv() => match id {
                Some(id) => {
                    let (app, proxy) = (app.clone(), proxy.clone());
                    tokio::spawn(async move { forward_held(&app, &proxy, &id).await; });
                }
                None => break,
            },
        }
    }
}

/// The headers sent upstream: hop-by-hop and spoofable `x-verdict-*` removed,
/// `X-Forwarded-*` and `X-Request-ID` set. The body stays byte-identical.
fn forward_headers(incoming: &HeaderMap, conn: ConnInfo, request_id: &str) -> HeaderMap {
    let mut h = incoming.clone();
    strip_hop_by_hop(&mut h);
    let names: Vec<HeaderName> = h
        .keys()
        .filter(|k| k.as_str().starts_with("x-verdict-"))
        .cloned()
        .collect();
    for n in names {
        h.remove(n);
    }
    let host = h.remove(HOST);
    let peer = conn.peer.ip().to_string();
    let xff = match h.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(prev) => format!("{prev}, {peer}"),
        None => peer,
    };
    if let Ok(v) = HeaderValue::from_str(&xff) {
        h.insert("x-forwarded-for", v);
    }
    h.insert(
        "x-forwarded-proto",
        HeaderValue::from_static(if conn.tls { "https" } else { "http" }),
    );
    if let Some(host) = host {
        h.insert("x-forwarded-host", host);
    }
    if let Ok(v) = HeaderValue::from_str(request_id) {
        h.insert(REQUEST_ID, v);
    }
    h
}

fn strip_hop_by_hop(h: &mut HeaderMap) {
    // Names listed in `Connection` are hop-by-hop too. `from_bytes`
    // lowercases; an empty or invalid name is skipped. No allocation unless
    // the header lists something (this runs twice per proxied call).
    let listed: Vec<HeaderName> = h
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|s| HeaderName::from_bytes(s.trim().as_bytes()).ok())
        .collect();
    for name in HOP_BY_HOP {
        h.remove(name);
    }
    for name in listed {
        h.remove(name);
    }
}

/// A refusal before any decision: which route it concerns (when it could
/// reach one), and what the caller is told.
struct RefuseWith<'a> {
    route: Option<&'a Route>,
    reason: DecisionReason,
    status: StatusCode,
    message: String,
}

/// The JSON pointers of a route's `body:` extractors.
fn body_pointers(route: &Route) -> Vec<&str> {
    route
        .params
        .iter()
        .map(|(_, e)| e)
        .chain(route.claims.iter())
        .chain(route.sources.iter())
        .chain(route.answer.iter())
        .filter_map(|e| match e {
            Extractor::Body(p) => Some(p.as_str()),
            _ => None,
        })
        .collect()
}

/// `403` with the DESIGN §8 deny body.
fn blocked(
    request_id: &str,
    decision: &str,
    reason: &str,
    record_id: Option<&str>,
    message: &str,
) -> Response<RespBody> {
    let mut body = json!({
        "error": {"code": "denied", "message": message, "request_id": request_id},
        "decision": decision,
        "reason": reason,
        "request_id": request_id,
    });
    if let Some(r) = record_id {
        body["record_id"] = json!(r);
    }
    let mut resp = Response::new(full(body.to_string()));
    *resp.status_mut() = StatusCode::FORBIDDEN;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(v) = HeaderValue::from_str(decision) {
        resp.headers_mut().insert("x-verdict-decision", v);
    }
    if let Some(v) = record_id.and_then(|r| HeaderValue::from_str(r).ok()) {
        resp.headers_mut().insert("x-verdict-record-id", v);
    }
    resp
}

/// Adds `rules` (the messages of the policy rules that fired) to a JSON
/// body verdict itself wrote (a 403 or a 202); any other answer, such as
/// the upstream's after an approval, is returned as it is.
async fn with_rules(resp: Response<RespBody>, rules: &[String]) -> Response<RespBody> {
    let ours = matches!(resp.status(), StatusCode::FORBIDDEN | StatusCode::ACCEPTED)
        && resp.headers().contains_key("x-verdict-decision");
    if rules.is_empty() || !ours {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    // Our own 403 and 202 bodies are small and already in memory.
    let Ok(collected) = body.collect().await else {
        return Response::from_parts(parts, full(Bytes::new()));
    };
    let bytes = collected.to_bytes();
    let body = match serde_json::from_slice::<Value>(&bytes) {
        Ok(mut v) => {
            v["rules"] = json!(rules);
            Bytes::from(v.to_string())
        }
        Err(_) => bytes,
    };
    let mut parts = parts;
    parts.headers.remove(http::header::CONTENT_LENGTH);
    Response::from_parts(parts, full(body))
}

/// `202` for a hold that outlived its timeout.
fn pending(review_id: &str, request_id: &str) -> Response<RespBody> {
    let body = json!({
        "review_id": review_id,
        "status": "pending",
        "poll": format!("/v2/reviews/{review_id}"),
        "request_id": request_id,
    });
    let mut resp = Response::new(full(body.to_string()));
    *resp.status_mut() = StatusCode::ACCEPTED;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.headers_mut().insert(
        "x-verdict-decision",
        HeaderValue::from_static("needs_review"),
    );
    resp
}

impl Handler for Proxy {
    async fn handle(&self, req: Request<Incoming>, conn: ConnInfo) -> Response<RespBody> {
        let started = Instant::now();
        let request_id = http_util::request_id(req.headers());
        let span = tracing::info_span!(
            "proxy",
            request_id = %request_id,
            method = %req.method(),
            path = %req.uri().path(),
            peer = %conn.peer
        );
        async move {
            let mut resp = self.route(req, conn, &request_id).await;
            if let Ok(v) = HeaderValue::from_str(&request_id) {
                resp.headers_mut().insert(REQUEST_ID, v);
            }
            tracing::info!(
                status = resp.status().as_u16(),
                latency_ms = (started.elapsed().as_secs_f64() * 1_000_000.0).round() / 1000.0,
                "proxied"
            );
            resp
        }
        .instrument(span)
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> ConnInfo {
        ConnInfo {
            peer: "10.0.0.7:5000".parse().unwrap(),
            local: "127.0.0.1:8080".parse().unwrap(),
            tls: false,
        }
    }

    #[test]
    fn forwarded_headers_drop_hop_by_hop_and_spoofed_decisions() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        h.insert("x-verdict-decision", HeaderValue::from_static("allow"));
        h.insert("x-forwarded-for", HeaderValue::from_static("1.2.3.4"));
        h.insert(HOST, HeaderValue::from_static("shop.example"));
        h.insert("x-customer-id", HeaderValue::from_static("C-9"));
        let out = forward_headers(&h, conn(), "rid");
        assert!(out.get("connection").is_none());
        assert!(out.get("x-secret").is_none());
        assert!(out.get("transfer-encoding").is_none());
        assert!(out.get("x-verdict-decision").is_none());
        assert_eq!(out["x-forwarded-for"], "1.2.3.4, 10.0.0.7");
        assert_eq!(out["x-forwarded-host"], "shop.example");
        assert_eq!(out["x-forwarded-proto"], "http");
        assert_eq!(out["x-request-id"], "rid");
        assert_eq!(out["x-customer-id"], "C-9");
    }
}
