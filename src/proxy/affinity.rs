//! Upstream connection affinity: a downstream HTTP/1 connection borrows an
//! upstream connection for each request, from this thread's idle list or
//! newly opened, and drives it inside its own task (see
//! [`crate::server::Handler::drive`]). A passed-through or allowed request
//! then goes client → upstream → client with no channel to another task and
//! no task switch. Once the response is done and the upstream connection can
//! carry another request, it goes back to the idle list (an uncontended
//! lock of this thread), so open downstream connections that sit idle hold
//! no upstream connection: the upstream connections number the requests in
//! flight, not the clients connected.
//!
//! hyper parses and writes both sides: the downstream request is read by
//! hyper's server, the upstream request written by hyper's client
//! (`hyper::client::conn::http1`, the same code the pooled client uses).
//! This carries what the raw pass-through (`super::raw`) leaves to hyper:
//! allowed gated calls, and requests on a connection handed to hyper.
//! HTTP/2 downstreams, and held calls forwarded after their approval, use
//! the pooled client.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tower_service::Service;

use super::upstream::UpstreamError;
use crate::http::RespBody;

type Connector = HttpsConnector<HttpConnector>;
type Io = <Connector as Service<Uri>>::Response;
type UpstreamConn = http1::Connection<Io, RespBody>;

/// An upstream connection idle for longer is closed instead of reused: the
/// idle list holds what a burst of requests needs again soon, not what the
/// last burst opened (each keeps hyper's read and write buffers, 8 KiB
/// each). Below the 5 s after which Node's servers close an idle
/// keep-alive connection, so that a reused one is rarely closing already.
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// Idle upstream connections kept per proxy thread; one freed past this is
/// closed.
pub(super) const IDLE_MAX: usize = 256;

/// One downstream connection's upstream connection while it has one: the
/// sending half, used by one request at a time, and the connection itself,
/// driven by [`Affinity::drive`] in the downstream connection's task.
#[derive(Default)]
pub struct Affinity {
    send: Mutex<Option<SendRequest<RespBody>>>,
    driver: Mutex<Driver>,
    /// Where the upstream connection goes once its response is done; with
    /// none it stays until the downstream connection closes.
    home: Option<IdleUpstreams>,
}

#[derive(Default)]
struct Driver {
    conn: Option<Pin<Box<UpstreamConn>>>,
    /// The downstream task's waker, to poll a connection installed while
    /// [`Affinity::drive`] was not being polled.
    waker: Option<Waker>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing here can leave the state half-updated: a poisoned lock holds
    // a usable value.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Affinity {
    /// An affinity that returns its upstream connection to `home` as soon
    /// as the connection is free again.
    pub(super) fn returning_to(home: IdleUpstreams) -> Affinity {
        Affinity {
            home: Some(home),
            ..Affinity::default()
        }
    }

    /// Polls the upstream connection whenever the downstream task runs;
    /// never ends. A connection that ends (closed by the upstream, or
    /// failed) is dropped, and the next request opens or borrows another;
    /// one whose response is done goes home.
    pub fn drive(&self) -> impl Future<Output = ()> + Send + '_ {
        std::future::poll_fn(move |cx: &mut Context<'_>| {
            let mut d = lock(&self.driver);
            if let Some(conn) = d.conn.as_mut() {
                if conn.as_mut().poll(cx).is_ready() {
                    d.conn = None;
                }
            }
            if let (Some(home), Some(_)) = (&self.home, &d.conn) {
                let mut send = lock(&self.send);
                if send
                    .as_ref()
                    .is_some_and(|s| s.is_ready() && !s.is_closed())
                {
                    if let (Some(s), Some(conn)) = (send.take(), d.conn.take()) {
                        home.keep(s, conn);
                    }
                }
            }
            if !d.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                d.waker = Some(cx.waker().clone());
            }
            Poll::Pending
        })
    }

    fn install(&self, conn: Pin<Box<UpstreamConn>>) {
        let mut d = lock(&self.driver);
        d.conn = Some(conn);
        if let Some(w) = &d.waker {
            w.wake_by_ref();
        }
    }

    /// Sends `req` on this connection's upstream connection, opening one
    /// (or taking an idle one from `idle`) when it has none. A request that
    /// never reached a reused connection (it closed meanwhile) is sent
    /// again on a new one; one that did is not.
    pub(super) async fn send(
        &self,
        idle: &IdleUpstreams,
        connector: &Connector,
        upstream: &Uri,
        req: Request<RespBody>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let taken = lock(&self.send).take();
        let (mut sender, mut reused) = match taken {
            Some(s) => (s, true),
            None => match idle.checkout() {
                Some((s, conn)) => {
                    self.install(conn);
                    (s, true)
                }
                None => (self.connect(connector, upstream).await?, false),
            },
        };
        if sender.ready().await.is_err() {
            sender = self.connect(connector, upstream).await?;
            reused = false;
        }
        let result = match sender.try_send_request(req).await {
            Err(mut e) if reused => match e.take_message() {
                Some(req) => {
                    sender = self.connect(connector, upstream).await?;
                    sender.ready().await.map_err(connect_error)?;
                    sender
                        .send_request(req)
                        .await
                        .map_err(|e| UpstreamError::from_send(&e))
                }
                None => Err(UpstreamError::from_send(&e.into_error())),
            },
            Err(e) => Err(UpstreamError::from_send(&e.into_error())),
            Ok(resp) => Ok(resp),
        };
        if result.is_ok() {
            *lock(&self.send) = Some(sender);
        }
        result
    }

    /// Opens a new upstream connection and installs it. Boxed: the
    /// connector's future (resolve, connect, TLS, handshake) is several KiB,
    /// and inline it would size the future of every request, which hyper
    /// keeps allocated per downstream connection; a new connection is the
    /// rare case.
    fn connect<'a>(
        &'a self,
        connector: &'a Connector,
        upstream: &'a Uri,
    ) -> Pin<Box<dyn Future<Output = Result<SendRequest<RespBody>, UpstreamError>> + Send + 'a>>
    {
        Box::pin(self.open(connector, upstream))
    }

    async fn open(
        &self,
        connector: &Connector,
        upstream: &Uri,
    ) -> Result<SendRequest<RespBody>, UpstreamError> {
        let mut connector = connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(|e| UpstreamError::Connect(e.to_string()))?;
        let io = connector
            .call(upstream.clone())
            .await
            .map_err(|e| UpstreamError::Connect(e.to_string()))?;
        let (sender, conn) = http1::handshake(io).await.map_err(connect_error)?;
        self.install(Box::pin(conn));
        Ok(sender)
    }

    /// The upstream connection, when it is idle and can carry another
    /// request.
    fn into_idle(self) -> Option<(SendRequest<RespBody>, Pin<Box<UpstreamConn>>)> {
        let send = self.send.into_inner().unwrap_or_else(|e| e.into_inner())?;
        let conn = self
            .driver
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .conn?;
        (send.is_ready() && !send.is_closed()).then_some((send, conn))
    }
}

fn connect_error(e: hyper::Error) -> UpstreamError {
    UpstreamError::Connect(e.to_string())
}

/// How often a proxy thread's idle list is swept: connections the upstream
/// closed and connections past [`IDLE_TIMEOUT`] are dropped, so they do not
/// wait for the next checkout while the proxy is quiet.
pub(super) const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Idle upstream connections of one proxy thread, newest last. Only that
/// thread uses it (its requests and its sweeper task), so its lock is never
/// contended. Cloning shares the list.
#[derive(Clone)]
pub(super) struct IdleUpstreams {
    list: Arc<Mutex<Vec<Idle>>>,
    /// The sweeper task starts with the first checkin, on that thread's
    /// runtime, and ends when the list is dropped.
    sweeping: Arc<AtomicBool>,
    sweep_every: Duration,
}

impl Default for IdleUpstreams {
    fn default() -> IdleUpstreams {
        IdleUpstreams::with_sweep(SWEEP_EVERY)
    }
}

struct Idle {
    since: Instant,
    send: SendRequest<RespBody>,
    conn: Pin<Box<UpstreamConn>>,
}

impl Idle {
    /// Still open and within [`IDLE_TIMEOUT`]. Polling the connection once
    /// lets it read the upstream's close.
    fn live(&mut self, cx: &mut Context<'_>) -> bool {
        self.since.elapsed() < IDLE_TIMEOUT
            && self.conn.as_mut().poll(cx).is_pending()
            && !self.send.is_closed()
    }
}

impl IdleUpstreams {
    fn with_sweep(every: Duration) -> IdleUpstreams {
        IdleUpstreams {
            list: Arc::default(),
            sweeping: Arc::default(),
            sweep_every: every,
        }
    }

    /// Keeps the upstream connection of a downstream connection that closed,
    /// if it can carry another request.
    pub(super) fn checkin(&self, affinity: Affinity) {
        if let Some((send, conn)) = affinity.into_idle() {
            self.keep(send, conn);
        }
    }

    /// Keeps a free upstream connection for the next request.
    fn keep(&self, send: SendRequest<RespBody>, conn: Pin<Box<UpstreamConn>>) {
        if !self.sweeping.swap(true, Ordering::Relaxed) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(sweep(
                    Arc::downgrade(&self.list),
                    self.sweep_every,
                    Idle::live,
                ));
            }
        }
        // Expired and closed ones leave with the sweep (or a checkout).
        let mut list = lock(&self.list);
        if list.len() < IDLE_MAX {
            list.push(Idle {
                since: Instant::now(),
                send,
                conn,
            });
        }
    }

    /// The newest idle connection still open. Each is polled once first,
    /// so one the upstream closed while it sat here is seen as closed.
    fn checkout(&self) -> Option<(SendRequest<RespBody>, Pin<Box<UpstreamConn>>)> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut list = lock(&self.list);
        while let Some(mut idle) = list.pop() {
            if idle.live(&mut cx) {
                return Some((idle.send, idle.conn));
            }
        }
        None
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.list).len()
    }
}

/// Drops the dead and the expired (those not `live`) from an idle list
/// every `every`, until the list is gone.
pub(super) async fn sweep<T>(
    list: Weak<Mutex<Vec<T>>>,
    every: Duration,
    live: fn(&mut T, &mut Context<'_>) -> bool,
) {
    loop {
        tokio::time::sleep(every).await;
        let Some(list) = list.upgrade() else {
            return;
        };
        let mut cx = Context::from_waker(Waker::noop());
        lock(&list).retain_mut(|idle| live(idle, &mut cx));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use http_body_util::{BodyExt, Empty};
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    use crate::http::BoxError;

    fn connector() -> Connector {
        hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
            )
            .https_or_http()
            .enable_http1()
            .wrap_connector(HttpConnector::new())
    }

    /// A loopback upstream that counts its connections and runs `serve` on
    /// each with its number (from 1).
    async fn counted<F, Fut>(serve: F) -> (Uri, Arc<AtomicUsize>)
    where
        F: Fn(tokio::net::TcpStream, usize) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let conns = Arc::new(AtomicUsize::new(0));
        let counter = conns.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::spawn(serve(stream, n));
            }
        });
        (format!("http://{addr}").parse().unwrap(), conns)
    }

    /// An upstream that answers each request with its connection's number
    /// and closes a connection after `close_after` requests.
    async fn upstream(close_after: usize) -> (Uri, Arc<AtomicUsize>) {
        counted(move |stream, n| async move {
            let served = Arc::new(AtomicUsize::new(0));
            let svc = service_fn(move |_req: Request<Incoming>| {
                let last = served.fetch_add(1, Ordering::SeqCst) + 1 >= close_after;
                async move {
                    let mut resp =
                        Response::new(http_body_util::Full::new(bytes::Bytes::from(n.to_string())));
                    if last {
                        resp.headers_mut()
                            .insert("connection", "close".parse().unwrap());
                    }
                    Ok::<_, std::convert::Infallible>(resp)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        })
        .await
    }

    fn get() -> Request<RespBody> {
        let mut req = Request::new(
            Empty::new()
                .map_err(|e: std::convert::Infallible| -> BoxError { match e {} })
                .boxed_unsync(),
        );
        *req.uri_mut() = "/x".parse().unwrap();
        req.headers_mut()
            .insert("host", "upstream".parse().unwrap());
        req
    }

    /// Sends one request while the affinity is driven beside it, as the
    /// downstream connection's task does, and returns the body.
    async fn roundtrip(a: &Affinity, idle: &IdleUpstreams, c: &Connector, up: &Uri) -> String {
        let exchange = async {
            let resp = a.send(idle, c, up, get()).await.ok().unwrap();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            String::from_utf8(body.to_vec()).unwrap()
        };
        tokio::select! {
            biased;
            _ = a.drive() => unreachable!(),
            s = exchange => s,
        }
    }

    /// A new downstream connection takes idle upstream connection 1: the
    /// idle list is left empty and no connection is opened (2 in all).
    async fn next_takes_one(idle: &IdleUpstreams, c: &Connector, up: &Uri, conns: &AtomicUsize) {
        let d = Affinity::default();
        assert_eq!(roundtrip(&d, idle, c, up).await, "1");
        assert_eq!(idle.len(), 0);
        assert_eq!(conns.load(Ordering::SeqCst), 2);
    }

    /// Two downstream connections take upstream connections 1 and 2, then
    /// close: both go idle, 2 the newest.
    async fn two_idle(idle: &IdleUpstreams, c: &Connector, up: &Uri) {
        let (a, b) = (Affinity::default(), Affinity::default());
        assert_eq!(roundtrip(&a, idle, c, up).await, "1");
        assert_eq!(roundtrip(&b, idle, c, up).await, "2");
        idle.checkin(a);
        idle.checkin(b);
    }

    #[tokio::test]
    async fn one_upstream_connection_per_downstream_connection_reused_after_it_closes() {
        let (up, conns) = upstream(usize::MAX).await;
        let (c, idle) = (connector(), IdleUpstreams::default());
        let a = Affinity::default();
        for _ in 0..5 {
            assert_eq!(roundtrip(&a, &idle, &c, &up).await, "1");
        }
        // A second downstream connection at the same time opens its own.
        let b = Affinity::default();
        assert_eq!(roundtrip(&b, &idle, &c, &up).await, "2");
        // When the first closes, the next downstream connection takes its
        // upstream connection.
        idle.checkin(a);
        assert_eq!(idle.len(), 1);
        next_takes_one(&idle, &c, &up, &conns).await;
    }

    /// Polls `a`'s driver, as its downstream task does when it wakes,
    /// until the idle list holds `n` connections (bounded).
    async fn settle(a: &Affinity, idle: &IdleUpstreams, n: usize) {
        for _ in 0..200 {
            if idle.len() == n {
                return;
            }
            tokio::select! {
                biased;
                _ = a.drive() => unreachable!(),
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
        }
        panic!("the idle list holds {}, not {n}", idle.len());
    }

    #[tokio::test]
    async fn a_free_upstream_connection_goes_home_while_its_client_stays_connected() {
        let (up, conns) = upstream(usize::MAX).await;
        let (c, idle) = (connector(), IdleUpstreams::default());
        let a = Affinity::returning_to(idle.clone());
        let b = Affinity::returning_to(idle.clone());
        // Two open clients, taking turns: one upstream connection serves
        // both, since each gives it back when its response is done.
        for _ in 0..3 {
            assert_eq!(roundtrip(&a, &idle, &c, &up).await, "1");
            settle(&a, &idle, 1).await;
            assert_eq!(roundtrip(&b, &idle, &c, &up).await, "1");
            settle(&b, &idle, 1).await;
        }
        assert_eq!(conns.load(Ordering::SeqCst), 1);
        // Closing a client that holds none leaves the list as it is.
        idle.checkin(a);
        assert_eq!(idle.len(), 1);
    }

    #[tokio::test]
    async fn a_connection_the_upstream_closes_is_replaced() {
        // The upstream closes every connection after two requests.
        let (up, conns) = upstream(2).await;
        let (c, idle) = (connector(), IdleUpstreams::default());
        let a = Affinity::default();
        let got: Vec<String> = {
            let mut v = Vec::new();
            for _ in 0..5 {
                v.push(roundtrip(&a, &idle, &c, &up).await);
            }
            v
        };
        assert_eq!(got, ["1", "1", "2", "2", "3"]);
        assert_eq!(conns.load(Ordering::SeqCst), 3);
        // Closed after its second request: not kept when the downstream goes.
        let b = Affinity::default();
        roundtrip(&b, &idle, &c, &up).await;
        roundtrip(&b, &idle, &c, &up).await;
        idle.checkin(b);
        assert_eq!(idle.len(), 0);
    }

    /// An upstream that answers every request with its connection's number
    /// and a keep-alive response, but closes a connection for which
    /// `closes(n)` holds after its first answer, without saying so.
    /// The third value counts the connections it has closed.
    async fn silent_closer(closes: fn(usize) -> bool) -> (Uri, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let closed = Arc::new(AtomicUsize::new(0));
        let counter = closed.clone();
        let (uri, conns) = counted(move |mut stream, n| {
            let closed = counter.clone();
            async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&chunk[..k]),
                        }
                    }
                    buf.clear();
                    let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n{n}");
                    if stream.write_all(answer.as_bytes()).await.is_err() || closes(n) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        drop(stream);
                        closed.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                }
            }
        })
        .await;
        (uri, conns, closed)
    }

    /// Returns once `closed` reaches `n` (10 s at most), plus a margin for
    /// the FIN to reach the client's socket.
    async fn until_closed(closed: &AtomicUsize, n: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while closed.load(Ordering::SeqCst) < n {
            assert!(
                std::time::Instant::now() < deadline,
                "the upstream never closed"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    #[tokio::test]
    async fn an_idle_connection_the_upstream_closed_is_skipped_for_a_live_one() {
        // Connection 2 is closed by the upstream after its first answer.
        let (up, conns, closed) = silent_closer(|n| n == 2).await;
        let (c, idle) = (connector(), IdleUpstreams::default());
        two_idle(&idle, &c, &up).await;
        assert_eq!(idle.len(), 2);
        // The upstream closes connection 2 while it sits idle, newest.
        until_closed(&closed, 1).await;
        // The closed one is passed over for the live one.
        next_takes_one(&idle, &c, &up, &conns).await;
    }

    #[tokio::test]
    async fn the_sweeper_drops_an_idle_connection_the_upstream_closed_with_no_checkout() {
        let (up, _, closed) = silent_closer(|n| n == 2).await;
        let c = connector();
        let idle = IdleUpstreams::with_sweep(Duration::from_millis(20));
        two_idle(&idle, &c, &up).await;
        until_closed(&closed, 1).await;
        // No request comes: only the sweeper can notice.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while idle.len() == 2 {
            assert!(std::time::Instant::now() < deadline, "never swept");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(idle.len(), 1, "the live one stays");
    }

    #[tokio::test]
    async fn a_connection_the_upstream_closed_between_requests_is_replaced() {
        // The upstream closes silently after each answer, while the
        // downstream connection is between requests.
        let (up, conns, closed) = silent_closer(|_| true).await;
        let (c, idle) = (connector(), IdleUpstreams::default());
        let a = Affinity::default();
        for (n, want) in ["1", "2", "3"].into_iter().enumerate() {
            assert_eq!(roundtrip(&a, &idle, &c, &up).await, want);
            until_closed(&closed, n + 1).await;
        }
        assert_eq!(conns.load(Ordering::SeqCst), 3);
    }
}
