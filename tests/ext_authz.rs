//! Envoy's external authorization against the proxy: the same requests,
//! sent through verdict's proxy and through `Check`, decide the same and
//! leave the same audit records (but for `source`).
//!
//! `Check` is called with a real gRPC client built from the same protos
//! (envoy-types). Where a test needs a whole hop, a small Envoy stand-in
//! does what Envoy's `ext_authz` filter does with `with_request_body` and
//! `pack_as_bytes`: it sends each request's method, target, headers (the
//! lowercase map, repeats joined by `,`, plus the pseudo-headers) and
//! buffered body to `Check`, then forwards with the headers the answer sets
//! and removes, or answers with the denied status, headers and body.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use envoy_types::ext_authz::v3::pb::{CheckRequest, CheckResponse, HttpResponse};
use envoy_types::pb::envoy::config::core::v3::{
    address, socket_address, Address, HeaderValueOption, SocketAddress,
};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::{attribute_context, AttributeContext};
use http::Method;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use support::{Gated, DAMAGED, REVIEW_KEY};
use tonic::transport::Channel;

/// The refund route of tests/proxy.rs: held above 500 (for 1 s), denied
/// without a customer header or on the fax channel.
fn policy() -> String {
    crate::proxy::policy("1s")
}

/// The proxy and ext_authz on one server, with `policies`.
async fn env_with(
    policies: &[(&str, &str)],
    edit: impl FnOnce(&mut verdict::config::Config),
) -> Gated {
    Gated::start(policies, |c| {
        c.ext_authz_listen = Some("127.0.0.1:0".parse().unwrap());
        c.proxy.response_timeout = Duration::from_secs(1);
        edit(c);
    })
    .await
}

async fn env() -> Gated {
    env_with(&[("refunds.toml", &policy())], |_| {}).await
}

async fn client(e: &Gated) -> AuthorizationClient<Channel> {
    AuthorizationClient::connect(format!("http://{}", e.s.ext_authz_addr()))
        .await
        .unwrap()
}

use crate::proxy::refund_body;

const JSON: (&str, &str) = ("content-type", "application/json");
const REFUND: &str = "/api/orders/77/refunds";

/// The `CheckRequest` Envoy sends for a request from `peer` with
/// `encode_raw_headers` and `pack_as_bytes`: the headers in order
/// (lowercase, pseudo-headers first) and the body as bytes.
fn check_request(
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    peer: SocketAddr,
) -> CheckRequest {
    let mut req = check_request_map(method, target, headers, body, peer);
    // `encode_raw_headers: true`: every header in order, repeats apart.
    let http = req
        .attributes
        .as_mut()
        .and_then(|a| a.request.as_mut())
        .and_then(|r| r.http.as_mut())
        .unwrap();
    http.headers.clear();
    let pseudo = [
        (":method", method),
        (":path", target),
        (":authority", http.host.as_str()),
    ];
    let raw = pseudo
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .chain(
            headers
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), (*v).to_string())),
        )
        .map(
            |(key, value)| envoy_types::pb::envoy::config::core::v3::HeaderValue {
                key,
                raw_value: value.into_bytes(),
                ..Default::default()
            },
        )
        .collect();
    http.header_map = Some(envoy_types::pb::envoy::config::core::v3::HeaderMap { headers: raw });
    req
}

/// [`check_request`] for a POST to the refund route from one client.
fn refund_check(headers: &[(&str, &str)], body: &[u8]) -> CheckRequest {
    check_request(
        "POST",
        REFUND,
        headers,
        body,
        "127.0.0.1:40000".parse().unwrap(),
    )
}

/// [`check_request`] as Envoy sends it without `encode_raw_headers`.
fn check_request_map(
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    peer: SocketAddr,
) -> CheckRequest {
    let mut map: HashMap<String, String> = HashMap::new();
    let mut host = String::new();
    for (k, v) in headers {
        let k = k.to_ascii_lowercase();
        if k == "host" {
            host = (*v).to_string();
        }
        map.entry(k)
            .and_modify(|e| {
                e.push(',');
                e.push_str(v);
            })
            .or_insert_with(|| (*v).to_string());
    }
    map.insert(":method".into(), method.into());
    map.insert(":path".into(), target.into());
    map.insert(":authority".into(), host.clone());
    let address = |a: SocketAddr| attribute_context::Peer {
        address: Some(Address {
            address: Some(address::Address::SocketAddress(SocketAddress {
                address: a.ip().to_string(),
                port_specifier: Some(socket_address::PortSpecifier::PortValue(u32::from(
                    a.port(),
                ))),
                ..SocketAddress::default()
            })),
        }),
        ..attribute_context::Peer::default()
    };
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(address(peer)),
            destination: Some(address("127.0.0.1:10000".parse().unwrap())),
            request: Some(attribute_context::Request {
                http: Some(attribute_context::HttpRequest {
                    id: map.get("x-request-id").cloned().unwrap_or_default(),
                    method: method.into(),
                    headers: map,
                    path: target.into(),
                    host,
                    scheme: "http".into(),
                    size: i64::try_from(body.len()).unwrap(),
                    protocol: "HTTP/1.1".into(),
                    raw_body: body.to_vec(),
                    ..attribute_context::HttpRequest::default()
                }),
                ..attribute_context::Request::default()
            }),
            ..AttributeContext::default()
        }),
    }
}

/// What a `CheckResponse` says, flattened: the status Envoy would answer
/// (200 for OK), the headers it carries or sets, the headers to remove,
/// and the body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: HashMap<String, String>,
    remove: Vec<String>,
    /// Added to the upstream's answer (`response_headers_to_add`).
    respond: HashMap<String, String>,
    body: String,
}

impl Answer {
    fn of(r: &CheckResponse) -> Answer {
        let headers = |h: &[HeaderValueOption]| {
            h.iter()
                .filter_map(|o| o.header.as_ref())
                .map(|h| (h.key.clone(), h.value.clone()))
                .collect::<HashMap<_, _>>()
        };
        let code = r.status.as_ref().map_or(0, |s| s.code);
        match &r.http_response {
            Some(HttpResponse::OkResponse(ok)) => {
                assert_eq!(code, 0, "an OkResponse comes with an OK status");
                Answer {
                    status: 200,
                    headers: headers(&ok.headers),
                    remove: ok.headers_to_remove.clone(),
                    respond: headers(&ok.response_headers_to_add),
                    body: String::new(),
                }
            }
            Some(HttpResponse::DeniedResponse(d)) => {
                assert_ne!(
                    code, 0,
                    "a DeniedResponse comes with a status that is not OK"
                );
                Answer {
                    status: u16::try_from(d.status.as_ref().unwrap().code).unwrap(),
                    headers: headers(&d.headers),
                    remove: vec![],
                    respond: HashMap::new(),
                    body: d.body.clone(),
                }
            }
            other => panic!("no http_response: {other:?}"),
        }
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

async fn check(c: &mut AuthorizationClient<Channel>, req: CheckRequest) -> Answer {
    let r = support::within(Duration::from_secs(10), "Check", c.check(req))
        .await
        .unwrap();
    Answer::of(&r.into_inner())
}

/// An Envoy stand-in in front of `upstream`, asking verdict's ext_authz at
/// `authz` with the raw headers (`encode_raw_headers`) or the map; returns
/// its base URL. Forwarded calls carry `x-via: envoy`.
async fn envoy(authz: SocketAddr, upstream: SocketAddr, raw: bool) -> String {
    let c = AuthorizationClient::connect(format!("http://{authz}"))
        .await
        .unwrap();
    let (addr, _task) = support::serve_http(move |parts: http::request::Parts, body: Bytes| {
        let mut c = c.clone();
        async move {
            let target = parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string();
            let mut sent: Vec<(String, String)> = Vec::new();
            for (k, v) in &parts.headers {
                sent.push((
                    k.as_str().into(),
                    String::from_utf8_lossy(v.as_bytes()).into(),
                ));
            }
            let pairs: Vec<(&str, &str)> =
                sent.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let encode = if raw {
                check_request
            } else {
                check_request_map
            };
            let req = encode(
                parts.method.as_str(),
                &target,
                &pairs,
                &body,
                "127.0.0.1:50000".parse().unwrap(),
            );
            let a = check(&mut c, req).await;
            if a.status != 200 {
                let mut r = http::Response::new(Full::new(Bytes::from(a.body.clone())).boxed());
                *r.status_mut() = http::StatusCode::from_u16(a.status).unwrap();
                for (k, v) in &a.headers {
                    r.headers_mut().insert(
                        http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                        http::HeaderValue::from_str(v).unwrap(),
                    );
                }
                return r;
            }
            // Forwarded as Envoy does: hop-by-hop dropped, the answer's
            // headers set and removed.
            let mut headers = parts.headers.clone();
            for h in [
                "connection",
                "transfer-encoding",
                "keep-alive",
                "content-length",
            ] {
                headers.remove(h);
            }
            for k in &a.remove {
                headers.remove(k.as_str());
            }
            for (k, v) in &a.headers {
                headers.insert(
                    http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    http::HeaderValue::from_str(v).unwrap(),
                );
            }
            headers.insert("x-via", http::HeaderValue::from_static("envoy"));
            let mut b = http::Request::builder()
                .method(parts.method.clone())
                .uri(format!("http://{upstream}{target}"));
            *b.headers_mut().unwrap() = headers;
            let resp = support::client()
                .request(b.body(Full::new(body)).unwrap())
                .await
                .unwrap();
            let r = support::Resp::read(resp).await;
            let mut out = http::Response::new(Full::new(r.body.clone()).boxed());
            *out.status_mut() = http::StatusCode::from_u16(r.status).unwrap();
            *out.headers_mut() = r.headers.clone();
            for (k, v) in &a.respond {
                out.headers_mut().insert(
                    http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    http::HeaderValue::from_str(v).unwrap(),
                );
            }
            out
        }
    })
    .await;
    format!("http://{addr}")
}

/// One request of the parity table: (name, method, target, headers, body).
type Case = (
    &'static str,
    Method,
    &'static str,
    Vec<(&'static str, &'static str)>,
    String,
);

fn parity_cases() -> Vec<Case> {
    let customer = ("x-customer-id", "C-9");
    let fax = refund_body(100, DAMAGED).replacen('{', r#"{"meta":{"a/b":"fax"},"#, 1);
    vec![
        (
            "allowed, with a spoofed decision header",
            Method::POST,
            REFUND,
            vec![JSON, customer, ("x-verdict-decision", "allow")],
            refund_body(100, DAMAGED),
        ),
        (
            "denied: unsupported claim",
            Method::POST,
            REFUND,
            vec![JSON, customer],
            refund_body(100, "The customer was charged $400 for the blender."),
        ),
        (
            "denied: no customer header",
            Method::POST,
            REFUND,
            vec![JSON],
            refund_body(100, DAMAGED),
        ),
        (
            "denied: fax channel through an escaped pointer",
            Method::POST,
            REFUND,
            vec![JSON, ("X-CUSTOMER-ID", "C-9")],
            fax,
        ),
        (
            "not JSON",
            Method::POST,
            REFUND,
            vec![JSON],
            "not json".into(),
        ),
        (
            "ambiguous path",
            Method::POST,
            "/api/orders/77/refunds;x=1",
            vec![JSON, customer],
            refund_body(100, DAMAGED),
        ),
        (
            "method override on the gated path",
            Method::POST,
            "/api/orders/77/refunds?_method=PUT",
            vec![JSON, customer],
            refund_body(100, DAMAGED),
        ),
        (
            "media type",
            Method::POST,
            REFUND,
            vec![("content-type", "text/plain"), customer],
            refund_body(100, DAMAGED),
        ),
        (
            "unmatched GET",
            Method::GET,
            "/free?x=1",
            vec![],
            String::new(),
        ),
        (
            "unmatched POST with a body",
            Method::POST,
            "/api/orders/77/notes",
            vec![JSON],
            r#"{"note":"hi"}"#.into(),
        ),
        (
            "a JSON _method to the gated path under another method",
            Method::PUT,
            REFUND,
            vec![JSON],
            r#"{"_method":"POST"}"#.into(),
        ),
    ]
}

/// Every case of the table decides the same through the proxy and through
/// `Check` (status, decision, reason); what is let through reaches the
/// upstream with the same decision headers and none of the client's own;
/// every decision through `Check` is on record with `source = "ext_authz"`.
#[tokio::test]
async fn the_proxy_cases_decide_the_same_through_check() {
    let e = env().await;
    let shims = [
        envoy(e.s.ext_authz_addr(), e.up.addr, true).await,
        envoy(e.s.ext_authz_addr(), e.up.addr, false).await,
    ];
    let mut differences = Vec::new();
    let cases = parity_cases();
    for ((name, method, target, headers, body), shim) in cases
        .iter()
        .flat_map(|c| shims.iter().map(move |s| (c.clone(), s)))
    {
        let before = e.up.count();
        let p = support::call(&e.proxy, method.clone(), target, &headers, body.clone()).await;
        let proxied = e.up.calls()[before..].to_vec();
        let before = e.up.count();
        let x = support::call(shim, method.clone(), target, &headers, body.clone()).await;
        let checked = e.up.calls()[before..].to_vec();
        let seen = |r: &support::Resp| {
            (
                r.status,
                r.header("x-verdict-decision").map(str::to_string),
                r.json().get("reason").cloned(),
            )
        };
        if seen(&p) != seen(&x) || proxied.len() != checked.len() {
            differences.push(format!(
                "{name}: proxy {:?} forwarded {}, ext_authz {:?} forwarded {}: {}",
                seen(&p),
                proxied.len(),
                seen(&x),
                checked.len(),
                x.text()
            ));
            continue;
        }
        for c in &checked {
            assert_eq!(c.headers["x-via"], "envoy");
            assert_eq!(c.body, Bytes::from(body.clone()), "{name}");
            // A client's own x-verdict-* never reaches the upstream.
            let decision = c.headers.get("x-verdict-decision");
            let record = c.headers.get("x-verdict-record-id");
            if let Some(record) = record {
                assert_eq!(decision.unwrap(), "allow", "{name}");
                let rec =
                    e.s.get(
                        &format!("/v2/audit/{}", record.to_str().unwrap()),
                        Some(REVIEW_KEY),
                    )
                    .await
                    .json();
                assert_eq!(
                    (rec["decision"].as_str(), rec["source"].as_str()),
                    (Some("allow"), Some("ext_authz")),
                    "{name}: {rec}"
                );
            } else {
                assert!(decision.is_none(), "{name}: {:?}", c.headers);
            }
        }
        // A decided answer names its record; through Check it says where
        // it came from.
        if let Some(id) = x.header("x-verdict-record-id") {
            let rec =
                e.s.get(&format!("/v2/audit/{id}"), Some(REVIEW_KEY))
                    .await
                    .json();
            assert_eq!(rec["source"], "ext_authz", "{name}: {rec}");
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    let metrics = e.s.get("/metrics", None).await.text();
    for series in [
        r#"verdict_ext_authz_checks_total{route="create-refund",decision="allow"} 2"#,
        r#"verdict_ext_authz_checks_total{route="unmatched",decision="pass"} 4"#,
    ] {
        assert!(
            metrics.lines().any(|l| l == series),
            "{series} in {metrics}"
        );
    }
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with(r#"verdict_decisions_total{source="ext_authz",decision="deny""#)),
        "{metrics}"
    );
    e.s.shutdown().await;
}

/// The acceptance case: a `refund.create` over the shipped policy's limit,
/// through `Check` and through the proxy with the same request id, host and
/// client address, is denied with the same reason, and the two records
/// differ in nothing but their id, time and `source`.
#[tokio::test]
async fn a_refund_over_the_limit_is_denied_and_recorded_as_through_the_proxy() {
    let e = env_with(&[("refunds.toml", &support::shipped_refunds())], |_| {}).await;
    let body = json!({"amount": 6000, "currency": "USD",
        "justification": {
            "claims": [{"text": "Order 1 was charged $6,000.00.", "citations": [{"source_id": "inv"}]}],
            "evidence": [{"source_id": "inv", "text": "Invoice INV-1 for order 1: amount charged $6,000.00."}]}})
    .to_string();
    let headers = [
        ("host", "shop.example"),
        JSON,
        ("x-request-id", "req-over-the-limit"),
        ("content-length", "0"),
    ];
    let length = body.len().to_string();
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|&(k, v)| {
            if k == "content-length" {
                (k, length.as_str())
            } else {
                (k, v)
            }
        })
        .collect();
    let p = support::call(
        &e.proxy,
        Method::POST,
        "/api/orders/1/refunds",
        &headers,
        body.clone(),
    )
    .await;
    assert_eq!(p.status, 403, "{}", p.text());
    let mut c = client(&e).await;
    let x = check(
        &mut c,
        check_request(
            "POST",
            "/api/orders/1/refunds",
            &headers,
            body.as_bytes(),
            "127.0.0.1:40000".parse().unwrap(),
        ),
    )
    .await;
    assert_eq!(x.status, 403, "{x:?}");
    assert_eq!(x.json()["reason"], p.json()["reason"]);
    assert_eq!(x.json()["reason"], "policy_violation");
    assert_eq!(x.json()["rules"], p.json()["rules"]);
    assert_eq!(x.header("content-type"), Some("application/json"));
    assert_eq!(x.header("x-request-id"), Some("req-over-the-limit"));
    let record = |id: String| {
        let s = &e.s;
        async move {
            s.get(&format!("/v2/audit/{id}"), Some(REVIEW_KEY))
                .await
                .json()
        }
    };
    let mut through_proxy = record(p.json()["record_id"].as_str().unwrap().to_string()).await;
    let mut through_check = record(x.json()["record_id"].as_str().unwrap().to_string()).await;
    assert_eq!(through_check["source"], "ext_authz");
    assert!(through_proxy.get("source").is_none(), "{through_proxy}");
    assert_eq!(through_check["request_hash"], through_proxy["request_hash"]);
    for r in [&mut through_proxy, &mut through_check] {
        let o = r.as_object_mut().unwrap();
        for k in [
            "record_id",
            "at",
            "source",
            "index",
            "leaf_hash",
            "record_hash",
            "prev_hash",
        ] {
            o.remove(k);
        }
    }
    assert_eq!(through_check, through_proxy);
    assert_eq!(e.up.count(), 0);
    e.s.shutdown().await;
}

/// needs_review cannot be held in Envoy: `Check` answers 202 with the review
/// and the caller's result link at once; the review can be approved, and
/// the approval forwards nothing (its result says so).
#[tokio::test]
async fn needs_review_answers_202_with_a_review_that_forwards_nothing() {
    let e = env().await;
    let mut c = client(&e).await;
    let body = refund_body(900, DAMAGED);
    let headers = [JSON, ("x-customer-id", "C-9"), ("host", "shop.example")];
    let req = || refund_check(&headers, body.as_bytes());
    let started = std::time::Instant::now();
    let x = check(&mut c, req()).await;
    // Not held for the route's hold timeout (1 s).
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(x.status, 202, "{x:?}");
    assert_eq!(x.header("x-verdict-decision"), Some("needs_review"));
    let j = x.json();
    let id = j["review_id"].as_str().unwrap().to_string();
    let result_url = j["result_url"].as_str().unwrap().to_string();
    // The same call again joins the pending review.
    let again = check(&mut c, req()).await;
    assert_eq!(again.json()["review_id"], id.as_str());
    let r = e.s.get(&result_url, None).await;
    assert_eq!(
        (r.status, r.json()["status"].as_str()),
        (200, Some("pending")),
        "{}",
        r.text()
    );
    let r =
        e.s.resolve(&id, "approve", "ops@example.com", Some(REVIEW_KEY))
            .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = e.s.get(&result_url, None).await;
    let j = r.json();
    assert_eq!(j["status"], "approved", "{j}");
    assert_eq!(j["forward"]["state"], "none", "{j}");
    // Nothing went anywhere, then or since.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(e.up.count(), 0);
    e.s.shutdown().await;
}

/// A body Envoy did not send whole is not decided on; a `CheckRequest`
/// that describes no request is a 400 with the API's error body.
#[tokio::test]
async fn partial_bodies_and_malformed_checks_are_refused() {
    let e = env().await;
    let mut c = client(&e).await;
    let body = refund_body(100, DAMAGED);
    let peer = "127.0.0.1:40000".parse().unwrap();
    // Part of the body, flagged by Envoy.
    let headers = [
        JSON,
        ("x-customer-id", "C-9"),
        ("x-envoy-auth-partial-body", "true"),
    ];
    let x = check(&mut c, refund_check(&headers, &body.as_bytes()[..40])).await;
    assert_eq!(x.status, 400, "{x:?}");
    // Fewer bytes than the request's length (no `with_request_body`).
    let length = body.len().to_string();
    let headers = [
        JSON,
        ("x-customer-id", "C-9"),
        ("content-length", length.as_str()),
    ];
    let x = check(&mut c, refund_check(&headers, b"")).await;
    assert_eq!(x.status, 400, "{x:?}");
    // The whole body decides.
    let x = check(&mut c, refund_check(&headers, body.as_bytes())).await;
    assert_eq!(x.status, 200, "{x:?}");
    assert_eq!(x.header("x-verdict-decision"), Some("allow"));
    // A chunked body has no length to compare; `size` (Envoy's bytes
    // received so far) is not one.
    let mut req = refund_check(&[JSON, ("x-customer-id", "C-9")], body.as_bytes());
    if let Some(http) = req
        .attributes
        .as_mut()
        .and_then(|a| a.request.as_mut())
        .and_then(|r| r.http.as_mut())
    {
        http.size = 7;
    }
    let x = check(&mut c, req).await;
    assert_eq!(x.header("x-verdict-decision"), Some("allow"), "{x:?}");
    // No attributes at all; a target that is not one.
    let r = support::within(
        Duration::from_secs(10),
        "Check",
        c.check(CheckRequest::default()),
    )
    .await
    .unwrap()
    .into_inner();
    assert_eq!(r.status.as_ref().unwrap().code, 3, "{r:?}");
    let x = Answer::of(&r);
    assert_eq!(x.status, 400);
    assert_eq!(x.json()["error"]["code"], "invalid_request", "{x:?}");
    let x = check(
        &mut c,
        check_request("POST", "not a target", &[], b"", peer),
    )
    .await;
    assert_eq!(x.status, 400, "{x:?}");
    e.s.shutdown().await;
}

/// The gate fails closed through `Check` as through the proxy, and a
/// fail-open route is let through marked `unavailable`.
#[tokio::test]
async fn the_gate_fails_closed_or_open_as_the_route_says() {
    let e = env().await;
    let mut c = client(&e).await;
    let peer = "127.0.0.1:40000".parse().unwrap();
    let body = refund_body(100, DAMAGED);
    let headers = [JSON, ("x-customer-id", "C-9")];
    e.s.app().audit.inject_write_failure(true);
    let x = check(&mut c, refund_check(&headers, body.as_bytes())).await;
    assert_eq!(x.status, 503, "{x:?}");
    assert_eq!(x.json()["error"]["code"], "unavailable");
    // Unmatched traffic is not gated.
    let x = check(&mut c, check_request("GET", "/free", &[], b"", peer)).await;
    assert_eq!(x.status, 200);
    e.s.app().audit.inject_write_failure(false);
    e.s.shutdown().await;

    let open = policy().replace(
        "on_review = \"hold\"",
        "on_review = \"hold\"\nfailure_mode = \"open\"",
    );
    let e = env_with(&[("refunds.toml", &open)], |_| {}).await;
    let mut c = client(&e).await;
    e.s.app().audit.inject_write_failure(true);
    let x = check(&mut c, refund_check(&headers, body.as_bytes())).await;
    assert_eq!(x.status, 200, "{x:?}");
    assert_eq!(x.header("x-verdict-decision"), Some("unavailable"));
    e.s.app().audit.inject_write_failure(false);
    e.s.shutdown().await;
}

/// The listener has a connection cap of its own (`[server]
/// max_connections`): a connection past it is closed at once, and a slot
/// is free again when a connection ends.
#[tokio::test]
async fn connections_past_the_cap_are_closed() {
    let e = env_with(&[("refunds.toml", &policy())], |c| {
        c.server.max_connections = 2;
        c.server.max_connections_per_ip = 2;
    })
    .await;
    let peer = "127.0.0.1:40000".parse().unwrap();
    let free = || check_request("GET", "/free", &[], b"", peer);
    let url = format!("http://{}", e.s.ext_authz_addr());
    let third = || async {
        let mut c = AuthorizationClient::connect(url.clone())
            .await
            .map_err(|e| e.to_string())?;
        c.check(free()).await.map_err(|e| e.to_string())
    };
    let mut a = client(&e).await;
    let mut b = client(&e).await;
    assert_eq!(check(&mut a, free()).await.status, 200);
    assert_eq!(check(&mut b, free()).await.status, 200);
    let refused = support::within(Duration::from_secs(10), "a third connection", third()).await;
    assert!(refused.is_err(), "a third connection was served");
    assert_eq!(check(&mut b, free()).await.status, 200);
    drop(a);
    let mut served = false;
    for _ in 0..50 {
        if support::within(Duration::from_secs(10), "a new connection", third())
            .await
            .is_ok()
        {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "a closed connection's slot never came back");
    e.s.shutdown().await;
}

/// A connection with no call in flight for `server.idle_timeout` is closed
/// (HTTP/2 has no idle timer of its own), and its slot is free again; a
/// connection that keeps calling stays open.
#[tokio::test]
async fn idle_connections_are_closed_and_free_their_slot() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let e = env_with(&[("refunds.toml", &policy())], |c| {
        c.server.max_connections = 1;
        c.server.max_connections_per_ip = 1;
        c.server.idle_timeout = Duration::from_millis(400);
    })
    .await;
    // The client preface and an empty SETTINGS frame, then nothing.
    let mut raw = tokio::net::TcpStream::connect(e.s.ext_authz_addr())
        .await
        .unwrap();
    raw.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    // The server's SETTINGS: the connection was admitted and holds the slot.
    let mut frame = [0u8; 9];
    support::within(
        Duration::from_secs(5),
        "the server's SETTINGS",
        raw.read_exact(&mut frame),
    )
    .await
    .unwrap();
    assert_eq!(frame[3], 4, "a SETTINGS frame first: {frame:?}");
    let started = std::time::Instant::now();
    let mut rest = Vec::new();
    // EOF or a reset: either way the server closed it.
    let _ = support::within(
        Duration::from_secs(5),
        "the idle close",
        raw.read_to_end(&mut rest),
    )
    .await;
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300), "closed after {took:?}");

    let peer = "127.0.0.1:40000".parse().unwrap();
    let free = || check_request("GET", "/free", &[], b"", peer);
    let url = format!("http://{}", e.s.ext_authz_addr());
    let mut client = None;
    for _ in 0..50 {
        if let Ok(mut c) = AuthorizationClient::connect(url.clone()).await {
            if c.check(free()).await.is_ok() {
                client = Some(c);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut c = client.expect("the idle connection's slot never came back");
    // Calls 100 ms apart, each shorter than the idle timeout apart: the
    // connection (the only slot) stays open for all of them.
    for i in 0..8 {
        let r = support::within(Duration::from_secs(5), "a check", c.check(free())).await;
        assert!(r.is_ok(), "call {i} failed: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    e.s.shutdown().await;
}

/// Sends `bytes` on a fresh connection and returns the first answer's
/// status, its `x-verdict-decision` and whether it is verdict's (a JSON
/// error body or an `x-verdict-*` header; the Envoy stand-in's own parser
/// refusals are bare).
async fn exchange(addr: SocketAddr, bytes: &[u8]) -> (u16, Option<String>, bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = sock.write_all(bytes).await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), sock.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let head = text.split("\r\n\r\n").next().unwrap_or("");
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let header = |name: &str| {
        head.lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
    };
    let verdicts = header("x-verdict-decision").is_some() || text.contains("\"error\":{");
    (status, header("x-verdict-decision"), verdicts)
}

/// The gate corpus of tests/differential.rs (path, number, media type,
/// duplicate key, method override, framing and spoofing spellings) through
/// the Envoy stand-in and `Check`, beside the proxy: every request Envoy
/// hands to `Check` is answered as the proxy answers it, and nothing reaches
/// the upstream through `Check` undecided that the proxy would not also
/// pass through undecided (an unmatched route).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_corpus_through_check_forwards_nothing_undecided() {
    let e = env_with(
        &[
            ("refunds.toml", &support::shipped_refunds()),
            ("orders.toml", support::DELETE_POLICY),
        ],
        |_| {},
    )
    .await;
    let shim = envoy(e.s.ext_authz_addr(), e.up.addr, true).await;
    let shim: SocketAddr = shim.trim_start_matches("http://").parse().unwrap();
    let corpus = crate::differential::corpus::build();
    let (mut differ, mut refused_in_front) = (Vec::new(), 0);
    for entry in &corpus {
        let p = exchange(e.proxy_addr(), &entry.bytes).await;
        // Envoy refuses a request with both lengths (`allow_chunked_length`
        // is off by default); the stand-in's parser takes the chunked one.
        let first = String::from_utf8_lossy(&entry.bytes).to_ascii_lowercase();
        let first = first.split("\r\n\r\n").next().unwrap_or("").to_string();
        if first.contains("\ntransfer-encoding") && first.contains("\ncontent-length") {
            refused_in_front += 1;
            continue;
        }
        let x = exchange(shim, &entry.bytes).await;
        if !x.2 && x.0 >= 400 {
            // The stand-in's HTTP parser refused it: Envoy's job, not Check's.
            refused_in_front += 1;
            continue;
        }
        if (p.0, &p.1) != (x.0, &x.1) {
            differ.push(format!(
                "{} ({}): proxy {p:?}, ext_authz {x:?}",
                entry.id, entry.summary
            ));
        }
    }
    let calls = e.up.calls();
    let id = |c: &support::Call| {
        c.headers
            .get("x-corpus-id")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    let passed_by_proxy: std::collections::HashSet<String> = calls
        .iter()
        .filter(|c| {
            c.headers.get("x-via").is_none() && c.headers.get("x-verdict-decision").is_none()
        })
        .map(id)
        .collect();
    let mut undecided = Vec::new();
    for c in calls.iter().filter(|c| c.headers.get("x-via").is_some()) {
        match c.headers.get("x-verdict-record-id") {
            Some(record) => {
                let rec =
                    e.s.get(
                        &format!("/v2/audit/{}", record.to_str().unwrap()),
                        Some(REVIEW_KEY),
                    )
                    .await
                    .json();
                assert_eq!(
                    (rec["decision"].as_str(), rec["source"].as_str()),
                    (Some("allow"), Some("ext_authz")),
                    "{}: {rec}",
                    id(c)
                );
                assert_eq!(c.headers["x-verdict-decision"], "allow");
            }
            None if passed_by_proxy.contains(&id(c)) => {}
            None => undecided.push(format!("{} {} {}", id(c), c.method, c.path)),
        }
    }
    assert!(
        undecided.is_empty(),
        "forwarded undecided through Check:\n{}",
        undecided.join("\n")
    );
    assert!(
        differ.is_empty(),
        "{} of {} entries answered otherwise ({refused_in_front} refused in front):\n{}",
        differ.len(),
        corpus.len(),
        differ.join("\n")
    );
    assert!(corpus.len() >= 150, "{}", corpus.len());
    eprintln!(
        "gate corpus through Check: {} entries, {refused_in_front} refused by the stand-in's parser, {} forwarded through Check",
        corpus.len(),
        calls.iter().filter(|c| c.headers.get("x-via").is_some()).count()
    );
    e.s.shutdown().await;
}
