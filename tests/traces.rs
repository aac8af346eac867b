//! OpenTelemetry traces from the real binary: one gated call through the
//! proxy, with the client's `traceparent`, yields spans of that trace at an
//! in-test OTLP/HTTP receiver (the request, the decision, the engine, the
//! audit commit, the forward, each with its parent), and the upstream
//! receives the trace id unchanged. Without a `traceparent`, `start_traces`
//! starts a trace and sends its `traceparent` upstream.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use http_body_util::Full;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;

/// One exported span, as the receiver decoded it.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: HashMap<String, String>,
    service: String,
}

/// An OTLP/HTTP receiver: `POST /v1/traces` with a protobuf body.
async fn collector() -> (SocketAddr, Arc<Mutex<Vec<Span>>>) {
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
    let kept = spans.clone();
    let (addr, _task) = support::serve_http(move |parts, body: Bytes| {
        let kept = kept.clone();
        async move {
            assert_eq!(parts.uri.path(), "/v1/traces");
            keep(&kept, ExportTraceServiceRequest::decode(body).unwrap());
            http::Response::new(Full::new(Bytes::new()).boxed())
        }
    })
    .await;
    (addr, spans)
}

/// Keeps the spans of one export.
fn keep(spans: &Mutex<Vec<Span>>, req: ExportTraceServiceRequest) {
    let mut out = spans.lock().unwrap();
    for rs in req.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .find(|a| a.key == "service.name")
            .map(|a| text(a.value.as_ref()))
            .unwrap_or_default();
        for sp in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
            out.push(Span {
                name: sp.name,
                trace_id: hex::encode(&sp.trace_id),
                span_id: hex::encode(&sp.span_id),
                parent: hex::encode(&sp.parent_span_id),
                attributes: sp
                    .attributes
                    .iter()
                    .map(|a| (a.key.clone(), text(a.value.as_ref())))
                    .collect(),
                service: service.clone(),
            });
        }
    }
}

fn text(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

use http_body_util::BodyExt as _;

/// An OTLP/gRPC receiver: the trace service of the collector protocol.
async fn grpc_collector() -> (SocketAddr, Arc<Mutex<Vec<Span>>>) {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
    struct Keep(Arc<Mutex<Vec<Span>>>);
    #[tonic::async_trait]
    impl TraceService for Keep {
        async fn export(
            &self,
            req: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            keep(&self.0, req.into_inner());
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        }
    }
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
    let svc = TraceServiceServer::new(Keep(spans.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let svc = hyper_util::service::TowerToHyperService::new(svc.clone());
            tokio::spawn(async move {
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .http2_only()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
            });
        }
    });
    (addr, spans)
}

/// Starts the binary with a gated refund route, the upstream and the
/// collector (`endpoint`, `protocol`); returns it and its proxy address.
fn start(
    dir: &std::path::Path,
    upstream: &str,
    (endpoint, protocol): (&str, &str),
    start_traces: bool,
) -> (std::process::Child, String) {
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::write(
        dir.join("policies/refunds.toml"),
        support::RefundPolicy::new("strict").build(),
    )
    .unwrap();
    let config = dir.join("verdict.toml");
    std::fs::write(
        &config,
        format!(
            "[telemetry]\notlp_endpoint = \"{endpoint}\"\notlp_protocol = \"{protocol}\"\nservice_name = \"verdict-test\"\nstart_traces = {start_traces}\n"
        ),
    )
    .unwrap();
    let (child, _api, log) = support::spawn_binary_with(
        env!("CARGO_BIN_EXE_verdict"),
        dir,
        "info",
        &[
            "--config",
            config.to_str().unwrap(),
            "--proxy-listen",
            "127.0.0.1:0",
            "--upstream",
            upstream,
        ],
        // Batches leave every 200 ms instead of every 5 s.
        &[("OTEL_BSP_SCHEDULE_DELAY", std::path::Path::new("200"))],
    );
    let proxy = support::logged_addr(&log, "proxy listening");
    (child, format!("http://{proxy}"))
}

fn refund_body() -> String {
    format!(
        "{{\"amount\": 100, \"claims\": [{}], \"evidence\": [{{\"source_id\":\"inv\",\"text\":{}}}]}}",
        serde_json::to_string(support::PAID_100).unwrap(),
        serde_json::to_string(support::INVOICE_77_BLENDER).unwrap()
    )
}

/// Waits until the collector holds the spans of `trace_id` named `names`.
async fn spans_of(spans: &Mutex<Vec<Span>>, trace_id: &str, names: &[&str]) -> Vec<Span> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got: Vec<Span> = spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect();
        if names.iter().all(|n| got.iter().any(|s| s.name == *n)) {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "spans of {trace_id}: {got:#?}; all: {:#?}",
            spans.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_gated_call_is_one_trace_from_the_client_to_the_upstream() {
    let up = support::MockUpstream::start().await;
    let (collector, spans) = collector().await;
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("http://{collector}/v1/traces");
    let (mut child, proxy) = start(dir.path(), &up.url(), (&endpoint, "http/protobuf"), false);

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let traceparent = format!("00-{trace_id}-{client_span}-01");
    let r = support::call(
        &proxy,
        Method::POST,
        "/api/orders/77/refunds",
        &[
            ("content-type", "application/json"),
            ("traceparent", &traceparent),
            ("tracestate", "vendor=abc"),
        ],
        refund_body(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // The caller's context goes upstream unchanged.
    let call = up.calls().pop().unwrap();
    assert_eq!(call.headers["traceparent"], traceparent.as_str());
    assert_eq!(call.headers["tracestate"], "vendor=abc");

    let got = spans_of(
        &spans,
        trace_id,
        &["proxy", "decide", "engine", "audit.commit", "forward"],
    )
    .await;
    let by_name = |n: &str| got.iter().find(|s| s.name == n).unwrap();
    let (proxy_span, decide) = (by_name("proxy"), by_name("decide"));
    assert_eq!(proxy_span.parent, client_span, "{got:#?}");
    assert_eq!(decide.parent, proxy_span.span_id, "{got:#?}");
    assert_eq!(by_name("engine").parent, decide.span_id);
    assert_eq!(by_name("audit.commit").parent, decide.span_id);
    assert_eq!(by_name("forward").parent, proxy_span.span_id);
    assert_eq!(decide.attributes["decision"], "allow", "{decide:?}");
    assert_eq!(decide.attributes["reason"], "coverage_sufficient");
    assert_eq!(decide.attributes["action"], "refund.create");
    assert_eq!(
        decide.attributes["record_id"],
        r.header("x-verdict-record-id").unwrap()
    );
    assert_eq!(
        proxy_span.attributes["request_id"],
        r.header("x-request-id").unwrap()
    );
    assert_eq!(proxy_span.service, "verdict-test");

    // An unsampled caller is not traced; one with no context is not
    // either, since start_traces is off.
    let before = spans.lock().unwrap().len();
    let unsampled = format!("00-{}-{client_span}-00", "1".repeat(32));
    for headers in [vec![("traceparent", unsampled.as_str())], vec![]] {
        let mut h = vec![("content-type", "application/json")];
        h.extend(headers);
        let r = support::call(
            &proxy,
            Method::POST,
            "/api/orders/77/refunds",
            &h,
            refund_body(),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(spans.lock().unwrap().len(), before);
    assert!(up
        .calls()
        .last()
        .unwrap()
        .headers
        .get("traceparent")
        .is_none());
    let _ = child.kill();
    let _ = child.wait();
}

/// Over gRPC this time.
#[tokio::test]
async fn start_traces_starts_one_and_sends_it_upstream() {
    let up = support::MockUpstream::start().await;
    let (collector, spans) = grpc_collector().await;
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("http://{collector}");
    let (mut child, proxy) = start(dir.path(), &up.url(), (&endpoint, "grpc"), true);
    let r = support::call(
        &proxy,
        Method::POST,
        "/api/orders/77/refunds",
        &[("content-type", "application/json")],
        refund_body(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let call = up.calls().pop().unwrap();
    let sent = call.headers["traceparent"].to_str().unwrap().to_string();
    let parts: Vec<&str> = sent.split('-').collect();
    assert_eq!(parts.len(), 4, "{sent}");
    assert_eq!(parts[3], "01", "{sent}");
    let got = spans_of(&spans, parts[1], &["proxy", "forward"]).await;
    let forward = got.iter().find(|s| s.name == "forward").unwrap();
    assert_eq!(
        forward.span_id, parts[2],
        "the upstream's parent is the forward span"
    );
    let root = got.iter().find(|s| s.name == "proxy").unwrap();
    assert_eq!(root.parent, "", "{root:?}");
    let _ = child.kill();
    let _ = child.wait();
}
