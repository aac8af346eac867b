//! The pass-through's raw path (src/proxy/raw) against a scripted upstream
//! on raw sockets: the head goes upstream as the client wrote it (field
//! names in their own case, which hyper's header map would lowercase), each
//! response framing comes back whole on a connection that stays usable, a
//! closed idle upstream connection is replaced, and a gated request on the
//! same connection still goes through the gate.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{Gated, RefundPolicy, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const WAIT: Duration = Duration::from_secs(5);

/// What the scripted upstream does after answering one request.
#[derive(Clone, Copy, PartialEq, Eq)]
enum After {
    KeepOpen,
    /// Closes without saying so in the response.
    Close,
}

/// An upstream on a raw socket: records each request head as received and
/// answers it with `answer(path)`.
struct Scripted {
    addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
    connections: Arc<Mutex<usize>>,
}

impl Scripted {
    async fn start(answer: fn(&str) -> (Vec<u8>, After)) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(Mutex::new(0));
        let (h, c) = (heads.clone(), connections.clone());
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                *c.lock().unwrap() += 1;
                tokio::spawn(serve(sock, h.clone(), answer));
            }
        });
        Scripted {
            addr,
            heads,
            connections,
        }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }

    fn connections(&self) -> usize {
        *self.connections.lock().unwrap()
    }
}

/// Serves one upstream connection: heads with a `content-length` body.
async fn serve(
    mut sock: TcpStream,
    heads: Arc<Mutex<Vec<String>>>,
    answer: fn(&str) -> (Vec<u8>, After),
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        if head.starts_with("POST /reject ") {
            // Answers before reading the body, then closes with it unread
            // (a reset).
            let _ = sock
                .write_all(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 8\r\n\r\ntoo big!")
                .await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            heads.lock().unwrap().push(head);
            return;
        }
        if head.starts_with("GET /until-reset ") {
            let _ = sock.write_all(b"HTTP/1.1 200 OK\r\n\r\npartial").await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = sock.set_zero_linger();
            return;
        }
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        while buf.len() < end + len {
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body_sum: u64 = buf[end..end + len].iter().map(|&b| u64::from(b)).sum();
        buf.drain(..end + len);
        let path = head.split(' ').nth(1).unwrap_or("").to_string();
        heads
            .lock()
            .unwrap()
            .push(format!("{head}body: {len} bytes, sum {body_sum}\r\n"));
        let (bytes, after) = answer(&path);
        if sock.write_all(&bytes).await.is_err() || after == After::Close {
            return;
        }
    }
}

/// One complete response from `buf`, if there is one: its head and its
/// body (de-chunked), and its length in `buf`.
fn parse_response(buf: &[u8], head_only: bool) -> Option<(String, Vec<u8>, usize)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let lower = head.to_ascii_lowercase();
    if head_only || head.starts_with("HTTP/1.1 204") {
        return Some((head, Vec::new(), end));
    }
    if let Some(v) = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
    {
        let n: usize = v.trim().parse().unwrap();
        return (buf.len() >= end + n).then(|| (head, buf[end..end + n].to_vec(), end + n));
    }
    assert!(lower.contains("transfer-encoding: chunked"), "{head}");
    let (mut pos, mut body) = (end, Vec::new());
    loop {
        let line_end = buf[pos..].windows(2).position(|w| w == b"\r\n")? + pos;
        let size =
            usize::from_str_radix(std::str::from_utf8(&buf[pos..line_end]).unwrap(), 16).unwrap();
        pos = line_end + 2;
        if size == 0 {
            return (buf.len() >= pos + 2).then(|| (head, body, pos + 2));
        }
        if buf.len() < pos + size + 2 {
            return None;
        }
        body.extend_from_slice(&buf[pos..pos + size]);
        pos += size + 2;
    }
}

/// Sends `req` on `sock` and reads one response.
async fn exchange(sock: &mut TcpStream, req: &str) -> (String, String) {
    exchange_bytes(sock, req.as_bytes()).await
}

/// [`exchange`] with a request of any bytes.
async fn exchange_bytes(sock: &mut TcpStream, req: &[u8]) -> (String, String) {
    sock.write_all(req).await.unwrap();
    let mut all = responses(sock, 1, req.starts_with(b"HEAD ")).await;
    all.remove(0)
}

/// Reads `n` responses from `sock`, and nothing after them.
async fn responses(sock: &mut TcpStream, n: usize, head_only: bool) -> Vec<(String, String)> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            while let Some((head, body, used)) = parse_response(&buf, head_only) {
                buf.drain(..used);
                out.push((head, String::from_utf8(body).unwrap()));
            }
            if out.len() == n {
                assert!(
                    buf.is_empty(),
                    "nothing after the responses: {:?}",
                    String::from_utf8_lossy(&buf)
                );
                return out;
            }
            let got = sock.read(&mut chunk).await.unwrap();
            assert!(
                got > 0,
                "closed before a whole response: {:?}",
                String::from_utf8_lossy(&buf)
            );
            buf.extend_from_slice(&chunk[..got]);
        }
    };
    support::within(WAIT, "responses", read).await
}

/// A body of `n` bytes that is not one repeated byte.
fn big(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + (i % 26) as u8).collect()
}

fn answer(path: &str) -> (Vec<u8>, After) {
    let keep = After::KeepOpen;
    match path {
        "/big" => {
            let mut out =
                format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", 1 << 20).into_bytes();
            out.extend_from_slice(&big(1 << 20));
            return (out, keep);
        }
        "/big-chunked" => {
            let mut out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
            for piece in big(1 << 20).chunks(3000) {
                out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                out.extend_from_slice(piece);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
            return (out, keep);
        }
        _ => {}
    }
    let bytes: &[u8] = match path.split('?').next().unwrap_or("") {
        "/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Up: 1\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nx-trailer: t\r\n\r\n",
        "/informational" => b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        "/no-content" => b"HTTP/1.1 204 No Content\r\nDate: Mon, 30 Nov 2026 00:00:00 GMT\r\n\r\n",
        "/until-close" => return (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it".to_vec(), After::Close),
        "/closes" => return (b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nclosed".to_vec(), After::Close),
        "/listed" => b"HTTP/1.1 200 OK\r\nConnection: x-hop\r\nX-Hop: secret\r\nX-Request-Id: theirs\r\ncontent-length: 2\r\n\r\nok",
        _ => b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Upstream-Case: Kept\r\n\r\nhello",
    };
    (bytes.to_vec(), keep)
}

async fn proxy_to(up: &Scripted) -> TestServer {
    let url = format!("http://{}", up.addr);
    let policy = RefundPolicy::new("strict").build();
    TestServer::with_policies(&[("refunds.toml", &policy)], |c| {
        c.proxy.upstream = Some(url);
    })
    .await
}

#[tokio::test]
async fn the_head_goes_upstream_as_the_client_wrote_it() {
    let up = Scripted::start(answer).await;
    let s = proxy_to(&up).await;
    let mut sock = TcpStream::connect(s.proxy_addr()).await.unwrap();
    let req = "GET /plain?q=1 HTTP/1.1\r\nHost: shop.example\r\nX-Mixed-Case: Value  Kept\r\n\
               X-Verdict-Decision: allow\r\nKeep-Alive: 5\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n";
    let (head, body) = exchange(&mut sock, req).await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("X-Upstream-Case: Kept\r\n"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("x-request-id: "),
        "{head}"
    );
    assert_eq!(body, "hello");
    let sent = up.heads();
    let got = &sent[0];
    assert!(got.starts_with("GET /plain?q=1 HTTP/1.1\r\n"), "{got}");
    assert!(
        got.contains("X-Mixed-Case: Value  Kept\r\n"),
        "field names keep their case: {got}"
    );
    assert!(got.contains(&format!("host: {}\r\n", up.addr)), "{got}");
    assert!(got.contains("x-forwarded-host: shop.example\r\n"), "{got}");
    assert!(
        got.contains("x-forwarded-for: 1.2.3.4, 127.0.0.1\r\n"),
        "{got}"
    );
    let lower = got.to_ascii_lowercase();
    assert!(
        !lower.contains("x-verdict-") && !lower.contains("keep-alive"),
        "{got}"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn every_response_framing_comes_back_whole_on_a_connection_that_goes_on() {
    let up = Scripted::start(answer).await;
    let s = proxy_to(&up).await;
    let mut sock = TcpStream::connect(s.proxy_addr()).await.unwrap();
    let get = |p: &str| format!("GET {p} HTTP/1.1\r\nhost: x\r\n\r\n");
    let (head, body) = exchange(&mut sock, &get("/chunked")).await;
    assert_eq!(body, "abcde");
    assert!(!head.to_ascii_lowercase().contains("trailer"), "{head}");
    let (head, body) = exchange(&mut sock, &get("/informational")).await;
    assert!(
        head.starts_with("HTTP/1.1 200 OK"),
        "1xx answers are not passed on: {head}"
    );
    assert_eq!(body, "ok");
    let (head, _) = exchange(&mut sock, &get("/no-content")).await;
    assert!(head.starts_with("HTTP/1.1 204"), "{head}");
    let (head, body) = exchange(&mut sock, "HEAD /plain HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(
        head.contains("Content-Length: 5\r\n") && body.is_empty(),
        "{head}"
    );
    let (head, body) = exchange(&mut sock, &get("/listed")).await;
    let lower = head.to_ascii_lowercase();
    assert!(
        !lower.contains("x-hop") && !lower.contains("theirs"),
        "{head}"
    );
    assert_eq!(body, "ok");
    // A body until the upstream closes is re-chunked; the client's
    // connection stays open.
    let (head, body) = exchange(&mut sock, &get("/until-close")).await;
    assert!(
        head.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    assert!(
        !head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    assert_eq!(body, "all of it");
    // A body with a length, pipelined with the next request.
    let two = format!(
        "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabc{}",
        get("/plain")
    );
    sock.write_all(two.as_bytes()).await.unwrap();
    let both = responses(&mut sock, 2, false).await;
    assert_eq!(both[0].1, "hello");
    assert_eq!(both[1].1, "hello");
    let heads = up.heads();
    assert!(heads
        .iter()
        .any(|h| h.starts_with("POST /echo HTTP/1.1\r\n") && h.contains("content-length: 3\r\n")));
    s.shutdown().await;
}

#[tokio::test]
async fn an_upstream_connection_closed_while_idle_is_replaced() {
    let up = Scripted::start(answer).await;
    let s = proxy_to(&up).await;
    let mut sock = TcpStream::connect(s.proxy_addr()).await.unwrap();
    // The upstream closes after each of these without saying so.
    for i in 0..3 {
        let (head, body) = exchange(
            &mut sock,
            &format!("GET /closes?{i} HTTP/1.1\r\nhost: x\r\n\r\n"),
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body, "closed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A POST cannot be sent twice: the closed connection is found before.
    let post = "POST /closes HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nhi";
    let (head, body) = exchange(&mut sock, post).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, "closed");
    assert_eq!(up.connections(), 4);
    assert_eq!(
        up.heads().len(),
        4,
        "each request reached the upstream once"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn a_gated_request_after_a_passed_one_still_meets_the_gate() {
    let g = Gated::start(
        &[("refunds.toml", &RefundPolicy::new("strict").build())],
        |_| {},
    )
    .await;
    let mut sock = TcpStream::connect(g.proxy_addr()).await.unwrap();
    let (head, _) = exchange(&mut sock, "GET /first HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let body = r#"{"amount":10}"#;
    let gated = format!(
        "POST /api/orders/77/refunds HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let (head, _) = exchange(&mut sock, &gated).await;
    assert!(
        !head.starts_with("HTTP/1.1 200"),
        "no claims, no allow: {head}"
    );
    let (head, _) = exchange(&mut sock, "GET /after HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let paths: Vec<String> = g.up.calls().iter().map(|c| c.path.clone()).collect();
    assert_eq!(paths, ["/first", "/after"]);
    g.s.shutdown().await;
}

#[tokio::test]
async fn large_bodies_pass_whole_both_ways() {
    let up = Scripted::start(answer).await;
    let s = proxy_to(&up).await;
    let mut sock = TcpStream::connect(s.proxy_addr()).await.unwrap();
    let body = big(3 << 20);
    let sum: u64 = body.iter().map(|&b| u64::from(b)).sum();
    let mut req = format!(
        "POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    let (head, _) = exchange_bytes(&mut sock, &req).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let got = up.heads();
    assert!(
        got[0].ends_with(&format!("body: {} bytes, sum {sum}\r\n", body.len())),
        "{}",
        got[0]
    );
    for path in ["/big", "/big-chunked"] {
        let (head, text) = exchange(
            &mut sock,
            &format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n"),
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(text.as_bytes(), big(1 << 20), "{path}");
    }
    s.shutdown().await;
}

#[tokio::test]
async fn an_upstream_that_answers_before_the_body_is_heard() {
    let up = Scripted::start(answer).await;
    let s = proxy_to(&up).await;
    let mut sock = TcpStream::connect(s.proxy_addr()).await.unwrap();
    let body = big(4 << 20);
    let mut req = format!(
        "POST /reject HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    // The client may find the connection closed before it has sent all.
    let writer = async {
        let _ = sock.write_all(&req).await;
    };
    let _ = tokio::time::timeout(WAIT, writer).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(WAIT, sock.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.starts_with("HTTP/1.1 413"),
        "the upstream's own answer: {text}"
    );
    assert!(
        text.to_ascii_lowercase().contains("connection: close\r\n"),
        "{text}"
    );
    assert!(text.ends_with("too big!"), "{text}");
    s.shutdown().await;
}

#[tokio::test]
async fn a_body_until_close_that_is_cut_off_is_not_passed_as_whole() {
    let up = Scripted::start(answer).await;
    let s = proxy_to(&up).await;
    let mut sock = TcpStream::connect(s.proxy_addr()).await.unwrap();
    sock.write_all(b"GET /until-reset HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(WAIT, sock.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "the connection is closed");
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        !text.ends_with("0\r\n\r\n"),
        "a cut body must not end like a whole one: {text:?}"
    );
    s.shutdown().await;
}

/// A connection the raw path hands to hyper after a while of requests is
/// not taken for idle: the wait for the rest of a head hyper must read is
/// not cut by the idle timeout the raw path's requests kept at bay.
#[tokio::test]
async fn a_connection_handed_to_hyper_late_is_not_idle() {
    let up = Scripted::start(answer).await;
    let url = format!("http://{}", up.addr);
    let policy = RefundPolicy::new("strict").build();
    let s = TestServer::with_policies(&[("refunds.toml", &policy)], |c| {
        c.proxy.upstream = Some(url);
        c.server.idle_timeout = Duration::from_secs(1);
    })
    .await;
    let mut sock = TcpStream::connect(s.proxy_addr()).await.unwrap();
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        let (head, _) = exchange(&mut sock, "GET /plain HTTP/1.1\r\nhost: x\r\n\r\n").await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A head over the raw path's 64 KiB goes to hyper, in two parts.
    let filler = "a".repeat(70 * 1024);
    let head = format!("GET /plain HTTP/1.1\r\nhost: x\r\nx-filler: {filler}\r\n");
    sock.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (head, body) = exchange(&mut sock, "\r\n").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, "hello");
    s.shutdown().await;
}
