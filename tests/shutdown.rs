//! Graceful shutdown: a request in flight when the drain starts (in-process)
//! or when SIGTERM arrives (the real binary) still completes.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

mod support;

use std::io::{Read, Write};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BODY: &str = r#"{"claims":[{"text":"The sky is blue."}],"sources":[{"source_id":"s1","text":"The sky is blue today."}]}"#;

fn head(key: &str) -> String {
    format!(
        "POST /v2/verify HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        BODY.len()
    )
}

#[tokio::test]
async fn drain_lets_an_in_flight_request_finish() {
    let s = support::TestServer::start().await;
    let mut sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let (first, rest) = BODY.split_at(20);
    sock.write_all(head(support::APP_KEY).as_bytes())
        .await
        .unwrap();
    sock.write_all(first.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    let shutdown = tokio::spawn(s.shutdown());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !shutdown.is_finished(),
        "drain must wait for the request in flight"
    );

    sock.write_all(rest.as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), sock.read_to_string(&mut out))
        .await
        .expect("response before timeout")
        .unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("\"verdict\""), "{out}");
    tokio::time::timeout(Duration::from_secs(10), shutdown)
        .await
        .expect("drain completes")
        .unwrap();
}

#[test]
fn sigterm_drains_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = support::spawn_binary(env!("CARGO_BIN_EXE_verdict"), dir.path());

    let mut sock = std::net::TcpStream::connect(&addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (first, rest) = BODY.split_at(20);
    sock.write_all(head(support::APP_KEY).as_bytes()).unwrap();
    sock.write_all(first.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    support::sigterm(&child);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "must wait for the request in flight"
    );
    sock.write_all(rest.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = sock.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");

    let status = support::wait_exit(&mut child, Duration::from_secs(15))
        .expect("server did not exit after the drain");
    assert_eq!(status.code(), Some(0));
}
