//! Spots HTTP/1 requests whose framing is ambiguous: one head with both
//! `Content-Length` and `Transfer-Encoding`.
//!
//! Such a request is the classic request-smuggling vector: a front end and a
//! back end that disagree on where its body ends see different requests.
//! hyper handles it as RFC 9112 §6.1 allows (it drops the length, reads the
//! body as chunked and closes the connection afterwards), but it removes the
//! `Content-Length` before a handler runs, so no handler can tell. verdict
//! refuses these requests outright instead, and never forwards them.
//!
//! [`Watched`] sits between the socket (or TLS stream) and hyper and sees
//! every byte hyper reads. [`Tracker`] follows the message framing in those
//! bytes (heads, fixed-length and chunked bodies) and raises the
//! connection's flag when a head carries both fields. On anything it does not
//! understand (HTTP/2, a malformed head, an oversized line) it stops watching
//! and never raises the flag: hyper's own parser decides those.
//!
//! On the way out, [`Watched`] gives hyper's own error answers a JSON body.
//! When hyper cannot parse a request head it answers by itself, before any
//! handler runs, with a bodiless `400` (or `414`, `431`, `505`) carrying only
//! `connection`, `content-length: 0` and `date`. Every error must carry the
//! JSON error body (`src/http/error.rs`), so that exact response is swapped for the JSON one of
//! [`ApiError::MalformedHttp`] (same status, a fresh request id). A handler's
//! response always carries `x-request-id`, so it never matches.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::http::error::ApiError;

/// The longest request head or chunk line followed; longer ones stop the
/// tracking (hyper refuses heads this large anyway).
const MAX_LINE: usize = 64 * 1024;

/// A stream whose reads are fed to a [`Tracker`].
pub struct Watched<S> {
    inner: S,
    tracker: Tracker,
    /// Shared with the connection's service, which refuses requests once set.
    ambiguous: Arc<AtomicBool>,
    /// The JSON answer being written in place of hyper's bodiless one, and
    /// how much of it is written.
    swap: Option<(Vec<u8>, usize)>,
}

impl<S> Watched<S> {
    pub fn new(inner: S, ambiguous: Arc<AtomicBool>) -> Watched<S> {
        Watched {
            inner,
            tracker: Tracker::default(),
            ambiguous,
            swap: None,
        }
    }
}

/// The status of `buf` when it is exactly hyper's own answer to a head it
/// could not parse: an error status line and the headers `connection:
/// close`, `content-length: 0` and `date`, nothing else, no body.
pub fn hyper_error_status(buf: &[u8]) -> Option<StatusCode> {
    let head = buf.strip_suffix(b"\r\n\r\n")?;
    let head = std::str::from_utf8(head).ok()?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?.strip_prefix("HTTP/1.1 ")?;
    let status = StatusCode::from_bytes(status_line.get(..3)?.as_bytes()).ok()?;
    if !(status.is_client_error() || status.is_server_error()) {
        return None;
    }
    let (mut close, mut empty, mut date) = (false, false, false);
    for line in lines {
        let (name, value) = line.split_once(':')?;
        match (name.to_ascii_lowercase().as_str(), value.trim()) {
            ("connection", v) if v.eq_ignore_ascii_case("close") && !close => close = true,
            ("content-length", "0") if !empty => empty = true,
            ("date", _) if !date => date = true,
            _ => return None,
        }
    }
    (close && empty && date).then_some(status)
}

impl<S: AsyncWrite + Unpin> Watched<S> {
    /// Writes `buf`, or the JSON answer in its place when it is hyper's
    /// bodiless error answer; reports `buf` as written only once all of the
    /// replacement is.
    fn write_swapped(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.swap.is_none() {
            match hyper_error_status(buf) {
                Some(status) => {
                    let request_id = uuid::Uuid::new_v4().to_string();
                    tracing::debug!(
                        status = status.as_u16(),
                        request_id,
                        "malformed request head answered"
                    );
                    self.swap = Some((ApiError::MalformedHttp(status).raw_http1(&request_id), 0));
                }
                None => return Pin::new(&mut self.inner).poll_write(cx, buf),
            }
        }
        if let Some((bytes, done)) = &mut self.swap {
            while let Some(rest) = bytes.get(*done..).filter(|r| !r.is_empty()) {
                match Pin::new(&mut self.inner).poll_write(cx, rest) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => *done += n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
        }
        self.swap = None;
        Poll::Ready(Ok(buf.len()))
    }
}

// === impl Watched ===

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut me.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = result {
            if me.tracker.feed(&buf.filled()[before..]) {
                me.ambiguous.store(true, Ordering::Release);
            }
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().write_swapped(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        // hyper's error answer is one buffer; anything else goes as it is.
        let mut nonempty = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (nonempty.next(), nonempty.next()) {
            if me.swap.is_some() || hyper_error_status(only).is_some() {
                return me.write_swapped(cx, only);
            }
        }
        Pin::new(&mut me.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Where in the byte stream the tracker is.
#[derive(Debug)]
enum State {
    /// Collecting a request head up to its empty line.
    Head(Vec<u8>),
    /// Skipping a fixed-length body.
    Body(u64),
    /// Collecting a chunk-size line.
    ChunkSize(Vec<u8>),
    /// Skipping chunk data.
    ChunkData(u64),
    /// Skipping the line end after chunk data.
    ChunkEnd,
    /// Collecting trailer lines up to the empty one.
    Trailers(Vec<u8>),
    /// Not following this connection any more.
    Off,
}

/// Follows HTTP/1 request framing through a byte stream.
#[derive(Debug)]
pub struct Tracker {
    state: State,
}

impl Default for Tracker {
    fn default() -> Tracker {
        Tracker {
            state: State::Head(Vec::new()),
        }
    }
}

/// What a request head says about its body.
enum Framing {
    None,
    Length(u64),
    Chunked,
    Ambiguous,
    Unknown,
}

// === impl Tracker ===

impl Tracker {
    /// Feeds bytes as read; true when a head with both `Content-Length` and
    /// `Transfer-Encoding` was completed in them.
    pub fn feed(&mut self, mut bytes: &[u8]) -> bool {
        let mut hit = false;
        while !bytes.is_empty() {
            let state = std::mem::replace(&mut self.state, State::Off);
            let (next, used) = match state {
                State::Off => return hit,
                State::Head(mut buf) => {
                    let (line_done, used) = take_until_blank_line(&mut buf, bytes);
                    if !line_done {
                        (grow_or_off(buf, State::Head), used)
                    } else {
                        let next = match head_framing(&buf) {
                            Framing::None => State::Head(Vec::new()),
                            Framing::Length(0) => State::Head(Vec::new()),
                            Framing::Length(n) => State::Body(n),
                            Framing::Chunked => State::ChunkSize(Vec::new()),
                            Framing::Ambiguous => {
                                hit = true;
                                State::Off
                            }
                            Framing::Unknown => State::Off,
                        };
                        (next, used)
                    }
                }
                State::Body(n) => {
                    let take = n.min(bytes.len() as u64);
                    let left = n - take;
                    let next = if left == 0 {
                        State::Head(Vec::new())
                    } else {
                        State::Body(left)
                    };
                    (next, take as usize)
                }
                State::ChunkSize(mut buf) => {
                    let (done, used) = take_line(&mut buf, bytes);
                    if !done {
                        (grow_or_off(buf, State::ChunkSize), used)
                    } else {
                        let line = String::from_utf8_lossy(&buf);
                        let size = line.split(';').next().unwrap_or("").trim();
                        let next = match u64::from_str_radix(size, 16) {
                            Ok(0) => State::Trailers(Vec::new()),
                            Ok(n) => State::ChunkData(n),
                            Err(_) => State::Off,
                        };
                        (next, used)
                    }
                }
                State::ChunkData(n) => {
                    let take = n.min(bytes.len() as u64);
                    let left = n - take;
                    let next = if left == 0 {
                        State::ChunkEnd
                    } else {
                        State::ChunkData(left)
                    };
                    (next, take as usize)
                }
                State::ChunkEnd => match bytes[0] {
                    b'\r' => (State::ChunkEnd, 1),
                    b'\n' => (State::ChunkSize(Vec::new()), 1),
                    _ => (State::Off, 0),
                },
                State::Trailers(mut buf) => {
                    let (done, used) = take_line(&mut buf, bytes);
                    if !done {
                        (grow_or_off(buf, State::Trailers), used)
                    } else if buf.iter().all(|b| *b == b'\r' || *b == b'\n') {
                        (State::Head(Vec::new()), used)
                    } else {
                        (State::Trailers(Vec::new()), used)
                    }
                }
            };
            self.state = next;
            bytes = &bytes[used..];
        }
        hit
    }
}

/// Keeps collecting, unless the buffer has grown past [`MAX_LINE`].
fn grow_or_off(buf: Vec<u8>, state: fn(Vec<u8>) -> State) -> State {
    if buf.len() > MAX_LINE {
        State::Off
    } else {
        state(buf)
    }
}

/// Appends up to and including the first `\n`; returns whether it was found
/// and how many bytes were used.
fn take_line(buf: &mut Vec<u8>, bytes: &[u8]) -> (bool, usize) {
    match bytes.iter().position(|b| *b == b'\n') {
        Some(i) => {
            buf.extend_from_slice(&bytes[..=i]);
            (true, i + 1)
        }
        None => {
            buf.extend_from_slice(bytes);
            (false, bytes.len())
        }
    }
}

/// Appends until the head's blank line (`\r\n\r\n` or `\n\n`), skipping the
/// empty lines a client may send before a request line.
fn take_until_blank_line(buf: &mut Vec<u8>, bytes: &[u8]) -> (bool, usize) {
    for (i, b) in bytes.iter().enumerate() {
        if buf.is_empty() && (*b == b'\r' || *b == b'\n') {
            continue;
        }
        buf.push(*b);
        if buf.ends_with(b"\n\r\n") || buf.ends_with(b"\n\n") {
            return (true, i + 1);
        }
    }
    (false, bytes.len())
}

/// Reads the framing fields of a complete request head.
fn head_framing(head: &[u8]) -> Framing {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split('\n').map(|l| l.trim_end_matches('\r'));
    let request_line = lines.next().unwrap_or("");
    if request_line.starts_with("PRI ") || !request_line.contains(" HTTP/1.") {
        return Framing::Unknown;
    }
    let (mut length, mut lengths, mut te, mut chunked) = (None, 0, false, false);
    for line in lines.take_while(|l| !l.is_empty()) {
        let Some((name, value)) = line.split_once(':') else {
            return Framing::Unknown;
        };
        let name = name.trim().to_ascii_lowercase();
        if name == "content-length" {
            lengths += 1;
            length = value.trim().parse::<u64>().ok();
        } else if name == "transfer-encoding" {
            te = true;
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        }
    }
    match (lengths > 0, te) {
        (true, true) => Framing::Ambiguous,
        (false, true) if chunked => Framing::Chunked,
        (false, true) => Framing::Unknown,
        (true, false) => length.map_or(Framing::Unknown, Framing::Length),
        (false, false) => Framing::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_only_hyper_s_own_bodiless_error_answer() {
        let date = "date: Mon, 23 Nov 2026 11:57:26 GMT";
        let hyper = |status: &str| {
            format!("HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: 0\r\n{date}\r\n\r\n")
        };
        assert_eq!(
            hyper_error_status(hyper("400 Bad Request").as_bytes()),
            Some(StatusCode::BAD_REQUEST)
        );
        assert_eq!(
            hyper_error_status(hyper("431 Request Header Fields Too Large").as_bytes()),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
        let not = [
            // Not an error.
            hyper("200 OK"),
            hyper("101 Switching Protocols"),
            // A handler's answer: it always names its request.
            format!("HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\nx-request-id: r\r\n{date}\r\n\r\n"),
            // A body, or a length that is not zero.
            format!("{}{{}}", hyper("400 Bad Request")),
            format!("HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 2\r\n{date}\r\n\r\n"),
            // Keep-alive, or a header missing, or one twice.
            format!("HTTP/1.1 400 Bad Request\r\nconnection: keep-alive\r\ncontent-length: 0\r\n{date}\r\n\r\n"),
            format!("HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n{date}\r\n\r\n"),
            format!("HTTP/1.1 400 Bad Request\r\nconnection: close\r\nconnection: close\r\ncontent-length: 0\r\n{date}\r\n\r\n"),
            // Cut short, or HTTP/1.0, or not a status line.
            hyper("400 Bad Request").trim_end().to_string(),
            hyper("400 Bad Request").replace("HTTP/1.1", "HTTP/1.0"),
            "\r\n\r\n".to_string(),
            String::new(),
        ];
        for n in not {
            assert_eq!(hyper_error_status(n.as_bytes()), None, "{n:?}");
        }
    }

    /// Feeds `stream` whole and one byte at a time; both must agree.
    fn ambiguous(stream: &str) -> bool {
        let whole = Tracker::default().feed(stream.as_bytes());
        let mut t = Tracker::default();
        let mut bytewise = false;
        for b in stream.as_bytes() {
            bytewise |= t.feed(std::slice::from_ref(b));
        }
        assert_eq!(whole, bytewise, "{stream:?}");
        whole
    }

    #[test]
    fn flags_only_heads_with_both_fields() {
        let cl_te = "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n";
        let te_cl =
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n";
        let get = "GET / HTTP/1.1\r\nhost: x\r\n\r\n";
        let fixed = "POST / HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello";
        let chunked = "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\ntrailer: x\r\n\r\n";
        // A body that looks like an ambiguous head is body, not a head.
        let body_lookalike = "transfer-encoding: chunked\r\ncontent-length: 1\r\n\r\n";
        let sneaky = format!(
            "POST / HTTP/1.1\r\ncontent-length: {}\r\n\r\n{body_lookalike}",
            body_lookalike.len()
        );
        let cases: Vec<(String, bool)> = vec![
            (cl_te.into(), true),
            (te_cl.into(), true),
            (get.into(), false),
            (fixed.into(), false),
            (chunked.into(), false),
            (sneaky.clone(), false),
            // Later on a keep-alive connection, after each kind of body.
            (format!("{get}{cl_te}"), true),
            (format!("{fixed}{cl_te}"), true),
            (format!("{chunked}{cl_te}"), true),
            (format!("{sneaky}{get}"), false),
            (format!("\r\n{cl_te}"), true),
            // Not followed: HTTP/2, garbage.
            ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".into(), false),
            (format!("garbage\r\n\r\n{cl_te}"), false),
        ];
        for (stream, want) in cases {
            assert_eq!(ambiguous(&stream), want, "{stream:?}");
        }
    }

    #[test]
    fn huge_heads_stop_the_tracking() {
        let mut t = Tracker::default();
        let long = format!("GET / HTTP/1.1\r\nx: {}", "a".repeat(MAX_LINE + 10));
        assert!(!t.feed(long.as_bytes()));
        assert!(!t.feed(b"\r\ncontent-length: 1\r\ntransfer-encoding: chunked\r\n\r\n"));
    }
}
