//! Validating one route of a policy file: its method and path pattern,
//! extractors, content types, suffixes, holds, and the records its action
//! reads.

use super::*;

// === routes ===

/// Validates one route table into a route, or `None` after reporting each
/// of its errors.
pub(super) fn route(cx: &mut FileCtx<'_>, fr: &FileRoute, file_name: &str) -> Option<Route> {
    let before = cx.errors.len();
    let name = fr.name.get_ref();
    if name.trim().is_empty() {
        cx.err(fr.name.span().start, "route name must not be empty");
    }
    let method = method(cx, fr);
    let pattern = match Pattern::parse(fr.path.get_ref()) {
        Ok(p) => Some(p),
        Err(m) => {
            cx.err(fr.path.span().start, m);
            None
        }
    };
    let extractors = extractors(cx, fr, pattern.as_ref());
    let hold_timeout = match &fr.hold_timeout {
        None => DEFAULT_HOLD_TIMEOUT,
        Some(t) => match parse_duration(t.get_ref()) {
            Ok(d) => d,
            Err(m) => {
                cx.err(t.span().start, format!("hold_timeout: {m}"));
                DEFAULT_HOLD_TIMEOUT
            }
        },
    };
    let content_type = content_type(cx, fr);
    let suffixes = suffixes(cx, fr);
    let credential_headers = header_names(cx, "credential_headers", &fr.credential_headers);
    let join_ignore_headers = header_names(cx, "join_ignore_headers", &fr.join_ignore_headers);
    refuse_ignored_credentials(cx, fr, &credential_headers);
    let Extractors {
        params,
        claims,
        sources,
        answer,
    } = extractors;
    let known = |n: &str| params.iter().any(|(p, _)| p == n);
    let sources_from = sources_from(cx, &fr.sources_from, &known, "a param of this route");
    if cx.errors.len() != before {
        return None;
    }
    Some(Route {
        name: name.clone(),
        method,
        path: fr.path.get_ref().clone(),
        action: fr.action.get_ref().clone(),
        params,
        claims,
        sources,
        answer,
        on_review: match fr.on_review {
            None | Some(file::FileOnReview::Hold) => OnReview::Hold,
            Some(file::FileOnReview::Deny) => OnReview::Deny,
        },
        hold_timeout,
        failure_mode: match fr.failure_mode {
            None | Some(file::FileFailureMode::Closed) => FailureMode::Closed,
            Some(file::FileFailureMode::Open) => FailureMode::Open,
        },
        file: file_name.to_string(),
        defined_at: cx.at(fr.name.span().start),
        content_type,
        suffixes,
        pinned: fr.pinned,
        credential_headers,
        join_ignore_headers,
        sources_from,
        pattern: pattern?,
    })
}

/// The route's method, uppercased; it must be a standard HTTP method.
fn method(cx: &mut FileCtx<'_>, fr: &FileRoute) -> String {
    let method = fr.method.get_ref().to_ascii_uppercase();
    // A misspelt method ("PSOT") is a route that never matches, and with
    // `unmatched = "forward"` every call it meant to gate goes through.
    const METHODS: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT",
    ];
    if !METHODS.contains(&method.as_str()) {
        cx.err(
            fr.method.span().start,
            format!(
                "invalid method {:?}: expected one of {}",
                fr.method.get_ref(),
                METHODS.join(", ")
            ),
        );
    }
    method
}

/// What a route extracts from a request.
struct Extractors {
    params: Vec<(String, Extractor)>,
    claims: Option<Extractor>,
    sources: Option<Extractor>,
    answer: Option<Extractor>,
}

/// The route's params, claims, sources and answer extractors; `pattern`
/// (when it parsed) must have each `path:` segment they name.
fn extractors(cx: &mut FileCtx<'_>, fr: &FileRoute, pattern: Option<&Pattern>) -> Extractors {
    // With a broken pattern, do not also blame every path: extractor.
    let has = |n: &str| pattern.is_none_or(|p| p.has_param(n));
    let extractor = |cx: &mut FileCtx<'_>, key: &str, v: &toml::Spanned<toml::Value>| {
        Extractor::parse(v.get_ref(), has)
            .map_err(|m| cx.err(v.span().start, format!("{key}: {m}")))
            .ok()
    };
    let mut params = Vec::new();
    for (k, v) in &fr.params {
        // Rules address params by dotted path, so a dot in a name would make
        // `a.b` ambiguous.
        if k.is_empty() || k.contains('.') {
            cx.err(
                v.span().start,
                format!("param name {k:?} must be non-empty and contain no \".\""),
            );
            continue;
        }
        if let Some(e) = extractor(cx, &format!("params.{k}"), v) {
            params.push((k.clone(), e));
        }
    }
    let claims = fr.claims.as_ref().and_then(|v| extractor(cx, "claims", v));
    let sources = fr
        .sources
        .as_ref()
        .and_then(|v| extractor(cx, "sources", v));
    let answer = fr.answer.as_ref().and_then(|v| extractor(cx, "answer", v));
    if let (Some(_), Some(a)) = (&fr.claims, &fr.answer) {
        cx.err(
            a.span().start,
            "a route takes claims or answer (output mode), not both",
        );
    }
    Extractors {
        params,
        claims,
        sources,
        answer,
    }
}

/// The media type the route gates, lowercased; it must be one, and a JSON
/// one when a `body:` extractor reads the body.
fn content_type(cx: &mut FileCtx<'_>, fr: &FileRoute) -> String {
    let content_type = match &fr.content_type {
        None => DEFAULT_CONTENT_TYPE.to_string(),
        Some(ct) => {
            let t = ct.get_ref().trim().to_ascii_lowercase();
            if !is_media_type(&t) {
                cx.err(
                    ct.span().start,
                    format!(
                        "content_type {:?} is not a media type like \"application/json\" (no parameters)",
                        ct.get_ref()
                    ),
                );
            }
            t
        }
    };
    let reads_body = [&fr.claims, &fr.sources, &fr.answer]
        .into_iter()
        .flatten()
        .chain(fr.params.values())
        .any(|v| matches!(v.get_ref(), toml::Value::String(s) if s.starts_with("body:")));
    let json = content_type == "application/json" || content_type.ends_with("+json");
    if reads_body && !json && is_media_type(&content_type) {
        let at = fr
            .content_type
            .as_ref()
            .map_or(fr.name.span().start, |c| c.span().start);
        cx.err(
            at,
            format!(
                "route {:?} reads the body with body: extractors, so it must gate a JSON media type, not {content_type:?}",
                fr.name.get_ref()
            ),
        );
    }
    content_type
}

/// The route's path suffixes, lowercased; each a dot and letters or digits.
fn suffixes(cx: &mut FileCtx<'_>, fr: &FileRoute) -> Vec<String> {
    let mut suffixes = Vec::new();
    for sfx in &fr.suffixes {
        let v = sfx.get_ref();
        let ok =
            v.len() > 1 && v.starts_with('.') && v[1..].bytes().all(|b| b.is_ascii_alphanumeric());
        if ok {
            suffixes.push(v.to_ascii_lowercase());
        } else {
            cx.err(
                sfx.span().start,
                format!("suffix {v:?} must be a dot and letters or digits, like \".json\""),
            );
        }
    }
    suffixes
}

/// No `join_ignore_headers` entry may be a header that carries the caller's
/// credential (verdict's list or the route's `credential_headers`).
fn refuse_ignored_credentials(cx: &mut FileCtx<'_>, fr: &FileRoute, credential_headers: &[String]) {
    for h in &fr.join_ignore_headers {
        let lower = h.get_ref().trim().to_ascii_lowercase();
        if crate::policy::route::CREDENTIAL_HEADERS.contains(&lower.as_str())
            || credential_headers.contains(&lower)
        {
            cx.err(
                h.span().start,
                format!(
                    "join_ignore_headers: {:?} carries the caller's credential; a retry with another one must not join the pending review",
                    h.get_ref()
                ),
            );
        }
    }
}

/// `sources_from` entries: unique ids, and uri templates with a fixed
/// http(s) or file origin whose placeholders `known` accepts (`what` says
/// what they must be, for the error).
pub(super) fn sources_from(
    cx: &mut FileCtx<'_>,
    entries: &[file::FileSourceFrom],
    known: &dyn Fn(&str) -> bool,
    what: &str,
) -> Vec<SourceTemplate> {
    let mut out: Vec<SourceTemplate> = Vec::new();
    for s in entries {
        let (id, uri) = (s.id.get_ref(), s.uri.get_ref());
        if id.trim().is_empty() {
            cx.err(s.id.span().start, "sources_from: id must not be empty");
        } else if out.iter().any(|t| &t.id == id) {
            cx.err(
                s.id.span().start,
                format!("sources_from: duplicate id {id:?}"),
            );
        }
        let Some((scheme, rest)) = uri.split_once("://") else {
            cx.err(
                s.uri.span().start,
                format!("sources_from: {uri:?} is not a uri"),
            );
            continue;
        };
        if !matches!(scheme, "http" | "https" | "file") {
            cx.err(
                s.uri.span().start,
                format!("sources_from: {uri:?}: only http, https and file uris"),
            );
        }
        // The origin is fixed: no placeholder before the path.
        let authority = rest.split('/').next().unwrap_or("");
        if authority.contains(['{', '}']) || (scheme != "file" && authority.is_empty()) {
            cx.err(
                s.uri.span().start,
                format!("sources_from: {uri:?}: the origin must be written out; placeholders go in the path"),
            );
        }
        match SourceTemplate::parse(id, uri) {
            Ok(t) => {
                for n in t.params().filter(|n| !known(n)) {
                    cx.err(
                        s.uri.span().start,
                        format!("sources_from: {{{n}}} is not {what}"),
                    );
                }
                out.push(t);
            }
            Err(e) => cx.err(s.uri.span().start, format!("sources_from: {e}")),
        }
    }
    out
}

/// A list of header names, lowercased; a name that is not an HTTP field
/// name, or that is hop-by-hop or verdict's own, is an error.
fn header_names(cx: &mut FileCtx<'_>, field: &str, names: &[toml::Spanned<String>]) -> Vec<String> {
    let mut out = Vec::new();
    for n in names {
        let lower = n.get_ref().trim().to_ascii_lowercase();
        let problem = if http::HeaderName::from_bytes(lower.as_bytes()).is_err() {
            Some("is not a header name")
        } else if crate::policy::route::per_try_header(&lower) {
            Some("is one verdict sets or leaves out by itself")
        } else if matches!(
            lower.as_str(),
            "connection"
                | "keep-alive"
                | "proxy-connection"
                | "te"
                | "trailer"
                | "transfer-encoding"
                | "upgrade"
                | "host"
        ) {
            Some("is hop-by-hop or the target host")
        } else {
            None
        };
        match problem {
            Some(why) => cx.err(n.span().start, format!("{field}: {:?} {why}", n.get_ref())),
            None if !out.contains(&lower) => out.push(lower),
            None => {}
        }
    }
    out
}

/// `type/subtype` made of RFC 9110 token characters, lowercase, with no
/// parameters.
fn is_media_type(t: &str) -> bool {
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    matches!(t.split_once('/'), Some((a, b)) if token(a) && token(b))
}
