//! The reverse proxy: intercept the routes named in policy files, decide,
//! then forward, block or hold; pass every other route through untouched.
//!
//! A request runs through a fixed order on one policy snapshot, one phase
//! per file:
//! - `guard`: refuse paths, method overrides and bodies some upstream
//!   could read differently from us (here, in `Proxy::route`, before any
//!   route is matched).
//! - route classification (`Proxy::route`): a strict match, and a lenient
//!   one that catches what a forgiving upstream would still route to a
//!   gated handler.
//! - `gated`: buffer the body (bounded, media type checked), extract the
//!   params and the justification, decide on the one decision path
//!   ([`crate::decide`], which writes the audit record before it answers),
//!   then forward, block or hold; refusals are recorded like decisions.
//! - `unmatched`: stream through without buffering, except a JSON body to a
//!   path gated under another method, read to refuse a `_method` in it.
//! - `upstream`: the pooled client and the forwarded request (`Outbound`).
//! - `hold`: a held call, its review, and its exactly-once forward.
//! - `stats`: metrics and the `upstream` health component.
//!
//! Anything that keeps the engine or the audit log from doing its job fails
//! closed (503) unless the route says `failure_mode = "open"`.

mod gated;
mod guard;
mod hold;
mod stats;
mod unmatched;
mod upstream;

use gated::{blocked, RefuseWith};
use hold::HeldSender;
pub use hold::{forward_held, run_background_forwarder};
pub use stats::{ProxyStats, UpstreamComponent};
use upstream::{build_client, forward_headers, strip_hop_by_hop};

use std::sync::Arc;
use std::time::Instant;

use http::header::HeaderValue;
use http::{Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use tracing::Instrument;

use crate::config::{MethodOverride, ProxyConfig, Unmatched};
use crate::engine::decide::DecisionReason;
use crate::http_util::{self, RespBody, REQUEST_ID};
use crate::policy::RouteMatch;
use crate::runtime::App;
use crate::server::{ConnInfo, Handler};

/// The principal a proxied decision is recorded under; reserved, so no API
/// key can be named after it (see `crate::auth`).
pub use crate::auth::PROXY_PRINCIPAL;

type UpstreamClient = Client<HttpsConnector<HttpConnector>, RespBody>;

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
    use http::header::HOST;
    use http::HeaderMap;

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
