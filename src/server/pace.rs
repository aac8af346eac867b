//! Request bodies with a deadline.
//!
//! hyper bounds how long a request head may take (`header_read_timeout`)
//! but nothing bounds its body: a client that sends a head and then one byte
//! every few seconds, or an HTTP/2 stream that never ends, keeps a handler
//! waiting and its connection busy (so the idle watchdog never closes it)
//! for as long as it likes, and sixty of them hold every slot. So each
//! request body gets a deadline: `server.body_read_timeout` after its head,
//! plus one second for every `server.body_min_rate` bytes that have
//! arrived, so a large upload that keeps a fair pace is never cut; and no
//! silence between two pieces of it may last longer than
//! `server.body_read_timeout`, so time earned by sending much at once
//! cannot be spent waiting. A body still unfinished at its deadline fails
//! with [`BodyTooSlow`], which the handlers answer 408; the request then
//! ends and frees its slot.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use crate::http::{BodyTooSlow, BoxError};

/// A request body as handlers receive it: hyper's, with a deadline; or a
/// body that arrived whole another way (a `CheckRequest` from Envoy carries
/// the body it buffered), with nothing to wait for.
#[derive(Debug)]
pub struct ReqBody {
    inner: Inner,
    /// `None` once the body has ended (or never had any data).
    pace: Option<Pace>,
    timed_out: bool,
}

#[derive(Debug)]
enum Inner {
    Wire(Incoming),
    /// The whole body, until it is read; or all there is of it, and then
    /// why the rest is missing (an error, as a body broken off).
    Whole(Option<Bytes>, Option<&'static str>),
}

#[derive(Debug)]
struct Pace {
    started: Instant,
    /// When the last piece of the body arrived.
    last: Instant,
    timeout: Duration,
    min_rate: u64,
    received: u64,
    /// Armed the first time the body has nothing ready.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Pace {
    /// The earlier of: the start plus the timeout plus the time earned by
    /// the bytes received, and the last arrival plus the timeout.
    fn deadline(&self) -> Instant {
        let earned = Duration::from_millis(self.received.saturating_mul(1000) / self.min_rate);
        let paced = self
            .started
            .checked_add(self.timeout.saturating_add(earned));
        let quiet = self.last.checked_add(self.timeout);
        match (paced, quiet) {
            (Some(p), Some(q)) => p.min(q),
            (Some(t), None) | (None, Some(t)) => t,
            // A timeout past the clock's range: a far deadline.
            (None, None) => self.last + Duration::from_secs(86_400 * 365),
        }
    }
}

impl ReqBody {
    /// `inner` with a deadline `timeout` from now, extended by one second
    /// per `min_rate` bytes received (`min_rate` of 0 counts as 1).
    pub fn new(inner: Incoming, timeout: Duration, min_rate: u64) -> ReqBody {
        let now = Instant::now();
        let pace = (!inner.is_end_stream()).then(|| Pace {
            started: now,
            last: now,
            timeout,
            min_rate: min_rate.max(1),
            received: 0,
            sleep: None,
        });
        ReqBody {
            inner: Inner::Wire(inner),
            pace,
            timed_out: false,
        }
    }

    /// A body that is already whole: one frame of `bytes` (none when
    /// empty), never too slow.
    pub fn whole(bytes: Bytes) -> ReqBody {
        ReqBody {
            inner: Inner::Whole((!bytes.is_empty()).then_some(bytes), None),
            pace: None,
            timed_out: false,
        }
    }

    /// The first part of a body whose rest will never come: its bytes,
    /// then an error saying `why`.
    pub fn cut(bytes: Bytes, why: &'static str) -> ReqBody {
        ReqBody {
            inner: Inner::Whole((!bytes.is_empty()).then_some(bytes), Some(why)),
            pace: None,
            timed_out: false,
        }
    }
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.timed_out {
            return Poll::Ready(Some(Err(too_slow(this.pace.as_ref()))));
        }
        let wire = match &mut this.inner {
            Inner::Wire(wire) => wire,
            Inner::Whole(bytes, cut) => {
                if let Some(b) = bytes.take() {
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                return Poll::Ready(cut.take().map(|why| Err(why.into())));
            }
        };
        match Pin::new(wire).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(p), Some(d)) = (this.pace.as_mut(), frame.data_ref()) {
                    p.received = p.received.saturating_add(d.len() as u64);
                    p.last = Instant::now();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Box::new(e)))),
            Poll::Ready(None) => {
                this.pace = None;
                Poll::Ready(None)
            }
            Poll::Pending => {
                let Some(p) = this.pace.as_mut() else {
                    return Poll::Pending;
                };
                let deadline = p.deadline();
                let sleep = p
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if sleep.deadline() != deadline {
                    sleep.as_mut().reset(deadline);
                }
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.timed_out = true;
                        Poll::Ready(Some(Err(too_slow(this.pace.as_ref()))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Wire(wire) => wire.is_end_stream(),
            Inner::Whole(bytes, cut) => bytes.is_none() && cut.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Wire(wire) => wire.size_hint(),
            Inner::Whole(bytes, None) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Inner::Whole(bytes, Some(_)) => {
                let mut hint = SizeHint::new();
                hint.set_lower(bytes.as_ref().map_or(0, |b| b.len() as u64));
                hint
            }
        }
    }
}

fn too_slow(pace: Option<&Pace>) -> BoxError {
    Box::new(BodyTooSlow {
        after: pace.map(|p| p.started.elapsed()).unwrap_or_default(),
        received: pace.map_or(0, |p| p.received),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(received: u64, since_last: Duration) -> (Pace, Instant) {
        let started = Instant::now();
        let p = Pace {
            started,
            last: started + since_last,
            timeout: Duration::from_secs(10),
            min_rate: 1024,
            received,
            sleep: None,
        };
        (p, started)
    }

    #[test]
    fn the_deadline_grows_with_the_bytes_and_never_past_a_silence() {
        // Nothing received: the timeout.
        let (p, t0) = pace(0, Duration::ZERO);
        assert_eq!(p.deadline(), t0 + Duration::from_secs(10));
        // 20 KiB earn 20 s, but the last byte came at 5 s: silence after
        // it may last 10 s, so 15 s.
        let (p, t0) = pace(20 * 1024, Duration::from_secs(5));
        assert_eq!(p.deadline(), t0 + Duration::from_secs(15));
        // A steady body whose last piece is recent: the paced deadline.
        let (p, t0) = pace(20 * 1024, Duration::from_secs(25));
        assert_eq!(p.deadline(), t0 + Duration::from_secs(30));
        // An absurd timeout does not overflow the clock.
        let (mut p, _) = pace(u64::MAX, Duration::ZERO);
        p.timeout = Duration::MAX;
        let _ = p.deadline();
    }
}
