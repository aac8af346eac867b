//! Forwarding: the pooled upstream client, the headers that cross the hop,
//! and an upstream failure as its 502 or 504.

use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue, CONNECTION, HOST};
use http::{HeaderMap, Request, Response, Uri};
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::{Proxy, UpstreamClient};
use crate::api::error::ApiError;
use crate::api::http_util::{BoxError, RespBody, REQUEST_ID};
use crate::config::ProxyConfig;
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

/// Builds the one pooled upstream client: http, and https through rustls
/// (ring) with the configured CA file or else the system roots.
pub(super) fn build_client(cfg: &ProxyConfig) -> Result<UpstreamClient, String> {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(cfg.connect_timeout));
    http.set_nodelay(true);
    http.enforce_http(false);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = match &cfg.ca_file {
        Some(path) => {
            let roots = crate::config::pem_roots(path)
                .map_err(|e| format!("proxy.ca_file {}: {e}", path.display()))?;
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
        }
    }
}

/// Why forwarding failed.
pub(super) enum UpstreamError {
    Connect(String),
    Timeout,
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
        let target = self.target(&out.uri);
        let mut req = Request::new(out.body);
        *req.method_mut() = out.method;
        *req.uri_mut() = target;
        *req.headers_mut() = forward_headers(out.headers, out.conn, out.request_id);
        for (k, v) in out.extra {
            if let (Ok(k), Ok(v)) = (
                HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(v),
            ) {
                req.headers_mut().insert(k, v);
            }
        }
        self.send_request(req).await
    }

    pub(super) async fn send_request(
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

    pub(super) fn target(&self, uri: &Uri) -> Uri {
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

    pub(super) fn upstream_failure(
        &self,
        e: UpstreamError,
        request_id: &str,
    ) -> Response<RespBody> {
        let err = match e {
            UpstreamError::Timeout => ApiError::UpstreamTimeout(self.cfg.response_timeout),
            UpstreamError::Connect(m) => ApiError::UpstreamUnavailable(m),
        };
        tracing::warn!(request_id, status = err.status().as_u16(), message = %err, "upstream failure");
        err.into_response(request_id)
    }
}
