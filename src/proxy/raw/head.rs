//! The pure half of the raw pass-through: which request heads it takes,
//! and the heads it writes. A request head is taken only when nothing in
//! it needs more than one pass over its bytes (see [`plan`]); the head
//! sent upstream is the client's, line by line in its order and spelling,
//! with the hop-by-hop fields dropped and the `X-Forwarded-*`,
//! `X-Request-ID` and `Host` fields the proxy sets, every line ended by
//! CRLF. The head sent back is the upstream's with the same treatment and
//! the proxy's own framing.

use std::fmt::Write as _;

use http::uri::PathAndQuery;

use crate::proxy::guard::{OVERRIDE_HEADERS, PATH_OVERRIDE_HEADERS};
use crate::proxy::upstream::HOP_BY_HOP;
use crate::server::ConnInfo;

/// Headers a request may carry before it is handed to hyper (hyper's own
/// default limit).
pub(super) const MAX_HEADERS: usize = 100;

/// Whether `name` is a hop-by-hop field (the list the hyper path drops).
fn hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.iter().any(|n| name.eq_ignore_ascii_case(n))
}

/// What the proxy does with one parsed request head it takes.
#[derive(Debug)]
pub(super) struct Plan {
    /// The head to send upstream.
    pub(super) head: Vec<u8>,
    /// The body's length (`Content-Length`, or 0).
    pub(super) body_len: u64,
    /// A `HEAD` request: its response has no body whatever it says.
    pub(super) head_only: bool,
    /// A method RFC 9110 calls idempotent: sent again on a new upstream
    /// connection when a reused one closed before answering.
    pub(super) idempotent: bool,
    /// The client asked for `Connection: close`.
    pub(super) close: bool,
    pub(super) request_id: String,
}

/// Where the upstream is and what every forwarded head says of it.
#[derive(Debug, Clone)]
pub(super) struct Target {
    /// The upstream's base path, without its trailing `/` ("" for none).
    pub(super) base: String,
    /// The `Host` field's value for the upstream.
    pub(super) host: String,
}

/// The parts of a request head the proxy's router reads, once [`screen`]
/// has found nothing that makes it hyper's.
pub(super) struct Screened<'h> {
    pub(super) method: &'h str,
    pub(super) target: PathAndQuery,
    pub(super) body_len: u64,
    /// The client asked for `Connection: close`.
    pub(super) close: bool,
}

/// The request line and framing of `req`, when the raw path can take it:
/// HTTP/1.1, an origin-form target that hyper's URI parser accepts without
/// a fragment, one `Host`, at most one well-formed `Content-Length`, no
/// `Transfer-Encoding`, `Expect` or `Upgrade`, no `Connection` token but
/// `close` or `keep-alive`, and none of the headers the router reads
/// (method and path overrides). Anything else is hyper's.
pub(super) fn screen<'h>(req: &httparse::Request<'h, '_>) -> Option<Screened<'h>> {
    if req.version != Some(1) {
        return None;
    }
    let method = req.method?;
    let path = req.path?;
    if method == "CONNECT" || !path.starts_with('/') || path.contains('#') {
        return None;
    }
    let target = PathAndQuery::try_from(path).ok()?;
    let (mut hosts, mut lengths, mut body_len, mut close) = (0, 0, 0u64, false);
    for h in req.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("host") {
            hosts += 1;
        } else if name.eq_ignore_ascii_case("content-length") {
            lengths += 1;
            body_len = content_length(h.value)?;
        } else if name.eq_ignore_ascii_case("connection") {
            for t in h.value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if t.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if !(t.is_empty() || t.eq_ignore_ascii_case(b"keep-alive")) {
                    return None;
                }
            }
        } else if ["transfer-encoding", "expect", "upgrade"]
            .iter()
            .chain(OVERRIDE_HEADERS.iter())
            .chain(PATH_OVERRIDE_HEADERS.iter())
            .any(|n| name.eq_ignore_ascii_case(n))
        {
            return None;
        }
    }
    (hosts == 1 && lengths <= 1).then_some(Screened {
        method,
        target,
        body_len,
        close,
    })
}

/// A `Content-Length` value hyper takes: digits only, within u64.
fn content_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// Whether a header value is what `HeaderValue::to_str` accepts (visible
/// ASCII, space and tab): what the pass-through reads an earlier
/// `X-Forwarded-For` as.
fn visible(value: &[u8]) -> bool {
    value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
}

/// Whether `id` is a request id the proxy keeps (see `crate::http`).
fn sane_request_id(id: &[u8]) -> bool {
    (1..=128).contains(&id.len()) && id.iter().all(u8::is_ascii_graphic)
}

/// The client's side of the hop, as the forwarded head names it: the
/// peer's address, written once per connection, and the scheme.
pub(super) struct Client {
    pub(super) peer: String,
    pub(super) tls: bool,
}

impl Client {
    pub(super) fn of(conn: ConnInfo) -> Client {
        Client {
            peer: conn.peer.ip().to_string(),
            tls: conn.tls,
        }
    }
}

/// The head sent upstream for a screened request, and how it is framed.
pub(super) fn plan(
    req: &httparse::Request<'_, '_>,
    s: &Screened<'_>,
    target: &Target,
    client: &Client,
) -> Plan {
    let mut head = Vec::with_capacity(256 + req.headers.len() * 48);
    head.extend_from_slice(s.method.as_bytes());
    head.push(b' ');
    head.extend_from_slice(target.base.as_bytes());
    head.extend_from_slice(s.target.as_str().as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    head.extend_from_slice(target.host.as_bytes());
    head.extend_from_slice(b"\r\n");
    let (mut forwarded_for, mut forwarded_host, mut request_id) = (None, None, None);
    for h in req.headers.iter() {
        let name = h.name;
        let lower = |n: &str| name.eq_ignore_ascii_case(n);
        if lower("host") {
            forwarded_host = Some(h.value);
        } else if lower("x-forwarded-for") {
            forwarded_for = forwarded_for.or(Some(h.value));
        } else if lower("x-request-id") {
            request_id = request_id.or(Some(h.value));
        } else {
            // Replaced by the proxy's own, or hop-by-hop (`screen` left
            // only `Connection` of those that shape the hop), or spoofed.
            let dropped = lower("content-length")
                || lower("x-forwarded-proto")
                || lower("x-forwarded-host")
                || hop_by_hop(name)
                || name
                    .get(..10)
                    .is_some_and(|p| p.eq_ignore_ascii_case("x-verdict-"));
            if !dropped {
                push_field(&mut head, name.as_bytes(), h.value);
            }
        }
    }
    let request_id = match request_id.filter(|v| sane_request_id(v)) {
        Some(v) => String::from_utf8_lossy(v).into_owned(),
        None => uuid::Uuid::new_v4().to_string(),
    };
    head.extend_from_slice(b"x-forwarded-for: ");
    if let Some(prev) = forwarded_for.filter(|v| visible(v)) {
        head.extend_from_slice(prev);
        head.extend_from_slice(b", ");
    }
    head.extend_from_slice(client.peer.as_bytes());
    head.extend_from_slice(b"\r\n");
    let proto: &[u8] = if client.tls { b"https" } else { b"http" };
    push_field(&mut head, b"x-forwarded-proto", proto);
    if let Some(host) = forwarded_host {
        push_field(&mut head, b"x-forwarded-host", host);
    }
    push_field(&mut head, b"x-request-id", request_id.as_bytes());
    if s.body_len > 0 {
        let _ = write!(VecWriter(&mut head), "content-length: {}\r\n", s.body_len);
    }
    head.extend_from_slice(b"\r\n");
    Plan {
        head,
        body_len: s.body_len,
        head_only: s.method == "HEAD",
        idempotent: matches!(
            s.method,
            "GET" | "HEAD" | "OPTIONS" | "PUT" | "DELETE" | "TRACE"
        ),
        close: s.close,
        request_id,
    }
}

fn push_field(head: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    head.extend_from_slice(name);
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

/// `write!` into a byte vector.
struct VecWriter<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for VecWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// How an upstream response's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// No body (a `HEAD` request's, a 204 or a 304).
    Empty,
    Length(u64),
    Chunked,
    /// Until the upstream closes: re-chunked for the client.
    UntilClose,
}

/// An upstream response head, read: what the client is sent, and how the
/// body that follows is framed.
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) head: Vec<u8>,
    pub(super) status: u16,
    pub(super) framing: Framing,
    /// The upstream connection may carry another request after this body.
    pub(super) reusable: bool,
}

impl Answer {
    /// The answer when the client's connection closes after it: it says
    /// so, and the upstream connection is not reused.
    pub(super) fn closing(mut self, plan: &Plan) -> Answer {
        if !plan.close && self.head.ends_with(b"\r\n\r\n") {
            self.head.truncate(self.head.len() - 2);
            self.head.extend_from_slice(b"connection: close\r\n\r\n");
        }
        self.reusable = false;
        self
    }
}

/// Why an upstream response head cannot be passed on: a 502.
#[derive(Debug)]
pub(super) struct BadResponse(pub(super) &'static str);

/// The client's head for the upstream response `resp` to `plan`'s request:
/// the status line and fields as the upstream wrote them (lines ended by
/// CRLF), without hop-by-hop fields or the upstream's own framing and
/// request id; then the framing the proxy writes, `x-request-id`, and
/// `date` when the upstream sent none. 1xx responses are not passed here.
pub(super) fn answer(
    resp: &httparse::Response<'_, '_>,
    plan: &Plan,
    date: impl FnOnce() -> String,
) -> Result<Answer, BadResponse> {
    let status = resp.code.ok_or(BadResponse("no status"))?;
    let version = resp.version.ok_or(BadResponse("no version"))?;
    let mut listed: Vec<&[u8]> = Vec::new();
    let (mut close, mut keep_alive) = (false, false);
    let (mut length, mut chunked, mut encoded) = (None, false, false);
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("connection") {
            for t in h.value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                close |= t.eq_ignore_ascii_case(b"close");
                keep_alive |= t.eq_ignore_ascii_case(b"keep-alive");
                listed.push(t);
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            encoded = true;
            chunked = h
                .value
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n = content_length(h.value).ok_or(BadResponse("malformed content-length"))?;
            if length.is_some_and(|m| m != n) {
                return Err(BadResponse("conflicting content-length"));
            }
            length = Some(n);
        }
    }
    // `close` wins over `keep-alive`; HTTP/1.0 keeps only when asked to.
    let upstream_close = close || (version == 0 && !keep_alive);
    let no_body = plan.head_only || status == 204 || status == 304;
    let framing = match (no_body, encoded, chunked, length) {
        (true, ..) => Framing::Empty,
        (false, true, true, _) => Framing::Chunked,
        (false, true, false, _) => Framing::UntilClose,
        (false, false, _, Some(n)) => Framing::Length(n),
        (false, false, _, None) => Framing::UntilClose,
    };
    let mut head = Vec::with_capacity(256 + resp.headers.len() * 48);
    let _ = write!(VecWriter(&mut head), "HTTP/1.1 {status:03} ");
    head.extend_from_slice(resp.reason.unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    let mut dated = false;
    for h in resp.headers.iter() {
        let name = h.name;
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        // A bodiless answer keeps the length the upstream gave: what a GET
        // would have had.
        if (is("content-length") && framing != Framing::Empty)
            || is("x-request-id")
            || hop_by_hop(name)
            || listed
                .iter()
                .any(|l| l.eq_ignore_ascii_case(name.as_bytes()))
        {
            continue;
        }
        dated |= is("date");
        push_field(&mut head, name.as_bytes(), h.value);
    }
    match framing {
        Framing::Length(n) => {
            let _ = write!(VecWriter(&mut head), "content-length: {n}\r\n");
        }
        Framing::Chunked | Framing::UntilClose => {
            head.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
        Framing::Empty => {}
    }
    if plan.close {
        head.extend_from_slice(b"connection: close\r\n");
    }
    push_field(&mut head, b"x-request-id", plan.request_id.as_bytes());
    if !dated {
        push_field(&mut head, b"date", date().as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    Ok(Answer {
        head,
        status,
        framing,
        reusable: !upstream_close && framing != Framing::UntilClose,
    })
}

#[cfg(test)]
#[path = "head_tests.rs"]
mod tests;
