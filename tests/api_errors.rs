//! The request pipeline under good and bad input: auth, content type, body
//! limits, malformed JSON, field paths, request ids and request hashes.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use http::Method;
use support::{TestServer, APP_KEY, REVIEW_KEY, VERIFY_ONLY_KEY};

const VERIFY: &str = r#"{"claims":[{"text":"The sky is blue."}],"sources":[{"source_id":"s1","text":"The sky is blue today."}]}"#;

#[tokio::test]
async fn missing_or_unknown_key_is_401_with_bearer_challenge() {
    let s = TestServer::start().await;
    for key in [None, Some("wrong-key")] {
        let r = s.post_json("/v2/verify", VERIFY, key).await;
        r.assert_error(401, "unauthorized");
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    }
    let r = s
        .send(
            Method::POST,
            "/v2/verify",
            &[
                ("content-type", "application/json"),
                ("authorization", "Basic dXNlcjpwYXNz"),
            ],
            VERIFY,
        )
        .await;
    r.assert_error(401, "unauthorized");
    s.shutdown().await;
}

#[tokio::test]
async fn key_without_scope_is_403() {
    let s = TestServer::start().await;
    let r = s.post_json("/v2/verify", VERIFY, Some(REVIEW_KEY)).await;
    r.assert_error(403, "forbidden");
    let r = s
        .post_json("/v2/verify", VERIFY, Some(VERIFY_ONLY_KEY))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    s.shutdown().await;
}

#[tokio::test]
async fn wrong_content_type_is_415() {
    let s = TestServer::start().await;
    let auth = format!("Bearer {APP_KEY}");
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let mut h = vec![("authorization", auth.as_str())];
        if let Some(ct) = ct {
            h.push(("content-type", ct));
        }
        let r = s.send(Method::POST, "/v2/verify", &h, VERIFY).await;
        r.assert_error(415, "unsupported_media_type");
    }
    s.shutdown().await;
}

#[tokio::test]
async fn bodies_over_the_limit_are_413() {
    let s = TestServer::start_with(|c| c.limits.max_body_bytes = 4096).await;
    let big = format!(
        r#"{{"claims":[{{"text":"{}"}}],"sources":[]}}"#,
        "a".repeat(5000)
    );
    let r = s.post_json("/v2/verify", &big, Some(APP_KEY)).await;
    r.assert_error(413, "payload_too_large");
    s.shutdown().await;
}

#[tokio::test]
async fn chunked_body_over_the_limit_is_413() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = TestServer::start_with(|c| c.limits.max_body_bytes = 1024).await;
    let mut sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let head = format!(
        "POST /v2/verify HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {APP_KEY}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    let chunk = "a".repeat(600);
    for _ in 0..3 {
        let msg = format!("{:x}\r\n{chunk}\r\n", chunk.len());
        if sock.write_all(msg.as_bytes()).await.is_err() {
            break;
        }
    }
    let _ = sock.write_all(b"0\r\n\r\n").await;
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), sock.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("payload_too_large"), "{text}");
    s.shutdown().await;
}

#[tokio::test]
async fn malformed_bodies_are_4xx_never_500() {
    let s = TestServer::start().await;
    let deep = format!(
        r#"{{"claims":{}{}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{not json".to_vec(), 400, "invalid_json"),
        (b"".to_vec(), 400, "invalid_json"),
        (b"{\"claims\":[{\"text\":\"\xff\xfe\"}],\"sources\":[]}".to_vec(), 400, "invalid_json"),
        (br#"{"claims":[{"text":"\ud800"}],"sources":[]}"#.to_vec(), 400, "invalid_json"),
        (deep.into_bytes(), 400, "invalid_json"),
        (br#"{"claims":"nope"}"#.to_vec(), 400, "invalid_request"),
        (br#"{"claims":[{"text":1}]}"#.to_vec(), 400, "invalid_request"),
        (br#"{"claims":null}"#.to_vec(), 400, "invalid_request"),
        (br#"[1,2]"#.to_vec(), 400, "invalid_request"),
        (br#"{"claims":[]}"#.to_vec(), 422, "invalid_request"),
        (br#"{"claims":[{"text":"  "}]}"#.to_vec(), 422, "invalid_request"),
        (
            br#"{"claims":["x"],"sources":[{"source_id":"a","text":"t"},{"source_id":"a","text":"u"}]}"#.to_vec(),
            422,
            "invalid_request",
        ),
        (br#"{"claims":["x"],"sources":[{"source_id":"a"}]}"#.to_vec(), 422, "invalid_request"),
        (
            br#"{"claims":["x"],"sources":[{"source_id":"a","text":"t","uri":"file:///x"}]}"#.to_vec(),
            422,
            "invalid_request",
        ),
        (br#"{"claims":["x"],"requirements":{"min_coverage":1.7}}"#.to_vec(), 422, "invalid_request"),
        (br#"{"claims":["x"],"options":{"evidence_limit":1000000}}"#.to_vec(), 422, "invalid_request"),
        (br#"{"claims":["x"],"response":{"mode":"loud"}}"#.to_vec(), 422, "invalid_request"),
        (br#"{"claims":["x\u0000y"],"sources":[{"id":"a","text":"x\u0000y"}]}"#.to_vec(), 200, ""),
    ];
    for (body, status, code) in cases {
        let shown = String::from_utf8_lossy(&body[..body.len().min(60)]).into_owned();
        let r = s
            .post_json_with("/v2/verify", body, Some(APP_KEY), &[])
            .await;
        if status == 200 {
            assert_eq!(r.status, 200, "{shown}: {}", r.text());
        } else {
            assert_eq!(r.status, status, "{shown}: {}", r.text());
            r.assert_error(status, code);
        }
    }
    assert_eq!(s.get("/health", None).await.status, 200);
    s.shutdown().await;
}

#[tokio::test]
async fn field_paths_are_named() {
    let s = TestServer::start().await;
    let r = s
        .post_json(
            "/v2/verify",
            r#"{"claims":[{"text":"a"},{"text":"b"},{"id":"x"}]}"#,
            Some(APP_KEY),
        )
        .await;
    r.assert_error(400, "invalid_request");
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("claims[2]") && msg.contains("missing field `text`"),
        "{msg}"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn request_ids_reach_the_body_and_the_header() {
    let s = TestServer::start().await;
    let r = s
        .post_json_with(
            "/v2/verify",
            VERIFY,
            Some(APP_KEY),
            &[("x-request-id", "acc-req-42")],
        )
        .await;
    assert_eq!(r.header("x-request-id"), Some("acc-req-42"));
    assert_eq!(r.json()["request_id"], "acc-req-42");
    let r = s.post_json("/v2/verify", VERIFY, Some(APP_KEY)).await;
    let id = r.header("x-request-id").unwrap().to_string();
    assert_eq!(r.json()["request_id"], id.as_str());
    s.shutdown().await;
}

#[tokio::test]
async fn request_hash_ignores_key_order_and_whitespace() {
    let s = TestServer::start().await;
    let a = s
        .post_json("/v2/verify", VERIFY, Some(APP_KEY))
        .await
        .json();
    let b = s
        .post_json(
            "/v2/verify",
            "{ \"sources\": [ {\"text\":\"The sky is blue today.\",  \"source_id\":\"s1\"} ],\n \"claims\":[{\"text\":\"The sky is blue.\"}] }",
            Some(APP_KEY),
        )
        .await
        .json();
    let c = s
        .post_json(
            "/v2/verify",
            &VERIFY.replace("blue.", "green."),
            Some(APP_KEY),
        )
        .await
        .json();
    let ha = a["request_hash"].as_str().unwrap();
    assert!(ha.starts_with("sha256:") && ha.len() == 71, "{ha}");
    assert_eq!(a["request_hash"], b["request_hash"]);
    assert_ne!(a["request_hash"], c["request_hash"]);
    s.shutdown().await;
}
