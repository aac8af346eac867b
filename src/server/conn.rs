//! One admitted connection's task, apart from the accept loop in the
//! parent: the limits it is served with, the service that answers its
//! requests (and refuses those it may not make), its TLS handshake, and
//! serving it until it ends, goes idle or is drained.
//!
//! A plain connection whose first bytes are not HTTP/2's preface is first
//! offered to the handler ([`Handler::serve_plain`], the proxy's raw
//! pass-through; see [`super::plain`]), then served by hyper's HTTP/1
//! connection directly, inside the task, from the request the handler gave
//! back; TLS and HTTP/2 connections go through hyper-util's auto builder,
//! boxed. The task of the
//! common case, many keep-alive HTTP/1 clients, stays small: it does not
//! carry room for an HTTP/2 connection or a TLS session it never has, and
//! hyper's read buffer is not split by the auto builder's look at the first
//! bytes (which made it grow from 8 to 16 KiB on the first request).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::{GracefulConnection, Watcher};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use super::plain::{Plain, PlainEnd, Rewind};
use super::{
    framing, idle, Admitted, ConnBuilders, ConnInfo, Handler, ReqBody, RESERVED_HEADER_TIMEOUT,
    RESERVED_IDLE_TIMEOUT, RESERVED_LIFETIME,
};
use crate::config::ServerConfig;
use crate::http::error::ApiError;
use crate::http::RespBody;

/// How much of a refused request's body is read, and for how long, before
/// the 503: a connection closed with unread bytes in its receive buffer is
/// reset by the kernel, and the client may then lose the answer to a reset.
const REFUSED_BODY_LIMIT: usize = 64 * 1024;
const REFUSED_BODY_WAIT: Duration = Duration::from_secs(1);

/// The first bytes of an HTTP/2 connection with prior knowledge (h2c).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How one connection is served: reserved (see
/// [`RESERVED_CONNECTIONS`](super::RESERVED_CONNECTIONS))
/// or not, what its refused requests are told, and its timeouts.
#[derive(Clone, Copy)]
pub(super) struct ConnLimits {
    reserved: bool,
    refusal: &'static str,
    header_timeout: Duration,
    idle_timeout: Duration,
    body_timeout: Duration,
    body_min_rate: u64,
    lifetime: Option<Duration>,
}

impl ConnLimits {
    /// The limits of a connection accepted past the cap or during a drain
    /// (`reserved`), or of any other.
    pub(super) fn new(limits: &ServerConfig, reserved: bool, draining: bool) -> ConnLimits {
        let refusal = if draining {
            "this replica is shutting down; retry"
        } else {
            "too many connections"
        };
        let (header_timeout, idle_timeout) = if reserved {
            (
                RESERVED_HEADER_TIMEOUT.min(limits.header_read_timeout),
                RESERVED_IDLE_TIMEOUT.min(limits.idle_timeout),
            )
        } else {
            (limits.header_read_timeout, limits.idle_timeout)
        };
        ConnLimits {
            reserved,
            refusal,
            header_timeout,
            idle_timeout,
            body_timeout: limits.body_read_timeout,
            body_min_rate: limits.body_min_rate,
            lifetime: reserved.then_some(RESERVED_LIFETIME),
        }
    }
}

/// An admitted connection and what its task needs to serve it.
pub(super) struct Connection<H: Handler> {
    pub(super) conn: ConnInfo,
    /// Its connection slot, held until the task ends.
    pub(super) admitted: Admitted,
    pub(super) state: Arc<H::Conn>,
    pub(super) handler: Arc<H>,
    pub(super) builders: ConnBuilders,
    pub(super) acceptor: Option<TlsAcceptor>,
    pub(super) watcher: Watcher,
    /// Turns true when the listener drains.
    pub(super) drain: tokio::sync::watch::Receiver<bool>,
    pub(super) limits: ConnLimits,
}

impl<H: Handler> Connection<H> {
    /// Serves the connection (after its TLS handshake, or once its first
    /// bytes arrive) until it ends, then gives its state back to the
    /// handler.
    pub(super) async fn serve(self, stream: TcpStream) {
        let Connection {
            conn,
            admitted: _admitted,
            state,
            handler,
            builders,
            acceptor,
            watcher,
            drain,
            limits,
        } = self;
        let peer = conn.peer;
        let closer = handler.clone();
        let activity = idle::Activity::new();
        // Raised by the stream wrapper when a request head is ambiguous.
        let ambiguous = Arc::new(AtomicBool::new(false));
        let service = requests(
            handler,
            state.clone(),
            conn,
            ambiguous.clone(),
            activity.clone(),
            limits,
        );
        let idle_timeout = limits.idle_timeout;
        let idle = async {
            activity.idle(idle_timeout).await;
            tracing::debug!(%peer, timeout = ?idle_timeout, "idle connection closed");
            Ok(())
        };
        let drive = H::drive(&state);
        let (header_timeout, lifetime) = (limits.header_timeout, limits.lifetime);
        let result = match acceptor {
            Some(acceptor) => {
                let Some(tls) = handshake(&acceptor, stream, header_timeout, peer).await else {
                    return;
                };
                let io = TokioIo::new(framing::Watched::new(tls, ambiguous));
                let conn = builders.auto.serve_connection(io, service);
                Box::pin(serve_until_idle(watcher, conn, idle, drive, lifetime)).await
            }
            None => {
                // Nothing is served before the first bytes; a client that
                // connects and says nothing is dropped at the header
                // timeout.
                let mut first = [0u8; H2_PREFACE.len()];
                let n = match tokio::time::timeout(header_timeout, stream.peek(&mut first)).await {
                    Ok(Ok(n)) if n > 0 => n,
                    _ => return,
                };
                if H2_PREFACE.starts_with(&first[..n]) {
                    // HTTP/2, or too few bytes yet to tell: the auto
                    // builder reads on until it can.
                    let io = TokioIo::new(framing::Watched::new(stream, ambiguous));
                    let conn = builders.auto.serve_connection(io, service);
                    Box::pin(serve_until_idle(watcher, conn, idle, drive, lifetime)).await
                } else {
                    // The handler's turn first (the pass-through's own
                    // loop); hyper serves whatever it gives back.
                    let (stream, pre) = if limits.reserved {
                        (stream, Bytes::new())
                    } else {
                        let mut plain = Plain {
                            stream,
                            buf: BytesMut::new(),
                            conn,
                            header_timeout,
                            idle_timeout,
                            body_timeout: limits.body_timeout,
                            body_min_rate: limits.body_min_rate,
                            drain,
                        };
                        if closer.serve_plain(&mut plain, &state).await == PlainEnd::Closed {
                            drop((drive, service));
                            if let Ok(state) = Arc::try_unwrap(state) {
                                closer.close(state);
                            }
                            return;
                        }
                        // The connection was busy until now: its idle
                        // clock starts at the hand-over.
                        drop(activity.begin());
                        (plain.stream, plain.buf.freeze())
                    };
                    let io =
                        TokioIo::new(framing::Watched::new(Rewind::new(pre, stream), ambiguous));
                    let conn = builders.http1.serve_connection(io, service);
                    serve_until_idle(watcher, conn, idle, drive, lifetime).await
                }
            }
        };
        if let Err(e) = result {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
        // The service and the driver are gone with the connection, so
        // this is the last reference.
        if let Ok(state) = Arc::try_unwrap(state) {
            closer.close(state);
        }
    }
}

/// The service that answers one connection's requests: a 400 once a
/// request head is ambiguous, a 503 for any but an essential request on a
/// reserved connection, else the handler's answer, the connection busy
/// until its body is sent.
fn requests<H: Handler>(
    handler: Arc<H>,
    state: Arc<H::Conn>,
    conn: ConnInfo,
    ambiguous: Arc<AtomicBool>,
    busy: Arc<idle::Activity>,
    limits: ConnLimits,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<RespBody>,
    Error = std::convert::Infallible,
    Future = Answer,
> {
    let ConnLimits {
        reserved,
        refusal,
        body_timeout,
        body_min_rate,
        ..
    } = limits;
    let peer = conn.peer;
    service_fn(move |req: Request<Incoming>| {
        let handler = handler.clone();
        let state = state.clone();
        let flag = ambiguous.clone();
        let in_flight = busy.begin();
        // Boxed per request: hyper keeps a slot sized to this future for
        // the connection's whole life, so an idle keep-alive connection
        // holds a pointer instead of the handler's largest future.
        let answer: Answer = Box::pin(async move {
            if flag.load(Ordering::Acquire) {
                return Ok(refuse_ambiguous(&req, peer));
            }
            let req = req.map(|b| ReqBody::new(b, body_timeout, body_min_rate));
            if reserved && !handler.essential(&req) {
                return Ok(refuse_reserved(req, refusal).await);
            }
            let resp = handler.handle(req, conn, &state).await;
            let (parts, body) = resp.into_parts();
            let body = idle::guard_body(body, in_flight);
            Ok::<_, std::convert::Infallible>(Response::from_parts(parts, body))
        });
        answer
    })
}

/// One request's answer, as the connection's service returns it.
type Answer = std::pin::Pin<
    Box<dyn Future<Output = Result<Response<RespBody>, std::convert::Infallible>> + Send>,
>;

/// The TLS handshake of an accepted stream, within `timeout`; `None` when
/// it fails or takes longer.
async fn handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    timeout: Duration,
    peer: SocketAddr,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "tls handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "tls handshake timed out");
            None
        }
    }
}

type ConnError = Box<dyn std::error::Error + Send + Sync>;

/// Serves `conn` (HTTP on one accepted stream, plain or after its TLS
/// handshake) until the connection ends, goes idle, outlives `lifetime` (a
/// reserved connection) or is drained at shutdown. `drive` (the handler's
/// per-connection work, see [`Handler::drive`]) is polled in the same task,
/// before the connection each time the task wakes.
async fn serve_until_idle<C>(
    watcher: Watcher,
    conn: C,
    idle: impl Future<Output = Result<(), ConnError>>,
    drive: impl Future<Output = ()>,
    lifetime: Option<Duration>,
) -> Result<(), ConnError>
where
    C: GracefulConnection,
    C::Error: Into<ConnError>,
{
    let conn = watcher.watch(conn);
    let lifetime = async {
        match lifetime {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        () = drive => Ok(()),
        r = conn => r.map_err(Into::into),
        r = idle => r,
        () = lifetime => Ok(()),
    }
}

/// The answer to a request with both `Content-Length` and
/// `Transfer-Encoding`: a 400, and the connection is closed after it.
fn refuse_ambiguous(req: &Request<Incoming>, peer: SocketAddr) -> Response<RespBody> {
    let request_id = crate::http::request_id(req.headers());
    tracing::warn!(%peer, request_id, "request with both content-length and transfer-encoding refused");
    let mut resp = ApiError::BadRequest(
        "a request must not carry both content-length and transfer-encoding".into(),
    )
    .into_response(&request_id);
    resp.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    if let Ok(v) = http::HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert(crate::http::REQUEST_ID, v);
    }
    resp
}

/// The answer to a request other than a probe on a connection accepted
/// past the cap, or during a drain: 503 saying `why`. An HTTP/1 reserved
/// connection is closed after its one request; an HTTP/2 one after
/// `RESERVED_LIFETIME`. A small body is read first (see
/// `REFUSED_BODY_LIMIT`), so that the close after the answer is not a reset.
async fn refuse_reserved(req: Request<ReqBody>, why: &str) -> Response<RespBody> {
    use http_body_util::BodyExt;
    let request_id = crate::http::request_id(req.headers());
    let body = http_body_util::Limited::new(req.into_body(), REFUSED_BODY_LIMIT);
    let _ = tokio::time::timeout(REFUSED_BODY_WAIT, body.collect()).await;
    let mut resp = ApiError::Unavailable(why.into()).into_response(&request_id);
    resp.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    resp
}
