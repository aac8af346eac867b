//! A plain HTTP/1 connection offered to its handler before hyper serves
//! it, so that a handler can answer the requests it knows to be simple with
//! one pass over their bytes (the proxy's pass-through of requests no
//! route gates), and give the connection to hyper at the first
//! request it does not take.
//!
//! The hand-over happens at a request boundary: whatever the handler read
//! of the next request is put back in front of the stream ([`Rewind`]), so
//! hyper, and the framing check in front of it, read that request from its
//! first byte as if nobody had looked.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::ConnInfo;

/// A plain (not TLS) HTTP/1 connection while its handler serves it, and
/// the limits hyper would serve it with.
pub struct Plain {
    pub stream: TcpStream,
    /// Read from the stream and not yet answered: the start of the next
    /// request, given to hyper with the stream at a hand-over.
    pub buf: BytesMut,
    pub conn: ConnInfo,
    /// How long a request head may take once its first byte has come.
    pub header_timeout: Duration,
    /// How long the connection may wait for the first byte of a request.
    pub idle_timeout: Duration,
    /// A request body's deadline (see [`super::pace`]).
    pub body_timeout: Duration,
    pub body_min_rate: u64,
    /// Turns true when the listener drains: the connection then closes
    /// after the request in flight.
    pub drain: watch::Receiver<bool>,
}

impl Plain {
    /// Whether the listener is draining.
    pub fn draining(&self) -> bool {
        *self.drain.borrow()
    }
}

/// How a handler's turn with a plain connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainEnd {
    /// The connection is done (closed by the client, failed, timed out, or
    /// closed after a response that said so).
    Closed,
    /// The next request (its start in [`Plain::buf`]) is hyper's to serve,
    /// and every later one on the connection.
    Hyper,
}

/// A stream with bytes already read from it put back in front.
pub struct Rewind<S> {
    pre: Bytes,
    inner: S,
}

impl<S> Rewind<S> {
    pub fn new(pre: Bytes, inner: S) -> Rewind<S> {
        Rewind { pre, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.pre.is_empty() {
            let n = self.pre.len().min(buf.remaining());
            buf.put_slice(&self.pre[..n]);
            self.pre.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn rewound_bytes_come_before_the_stream() {
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(b" world").await.unwrap();
        drop(a);
        let mut r = Rewind::new(Bytes::from_static(b"hello"), b);
        let mut out = String::new();
        r.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }
}
