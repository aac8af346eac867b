//! The native JSON API: one routing table, one request pipeline, typed
//! handlers.
//!
//! Every request goes through the same steps in [`Api::handle`]: name it
//! (request id), route it (404/405), authenticate it for the endpoint's scope
//! (401/403), run the handler, and map any error through
//! [`ApiError::into_response`]. JSON endpoints also check the content type
//! (415), bound the body (413) and parse it once into a value whose canonical
//! hash is the `request_hash`.

use std::sync::Arc;
use std::time::Instant;

use crate::server::ReqBody;
use http::header::AUTHORIZATION;
use http::{Method, Request, Response, StatusCode};
use tracing::Instrument;

use crate::http::auth::{AuthFailure, Principal, Scope};
use crate::http::error::ApiError;
use crate::http::{bytes_response, json_response, JsonBody, RespBody};
use crate::runtime::App;
use crate::server::{ConnInfo, Handler};
use crate::telemetry::health::Liveness;

pub mod authorize;
mod authzen;
mod batch;
pub mod console;
mod reviews;
mod verify;
pub mod wire;

/// Entry points for the fuzz targets in `fuzz/`: the request body parsers
/// that are otherwise private to the API. Not a stable interface.
#[doc(hidden)]
pub mod fuzzing {
    pub use super::batch::validate as validate_batch;
    pub use super::verify::{prepare as prepare_verify, VerifyRequest};
}

/// The endpoints the API serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Health,
    Ready,
    HealthDetailed,
    Metrics,
    Verify,
    Authorize,
    AuthzenEvaluation,
    AuthzenEvaluations,
    AuthzenConfiguration,
    BatchSubmit,
    JobGet,
    ReviewList,
    ReviewGet,
    ReviewApprove,
    ReviewReject,
    ReviewResult,
    AuditRecord,
    AuditProof,
    AuditKey,
    AuditCheckpoint,
    AuditConsistency,
    AuditRecords,
}

/// Who may call an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// No key needed.
    Public,
    /// A key with this scope.
    Scope(Scope),
    /// A key with either scope: the first is the one a refusal names.
    Either(Scope, Scope),
}

/// One row of the routing table.
struct RouteDef {
    /// The path template, as in docs/openapi.yaml (`{name}` for a segment).
    template: &'static str,
    method: Method,
    endpoint: Endpoint,
    /// Who may call it.
    access: Access,
}

const fn route(
    template: &'static str,
    method: Method,
    endpoint: Endpoint,
    access: Access,
) -> RouteDef {
    RouteDef {
        template,
        method,
        endpoint,
        access,
    }
}

/// The routing table: the only place that names paths.
#[rustfmt::skip]
static ROUTES: &[RouteDef] = &[
    route("/health", Method::GET, Endpoint::Health, Access::Public),
    route("/ready", Method::GET, Endpoint::Ready, Access::Public),
    route("/health/detailed", Method::GET, Endpoint::HealthDetailed, Access::Public),
    route("/metrics", Method::GET, Endpoint::Metrics, Access::Public),
    route("/v2/verify", Method::POST, Endpoint::Verify, Access::Scope(Scope::Verify)),
    route("/v2/authorize", Method::POST, Endpoint::Authorize, Access::Scope(Scope::Authorize)),
    // OpenID AuthZEN Authorization API 1.0 (docs/authzen.md).
    route("/access/v1/evaluation", Method::POST, Endpoint::AuthzenEvaluation, Access::Scope(Scope::Authorize)),
    route("/access/v1/evaluations", Method::POST, Endpoint::AuthzenEvaluations, Access::Scope(Scope::Authorize)),
    route("/.well-known/authzen-configuration", Method::GET, Endpoint::AuthzenConfiguration, Access::Public),
    route("/v1/verify-claims-batch", Method::POST, Endpoint::BatchSubmit, Access::Scope(Scope::Batch)),
    // An `audit` key reads any tenant's job; a `batch` key its own.
    route("/v2/jobs/{job_id}", Method::GET, Endpoint::JobGet, Access::Either(Scope::Batch, Scope::Audit)),
    route("/v2/reviews", Method::GET, Endpoint::ReviewList, Access::Scope(Scope::Review)),
    route("/v2/reviews/{review_id}", Method::GET, Endpoint::ReviewGet, Access::Scope(Scope::Review)),
    route("/v2/reviews/{review_id}/approve", Method::POST, Endpoint::ReviewApprove, Access::Scope(Scope::Review)),
    route("/v2/reviews/{review_id}/reject", Method::POST, Endpoint::ReviewReject, Access::Scope(Scope::Review)),
    // The held caller's own link: the token in the path is the capability.
    route("/v2/reviews/{review_id}/result/{token}", Method::GET, Endpoint::ReviewResult, Access::Public),
    // Before `/v2/audit/{record_id}`: the first matching route wins.
    route("/v2/audit/checkpoint", Method::GET, Endpoint::AuditCheckpoint, Access::Public),
    route("/v2/audit/consistency", Method::GET, Endpoint::AuditConsistency, Access::Public),
    route("/v2/audit/records", Method::GET, Endpoint::AuditRecords, Access::Scope(Scope::Audit)),
    route("/v2/audit/{record_id}", Method::GET, Endpoint::AuditRecord, Access::Scope(Scope::Audit)),
    route("/v2/audit/{record_id}/proof", Method::GET, Endpoint::AuditProof, Access::Scope(Scope::Audit)),
    route("/v2/audit/keys/{key_id}", Method::GET, Endpoint::AuditKey, Access::Public),
];

/// The batch item function (a `/v2/verify` per item), for start-up.
pub fn batch_item_fn(
    resolver: crate::evidence::Resolver,
    rt: tokio::runtime::Handle,
) -> crate::jobs::ItemFn {
    batch::item_fn(resolver, rt)
}

/// `(method, template)` of every route, for the OpenAPI consistency test.
pub fn route_table() -> Vec<(&'static str, &'static str)> {
    ROUTES
        .iter()
        .map(|r| (r.method.as_str(), r.template))
        .collect()
}

/// Matches a path against a template; returns the `{name}` segment values.
fn match_template<'p>(template: &str, path: &'p str) -> Option<Vec<&'p str>> {
    let mut params = Vec::new();
    let mut t = template.split('/');
    let mut p = path.split('/');
    loop {
        match (t.next(), p.next()) {
            (None, None) => return Some(params),
            (Some(ts), Some(ps)) if ts.starts_with('{') && ts.ends_with('}') => {
                if ps.is_empty() {
                    return None;
                }
                params.push(ps);
            }
            (Some(ts), Some(ps)) if ts == ps => {}
            _ => return None,
        }
    }
}

/// A routed request: the route and its path parameters.
struct Matched<'p> {
    def: &'static RouteDef,
    params: Vec<&'p str>,
}

/// Routes a request. On failure, also returns the template the path matched
/// (for a 405), so metrics never carry raw paths.
fn resolve<'p>(
    method: &Method,
    path: &'p str,
) -> Result<Matched<'p>, (Option<&'static str>, ApiError)> {
    let mut allowed = Vec::new();
    let mut template = None;
    for def in ROUTES {
        if let Some(params) = match_template(def.template, path) {
            if def.method == *method || (*method == Method::HEAD && def.method == Method::GET) {
                return Ok(Matched { def, params });
            }
            template = Some(def.template);
            allowed.push(def.method.clone());
        }
    }
    if allowed.is_empty() {
        Err((
            None,
            ApiError::NotFound(format!("no such endpoint: {path}")),
        ))
    } else {
        Err((template, ApiError::MethodNotAllowed(allowed)))
    }
}

/// What a handler knows about the request it serves.
pub struct Call {
    pub request_id: String,
    pub principal: Principal,
    pub started: Instant,
}

/// The native API as a [`Handler`].
pub struct Api {
    app: Arc<App>,
    console: console::Console,
}

impl Api {
    pub fn new(app: Arc<App>) -> Api {
        Api {
            console: console::Console::new(app.clone()),
            app,
        }
    }

    async fn dispatch(
        &self,
        req: Request<ReqBody>,
        request_id: &str,
        started: Instant,
    ) -> (&'static str, Result<Response<RespBody>, ApiError>) {
        let path = req.uri().path().to_string();
        if console::Console::owns(&path) {
            return ("/console/", Ok(self.console.handle(req, request_id).await));
        }
        let routed = match resolve(req.method(), &path) {
            Ok(r) => r,
            Err((template, e)) => return (template.unwrap_or("unmatched"), Err(e)),
        };
        let def = routed.def;
        let auth = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if def.access == Access::Scope(Scope::Review)
            && self.app.keys.mode() == crate::http::auth::AuthMode::Open
        {
            return (def.template, Err(ApiError::ReviewsNeedKeys));
        }
        let authenticated = match def.access {
            Access::Public => Ok(Principal::anonymous()),
            Access::Scope(scope) => self.app.keys.authenticate(auth, Some(scope)),
            Access::Either(first, second) => self.app.keys.authenticate(auth, None).and_then(|p| {
                if p.has(first) || p.has(second) {
                    Ok(p)
                } else {
                    Err(AuthFailure::MissingScope(first))
                }
            }),
        };
        let principal = match authenticated {
            Ok(p) => p,
            Err(AuthFailure::Unauthenticated) => {
                return (def.template, Err(ApiError::Unauthorized))
            }
            Err(AuthFailure::MissingScope(s)) => {
                return (def.template, Err(ApiError::Forbidden(s.as_str())))
            }
        };
        let ctx = Call {
            request_id: request_id.to_string(),
            principal,
            started,
        };
        let param = routed.params.first().copied().unwrap_or_default();
        let result = match def.endpoint {
            Endpoint::Health => self.health(),
            Endpoint::Ready => self.ready(),
            Endpoint::HealthDetailed => self.health_detailed(),
            Endpoint::Metrics => self.metrics(),
            Endpoint::Verify => self.verify(req, &ctx).await,
            Endpoint::Authorize => self.authorize(req, &ctx).await,
            Endpoint::AuthzenEvaluation => self.authzen_evaluation(req, &ctx).await,
            Endpoint::AuthzenEvaluations => self.authzen_evaluations(req, &ctx).await,
            Endpoint::AuthzenConfiguration => self.authzen_configuration(&req),
            Endpoint::BatchSubmit => self.batch_submit(req, &ctx).await,
            Endpoint::JobGet => self.job_get(param, req.uri().query(), &ctx).await,
            Endpoint::ReviewList => self.review_list(req.uri().query(), &ctx).await,
            Endpoint::ReviewGet => self.review_get(param, &ctx).await,
            Endpoint::ReviewApprove => self.review_resolve(req, param, true, &ctx).await,
            Endpoint::ReviewReject => self.review_resolve(req, param, false, &ctx).await,
            Endpoint::ReviewResult => {
                let token = routed.params.get(1).copied().unwrap_or_default();
                self.review_result(param, token).await
            }
            Endpoint::AuditRecord => self.audit_record(param).await,
            Endpoint::AuditProof => self.audit_proof(param).await,
            Endpoint::AuditKey => self.audit_key(param),
            Endpoint::AuditCheckpoint => self.audit_checkpoint().await,
            Endpoint::AuditConsistency => self.audit_consistency(req.uri().query()).await,
            Endpoint::AuditRecords => self.audit_records(req.uri().query()).await,
        };
        (def.template, result)
    }

    /// Reads and parses a JSON body under `limit` bytes.
    async fn json_body(&self, req: Request<ReqBody>, limit: usize) -> Result<JsonBody, ApiError> {
        let (parts, body) = req.into_parts();
        crate::http::require_json(&parts.headers)?;
        let bytes = crate::http::read_body(&parts.headers, body, limit).await?;
        // Parsing and canonicalising a large body is CPU work: keep it off
        // the async workers so one big upload cannot stall other requests.
        const INLINE_PARSE: usize = 64 * 1024;
        if bytes.len() <= INLINE_PARSE {
            crate::http::parse_json(&bytes)
        } else {
            tokio::task::spawn_blocking(move || crate::http::parse_json(&bytes))
                .await
                .map_err(|e| ApiError::Internal(format!("body parse task failed: {e}")))?
        }
    }

    /// A JSON body under `limits.max_body_bytes`, the limit of every
    /// endpoint but the batch submit.
    async fn body(&self, req: Request<ReqBody>) -> Result<JsonBody, ApiError> {
        self.json_body(req, self.app.config.limits.max_body_bytes)
            .await
    }

    async fn verify(
        &self,
        req: Request<ReqBody>,
        ctx: &Call,
    ) -> Result<Response<RespBody>, ApiError> {
        let body = self.body(req).await?;
        let resp = verify::handle(body, &self.app.resolver, &ctx.request_id, ctx.started).await?;
        json_response(StatusCode::OK, &resp)
    }

    async fn authorize(
        &self,
        req: Request<ReqBody>,
        ctx: &Call,
    ) -> Result<Response<RespBody>, ApiError> {
        let body = self.body(req).await?;
        let typed: authorize::AuthorizeRequest = crate::http::typed(&body.value)?;
        let (mode, input) = typed.into_input()?;
        let explain = authorize::ExplainInput::capture(mode, &input);
        let set = self.app.policies.load_full();
        let decide_ctx = crate::decide::Ctx {
            source: crate::decide::Source::Api,
            principal: &ctx.principal.name,
            request_id: &ctx.request_id,
            request_hash: &body.hash,
            route: None,
        };
        let outcome =
            crate::decide::authorize(&self.app.decide_handles(), &set, input, &decide_ctx).await?;
        let mut resp =
            authorize::response(&outcome, mode, &ctx.request_id, &body.hash, ctx.started);
        if let Some(e) = explain {
            e.add_to(&mut resp, &outcome, &set);
        }
        json_response(StatusCode::OK, &resp)
    }

    async fn batch_submit(
        &self,
        req: Request<ReqBody>,
        ctx: &Call,
    ) -> Result<Response<RespBody>, ApiError> {
        let key = batch::idempotency_key(req.headers())?;
        let limits = &self.app.config.limits;
        let body = self.json_body(req, limits.max_batch_body_bytes).await?;
        let max_items = limits.max_batch_items;
        let b = tokio::task::spawn_blocking(move || batch::validate(body, max_items))
            .await
            .map_err(|e| ApiError::Internal(format!("batch validation task failed: {e}")))??;
        let outcome = self
            .app
            .jobs
            .submit(&ctx.principal.name, key.as_deref(), &b.hash, b.items)
            .await;
        let (status, value) = batch::submitted(outcome)?;
        json_response(status, &value)
    }

    async fn job_get(
        &self,
        id: &str,
        query: Option<&str>,
        ctx: &Call,
    ) -> Result<Response<RespBody>, ApiError> {
        let page = batch::page(query)?;
        let admin = ctx.principal.has(Scope::Audit);
        let view = self
            .app
            .jobs
            .get(id, &ctx.principal.name, admin, page)
            .await
            .map_err(ApiError::from)?
            .ok_or_else(|| ApiError::NotFound(format!("no job {id}")))?;
        json_response(StatusCode::OK, &view)
    }

    async fn review_list(
        &self,
        query: Option<&str>,
        ctx: &Call,
    ) -> Result<Response<RespBody>, ApiError> {
        let (status, limit) = reviews::list_query(query)?;
        let list = self
            .app
            .reviews
            .list(status, &reviews::viewer(&ctx.principal), limit)
            .await?;
        json_response(StatusCode::OK, &serde_json::json!({ "reviews": list }))
    }

    async fn review_get(&self, id: &str, ctx: &Call) -> Result<Response<RespBody>, ApiError> {
        let view = self
            .app
            .reviews
            .get(id, &reviews::viewer(&ctx.principal))
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("no review {id}")))?;
        // What the reviewer decides on (params, claims, rules), as the
        // console shows it; never the held body or headers.
        let mut details = self
            .app
            .reviews
            .details(std::slice::from_ref(&view))
            .await?;
        let mut body = serde_json::to_value(&view)
            .map_err(|e| ApiError::Internal(format!("review view: {e}")))?;
        if let (Some(obj), Some(detail)) = (body.as_object_mut(), details.remove(&view.review_id)) {
            obj.insert("decision".into(), detail);
        }
        json_response(StatusCode::OK, &body)
    }

    /// What a held caller learns of its call: the status, and once
    /// forwarded the upstream's answer. A wrong token is a 404, like an
    /// unknown id.
    async fn review_result(&self, id: &str, token: &str) -> Result<Response<RespBody>, ApiError> {
        let (view, upstream) = self
            .app
            .reviews
            .result(id, token)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("no review {id} with this token")))?;
        json_response(
            StatusCode::OK,
            &reviews::result_body(&view, upstream.as_ref()),
        )
    }

    async fn review_resolve(
        &self,
        req: Request<ReqBody>,
        id: &str,
        approve: bool,
        ctx: &Call,
    ) -> Result<Response<RespBody>, ApiError> {
        let body = self.body(req).await?;
        let view = reviews::resolve_json(
            &self.app.reviews,
            &self.app.audit,
            &ctx.principal,
            &ctx.request_id,
            id,
            approve,
            body,
        )
        .await?;
        json_response(StatusCode::OK, &view)
    }

    /// The stored record with this id. Only `audit` keys get here (the
    /// routing table), and an `audit` key sees every record, so
    /// there is no per-record check: who caused a record never decides who
    /// may read it.
    async fn stored_record(&self, id: &str) -> Result<(uuid::Uuid, String), ApiError> {
        let not_found = || ApiError::NotFound(format!("no audit record {id}"));
        let uuid = uuid::Uuid::parse_str(id).map_err(|_| not_found())?;
        let stored = self.app.audit.record(uuid).await?.ok_or_else(not_found)?;
        Ok((uuid, stored.canonical))
    }

    async fn audit_record(&self, id: &str) -> Result<Response<RespBody>, ApiError> {
        let (_, canonical) = self.stored_record(id).await?;
        Ok(bytes_response(
            StatusCode::OK,
            "application/json",
            canonical,
        ))
    }

    async fn audit_proof(&self, id: &str) -> Result<Response<RespBody>, ApiError> {
        let (uuid, _) = self.stored_record(id).await?;
        let proof = self
            .app
            .audit
            .proof(uuid)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("no audit record {id}")))?;
        Ok(bytes_response(
            StatusCode::OK,
            "application/json",
            proof.to_json(),
        ))
    }

    /// The newest checkpoint as a signed note, with every cosignature its
    /// witnesses returned for it.
    async fn audit_checkpoint(&self) -> Result<Response<RespBody>, ApiError> {
        let note =
            self.app.audit.checkpoint().await?.ok_or_else(|| {
                ApiError::Unavailable("the audit log has no checkpoint yet".into())
            })?;
        Ok(bytes_response(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            note,
        ))
    }

    /// `?first=N&second=M`: the RFC 6962 consistency proof between two tree
    /// sizes, `0 < N <= M <=` the newest checkpoint's size.
    async fn audit_consistency(&self, query: Option<&str>) -> Result<Response<RespBody>, ApiError> {
        let (mut first, mut second) = (None, None);
        for (k, v) in crate::http::query_params(query)? {
            let n = v
                .parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("{k}: expected a tree size, got {v:?}")));
            match k.as_str() {
                "first" => first = Some(n?),
                "second" => second = Some(n?),
                other => {
                    return Err(ApiError::BadRequest(format!(
                        "unknown query parameter {other:?} (first, second)"
                    )))
                }
            }
        }
        let (Some(first), Some(second)) = (first, second) else {
            return Err(ApiError::BadRequest(
                "first and second (tree sizes) are required".into(),
            ));
        };
        let proof = self
            .app
            .audit
            .consistency(first, second)
            .await?
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "no proof from size {first} to {second}: need 0 < first <= second <= \
                     the newest checkpoint's size"
                ))
            })?;
        json_response(
            StatusCode::OK,
            &crate::audit::ConsistencyDocument::new(first, second, &proof),
        )
    }

    /// Records matching the query's filters (`since`, `until`, `kind`,
    /// `action`, `decision`, `would_decide`, `route`, `principal`), oldest
    /// first; `limit` (1..=1000, default 100) per page, `cursor` from the
    /// previous page's `next_cursor`.
    async fn audit_records(&self, query: Option<&str>) -> Result<Response<RespBody>, ApiError> {
        let mut filter = crate::audit::export::Filter::default();
        let (mut cursor, mut limit) = (0u64, 100usize);
        for (k, v) in crate::http::query_params(query)? {
            match k.as_str() {
                "cursor" => {
                    cursor = v.parse().map_err(|_| {
                        ApiError::BadRequest(format!("cursor: {v:?} is not a cursor"))
                    })?
                }
                "limit" => {
                    limit = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=1000).contains(n))
                        .ok_or_else(|| {
                            ApiError::BadRequest(format!("limit: {v:?} is not in 1..=1000"))
                        })?
                }
                _ => filter.set(&k, &v).map_err(ApiError::BadRequest)?,
            }
        }
        let page = self.app.audit.search(filter, cursor, limit).await?;
        json_response(StatusCode::OK, &page)
    }

    fn audit_key(&self, key_id: &str) -> Result<Response<RespBody>, ApiError> {
        let doc = self
            .app
            .audit
            .key(key_id)
            .ok_or_else(|| ApiError::NotFound(format!("no signing key {key_id}")))?;
        json_response(StatusCode::OK, &doc)
    }

    /// Readiness: 200 only while a gated call can be decided, which needs
    /// a serving process (not starting, not draining) and an audit log that
    /// can append. Liveness (`/health`) stays 200 through an audit outage
    /// that the log recovers from by itself (a failed commit is retried by
    /// the next group); a probe that restarted the pod for it would only
    /// lose the held requests' connections. A stopped audit writer does not
    /// recover, nor does a log halted by a witness's rollback: they turn
    /// `/health` too.
    fn ready(&self) -> Result<Response<RespBody>, ApiError> {
        let mut reasons = Vec::new();
        if self.app.health.is_draining() {
            reasons.push("draining".to_string());
        } else if !self.app.health.is_live() {
            reasons.push("starting".to_string());
        }
        let audit = self.app.audit.health();
        if audit.failing {
            reasons.push(format!(
                "the audit log cannot append{}",
                audit
                    .last_error
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ));
        }
        if reasons.is_empty() {
            json_response(StatusCode::OK, &serde_json::json!({"status": "ready"}))
        } else {
            json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &serde_json::json!({"status": "not_ready", "reasons": reasons}),
            )
        }
    }

    /// Liveness: 200 while the process serves; 503 while starting or
    /// draining, and when a component failed for good (the audit writer
    /// stopped, a witness showed a rollback), which only a restart repairs.
    fn health(&self) -> Result<Response<RespBody>, ApiError> {
        let unavailable =
            |body: serde_json::Value| json_response(StatusCode::SERVICE_UNAVAILABLE, &body);
        match self.app.health.liveness() {
            Liveness::Live => json_response(StatusCode::OK, &serde_json::json!({"status": "ok"})),
            Liveness::Draining => unavailable(serde_json::json!({"status": "draining"})),
            Liveness::Starting => unavailable(serde_json::json!({"status": "starting"})),
            Liveness::Dead(reasons) => {
                unavailable(serde_json::json!({"status": "failing", "reasons": reasons}))
            }
        }
    }

    fn health_detailed(&self) -> Result<Response<RespBody>, ApiError> {
        json_response(StatusCode::OK, &self.app.health.detailed())
    }

    fn metrics(&self) -> Result<Response<RespBody>, ApiError> {
        let text = crate::telemetry::metrics::encode(&self.app.registry)
            .map_err(|e| ApiError::Internal(format!("encode metrics: {e}")))?;
        Ok(bytes_response(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            text,
        ))
    }
}

impl Handler for Api {
    type Conn = ();

    fn open(&self) {}

    /// Probes: answered even on a connection accepted past the cap.
    fn essential(&self, req: &Request<ReqBody>) -> bool {
        matches!(*req.method(), Method::GET | Method::HEAD)
            && matches!(req.uri().path(), "/health" | "/ready" | "/metrics")
    }

    async fn handle(&self, req: Request<ReqBody>, conn: ConnInfo, _: &()) -> Response<RespBody> {
        let started = Instant::now();
        let request_id = crate::http::request_id(req.headers());
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let span = tracing::info_span!("request", request_id = %request_id, %method, %path, peer = %conn.peer);
        crate::telemetry::trace::adopt(&span, req.headers());
        async move {
            let (endpoint, result) = self.dispatch(req, &request_id, started).await;
            let mut resp = result.unwrap_or_else(|e| e.into_response(&request_id));
            crate::http::stamp_request_id(&mut resp, &request_id);
            let status = resp.status().as_u16();
            let elapsed = started.elapsed();
            self.app
                .http_metrics
                .observe(endpoint, method.as_str(), status, elapsed);
            // The request id on the line itself, not only in its span.
            tracing::info!(
                request_id = %request_id,
                status,
                latency_ms = crate::http::latency_ms(elapsed),
                "request done"
            );
            resp
        }
        .instrument(span)
        .await
    }
}

#[cfg(test)]
mod tests;
