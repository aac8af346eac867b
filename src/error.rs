//! Errors that reach a client, and their one mapping to HTTP responses.
//!
//! Every handler returns `Result<_, ApiError>`; this module is the only place
//! that turns an error into a status code and the JSON error body of DESIGN §3.
//! Keeping the mapping here means a status code can be audited in one screen,
//! and an internal error can never leak its cause: it is logged once, with the
//! request id, and the client sees a generic message.

use bytes::Bytes;
use http::header::{HeaderValue, ALLOW, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{Method, Response, StatusCode};
use serde::Serialize;

use crate::http_util::{full, RespBody};

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
    #[error("content type must be application/json")]
    UnsupportedMediaType,
    /// Draining, overloaded, or the audit log cannot be written.
    #[error("{0}")]
    Unavailable(String),
    /// The proxy's upstream could not be reached (DESIGN: 502).
    #[error("the upstream could not be reached: {0}")]
    UpstreamUnavailable(String),
    /// The proxy's upstream did not answer in time (DESIGN: 504).
    #[error("the upstream did not answer within {0:?}")]
    UpstreamTimeout(std::time::Duration),
    /// A bug or an unexpected failure. The text is logged, never sent.
    #[error("{0}")]
    Internal(String),
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
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::IdempotencyConflict(_) | ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::UpstreamUnavailable(_) => StatusCode::BAD_GATEWAY,
            ApiError::UpstreamTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable machine-readable code of DESIGN §3.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidJson(_) => "invalid_json",
            ApiError::BadRequest(_) | ApiError::Unprocessable(_) => "invalid_request",
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::IdempotencyConflict(_) => "idempotency_conflict",
            ApiError::Conflict(_) => "conflict",
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::UnsupportedMediaType => "unsupported_media_type",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::UpstreamUnavailable(_) => "upstream_unavailable",
            ApiError::UpstreamTimeout(_) => "upstream_timeout",
            ApiError::Internal(_) => "internal",
        }
    }

    /// The JSON error response. Internal errors are logged here, once.
    pub fn into_response(self, request_id: &str) -> Response<RespBody> {
        let status = self.status();
        let message = match &self {
            ApiError::Internal(cause) => {
                tracing::error!(request_id, error = %cause, "internal error");
                "internal error".to_string()
            }
            other => other.to_string(),
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code(),
                message: &message,
                request_id,
            },
        };
        let bytes = serde_json::to_vec(&body).unwrap_or_else(|_| {
            // Serialising three strings cannot fail; keep a valid body anyway.
            br#"{"error":{"code":"internal","message":"internal error"}}"#.to_vec()
        });
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
            (ApiError::Internal("secret cause".into()), 500, "internal"),
        ];
        for (err, status, code) in cases {
            assert_eq!(err.status().as_u16(), status, "{err:?}");
            assert_eq!(err.code(), code, "{err:?}");
        }
    }

    #[test]
    fn internal_errors_do_not_leak() {
        let resp = ApiError::Internal("db password=hunter2".into()).into_response("r1");
        assert_eq!(resp.status(), 500);
        let body = crate::http_util::test_body_string(resp);
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
}
