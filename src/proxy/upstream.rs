//! Forwarding: the upstream connector and pooled client, the headers that
//! cross the hop, and an upstream failure as its 502 or 504. A request on
//! an HTTP/1 connection goes on that connection's own upstream connection
//! instead of the pool (see [`super::affinity`]).

use std::error::Error as _;

use http::header::{HeaderName, HeaderValue, CONNECTION, HOST};
use http::uri::PathAndQuery;
use http::{HeaderMap, Request, Response, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::affinity::Affinity;
use super::{Connector, Proxy, UpstreamClient};
use crate::config::ProxyConfig;
use crate::http::error::ApiError;
use crate::http::{BoxError, RespBody, REQUEST_ID};
use crate::server::ConnInfo;

/// Headers that describe one hop and are never forwarded (RFC 9110 §7.6.1).
pub(super) const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The upstream pool over `connector` (HTTP/2 clients, held calls
/// forwarded after their approval), with the idle limits of the
/// per-thread lists of HTTP/1 connections.
pub(super) fn build_client(connector: Connector) -> UpstreamClient {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(super::affinity::IDLE_TIMEOUT)
        .pool_max_idle_per_host(super::affinity::IDLE_MAX)
        .pool_timer(TokioTimer::new())
        .build(connector)
}

/// The `Host` header the pooled client would set for `upstream`: its host,
/// and its port unless it is the scheme's default.
pub(super) fn upstream_host(upstream: &Uri) -> Option<HeaderValue> {
    let host = upstream.host()?;
    let default = match upstream.scheme_str() {
        Some("https") => 443,
        _ => 80,
    };
    let value = match upstream.port_u16() {
        Some(p) if p != default => format!("{host}:{p}"),
        _ => host.to_string(),
    };
    HeaderValue::from_str(&value).ok()
}

/// Builds the upstream connector: http, and https through rustls (ring)
/// with the configured CA file or else the system roots.
pub(super) fn build_connector(cfg: &ProxyConfig) -> Result<Connector, String> {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(cfg.connect_timeout));
    http.set_nodelay(true);
    http.enforce_http(false);
    let tls = crate::config::client_tls(
        cfg.ca_file.as_deref(),
        "set proxy.ca_file for an https upstream",
    )
    .map_err(|e| match &cfg.ca_file {
        Some(path) => format!("proxy.ca_file {}: {e}", path.display()),
        None => e,
    })?;
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls);
    Ok(builder.https_or_http().enable_http1().wrap_connector(http))
}

/// One request on its way upstream: the parts the client sent, the
/// connection it came on, and the headers the proxy adds.
pub(super) struct Outbound<'a> {
    pub(super) method: http::Method,
    pub(super) uri: Uri,
    pub(super) headers: HeaderMap,
    pub(super) body: RespBody,
    pub(super) conn: ConnInfo,
    pub(super) request_id: &'a str,
    /// Set on the forwarded request (`x-verdict-decision`, ...).
    pub(super) extra: &'a [(&'a str, String)],
    /// The downstream connection's own upstream connection, when the
    /// request goes there instead of the pool.
    pub(super) affinity: Option<&'a Affinity>,
}

impl<'a> Outbound<'a> {
    /// The client's request head and body, forwarded with `extra` headers.
    pub(super) fn new(
        parts: http::request::Parts,
        body: RespBody,
        conn: ConnInfo,
        request_id: &'a str,
        extra: &'a [(&'a str, String)],
    ) -> Outbound<'a> {
        Outbound {
            method: parts.method,
            uri: parts.uri,
            headers: parts.headers,
            body,
            conn,
            request_id,
            extra,
            affinity: None,
        }
    }

    /// Sends the request on `affinity`'s upstream connection, if given.
    pub(super) fn on(mut self, affinity: Option<&'a Affinity>) -> Outbound<'a> {
        self.affinity = affinity;
        self
    }
}

/// Why forwarding failed.
pub(super) enum UpstreamError {
    Connect(String),
    Timeout,
    /// The client's own request body broke off or was malformed while it
    /// was streamed upstream: the client's fault, answered 400.
    RequestBody(String),
    /// The client's own request body did not arrive in time (see
    /// `server::pace`): answered 408.
    RequestBodyTimeout(String),
}

impl UpstreamError {
    /// A failed send: the client's body if the error is the forwarded
    /// body's (hyper's own downstream error inside the client's "user body"
    /// error), else the upstream.
    pub(super) fn from_send(e: &(dyn std::error::Error + 'static)) -> UpstreamError {
        let mut cur = Some(e);
        while let Some(err) = cur {
            if let Some(h) = err.downcast_ref::<hyper::Error>() {
                if let Some(cause) = h.source().filter(|_| h.is_user()) {
                    if cause.is::<hyper::Error>() {
                        return UpstreamError::RequestBody(cause.to_string());
                    }
                    if cause.is::<crate::http::BodyTooSlow>() {
                        return UpstreamError::RequestBodyTimeout(cause.to_string());
                    }
                }
            }
            cur = err.source();
        }
        UpstreamError::Connect(e.to_string())
    }
}

/// The headers sent upstream: hop-by-hop and spoofable `x-verdict-*` removed,
/// `X-Forwarded-*` and `X-Request-ID` set, in the client's own map (the
/// pass-through copies nothing). The body stays byte-identical.
pub(super) fn forward_headers(mut h: HeaderMap, conn: ConnInfo, request_id: &str) -> HeaderMap {
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

pub(super) fn strip_hop_by_hop(h: &mut HeaderMap) {
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

impl Proxy {
    /// Sends one request upstream; an upstream failure becomes its 502/504.
    pub(super) async fn forward(&self, out: Outbound<'_>) -> Response<RespBody> {
        if self.mode == super::Mode::Check {
            return super::check::passed(&out);
        }
        let request_id = out.request_id;
        match self.send(out).await {
            Ok(resp) => resp,
            Err(e) => self.upstream_failure(e, request_id),
        }
    }

    /// Sends one request upstream and returns its streamed response.
    pub(super) async fn send(
        &self,
        out: Outbound<'_>,
    ) -> Result<Response<RespBody>, UpstreamError> {
        let affinity = out.affinity;
        let mut req = Request::new(out.body);
        *req.method_mut() = out.method;
        *req.headers_mut() = forward_headers(out.headers, out.conn, out.request_id);
        for (k, v) in out.extra {
            if let (Ok(k), Ok(v)) = (
                HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(v),
            ) {
                req.headers_mut().insert(k, v);
            }
        }
        match affinity {
            None => {
                *req.uri_mut() = self.target(&out.uri);
                self.send_request(req).await
            }
            Some(affinity) => {
                // A connection of its own takes the origin form and a Host
                // header, which the pool would otherwise set.
                *req.uri_mut() = Uri::from(self.target_path(&out.uri));
                if let Some(host) = &self.upstream_host {
                    req.headers_mut().insert(HOST, host.clone());
                }
                let sent = affinity.send(&self.idle, &self.connector, &self.upstream, req);
                self.answered(tokio::time::timeout(self.cfg.response_timeout, sent).await)
            }
        }
    }

    /// Sends `req` (with an absolute URI) through the upstream pool.
    pub(super) async fn send_request(
        &self,
        req: Request<RespBody>,
    ) -> Result<Response<RespBody>, UpstreamError> {
        let result =
            tokio::time::timeout(self.cfg.response_timeout, self.client.request(req)).await;
        self.answered(result.map(|r| r.map_err(|e| UpstreamError::from_send(&e))))
    }

    /// Counts the upstream's answer, or its failure, and readies the answer
    /// for the client.
    fn answered(
        &self,
        result: Result<Result<Response<Incoming>, UpstreamError>, tokio::time::error::Elapsed>,
    ) -> Result<Response<RespBody>, UpstreamError> {
        match result {
            Err(_) => {
                self.stats.upstream(Err("timeout"));
                Err(UpstreamError::Timeout)
            }
            Ok(Err(e @ (UpstreamError::RequestBody(_) | UpstreamError::RequestBodyTimeout(_)))) => {
                Err(e)
            }
            Ok(Err(e)) => {
                self.stats.upstream(Err("connect"));
                Err(e)
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

    /// The path and query sent upstream: the upstream's base path, if it
    /// has one, before the client's.
    fn target_path(&self, uri: &Uri) -> PathAndQuery {
        let base = self.upstream.path().trim_end_matches('/');
        let pq = uri.path_and_query();
        if base.is_empty() {
            // The common case: the incoming path-and-query is reused as is
            // (a refcount, not a copy and re-parse).
            return pq
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/"));
        }
        let pq = pq.map(|p| p.as_str()).unwrap_or("/");
        format!("{base}{pq}")
            .parse()
            .unwrap_or_else(|_| PathAndQuery::from_static("/"))
    }

    /// The absolute URI of `uri`'s request at the upstream.
    pub(super) fn target(&self, uri: &Uri) -> Uri {
        let mut parts = self.upstream.clone().into_parts();
        parts.path_and_query = Some(self.target_path(uri));
        Uri::from_parts(parts).unwrap_or_else(|_| self.upstream.clone())
    }

    pub(super) fn upstream_failure(
        &self,
        e: UpstreamError,
        request_id: &str,
    ) -> Response<RespBody> {
        let err = match e {
            UpstreamError::Timeout => ApiError::UpstreamTimeout(self.cfg.response_timeout),
            UpstreamError::Connect(m) => ApiError::UpstreamUnavailable(m),
            UpstreamError::RequestBody(m) => {
                tracing::debug!(request_id, error = %m, "request body broke off while forwarded");
                return ApiError::BadRequest("the request body broke off or is malformed".into())
                    .into_response(request_id);
            }
            UpstreamError::RequestBodyTimeout(m) => {
                tracing::debug!(request_id, error = %m, "request body too slow while forwarded");
                return ApiError::RequestTimeout(m).into_response(request_id);
            }
        };
        tracing::warn!(request_id, status = err.status().as_u16(), message = %err, "upstream failure");
        err.into_response(request_id)
    }
}
