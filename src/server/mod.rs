//! Listeners: accept loop, optional TLS (with certificates that follow
//! their files, see [`tls`]), connection limits and graceful shutdown,
//! shared by the API and the proxy.
//!
//! Each listener serves HTTP/1.1 and HTTP/2 (h2c by preface, or ALPN on TLS)
//! through hyper-util's auto builder. These limits protect the process from
//! misbehaving clients: a cap on concurrent connections and a smaller one per
//! peer address (excess connections get a short 503 and are closed), a small
//! reserve of connections past the cap that answer only the handler's
//! essential requests (`/health`, `/ready`, `/metrics` on the API) so a full
//! house can still be probed, a header read timeout (slowloris), a deadline
//! on every request body (see [`pace`]) and a bound on the TLS handshake. HTTP/1 requests with ambiguous framing (both
//! `Content-Length` and `Transfer-Encoding`) are refused with a 400 before any
//! handler sees them (see `framing`). On shutdown the listener stops accepting, asks every
//! connection to finish its in-flight requests, and gives up after the grace
//! period.
//!
//! The API is served by [`serve`] on the main runtime. The proxy is served by
//! [`serve_per_thread`]: one thread per core, each with a single-threaded
//! runtime and its own `SO_REUSEPORT` listener on the same port (see
//! [`bind_reuseport`]), so that a proxied request never waits for another
//! thread to wake up. The connection cap is shared by all of them.
//!
//! A [`Handler`] may keep state for each connection and run work in the
//! connection's own task ([`Handler::drive`]): the proxy keeps an HTTP/1
//! connection's own upstream connection there.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{oneshot, watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::config::ServerConfig;
use crate::http::error::ApiError;
use crate::http::RespBody;

mod conn;
mod framing;
pub(crate) mod idle;
pub mod pace;
pub mod plain;
pub mod tls;

pub use pace::ReqBody;
pub use plain::{Plain, PlainEnd};
pub use tls::ReloadingCert;

use conn::{ConnLimits, Connection};

/// Connections past `max_connections` that may still be accepted to answer
/// the handler's essential requests (health, readiness, metrics), one
/// request each.
pub const RESERVED_CONNECTIONS: usize = 8;

/// How long a reserved connection may take to send its request head.
const RESERVED_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a reserved connection may stay idle after its request.
const RESERVED_IDLE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a reserved connection may live at all: one probe, answered.
/// An HTTP/2 client could otherwise keep one open with a request every
/// second.
const RESERVED_LIFETIME: Duration = Duration::from_secs(5);

/// Pending connections per listener (tokio's default for `TcpListener::bind`).
const LISTEN_BACKLOG: u32 = 1024;

/// Facts about the connection a request arrived on.
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub tls: bool,
}

/// Something that answers requests: the API or the proxy.
pub trait Handler: Send + Sync + 'static {
    /// What one connection keeps between its requests (the proxy's own
    /// upstream connection); `()` for a handler that keeps nothing.
    type Conn: Send + Sync + 'static;

    /// The state of a connection just accepted.
    fn open(&self) -> Self::Conn;

    fn handle(
        &self,
        req: Request<ReqBody>,
        conn: ConnInfo,
        state: &Self::Conn,
    ) -> impl Future<Output = Response<RespBody>> + Send;

    /// Whether a request is answered on a reserved connection, one accepted
    /// past `max_connections` (see [`RESERVED_CONNECTIONS`]): probes such as
    /// `/health`. Every other request on one gets a 503.
    fn essential(&self, _req: &Request<ReqBody>) -> bool {
        false
    }

    /// Runs in the connection's task, beside its requests, for as long as
    /// the connection lives; it never ends by itself.
    fn drive(_state: &Self::Conn) -> impl Future<Output = ()> + Send + '_ {
        std::future::pending()
    }

    /// Called with the state once its connection has ended.
    fn close(&self, _state: Self::Conn) {}

    /// Serves the requests of a plain HTTP/1 connection itself, before
    /// hyper does, for as long as it takes them (see [`plain`]); a reserved
    /// connection is never offered. By default it takes none.
    fn serve_plain<'a>(
        &'a self,
        _plain: &'a mut Plain,
        _state: &'a Self::Conn,
    ) -> impl Future<Output = PlainEnd> + Send + 'a {
        std::future::ready(PlainEnd::Hyper)
    }
}

/// A TLS certificate or configuration that could not be loaded or built.
#[derive(Debug, thiserror::Error)]
#[error("tls: {0}")]
pub struct TlsError(String);

/// Serves `handler` on `listener` until `shutdown` turns true, then drains.
pub async fn serve<H: Handler>(
    name: &'static str,
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    handler: Arc<H>,
    limits: ServerConfig,
    shutdown: watch::Receiver<bool>,
) {
    let admission = Admission::new(&limits);
    serve_shared(name, listener, tls, handler, limits, admission, shutdown).await
}

/// Who gets a connection slot: the connection cap, the per-peer cap and the
/// reserve, shared by every thread of a listener.
#[derive(Clone)]
struct Admission {
    permits: Arc<Semaphore>,
    reserve: Arc<Semaphore>,
    peers: Arc<PeerLimit>,
}

/// What a connection was admitted with; dropped when it closes.
struct Admitted {
    _permit: tokio::sync::OwnedSemaphorePermit,
    _peer: PeerSlot,
    /// Past the cap: essential requests only, one each.
    reserved: bool,
}

impl Admission {
    fn new(limits: &ServerConfig) -> Arc<Admission> {
        Admission::with_reserve(limits, RESERVED_CONNECTIONS)
    }

    fn with_reserve(limits: &ServerConfig, reserve: usize) -> Arc<Admission> {
        Arc::new(Admission {
            permits: Arc::new(Semaphore::new(limits.max_connections)),
            reserve: Arc::new(Semaphore::new(reserve)),
            peers: Arc::new(PeerLimit {
                max: limits.max_connections_per_ip.max(1),
                counts: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// A slot for a connection from `ip`, or why there is none.
    fn admit(&self, ip: IpAddr) -> Result<Admitted, &'static str> {
        let peer = PeerLimit::take(&self.peers, ip).ok_or("per-peer connection limit reached")?;
        match self.permits.clone().try_acquire_owned() {
            Ok(permit) => Ok(Admitted {
                _permit: permit,
                _peer: peer,
                reserved: false,
            }),
            Err(_) => match self.reserve.clone().try_acquire_owned() {
                Ok(permit) => Ok(Admitted {
                    _permit: permit,
                    _peer: peer,
                    reserved: true,
                }),
                Err(_) => Err("connection limit reached"),
            },
        }
    }
}

/// Connection slots for a listener that is not served by [`serve`]
/// (Envoy's ext_authz, a gRPC listener): its own `max_connections` and
/// `max_connections_per_ip`, with no reserve, since it answers no probes.
#[derive(Clone)]
pub struct Slots(Arc<Admission>);

/// One connection's slot; dropped when the connection closes.
pub struct Slot {
    _admitted: Admitted,
}

impl Slots {
    pub fn new(limits: &ServerConfig) -> Slots {
        Slots(Admission::with_reserve(limits, 0))
    }

    /// A slot for a connection from `ip`, or why there is none.
    pub fn take(&self, ip: IpAddr) -> Result<Slot, &'static str> {
        self.0.admit(ip).map(|a| Slot { _admitted: a })
    }
}

/// Connections per peer address (`server.max_connections_per_ip`), so that
/// one host cannot take every slot.
struct PeerLimit {
    max: usize,
    counts: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place in its peer's count.
struct PeerSlot {
    limit: Arc<PeerLimit>,
    ip: IpAddr,
}

/// The peer a connection counts against: an IPv4 address (an IPv4-mapped
/// IPv6 address is its IPv4 one), or an IPv6 address's /64, which one host
/// is usually given whole.
fn peer_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(std::net::Ipv6Addr::from(prefix))
            }
        },
    }
}

impl PeerLimit {
    fn take(limit: &Arc<PeerLimit>, ip: IpAddr) -> Option<PeerSlot> {
        let ip = peer_of(ip);
        let mut counts = limit.counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(ip).or_insert(0);
        if *n >= limit.max {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            limit: limit.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut counts = self.limit.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// Binds `n` listeners on `addr` that share one port through
/// `SO_REUSEPORT`, so that the kernel spreads new connections across them.
/// Port 0 picks a free port for the first; the others join it.
///
/// A plain bind comes first and fails with "address in use" as it always
/// did: without it, these listeners could join the `SO_REUSEPORT` group of
/// another process of the same user on that port (a second sidecar started
/// by mistake, say) and silently take half of its connections.
pub fn bind_reuseport(addr: SocketAddr, n: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    let mut addr = std::net::TcpListener::bind(addr)?.local_addr()?;
    let mut listeners: Vec<std::net::TcpListener> = Vec::with_capacity(n);
    for _ in 0..n.max(1) {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.set_reuseport(true)?;
        socket.bind(addr)?;
        let listener = socket.listen(LISTEN_BACKLOG)?.into_std()?;
        addr = listener.local_addr()?;
        listeners.push(listener);
    }
    Ok(listeners)
}

/// Serves each `(listener, handler)` pair on its own thread, with its own
/// single-threaded runtime, until `shutdown` turns true; the connection cap
/// (`limits.max_connections`) is shared by all of them. A connection then
/// lives on one thread from accept to close: its requests, and whatever the
/// handler does on the runtime (an upstream pool, say), never wait for
/// another thread to wake up. The returned task ends when every thread has
/// drained.
pub fn serve_per_thread<H: Handler>(
    name: &'static str,
    pairs: Vec<(std::net::TcpListener, Arc<H>)>,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: ServerConfig,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let admission = Admission::new(&limits);
    let mut done = Vec::with_capacity(pairs.len());
    for (i, (listener, handler)) in pairs.into_iter().enumerate() {
        let (tx, rx) = oneshot::channel::<()>();
        let (tls, limits, admission, shutdown) = (
            tls.clone(),
            limits.clone(),
            admission.clone(),
            shutdown.clone(),
        );
        std::thread::Builder::new()
            .name(format!("verdict-{name}-{i}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match runtime {
                    Ok(rt) => rt.block_on(async move {
                        match TcpListener::from_std(listener) {
                            Ok(l) => {
                                serve_shared(name, l, tls, handler, limits, admission, shutdown)
                                    .await
                            }
                            Err(e) => {
                                tracing::error!(listener = name, error = %e, "cannot register the listener")
                            }
                        }
                    }),
                    Err(e) => {
                        tracing::error!(listener = name, error = %e, "cannot start a listener runtime")
                    }
                }
                // Dropped unsent if the thread panics: the waiter ends too.
                let _ = tx.send(());
            })?;
        done.push(rx);
    }
    Ok(tokio::spawn(async move {
        for rx in done {
            let _ = rx.await;
        }
    }))
}

/// [`serve`] with connection limits shared with other listeners.
async fn serve_shared<H: Handler>(
    name: &'static str,
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    handler: Arc<H>,
    limits: ServerConfig,
    admission: Arc<Admission>,
    mut shutdown: watch::Receiver<bool>,
) {
    let local = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(listener = name, error = %e, "listener has no local address");
            return;
        }
    };
    let acceptor = tls.map(TlsAcceptor::from);
    let builders = Builders::new(&limits);
    let mut drain = Drain::new();

    // Until the drain, connections are served as usual. During it the
    // listener keeps accepting until the earlier connections are done (or
    // the grace is over), and answers each new connection's one request:
    // probes (`/health`, which then says 503 draining) as usual, anything
    // else 503 with `Retry-After`, so a client learns to go elsewhere
    // instead of finding a closed port.
    while let Some(accepted) = drain
        .accept(name, &listener, &mut shutdown, limits.shutdown_grace)
        .await
    {
        let draining = drain.begun();
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning.
                tracing::warn!(listener = name, error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let admitted = match admission.admit(peer.ip()) {
            Ok(a) => a,
            Err(why) => {
                tracing::warn!(listener = name, %peer, "{why}; refusing connection");
                if acceptor.is_none() {
                    tokio::spawn(refuse_overloaded(stream));
                }
                continue;
            }
        };
        let reserved = admitted.reserved || draining;
        let conn = ConnInfo {
            peer,
            local,
            tls: acceptor.is_some(),
        };
        let state = Arc::new(handler.open());
        let connection = Connection {
            conn,
            admitted,
            state,
            handler: handler.clone(),
            builders: builders.pick(reserved),
            acceptor: acceptor.clone(),
            watcher: drain.watcher(),
            drain: shutdown.clone(),
            limits: ConnLimits::new(&limits, reserved, draining),
        };
        tokio::spawn(connection.serve(stream));
    }
    drop(listener);
}

/// The HTTP connection builders of one listener: the usual one, and the
/// one for reserved connections, each as hyper-util's auto builder (HTTP/2
/// and TLS connections) and as hyper's own HTTP/1 builder with the same
/// HTTP/1 settings (a plain connection whose first bytes are not HTTP/2's
/// preface, see [`ConnBuilders`]).
struct Builders {
    usual: ConnBuilders,
    reserved: ConnBuilders,
}

/// The builders one connection may be served with.
#[derive(Clone)]
pub(super) struct ConnBuilders {
    pub(super) auto: Arc<auto::Builder<TokioExecutor>>,
    pub(super) http1: Arc<hyper::server::conn::http1::Builder>,
}

/// hyper's HTTP/1 server settings of a listener: the ones its auto
/// builder is given too.
fn http1_builder(
    header_timeout: Duration,
    keep_alive: bool,
) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(keep_alive);
    builder
}

impl Builders {
    /// Both builders, with the listener's header timeout.
    fn new(limits: &ServerConfig) -> Builders {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .keep_alive(true);
        // Pings find a peer that vanished; the idle watchdog (see
        // `conn::Connection::serve`) closes one that stays connected and
        // asks for nothing.
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(256)
            .keep_alive_interval(Some(std::time::Duration::from_secs(20)))
            .keep_alive_timeout(std::time::Duration::from_secs(20));
        // A reserved connection answers one request, and must send it soon.
        let mut reserved_builder = auto::Builder::new(TokioExecutor::new());
        reserved_builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(RESERVED_HEADER_TIMEOUT.min(limits.header_read_timeout))
            .keep_alive(false);
        reserved_builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(1);
        Builders {
            usual: ConnBuilders {
                auto: Arc::new(builder),
                http1: Arc::new(http1_builder(limits.header_read_timeout, true)),
            },
            reserved: ConnBuilders {
                auto: Arc::new(reserved_builder),
                http1: Arc::new(http1_builder(
                    RESERVED_HEADER_TIMEOUT.min(limits.header_read_timeout),
                    false,
                )),
            },
        }
    }

    /// The builders for a connection, reserved or not.
    fn pick(&self, reserved: bool) -> ConnBuilders {
        if reserved {
            self.reserved.clone()
        } else {
            self.usual.clone()
        }
    }
}

/// A listener's drain at shutdown, and the graceful shutdowns its
/// connections are watched by.
struct Drain {
    /// The connections accepted before the drain, which it waits for.
    graceful: Option<GracefulShutdown>,
    /// Those accepted during the drain: one request each, never waited for.
    late: GracefulShutdown,
    /// Set when the drain begins: every earlier connection closed, and the
    /// end of `shutdown_grace`.
    ends: Option<(Draining, std::pin::Pin<Box<tokio::time::Sleep>>)>,
}

impl Drain {
    /// No drain yet.
    fn new() -> Drain {
        Drain {
            graceful: Some(GracefulShutdown::new()),
            late: GracefulShutdown::new(),
            ends: None,
        }
    }

    /// Whether the drain has begun.
    fn begun(&self) -> bool {
        self.ends.is_some()
    }

    /// What a new connection is watched by: waited for when accepted before
    /// the drain, not when accepted during it.
    fn watcher(&self) -> Watcher {
        self.graceful.as_ref().unwrap_or(&self.late).watcher()
    }

    /// The next connection `listener` accepts, or `None` once the drain is
    /// over (every earlier connection closed, or the grace period ended).
    /// The drain begins when `shutdown` turns true.
    async fn accept(
        &mut self,
        name: &'static str,
        listener: &TcpListener,
        shutdown: &mut watch::Receiver<bool>,
        grace: Duration,
    ) -> Option<std::io::Result<(TcpStream, SocketAddr)>> {
        loop {
            return match self.ends.as_mut() {
                None => tokio::select! {
                    biased;
                    _ = shutdown.wait_for(|s| *s) => {
                        self.begin(name, grace);
                        continue;
                    }
                    a = listener.accept() => Some(a),
                },
                Some((earlier, grace_over)) => tokio::select! {
                    biased;
                    () = earlier => {
                        tracing::info!(listener = name, "all connections closed");
                        None
                    }
                    () = grace_over => {
                        tracing::warn!(listener = name, grace = ?grace, "grace period over; closing remaining connections");
                        None
                    }
                    a = listener.accept() => Some(a),
                },
            };
        }
    }

    /// Begins the drain: asks every earlier connection to finish, and
    /// starts the grace period.
    fn begin(&mut self, name: &'static str, grace: Duration) {
        tracing::info!(listener = name, grace = ?grace, "draining connections");
        let earlier = self.graceful.take().map(GracefulShutdown::shutdown);
        self.ends = Some((
            Box::pin(async move {
                if let Some(earlier) = earlier {
                    earlier.await;
                }
            }),
            Box::pin(tokio::time::sleep(grace)),
        ));
    }
}

/// Resolves when every connection accepted before the drain has closed.
type Draining = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Answers a connection over the cap with a short 503 and closes it.
async fn refuse_overloaded(mut stream: TcpStream) {
    let answer = ApiError::Unavailable("too many connections".into())
        .raw_http1(&uuid::Uuid::new_v4().to_string());
    let write = async {
        stream.write_all(&answer).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), write).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_ipv4_addresses_and_ipv6_slash_64s() {
        let p = |s: &str| peer_of(s.parse().unwrap()).to_string();
        assert_eq!(p("127.0.0.2"), "127.0.0.2");
        assert_eq!(p("::ffff:10.1.2.3"), "10.1.2.3");
        assert_eq!(p("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::");
        assert_eq!(p("2001:db8:1:2:ffff::9"), p("2001:db8:1:2::1"));
        assert_ne!(p("2001:db8:1:3::1"), p("2001:db8:1:2::1"));
        let limit = Arc::new(PeerLimit {
            max: 1,
            counts: Mutex::new(HashMap::new()),
        });
        let first = PeerLimit::take(&limit, "2001:db8::1".parse().unwrap());
        assert!(first.is_some());
        assert!(PeerLimit::take(&limit, "2001:db8::2".parse().unwrap()).is_none());
        drop(first);
        assert!(PeerLimit::take(&limit, "2001:db8::2".parse().unwrap()).is_some());
        assert!(limit.counts.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn reuseport_listeners_share_one_port() {
        let ls = bind_reuseport("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        assert_eq!(ls.len(), 3);
        let port = ls[0].local_addr().unwrap().port();
        assert_ne!(port, 0);
        assert!(ls.iter().all(|l| l.local_addr().unwrap().port() == port));
    }

    #[tokio::test]
    async fn reuseport_refuses_a_port_in_use() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(bind_reuseport(taken.local_addr().unwrap(), 2).is_err());
        // Nor can it join another group of reuseport listeners.
        let group = bind_reuseport("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        assert!(bind_reuseport(group[0].local_addr().unwrap(), 1).is_err());
    }
}
