//! Request bodies with a deadline.
//!
//! hyper bounds how long a request head may take (`header_read_timeout`)
//! but nothing bounds its body: a client that sends a head and then one byte
//! every few seconds, or an HTTP/2 stream that never ends, keeps a handler
//! waiting and its connection busy (so the idle watchdog never closes it)
//! for as long as it likes, and sixty of them hold every slot. So each
//! request body gets a deadline: `server.body_read_timeout` after its head,
//! plus one second for every `server.body_min_rate` bytes that have
//! arrived, so a large upload that keeps a fair pace is never cut. A body
//! still unfinished at its deadline fails with [`BodyTooSlow`], which the
//! handlers answer 408; the request then ends and frees its slot.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use crate::api::http_util::{BodyTooSlow, BoxError};

/// A request body as handlers receive it: hyper's, with a deadline.
#[derive(Debug)]
pub struct ReqBody {
    inner: Incoming,
    /// `None` once the body has ended (or never had any data).
    pace: Option<Pace>,
    timed_out: bool,
}

#[derive(Debug)]
struct Pace {
    started: Instant,
    timeout: Duration,
    min_rate: u64,
    received: u64,
    /// Armed the first time the body has nothing ready.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Pace {
    fn deadline(&self) -> Instant {
        let earned = Duration::from_millis(self.received.saturating_mul(1000) / self.min_rate);
        self.started + self.timeout + earned
    }
}

impl ReqBody {
    /// `inner` with a deadline `timeout` from now, extended by one second
    /// per `min_rate` bytes received (`min_rate` of 0 counts as 1).
    pub fn new(inner: Incoming, timeout: Duration, min_rate: u64) -> ReqBody {
        let pace = (!inner.is_end_stream()).then(|| Pace {
            started: Instant::now(),
            timeout,
            min_rate: min_rate.max(1),
            received: 0,
            sleep: None,
        });
        ReqBody {
            inner,
            pace,
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
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(p), Some(d)) = (this.pace.as_mut(), frame.data_ref()) {
                    p.received = p.received.saturating_add(d.len() as u64);
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
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

fn too_slow(pace: Option<&Pace>) -> BoxError {
    Box::new(BodyTooSlow {
        after: pace.map(|p| p.started.elapsed()).unwrap_or_default(),
        received: pace.map_or(0, |p| p.received),
    })
}
