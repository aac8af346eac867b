//! The HTTP vocabulary every door shares: the response body type, JSON
//! responses, bounded body reading, request ids and the request hash here;
//! the one error type and its mapping to status codes in [`error`]; API keys
//! and scopes in [`auth`].
//!
//! It lives apart from the API and the proxy so that both (and the listeners,
//! the webhook, the witness and `verdict reviews`) read bodies, hash
//! requests, name requests and answer errors in exactly one way.

pub mod auth;
pub mod error;

use std::convert::Infallible;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, Response, StatusCode};
use http_body::Body;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::http::error::ApiError;

/// Errors a response body may fail with (an upstream body, for the proxy).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every response verdict sends: buffered JSON from the API, or a
/// streamed upstream body from the proxy.
pub type RespBody = UnsyncBoxBody<Bytes, BoxError>;

/// The `X-Request-ID` header name.
pub const REQUEST_ID: &str = "x-request-id";

/// An error and its causes, `: `-joined: a client error's top-level
/// message alone is often just "client error (Connect)". At most 8 causes,
/// so a cyclic chain still ends.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    for _ in 0..8 {
        let Some(s) = source else { break };
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// A buffered body.
pub fn full(bytes: impl Into<Bytes>) -> RespBody {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

/// A `200` (or other status) JSON response from any serialisable value.
pub fn json_response<T: Serialize>(
    status: StatusCode,
    value: &T,
) -> Result<Response<RespBody>, ApiError> {
    let bytes = serde_json::to_vec(value)
        .map_err(|e| ApiError::Internal(format!("serialise response: {e}")))?;
    Ok(bytes_response(status, "application/json", bytes))
}

/// A response with the given content type and body.
pub fn bytes_response(
    status: StatusCode,
    content_type: &'static str,
    bytes: impl Into<Bytes>,
) -> Response<RespBody> {
    let mut resp = Response::new(full(bytes));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// More query parameters than any endpoint reads, by far.
const MAX_QUERY_PARAMS: usize = 64;

/// A query string as `(name, value)` pairs, percent-decoded (`+` stays a
/// `+`, so an RFC 3339 offset survives), in order. A bad escape, bytes
/// that are not UTF-8, or a parameter given twice is a 400 naming it: which
/// of two values counts is something two readers of the same URL can
/// disagree on, and silently taking the last would let
/// `since=1h&since=200000h` read as either.
pub fn query_params(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    fn decode(part: &str, name: &str) -> Result<String, ApiError> {
        let b = part.as_bytes();
        let escapes_ok = b
            .iter()
            .enumerate()
            .filter(|(_, c)| **c == b'%')
            .all(|(i, _)| {
                b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                    && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
            });
        let decoded = percent_encoding::percent_decode_str(part).decode_utf8();
        match decoded {
            Ok(text) if escapes_ok => Ok(text.into_owned()),
            _ => Err(ApiError::BadRequest(format!(
                "{name}: bad percent-encoding"
            ))),
        }
    }
    let mut out: Vec<(String, String)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        if out.len() == MAX_QUERY_PARAMS {
            return Err(ApiError::BadRequest(format!(
                "more than {MAX_QUERY_PARAMS} query parameters"
            )));
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = decode(k, k)?;
        let v = decode(v, &k)?;
        if !seen.insert(k.clone()) {
            return Err(ApiError::BadRequest(format!(
                "{k}: the query parameter is repeated; give it once"
            )));
        }
        out.push((k, v));
    }
    Ok(out)
}

/// The caller's `X-Request-ID` when it is sane (1–128 visible ASCII
/// characters), else a fresh UUID v4.
pub fn request_id(headers: &HeaderMap) -> String {
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|s| is_sane_request_id(s))
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

/// Echoes `request_id` on a response (a sane one is always a valid value).
pub fn stamp_request_id<B>(resp: &mut Response<B>, request_id: &str) {
    if let Ok(v) = HeaderValue::from_str(request_id) {
        resp.headers_mut().insert(REQUEST_ID, v);
    }
}

/// A latency as log lines show it: milliseconds, to the microsecond.
pub fn latency_ms(elapsed: std::time::Duration) -> f64 {
    (elapsed.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

fn is_sane_request_id(s: &str) -> bool {
    (1..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic())
}

/// Refuses anything but `application/json` (parameters such as a charset
/// are allowed).
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let ok = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|m| m.trim().eq_ignore_ascii_case("application/json"))
        .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType)
    }
}

/// A request body that did not arrive in time (`server.body_read_timeout`
/// and `server.body_min_rate`; see `server::pace`): answered 408.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time ({received} bytes in {after:?}; see server.body_read_timeout and server.body_min_rate)")]
pub struct BodyTooSlow {
    pub after: std::time::Duration,
    pub received: u64,
}

/// Reads a whole body, refusing it as soon as it is known to exceed `limit`:
/// from `Content-Length` before reading, or while reading a chunked body.
pub async fn read_body<B>(headers: &HeaderMap, body: B, limit: usize) -> Result<Bytes, ApiError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if let Some(len) = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > limit as u64 {
            return Err(ApiError::PayloadTooLarge(limit));
        }
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            Err(ApiError::PayloadTooLarge(limit))
        }
        Err(e) => Err(body_error(e.as_ref())),
    }
}

/// What a request body that failed while it was read is answered with:
/// 408 when it came too slowly ([`BodyTooSlow`]), else 400.
pub fn body_error(e: &(dyn std::error::Error + 'static)) -> ApiError {
    match e.downcast_ref::<BodyTooSlow>() {
        Some(slow) => ApiError::RequestTimeout(slow.to_string()),
        None => ApiError::BadRequest(format!("could not read the request body: {e}")),
    }
}

/// A parsed JSON body with its canonical hash.
pub struct JsonBody {
    pub value: serde_json::Value,
    /// `sha256:<hex>` of the RFC 8785 canonical form of `value`.
    pub hash: String,
}

/// Parses a body as JSON and computes its request hash. Invalid UTF-8, lone
/// surrogate escapes and nesting deeper than 128 levels are `invalid_json`.
pub fn parse_json(bytes: &[u8]) -> Result<JsonBody, ApiError> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::InvalidJson(format!("body is not valid JSON: {e}")))?;
    let hash = canonical_hash(&value)?;
    Ok(JsonBody { value, hash })
}

/// `sha256:<hex>` of the RFC 8785 canonical form of a JSON value.
pub fn canonical_hash(value: &serde_json::Value) -> Result<String, ApiError> {
    Ok(format!(
        "sha256:{}",
        hex::encode(Sha256::digest(canonical_json(value)?))
    ))
}

/// The RFC 8785 canonical form of a JSON value: the bytes
/// [`canonical_hash`] hashes.
pub fn canonical_json(value: &serde_json::Value) -> Result<Vec<u8>, ApiError> {
    let mut canonical = Vec::with_capacity(1024);
    crate::audit::canonical::value(&mut canonical, value)
        .map_err(|e| ApiError::Unprocessable(format!("body cannot be canonicalised: {e}")))?;
    Ok(canonical)
}

/// Deserialises a typed request from a parsed body; errors name the field path.
pub fn typed<T: serde::de::DeserializeOwned>(value: &serde_json::Value) -> Result<T, ApiError> {
    Ok(serde_path_to_error::deserialize(value)?)
}

#[cfg(test)]
pub fn test_body_string(resp: Response<RespBody>) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("test runtime");
    let bytes = rt
        .block_on(resp.into_body().collect())
        .expect("buffered body")
        .to_bytes();
    String::from_utf8(bytes.to_vec()).expect("utf-8 body")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_params_decode_and_refuse_repeats() {
        let q = query_params(Some("a=1&b=x%20y+z&&c")).unwrap();
        assert_eq!(
            q,
            [
                ("a".to_string(), "1".to_string()),
                ("b".to_string(), "x y+z".to_string()),
                ("c".to_string(), String::new()),
            ]
        );
        assert_eq!(query_params(None).unwrap(), []);
        for bad in ["a=%ZZ", "a=%4", "a=%FF", "%ZZ=1"] {
            assert!(query_params(Some(bad)).is_err(), "{bad}");
        }
        for repeated in ["since=1h&since=200000h", "first=1&first=2&second=3", "a&a"] {
            let e = query_params(Some(repeated)).unwrap_err();
            assert!(matches!(e, ApiError::BadRequest(_)), "{repeated}");
        }
    }

    #[test]
    fn request_ids_are_echoed_only_when_sane() {
        let mut h = HeaderMap::new();
        h.insert(REQUEST_ID, HeaderValue::from_static("abc-123"));
        assert_eq!(request_id(&h), "abc-123");
        h.insert(REQUEST_ID, HeaderValue::from_static("has space"));
        assert_ne!(request_id(&h), "has space");
        let long = "a".repeat(129);
        h.insert(REQUEST_ID, HeaderValue::from_str(&long).unwrap());
        assert_eq!(request_id(&h).len(), 36);
        h.remove(REQUEST_ID);
        assert!(uuid::Uuid::parse_str(&request_id(&h)).is_ok());
    }

    #[test]
    fn content_type_json_only() {
        let mut h = HeaderMap::new();
        assert!(require_json(&h).is_err());
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/json; charset=utf-8"),
        );
        assert!(require_json(&h).is_ok());
        h.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(require_json(&h).is_err());
    }

    /// RFC 8785 §3.2.2/3.2.3 examples: key order, number forms and string
    /// escapes are canonicalised.
    #[test]
    fn canonical_hash_matches_rfc8785_examples() {
        let a = parse_json(br#"{"b": 2, "a": 1}"#).unwrap();
        let b = parse_json(b"{\"a\":1,\n \"b\":2}").unwrap();
        assert_eq!(a.hash, b.hash);
        let canon = |s: &str| {
            let v: serde_json::Value = serde_json::from_str(s).unwrap();
            let mut out = Vec::new();
            crate::audit::canonical::value(&mut out, &v).unwrap();
            String::from_utf8(out).unwrap()
        };
        // RFC 8785 §3.2.2 (numbers) and §3.2.3 (sorting by UTF-16 code units).
        assert_eq!(
            canon(
                r#"{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001]}"#
            ),
            r#"{"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27]}"#
        );
        assert_eq!(
            canon(r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}"#),
            "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
        );
        assert_eq!(
            canon(
                r#"{"literals":[null,true,false],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/"}"#
            ),
            r#"{"literals":[null,true,false],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    #[test]
    fn bad_json_is_invalid_json() {
        for body in [
            &b"{not json"[..],
            &b"{\"a\":\"\xff\xfe\"}"[..],
            &b"{\"a\":\"\\ud800\"}"[..],
        ] {
            match parse_json(body) {
                Err(ApiError::InvalidJson(_)) => {}
                other => panic!("{:?}", other.map(|b| b.hash)),
            }
        }
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(
            parse_json(deep.as_bytes()),
            Err(ApiError::InvalidJson(_))
        ));
    }
}
