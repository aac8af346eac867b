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
//! `--hold N` measures memory instead: the heap that stays allocated per
//! open keep-alive connection once it has made one request and sits idle
//! (N raw clients, 32 at a time, as the loadtest's P6 round opens them),
//! straight to the upstream (a plain hyper HTTP/1 server connection each)
//! and through the proxy, with the live allocations by size.
//!
//! `cargo run --release --example pass_allocs -- [--requests 20000] [--hold 1000]`
//!
//! Loopback only, bounded by `--requests` and `--hold`.

use std::alloc::{GlobalAlloc, Layout};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

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
/// Live allocations by size class (class k holds sizes in (2^(k-1), 2^k]),
/// and their bytes.
static LIVE: [AtomicI64; CLASSES] = [const { AtomicI64::new(0) }; CLASSES];
static LIVE_BYTES: [AtomicI64; CLASSES] = [const { AtomicI64::new(0) }; CLASSES];
const CLASSES: usize = 32;

fn class(size: usize) -> usize {
    (usize::BITS - size.saturating_sub(1).leading_zeros()).min(CLASSES as u32 - 1) as usize
}

/// Live allocations of 4 KiB to 64 KiB by exact size (16-byte steps):
/// the few large ones a connection keeps are told apart by their size.
static LIVE_LARGE: [AtomicI64; LARGE_SLOTS] = [const { AtomicI64::new(0) }; LARGE_SLOTS];
const LARGE_SLOTS: usize = (64 * 1024 - 4096) / 16 + 1;

fn live(size: usize, sign: i64) {
    if (4096..=64 * 1024).contains(&size) {
        LIVE_LARGE[(size - 4096) / 16].fetch_add(sign, Ordering::Relaxed);
    }
    let k = class(size);
    LIVE[k].fetch_add(sign, Ordering::Relaxed);
    LIVE_BYTES[k].fetch_add(sign * size as i64, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to mimalloc; the counters are
// plain atomics and allocate nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        if layout.size() >= 4096 {
            LARGE.fetch_add(1, Ordering::Relaxed);
        }
        live(layout.size(), 1);
        // SAFETY: the caller's contract is passed on.
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        live(layout.size(), -1);
        // SAFETY: `ptr` came from `alloc` above.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        if new_size >= 4096 {
            LARGE.fetch_add(1, Ordering::Relaxed);
        }
        live(layout.size(), -1);
        live(new_size, 1);
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

/// Live allocations of 4 KiB to 64 KiB by size (rounded down to 16 bytes).
fn large_now() -> Vec<i64> {
    LIVE_LARGE
        .iter()
        .map(|n| n.load(Ordering::Relaxed))
        .collect()
}

/// Live allocations and bytes by size class.
fn live_now() -> Vec<(i64, i64)> {
    LIVE.iter()
        .zip(LIVE_BYTES.iter())
        .map(|(n, b)| (n.load(Ordering::Relaxed), b.load(Ordering::Relaxed)))
        .collect()
}

/// One raw keep-alive client that has made one request to `addr` and read
/// its answer (the upstream's `ok\n`): a socket, no buffer kept.
async fn one_request(addr: SocketAddr) -> Result<tokio::net::TcpStream, Error> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(b"GET /api/items/42 HTTP/1.1\r\nhost: app.internal\r\n\r\n")
        .await?;
    let mut buf = [0u8; 2048];
    let mut len = 0;
    while !buf[..len].ends_with(b"\r\n\r\nok\n") {
        let n = s.read(&mut buf[len..]).await?;
        if n == 0 || len + n == buf.len() {
            return Err("the answer ended early or is too long".into());
        }
        len += n;
    }
    Ok(s)
}

/// The heap that stays allocated per connection while `n` clients that
/// have each made one request to `addr` stay connected: bytes, and the
/// size classes that hold most of it.
async fn per_connection(addr: SocketAddr, n: usize) -> Result<(f64, Vec<String>), Error> {
    let before = live_now();
    let large_before = large_now();
    let mut held = Vec::with_capacity(n);
    while held.len() < n {
        let batch = (n - held.len()).min(32);
        let tasks: Vec<_> = (0..batch)
            .map(|_| tokio::spawn(one_request(addr)))
            .collect();
        for t in tasks {
            held.push(t.await??);
        }
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let after = live_now();
    let large_after = large_now();
    drop(held);
    let mut classes: Vec<(usize, f64, f64)> = before
        .iter()
        .zip(after.iter())
        .enumerate()
        .map(|(k, ((n0, b0), (n1, b1)))| {
            (k, (n1 - n0) as f64 / n as f64, (b1 - b0) as f64 / n as f64)
        })
        .filter(|(_, count, _)| count.abs() >= 0.05)
        .collect();
    classes.sort_by(|a, b| b.2.total_cmp(&a.2));
    let total = classes.iter().map(|c| c.2).sum();
    let mut shown: Vec<String> = classes
        .iter()
        .map(|(k, count, bytes)| {
            let lo = if *k == 0 { 0 } else { (1usize << (k - 1)) + 1 };
            format!("{count:.2} x {lo}-{} B = {bytes:.0} B", 1usize << k)
        })
        .collect();
    for (slot, (b, a)) in large_before.iter().zip(large_after.iter()).enumerate() {
        let count = (a - b) as f64 / n as f64;
        if count.abs() >= 0.05 {
            shown.push(format!("  of which {count:.2} x {} B", 4096 + slot * 16));
        }
    }
    Ok((total, shown))
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
    let mut hold: Option<usize> = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--requests" => n = it.next().ok_or("--requests: missing value")?.parse()?,
            "--hold" => hold = Some(it.next().ok_or("--hold: missing value")?.parse()?),
            other => {
                return Err(format!(
                    "unknown flag {other}; usage: pass_allocs [--requests N] [--hold N]"
                )
                .into())
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
        if let Some(hold) = hold {
            for (name, addr) in [("direct", up), ("through", proxy)] {
                let (total, classes) = per_connection(addr, hold).await?;
                println!("{name}: {total:.0} bytes of heap per open connection ({hold} open)");
                for c in classes {
                    println!("  {c}");
                }
            }
            return Ok(());
        }
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
