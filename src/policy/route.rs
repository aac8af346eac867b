//! Routes: which HTTP calls the proxy intercepts, and how one is picked.
//!
//! Patterns are split into segments once, at load, and each method's routes
//! are kept sorted most specific first, so matching a request is a short scan
//! with no allocation until a route matches. Specificity is compared segment
//! by segment from the left (a literal beats a `{param}`), which makes "which
//! route wins" predictable for the person writing the policy; two routes that
//! could both match with equal specificity are rejected at load instead of
//! being decided by file order.
//!
//! A gate must not be bypassed by spelling a path the way an upstream server
//! would still route to the gated handler, so a request path is read twice:
//! - **strictly**, to pick the route whose decision applies: segments are
//!   percent-decoded (`/api/orders/1/%72efunds` is `/api/orders/1/refunds`),
//!   empty segments (`//`, a trailing `/`) and `.` are dropped and `..`
//!   removes the segment before it (RFC 3986 §5.2.4), and literal segments
//!   compare ASCII case-insensitively, as Express does by default; a route's
//!   `suffixes` (`.json`) are ignored on the last segment;
//! - **leniently**, the way the most forgiving upstream would: `\` and
//!   encoded `/` or `\` split segments, `;` path parameters are cut off, a
//!   trailing `.` or whitespace is trimmed, escapes are decoded until none is
//!   left, the decoded text is folded to Unicode NFKC (full-width `ｒ` is
//!   `r`, `／` is `/`, `ﬁ` is `fi`, as servers that normalize paths read
//!   them), and any extension on the last segment is dropped.
//!
//! When the lenient reading reaches a route that the strict one does not,
//! the request is [`RouteMatch::Ambiguous`]: the proxy refuses it with a
//! recorded decision instead of guessing which handler the upstream runs.
//! So is a path whose decoded text NFKC folding changes when the lenient
//! reading reaches any route, even the one the strict reading matched: the
//! gate would decide on a param (`１００１`) that a normalizing upstream
//! reads as another (`1001`). Paths that reach no route are not affected.
//!
//! A captured `{param}` keeps its decoded text.

use std::collections::HashMap;
use std::time::Duration;

use unicode_normalization::UnicodeNormalization;

use super::extract::Extractor;

/// What the proxy does with a `needs_review` decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnReview {
    /// Keep the connection open up to `hold_timeout` for a reviewer.
    Hold,
    /// Answer 403 at once.
    Deny,
}

/// What the proxy does when the engine or the audit log fails on this route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMode {
    /// 503 (the default: fail closed).
    Closed,
    /// Forward as if allowed.
    Open,
}

/// One `[[route]]`, validated.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    /// Uppercase, e.g. `POST`.
    pub method: String,
    /// The pattern as written, e.g. `/api/orders/{order_id}/refunds`.
    pub path: String,
    /// The action type this route gates; always defined in the same set.
    pub action: String,
    /// Param name → extractor, sorted by name.
    pub params: Vec<(String, Extractor)>,
    pub claims: Option<Extractor>,
    pub sources: Option<Extractor>,
    /// Output mode: the text whose sentences become the claims.
    pub answer: Option<Extractor>,
    pub on_review: OnReview,
    /// How long a held request waits for a reviewer (default 30 s).
    pub hold_timeout: Duration,
    pub failure_mode: FailureMode,
    /// The file that defined the route, for diagnostics.
    pub file: String,
    /// Where the route's `name` is written, `policies/x.toml:12:8`, for
    /// diagnostics that concern the whole route.
    pub defined_at: String,
    /// The media type of the bodies this route gates, lowercase, e.g.
    /// `application/json`; a body of any other type is refused.
    pub content_type: String,
    /// Extensions (`.json`, lowercase) the last path segment may carry.
    pub suffixes: Vec<String>,
    /// A reload that would remove this route is refused.
    pub pinned: bool,
    /// Headers (lowercase) that carry the caller's credential besides
    /// `Authorization`, `Cookie` and `Proxy-Authorization`: a held call
    /// with two of one is refused, their values are sealed at rest, and a
    /// verdict key in one may not approve the call.
    pub credential_headers: Vec<String>,
    /// Headers (lowercase) a retry may change and still join its pending
    /// review, besides the per-try ones verdict always leaves out.
    pub join_ignore_headers: Vec<String>,
    /// Sources the gate reads for every call (`sources_from`): the system
    /// of record's documents, named by templates over the route's params.
    pub sources_from: Vec<SourceTemplate>,
    pub(super) pattern: Pattern,
}

/// One `sources_from` entry: a source id and a uri template whose
/// `{param}` placeholders sit after a fixed origin, split once at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceTemplate {
    pub id: String,
    /// The template as written, for diagnostics.
    pub uri: String,
    parts: Vec<TemplatePart>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum TemplatePart {
    Text(String),
    Param(String),
}

impl SourceTemplate {
    /// Splits `uri` into text and `{param}` placeholders, or says why it is
    /// malformed (an unclosed, stray, empty or nested brace).
    pub fn parse(id: &str, uri: &str) -> Result<SourceTemplate, String> {
        let mut parts = Vec::new();
        let mut rest = uri;
        while let Some(open) = rest.find(['{', '}']) {
            if rest[open..].starts_with('}') {
                return Err(format!("a '}}' without '{{' in {uri:?}"));
            }
            let after = &rest[open + 1..];
            let close = after
                .find('}')
                .ok_or_else(|| format!("unclosed '{{' in {uri:?}"))?;
            let name = &after[..close];
            if name.is_empty() || name.contains('{') {
                return Err(format!("an empty or nested placeholder in {uri:?}"));
            }
            parts.push(TemplatePart::Text(rest[..open].to_string()));
            parts.push(TemplatePart::Param(name.to_string()));
            rest = &after[close + 1..];
        }
        parts.push(TemplatePart::Text(rest.to_string()));
        Ok(SourceTemplate {
            id: id.to_string(),
            uri: uri.to_string(),
            parts,
        })
    }

    /// The params the template names, in order.
    pub fn params(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            TemplatePart::Param(n) => Some(n.as_str()),
            TemplatePart::Text(_) => None,
        })
    }

    /// The uri for one call: each `{param}` replaced by the param's value
    /// (a string or a number), percent-encoded as one path segment (every
    /// byte but letters, digits, `-`, `_`, `.` and `~`), so that a value
    /// never adds a segment, a query, a fragment or another origin. An
    /// absent or empty value, another type, and `.` or `..` (a dot
    /// segment) name no record: `Err` with why.
    pub fn fill(
        &self,
        params: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String, String> {
        let mut out = String::with_capacity(self.uri.len() + 16);
        for part in &self.parts {
            let name = match part {
                TemplatePart::Text(t) => {
                    out.push_str(t);
                    continue;
                }
                TemplatePart::Param(name) => name,
            };
            let value = match params.get(name) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Number(n)) => n.to_string(),
                Some(_) => return Err(format!("param {name} is not a string or a number")),
                None => return Err(format!("param {name} is absent")),
            };
            if value.is_empty() || value == "." || value == ".." {
                return Err(format!("param {name} ({value:?}) names no record"));
            }
            for b in value.bytes() {
                if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                    out.push(char::from(b));
                } else {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
        }
        Ok(out)
    }
}

/// The headers that carry a caller's credential on every route; a route
/// names more in `credential_headers`.
pub const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "cookie", "proxy-authorization"];

/// Whether a header (lowercase name) differs between two tries of the same
/// call on every route: `X-Request-Id` (verdict makes a fresh one when the
/// client sends none), verdict's own `X-Verdict-*`, and W3C trace context
/// (`traceparent`, `tracestate`). `X-Forwarded-*` is not among them: verdict
/// derives its own from the connection and `Host`, which a retry repeats,
/// and a proxy in front may carry the caller's identity in one
/// (`X-Forwarded-User`, `X-Forwarded-Client-Cert`).
pub fn per_try_header(name: &str) -> bool {
    name == "x-request-id"
        || name.starts_with("x-verdict-")
        || name == "traceparent"
        || name == "tracestate"
}

/// A header name as CGI, WSGI and PHP servers read it: `X_Api_Key` and
/// `X-Api-Key` are both `HTTP_X_API_KEY` there, so both are the same header
/// here. `name` is lowercase.
pub fn cgi_name(name: &str) -> std::borrow::Cow<'_, str> {
    if name.contains('_') {
        std::borrow::Cow::Owned(name.replace('_', "-"))
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

/// How a request path relates to the routes of its method.
#[derive(Debug, Clone)]
pub enum RouteMatch<'a> {
    /// The strict reading matches this route.
    Matched(&'a Route, PathParams),
    /// Only a lenient reading of the path reaches this route: some upstream
    /// would run its handler for a path the gate cannot read the same way.
    Ambiguous(&'a Route),
    /// No reading reaches a route.
    Unmatched,
}

/// Path parameters captured by a match, percent-decoded, in pattern order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathParams(Vec<(String, String)>);

/// A compiled path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pattern {
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param(String),
}

/// Routes grouped by method, most specific first. Built once per set.
#[derive(Debug, Clone, Default)]
pub(super) struct RouteTable {
    // INVARIANT: every index is < the owning PolicySet's routes.len().
    by_method: HashMap<String, Vec<usize>>,
}

// === impl Route ===

impl Route {
    /// Whether a header (lowercase name) is left out of a held call's retry
    /// identity: a per-try header ([`per_try_header`]) or one of the
    /// route's `join_ignore_headers`.
    pub fn join_skips(&self, name: &str) -> bool {
        per_try_header(name) || self.join_ignore_headers.iter().any(|h| h == name)
    }

    /// Whether a header (lowercase name, `_` read as `-`) carries the
    /// caller's credential on this route.
    pub fn is_credential(&self, name: &str) -> bool {
        let name = cgi_name(name);
        CREDENTIAL_HEADERS.contains(&name.as_ref())
            || self.credential_headers.iter().any(|h| *h == name)
    }

    /// Whether any extractor reads the JSON body, i.e. whether the proxy must
    /// buffer and parse it.
    pub fn reads_body(&self) -> bool {
        self.params
            .iter()
            .map(|(_, e)| e)
            .chain(self.claims.iter())
            .chain(self.sources.iter())
            .chain(self.answer.iter())
            .any(|e| matches!(e, Extractor::Body(_)))
    }
}

// === impl PathParams ===

impl PathParams {
    pub fn new(pairs: Vec<(String, String)>) -> Self {
        PathParams(pairs)
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

// === impl Pattern ===

impl Pattern {
    /// Parses `/a/{b}/c`. Errors are messages for the policy author.
    pub(super) fn parse(path: &str) -> Result<Pattern, String> {
        let Some(rest) = path.strip_prefix('/') else {
            return Err(format!("path {path:?} must start with \"/\""));
        };
        if path.contains(['?', '#']) {
            return Err(format!(
                "path {path:?} must not contain a query string or fragment"
            ));
        }
        let mut segments = Vec::new();
        // Empty segments are dropped, as in request paths: `/a//b/` is `/a/b`.
        for seg in rest.split('/').filter(|s| !s.is_empty()) {
            if seg == "." || seg == ".." {
                return Err(format!(
                    "path {path:?} must not contain \".\" or \"..\" segments"
                ));
            }
            if let Some(inner) = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                if !is_ident(inner) {
                    return Err(format!(
                        "invalid path parameter {seg:?}: names use letters, digits and _"
                    ));
                }
                if segments
                    .iter()
                    .any(|s| matches!(s, Segment::Param(p) if p == inner))
                {
                    return Err(format!("duplicate path parameter {inner:?}"));
                }
                segments.push(Segment::Param(inner.to_string()));
            } else if seg.contains(['{', '}']) {
                return Err(format!(
                    "invalid path segment {seg:?}: a parameter must be a whole segment like {{name}}"
                ));
            } else {
                segments.push(Segment::Literal(percent_decode(seg, false)));
            }
        }
        Ok(Pattern { segments })
    }

    pub(super) fn has_param(&self, name: &str) -> bool {
        self.segments
            .iter()
            .any(|s| matches!(s, Segment::Param(p) if p == name))
    }

    /// One entry per segment, `1` for a literal and `0` for a parameter.
    /// Comparing keys lexicographically is exactly the precedence rule:
    /// left to right, literal beats parameter, longer beats its own prefix.
    pub(super) fn specificity(&self) -> Vec<u8> {
        self.segments
            .iter()
            .map(|s| u8::from(matches!(s, Segment::Literal(_))))
            .collect()
    }

    /// Whether some path matches both patterns.
    pub(super) fn overlaps(&self, other: &Pattern) -> bool {
        self.each_segment(other, |pair| match pair {
            (Segment::Literal(a), Segment::Literal(b)) => a.eq_ignore_ascii_case(b),
            _ => true,
        })
    }

    /// Whether every path `other` matches, this pattern matches too.
    pub(super) fn covers(&self, other: &Pattern) -> bool {
        self.each_segment(other, |pair| match pair {
            (Segment::Param(_), _) => true,
            (Segment::Literal(a), Segment::Literal(b)) => a.eq_ignore_ascii_case(b),
            (Segment::Literal(_), Segment::Param(_)) => false,
        })
    }

    /// Whether both patterns have as many segments and `holds` for each
    /// pair of segments at the same place.
    fn each_segment(&self, other: &Pattern, holds: impl Fn((&Segment, &Segment)) -> bool) -> bool {
        self.segments.len() == other.segments.len()
            && self.segments.iter().zip(&other.segments).all(holds)
    }

    /// A path both patterns match, for messages, when they [overlap]: each
    /// segment is a literal where either has one, else `{name}`.
    ///
    /// [overlap]: Pattern::overlaps
    pub(super) fn shared_example(&self, other: &Pattern) -> String {
        let mut out = String::new();
        for pair in self.segments.iter().zip(&other.segments) {
            out.push('/');
            match pair {
                (Segment::Literal(l), _) | (Segment::Param(_), Segment::Literal(l)) => {
                    out.push_str(l)
                }
                (Segment::Param(p), Segment::Param(_)) => {
                    out.push('{');
                    out.push_str(p);
                    out.push('}');
                }
            }
        }
        if out.is_empty() {
            out.push('/');
        }
        out
    }

    /// The pattern of the paths a `suffixes` entry adds: the last segment
    /// with `suffix` appended. `None` when the last segment is a `{param}`,
    /// which captures `1001.json` whole, so a suffix adds no path to it.
    pub(super) fn with_suffix(&self, suffix: &str) -> Option<Pattern> {
        let mut segments = self.segments.clone();
        match segments.last_mut()? {
            Segment::Literal(l) => l.push_str(suffix),
            Segment::Param(_) => return None,
        }
        Some(Pattern { segments })
    }

    fn capture(&self, segments: &[String]) -> Option<PathParams> {
        if segments.len() != self.segments.len() {
            return None;
        }
        let mut params = Vec::new();
        for (pat, seg) in self.segments.iter().zip(segments) {
            match pat {
                Segment::Literal(l) if l.eq_ignore_ascii_case(seg) => {}
                Segment::Literal(_) => return None,
                Segment::Param(name) => params.push((name.clone(), seg.clone())),
            }
        }
        Some(PathParams(params))
    }
}

// === impl RouteTable ===

impl RouteTable {
    pub(super) fn build(routes: &[Route]) -> RouteTable {
        let mut by_method: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, r) in routes.iter().enumerate() {
            by_method.entry(r.method.clone()).or_default().push(i);
        }
        for list in by_method.values_mut() {
            // Stable sort: equal keys never overlap (rejected at load), so
            // their relative order does not change any outcome.
            list.sort_by(|a, b| {
                let (ka, kb) = (
                    routes[*a].pattern.specificity(),
                    routes[*b].pattern.specificity(),
                );
                kb.cmp(&ka)
            });
        }
        RouteTable { by_method }
    }

    /// The most specific route for `method` and `path` (a request target; any
    /// query string or fragment is ignored), read strictly, and whether a
    /// lenient reading reaches another route (see the module doc).
    pub(super) fn find<'a>(&self, routes: &'a [Route], method: &str, path: &str) -> RouteMatch<'a> {
        let Some(candidates) = self.by_method.get(method).or_else(|| {
            // Methods are case-sensitive tokens, but policies store uppercase
            // and clients are expected to send uppercase; tolerate lowercase.
            self.by_method.get(&method.to_ascii_uppercase())
        }) else {
            return RouteMatch::Unmatched;
        };
        let path = path.split(['?', '#']).next().unwrap_or("");
        let Some(rest) = path.strip_prefix('/') else {
            return RouteMatch::Unmatched;
        };
        let find = |segments: &[String], suffix: Option<&str>| {
            candidates.iter().find_map(|&i| {
                let route = routes.get(i)?;
                if suffix.is_some_and(|s| !route.suffixes.iter().any(|r| r == s)) {
                    return None;
                }
                route.pattern.capture(segments).map(|p| (route, p))
            })
        };
        let strict = normalize(rest.split('/').map(|s| percent_decode(s, false)));
        let found = find(&strict, None).or_else(|| {
            let (stem, ext) = split_extension(strict.last()?)?;
            let mut segs = strict.clone();
            let last = segs.len() - 1;
            segs[last] = stem.to_string();
            find(&segs, Some(&ext))
        });
        let (lenient, folded) = lenient_segments(rest);
        let reach = find(&lenient, None).or_else(|| {
            let (stem, _) = split_extension(lenient.last()?)?;
            let mut segs = lenient.clone();
            let last = segs.len() - 1;
            segs[last] = stem.to_string();
            find(&segs, None)
        });
        match (found, reach) {
            (Some((r, p)), None) => RouteMatch::Matched(r, p),
            (Some((r, p)), Some((l, _))) if std::ptr::eq(r, l) && !folded => {
                RouteMatch::Matched(r, p)
            }
            (_, Some((l, _))) => RouteMatch::Ambiguous(l),
            (None, None) => RouteMatch::Unmatched,
        }
    }
}

/// `name.ext` → (`name`, `.ext` lowercase) when `ext` is letters or digits
/// and `name` is not empty.
fn split_extension(seg: &str) -> Option<(&str, String)> {
    let dot = seg.rfind('.')?;
    let (stem, ext) = (&seg[..dot], &seg[dot + 1..]);
    if stem.is_empty() || ext.is_empty() || !ext.chars().all(|c| c.is_alphanumeric()) {
        return None;
    }
    Some((stem, format!(".{}", ext.to_lowercase())))
}

/// The path as the most forgiving upstream would route it (module doc), and
/// whether NFKC folding changed its decoded text.
fn lenient_segments(rest: &str) -> (Vec<String>, bool) {
    let mut decoded = rest.to_string();
    // Decode until nothing changes (bounded: each round removes escapes).
    for _ in 0..4 {
        let next = percent_decode(&decoded, false);
        if next == decoded {
            break;
        }
        decoded = next;
    }
    // ASCII is its own NFKC form: only a path with other text is folded.
    let mut folded = false;
    if !decoded.is_ascii() {
        let nfkc: String = decoded.nfkc().collect();
        if nfkc != decoded {
            folded = true;
            decoded = nfkc;
        }
    }
    let segments = decoded.split(['/', '\\']).map(|seg| {
        let seg = seg.split(';').next().unwrap_or("");
        let seg: String = seg.chars().filter(|c| !c.is_control()).collect();
        seg.trim_matches(|c: char| c.is_whitespace())
            .trim_end_matches(|c: char| c == '.' || c.is_whitespace())
            .to_string()
    });
    // A segment of dots only was a dot segment before trimming.
    let mut out = Vec::new();
    for (raw, seg) in decoded.split(['/', '\\']).zip(segments) {
        let raw = raw.split(';').next().unwrap_or("").trim();
        match raw {
            "." => {}
            ".." => {
                out.pop();
            }
            _ if seg.is_empty() => {}
            _ => out.push(seg),
        }
    }
    (out, folded)
}

/// Drops empty and `.` segments and resolves `..` (RFC 3986 §5.2.4 on
/// decoded segments).
fn normalize(segments: impl Iterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    for seg in segments {
        match seg.as_str() {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            _ => out.push(seg),
        }
    }
    out
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Decodes `%XX` escapes (and `+` as a space when `plus_is_space`, for query
/// strings). Malformed escapes are kept as written; invalid UTF-8 becomes
/// U+FFFD rather than an error, because a gate must still see the request.
pub(super) fn percent_decode(s: &str, plus_is_space: bool) -> String {
    if !(s.contains('%') || (plus_is_space && s.contains('+'))) {
        return s.to_string();
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| {
                    std::str::from_utf8(h)
                        .ok()
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                });
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        for (input, plus, want) in [
            ("abc", false, "abc"),
            ("a%20b", false, "a b"),
            ("a+b", false, "a+b"),
            ("a+b", true, "a b"),
            ("%2F", false, "/"),
            ("%zz%4", false, "%zz%4"),
            ("%C3%A9", false, "é"),
            ("%FF", false, "\u{FFFD}"),
        ] {
            assert_eq!(percent_decode(input, plus), want, "{input}");
        }
    }

    #[test]
    fn the_lenient_reading_folds_compatibility_characters() {
        let read = |p: &str| {
            let (segs, folded) = lenient_segments(p);
            (segs.join("/"), folded)
        };
        // Full-width r (U+FF52), escaped and raw; the fi ligature; a
        // full-width solidus that splits a segment; full-width digits.
        assert_eq!(
            read("api/orders/1/%EF%BD%92efunds"),
            ("api/orders/1/refunds".into(), true)
        );
        assert_eq!(
            read("api/orders/1/\u{FF52}efunds"),
            ("api/orders/1/refunds".into(), true)
        );
        assert_eq!(read("api/\u{FB01}les"), ("api/files".into(), true));
        assert_eq!(read("api/orders%EF%BC%8F1"), ("api/orders/1".into(), true));
        assert_eq!(
            read("api/orders/%EF%BC%91%EF%BC%90/refunds"),
            ("api/orders/10/refunds".into(), true)
        );
        // Text that is its own NFKC form is not folded.
        assert_eq!(read("api/caf%C3%A9"), ("api/caf\u{e9}".into(), false));
        assert_eq!(
            read("api/orders/1/refunds"),
            ("api/orders/1/refunds".into(), false)
        );
    }

    #[test]
    fn pattern_errors() {
        for (path, want) in [
            ("api/x", "path \"api/x\" must start with \"/\""),
            (
                "/a/{b c}",
                "invalid path parameter \"{b c}\": names use letters, digits and _",
            ),
            (
                "/a/{}",
                "invalid path parameter \"{}\": names use letters, digits and _",
            ),
            (
                "/a/x{b}",
                "invalid path segment \"x{b}\": a parameter must be a whole segment like {name}",
            ),
            ("/a/{b}/{b}", "duplicate path parameter \"b\""),
            (
                "/a?x=1",
                "path \"/a?x=1\" must not contain a query string or fragment",
            ),
            (
                "/a/../b",
                "path \"/a/../b\" must not contain \".\" or \"..\" segments",
            ),
        ] {
            assert_eq!(Pattern::parse(path).unwrap_err(), want, "{path}");
        }
    }

    #[test]
    fn specificity_and_overlap() {
        let p = |s: &str| Pattern::parse(s).unwrap();
        assert!(p("/a/b").specificity() > p("/a/{x}").specificity());
        assert!(p("/a/{x}").specificity() > p("/{x}/b").specificity());
        assert!(p("/a/{x}/c").specificity() > p("/a/{x}").specificity());
        assert!(p("/a/{x}").overlaps(&p("/a/{y}")));
        assert!(p("/{x}/b").overlaps(&p("/a/{y}")));
        assert!(!p("/a/{x}").overlaps(&p("/b/{x}")));
        assert!(!p("/a/{x}").overlaps(&p("/a/{x}/c")));
        assert!(p("/A/{x}").overlaps(&p("/a/{y}")));
        assert_eq!(p("/a//b/"), p("/a/b"));
        assert_eq!(p("/").specificity(), Vec::<u8>::new());
    }

    #[test]
    fn covers_examples_and_suffixes() {
        let p = |s: &str| Pattern::parse(s).unwrap();
        assert!(p("/a/{x}").covers(&p("/a/b")));
        assert!(p("/a/{x}").covers(&p("/A/{y}")));
        assert!(!p("/a/b").covers(&p("/a/{x}")));
        assert!(!p("/{x}/b").covers(&p("/a/{y}")));
        assert!(!p("/a/{x}").covers(&p("/a/{x}/c")));
        assert_eq!(p("/{x}/b").shared_example(&p("/a/{y}")), "/a/b");
        assert_eq!(
            p("/api/orders/{id}").shared_example(&p("/api/orders/export")),
            "/api/orders/export"
        );
        assert_eq!(p("/").shared_example(&p("/")), "/");
        assert_eq!(p("/a/b").with_suffix(".json"), Some(p("/a/b.json")));
        assert_eq!(p("/a/{x}").with_suffix(".json"), None);
    }
}
