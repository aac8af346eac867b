//! Extractors: where a route finds each action param, the claims, the sources
//! and the answer in an HTTP request.
//!
//! Extractor strings are parsed and checked once at load (header names,
//! JSON-pointer syntax, path parameters that exist in the pattern), so
//! extraction on the request path cannot fail: a value that is not there is
//! simply absent, and the rules and the engine decide what absence means.

use http::HeaderMap;
use serde_json::{Map, Value};

use super::route::{percent_decode, PathParams, Route};

/// Where one value comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Extractor {
    /// `path:NAME`, a `{NAME}` segment of the route pattern.
    Path(String),
    /// `query:NAME`, the first `NAME=` in the query string, percent-decoded.
    Query(String),
    /// `header:NAME`, stored lowercase; the first value if repeated.
    Header(String),
    /// `body:/json/pointer`, an RFC 6901 pointer into the JSON body.
    Body(String),
    /// `literal:TEXT` or any non-string TOML value: a constant.
    Literal(Value),
}

/// The parts of a request that extractors read.
#[derive(Debug, Clone, Copy)]
pub struct RequestParts<'a> {
    pub path_params: &'a PathParams,
    /// The raw query string, without the `?`.
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
    /// The parsed JSON body; `None` when there is none.
    pub body: Option<&'a Value>,
}

/// What a route extracted from one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extracted {
    /// Action params; a param whose value is missing is left out.
    pub params: Map<String, Value>,
    pub claims: Option<Value>,
    pub sources: Option<Value>,
    pub answer: Option<Value>,
}

const EXPECTED: &str =
    "expected path:NAME, query:NAME, header:NAME, body:/POINTER or literal:VALUE";

// === impl Extractor ===

impl Extractor {
    /// Parses an extractor from its TOML value. `has_path_param` says whether
    /// the route pattern has a given `{name}`.
    pub(super) fn parse(
        value: &toml::Value,
        has_path_param: impl Fn(&str) -> bool,
    ) -> Result<Extractor, String> {
        let text = match value {
            toml::Value::String(s) => s,
            other => return Ok(Extractor::Literal(toml_to_json(other))),
        };
        let Some((kind, arg)) = text.split_once(':') else {
            return Err(format!("invalid extractor {text:?}: {EXPECTED}"));
        };
        let needs_name = |kind: &str| {
            if arg.is_empty() {
                Err(format!("invalid extractor {text:?}: {kind}: needs a name"))
            } else {
                Ok(arg.to_string())
            }
        };
        match kind {
            "path" => {
                let name = needs_name(kind)?;
                if has_path_param(&name) {
                    Ok(Extractor::Path(name))
                } else {
                    Err(format!(
                        "invalid extractor {text:?}: the route path has no {{{name}}} segment"
                    ))
                }
            }
            "query" => Ok(Extractor::Query(needs_name(kind)?)),
            "header" => {
                let name = needs_name(kind)?;
                http::HeaderName::from_bytes(name.as_bytes())
                    .map(|h| Extractor::Header(h.as_str().to_string()))
                    .map_err(|_| format!("invalid extractor {text:?}: bad header name"))
            }
            "body" => {
                validate_pointer(arg).map_err(|e| format!("invalid extractor {text:?}: {e}"))?;
                Ok(Extractor::Body(arg.to_string()))
            }
            "literal" => Ok(Extractor::Literal(Value::String(arg.to_string()))),
            _ => Err(format!("invalid extractor {text:?}: {EXPECTED}")),
        }
    }

    /// The value this extractor finds in `req`, if any.
    pub fn extract(&self, req: &RequestParts<'_>) -> Option<Value> {
        match self {
            Extractor::Path(name) => req
                .path_params
                .get(name)
                .map(|v| Value::String(v.to_string())),
            Extractor::Query(name) => req
                .query
                .and_then(|q| query_param(q, name))
                .map(Value::String),
            Extractor::Header(name) => req
                .headers
                .get(name.as_str())
                .map(|v| Value::String(String::from_utf8_lossy(v.as_bytes()).into_owned())),
            Extractor::Body(pointer) => req.body.and_then(|b| b.pointer(pointer)).cloned(),
            Extractor::Literal(v) => Some(v.clone()),
        }
    }
}

// === impl Route (extraction) ===

impl Route {
    /// Extracts the params, claims, sources and answer for one request.
    pub fn extract(&self, req: &RequestParts<'_>) -> Extracted {
        let mut params = Map::new();
        for (name, ex) in &self.params {
            if let Some(v) = ex.extract(req) {
                params.insert(name.clone(), v);
            }
        }
        Extracted {
            params,
            claims: self.claims.as_ref().and_then(|e| e.extract(req)),
            sources: self.sources.as_ref().and_then(|e| e.extract(req)),
            answer: self.answer.as_ref().and_then(|e| e.extract(req)),
        }
    }
}

/// Checks RFC 6901 syntax: empty, or `/`-separated tokens where `~` is only
/// ever followed by `0` or `1`.
fn validate_pointer(p: &str) -> Result<(), String> {
    if !p.is_empty() && !p.starts_with('/') {
        return Err("a JSON pointer must be empty or start with \"/\"".into());
    }
    let mut chars = p.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err("\"~\" in a JSON pointer must be followed by 0 or 1".into());
        }
    }
    Ok(())
}

/// The first value of `name` in a raw query string, both sides
/// percent-decoded (`+` is a space).
fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k, true) == name).then(|| percent_decode(v, true))
    })
}

/// TOML literals become JSON; datetimes become their RFC 3339 text. The
/// policies' literal extractors and the test files' case bodies
/// (`offline::file`) read TOML the same way.
pub fn toml_to_json(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => {
            serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
        }
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.clone(), toml_to_json(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(s: &str) -> Result<Extractor, String> {
        Extractor::parse(&toml::Value::String(s.into()), |n| n == "order_id")
    }

    #[test]
    fn parse_extractors() {
        assert_eq!(
            parse("path:order_id"),
            Ok(Extractor::Path("order_id".into()))
        );
        assert_eq!(parse("query:page"), Ok(Extractor::Query("page".into())));
        assert_eq!(
            parse("header:X-Customer-ID"),
            Ok(Extractor::Header("x-customer-id".into()))
        );
        assert_eq!(
            parse("body:/a/~0b/~1c"),
            Ok(Extractor::Body("/a/~0b/~1c".into()))
        );
        assert_eq!(parse("body:"), Ok(Extractor::Body(String::new())));
        assert_eq!(parse("literal:web"), Ok(Extractor::Literal(json!("web"))));
        assert_eq!(
            Extractor::parse(&toml::Value::Integer(3), |_| false),
            Ok(Extractor::Literal(json!(3)))
        );
        for (input, want) in [
            ("path:nope", "invalid extractor \"path:nope\": the route path has no {nope} segment"),
            ("query:", "invalid extractor \"query:\": query: needs a name"),
            ("header:x y", "invalid extractor \"header:x y\": bad header name"),
            ("body:a/b", "invalid extractor \"body:a/b\": a JSON pointer must be empty or start with \"/\""),
            ("body:/a~2", "invalid extractor \"body:/a~2\": \"~\" in a JSON pointer must be followed by 0 or 1"),
            ("body:/a~", "invalid extractor \"body:/a~\": \"~\" in a JSON pointer must be followed by 0 or 1"),
            ("cookie:x", "invalid extractor \"cookie:x\": expected path:NAME, query:NAME, header:NAME, body:/POINTER or literal:VALUE"),
            ("web", "invalid extractor \"web\": expected path:NAME, query:NAME, header:NAME, body:/POINTER or literal:VALUE"),
        ] {
            assert_eq!(parse(input).unwrap_err(), want, "{input}");
        }
    }

    #[test]
    fn extract_values() {
        let pp = PathParams::new(vec![("order_id".into(), "A 1/2".into())]);
        let mut headers = HeaderMap::new();
        headers.insert("X-Customer-Id", "c-42".parse().unwrap());
        let body = json!({"amount": 12.5, "a/b": {"m~n": 1}, "n": null});
        let req = RequestParts {
            path_params: &pp,
            query: Some("page=2&q=caf%C3%A9+au+lait&page=3&flag"),
            headers: &headers,
            body: Some(&body),
        };
        let cases: Vec<(Extractor, Option<Value>)> = vec![
            (Extractor::Path("order_id".into()), Some(json!("A 1/2"))),
            (Extractor::Path("other".into()), None),
            (Extractor::Query("page".into()), Some(json!("2"))),
            (Extractor::Query("q".into()), Some(json!("café au lait"))),
            (Extractor::Query("flag".into()), Some(json!(""))),
            (Extractor::Query("nope".into()), None),
            (
                Extractor::Header("x-customer-id".into()),
                Some(json!("c-42")),
            ),
            (Extractor::Header("x-missing".into()), None),
            (Extractor::Body("/amount".into()), Some(json!(12.5))),
            (Extractor::Body("/a~1b/m~0n".into()), Some(json!(1))),
            (Extractor::Body("/n".into()), Some(Value::Null)),
            (Extractor::Body("/missing/deep".into()), None),
            (Extractor::Body(String::new()), Some(body.clone())),
            (Extractor::Literal(json!(true)), Some(json!(true))),
        ];
        for (ex, want) in cases {
            assert_eq!(ex.extract(&req), want, "{ex:?}");
        }
        let no_body = RequestParts {
            query: None,
            body: None,
            ..req
        };
        assert_eq!(Extractor::Body("/amount".into()).extract(&no_body), None);
        assert_eq!(Extractor::Query("page".into()).extract(&no_body), None);
    }
}
