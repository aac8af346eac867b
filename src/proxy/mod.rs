//! The reverse proxy: intercept the routes named in policy files, decide,
//! then forward, block or hold; pass every other route through untouched.
//!
//! A request runs through a fixed order on one policy snapshot, one phase
//! per file:
//! - `guard`: refuse paths, method overrides and bodies some upstream
//!   could read differently from us (in `read::route`, which
//!   `Proxy::handle` calls, before any route is matched).
//! - route classification (`read::route`; `Proxy::route` dispatches what it
//!   found): a strict match, and a lenient one that catches what a
//!   forgiving upstream would still route to a gated handler.
//! - `read`: the pure part of reading a request (the refusals before
//!   routing, the route, the decision's input from the extractors), which
//!   `verdict test` shares.
//! - `gated`: buffer the body (bounded, media type checked), extract the
//!   params and the justification, decide on the one decision path
//!   ([`crate::decide`], which writes the audit record before it answers),
//!   then forward, block or hold; refusals are recorded like decisions.
//! - `unmatched`: stream through without buffering, except a JSON body to a
//!   path gated under another method, read to refuse a `_method` in it.
//! - `upstream`: the pooled client and the forwarded request (`Outbound`).
//! - `affinity`: an upstream connection borrowed per request of a
//!   downstream HTTP/1 connection, driven in that connection's task, and
//!   back on the thread's idle list once its response is done.
//! - `hold`: a held call, its review, and its exactly-once forward.
//! - `stats`: metrics and the `upstream` health component.
//! - `check`: the same phases for Envoy's external authorization
//!   (the ext_authz door): a checking proxy decides and records exactly as
//!   this one does, but forwards nothing and holds nothing; its answers say
//!   what Envoy should do instead.
//!
//! Anything that keeps the engine or the audit log from doing its job fails
//! closed (503) unless the route says `failure_mode = "open"`.

mod affinity;
mod check;
mod gated;
mod guard;
mod hold;
mod raw;
pub mod read;
mod stats;
mod unmatched;
mod upstream;

use affinity::{Affinity, IdleUpstreams};
pub use check::Passed;
use gated::blocked;
use hold::HeldSender;
pub use hold::{forward_held, run_background_forwarder};
use read::Routed;
pub use stats::{ProxyStats, UpstreamComponent};
use upstream::{build_client, build_connector, forward_headers, strip_hop_by_hop, upstream_host};

use std::sync::Arc;
use std::time::Instant;

use crate::server::ReqBody;
use http::{HeaderValue, Request, Response, Uri, Version};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use tracing::Instrument;

use crate::config::{ProxyConfig, Unmatched};
use crate::http::RespBody;
use crate::runtime::App;
use crate::server::{ConnInfo, Handler};

/// The principal a proxied decision is recorded under; reserved, so no API
/// key can be named after it (see `crate::http::auth`).
pub use crate::http::auth::PROXY_PRINCIPAL;

type Connector = HttpsConnector<HttpConnector>;
type UpstreamClient = Client<Connector, RespBody>;

/// Where one request came from: its connection, that connection's own
/// upstream connection (HTTP/1 only), and the request's id.
#[derive(Clone, Copy)]
struct Downstream<'a> {
    conn: ConnInfo,
    affinity: Option<&'a Affinity>,
    request_id: &'a str,
}

/// The proxy as a [`Handler`]: one per proxy thread, each with its own
/// upstream pool and idle list.
pub struct Proxy {
    app: Arc<App>,
    upstream: Uri,
    /// The `Host` header for a request on a connection of its own.
    upstream_host: Option<HeaderValue>,
    connector: Connector,
    client: UpstreamClient,
    /// Upstream connections of closed downstream connections.
    idle: IdleUpstreams,
    cfg: ProxyConfig,
    stats: ProxyStats,
    /// Where held requests are forwarded from.
    held: HeldSender,
    /// Forwarding, or checking for Envoy.
    mode: Mode,
    /// The pass-through without hyper, when the upstream is plain HTTP and
    /// unmatched requests are forwarded (see [`raw`]).
    raw: Option<raw::Raw>,
}

/// What a proxy does with a request it lets through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Sends it upstream (verdict is the proxy).
    Forward,
    /// Answers [`Passed`] instead, and holds no call for review: Envoy
    /// forwards (see [`check`]).
    Check,
}

impl Proxy {
    pub fn new(
        app: Arc<App>,
        upstream: Uri,
        cfg: ProxyConfig,
        stats: ProxyStats,
    ) -> Result<Proxy, String> {
        let connector = build_connector(&cfg)?;
        let client = build_client(connector.clone());
        let held = HeldSender {
            runtime: tokio::runtime::Handle::try_current().map_err(|e| e.to_string())?,
            client: client.clone(),
        };
        Ok(Proxy {
            client,
            app,
            raw: raw::Raw::new(&upstream, &cfg),
            upstream_host: upstream_host(&upstream),
            upstream,
            connector,
            idle: IdleUpstreams::default(),
            cfg,
            stats,
            held,
            mode: Mode::Forward,
        })
    }

    /// A proxy for another thread's runtime: the same settings, its own
    /// upstream pool and idle list (a pooled connection is driven by the
    /// runtime that opened it), the same sender of held requests.
    pub fn for_thread(&self) -> Result<Proxy, String> {
        Ok(Proxy {
            client: build_client(self.connector.clone()),
            app: self.app.clone(),
            upstream: self.upstream.clone(),
            upstream_host: self.upstream_host.clone(),
            connector: self.connector.clone(),
            idle: IdleUpstreams::default(),
            cfg: self.cfg.clone(),
            stats: self.stats.clone(),
            held: self.held.clone(),
            mode: self.mode,
            raw: self
                .raw
                .as_ref()
                .and_then(|_| raw::Raw::new(&self.upstream, &self.cfg)),
        })
    }

    /// The door its decisions are recorded under.
    fn source(&self) -> crate::decide::Source {
        match self.mode {
            Mode::Forward => crate::decide::Source::Proxy,
            Mode::Check => crate::decide::Source::ExtAuthz,
        }
    }

    // === phases ===

    async fn route(
        &self,
        req: Request<ReqBody>,
        from: Downstream<'_>,
        set: &crate::policy::PolicySet,
        routed: Routed<'_>,
    ) -> Response<RespBody> {
        let request_id = from.request_id;
        let (route, path_params) = match routed {
            Routed::Gated { route, path_params } => (route, path_params),
            Routed::Refused(refusal) => return self.refuse(set, &req, refusal, request_id).await,
            Routed::Unmatched {
                gated_elsewhere: Some(route),
            } if self.cfg.unmatched == Unmatched::Forward => {
                return self.unmatched_body(req, from, set, route).await;
            }
            Routed::Unmatched { .. } => return self.unmatched(req, from).await,
        };
        match self.gated(req, from, set, route, &path_params).await {
            Ok(resp) => resp,
            Err(e) => {
                self.stats.count(&route.name, "error");
                e.into_response(request_id)
            }
        }
    }
}

impl Handler for Proxy {
    type Conn = Affinity;

    fn open(&self) -> Affinity {
        Affinity::returning_to(self.idle.clone())
    }

    fn drive(affinity: &Affinity) -> impl std::future::Future<Output = ()> + Send + '_ {
        affinity.drive()
    }

    fn close(&self, affinity: Affinity) {
        self.idle.checkin(affinity);
    }

    fn serve_plain<'a>(
        &'a self,
        plain: &'a mut crate::server::Plain,
        _affinity: &'a Affinity,
    ) -> impl std::future::Future<Output = crate::server::PlainEnd> + Send + 'a {
        self.serve_raw(plain)
    }

    async fn handle(
        &self,
        req: Request<ReqBody>,
        conn: ConnInfo,
        affinity: &Affinity,
    ) -> Response<RespBody> {
        // An HTTP/2 connection carries many requests at once: those go
        // through the pool.
        let affinity = (req.version() <= Version::HTTP_11).then_some(affinity);
        self.handle_from(req, conn, affinity).await
    }
}

impl Proxy {
    /// Answers one request from `conn`: every phase in order (see the
    /// module's head).
    async fn handle_from(
        &self,
        req: Request<ReqBody>,
        conn: ConnInfo,
        affinity: Option<&Affinity>,
    ) -> Response<RespBody> {
        let started = Instant::now();
        let request_id = crate::http::request_id(req.headers());
        let from = Downstream {
            conn,
            affinity,
            request_id: &request_id,
        };
        let set = self.app.policies.load_full();
        let routed = read::route(
            &set,
            &self.cfg,
            req.method().as_str(),
            req.uri().path(),
            req.uri().query(),
            req.headers(),
            !hyper::body::Body::is_end_stream(req.body()),
        );
        if self.cfg.unmatched == Unmatched::Forward
            && matches!(
                routed,
                Routed::Unmatched {
                    gated_elsewhere: None
                }
            )
        {
            // The pass-through is the tax every request pays: no span and
            // no log line at the default level (an upstream failure is
            // still a warning naming the request id).
            let mut resp = self.unmatched(req, from).await;
            crate::http::stamp_request_id(&mut resp, &request_id);
            tracing::debug!(
                request_id = %request_id,
                status = resp.status().as_u16(),
                latency_ms = crate::http::latency_ms(started.elapsed()),
                "passed through"
            );
            return resp;
        }
        let span = tracing::info_span!(
            "proxy",
            source = self.source().as_str(),
            request_id = %request_id,
            method = %req.method(),
            path = %req.uri().path(),
            peer = %conn.peer
        );
        crate::telemetry::trace::adopt(&span, req.headers());
        // Boxed: the gated, refused and held paths make a future of about
        // 16 KiB, which hyper keeps allocated per connection (its slot for
        // the request in flight) when it is inline. Boxed, that memory is
        // taken per request on these paths only, and the pass-through,
        // which allocates nothing here, keeps the slot small.
        Box::pin(
            async {
                let mut resp = self.route(req, from, &set, routed).await;
                crate::http::stamp_request_id(&mut resp, &request_id);
                // The request id on the line itself, not only in its span, so
                // that a log query on the line's own fields finds it.
                tracing::info!(
                    request_id = %request_id,
                    status = resp.status().as_u16(),
                    latency_ms = crate::http::latency_ms(started.elapsed()),
                    "proxied"
                );
                resp
            }
            .instrument(span),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::HeaderValue;
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
        let out = forward_headers(h.clone(), conn(), "rid");
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
