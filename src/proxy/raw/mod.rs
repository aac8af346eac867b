//! The pass-through in one pass over the bytes: a plain HTTP/1 request that
//! no route gates is forwarded from the bytes the client sent, without
//! hyper's parse into a header map and its rebuild on the way out, and the
//! upstream's response comes back the same way.
//!
//! Each request head is parsed in place (`httparse`, the parser hyper
//! uses, with hyper's settings) and screened ([`head::screen`]): the raw
//! path takes only what needs nothing more than one pass. HTTP/1.1, an
//! origin-form target, one `Host`, at most one `Content-Length` and no
//! `Transfer-Encoding`, no upgrade or `Expect`, no override header the
//! router reads, and a route that no policy gates under any method. The
//! first request it does not take goes to hyper, with every later one on
//! the connection (see `crate::server::plain`): the gate, the framing
//! check, chunked request bodies and HTTP/1.0 all stay where they are.
//!
//! What crosses the hop is what `super::upstream::forward_headers` sets on
//! the hyper path: hop-by-hop fields and spoofed `x-verdict-*` fields
//! dropped, `X-Forwarded-For`/`-Proto`/`-Host` and `X-Request-ID` set. A
//! request body is streamed under the same deadline as hyper's
//! (`server::pace`); a response body is passed on by its length, its chunks
//! or (re-chunked) until the upstream closes. Upstream connections are
//! borrowed per request from this thread's own idle list, as the affinity
//! path borrows hyper's, and swept the same way. Upstream failures get the same JSON errors, and
//! the connection is closed after them.

mod chunks;
mod head;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use http::{HeaderMap, Uri};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout_at;

use super::read::{self, Routed};
use super::Proxy;
use crate::config::{ProxyConfig, Unmatched};
use crate::http::error::ApiError;
use crate::server::{Plain, PlainEnd};
use chunks::Chunks;
use head::{Answer, BadResponse, Client, Framing, Plan, Target, MAX_HEADERS};

/// The longest request or response head read before the request is
/// hyper's (a request) or a 502 (a response).
const MAX_HEAD: usize = 64 * 1024;

/// How much room each read is given.
const READ_CHUNK: usize = 8 * 1024;

/// Reused connections tried for one request before a new one is opened.
const MAX_REUSED_TRIES: usize = 3;

/// The raw pass-through of one proxy thread: where the upstream is, and
/// this thread's idle upstream connections.
pub(super) struct Raw {
    target: Target,
    host: String,
    port: u16,
    /// Newest last; swept every second once the first is kept, as the
    /// affinity path's list is (`super::affinity::sweep`).
    idle: Arc<Mutex<Vec<Idle>>>,
    sweeping: AtomicBool,
}

/// An upstream connection whose response is done, waiting for the next.
struct Idle {
    stream: TcpStream,
    since: Instant,
    /// Its last answer had no body (a `HEAD`'s, a 204, a 304): an upstream
    /// that sends one anyway may still be sending it, so the socket itself
    /// is read before reuse, not only the readiness the runtime has seen.
    bodiless: bool,
}

impl Idle {
    /// Within `IDLE_TIMEOUT`, and not closed by the upstream as far as the
    /// runtime has seen: no read readiness (a close or unasked bytes would
    /// have set it), so no system call in the usual case.
    fn live(&mut self, cx: &mut Context<'_>) -> bool {
        if self.since.elapsed() >= super::affinity::IDLE_TIMEOUT {
            return false;
        }
        match self.stream.poll_read_ready(cx) {
            Poll::Pending if !self.bodiless => true,
            Poll::Pending | Poll::Ready(Ok(())) => {
                let mut probe = [0u8; 1];
                matches!(self.stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            }
            Poll::Ready(Err(_)) => false,
        }
    }
}

impl Raw {
    /// The raw path for `upstream`, when it may be taken at all: a plain
    /// `http` upstream, and unmatched requests forwarded.
    pub(super) fn new(upstream: &Uri, cfg: &ProxyConfig) -> Option<Raw> {
        if cfg.unmatched != Unmatched::Forward || upstream.scheme_str() != Some("http") {
            return None;
        }
        let host = upstream
            .host()?
            .trim_start_matches('[')
            .trim_end_matches(']');
        Some(Raw {
            target: Target {
                base: upstream.path().trim_end_matches('/').to_string(),
                host: super::upstream_host(upstream)?.to_str().ok()?.to_string(),
            },
            host: host.to_string(),
            port: upstream.port_u16().unwrap_or(80),
            idle: Arc::default(),
            sweeping: AtomicBool::new(false),
        })
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The most recently used idle upstream connection still live.
    fn checkout(&self) -> Option<TcpStream> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut idle = self.idle();
        while let Some(mut one) = idle.pop() {
            if one.live(&mut cx) {
                return Some(one.stream);
            }
        }
        None
    }

    /// Keeps an upstream connection whose response is done for the next
    /// request; past `IDLE_MAX` it is closed.
    fn checkin(&self, stream: TcpStream, bodiless: bool) {
        if !self.sweeping.swap(true, Ordering::Relaxed) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(super::affinity::sweep(
                    Arc::downgrade(&self.idle),
                    super::affinity::SWEEP_EVERY,
                    Idle::live,
                ));
            }
        }
        let mut idle = self.idle();
        if idle.len() < super::affinity::IDLE_MAX {
            idle.push(Idle {
                stream,
                since: Instant::now(),
                bodiless,
            });
        }
    }

    async fn connect(&self, within: Duration) -> Result<TcpStream, Failure> {
        let connect = TcpStream::connect((self.host.as_str(), self.port));
        match tokio::time::timeout(within, connect).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                Ok(s)
            }
            Ok(Err(e)) => Err(Failure::Connect(e.to_string())),
            Err(_) => Err(Failure::Connect(format!(
                "connect timed out after {within:?}"
            ))),
        }
    }
}

/// Why a request taken by the raw path got no upstream answer.
#[derive(Debug)]
enum Failure {
    Connect(String),
    /// No response head within `proxy.response_timeout`.
    Timeout,
    BadResponse(&'static str),
    /// The client's body broke off.
    BodyBroke,
    /// The client's body was too slow (see `server::pace`).
    BodySlow,
    /// A reused connection closed before any answer: worth another.
    Stale,
    /// The upstream stopped reading the request body.
    UpstreamStopped(String),
}

/// What the next request on the connection is.
enum Next {
    Taken(Plan),
    Hyper,
    Closed,
}

/// Resolves when the listener starts draining (never, if its signal is
/// gone).
async fn drained(rx: &mut tokio::sync::watch::Receiver<bool>) {
    if rx.wait_for(|d| *d).await.is_err() {
        std::future::pending::<()>().await;
    }
}

impl Proxy {
    /// Serves `p`'s requests for as long as the raw path takes them.
    pub(super) async fn serve_raw(&self, p: &mut Plain) -> PlainEnd {
        let Some(raw) = &self.raw else {
            return PlainEnd::Hyper;
        };
        let client = Client::of(p.conn);
        loop {
            let plan = match self.next_request(p, raw, &client).await {
                Next::Taken(plan) => plan,
                Next::Hyper => return PlainEnd::Hyper,
                Next::Closed => return PlainEnd::Closed,
            };
            // A drain lets the request in flight finish, then closes, as
            // hyper's graceful shutdown does.
            if !self.exchange(p, raw, plan).await || p.draining() {
                return PlainEnd::Closed;
            }
        }
    }

    /// Reads the next request head: taken (and its head consumed), hyper's
    /// (left in the buffer), or none (the client closed, went idle past
    /// `idle_timeout`, was too slow with its head, or the listener drains).
    async fn next_request(&self, p: &mut Plain, raw: &Raw, client: &Client) -> Next {
        let mut deadline = None;
        loop {
            if !p.buf.is_empty() {
                let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let mut req = httparse::Request::new(&mut fields);
                match req.parse(&p.buf) {
                    Ok(httparse::Status::Complete(len)) => {
                        return match self.take(&req, client, raw) {
                            Some(plan) => {
                                p.buf.advance(len);
                                Next::Taken(plan)
                            }
                            None => Next::Hyper,
                        };
                    }
                    Ok(httparse::Status::Partial) if p.buf.len() < MAX_HEAD => {}
                    _ => return Next::Hyper,
                }
            } else {
                // Between requests the connection holds no buffer.
                p.buf = BytesMut::new();
                // A request already sent is served even when the drain has
                // begun; an idle connection closes at the drain.
                let readable = tokio::time::timeout(p.idle_timeout, p.stream.readable());
                tokio::select! {
                    biased;
                    r = readable => if !matches!(r, Ok(Ok(()))) {
                        return Next::Closed;
                    },
                    () = drained(&mut p.drain) => return Next::Closed,
                }
                // Usually the whole head is there: read it without arming
                // the head's timer.
                p.buf.reserve(READ_CHUNK);
                match p.stream.try_read_buf(&mut p.buf) {
                    Ok(0) => return Next::Closed,
                    // The head's timer starts if the head is not whole.
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    Err(_) => return Next::Closed,
                }
            }
            p.buf.reserve(READ_CHUNK);
            let by =
                *deadline.get_or_insert_with(|| tokio::time::Instant::now() + p.header_timeout);
            match timeout_at(by, p.stream.read_buf(&mut p.buf)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return Next::Closed,
            }
        }
    }

    /// The plan for a parsed request head, when the raw path takes it.
    fn take(&self, req: &httparse::Request<'_, '_>, client: &Client, raw: &Raw) -> Option<Plan> {
        let s = head::screen(req)?;
        let set = self.app.policies.load();
        let routed = read::route(
            &set,
            &self.cfg,
            s.method,
            s.target.path(),
            s.target.query(),
            &HeaderMap::new(),
            s.body_len > 0,
        );
        matches!(
            routed,
            Routed::Unmatched {
                gated_elsewhere: None
            }
        )
        .then(|| head::plan(req, &s, &raw.target, client))
    }

    /// Forwards one taken request and passes its answer back; whether the
    /// connection goes on.
    async fn exchange(&self, p: &mut Plain, raw: &Raw, mut plan: Plan) -> bool {
        let started = tracing::enabled!(tracing::Level::DEBUG).then(Instant::now);
        self.stats.unmatched_pass.inc();
        let buffered = usize::try_from(plan.body_len)
            .unwrap_or(usize::MAX)
            .min(p.buf.len());
        let mut first = std::mem::take(&mut plan.head);
        first.extend_from_slice(&p.buf[..buffered]);
        p.buf.advance(buffered);
        let rest = plan.body_len - buffered as u64;
        let by = tokio::time::Instant::now() + self.cfg.response_timeout;
        let sent = timeout_at(by, self.send_raw(p, raw, &first, rest, &plan)).await;
        let failed = match sent {
            Ok(Ok(x)) => Ok(x),
            Ok(Err(f)) => Err(f),
            Err(_) => Err(Failure::Timeout),
        };
        let (mut up, mut rbuf, answer, cut) = match failed {
            Ok(x) => x,
            Err(f) => {
                let status = self.fail(p, f, &plan.request_id).await;
                tracing::debug!(
                    request_id = %plan.request_id,
                    status,
                    latency_ms = started.map(|s| crate::http::latency_ms(s.elapsed())),
                    "passed through"
                );
                return false;
            }
        };
        self.stats.upstream(Ok(()));
        let status = answer.status;
        let bodiless = answer.framing == Framing::Empty;
        let Ok(reusable) = relay(p, &mut up, &mut rbuf, answer).await else {
            tracing::debug!(request_id = %plan.request_id, "response broke off while passed through");
            return false;
        };
        if reusable && rbuf.is_empty() {
            raw.checkin(up, bodiless);
        }
        tracing::debug!(
            request_id = %plan.request_id,
            status,
            latency_ms = started.map(|s| crate::http::latency_ms(s.elapsed())),
            "passed through"
        );
        !plan.close && !cut
    }

    /// Sends the head (and what came of the body with it), streams the
    /// rest of the body, and reads the response head. A reused connection
    /// that closes before any answer (its close not yet seen when it was
    /// taken) is replaced when nothing of the request is lost by sending it
    /// again: a whole idempotent request. An upstream that answers before
    /// it has read the whole body (a 413, a 401) and stops reading has its
    /// answer passed on, and the client's connection is closed after it
    /// (`true` last: the rest of its body was never read).
    async fn send_raw(
        &self,
        p: &mut Plain,
        raw: &Raw,
        first: &[u8],
        rest: u64,
        plan: &Plan,
    ) -> Result<(TcpStream, BytesMut, Answer, bool), Failure> {
        let again = plan.idempotent && rest == 0;
        let mut tries = 0;
        loop {
            let reused = if tries < MAX_REUSED_TRIES {
                raw.checkout()
            } else {
                None
            };
            tries += 1;
            let was_reused = reused.is_some();
            let mut up = match reused {
                Some(s) => s,
                None => raw.connect(self.cfg.connect_timeout).await?,
            };
            let result = async {
                up.write_all(first).await.map_err(|_| Failure::Stale)?;
                if rest > 0 {
                    match copy_body(p, &mut up, rest).await {
                        Ok(()) => {}
                        Err(Failure::UpstreamStopped(why)) => {
                            let early = read_answer(&mut up, plan).await;
                            let (rbuf, answer) = early.map_err(|_| Failure::Connect(why))?;
                            return Ok((rbuf, answer.closing(plan), true));
                        }
                        Err(f) => return Err(f),
                    }
                }
                read_answer(&mut up, plan).await.map(|(r, a)| (r, a, false))
            }
            .await;
            match result {
                Ok((rbuf, answer, cut)) => return Ok((up, rbuf, answer, cut)),
                Err(Failure::Stale) if was_reused && again => continue,
                Err(f) => return Err(f),
            }
        }
    }

    /// Answers a failed request with its JSON error, and closes; the
    /// status it answered.
    async fn fail(&self, p: &mut Plain, f: Failure, request_id: &str) -> u16 {
        let err = match f {
            Failure::Timeout => {
                self.stats.upstream(Err("timeout"));
                ApiError::UpstreamTimeout(self.cfg.response_timeout)
            }
            Failure::Connect(m) | Failure::UpstreamStopped(m) => {
                self.stats.upstream(Err("connect"));
                ApiError::UpstreamUnavailable(m)
            }
            Failure::Stale => {
                self.stats.upstream(Err("connect"));
                ApiError::UpstreamUnavailable(
                    "the upstream closed the connection before answering".into(),
                )
            }
            Failure::BadResponse(m) => {
                self.stats.upstream(Err("connect"));
                ApiError::UpstreamUnavailable(format!("the upstream's response: {m}"))
            }
            Failure::BodyBroke => {
                tracing::debug!(request_id, "request body broke off while forwarded");
                ApiError::BadRequest("the request body broke off or is malformed".into())
            }
            Failure::BodySlow => {
                tracing::debug!(request_id, "request body too slow while forwarded");
                ApiError::RequestTimeout("the request body arrived too slowly".into())
            }
        };
        if err.status().is_server_error() {
            tracing::warn!(request_id, status = err.status().as_u16(), message = %err, "upstream failure");
        }
        let answer = err.raw_http1(request_id);
        let write = async {
            p.stream.write_all(&answer).await?;
            p.stream.shutdown().await
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
        err.status().as_u16()
    }
}

/// Streams the `rest` of a request body from the client to the upstream,
/// under the body deadline of `server::pace`.
async fn copy_body(p: &mut Plain, up: &mut TcpStream, mut rest: u64) -> Result<(), Failure> {
    let start = tokio::time::Instant::now();
    let (mut last, mut received) = (start, 0u64);
    let rate = p.body_min_rate.max(1);
    while rest > 0 {
        let earned = Duration::from_millis(received.saturating_mul(1000) / rate);
        let paced = start + p.body_timeout + earned;
        let by = paced.min(last + p.body_timeout);
        p.buf.reserve(READ_CHUNK);
        match timeout_at(by, p.stream.read_buf(&mut p.buf)).await {
            Err(_) => return Err(Failure::BodySlow),
            Ok(Ok(0) | Err(_)) => return Err(Failure::BodyBroke),
            Ok(Ok(_)) => {}
        }
        let take = usize::try_from(rest).unwrap_or(usize::MAX).min(p.buf.len());
        up.write_all(&p.buf[..take])
            .await
            .map_err(|e| Failure::UpstreamStopped(e.to_string()))?;
        p.buf.advance(take);
        rest -= take as u64;
        received += take as u64;
        last = tokio::time::Instant::now();
    }
    Ok(())
}

/// Reads the upstream's response head, past any 1xx: the bytes read after
/// it, and the head the client gets.
async fn read_answer(up: &mut TcpStream, plan: &Plan) -> Result<(BytesMut, Answer), Failure> {
    let mut rbuf = BytesMut::with_capacity(READ_CHUNK);
    loop {
        if !rbuf.is_empty() {
            let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut resp = httparse::Response::new(&mut fields);
            match resp.parse(&rbuf) {
                Ok(httparse::Status::Complete(len)) => {
                    if resp.code == Some(101) {
                        return Err(Failure::BadResponse("an upgrade nobody asked for"));
                    }
                    if resp.code.is_some_and(|c| (100..200).contains(&c)) {
                        rbuf.advance(len);
                        continue;
                    }
                    let answer = head::answer(&resp, plan, || {
                        httpdate::fmt_http_date(std::time::SystemTime::now())
                    })
                    .map_err(|BadResponse(m)| Failure::BadResponse(m))?;
                    rbuf.advance(len);
                    return Ok((rbuf, answer));
                }
                Ok(httparse::Status::Partial) if rbuf.len() < MAX_HEAD => {}
                Ok(httparse::Status::Partial) => {
                    return Err(Failure::BadResponse("head too large"))
                }
                Err(_) => return Err(Failure::BadResponse("malformed head")),
            }
        }
        rbuf.reserve(READ_CHUNK);
        match up.read_buf(&mut rbuf).await {
            Ok(0) | Err(_) if rbuf.is_empty() => return Err(Failure::Stale),
            Ok(0) | Err(_) => return Err(Failure::BadResponse("closed inside its head")),
            Ok(_) => {}
        }
    }
}

/// Writes the answer's head and passes its body on; whether the upstream
/// connection can carry another request. `Err` when either side broke off
/// mid-body: the client's connection is then closed.
async fn relay(
    p: &mut Plain,
    up: &mut TcpStream,
    rbuf: &mut BytesMut,
    answer: Answer,
) -> Result<bool, ()> {
    let mut out = answer.head;
    match answer.framing {
        Framing::Empty => {
            p.stream.write_all(&out).await.map_err(drop)?;
        }
        Framing::Length(mut left) => loop {
            let take = usize::try_from(left).unwrap_or(usize::MAX).min(rbuf.len());
            out.extend_from_slice(&rbuf[..take]);
            rbuf.advance(take);
            left -= take as u64;
            p.stream.write_all(&out).await.map_err(drop)?;
            if left == 0 {
                break;
            }
            out.clear();
            fill(up, rbuf).await?;
        },
        Framing::Chunked => {
            let mut chunks = Chunks::new();
            loop {
                let took = chunks.relay(rbuf, &mut out).map_err(drop)?;
                rbuf.advance(took);
                p.stream.write_all(&out).await.map_err(drop)?;
                if chunks.done() {
                    break;
                }
                out.clear();
                fill(up, rbuf).await?;
            }
        }
        Framing::UntilClose => loop {
            chunks::frame(rbuf, &mut out);
            rbuf.clear();
            p.stream.write_all(&out).await.map_err(drop)?;
            out.clear();
            rbuf.reserve(READ_CHUNK);
            match up.read_buf(rbuf).await {
                Ok(0) => {
                    p.stream.write_all(b"0\r\n\r\n").await.map_err(drop)?;
                    return Ok(false);
                }
                Ok(_) => {}
                // Cut off, not ended: the client must not take it as whole.
                Err(_) => return Err(()),
            }
        },
    }
    Ok(answer.reusable)
}

/// Reads more of the upstream's body; `Err` when it closed or failed.
async fn fill(up: &mut TcpStream, rbuf: &mut BytesMut) -> Result<(), ()> {
    rbuf.reserve(READ_CHUNK);
    match up.read_buf(rbuf).await {
        Ok(n) if n > 0 => Ok(()),
        _ => Err(()),
    }
}
