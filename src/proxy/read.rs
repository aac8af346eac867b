//! How the proxy reads a request before anything is decided: the refusals
//! before routing, the route a request reaches, and the decision's input
//! from what the route's extractors find.
//!
//! These are pure functions of the request's method, target, headers and
//! body (and the policy set and proxy config): no IO, no audit record.
//! `Proxy::route` and `Proxy::gated` call them on a live request and then
//! record, forward, block or hold; `verdict test` and `verdict explain`
//! (`src/offline`) call them on a test case's request, so that a case
//! decides exactly what the proxy would, refusals included, without a
//! second copy of the extraction rules.

use http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::guard;
use crate::config::{MethodOverride, ProxyConfig};
use crate::decide::input::{from_json, Claims, SourceIn};
use crate::decide::{DecideError, Input};
use crate::engine::decide::DecisionReason;
use crate::policy::{Extracted, PathParams, PolicySet, RequestParts, Route, RouteMatch};

/// A refusal before any decision: which route it concerns (when it could
/// reach one), and what the caller is told.
#[derive(Debug, Clone)]
pub struct RefuseWith<'a> {
    pub route: Option<&'a Route>,
    pub reason: DecisionReason,
    pub status: StatusCode,
    pub message: String,
}

/// Where a request goes, read from its method, target and headers.
#[derive(Debug, Clone)]
pub enum Routed<'a> {
    /// Refused before routing: the path, an override header or a form body
    /// could reach a gated route another way.
    Refused(RefuseWith<'a>),
    /// A gated route, read strictly, and the `{name}` segments it captured.
    Gated {
        route: &'a Route,
        path_params: PathParams,
    },
    /// No route gates it. `gated_elsewhere`: the route another method gates
    /// on this path, when a body may follow: the proxy reads that body
    /// before it forwards, whatever its media type, to refuse a `_method`
    /// in it (see [`unmatched_body_refusal`]).
    Unmatched { gated_elsewhere: Option<&'a Route> },
}

/// The route a request reaches, or why it is refused before one is picked.
/// `raw_path` is the request target's path as sent, `query` its query;
/// `body_follows` is false only when the request has no body at all.
pub fn route<'a>(
    set: &'a PolicySet,
    cfg: &ProxyConfig,
    method: &str,
    raw_path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body_follows: bool,
) -> Routed<'a> {
    let opted_out = cfg
        .raw_path_prefixes
        .iter()
        .any(|p| raw_path.starts_with(p.as_str()));
    if !opted_out {
        if let Some(why) = guard::path_problem(raw_path) {
            return Routed::Refused(RefuseWith {
                route: set.reach_any_method(raw_path),
                reason: DecisionReason::AmbiguousPath,
                status: StatusCode::BAD_REQUEST,
                message: format!("the request path holds {why}"),
            });
        }
    }
    if let Some(other) = guard::path_override(headers) {
        let other_path = other.split(['?', '#']).next().unwrap_or("").to_string();
        let route = set
            .reach_any_method(raw_path)
            .or_else(|| set.reach_any_method(&other_path));
        return Routed::Refused(RefuseWith {
            route,
            reason: DecisionReason::AmbiguousPath,
            status: StatusCode::BAD_REQUEST,
            message: "the request names another path in X-Original-URL or X-Rewrite-URL, which some servers route by".into(),
        });
    }
    let mut method = method.to_string();
    match guard::override_method(headers, query) {
        Ok(None) => {}
        Ok(Some(m))
            if cfg.method_override == MethodOverride::Route
                && http::Method::from_bytes(m.as_bytes()).is_ok() =>
        {
            method = m;
        }
        asked => {
            let message = match asked {
                Err(e) => e,
                Ok(m) => format!(
                    "the request asks to be treated as {} (method override), which this proxy refuses",
                    m.unwrap_or_default()
                ),
            };
            return Routed::Refused(RefuseWith {
                route: set.reach_any_method(raw_path),
                reason: DecisionReason::MethodOverride,
                status: StatusCode::BAD_REQUEST,
                message,
            });
        }
    }
    match set.classify(&method, raw_path) {
        RouteMatch::Matched(route, path_params) => Routed::Gated { route, path_params },
        RouteMatch::Ambiguous(route) => Routed::Refused(RefuseWith {
            route: Some(route),
            reason: DecisionReason::AmbiguousPath,
            status: StatusCode::BAD_REQUEST,
            message: format!(
                "the path is not the route's path {:?} as written, but some servers would route it there",
                route.path
            ),
        }),
        RouteMatch::Unmatched => {
            // A body can carry `_method`, which a framework may honour to
            // reach a route gated under another method. A form is refused
            // outright; any other body is read to look, since some
            // upstreams parse JSON whatever the media type says.
            let gated_elsewhere = if body_follows {
                set.reach_any_method(raw_path)
            } else {
                None
            };
            match (guard::body_kind(headers), gated_elsewhere) {
                (guard::BodyKind::Form, Some(route)) => Routed::Refused(RefuseWith {
                    route: Some(route),
                    reason: DecisionReason::MethodOverride,
                    status: StatusCode::BAD_REQUEST,
                    message: format!(
                        "a form body to a path gated under {} could ask for that method with _method",
                        route.method
                    ),
                }),
                (_, gated_elsewhere) => Routed::Unmatched { gated_elsewhere },
            }
        }
    }
}

/// An unmatched request's body, on a path that `route` gates under another
/// method: refused when it asks for another method with `_method`. A body
/// labelled JSON is read as the gate reads any JSON body; any other body
/// is read the same way when a lenient JSON reader would take it for a
/// JSON object (`guard::sniffed_json_object`: Flask's
/// `get_json(force=True)`, a handler that sniffs `{`).
pub fn unmatched_body_refusal<'a>(
    route: &'a Route,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Option<RefuseWith<'a>> {
    // A compressed body cannot be read here, and an upstream that
    // decompresses (Express's body parsers do) would find its `_method`.
    if encoded(headers) && !bytes.is_empty() {
        return Some(RefuseWith {
            route: Some(route),
            reason: DecisionReason::MethodOverride,
            status: StatusCode::BAD_REQUEST,
            message: format!(
                "a compressed body to a path gated under {} could ask for that method with _method; send it uncompressed",
                route.method
            ),
        });
    }
    let labelled_json = guard::body_kind(headers) == guard::BodyKind::Json;
    let message = match guard::sniffed_json_object(bytes) {
        Some(text) => guard::body_method_override("application/json", text.as_bytes(), None),
        None if labelled_json => guard::body_method_override("application/json", bytes, None),
        None => None,
    }?;
    Some(RefuseWith {
        route: Some(route),
        reason: DecisionReason::MethodOverride,
        status: StatusCode::BAD_REQUEST,
        message: format!("{message} (the path is gated under {})", route.method),
    })
}

/// Whether an unmatched request's body on a path gated under another
/// method must be read whole before it is forwarded: it says JSON (read as
/// the gate reads any JSON body) or is compressed (refused, see
/// [`unmatched_body_refusal`]). Any other body is read only as far as its
/// first character (`guard::prefix_opens_object`).
pub fn body_read_whole(headers: &HeaderMap) -> bool {
    guard::body_kind(headers) == guard::BodyKind::Json || encoded(headers)
}

/// Whether the body carries a `Content-Encoding` other than `identity`
/// (gzip, deflate, br, ...): bytes the gate would read as they are and an
/// upstream may decompress first.
fn encoded(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"identity"))
}

/// The decision's input for a request to a gated route: the body checked
/// (its media type, keys two parsers could read differently, a `_method`
/// in it), then the route's extractors run and the parts they found read
/// as claims, an answer and sources. A request the gate refuses before
/// deciding is an `Err` with the reason it is recorded under.
pub fn gated_input<'a>(
    route: &'a Route,
    headers: &HeaderMap,
    query: Option<&str>,
    bytes: &[u8],
    path_params: &PathParams,
) -> Result<Input, RefuseWith<'a>> {
    one_credential_each(route, headers)?;
    gated_media_type(route, headers, bytes)?;
    let json_body = gated_json_body(route, bytes)?;
    // A `_method` in the body asks for another route, as the override
    // headers and query do.
    if !bytes.is_empty() {
        if let Some(message) =
            guard::body_method_override(&route.content_type, bytes, json_body.as_ref())
        {
            return Err(refuse(
                route,
                DecisionReason::MethodOverride,
                StatusCode::BAD_REQUEST,
                message,
            ));
        }
    }
    let extracted = route.extract(&RequestParts {
        path_params,
        query,
        headers,
        body: json_body.as_ref(),
    });
    let mut input = input_of(route, extracted).map_err(|e| {
        refuse(
            route,
            DecisionReason::PolicyViolation,
            StatusCode::BAD_REQUEST,
            format!("the request's justification is malformed: {e}"),
        )
    })?;
    add_route_sources(route, &mut input)?;
    Ok(input)
}

/// A refusal of a request to the gated `route`, before any decision.
fn refuse(
    route: &Route,
    reason: DecisionReason,
    status: StatusCode,
    message: String,
) -> RefuseWith<'_> {
    RefuseWith {
        route: Some(route),
        reason,
        status,
        message,
    }
}

/// Refuses a request that carries one of the route's credential headers
/// more than once.
fn one_credential_each<'a>(route: &'a Route, headers: &HeaderMap) -> Result<(), RefuseWith<'a>> {
    // One caller per held call: two of one credential header could name
    // two callers, and the upstream could act for the one the gate did
    // not see. `X_Api_Key` counts as `X-Api-Key` (CGI, WSGI and PHP read
    // both as one).
    let mut seen: Vec<std::borrow::Cow<'_, str>> = Vec::new();
    // `iter` yields a repeated header once per value.
    for (name, _) in headers.iter() {
        let name = crate::policy::route::cgi_name(name.as_str());
        if !route.is_credential(&name) {
            continue;
        }
        if seen.contains(&name) {
            return Err(refuse(
                route,
                DecisionReason::AmbiguousCredentials,
                StatusCode::BAD_REQUEST,
                format!("the request carries more than one {name} header; send one credential"),
            ));
        }
        seen.push(name);
    }
    Ok(())
}

/// Refuses a body that is compressed, or not of the media type the route
/// gates (or of it with parameters the gate refuses).
fn gated_media_type<'a>(
    route: &'a Route,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<(), RefuseWith<'a>> {
    // The body must be of the media type the route gates, and readable
    // one way only: uncompressed, so that the gate and the upstream read
    // the same bytes.
    if !bytes.is_empty() && encoded(headers) {
        return Err(refuse(
            route,
            DecisionReason::UnsupportedContentType,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "this route gates uncompressed bodies; send it without Content-Encoding".into(),
        ));
    }
    if route.reads_body() || !bytes.is_empty() {
        let problem = match guard::media_type(headers) {
            Ok(Some(m)) if m == route.content_type => guard::parameter_problem(headers),
            Ok(Some(m)) => Some(format!(
                "this route gates {} bodies, not {m}",
                route.content_type
            )),
            Ok(None) => Some(format!(
                "this route gates {} bodies and the request has no Content-Type",
                route.content_type
            )),
            Err(e) => Some(e),
        };
        if let Some(message) = problem {
            return Err(refuse(
                route,
                DecisionReason::UnsupportedContentType,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                message,
            ));
        }
    }
    Ok(())
}

/// The body as JSON when the route reads it (`None` when it does not);
/// refused when it is not valid JSON or two parsers could read it
/// differently.
fn gated_json_body<'a>(route: &'a Route, bytes: &[u8]) -> Result<Option<Value>, RefuseWith<'a>> {
    if !route.reads_body() {
        return Ok(None);
    }
    let pointers = body_pointers(route);
    match guard::parse_json(bytes, &pointers) {
        Ok(v) => Ok(Some(v)),
        Err(guard::BodyError::Invalid(e)) => Err(refuse(
            route,
            DecisionReason::PolicyViolation,
            StatusCode::BAD_REQUEST,
            format!("this route reads a JSON body and the body is not valid JSON: {e}"),
        )),
        Err(guard::BodyError::Ambiguous(e)) => Err(refuse(
            route,
            DecisionReason::AmbiguousBody,
            StatusCode::BAD_REQUEST,
            format!("the body is ambiguous: {e}"),
        )),
    }
}

/// The decision's input, read from the parts the extractors found.
fn input_of(route: &Route, extracted: Extracted) -> Result<Input, DecideError> {
    Ok(Input {
        action_type: route.action.clone(),
        params: extracted.params,
        // A JSON null is no claims or no answer, as in an API body.
        claims: extracted
            .claims
            .filter(|c| !c.is_null())
            .map(|c| from_json::<Claims>("claims", c).map(|c| c.0))
            .transpose()?,
        answer: extracted
            .answer
            .filter(|a: &Value| !a.is_null())
            .map(|a| from_json("answer", a))
            .transpose()?,
        sources: extracted
            .sources
            .map(|s| from_json("sources", s))
            .transpose()?
            .unwrap_or_default(),
        requested: Default::default(),
    })
}

/// Adds the sources the route reads by uri for this call, refusing a
/// request that sends one of them itself or whose params cannot fill a
/// uri.
fn add_route_sources<'a>(route: &'a Route, input: &mut Input) -> Result<(), RefuseWith<'a>> {
    // The records the route names for this call: read by the service, so
    // a caller may not send a source under one of their ids.
    for t in &route.sources_from {
        if input.sources.iter().any(|s| s.is_named(&t.id)) {
            return Err(refuse(
                route,
                DecisionReason::PolicyViolation,
                StatusCode::BAD_REQUEST,
                format!(
                    "source {:?} is read by the gate from the system of record; do not send it",
                    t.id
                ),
            ));
        }
        let uri = t.fill(&input.params).map_err(|e| {
            refuse(
                route,
                DecisionReason::PolicyViolation,
                StatusCode::BAD_REQUEST,
                format!("the route reads source {:?} by uri, and {e}", t.id),
            )
        })?;
        input.sources.push(SourceIn::by_uri(&t.id, uri));
    }
    Ok(())
}

/// The JSON pointers of a route's `body:` extractors.
pub fn body_pointers(route: &Route) -> Vec<&str> {
    route
        .params
        .iter()
        .map(|(_, e)| e)
        .chain(route.claims.iter())
        .chain(route.sources.iter())
        .chain(route.answer.iter())
        .filter_map(|e| match e {
            crate::policy::Extractor::Body(p) => Some(p.as_str()),
            _ => None,
        })
        .collect()
}
