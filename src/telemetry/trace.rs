//! OpenTelemetry traces: a decision followed across services. A request's
//! W3C `traceparent` (and `tracestate`) makes verdict's spans children of
//! the caller's; the spans (the request, the decision, the engine, the audit
//! commit, the forward) go to the collector at `[telemetry] otlp_endpoint`
//! over OTLP. With no endpoint none of this is installed: [`adopt`] and
//! [`traceparent`] return at once, and the extra spans (target
//! [`TARGET`]) are never enabled.
//!
//! Only spans are exported, never log events. Sampling follows the caller: a
//! sampled `traceparent` is traced, an unsampled one is not; a request with
//! none is traced only with `start_traces`, and then the forwarded call
//! carries a `traceparent` naming verdict's forward span.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::config::{OtlpProtocol, TracesConfig};

/// The target of the spans that exist only for traces (decide, engine,
/// audit commit, forward): log lines leave them out.
pub const TARGET: &str = "verdict_trace";

/// How long one export to the collector may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Set once the exporter is installed.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The installed exporter; [`Exporter::shutdown`] sends what is queued.
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// Flushes the spans still queued and stops exporting. Blocks (call it
    /// off the runtime's worker threads).
    pub fn shutdown(self) {
        ENABLED.store(false, Ordering::Relaxed);
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "traces not all exported at shutdown");
        }
    }
}

/// The tracer provider for `cfg`, or `None` when no endpoint is set. Must
/// be called inside a Tokio runtime: the exporter runs on it.
pub(super) fn provider(cfg: &TracesConfig) -> Result<Option<SdkTracerProvider>, String> {
    let Some(endpoint) = &cfg.otlp_endpoint else {
        return Ok(None);
    };
    let exporter = match cfg.protocol {
        OtlpProtocol::HttpProtobuf => {
            let tls = crate::config::client_tls(None, "an https otlp_endpoint cannot be verified")?;
            let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
            http.enforce_http(false);
            let connector = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls)
                .https_or_http()
                .enable_http1()
                .wrap_connector(http);
            let client =
                opentelemetry_http::hyper::HyperClient::new(connector, EXPORT_TIMEOUT, None);
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(client)
                .with_endpoint(endpoint.clone())
                .with_timeout(EXPORT_TIMEOUT)
                .build()
        }
        OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build(),
    }
    .map_err(|e| format!("telemetry.otlp_endpoint: {e}"))?;
    let processor =
        BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
    let sampler = if cfg.start_traces {
        Sampler::ParentBased(Box::new(Sampler::AlwaysOn))
    } else {
        Sampler::ParentBased(Box::new(Sampler::AlwaysOff))
    };
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(cfg.service_name.clone())
        .build();
    Ok(Some(
        SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(sampler)
            .with_resource(resource)
            .build(),
    ))
}

/// The layer that turns verdict's spans (not its events) into OTel spans.
pub(super) fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    let tracer = provider.tracer("verdict");
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.is_span() && m.target().starts_with("verdict")
        }))
}

/// Marks the exporter installed and wraps its provider.
pub(super) fn installed(provider: SdkTracerProvider) -> Exporter {
    ENABLED.store(true, Ordering::Relaxed);
    Exporter { provider }
}

/// Makes `span` a child of the trace that `headers` carry
/// (`traceparent`, `tracestate`), if any.
pub fn adopt(span: &tracing::Span, headers: &http::HeaderMap) {
    if !enabled() || !headers.contains_key("traceparent") {
        return;
    }
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    let _ = span.set_parent(cx);
}

/// The `traceparent` (and `tracestate`) naming `span`, for a forwarded call
/// that carried none, when `span` is sampled.
pub fn traceparent(span: &tracing::Span) -> Vec<(&'static str, String)> {
    if !enabled() {
        return Vec::new();
    }
    let cx = span.context();
    if !cx.span().span_context().is_sampled() {
        return Vec::new();
    }
    let mut headers = http::HeaderMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(&mut headers));
    ["traceparent", "tracestate"]
        .into_iter()
        .filter_map(|name| {
            let v = headers.get(name)?.to_str().ok()?;
            (!v.is_empty()).then(|| (name, v.to_string()))
        })
        .collect()
}
