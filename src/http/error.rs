//! Errors that reach a client, and their one mapping to HTTP responses.
//!
//! Every handler returns `Result<_, ApiError>`; this module is the only place
//! that turns an error into a status code and the JSON error body
//! `{"error": {"code", "message", "request_id"}}`.
//! Keeping the mapping here means a status code can be audited in one screen,
//! and an internal error can never leak its cause: it is logged once, with the
//! request id, and the client sees a generic message.

use bytes::Bytes;
use http::header::{HeaderValue, ALLOW, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{Method, Response, StatusCode};
use serde::Serialize;

use crate::http::{full, RespBody};

/// An error that ends a request with a 4xx or 5xx answer.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not JSON (or not UTF-8, or nested too deep).
    #[error("{0}")]
    InvalidJson(String),
    /// JSON of the wrong shape: a missing field or a wrong type. The message
    /// names the field path.
    #[error("{0}")]
    BadRequest(String),
    /// Well-formed JSON with values that cannot be accepted.
    #[error("{0}")]
    Unprocessable(String),
    #[error("missing or unknown API key")]
    Unauthorized,
    #[error("this API key lacks the {0:?} scope")]
    Forbidden(&'static str),
    /// The key has the scope but may not do this (four eyes).
    #[error("{0}")]
    Refused(String),
    /// Reviews without a keys file: the gated app shares loopback with the
    /// API and must not approve its own held calls.
    #[error("reviews need a keys file: without one every loopback caller, the gated app included, could approve its own held calls; configure [auth] keys_file with a review-scoped key")]
    ReviewsNeedKeys,
    #[error("{0}")]
    NotFound(String),
    #[error("method not allowed")]
    MethodNotAllowed(Vec<Method>),
    #[error("{0}")]
    IdempotencyConflict(String),
    /// A resource changed state already (a second review resolution).
    #[error("{0}")]
    Conflict(String),
    #[error("request body is larger than the limit of {0} bytes")]
    PayloadTooLarge(usize),
    /// The request body did not arrive in time (408).
    #[error("{0}")]
    RequestTimeout(String),
    #[error("content type must be application/json")]
    UnsupportedMediaType,
    /// A gated call the decision denied (the proxy's 403; its body adds the
    /// decision, the reason and the record).
    #[error("{0}")]
    Denied(String),
    /// The connection cap is reached, batch jobs are shutting down, the
    /// audit log cannot be written, or a gated call cannot be decided.
    #[error("{0}")]
    Unavailable(String),
    /// The proxy's upstream could not be reached (502).
    #[error("the upstream could not be reached: {0}")]
    UpstreamUnavailable(String),
    /// The proxy's upstream did not answer in time (504).
    #[error("the upstream did not answer within {0:?}")]
    UpstreamTimeout(std::time::Duration),
    /// A request head hyper could not parse, answered by hyper itself before
    /// any handler ran (400, 414, 431 or 505); the server's stream wrapper
    /// gives that answer this JSON body (see `server::framing`).
    #[error("{}", malformed_http_message(*.0))]
    MalformedHttp(StatusCode),
    /// A bug or an unexpected failure. The text is logged, never sent.
    #[error("{0}")]
    Internal(String),
}

fn malformed_http_message(status: StatusCode) -> &'static str {
    match status.as_u16() {
        414 => "the request target is too long",
        431 => "the request head is too large or has too many header fields",
        505 => "this HTTP version is not supported",
        _ => "malformed HTTP request: the request line or a header field cannot be parsed",
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    code: &'a str,
    message: &'a str,
    request_id: &'a str,
}

// === impl ApiError ===

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidJson(_) | ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) | ApiError::Refused(_) | ApiError::ReviewsNeedKeys => {
                StatusCode::FORBIDDEN
            }
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::IdempotencyConflict(_) | ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Denied(_) => StatusCode::FORBIDDEN,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::UpstreamUnavailable(_) => StatusCode::BAD_GATEWAY,
            ApiError::UpstreamTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::MalformedHttp(status) => *status,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable machine-readable code (docs/openapi.yaml, `Error`).
    /// Every code an error body can carry, in the order of `docs/api.md`'s
    /// table: what docs and tests enumerate instead of reading this file.
    pub const CODES: [&'static str; 16] = [
        "invalid_json",
        "invalid_request",
        "unauthorized",
        "forbidden",
        "not_found",
        "method_not_allowed",
        "idempotency_conflict",
        "conflict",
        "payload_too_large",
        "request_timeout",
        "unsupported_media_type",
        "unavailable",
        "internal",
        "denied",
        "upstream_unavailable",
        "upstream_timeout",
    ];

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidJson(_) => "invalid_json",
            ApiError::BadRequest(_) | ApiError::Unprocessable(_) => "invalid_request",
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden(_) | ApiError::Refused(_) | ApiError::ReviewsNeedKeys => {
                "forbidden"
            }
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::IdempotencyConflict(_) => "idempotency_conflict",
            ApiError::Conflict(_) => "conflict",
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::RequestTimeout(_) => "request_timeout",
            ApiError::UnsupportedMediaType => "unsupported_media_type",
            ApiError::Denied(_) => "denied",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::UpstreamUnavailable(_) => "upstream_unavailable",
            ApiError::UpstreamTimeout(_) => "upstream_timeout",
            ApiError::MalformedHttp(_) => "invalid_request",
            ApiError::Internal(_) => "internal",
        }
    }

    /// What a client is told: the error's text, except for internal errors,
    /// whose cause is logged here, once, and never sent.
    pub fn public_message(&self, request_id: &str) -> String {
        match self {
            ApiError::Internal(cause) => {
                tracing::error!(request_id, error = %cause, "internal error");
                "internal error".to_string()
            }
            other => other.to_string(),
        }
    }

    /// The JSON error body. Internal errors are logged here,
    /// once.
    pub fn body(&self, request_id: &str) -> Vec<u8> {
        let message = self.public_message(request_id);
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code(),
                message: &message,
                request_id,
            },
        };
        serde_json::to_vec(&body).unwrap_or_else(|_| {
            // Serialising three strings cannot fail; keep a valid body anyway.
            br#"{"error":{"code":"internal","message":"internal error"}}"#.to_vec()
        })
    }

    /// The body as a JSON value, for an answer that adds fields to it (the
    /// proxy's deny body).
    pub fn body_value(&self, request_id: &str) -> serde_json::Value {
        serde_json::from_slice(&self.body(request_id)).unwrap_or_default()
    }

    /// The `error` object without a request id (`{"error": {code,
    /// message}}`), for an error that is one part of a larger answer: a
    /// batch item's result.
    pub fn item_value(&self) -> serde_json::Value {
        let mut v = self.body_value("");
        if let Some(e) = v.get_mut("error").and_then(|e| e.as_object_mut()) {
            e.remove("request_id");
        }
        v
    }

    /// The whole HTTP/1.1 response, as bytes, for the places that answer
    /// below hyper (a connection refused over the cap, a head hyper could
    /// not parse). It closes the connection.
    pub fn raw_http1(&self, request_id: &str) -> Vec<u8> {
        let status = self.status();
        let body = self.body(request_id);
        let mut out = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            body.len()
        );
        if !request_id.is_empty() {
            out.push_str(&format!("x-request-id: {request_id}\r\n"));
        }
        if matches!(self, ApiError::Unavailable(_)) {
            out.push_str("retry-after: 1\r\n");
        }
        out.push_str("\r\n");
        let mut out = out.into_bytes();
        out.extend_from_slice(&body);
        out
    }

    /// The JSON error response. Internal errors are logged here, once.
    pub fn into_response(self, request_id: &str) -> Response<RespBody> {
        let status = self.status();
        let bytes = self.body(request_id);
        let mut resp = Response::new(full(Bytes::from(bytes)));
        *resp.status_mut() = status;
        let headers = resp.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        match &self {
            ApiError::Unauthorized => {
                headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::MethodNotAllowed(methods) => {
                let allow = methods
                    .iter()
                    .map(Method::as_str)
                    .collect::<Vec<_>>()
                    .join(", ");
                if let Ok(v) = HeaderValue::from_str(&allow) {
                    headers.insert(ALLOW, v);
                }
            }
            _ => {}
        }
        resp
    }
}

impl From<serde_path_to_error::Error<serde_json::Error>> for ApiError {
    fn from(e: serde_path_to_error::Error<serde_json::Error>) -> Self {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            ApiError::BadRequest(inner.to_string())
        } else {
            ApiError::BadRequest(format!("{path}: {inner}"))
        }
    }
}

impl From<crate::decide::DecideError> for ApiError {
    fn from(e: crate::decide::DecideError) -> Self {
        use crate::decide::DecideError;
        match e {
            DecideError::Malformed(m) => ApiError::BadRequest(m),
            DecideError::Invalid(m) => ApiError::Unprocessable(m),
            DecideError::Unavailable(m) => ApiError::Unavailable(m),
            DecideError::Internal(m) => ApiError::Internal(m),
        }
    }
}

impl From<crate::review::ReviewError> for ApiError {
    fn from(e: crate::review::ReviewError) -> ApiError {
        use crate::review::ReviewError;
        match e {
            ReviewError::NotFound => ApiError::NotFound(e.to_string()),
            ReviewError::AlreadyResolved(_)
            | ReviewError::Expired
            | ReviewError::AlreadyApprovedBy => ApiError::Conflict(e.to_string()),
            ReviewError::OwnCall => ApiError::Refused(e.to_string()),
            ReviewError::Unavailable(cause) => {
                tracing::warn!(error = %cause, "shared review store unavailable");
                ApiError::Unavailable("the review store is unavailable; retry later".into())
            }
            ReviewError::NotForwarding(_)
            | ReviewError::Corrupt(_)
            | ReviewError::Storage(_)
            | ReviewError::NoRuntime => ApiError::Internal(e.to_string()),
        }
    }
}

impl From<crate::jobs::JobsError> for ApiError {
    fn from(e: crate::jobs::JobsError) -> ApiError {
        use crate::jobs::JobsError;
        match e {
            JobsError::Conflict => ApiError::IdempotencyConflict(
                "this Idempotency-Key was used with a different request body".into(),
            ),
            JobsError::InProgress => ApiError::IdempotencyConflict(
                "a request with this Idempotency-Key is still being stored; retry shortly".into(),
            ),
            JobsError::ShuttingDown => ApiError::Unavailable("batch jobs are shutting down".into()),
            JobsError::Unavailable { message: cause, .. } => {
                // The cause (addresses, driver text) is for the log only.
                tracing::warn!(error = %cause, "shared job store unavailable");
                ApiError::Unavailable("the job store is unavailable; retry later".into())
            }
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<crate::audit::AuditError> for ApiError {
    /// Anything that keeps the log from recording is a 503: the gated action
    /// must not happen. A record the log refuses is our bug, hence a 500.
    fn from(e: crate::audit::AuditError) -> Self {
        match e {
            crate::audit::AuditError::InvalidRecord(m) => {
                ApiError::Internal(format!("audit record rejected: {m}"))
            }
            other => ApiError::Unavailable(format!(
                "the audit log cannot record this decision: {other}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_of_the_design_table() {
        let cases: Vec<(ApiError, u16, &str)> = vec![
            (ApiError::InvalidJson("x".into()), 400, "invalid_json"),
            (ApiError::BadRequest("x".into()), 400, "invalid_request"),
            (ApiError::Unauthorized, 401, "unauthorized"),
            (ApiError::Forbidden("verify"), 403, "forbidden"),
            (ApiError::Denied("x".into()), 403, "denied"),
            (ApiError::ReviewsNeedKeys, 403, "forbidden"),
            (ApiError::NotFound("x".into()), 404, "not_found"),
            (
                ApiError::MethodNotAllowed(vec![Method::POST]),
                405,
                "method_not_allowed",
            ),
            (
                ApiError::IdempotencyConflict("x".into()),
                409,
                "idempotency_conflict",
            ),
            (ApiError::PayloadTooLarge(10), 413, "payload_too_large"),
            (
                ApiError::RequestTimeout("slow".into()),
                408,
                "request_timeout",
            ),
            (
                ApiError::UnsupportedMediaType,
                415,
                "unsupported_media_type",
            ),
            (ApiError::Unprocessable("x".into()), 422, "invalid_request"),
            (ApiError::Unavailable("x".into()), 503, "unavailable"),
            (
                ApiError::UpstreamUnavailable("refused".into()),
                502,
                "upstream_unavailable",
            ),
            (
                ApiError::UpstreamTimeout(std::time::Duration::from_secs(30)),
                504,
                "upstream_timeout",
            ),
            (
                ApiError::MalformedHttp(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE),
                431,
                "invalid_request",
            ),
            (
                ApiError::MalformedHttp(StatusCode::BAD_REQUEST),
                400,
                "invalid_request",
            ),
            (ApiError::Internal("secret cause".into()), 500, "internal"),
            (ApiError::Conflict("x".into()), 409, "conflict"),
            (ApiError::Refused("x".into()), 403, "forbidden"),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (err, status, code) in cases {
            assert_eq!(err.status().as_u16(), status, "{err:?}");
            assert_eq!(err.code(), code, "{err:?}");
            seen.insert(code);
        }
        let listed: std::collections::BTreeSet<_> = ApiError::CODES.into_iter().collect();
        assert_eq!(
            seen, listed,
            "ApiError::CODES is not the codes of the variants"
        );
        assert_eq!(listed.len(), ApiError::CODES.len(), "a code listed twice");
    }

    #[test]
    fn internal_errors_do_not_leak() {
        let resp = ApiError::Internal("db password=hunter2".into()).into_response("r1");
        assert_eq!(resp.status(), 500);
        let body = crate::http::test_body_string(resp);
        assert!(!body.contains("hunter2"), "{body}");
        assert!(body.contains("\"request_id\":\"r1\""), "{body}");
    }

    #[test]
    fn method_not_allowed_lists_allow() {
        let resp = ApiError::MethodNotAllowed(vec![Method::GET, Method::POST]).into_response("r");
        assert_eq!(resp.headers()[ALLOW], "GET, POST");
    }

    #[test]
    fn unauthorized_asks_for_bearer() {
        let resp = ApiError::Unauthorized.into_response("r");
        assert_eq!(resp.headers()[WWW_AUTHENTICATE], "Bearer");
    }

    #[test]
    fn raw_http1_is_a_whole_response_with_the_json_body() {
        let raw = ApiError::MalformedHttp(StatusCode::BAD_REQUEST).raw_http1("rid-1");
        let text = String::from_utf8(raw).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
        assert!(
            head.contains("\r\ncontent-type: application/json"),
            "{head}"
        );
        assert!(head.contains("\r\nconnection: close"), "{head}");
        assert!(head.contains("\r\nx-request-id: rid-1"), "{head}");
        assert!(
            head.contains(&format!("\r\ncontent-length: {}", body.len())),
            "{head}"
        );
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "invalid_request");
        assert_eq!(v["error"]["request_id"], "rid-1");
        let busy = ApiError::Unavailable("too many connections".into()).raw_http1("r");
        let busy = String::from_utf8(busy).unwrap();
        assert!(busy.starts_with("HTTP/1.1 503 Service Unavailable\r\n"));
        assert!(busy.contains("\r\nretry-after: 1\r\n"));
    }
}
