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

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The longest request head or chunk line followed; longer ones stop the
/// tracking (hyper refuses heads this large anyway).
const MAX_LINE: usize = 64 * 1024;

/// A stream whose reads are fed to a [`Tracker`].
pub struct Watched<S> {
    inner: S,
    tracker: Tracker,
    /// Shared with the connection's service, which refuses requests once set.
    ambiguous: Arc<AtomicBool>,
}

impl<S> Watched<S> {
    pub fn new(inner: S, ambiguous: Arc<AtomicBool>) -> Watched<S> {
        Watched {
            inner,
            tracker: Tracker::default(),
            ambiguous,
        }
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
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
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
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
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
