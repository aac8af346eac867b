//! A hostile-input corpus against every JSON endpoint and a gated proxy
//! route: malformed and non-JSON bodies, wrong types and nulls, 10 000-level
//! nesting, huge strings and word counts, invalid UTF-8, lone surrogates, NUL
//! bytes, absurd numbers, wrong content types and ambiguous HTTP framing sent
//! as raw bytes. Every input must get its documented 4xx (or a 200 when it is
//! merely large but valid) with a JSON error body, within a timeout, never a
//! 500; and the server must still answer afterwards. Each test prints how
//! many inputs it tried.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use http::Method;
use serde_json::{json, Value};
use support::{
    Gated, MockUpstream, RefundPolicy, TestServer, APP_KEY, DAMAGED, INVOICE_77, REVIEW_KEY,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// No single hostile request may take longer than this.
const PER_REQUEST: Duration = Duration::from_secs(15);

/// A gated route: claims and evidence from the body, a body parameter, a
/// rule that holds large amounts for review.
async fn gated() -> Gated {
    let policy = RefundPolicy::new("balanced")
        .review_over(500)
        .param("note", "body:/note")
        .hold("50ms")
        .build();
    Gated::start(&[("refunds.toml", &policy)], |_| {}).await
}

/// One hostile input and what it must get back.
struct Case {
    label: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    /// The `error.code`, or "" for a 200.
    code: &'static str,
}

fn case(
    label: impl Into<String>,
    body: impl Into<Vec<u8>>,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        label: label.into(),
        content_type: Some("application/json"),
        body: body.into(),
        status,
        code,
    }
}

/// Refused as not JSON: 400 `invalid_json`.
fn not_json(label: impl Into<String>, body: impl Into<Vec<u8>>) -> Case {
    case(label, body, 400, "invalid_json")
}

/// Refused for its shape: 400 `invalid_request`.
fn bad_shape(label: impl Into<String>, body: impl Into<Vec<u8>>) -> Case {
    case(label, body, 400, "invalid_request")
}

/// Refused for its values: 422 `invalid_request`.
fn bad_value(label: impl Into<String>, body: impl Into<Vec<u8>>) -> Case {
    case(label, body, 422, "invalid_request")
}

/// Answered: 200.
fn answered(label: impl Into<String>, body: impl Into<Vec<u8>>) -> Case {
    case(label, body, 200, "")
}

fn with_ct(mut c: Case, ct: Option<&'static str>) -> Case {
    c.content_type = ct;
    c
}

/// Counts the inputs a test sent.
#[derive(Default)]
struct Tally(usize);

/// Sends one request within [`PER_REQUEST`] and returns the response.
async fn send(
    t: &mut Tally,
    base: &str,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> support::Resp {
    t.0 += 1;
    support::within(
        PER_REQUEST,
        path,
        support::call(base, method, path, headers, body),
    )
    .await
}

/// GET `path` with `key`'s bearer token.
async fn get_as(t: &mut Tally, base: &str, path: &str, key: &str) -> support::Resp {
    let auth = format!("Bearer {key}");
    send(
        t,
        base,
        Method::GET,
        path,
        &[("authorization", &auth)],
        vec![],
    )
    .await
}

/// POST a JSON `body` with `key`'s bearer token.
async fn post_as(t: &mut Tally, base: &str, path: &str, key: &str, body: Vec<u8>) -> support::Resp {
    let auth = format!("Bearer {key}");
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    send(t, base, Method::POST, path, &headers, body).await
}

/// Runs every case against one JSON endpoint and checks status and code.
async fn run_cases(t: &mut Tally, base: &str, path: &str, key: &str, cases: Vec<Case>) {
    let auth = format!("Bearer {key}");
    for c in cases {
        let mut h = vec![("authorization", auth.as_str())];
        if let Some(ct) = c.content_type {
            h.push(("content-type", ct));
        }
        let r = send(t, base, Method::POST, path, &h, c.body).await;
        check(&r, &format!("{path} {}", c.label), c.status, c.code);
    }
}

/// The status, and for errors the JSON error body (docs/api.md) with `code`.
fn check(r: &support::Resp, label: &str, status: u16, code: &str) {
    assert_eq!(r.status, status, "{label}: {}", short(&r.text()));
    assert!(r.status < 500, "{label}: {}", r.text());
    if status != 200 {
        let v: Value = serde_json::from_slice(&r.body)
            .unwrap_or_else(|_| panic!("{label}: error body is not JSON: {}", r.text()));
        assert_eq!(v["error"]["code"], code, "{label}: {v}");
        assert!(v["error"]["message"].is_string(), "{label}: {v}");
        assert!(v["error"]["request_id"].is_string(), "{label}: {v}");
    }
}

/// The first 300 characters, for assertion messages.
fn short(s: &str) -> String {
    s.chars().take(300).collect()
}

fn deep_array(levels: usize) -> String {
    format!("{}{}", "[".repeat(levels), "]".repeat(levels))
}

fn deep_object(levels: usize) -> String {
    format!("{}1{}", r#"{"a":"#.repeat(levels), "}".repeat(levels))
}

/// Malformed bytes, non-JSON and wrong content types: the same answer from
/// every JSON endpoint, whatever its schema.
fn malformed(limit: usize) -> Vec<Case> {
    let over = format!(r#"{{"x":"{}"}}"#, "a".repeat(limit + 10));
    vec![
        not_json("not json", "{not json"),
        not_json("empty", ""),
        not_json("whitespace only", "  \n\t "),
        not_json("truncated", r#"{"claims":["a""#),
        not_json("trailing garbage", "{}x"),
        not_json("two documents", "{} {}"),
        not_json("utf-8 bom", b"\xef\xbb\xbf{}".to_vec()),
        not_json("invalid utf-8", b"{\"claims\":[\"\xff\xfe\xc0\"]}".to_vec()),
        not_json("overlong utf-8", b"{\"claims\":[\"\xc0\xaf\"]}".to_vec()),
        not_json("lone high surrogate", r#"{"claims":["\ud800"]}"#),
        not_json("lone low surrogate", r#"{"claims":["\udc00x"]}"#),
        not_json("raw NUL in a string", b"{\"claims\":[\"a\x00b\"]}".to_vec()),
        not_json("raw NUL outside", b"{\"claims\":[\"a\"]}\x00".to_vec()),
        not_json("raw newline in a string", "{\"claims\":[\"a\nb\"]}"),
        not_json(
            "10000-deep array",
            format!(r#"{{"claims":{}}}"#, deep_array(10_000)),
        ),
        not_json("10000-deep object", deep_object(10_000)),
        not_json("unclosed deep array", "[".repeat(10_000)),
        not_json("number out of range", r#"{"claims":["a"],"x":1e400}"#),
        not_json("NaN literal", r#"{"claims":["a"],"x":NaN}"#),
        not_json("single quotes", "{'claims':['a']}"),
        not_json("form body", "claims=a&sources=b"),
        not_json("xml body", "<claims><c>a</c></claims>"),
        not_json(
            "binary",
            (0u8..=255).cycle().take(4096).collect::<Vec<u8>>(),
        ),
        case("over the body limit", over, 413, "payload_too_large"),
        with_ct(
            case("no content type", "{}", 415, "unsupported_media_type"),
            None,
        ),
        with_ct(
            case("text/plain", "{}", 415, "unsupported_media_type"),
            Some("text/plain"),
        ),
        with_ct(
            case("form type", "{}", 415, "unsupported_media_type"),
            Some("application/x-www-form-urlencoded"),
        ),
        with_ct(
            case("multipart", "{}", 415, "unsupported_media_type"),
            Some("multipart/form-data; boundary=x"),
        ),
        with_ct(
            case("json suffix type", "{}", 415, "unsupported_media_type"),
            Some("application/json-patch+json"),
        ),
        with_ct(
            case("json prefix type", "{}", 415, "unsupported_media_type"),
            Some("application/jsonx"),
        ),
    ]
}

/// Shape errors (400) and value errors (422) of the verify schema, under an
/// optional prefix: `{}` for verify, `{"action":...,` for authorize.
fn verify_shapes(wrap: &dyn Fn(&str) -> String) -> Vec<Case> {
    let w = |s: &str| wrap(s).into_bytes();
    let src = r#""sources":[{"source_id":"s","text":"The sky is blue."}]"#;
    let claims = r#""claims":["The sky is blue."]"#;
    // The claims, then `rest`; the claims and a source, then `rest`.
    let after_claims = |rest: &str| w(&format!("{claims},{rest}"));
    let full = |rest: &str| w(&format!("{claims},{src},{rest}"));
    vec![
        bad_shape("null body", "null"),
        bad_shape("array body", "[1,2]"),
        bad_shape("string body", r#""claims""#),
        bad_shape("number body", "42"),
        bad_shape("claims null", w(r#""claims":null"#)),
        bad_shape("claims string", w(r#""claims":"x""#)),
        bad_shape("claims object", w(r#""claims":{"text":"x"}"#)),
        bad_shape("claims number", w(r#""claims":7"#)),
        bad_shape("claim null", w(r#""claims":[null]"#)),
        bad_shape("claim number", w(r#""claims":[1]"#)),
        bad_shape("claim nested array", w(r#""claims":[["x"]]"#)),
        bad_shape("claim text null", w(r#""claims":[{"text":null}]"#)),
        bad_shape("claim text array", w(r#""claims":[{"text":["a"]}]"#)),
        bad_shape("claim id number", w(r#""claims":[{"text":"a","id":5}]"#)),
        bad_shape(
            "citations string",
            w(r#""claims":[{"text":"a","citations":"s"}]"#),
        ),
        bad_shape(
            "citation null",
            w(r#""claims":[{"text":"a","citations":[null]}]"#),
        ),
        bad_shape("sources string", after_claims(r#""sources":"s""#)),
        bad_shape("sources null", after_claims(r#""sources":null"#)),
        bad_shape("source number", after_claims(r#""sources":[1]"#)),
        bad_shape(
            "source text number",
            after_claims(r#""sources":[{"id":"s","text":5}]"#),
        ),
        bad_shape(
            "source id object",
            after_claims(r#""sources":[{"id":{},"text":"t"}]"#),
        ),
        bad_shape(
            "min_coverage string NaN",
            full(r#""requirements":{"min_coverage":"NaN"}"#),
        ),
        bad_shape(
            "min_coverage string inf",
            full(r#""options":{"min_coverage":"Infinity"}"#),
        ),
        bad_shape(
            "min_coverage null-ish",
            full(r#""requirements":{"min_coverage":[]}"#),
        ),
        bad_value(
            "min_coverage negative",
            full(r#""requirements":{"min_coverage":-0.5}"#),
        ),
        bad_value(
            "min_coverage 1e308",
            full(r#""requirements":{"min_coverage":1e308}"#),
        ),
        bad_value(
            "min_coverage -1e308",
            full(r#""options":{"min_coverage":-1e308}"#),
        ),
        bad_value(
            "min_coverage huge int",
            full(r#""requirements":{"min_coverage":99999999999999999999999}"#),
        ),
        bad_shape(
            "evidence_limit negative",
            full(r#""options":{"evidence_limit":-1}"#),
        ),
        bad_shape(
            "evidence_limit float",
            full(r#""options":{"evidence_limit":2.5}"#),
        ),
        bad_shape(
            "evidence_limit 1e308",
            full(r#""options":{"evidence_limit":1e308}"#),
        ),
        bad_value(
            "evidence_limit u64::MAX",
            full(r#""options":{"evidence_limit":18446744073709551615}"#),
        ),
        bad_shape(
            "evidence_limit over u64",
            full(r#""options":{"evidence_limit":18446744073709551616}"#),
        ),
        bad_shape(
            "evidence_limit string",
            full(r#""options":{"evidence_limit":"NaN"}"#),
        ),
        bad_shape("options string", full(r#""options":"all""#)),
        bad_shape("response mode number", full(r#""response":{"mode":1}"#)),
        bad_value("empty claims", w(r#""claims":[]"#)),
        bad_value("blank claim", w(r#""claims":["   "]"#)),
        bad_value(
            "duplicate source id",
            after_claims(r#""sources":[{"id":"a","text":"t"},{"id":"a","text":"u"}]"#),
        ),
        bad_value(
            "source without content",
            after_claims(r#""sources":[{"id":"a"}]"#),
        ),
        bad_value(
            "source text and uri",
            after_claims(r#""sources":[{"id":"a","text":"t","uri":"file:///etc/passwd"}]"#),
        ),
        bad_value(
            "unknown decision mode",
            full(r#""requirements":{"decision_mode":"yolo"}"#),
        ),
        bad_value(
            "unknown citations policy",
            full(r#""requirements":{"citations":"maybe"}"#),
        ),
        bad_shape(
            "citations policy number",
            full(r#""requirements":{"citations":1}"#),
        ),
        answered(
            "unknown fields are ignored",
            full(r#""zzz":{"deep":[1,2,3]}"#),
        ),
        answered(
            "escaped NUL is text",
            w(r#""claims":["a\u0000b"],"sources":[{"id":"s","text":"a\u0000b"}]"#),
        ),
        answered(
            "valid surrogate pair",
            w(
                r#""claims":["\ud83d\ude00 blue"],"sources":[{"id":"s","text":"\ud83d\ude00 blue"}]"#,
            ),
        ),
    ]
}

/// Large but valid inputs within the body limit: they must be answered (200)
/// in bounded time, not refused and not crashed on.
fn big_valid(wrap: &dyn Fn(&str) -> String) -> Vec<Case> {
    let words = "refund ".repeat(100_000);
    let many_sources: Vec<Value> = (0..10_000)
        .map(|i| json!({"id": format!("s{i}"), "text": format!("Parcel {i} was delivered.")}))
        .collect();
    let long_text = "The parcel was damaged in transit. ".repeat(20_000);
    vec![
        answered(
            "claim of 100000 words, no sources",
            wrap(&format!(r#""claims":[{}]"#, json!(words))),
        ),
        answered(
            "claim of 100000 words against a source",
            wrap(&format!(
                r#""claims":[{}],"sources":[{{"id":"s","text":{}}}]"#,
                json!(words),
                json!(INVOICE_77)
            )),
        ),
        answered(
            "10000 sources",
            wrap(&format!(
                r#""claims":["Parcel 9999 was delivered."],"sources":{}"#,
                Value::Array(many_sources)
            )),
        ),
        answered(
            "a 700 KB source",
            wrap(&format!(
                r#""claims":["The parcel was damaged in transit."],"sources":[{{"id":"s","text":{}}}]"#,
                json!(long_text)
            )),
        ),
    ]
}

async fn healthy(t: &mut Tally, base: &str) {
    let r = send(t, base, Method::GET, "/health", &[], vec![]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = post_as(
        t,
        base,
        "/v2/verify",
        APP_KEY,
        br#"{"claims":["The sky is blue."],"sources":[{"id":"s","text":"The sky is blue today."}]}"#
            .to_vec(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["verdict"], "supported", "{}", r.text());
}

#[tokio::test]
async fn verify_survives_the_corpus() {
    let s = TestServer::start().await;
    let base = format!("http://{}", s.addr);
    let limit = s.running.as_ref().unwrap().app.config.limits.max_body_bytes;
    let mut t = Tally::default();
    let started = std::time::Instant::now();

    let plain = |inner: &str| format!("{{{inner}}}");
    let mut cases = malformed(limit);
    cases.extend(verify_shapes(&plain));
    cases.extend(big_valid(&plain));
    run_cases(&mut t, &base, "/v2/verify", APP_KEY, cases).await;

    healthy(&mut t, &base).await;
    eprintln!(
        "hostile corpus: verify: {} inputs in {:?}",
        t.0,
        started.elapsed()
    );
    s.shutdown().await;
}

#[tokio::test]
async fn authorize_survives_the_corpus() {
    let s = TestServer::start().await;
    let base = format!("http://{}", s.addr);
    let limit = s.running.as_ref().unwrap().app.config.limits.max_body_bytes;
    let mut t = Tally::default();
    let started = std::time::Instant::now();

    let action = |inner: &str| {
        format!(r#"{{"action":{{"type":"refund.create","params":{{"amount":5}}}},{inner}}}"#)
    };
    let mut cases = malformed(limit);
    cases.extend(verify_shapes(&action).into_iter().map(|mut c| {
        // `claims` is optional in authorize: null or [] is "none sent", and
        // a request without claims is decided (deny, `no_claims`, a row of
        // the decision table in docs/api.md), not refused.
        if c.label == "claims null" || c.label == "empty claims" {
            (c.status, c.code) = (200, "");
        }
        c
    }));
    cases.extend(big_valid(&action));
    let claims = r#""claims":["The sky is blue."]"#;
    cases.extend([
        bad_shape("action missing", format!("{{{claims}}}")),
        bad_shape("action null", format!(r#"{{"action":null,{claims}}}"#)),
        bad_shape(
            "action string",
            format!(r#"{{"action":"refund",{claims}}}"#),
        ),
        bad_shape(
            "action type number",
            format!(r#"{{"action":{{"type":5}},{claims}}}"#),
        ),
        bad_shape(
            "action params array",
            format!(r#"{{"action":{{"type":"a","params":[1]}},{claims}}}"#),
        ),
        bad_shape("answer number", action(r#""answer":5"#)),
        bad_shape("answer text null", action(r#""answer":{"text":null}"#)),
        bad_shape(
            "decision mode number",
            action(&format!(r#"{claims},"requirements":{{"decision_mode":3}}"#)),
        ),
        answered(
            "deep params are data, not a crash",
            format!(
                r#"{{"action":{{"type":"a","params":{{"p":{}}}}},{claims}}}"#,
                deep_array(100)
            ),
        ),
    ]);
    run_cases(&mut t, &base, "/v2/authorize", APP_KEY, cases).await;

    healthy(&mut t, &base).await;
    eprintln!(
        "hostile corpus: authorize: {} inputs in {:?}",
        t.0,
        started.elapsed()
    );
    s.shutdown().await;
}

#[tokio::test]
async fn batch_survives_the_corpus() {
    let s = TestServer::start_with(|c| {
        c.limits.max_batch_items = 50;
        c.limits.max_batch_body_bytes = 2 << 20;
    })
    .await;
    let base = format!("http://{}", s.addr);
    let mut t = Tally::default();
    let item =
        r#"{"claims":["The sky is blue."],"sources":[{"id":"s","text":"The sky is blue."}]}"#;
    let jobs = |inner: &str| format!(r#"{{"jobs":[{{{inner}}}]}}"#);
    let mut cases = malformed(2 << 20);
    cases.retain(|c| c.status != 413);
    cases.extend(verify_shapes(&jobs).into_iter().filter(|c| c.status != 200));
    let too_many = format!(r#"{{"jobs":[{}]}}"#, vec![item; 51].join(","));
    cases.extend([
        bad_shape("jobs missing", "{}"),
        bad_shape("jobs null", r#"{"jobs":null}"#),
        bad_shape("jobs string", r#"{"jobs":"x"}"#),
        bad_shape("job null", r#"{"jobs":[null]}"#),
        bad_shape("job array", r#"{"jobs":[[]]}"#),
        bad_value("jobs empty", r#"{"jobs":[]}"#),
        bad_value("51 items over a limit of 50", too_many),
        case(
            "over the batch body limit",
            format!(r#"{{"jobs":[{item}],"pad":"{}"}}"#, "a".repeat(2 << 20)),
            413,
            "payload_too_large",
        ),
        not_json(
            "10000-deep job",
            format!(r#"{{"jobs":{}}}"#, deep_array(10_000)),
        ),
    ]);
    run_cases(&mut t, &base, "/v1/verify-claims-batch", APP_KEY, cases).await;

    // Hostile Idempotency-Key headers.
    let auth = format!("Bearer {APP_KEY}");
    let body = format!(r#"{{"jobs":[{item}]}}"#);
    let long = "k".repeat(5000);
    for key in ["", " ", long.as_str(), "a\tb", "ключ-🔑"] {
        let mut h = vec![
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ];
        // Non-ASCII bytes are still a valid header value on the wire.
        h.push(("idempotency-key", key));
        let client_ok = http::HeaderValue::from_str(key).is_ok();
        if !client_ok {
            continue;
        }
        let r = send(
            &mut t,
            &base,
            Method::POST,
            "/v1/verify-claims-batch",
            &h,
            body.clone().into_bytes(),
        )
        .await;
        assert!(
            matches!(r.status, 202 | 400 | 422),
            "idempotency key {:?}: {} {}",
            short(key),
            r.status,
            r.text()
        );
        if r.status != 202 {
            check(&r, "idempotency key", r.status, "invalid_request");
        }
    }
    // A raw non-UTF-8 Idempotency-Key over a socket.
    let raw = format!(
        "POST /v1/verify-claims-batch HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {APP_KEY}\r\ncontent-type: application/json\r\nidempotency-key: \u{0}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, _) = raw_request(&mut t, s.addr, raw.as_bytes()).await;
    assert_eq!(status, 400, "a NUL in a header value");
    let mut raw = format!(
        "POST /v1/verify-claims-batch HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {APP_KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\nidempotency-key: ",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(b"\xff\xfe\r\n\r\n");
    raw.extend_from_slice(body.as_bytes());
    let (status, text) = raw_request(&mut t, s.addr, &raw).await;
    assert!(matches!(status, 202 | 400), "{status}: {text}");
    if status == 400 {
        assert!(text.contains("invalid_request"), "{text}");
    }

    healthy(&mut t, &base).await;
    eprintln!("hostile corpus: batch: {} inputs", t.0);
    s.shutdown().await;
}

/// Reads, gets and resolves with ids that are not ids.
#[tokio::test]
async fn id_endpoints_and_review_bodies_survive_the_corpus() {
    let Gated { s, up, proxy } = gated().await;
    let base = format!("http://{}", s.addr);
    let mut t = Tally::default();

    let bad_ids = [
        "not-a-uuid".to_string(),
        "00000000-0000-0000-0000-000000000000".to_string(),
        "%00".to_string(),
        "%0d%0aX-Injected:%201".to_string(),
        "..%2f..%2fetc%2fpasswd".to_string(),
        "%2e%2e".to_string(),
        "'%20OR%201=1--".to_string(),
        "%F0%9F%98%80".to_string(),
        "%ff%fe".to_string(),
        "a".repeat(8000),
        uuid::Uuid::new_v4().to_string(),
        uuid::Uuid::new_v4().to_string().to_uppercase(),
    ];
    for id in &bad_ids {
        for (path, key) in [
            (format!("/v2/audit/{id}"), REVIEW_KEY),
            (format!("/v2/audit/{id}/proof"), REVIEW_KEY),
            (format!("/v2/audit/keys/{id}"), REVIEW_KEY),
            (format!("/v2/jobs/{id}"), APP_KEY),
            (format!("/v2/reviews/{id}"), REVIEW_KEY),
        ] {
            let r = get_as(&mut t, &base, &path, key).await;
            check(&r, &path[..path.len().min(60)], 404, "not_found");
        }
        let path = format!("/v2/reviews/{id}/approve");
        let r = post_as(
            &mut t,
            &base,
            &path,
            REVIEW_KEY,
            br#"{"reviewer":"ops"}"#.to_vec(),
        )
        .await;
        check(&r, &path[..path.len().min(60)], 404, "not_found");
    }
    for path in [
        "/v2/audit/",
        "/v2/audit//proof",
        "/v2/jobs/",
        "/v2/jobs/a/b",
        "/v2/reviews//approve",
    ] {
        let r = get_as(&mut t, &base, path, REVIEW_KEY).await;
        check(&r, path, 404, "not_found");
    }
    // Query strings that are not what the list endpoint expects.
    for q in [
        "status=%00",
        "status=pending&limit=-1",
        "limit=99999999999999999999",
        "limit=abc",
    ] {
        let path = format!("/v2/reviews?{q}");
        let r = get_as(&mut t, &base, &path, REVIEW_KEY).await;
        check(&r, &path, 422, "invalid_request");
    }

    // A real pending review: hostile resolution bodies must not resolve it.
    let held = send(
        &mut t,
        &proxy,
        Method::POST,
        "/api/orders/77/refunds",
        &[("content-type", "application/json")],
        json!({"amount": 900, "claims": [DAMAGED], "evidence": [{"id": "inv", "text": INVOICE_77}]})
            .to_string()
            .into_bytes(),
    )
    .await;
    assert_eq!(held.status, 202, "{}", held.text());
    let id = held.json()["review_id"].as_str().unwrap().to_string();
    let limit = s.running.as_ref().unwrap().app.config.limits.max_body_bytes;
    let mut cases = malformed(limit);
    cases.extend([
        bad_shape("null body", "null"),
        bad_shape("array body", "[]"),
        bad_shape("reviewer missing", "{}"),
        bad_shape("reviewer null", r#"{"reviewer":null}"#),
        bad_shape("reviewer number", r#"{"reviewer":5}"#),
        bad_shape("reviewer object", r#"{"reviewer":{"name":"x"}}"#),
        bad_shape("note number", r#"{"reviewer":"ops","note":5}"#),
        bad_value("reviewer empty", r#"{"reviewer":""}"#),
        bad_value("reviewer blank", r#"{"reviewer":" \t "}"#),
        bad_value(
            "reviewer too long",
            format!(r#"{{"reviewer":"{}"}}"#, "r".repeat(10_000)),
        ),
        bad_value(
            "note too long",
            format!(r#"{{"reviewer":"ops","note":"{}"}}"#, "n".repeat(100_000)),
        ),
    ]);
    let n = cases.len();
    run_cases(
        &mut t,
        &base,
        &format!("/v2/reviews/{id}/approve"),
        REVIEW_KEY,
        cases,
    )
    .await;
    let mut again = malformed(limit);
    again.truncate(n.min(again.len()));
    run_cases(
        &mut t,
        &base,
        &format!("/v2/reviews/{id}/reject"),
        REVIEW_KEY,
        again,
    )
    .await;
    let r = get_as(&mut t, &base, &format!("/v2/reviews/{id}"), REVIEW_KEY).await;
    assert_eq!(
        r.json()["status"],
        "pending",
        "hostile bodies resolved the review: {}",
        r.text()
    );
    assert_eq!(up.count(), 0, "nothing was forwarded");

    healthy(&mut t, &base).await;
    eprintln!("hostile corpus: ids and review bodies: {} inputs", t.0);
    s.shutdown().await;
}

/// The gated proxy route: refused bodies are never forwarded, large valid
/// ones are decided.
#[tokio::test]
async fn gated_proxy_route_survives_the_corpus() {
    let Gated { s, up, proxy } = gated().await;
    let base = format!("http://{}", s.addr);
    let proxy_addr = s.proxy_addr();
    let limit = s.running.as_ref().unwrap().app.config.limits.max_body_bytes;
    let mut t = Tally::default();
    let route = "/api/orders/77/refunds";

    // Bodies the gate cannot read are recorded refusals (`denied`,
    // policy_violation): 400 for non-JSON or a malformed justification, 422
    // for invalid values.
    let mut refused: Vec<Case> = malformed(limit)
        .into_iter()
        .filter(|c| c.content_type == Some("application/json"))
        .map(|mut c| {
            if c.status == 400 {
                c.code = "denied";
            }
            c
        })
        .collect();
    let ok_claims = r#""claims":["The package was damaged in transit."]"#;
    refused.extend([
        case("claims string", r#"{"claims":"x"}"#, 400, "denied"),
        case("claims object", r#"{"claims":{"a":1}}"#, 400, "denied"),
        case("claim null", r#"{"claims":[null]}"#, 400, "denied"),
        case("claim number", r#"{"claims":[5]}"#, 400, "denied"),
        case(
            "evidence string",
            format!(r#"{{{ok_claims},"evidence":"x"}}"#),
            400,
            "denied",
        ),
        case(
            "evidence number item",
            format!(r#"{{{ok_claims},"evidence":[1]}}"#),
            400,
            "denied",
        ),
        case(
            "evidence text number",
            format!(r#"{{{ok_claims},"evidence":[{{"id":"i","text":1}}]}}"#),
            400,
            "denied",
        ),
        case(
            "duplicate evidence ids",
            format!(
                r#"{{{ok_claims},"evidence":[{{"id":"i","text":"a"}},{{"id":"i","text":"b"}}]}}"#
            ),
            422,
            "denied",
        ),
        case(
            "evidence without content",
            format!(r#"{{{ok_claims},"evidence":[{{"id":"i"}}]}}"#),
            422,
            "denied",
        ),
        case("blank claim", r#"{"claims":["  "]}"#, 422, "denied"),
    ]);
    for c in refused {
        let before = up.count();
        let mut h = vec![];
        if let Some(ct) = c.content_type {
            h.push(("content-type", ct));
        }
        let r = send(&mut t, &proxy, Method::POST, route, &h, c.body).await;
        check(&r, &format!("proxy {}", c.label), c.status, c.code);
        assert_eq!(
            up.count(),
            before,
            "proxy {}: forwarded a refused body",
            c.label
        );
    }

    // Decided, not crashed: wrong-typed params are data for the rules, and
    // large valid justifications are scored within the timeout.
    let words = "refund ".repeat(100_000);
    let many: Vec<Value> = (0..10_000)
        .map(|i| json!({"id": format!("s{i}"), "text": format!("Parcel {i} was delivered.")}))
        .collect();
    let decided = [
        (
            "amount string",
            json!({"amount": "NaN", "claims": [DAMAGED], "evidence": [{"id": "i", "text": INVOICE_77}]}),
        ),
        (
            "amount 1e308",
            json!({"amount": 1e308, "claims": [DAMAGED], "evidence": [{"id": "i", "text": INVOICE_77}]}),
        ),
        (
            "amount null",
            json!({"amount": null, "claims": [DAMAGED], "evidence": [{"id": "i", "text": INVOICE_77}]}),
        ),
        (
            "note with NUL",
            json!({"amount": 1, "note": "a\u{0}b", "claims": [DAMAGED], "evidence": [{"id": "i", "text": INVOICE_77}]}),
        ),
        (
            "100000 words",
            json!({"amount": 1, "claims": [words], "evidence": [{"id": "i", "text": INVOICE_77}]}),
        ),
        (
            "10000 sources",
            json!({"amount": 1, "claims": ["Parcel 9999 was delivered."], "evidence": many}),
        ),
        ("no claims", json!({"amount": 1})),
    ];
    for (label, body) in decided {
        let r = send(
            &mut t,
            &proxy,
            Method::POST,
            route,
            &[("content-type", "application/json")],
            body.to_string().into_bytes(),
        )
        .await;
        assert!(
            matches!(r.status, 200 | 202 | 403),
            "proxy {label}: {} {}",
            r.status,
            short(&r.text())
        );
        if r.status == 403 {
            check(&r, label, 403, "denied");
        }
    }

    // Framing attacks over raw sockets: the upstream only ever sees one
    // message per attack, with a length that matches its body.
    let before = up.count();
    let framing = framing_attacks(route, &mut t, proxy_addr, limit, Some(&up)).await;
    let calls = up.calls();
    assert!(
        calls.len() - before <= 3,
        "{} forwards",
        calls.len() - before
    );
    for c in &calls[before..] {
        assert!(!c.path.contains("smuggled"), "{}", c.path);
        assert!(
            c.headers.get("transfer-encoding").is_none(),
            "{:?}",
            c.headers
        );
        let lens: Vec<_> = c.headers.get_all("content-length").iter().collect();
        assert_eq!(lens.len(), 1, "{:?}", c.headers);
        assert_eq!(lens[0].to_str().unwrap(), c.body.len().to_string());
        assert!(c.body.starts_with(b"{\"amount\""), "{:?}", c.body);
    }
    // And on the API listener.
    framing_attacks("/v2/verify", &mut t, s.addr, limit, None).await;

    healthy(&mut t, &base).await;
    let ok = send(
        &mut t,
        &proxy,
        Method::POST,
        route,
        &[("content-type", "application/json")],
        json!({"amount": 5, "claims": [DAMAGED], "evidence": [{"id": "i", "text": INVOICE_77}]})
            .to_string()
            .into_bytes(),
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    eprintln!(
        "hostile corpus: proxy: {} inputs ({framing} framing inputs per listener)",
        t.0
    );
    s.shutdown().await;
}

/// Sends raw bytes, reads until the server closes (or a whole response is
/// in), and returns the status and the whole answer.
async fn raw_request(t: &mut Tally, addr: SocketAddr, bytes: &[u8]) -> (u16, String) {
    t.0 += 1;
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    // A server that refuses early may close while we still write.
    let _ = sock.write_all(bytes).await;
    let mut buf = Vec::new();
    let read = async {
        let mut chunk = [0u8; 8192];
        loop {
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    if complete(&buf) {
                        break;
                    }
                }
            }
        }
    };
    tokio::time::timeout(PER_REQUEST, read)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no answer to {:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(80)])
            )
        });
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    (status, text)
}

/// Whether `buf` holds a whole response with a `content-length` body.
fn complete(buf: &[u8]) -> bool {
    first_response_len(buf).is_some_and(|n| buf.len() >= n)
}

/// The length of the first response in `buf` (head and `content-length`
/// body), once its head is in.
fn first_response_len(buf: &[u8]) -> Option<usize> {
    let text = String::from_utf8_lossy(buf);
    let end = text.find("\r\n\r\n")?;
    let len = text[..end]
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())
                .flatten()
        })
        .unwrap_or(0);
    Some(end + 4 + len)
}

/// Request-smuggling and framing inputs over raw sockets. Returns how many
/// were sent.
///
/// hyper refuses most of them itself (an empty 400, before any handler runs).
/// `Content-Length` together with `Transfer-Encoding` is refused by verdict
/// (a JSON 400, `invalid_request`) and the connection closed. Nothing refused
/// reaches `up`.
async fn framing_attacks(
    path: &str,
    t: &mut Tally,
    addr: SocketAddr,
    limit: usize,
    up: Option<&MockUpstream>,
) -> usize {
    let body = r#"{"amount":1,"claims":["The sky is blue."]}"#;
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {APP_KEY}\r\ncontent-type: application/json\r\n"
    );
    let chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let big_chunk = "a".repeat(64 * 1024);
    let mut over = String::new();
    for _ in 0..(limit / big_chunk.len() + 2) {
        over.push_str(&format!("{:x}\r\n{big_chunk}\r\n", big_chunk.len()));
    }
    over.push_str("0\r\n\r\n");
    let n = body.len();
    // (label, request, allowed statuses, the connection must close after it)
    let decided: &[u16] = &[200, 202, 403];
    let ambiguous: &[u16] = &[400];
    let cases: Vec<(&str, String, &[u16], bool)> = vec![
        ("duplicate content-length, different values", format!("{head}content-length: {n}\r\ncontent-length: 5\r\n\r\n{body}"), &[400], true),
        ("duplicate content-length, same value", format!("{head}content-length: {n}\r\ncontent-length: {n}\r\n\r\n{body}"), decided, false),
        ("content-length list", format!("{head}content-length: {n}, {n}\r\n\r\n{body}"), &[400], true),
        ("ambiguous: content-length then chunked", format!("{head}content-length: 4\r\ntransfer-encoding: chunked\r\n\r\n{chunked}"), ambiguous, true),
        ("ambiguous: chunked then content-length", format!("{head}transfer-encoding: chunked\r\ncontent-length: 4\r\n\r\n{chunked}"), ambiguous, true),
        ("content-length and gzip", format!("{head}content-length: {n}\r\ntransfer-encoding: gzip\r\n\r\n{body}"), &[400], true),
        ("ambiguous: content-length and chunked, smuggled tail", format!("{head}content-length: {}\r\ntransfer-encoding: chunked\r\n\r\n{chunked}GET /smuggled HTTP/1.1\r\nhost: x\r\n\r\n", chunked.len()), ambiguous, true),
        ("transfer-encoding not ending in chunked", format!("{head}transfer-encoding: chunked, identity\r\n\r\n{chunked}"), &[400, 501], true),
        ("transfer-encoding gzip", format!("{head}transfer-encoding: gzip\r\n\r\n{chunked}"), &[400, 501], true),
        ("negative content-length", format!("{head}content-length: -1\r\n\r\n{body}"), &[400], true),
        ("content-length with a plus", format!("{head}content-length: +{n}\r\n\r\n{body}"), &[400], true),
        ("content-length not a number", format!("{head}content-length: abc\r\n\r\n{body}"), &[400], true),
        ("content-length beyond u64", format!("{head}content-length: 99999999999999999999999\r\n\r\n{body}"), &[400, 413], true),
        ("bad chunk size", format!("{head}transfer-encoding: chunked\r\n\r\nzz\r\n{body}\r\n0\r\n\r\n"), &[400], true),
        ("chunked over the body limit", format!("{head}transfer-encoding: chunked\r\n\r\n{over}"), &[413], false),
        ("content-length over the body limit", format!("{head}content-length: {}\r\n\r\n{body}", limit + 1), &[413], false),
        ("http/1.0 with transfer-encoding", format!("{}transfer-encoding: chunked\r\n\r\n{chunked}", head.replace("HTTP/1.1", "HTTP/1.0")), &[400], true),
        ("space before the colon", format!("{head}content-length : {n}\r\n\r\n{body}"), &[400], true),
        ("obsolete line folding", format!("{head}x-fold: a\r\n b\r\ncontent-length: {n}\r\n\r\n{body}"), &[400], true),
        ("bare LF line ends", format!("POST {path} HTTP/1.1\nhost: x\ncontent-length: {n}\n\n{body}"), &[200, 202, 400, 401, 403, 415], false),
    ];
    let count = cases.len();
    for (label, req, allowed, must_close) in cases {
        let before = up.map(MockUpstream::count);
        let (status, text) = raw_request(t, addr, req.as_bytes()).await;
        if status >= 400 {
            assert_eq!(
                up.map(MockUpstream::count),
                before,
                "{path} {label}: refused, yet forwarded"
            );
        }
        if label.starts_with("ambiguous: ") {
            assert!(
                text.contains("\"invalid_request\""),
                "{path} {label}: {}",
                short(&text)
            );
        }
        assert!(
            allowed.contains(&status),
            "{path} {label}: got {status}: {}",
            short(&text)
        );
        if must_close {
            // Nothing after an ambiguous message is read as another request.
            assert!(
                !text.get(12..).unwrap_or("").contains("HTTP/1.1 "),
                "{path} {label}: a second response: {}",
                short(&text)
            );
            assert!(
                status == 400 || text.to_ascii_lowercase().contains("connection: close"),
                "{path} {label}: the connection stays open: {}",
                short(&text)
            );
        }
    }
    count
}

/// Offsets land on code points even around emoji, ZWJ sequences, flags and
/// combining marks; a quote is always `text[start:end]` in Python terms.
#[tokio::test]
async fn offsets_hold_at_grapheme_boundaries() {
    let s = TestServer::start().await;
    let base = format!("http://{}", s.addr);
    let mut t = Tally::default();
    let texts = [
        "👨‍👩‍👧 The refund of $100 was approved. 🇩🇪 The parcel arrived damaged.",
        "Cafe\u{301} order 77 was refunded. 😀😀 The courier was late.",
        "e\u{301}\u{302}\u{303} The package was damaged in transit.\u{200d}",
        "🇩🇪🇫🇷 Ünïcödé order shipped on 2024-03-09. Z\u{0335}\u{0321}algo text here.",
        "\u{feff}The refund of $100 was approved.\u{fe0f}",
    ];
    let claims = [
        "The refund of $100 was approved.",
        "The parcel arrived damaged.",
        "The package was damaged in transit.",
        "The courier was late.",
        "Order shipped on 2024-03-09.",
    ];
    let mut seen = 0;
    for text in texts {
        let body = json!({"claims": claims, "sources": [{"id": "s", "text": text}], "response": {"mode": "verbose"}, "options": {"evidence_limit": 100}});
        let r = post_as(
            &mut t,
            &base,
            "/v2/verify",
            APP_KEY,
            body.to_string().into_bytes(),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let chars: Vec<char> = text.chars().collect();
        for check in r.json()["checks"].as_array().unwrap() {
            for c in check["citations"].as_array().unwrap() {
                let (start, end) = (
                    c["start"].as_u64().unwrap() as usize,
                    c["end"].as_u64().unwrap() as usize,
                );
                assert!(start <= end && end <= chars.len(), "{text}: {c}");
                let slice: String = chars[start..end].iter().collect();
                assert_eq!(slice, c["quote"].as_str().unwrap(), "{text}: {c}");
                seen += 1;
            }
            for e in check["evidence"].as_array().unwrap() {
                let snippet = e["snippet"].as_str().unwrap();
                assert!(text.contains(snippet), "{text}: snippet {snippet:?}");
            }
        }
    }
    assert!(seen >= 5, "too few citations to mean anything: {seen}");
    // Output mode with emoji and markers.
    let body = json!({"action": {"type": "a"}, "answer": "😀 The refund of $100 was approved [s]. 👍🏽 Done!", "sources": [{"id": "s", "text": texts[0]}], "requirements": {"citations": "optional"}, "response": {"mode": "verbose"}});
    let r = post_as(
        &mut t,
        &base,
        "/v2/authorize",
        APP_KEY,
        body.to_string().into_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    eprintln!(
        "hostile corpus: offsets: {} inputs, {seen} citations checked",
        t.0
    );
    s.shutdown().await;
}

/// The ambiguity check follows framing across a keep-alive connection: after
/// a chunked and a fixed-length request are served, an ambiguous third one is
/// refused and the connection closed.
#[tokio::test]
async fn ambiguous_framing_is_refused_later_on_a_keep_alive_connection() {
    let s = TestServer::start().await;
    let body =
        r#"{"claims":["The sky is blue."],"sources":[{"id":"s","text":"The sky is blue."}]}"#;
    let head = format!(
        "POST /v2/verify HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {APP_KEY}\r\ncontent-type: application/json\r\n"
    );
    // The chunked body is split so that a chunk holds a fake head.
    let fake = "content-length: 1\r\ntransfer-encoding: chunked\r\n\r\n";
    let chunked = format!(
        "{}transfer-encoding: chunked\r\n\r\n1\r\n{{\r\n{:x};ext=x\r\n{}\r\n0\r\ntrailer-x: 1\r\n\r\n",
        head,
        body.len() - 1,
        &body[1..]
    );
    let requests = [
        chunked,
        format!("{head}content-length: {}\r\n\r\n{body}", body.len()),
        format!("{head}content-length: {}\r\n\r\n{}", fake.len(), fake),
        format!("{head}content-length: 4\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"),
    ];
    let mut sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let mut t = Tally::default();
    for (i, req) in requests.iter().enumerate() {
        t.0 += 1;
        sock.write_all(req.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let read = async {
            let mut chunk = [0u8; 8192];
            while !complete(&buf) {
                match sock.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
        };
        tokio::time::timeout(PER_REQUEST, read).await.unwrap();
        let text = String::from_utf8_lossy(&buf).into_owned();
        match i {
            0 | 1 => assert!(text.starts_with("HTTP/1.1 200"), "request {i}: {text}"),
            // The fake head inside a body is body: the JSON is not a claim set.
            2 => assert!(
                text.starts_with("HTTP/1.1 400") && text.contains("invalid_json"),
                "request {i}: {text}"
            ),
            _ => {
                assert!(text.starts_with("HTTP/1.1 400"), "{text}");
                assert!(text.contains("\"invalid_request\""), "{text}");
                assert!(
                    text.to_ascii_lowercase().contains("connection: close"),
                    "{text}"
                );
            }
        }
    }
    let mut rest = Vec::new();
    let n = tokio::time::timeout(PER_REQUEST, sock.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0, "the connection is closed after the refusal");
    eprintln!("hostile corpus: keep-alive framing: {} inputs", t.0);
    s.shutdown().await;
}

/// What the upstream must see of one smuggling input sent through the
/// pass-through.
enum Expect {
    /// Refused with one of these statuses; nothing of it reaches the
    /// upstream as a request.
    Refused(&'static [u16]),
    /// Forwarded: the upstream gets exactly these (path, body) requests.
    Forwarded(Vec<(&'static str, String)>),
    /// Either refused (400) or forwarded as exactly this one request.
    Either(&'static str, String),
    /// The client hangs up mid-body: a 400 or no answer; nothing of it
    /// reaches the upstream as a request.
    HungUp,
}

/// Reads up to `want` whole responses (or until the server closes) and
/// returns their statuses, and whether the connection is still open.
async fn read_responses(
    sock: &mut tokio::net::TcpStream,
    want: usize,
    what: &str,
) -> (Vec<u16>, bool) {
    let mut buf = Vec::new();
    let mut statuses = Vec::new();
    let mut open = true;
    let read = async {
        let mut chunk = [0u8; 8192];
        loop {
            while complete(&buf) && statuses.len() < want {
                let n = first_response_len(&buf).unwrap();
                statuses.push(String::from_utf8_lossy(&buf[9..12]).parse().unwrap());
                buf.drain(..n);
            }
            if statuses.len() == want {
                break;
            }
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => {
                    open = false;
                    break;
                }
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    if tokio::time::timeout(PER_REQUEST, read).await.is_err() {
        panic!("{what}: no answer in time");
    }
    (statuses, open)
}

/// The request-smuggling corpus through the pass-through, where each
/// downstream HTTP/1 connection has its own upstream connection (and
/// hands it to the next downstream connection when it closes). Each input
/// is sent after an ordinary request on the same connection, so that its
/// upstream connection is the affine one, and followed by another ordinary
/// request (on a new connection when the proxy closed this one, which then
/// takes over the closed one's upstream connection). The upstream must see
/// the two ordinary requests intact, and the input either not at all or as
/// exactly the request(s) meant.
#[tokio::test]
async fn smuggling_through_the_pass_through_is_refused_or_forwarded_once() {
    let g = gated().await;
    let addr = g.proxy_addr();
    let path = "/api/items/7";
    let body = r#"{"amount":1,"note":"x"}"#.to_string();
    let n = body.len();
    let head = format!("POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n");
    let chunked = format!("{n:x}\r\n{body}\r\n0\r\n\r\n");
    let smuggled = "GET /smuggled HTTP/1.1\r\nhost: x\r\n\r\n";
    let once = |b: &str| Expect::Forwarded(vec![(path, b.to_string())]);
    let refused: &[u16] = &[400];
    let cases: Vec<(&str, String, Expect)> = vec![
        ("content-length", format!("{head}content-length: {n}\r\n\r\n{body}"), once(&body)),
        ("chunked", format!("{head}transfer-encoding: chunked\r\n\r\n{chunked}"), once(&body)),
        ("chunked with an extension and a trailer", format!("{head}transfer-encoding: chunked\r\n\r\n{n:x};ext=1\r\n{body}\r\n0\r\nx-trailer: 1\r\n\r\n"), once(&body)),
        ("a pipelined pair", format!("{head}content-length: {n}\r\n\r\n{body}GET /second HTTP/1.1\r\nhost: x\r\n\r\n"), Expect::Forwarded(vec![(path, body.clone()), ("/second", String::new())])),
        ("a fake head inside a body", format!("{head}content-length: {}\r\n\r\n{smuggled}", smuggled.len()), once(smuggled)),
        ("CL.TE", format!("{head}content-length: {}\r\ntransfer-encoding: chunked\r\n\r\n{chunked}{smuggled}", chunked.len()), Expect::Refused(refused)),
        ("TE.CL", format!("{head}transfer-encoding: chunked\r\ncontent-length: 4\r\n\r\n{chunked}{smuggled}"), Expect::Refused(refused)),
        ("TE.TE, obfuscated", format!("{head}transfer-encoding: chunked\r\ntransfer-encoding: x\r\n\r\n{chunked}{smuggled}"), Expect::Refused(&[400, 501])),
        ("transfer-encoding with a space before the colon", format!("{head}transfer-encoding : chunked\r\ncontent-length: {n}\r\n\r\n{body}{smuggled}"), Expect::Refused(refused)),
        ("duplicate content-length, different values", format!("{head}content-length: {n}\r\ncontent-length: 5\r\n\r\n{body}{smuggled}"), Expect::Refused(refused)),
        ("duplicate content-length, same value", format!("{head}content-length: {n}\r\ncontent-length: {n}\r\n\r\n{body}"), once(&body)),
        ("content-length list", format!("{head}content-length: {n}, 5\r\n\r\n{body}"), Expect::Refused(refused)),
        ("content-length with a plus", format!("{head}content-length: +{n}\r\n\r\n{body}"), Expect::Refused(refused)),
        ("negative content-length", format!("{head}content-length: -1\r\n\r\n{body}"), Expect::Refused(refused)),
        ("content-length beyond u64", format!("{head}content-length: 99999999999999999999999\r\n\r\n{body}"), Expect::Refused(&[400, 413])),
        ("obs-fold in content-length", format!("{head}content-length:\r\n {n}\r\n\r\n{body}"), Expect::Refused(refused)),
        ("obs-fold in transfer-encoding", format!("{head}transfer-encoding: identity\r\n chunked\r\ncontent-length: {n}\r\n\r\n{body}"), Expect::Refused(&[400, 501])),
        ("obs-fold elsewhere", format!("{head}x-fold: a\r\n b\r\ncontent-length: {n}\r\n\r\n{body}"), Expect::Refused(refused)),
        ("chunk size not hex", format!("{head}transfer-encoding: chunked\r\n\r\nzz\r\n{body}\r\n0\r\n\r\n{smuggled}"), Expect::Refused(refused)),
        ("chunk size beyond u64", format!("{head}transfer-encoding: chunked\r\n\r\n1ffffffffffffffff\r\n{body}\r\n0\r\n\r\n{smuggled}"), Expect::Refused(refused)),
        ("chunk shorter than its size line, then the client hangs up", format!("{head}transfer-encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n{smuggled}", n + 400), Expect::HungUp),
        ("content-length longer than the body, then the client hangs up", format!("{head}content-length: {}\r\n\r\n{body}{smuggled}", n + 400), Expect::HungUp),
        ("chunk longer than its size line", format!("{head}transfer-encoding: chunked\r\n\r\n3\r\n{body}\r\n0\r\n\r\n{smuggled}"), Expect::Refused(refused)),
        ("chunked under HTTP/1.0", format!("{}transfer-encoding: chunked\r\n\r\n{chunked}{smuggled}", head.replace("HTTP/1.1", "HTTP/1.0")), Expect::Refused(refused)),
        ("bare LF line ends", format!("POST {path} HTTP/1.1\nhost: x\ncontent-length: {n}\n\n{body}"), Expect::Either(path, body.clone())),
    ];
    let mut t = Tally::default();
    for (i, (label, attack, expect)) in cases.iter().enumerate() {
        t.0 += 1;
        let before = g.up.count();
        let (warm, after) = (format!("/warm-{i}"), format!("/after-{i}"));
        let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
        let get = |p: &str| format!("GET {p} HTTP/1.1\r\nhost: x\r\n\r\n");
        sock.write_all(get(&warm).as_bytes()).await.unwrap();
        assert_eq!(
            read_responses(&mut sock, 1, label).await.0,
            [200],
            "{label}: warm-up"
        );
        // A server that refuses early may close while we still write.
        let _ = sock.write_all(attack.as_bytes()).await;
        if matches!(expect, Expect::HungUp) {
            // Long enough for the head to have been forwarded.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = sock.shutdown().await;
        }
        let want = match expect {
            Expect::Forwarded(reqs) => reqs.len(),
            _ => 1,
        };
        let (statuses, open) = read_responses(&mut sock, want, label).await;
        let forwarded = match expect {
            Expect::Refused(allowed) => {
                assert!(
                    statuses.len() == 1 && allowed.contains(&statuses[0]),
                    "{label}: {statuses:?}"
                );
                vec![]
            }
            Expect::Forwarded(reqs) => {
                assert!(statuses.iter().all(|s| *s == 200), "{label}: {statuses:?}");
                assert_eq!(statuses.len(), reqs.len(), "{label}");
                reqs.clone()
            }
            Expect::HungUp => {
                assert!(matches!(statuses[..], [] | [400]), "{label}: {statuses:?}");
                vec![]
            }
            Expect::Either(p, b) => match statuses[..] {
                [200] => vec![(*p, b.clone())],
                [400] => vec![],
                _ => panic!("{label}: {statuses:?}"),
            },
        };
        // Then an ordinary request: on the same connection if it is still
        // open, else on a new one.
        let mut statuses = vec![];
        if open
            && !matches!(expect, Expect::HungUp)
            && sock.write_all(get(&after).as_bytes()).await.is_ok()
        {
            statuses = read_responses(&mut sock, 1, label).await.0;
        }
        if statuses.is_empty() {
            drop(sock);
            let mut fresh = tokio::net::TcpStream::connect(addr).await.unwrap();
            fresh.write_all(get(&after).as_bytes()).await.unwrap();
            statuses = read_responses(&mut fresh, 1, label).await.0;
        }
        assert_eq!(statuses, [200], "{label}: the request after it");
        let calls = g.up.calls();
        let seen: Vec<(String, String)> = calls[before..]
            .iter()
            .map(|c| {
                (
                    c.path.clone(),
                    String::from_utf8_lossy(&c.body).into_owned(),
                )
            })
            .collect();
        let mut meant = vec![(warm.clone(), String::new())];
        meant.extend(forwarded.iter().map(|(p, b)| (p.to_string(), b.clone())));
        meant.push((after.clone(), String::new()));
        assert_eq!(seen, meant, "{label}: what the upstream received");
        for c in &calls[before..] {
            assert!(
                c.headers.get("transfer-encoding").is_none() || c.body.len() == n,
                "{label}"
            );
            assert!(
                c.headers.get_all("content-length").iter().count() <= 1,
                "{label}"
            );
        }
    }
    assert!(g.up.calls().iter().all(|c| !c.path.contains("smuggled")));
    eprintln!("hostile corpus: pass-through smuggling: {} inputs", t.0);
    g.s.shutdown().await;
}
