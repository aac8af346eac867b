//! A gated route: buffer the body, check its media type and keys, extract
//! the params and the justification, decide on the one decision path
//! ([`crate::decide`]), then forward, block or hold; and the refusals that
//! are recorded before any decision.

use std::time::Instant;

use tracing::Instrument as _;

use crate::server::ReqBody;
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};

use super::read::{self, RefuseWith};
use super::upstream::Outbound;
use super::{forward_headers, Downstream, Proxy, PROXY_PRINCIPAL};
use crate::decide::{self, DecideError, Refusal};
use crate::engine::decide::{DecisionReason, Outcome};
use crate::http::error::ApiError;
use crate::http::{full, RespBody};
use crate::policy::{FailureMode, OnReview, PathParams, PolicySet, RequestParts, Route};
use crate::review::HeldRequest;

/// HTTP/2 may split `Cookie` into one field per cookie (RFC 9113,
/// section 8.2.3); they are one header, joined with `; ` as that section
/// asks before the request goes on over HTTP/1.1. A gated HTTP/1 request
/// with two `Cookie` headers is refused instead (RFC 6265 allows one).
fn join_cookie_crumbs(headers: &mut http::HeaderMap) {
    let crumbs: Vec<&[u8]> = headers
        .get_all(http::header::COOKIE)
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    if crumbs.len() < 2 {
        return;
    }
    let joined = crumbs.join(&b"; "[..]);
    if let Ok(v) = HeaderValue::from_bytes(&joined) {
        headers.insert(http::header::COOKIE, v);
    }
}

/// `403` with the proxy's deny body: the error object, the decision, the
/// reason and the record id.
pub(super) fn blocked(
    request_id: &str,
    decision: &str,
    reason: &str,
    record_id: Option<&str>,
    message: &str,
) -> Response<RespBody> {
    let mut body = ApiError::Denied(message.to_string()).body_value(request_id);
    body["decision"] = json!(decision);
    body["reason"] = json!(reason);
    body["request_id"] = json!(request_id);
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

/// What a caller may learn of a decision that did not let its call
/// through, so that it can correct its justification: the messages of the
/// rules that fired, each claim that is not supported (id, status, reason
/// codes, and the claim's own words that nothing in the evidence aligns
/// with), the `bind` params no supported claim states, and the sources
/// that were refused or could not be read. Never evidence text: a conflict
/// quotes the evidence, so conflicts are left out; the caller's own claim
/// words are not evidence.
#[derive(Debug, Default)]
pub(super) struct Findings {
    rules: Vec<String>,
    claims: Vec<Value>,
    unbound: Vec<String>,
    sources: Vec<Value>,
}

impl Findings {
    pub(super) fn of(o: &decide::Decided) -> Findings {
        let claims = o
            .checks
            .iter()
            .filter(|c| c.status != crate::engine::ClaimStatus::Supported)
            .map(|c| {
                let mut v = json!({
                    "claim_id": c.claim_id,
                    "status": c.status.as_str(),
                    "reasons": c.reasons.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
                });
                if !c.unaligned.is_empty() {
                    v["unaligned"] = json!(c.unaligned.iter().map(|s| &s.text).collect::<Vec<_>>());
                }
                v
            })
            .collect();
        let source = |reason: &str, (id, why): &(String, String)| json!({"source_id": id, "reason": reason, "detail": why});
        let sources = o
            .untrusted
            .iter()
            .map(|u| source("untrusted_source", u))
            .chain(o.unavailable.iter().map(|u| source("fetch_failed", u)))
            .collect();
        Findings {
            rules: o.rule_hits.iter().map(|h| h.message.clone()).collect(),
            claims,
            unbound: o.unbound.clone(),
            sources,
        }
    }

    fn is_empty(&self) -> bool {
        self.rules.is_empty()
            && self.claims.is_empty()
            && self.unbound.is_empty()
            && self.sources.is_empty()
    }

    /// Adds the non-empty findings to a body verdict wrote.
    fn write_into(&self, v: &mut Value) {
        if !self.rules.is_empty() {
            v["rules"] = json!(self.rules);
        }
        if !self.claims.is_empty() {
            v["claims"] = json!(self.claims);
        }
        if !self.unbound.is_empty() {
            v["unbound_params"] = json!(self.unbound);
        }
        if !self.sources.is_empty() {
            v["sources"] = json!(self.sources);
        }
    }
}

/// Adds the [`Findings`] of a decision to a JSON body verdict itself wrote
/// (a 403 or a 202); any other answer, such as the upstream's after an
/// approval, is returned as it is.
pub(super) async fn with_findings(resp: Response<RespBody>, f: &Findings) -> Response<RespBody> {
    let ours = matches!(resp.status(), StatusCode::FORBIDDEN | StatusCode::ACCEPTED)
        && resp.headers().contains_key("x-verdict-decision");
    if f.is_empty() || !ours {
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
            f.write_into(&mut v);
            Bytes::from(v.to_string())
        }
        Err(_) => bytes,
    };
    let mut parts = parts;
    parts.headers.remove(http::header::CONTENT_LENGTH);
    Response::from_parts(parts, full(body))
}

impl Proxy {
    /// Refuses a request before it is decided. When it could reach a gated
    /// route, the refusal is a recorded `deny` decision of that route (and
    /// fails closed with 503 if the record cannot be written).
    pub(super) async fn refuse<B>(
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
        let request_hash = match crate::http::canonical_hash(&target) {
            Ok(h) => h,
            Err(e) => return e.into_response(request_id),
        };
        let ctx = decide::Ctx {
            source: self.source(),
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

    /// Answers a request to a gated route: reads its body and the
    /// decision's input, decides (and audits), then forwards, blocks or
    /// holds it.
    pub(super) async fn gated(
        &self,
        req: Request<ReqBody>,
        from: Downstream<'_>,
        set: &crate::policy::PolicySet,
        route: &Route,
        path_params: &PathParams,
    ) -> Result<Response<RespBody>, ApiError> {
        let request_id = from.request_id;
        let started = Instant::now();
        let (mut parts, body) = req.into_parts();
        if parts.version == http::Version::HTTP_2 {
            join_cookie_crumbs(&mut parts.headers);
        }
        let limit = self.app.config.limits.max_body_bytes;
        let bytes = crate::http::read_body(&parts.headers, body, limit).await?;
        let read = Instant::now();
        self.stats.stage("body", read - started);
        let probe = Request::from_parts(parts.clone(), ());
        let g = Buffered {
            set,
            route,
            parts,
            bytes,
            probe,
            from,
        };

        // The body checked, the extractors run, the decision's input read
        // (`read::gated_input`, which `verdict test` runs too).
        let input = match read::gated_input(
            route,
            &g.parts.headers,
            g.parts.uri.query(),
            &g.bytes,
            path_params,
        ) {
            Ok(input) => input,
            Err(r) => return Ok(self.refuse(set, &g.probe, r, request_id).await),
        };
        let held = g.held();
        let request_hash = held.hash();
        self.stats.stage("input", read.elapsed());

        // Decide (and audit) on the same path as /v2/authorize.
        let ctx = decide::Ctx {
            source: self.source(),
            principal: PROXY_PRINCIPAL,
            request_id,
            request_hash: &request_hash,
            route: Some(&route.name),
        };
        match decide::authorize(&self.app.decide_handles(), set, input, &ctx).await {
            Ok(outcome) => self.decided(g, held, outcome).await,
            Err(e) => self.undecided(g, e).await,
        }
    }

    /// Answers a request the gate could not decide: when the gate is
    /// unavailable, forwarded on a fail-open route and failed closed on any
    /// other; when its justification cannot be used, refused on record.
    async fn undecided(
        &self,
        g: Buffered<'_>,
        e: DecideError,
    ) -> Result<Response<RespBody>, ApiError> {
        let route = g.route;
        match e {
            e @ (DecideError::Unavailable(_) | DecideError::Internal(_)) => {
                if route.failure_mode == FailureMode::Open {
                    tracing::warn!(route = %route.name, error = %e, "gate failed; route is fail-open, forwarding");
                    self.stats.count(&route.name, "fail_open");
                    let extra = [("x-verdict-decision", "unavailable".to_string())];
                    let (conn, request_id) = (g.from.conn, g.from.request_id);
                    let out = Outbound::new(g.parts, full(g.bytes), conn, request_id, &extra);
                    return Ok(self.forward(out).await);
                }
                Err(ApiError::Unavailable(format!(
                    "the gate cannot decide, failing closed: {e}"
                )))
            }
            e @ (DecideError::Malformed(_) | DecideError::Invalid(_)) => {
                // A justification the decision cannot use is a refusal like
                // any other, and on record.
                let status = ApiError::from(e.clone()).status();
                let r = RefuseWith {
                    route: Some(route),
                    reason: DecisionReason::PolicyViolation,
                    status,
                    message: e.to_string(),
                };
                Ok(self.refuse(g.set, &g.probe, r, g.from.request_id).await)
            }
        }
    }

    /// Answers a decided request: forwarded when allowed; blocked when
    /// denied, or when it needs review on a route that holds no calls;
    /// held otherwise. Verdict's own 403 or 202 carries the findings.
    async fn decided(
        &self,
        g: Buffered<'_>,
        held: HeldRequest,
        outcome: decide::Decided,
    ) -> Result<Response<RespBody>, ApiError> {
        let (route, request_id) = (g.route, g.from.request_id);
        let record_id = outcome.receipt.record_id.to_string();
        // The caller (and the reviewer's 202 poller) learn what to fix.
        let findings = Findings::of(&outcome);
        let decision = outcome.decision.clone();
        let reason = decision.reason.as_str();
        self.stats.count(&route.name, decision.outcome.as_str());
        match decision.outcome {
            Outcome::Allow => Ok(self.allowed(g, record_id).await),
            Outcome::Deny => Ok(with_findings(
                blocked(
                    request_id,
                    "deny",
                    reason,
                    Some(&record_id),
                    "denied by policy",
                ),
                &findings,
            )
            .await),
            Outcome::NeedsReview if route.on_review == OnReview::Deny => Ok(with_findings(
                blocked(
                    request_id,
                    "needs_review",
                    reason,
                    Some(&record_id),
                    "this call needs review and the route does not hold calls",
                ),
                &findings,
            )
            .await),
            Outcome::NeedsReview => {
                let resp = self.hold(route, held, &outcome, request_id).await?;
                Ok(with_findings(resp, &findings).await)
            }
        }
    }

    /// Forwards an allowed request, on its connection's own upstream
    /// connection when it has one, and tells the caller the decision and
    /// its record.
    async fn allowed(&self, g: Buffered<'_>, record_id: String) -> Response<RespBody> {
        let Downstream {
            conn,
            affinity,
            request_id,
        } = g.from;
        let span = tracing::info_span!(target: crate::telemetry::trace::TARGET, "forward", upstream = %self.upstream);
        let mut extra = vec![
            ("x-verdict-decision", "allow".to_string()),
            ("x-verdict-record-id", record_id.clone()),
        ];
        // A caller's trace context goes on as sent; a trace started here
        // goes on naming this forward.
        if !g.parts.headers.contains_key("traceparent") {
            extra.extend(crate::telemetry::trace::traceparent(&span));
        }
        let sent = Instant::now();
        let out = Outbound::new(g.parts, full(g.bytes), conn, request_id, &extra);
        let mut resp = self.forward(out.on(affinity)).instrument(span).await;
        if self.mode == super::Mode::Forward {
            self.stats.stage("forward", sent.elapsed());
        }
        // The caller learns the decision and its record too.
        resp.headers_mut()
            .insert("x-verdict-decision", HeaderValue::from_static("allow"));
        if let Ok(v) = HeaderValue::from_str(&record_id) {
            resp.headers_mut().insert("x-verdict-record-id", v);
        }
        resp
    }
}

/// A gated request with its body read, carried from the decision to the
/// answer: its policy set and route, its head and body (moved into the
/// forward when it goes upstream), a copy of its head for refusals, and
/// where it came from.
struct Buffered<'a> {
    set: &'a PolicySet,
    route: &'a Route,
    parts: http::request::Parts,
    bytes: Bytes,
    /// The head alone, which [`Proxy::refuse`] reads.
    probe: Request<()>,
    from: Downstream<'a>,
}

impl Buffered<'_> {
    /// The request as the upstream gets it once allowed (or approved):
    /// its hash is the decision record's request_hash and, when the call
    /// is held, the review's, which an approval is bound to.
    fn held(&self) -> HeldRequest {
        let Downstream {
            conn, request_id, ..
        } = self.from;
        HeldRequest {
            method: self.parts.method.as_str().to_string(),
            path: self
                .parts
                .uri
                .path_and_query()
                .map(|pq| pq.as_str().to_string())
                .unwrap_or_else(|| "/".into()),
            headers: forward_headers(self.parts.headers.clone(), conn, request_id)
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), Bytes::copy_from_slice(v.as_bytes())))
                .collect(),
            body: self.bytes.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http2_cookie_crumbs_become_one_header() {
        let mut h = http::HeaderMap::new();
        h.append(http::header::COOKIE, HeaderValue::from_static("a=1"));
        h.append(http::header::COOKIE, HeaderValue::from_static("b=2"));
        join_cookie_crumbs(&mut h);
        let all: Vec<_> = h.get_all(http::header::COOKIE).iter().collect();
        assert_eq!(all, [HeaderValue::from_static("a=1; b=2")]);
        // One cookie header is left as it is.
        join_cookie_crumbs(&mut h);
        assert_eq!(h.get_all(http::header::COOKIE).iter().count(), 1);
    }
}
