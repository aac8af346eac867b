//! Envoy's external authorization (`envoy.service.auth.v3.Authorization/
//! Check` over gRPC), for pods whose mesh already runs a proxy: Envoy asks,
//! verdict decides, Envoy forwards or answers.
//!
//! A `CheckRequest` becomes the HTTP request it describes (method, path and
//! query as sent, headers, the body Envoy buffered) and goes through the
//! proxy's own phases in check mode ([`crate::proxy::Proxy::check`]): the
//! same routes, refusals, extraction, decision and audit record, with
//! `source = "ext_authz"`. The proxy's answer then becomes Envoy's:
//! - let through (allowed, unmatched, fail-open): `OkResponse`, with the
//!   `x-verdict-*` headers to set on the forwarded request, the client's
//!   own `x-verdict-*` headers removed, and the decision's headers added to
//!   the upstream's answer (as the proxy adds them);
//! - anything else (403 deny, 202 needs_review with its review and result
//!   link, 4xx refusals, 503 fail closed): `DeniedResponse` with the same
//!   status, headers and JSON body the proxy would send the client.
//!
//! A body Envoy did not send whole (`x-envoy-auth-partial-body: true`, or
//! other than its `Content-Length`) cannot be decided: reading it fails
//! as a broken body does in the proxy (400), so a gated route never decides
//! on part of a body. The gRPC call itself always succeeds when verdict
//! answers; Envoy's `failure_mode_allow` applies only when it cannot reach
//! verdict.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use envoy_types::ext_authz::v3::pb::{
    Address, Authorization, AuthorizationServer, CheckRequest, CheckResponse, DeniedHttpResponse,
    HeaderAppendAction, HeaderValue, HeaderValueOption, HttpResponse, HttpStatus, OkHttpResponse,
};
use envoy_types::pb::google::rpc;
use http::header::{HeaderName, CONTENT_LENGTH, HOST};
use http::{Method, Request, Response, Uri};
use http_body_util::BodyExt;
use tokio::net::TcpListener;
use tokio::sync::watch;

use tokio::task::JoinHandle;

use crate::http::RespBody;
use crate::proxy::{Passed, Proxy, ProxyStats};
use crate::runtime::App;
use crate::server::idle::Activity;
use crate::server::{ConnInfo, ReqBody, Slots};

/// gRPC status codes (google.rpc.Code) in a `CheckResponse`.
const CODE_OK: i32 = 0;
const CODE_INVALID_ARGUMENT: i32 = 3;
const CODE_PERMISSION_DENIED: i32 = 7;

/// Envoy's header that says it sent only the first part of the body.
const PARTIAL_BODY: &str = "x-envoy-auth-partial-body";

/// The `Authorization` service: a checking proxy.
pub struct ExtAuthz {
    proxy: Arc<Proxy>,
}

impl ExtAuthz {
    pub fn new(proxy: Proxy) -> ExtAuthz {
        ExtAuthz {
            proxy: Arc::new(proxy),
        }
    }
}

#[tonic::async_trait]
impl Authorization for ExtAuthz {
    async fn check(
        &self,
        request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        let check = request.into_inner();
        let answer = match described(check) {
            Ok((req, conn)) => answer(self.proxy.check(req, conn).await).await,
            Err(why) => malformed(&why).await,
        };
        Ok(tonic::Response::new(answer))
    }
}

/// The HTTP request a `CheckRequest` describes, and where its client is.
/// The body moves out of the message, never copied.
fn described(mut check: CheckRequest) -> Result<(Request<ReqBody>, ConnInfo), String> {
    let attrs = check
        .attributes
        .as_mut()
        .ok_or("the CheckRequest has no attributes")?;
    let http = attrs
        .request
        .as_mut()
        .and_then(|r| r.http.as_mut())
        .ok_or("the CheckRequest has no attributes.request.http")?;
    let method = Method::from_bytes(http.method.as_bytes())
        .map_err(|_| format!("method {:?} is not an HTTP method", http.method))?;
    // The request target as it appeared in the request line, query and all.
    let uri: Uri = http
        .path
        .parse()
        .map_err(|_| format!("path {:?} is not a request target", http.path))?;
    let mut req = Request::new(());
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    let headers = req.headers_mut();
    let mut add = |name: &str, value: &[u8]| -> Result<(), String> {
        // Pseudo-headers (`:authority`, `:path`, ...) repeat the fields.
        if name.starts_with(':') {
            return Ok(());
        }
        let n = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header name {name:?} is not valid"))?;
        let v = http::HeaderValue::from_bytes(value)
            .map_err(|_| format!("the value of header {name:?} is not valid"))?;
        headers.append(n, v);
        Ok(())
    };
    match &http.header_map {
        // `encode_raw_headers`: every header as sent, repeats apart.
        Some(map) => {
            for h in &map.headers {
                let value = if h.raw_value.is_empty() {
                    h.value.as_bytes()
                } else {
                    &h.raw_value
                };
                add(&h.key, value)?;
            }
        }
        // The map Envoy sends by default: repeats joined, order lost. In
        // name order, so that one request always reads (and hashes) the same.
        None => {
            let mut sorted: Vec<_> = http.headers.iter().collect();
            sorted.sort();
            for (name, value) in sorted {
                add(name, value.as_bytes())?;
            }
        }
    }
    if !headers.contains_key(HOST) && !http.host.is_empty() {
        let host = http::HeaderValue::from_str(&http.host)
            .map_err(|_| format!("host {:?} is not a valid header value", http.host))?;
        headers.insert(HOST, host);
    }
    let body = if http.raw_body.is_empty() {
        Bytes::from(std::mem::take(&mut http.body).into_bytes())
    } else {
        Bytes::from(std::mem::take(&mut http.raw_body))
    };
    let partial = headers
        .get(PARTIAL_BODY)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
    // Not `http.size`: Envoy fills it with the bytes received so far.
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let whole = !partial && declared.is_none_or(|n| n == body.len() as u64);
    let req = req.map(|()| {
        if whole {
            ReqBody::whole(body)
        } else {
            ReqBody::cut(body, "Envoy sent part of the request body (set with_request_body.max_request_bytes to at least limits.max_body_bytes, allow_partial_message: false)")
        }
    });
    let conn = ConnInfo {
        peer: socket(attrs.source.as_ref().and_then(|p| p.address.as_ref())),
        local: socket(attrs.destination.as_ref().and_then(|p| p.address.as_ref())),
        tls: http.scheme.eq_ignore_ascii_case("https") || attrs.tls_session.is_some(),
    };
    Ok((req, conn))
}

/// A peer's socket address; `0.0.0.0:0` when Envoy did not say.
fn socket(address: Option<&envoy_types::pb::envoy::config::core::v3::Address>) -> SocketAddr {
    let unknown = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
    let Some(Address::SocketAddress(s)) = address.and_then(|a| a.address.as_ref()) else {
        return unknown;
    };
    let Ok(ip) = s.address.parse::<IpAddr>() else {
        return unknown;
    };
    let port = match s.port_specifier {
        Some(
            envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier::PortValue(p),
        ) => u16::try_from(p).unwrap_or(0),
        _ => 0,
    };
    SocketAddr::new(ip, port)
}

/// Envoy's answer to the proxy's.
async fn answer(resp: Response<RespBody>) -> CheckResponse {
    if let Some(passed) = resp.extensions().get::<Passed>().cloned() {
        // What the proxy tells its caller of the decision, Envoy adds to
        // the upstream's answer.
        let told = resp
            .headers()
            .iter()
            .filter(|(name, _)| name.as_str().starts_with("x-verdict-"))
            .filter_map(|(name, value)| Some(header(name.as_str(), value.to_str().ok()?)))
            .collect();
        return allowed(passed, told);
    }
    let (parts, body) = resp.into_parts();
    // verdict's own answers are small JSON documents already in memory.
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            tracing::error!(error = %e, "ext_authz: an answer's body failed");
            Bytes::new()
        }
    };
    let headers = parts
        .headers
        .iter()
        .filter(|(name, _)| *name != CONTENT_LENGTH)
        .filter_map(|(name, value)| Some(header(name.as_str(), value.to_str().ok()?)))
        .collect();
    CheckResponse {
        status: Some(rpc::Status {
            code: CODE_PERMISSION_DENIED,
            message: parts.status.to_string(),
            details: Vec::new(),
        }),
        http_response: Some(HttpResponse::DeniedResponse(DeniedHttpResponse {
            status: Some(HttpStatus {
                code: i32::from(parts.status.as_u16()),
            }),
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        })),
        dynamic_metadata: None,
    }
}

/// An `OkResponse` that sets the decision's headers on the forwarded
/// request, removes the client's own `x-verdict-*`, and adds `told` to the
/// upstream's answer.
fn allowed(passed: Passed, told: Vec<HeaderValueOption>) -> CheckResponse {
    CheckResponse {
        status: Some(rpc::Status {
            code: CODE_OK,
            message: String::new(),
            details: Vec::new(),
        }),
        http_response: Some(HttpResponse::OkResponse(OkHttpResponse {
            headers: passed.set.iter().map(|(k, v)| header(k, v)).collect(),
            headers_to_remove: passed.remove,
            response_headers_to_add: told,
            ..OkHttpResponse::default()
        })),
        dynamic_metadata: None,
    }
}

/// A `CheckRequest` that describes no HTTP request verdict can read: the
/// API's 400 and its error body.
async fn malformed(why: &str) -> CheckResponse {
    let resp = crate::http::error::ApiError::BadRequest(format!("ext_authz: {why}"))
        .into_response(&crate::http::request_id(&http::HeaderMap::new()));
    let mut answer = answer(resp).await;
    if let Some(status) = answer.status.as_mut() {
        status.code = CODE_INVALID_ARGUMENT;
    }
    answer
}

/// A header Envoy sets, replacing any of the same name.
fn header(key: &str, value: &str) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.to_string(),
            value: value.to_string(),
            raw_value: Vec::new(),
        }),
        append_action: HeaderAppendAction::OverwriteIfExistsOrAdd.into(),
        ..HeaderValueOption::default()
    }
}

/// Why the listener did not start.
#[derive(Debug)]
pub enum StartError {
    Bind(std::io::Error),
    /// The checking proxy could not be built (its TLS roots).
    Checker(String),
}

/// Binds `listen` once per core (`SO_REUSEPORT`) and serves `Check` on each
/// from a thread with a runtime of its own, as the proxy's listeners are
/// served: a check then runs from its HTTP/2 frame to its answer without
/// waking another thread. Returns the address it got and a task that ends
/// when every thread has drained after `shutdown`.
pub async fn start(
    app: &Arc<App>,
    listen: SocketAddr,
    stats: ProxyStats,
    shutdown: &watch::Receiver<bool>,
) -> Result<(SocketAddr, JoinHandle<()>), StartError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let listeners = crate::server::bind_reuseport(listen, threads).map_err(StartError::Bind)?;
    let addr = match listeners.first() {
        Some(l) => l.local_addr().map_err(StartError::Bind)?,
        None => listen,
    };
    // A body and its headers, in one message.
    let max_message = app
        .config
        .limits
        .max_body_bytes
        .saturating_add(1 << 20)
        .max(4 << 20);
    // Built once (its TLS roots are read here), then one per thread.
    let first = Proxy::checker(app.clone(), app.config.proxy.clone(), stats)
        .map_err(StartError::Checker)?;
    // Its own connection cap (the `[server]` limits), shared by its threads,
    // and the same idle timeout.
    let slots = Slots::new(&app.config.server);
    let idle_timeout = app.config.server.idle_timeout;
    let mut done = Vec::with_capacity(listeners.len());
    for (i, listener) in listeners.into_iter().enumerate() {
        let checker = first.for_thread().map_err(StartError::Checker)?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (slots, shutdown) = (slots.clone(), shutdown.clone());
        std::thread::Builder::new()
            .name(format!("verdict-ext-authz-{i}"))
            .spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt.block_on(async move {
                        match TcpListener::from_std(listener) {
                            Ok(l) => {
                                let service = ExtAuthz::new(checker);
                                serve(l, service, max_message, slots, idle_timeout, shutdown).await
                            }
                            Err(e) => tracing::error!(error = %e, "ext_authz: cannot register the listener"),
                        }
                    }),
                    Err(e) => tracing::error!(error = %e, "ext_authz: cannot start a listener runtime"),
                }
                // Dropped unsent if the thread panics: the waiter ends too.
                let _ = tx.send(());
            })
            .map_err(StartError::Bind)?;
        done.push(rx);
    }
    tracing::info!(addr = %addr, "ext_authz listening");
    Ok((
        addr,
        tokio::spawn(async move {
            for rx in done {
                let _ = rx.await;
            }
        }),
    ))
}

/// Serves `Check` on `listener` until `shutdown`, then lets the calls in
/// flight finish. A connection past the cap is closed at once, and one
/// with no call in flight for `idle_timeout` is closed (HTTP/2 has no idle
/// timer of its own, so connections that only sent the preface would keep
/// their slots); Envoy opens a new one for its next check, and applies its
/// `failure_mode_allow` to checks it could not send.
async fn serve(
    listener: TcpListener,
    service: ExtAuthz,
    max_message: usize,
    slots: Slots,
    idle_timeout: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let svc = AuthorizationServer::new(service).max_decoding_message_size(max_message);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    // `svc` as a hyper service whose calls count as the connection's
    // requests in flight, from a request's head to its answer's.
    let counted = |svc: &AuthorizationServer<ExtAuthz>, activity: &Arc<Activity>| {
        let (svc, activity) = (svc.clone(), activity.clone());
        hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let in_flight = activity.begin();
            let mut svc = svc.clone();
            async move {
                std::future::poll_fn(|cx| {
                    tower_service::Service::<Request<hyper::body::Incoming>>::poll_ready(
                        &mut svc, cx,
                    )
                })
                .await?;
                let answer = tower_service::Service::call(&mut svc, req).await;
                drop(in_flight);
                answer
            }
        })
    };
    loop {
        let stop = async {
            let _ = shutdown.wait_for(|stop| *stop).await;
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "ext_authz: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let slot = match slots.take(peer.ip()) {
            Ok(slot) => slot,
            Err(why) => {
                tracing::warn!(%peer, "ext_authz: {why}; refusing connection");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let activity = Activity::new();
        let conn =
            hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                .http2_only()
                .serve_connection(
                    hyper_util::rt::TokioIo::new(stream),
                    counted(&svc, &activity),
                )
                .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            tokio::select! {
                r = conn => if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "ext_authz: connection ended");
                },
                () = activity.idle(idle_timeout) => {
                    tracing::debug!(%peer, timeout = ?idle_timeout, "ext_authz: idle connection closed");
                }
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
