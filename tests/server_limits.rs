//! Listener behaviour: TLS with ALPN h2, h2c, the connection cap, the
//! header read timeout (slowloris), and JSON answers to heads hyper cannot
//! parse.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Version};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use verdict::config::TlsFiles;

#[tokio::test]
async fn tls_listener_negotiates_h2_by_alpn() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cert_path = dir.path().join("cert.pem");
    let key_path = dir.path().join("key.pem");
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();
    let s = support::TestServer::start_with(|c| {
        c.api.tls = Some(TlsFiles {
            cert: cert_path.clone(),
            key: key_path.clone(),
        })
    })
    .await;

    let tls = support::trusting(cert.cert.der().clone());
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_all_versions()
        .build();
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    let url = format!("https://localhost:{}/health", s.addr.port());
    let resp = client
        .request(Request::get(url).body(Empty::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), Version::HTTP_2);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], br#"{"status":"ok"}"#);

    // A plaintext client on the TLS port gets nothing useful, and the server lives on.
    let mut sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    sock.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf))
        .await
        .unwrap()
        .unwrap_or(0);
    assert!(!String::from_utf8_lossy(&buf[..n]).contains("200 OK"));
    s.shutdown().await;
}

#[tokio::test]
async fn h2c_prior_knowledge_works() {
    let s = support::TestServer::start().await;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let resp = client
        .request(Request::get(s.url("/health")).body(Empty::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), Version::HTTP_2);
    s.shutdown().await;
}

/// `GET /health` on an open keep-alive connection: a 200.
async fn health_on(sock: &mut tokio::net::TcpStream) {
    sock.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = sock.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
}

/// A new connection while every permit is held, asking for something
/// other than a probe: the server answers 503 (read within 5 s) and closes
/// it, whether the connection got one of the reserved slots (which answer
/// only `/health`, `/ready` and `/metrics`) or none. Returns the answer.
async fn refused_connection(addr: std::net::SocketAddr) -> String {
    let mut extra = tokio::net::TcpStream::connect(addr).await.unwrap();
    // A connection refused outright may be closed before this is written.
    let _ = extra
        .write_all(b"GET /v2/audit/checkpoint HTTP/1.1\r\nhost: x\r\n\r\n")
        .await;
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), extra.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    assert!(out.starts_with("HTTP/1.1 503"), "{out}");
    out
}

/// Once connections holding permits are gone, `/health` answers 200 again
/// (within 5 s).
async fn health_recovers(s: &support::TestServer) {
    support::eventually("a free permit", Duration::from_secs(5), || async {
        let r = s.get("/health", None).await;
        if r.status == 200 {
            Ok(())
        } else {
            Err(r.text())
        }
    })
    .await
}

#[tokio::test]
async fn connections_over_the_cap_get_503_and_the_rest_keep_working() {
    let s = support::TestServer::start_with(|c| c.server.max_connections = 2).await;
    // Two idle keep-alive connections hold both permits.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        health_on(&mut sock).await;
        held.push(sock);
    }
    let out = refused_connection(s.addr).await;
    assert!(out.contains("\"unavailable\""), "{out}");
    // A held connection still serves.
    let sock = &mut held[0];
    health_on(sock).await;
    drop(held);
    // Permits come back when connections close.
    health_recovers(&s).await;
    s.shutdown().await;
}

/// Idle HTTP/2 connections (the client preface and an empty SETTINGS frame,
/// then nothing) hold permits only until `server.idle_timeout`: then they
/// are closed and `/health` answers again.
#[tokio::test]
async fn idle_http2_connections_are_closed_and_health_recovers() {
    let s = support::TestServer::start_with(|c| {
        c.server.max_connections = 8;
        c.server.idle_timeout = Duration::from_millis(700);
    })
    .await;
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    let mut idle = Vec::new();
    for _ in 0..8 {
        let mut sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        sock.write_all(preface).await.unwrap();
        idle.push(sock);
    }
    // Every permit is held: a new connection is refused.
    tokio::time::sleep(Duration::from_millis(100)).await;
    refused_connection(s.addr).await;
    // After the idle timeout the server closes them (each read ends), and
    // health answers. Bounded: 5 s for all eight.
    for sock in &mut idle {
        let mut buf = vec![0u8; 4096];
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match sock.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {} // SETTINGS, SETTINGS ack, PING
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "an idle HTTP/2 connection stayed open");
    }
    health_recovers(&s).await;
    s.shutdown().await;
}

/// A request in flight keeps its connection open past the idle timeout.
#[tokio::test]
async fn a_busy_connection_outlives_the_idle_timeout() {
    let s = support::TestServer::start_with(|c| {
        c.server.idle_timeout = Duration::from_millis(300);
    })
    .await;
    let mut sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    for _ in 0..4 {
        health_on(&mut sock).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    // Idle now: closed within the timeout (and a little).
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(3), sock.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "an idle keep-alive connection stayed open");
    s.shutdown().await;
}

/// Sends `raw` on a new connection and reads the answer to the end.
async fn raw_exchange(addr: std::net::SocketAddr, raw: &[u8]) -> String {
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(raw).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), sock.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn a_head_hyper_cannot_parse_gets_a_json_error() {
    let s = support::TestServer::start().await;
    let many_headers: String = (0..200).map(|i| format!("x-h{i}: v\r\n")).collect();
    let cases: [(Vec<u8>, u16); 4] = [
        (b"GARBAGE\r\n\r\n".to_vec(), 400),
        (
            b"GET /health HTTP/1.1\r\nhost: x\r\nno colon here\r\n\r\n".to_vec(),
            400,
        ),
        (
            b"POST /v2/verify HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n".to_vec(),
            400,
        ),
        (
            format!("GET /health HTTP/1.1\r\nhost: x\r\n{many_headers}\r\n").into_bytes(),
            431,
        ),
    ];
    for (raw, status) in cases {
        let out = raw_exchange(s.addr, &raw).await;
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{out}");
        assert!(head.contains("content-type: application/json"), "{out}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "invalid_request", "{out}");
        let rid = v["error"]["request_id"].as_str().unwrap();
        assert!(
            !rid.is_empty() && head.contains(&format!("x-request-id: {rid}")),
            "{out}"
        );
    }
    // A well-formed request on a new connection is served as before, and a
    // handler's own 4xx is left alone.
    assert_eq!(s.get("/health", None).await.status, 200);
    let out = raw_exchange(
        s.addr,
        b"GET /nope HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 404 "), "{out}");
    assert!(out.contains("\"not_found\""), "{out}");
    s.shutdown().await;
}

#[tokio::test]
async fn slowloris_is_cut_at_the_header_timeout() {
    let s = support::TestServer::start_with(|c| {
        c.server.header_read_timeout = Duration::from_millis(500)
    })
    .await;
    let started = Instant::now();
    let mut sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let head = b"GET /health HTTP/1.1\r\nhost: x\r\nx-a: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\r\n\r\n";
    let mut closed = false;
    for b in head.iter() {
        if sock.write_all(&[*b]).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        if started.elapsed() > Duration::from_secs(5) {
            break;
        }
    }
    if !closed {
        let mut buf = [0u8; 256];
        let n = tokio::time::timeout(Duration::from_secs(3), sock.read(&mut buf))
            .await
            .expect("server closes the slow connection")
            .unwrap_or(0);
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(!text.contains("200 OK"), "{text}");
    }
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "cut at {:?}",
        started.elapsed()
    );

    // A client that connects and says nothing is dropped too.
    let mut idle = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(3), idle.read(&mut buf))
        .await
        .expect("silent connection closed")
        .unwrap_or(0);
    assert_eq!(n, 0);
    assert_eq!(s.get("/health", None).await.status, 200);
    s.shutdown().await;
}
