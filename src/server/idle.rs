//! Idle connections: closed after `server.idle_timeout` with no request in
//! flight.
//!
//! hyper keeps an HTTP/1 keep-alive connection or an HTTP/2 connection open
//! for as long as the client does, and HTTP/2 has no idle timer at all. A
//! client that opens thousands of connections and sends nothing after the
//! preface would hold every `max_connections` slot, and `/health` would
//! answer 503 for as long as it liked. So each connection counts its
//! requests in flight (a request stays in flight until its response body is
//! done, so a long download is not cut), notes when the last one ended, and
//! a watchdog drops the connection once it has been idle for the timeout.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

// tokio's clock, so that a test can pause it; the same as std's otherwise.
use tokio::time::Instant;

use http_body_util::BodyExt;

use crate::http::RespBody;

/// Requests in flight on one connection, and when it was last busy.
#[derive(Debug)]
pub struct Activity {
    started: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds since `started` when the connection was last busy.
    last_busy_ms: AtomicU64,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            started: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_busy_ms: AtomicU64::new(0),
        })
    }

    fn touch(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_busy_ms.store(ms, Ordering::Relaxed);
    }

    /// Marks a request as started; the guard ends it when dropped.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.touch();
        InFlight(self.clone())
    }

    /// How long the connection has had nothing in flight (zero while it
    /// has).
    pub fn idle_for(&self) -> Duration {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        let last = Duration::from_millis(self.last_busy_ms.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last)
    }

    /// Resolves once the connection has been idle for `timeout`.
    pub async fn idle(&self, timeout: Duration) {
        loop {
            let idle = self.idle_for();
            if idle >= timeout {
                return;
            }
            // Check again when the timeout could first run out, at least
            // every quarter of it while requests are in flight.
            let wait = (timeout - idle)
                .max(timeout / 4)
                .max(Duration::from_millis(10));
            tokio::time::sleep(wait).await;
        }
    }
}

/// One request in flight; dropping it ends the request.
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `body`, holding `guard` until the body is dropped: the server drops a
/// response body as soon as its last frame is written (or the connection
/// fails), so the request is in flight exactly until its answer is sent.
/// `map_err` (not `map_frame`) keeps the body's size hint, so a response
/// of known length still goes out with its `content-length`.
pub fn guard_body(body: RespBody, guard: InFlight) -> RespBody {
    body.map_err(move |e| {
        let _in_flight = &guard;
        e
    })
    .boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::full;

    /// On a paused clock: the timings are exact, and the test takes no
    /// real time.
    #[tokio::test(start_paused = true)]
    async fn a_request_is_in_flight_until_its_body_ends() {
        let a = Activity::new();
        let guard = a.begin();
        let body = guard_body(full("hello"), guard);
        // The length stays known, so the response keeps its content-length.
        assert_eq!(http_body::Body::size_hint(&body).exact(), Some(5));
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(
            a.idle_for(),
            Duration::ZERO,
            "a body not yet read is in flight"
        );
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(bytes, "hello");
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(a.idle_for(), Duration::from_millis(30));
        // Idle for 30 ms of 80: the watchdog fires 50 ms later, not sooner.
        let started = Instant::now();
        a.idle(Duration::from_millis(80)).await;
        assert_eq!(started.elapsed(), Duration::from_millis(50));
        // A new request makes it busy again; its end restarts the count.
        let again = a.begin();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(a.idle_for(), Duration::ZERO);
        drop(again);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(a.idle_for(), Duration::from_millis(10));
    }
}
