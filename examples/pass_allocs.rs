//! Heap allocations per pass-through request.
//!
//! Counts every allocation in this process (a counting wrapper around the
//! same allocator the binary uses, mimalloc) while one keep-alive client
//! sends `--requests` sequential `GET /api/items/42` (default 20 000), first
//! straight to a trivial in-process upstream and then through verdict's
//! proxy (started in-process, no route gating the path). The difference per
//! request is what the pass-through allocates; the client's and the
//! upstream's own allocations cancel out.
//!
//! `cargo run --release --example pass_allocs -- [--requests 20000]`
//!
//! Loopback only, bounded by `--requests`.

use std::alloc::{GlobalAlloc, Layout};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use verdict::config::{Config, Overrides};

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
static LARGE: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to mimalloc; the counters are
// plain atomics and allocate nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        if layout.size() >= 4096 {
            LARGE.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is passed on.
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        if new_size >= 4096 {
            LARGE.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: `ptr` came from this allocator with `layout`.
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

async fn upstream() -> Result<SocketAddr, Error> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_req: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok\n"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

/// Allocations, bytes and allocations of 4 KiB or more per request for `n` requests to `addr` over one
/// keep-alive connection (after a warm-up of 1 000).
async fn per_request(addr: SocketAddr, n: u64) -> Result<(f64, f64, f64), Error> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let once = || {
        Request::get("/api/items/42")
            .header("host", "app.internal")
            .body(Empty::<Bytes>::new())
    };
    for _ in 0..1000 {
        send.ready().await?;
        let resp = send.send_request(once()?).await?;
        resp.into_body().collect().await?;
    }
    let (a0, b0, l0) = counts();
    for _ in 0..n {
        send.ready().await?;
        let resp = send.send_request(once()?).await?;
        if !resp.status().is_success() {
            return Err(format!("status {}", resp.status()).into());
        }
        resp.into_body().collect().await?;
    }
    let (a1, b1, l1) = counts();
    Ok((
        (a1 - a0) as f64 / n as f64,
        (b1 - b0) as f64 / n as f64,
        (l1 - l0) as f64 / n as f64,
    ))
}

fn counts() -> (u64, u64, u64) {
    (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
        LARGE.load(Ordering::Relaxed),
    )
}

fn main() -> Result<(), Error> {
    let mut n: u64 = 20_000;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--requests" => n = it.next().ok_or("--requests: missing value")?.parse()?,
            other => {
                return Err(
                    format!("unknown flag {other}; usage: pass_allocs [--requests N]").into(),
                )
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("policies"))?;
        let up = upstream().await?;
        let overrides = Overrides {
            api_listen: Some("127.0.0.1:0".parse()?),
            proxy_listen: Some("127.0.0.1:0".parse()?),
            upstream: Some(format!("http://{up}")),
            policies: Some(dir.path().join("policies")),
            data_dir: Some(dir.path().join("data")),
            ..Default::default()
        };
        let config = Config::defaults(&overrides)?;
        let running = verdict::app::start(config).await?;
        let proxy = running.proxy_addr.ok_or("the proxy did not start")?;
        let (direct_a, direct_b, direct_l) = per_request(up, n).await?;
        let (pass_a, pass_b, pass_l) = per_request(proxy, n).await?;
        println!("{n} sequential requests on one keep-alive connection");
        println!("direct:  {direct_a:.1} allocations, {direct_b:.0} bytes per request (client and upstream)");
        println!("through: {pass_a:.1} allocations, {pass_b:.0} bytes per request");
        println!(
            "the pass-through allocates {:.1} times ({:.0} bytes; {:.1} of them 4 KiB or more) per request",
            pass_a - direct_a,
            pass_b - direct_b,
            pass_l - direct_l
        );
        Ok::<_, Error>(())
    })
}
