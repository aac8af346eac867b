//! `[telemetry]`: OpenTelemetry traces, where they are exported and when a
//! trace is started here. Validated when the config loads, each error naming
//! its key. With no `otlp_endpoint` nothing is exported, and the spans that
//! exist only for traces are never enabled.

use serde::Deserialize;

use super::ConfigError;

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies, `POST {endpoint}` (the collector's
    /// port 4318, path `/v1/traces`).
    HttpProtobuf,
    /// OTLP/gRPC (the collector's port 4317).
    Grpc,
}

/// `[telemetry]` as validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracesConfig {
    /// `otlp_endpoint`: the collector; `None` exports nothing.
    pub otlp_endpoint: Option<String>,
    /// `otlp_protocol`: `"http/protobuf"` (default) or `"grpc"`.
    pub protocol: OtlpProtocol,
    /// `service_name`: the `service.name` resource of every span.
    pub service_name: String,
    /// `start_traces`: trace a request that carries no `traceparent` (and
    /// send one upstream with it). Off: only requests whose caller sampled
    /// a trace are traced.
    pub start_traces: bool,
}

impl Default for TracesConfig {
    fn default() -> TracesConfig {
        TracesConfig {
            otlp_endpoint: None,
            protocol: OtlpProtocol::HttpProtobuf,
            service_name: "verdict".into(),
            start_traces: false,
        }
    }
}

/// The `[telemetry]` table as the file gives it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileTelemetry {
    otlp_endpoint: Option<String>,
    otlp_protocol: Option<String>,
    service_name: Option<String>,
    start_traces: Option<bool>,
}

/// Validates `[telemetry]`.
pub(super) fn traces_config(f: FileTelemetry) -> Result<TracesConfig, ConfigError> {
    let invalid = |m: String| ConfigError::Invalid(m);
    let protocol = match f.otlp_protocol.as_deref() {
        None | Some("http/protobuf") => OtlpProtocol::HttpProtobuf,
        Some("grpc") => OtlpProtocol::Grpc,
        Some(other) => {
            return Err(invalid(format!(
                "telemetry.otlp_protocol: {other:?} is not \"http/protobuf\" or \"grpc\""
            )))
        }
    };
    let otlp_endpoint = match f.otlp_endpoint {
        None => {
            if f.otlp_protocol.is_some() {
                return Err(invalid(
                    "telemetry.otlp_protocol: set without telemetry.otlp_endpoint, so nothing would use it".into(),
                ));
            }
            None
        }
        Some(e) => {
            let uri: http::Uri = e.parse().map_err(|_| {
                invalid(format!(
                    "telemetry.otlp_endpoint: must be an http:// or https:// URL, got {e:?}"
                ))
            })?;
            if !matches!(uri.scheme_str(), Some("http" | "https"))
                || uri.host().is_none_or(str::is_empty)
            {
                return Err(invalid(format!(
                    "telemetry.otlp_endpoint: must be an http:// or https:// URL with a host, got {e:?}"
                )));
            }
            if protocol == OtlpProtocol::Grpc && uri.scheme_str() != Some("http") {
                return Err(invalid(format!(
                    "telemetry.otlp_endpoint: gRPC export is plaintext (an http:// collector, usually the node's or pod's agent), got {e:?}; use otlp_protocol = \"http/protobuf\" for https"
                )));
            }
            Some(e)
        }
    };
    let service_name = f.service_name.unwrap_or_else(|| "verdict".into());
    if service_name.trim().is_empty() {
        return Err(invalid("telemetry.service_name: must not be empty".into()));
    }
    Ok(TracesConfig {
        otlp_endpoint,
        protocol,
        service_name,
        start_traces: f.start_traces.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_protocols_and_errors() {
        let c = traces_config(FileTelemetry::default()).unwrap();
        assert_eq!(c, TracesConfig::default());
        let c = traces_config(FileTelemetry {
            otlp_endpoint: Some("http://127.0.0.1:4317".into()),
            otlp_protocol: Some("grpc".into()),
            start_traces: Some(true),
            ..FileTelemetry::default()
        })
        .unwrap();
        assert_eq!(c.protocol, OtlpProtocol::Grpc);
        assert!(c.start_traces);
        let e = traces_config(FileTelemetry {
            otlp_endpoint: Some("collector:4318".into()),
            ..FileTelemetry::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("telemetry.otlp_endpoint"), "{e}");
        let e = traces_config(FileTelemetry {
            otlp_protocol: Some("grpc".into()),
            ..FileTelemetry::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("set without telemetry.otlp_endpoint"), "{e}");
        let e = traces_config(FileTelemetry {
            otlp_endpoint: Some("http://c:4318".into()),
            otlp_protocol: Some("thrift".into()),
            ..FileTelemetry::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("\"thrift\""), "{e}");
        let e = traces_config(FileTelemetry {
            otlp_endpoint: Some("https://c:4317".into()),
            otlp_protocol: Some("grpc".into()),
            ..FileTelemetry::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("gRPC export is plaintext"), "{e}");
    }
}
