//! Prometheus metrics for the HTTP faces of the sidecar.
//!
//! One `prometheus-client` registry is built at start-up. Each subsystem
//! registers its own metrics into it before the server starts, after which the
//! registry is read-only and shared; `/metrics` encodes it. Labels use route
//! templates (`/v2/jobs/{id}`), never raw paths, so that a scan of random URLs
//! cannot blow up the number of series.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub endpoint: String,
    pub method: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: String,
}

/// Request count and latency by endpoint and status.
#[derive(Clone, Debug)]
pub struct HttpMetrics {
    requests: Family<RequestLabels, Counter>,
    latency: Family<EndpointLabels, Histogram>,
}

/// Latency buckets from 50 µs to about 1.6 s.
pub fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

impl HttpMetrics {
    pub fn register(registry: &mut Registry) -> HttpMetrics {
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<EndpointLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "verdict_http_requests",
            "API requests by endpoint, method and status",
            requests.clone(),
        );
        registry.register(
            "verdict_http_request_duration_seconds",
            "API request latency by endpoint",
            latency.clone(),
        );
        HttpMetrics { requests, latency }
    }

    pub fn observe(&self, endpoint: &str, method: &str, status: u16, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                endpoint: endpoint.to_string(),
                method: method.to_string(),
                status,
            })
            .inc();
        self.latency
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.to_string(),
            })
            .observe(elapsed.as_secs_f64());
    }
}

/// The registry in Prometheus text format.
pub fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

/// Asserts that the registry encodes each of `lines`, naming the first one
/// missing: one check for the metric tests of every subsystem.
#[cfg(test)]
pub fn assert_encodes(registry: &Registry, lines: &[&str]) {
    let text = encode(registry).expect("the registry encodes");
    for line in lines {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observed_requests_are_encoded() {
        let mut reg = Registry::default();
        let m = HttpMetrics::register(&mut reg);
        m.observe("/v2/verify", "POST", 200, Duration::from_millis(3));
        m.observe("/v2/verify", "POST", 200, Duration::from_millis(4));
        assert_encodes(
            &reg,
            &[
                r#"verdict_http_requests_total{endpoint="/v2/verify",method="POST",status="200"} 2"#,
                r#"verdict_http_request_duration_seconds_count{endpoint="/v2/verify"} 2"#,
            ],
        );
    }
}
