//! The policy test file format (`*.test.toml` beside the policies), read
//! into [`Case`]s with every problem as `file:line:col: message`.
//!
//! A file is a list of `[[case]]` tables. Each names one request, either
//! `authorize` (the body of `POST /v2/authorize`, written in TOML) or `http`
//! (a request to the proxy: method, path with its query, headers, a raw
//! `body` or a `json` table), and what it `expect`s. The request is read
//! here the way its door reads it (the authorize body with the API's own
//! reader; the HTTP request only checked for shape, since the proxy's
//! reader runs when the case runs), so a case that could never reach a
//! decision is an error of the file, reported before anything runs, as
//! `verdict check` reports a broken policy.

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde::Deserialize;
use serde_json::Value;
use toml::Spanned;

use crate::api::authorize::AuthorizeRequest;
use crate::config::line_col;
use crate::decide::Input;
use crate::engine::decide::DecisionReason;
use crate::policy::extract::toml_to_json;

/// The proxy's reason when `proxy.unmatched = "deny"` blocks a request no
/// route gates.
pub const UNMATCHED_ROUTE: &str = "unmatched_route";

/// One case, ready to run.
#[derive(Debug, Clone)]
pub struct Case {
    /// The file as given on the command line (`policies/refunds.test.toml`).
    pub file: String,
    /// The file's name (`refunds.test.toml`), for `file::case` ids.
    pub file_name: String,
    pub name: String,
    /// Where the case's `name` is written.
    pub line: usize,
    pub col: usize,
    pub request: Request,
    pub expect: Option<Expect>,
}

/// What a case sends.
#[derive(Debug, Clone)]
pub enum Request {
    /// A `/v2/authorize` body, read into the decision's input; `body` is
    /// the JSON it was read from (its canonical hash is the request hash).
    Authorize { input: Input, body: Value },
    /// A request to the proxy.
    Http(HttpRequest),
}

#[derive(Debug, Clone)]
pub struct HttpRequest {
    pub method: String,
    /// The request target: the path and any query, as sent.
    pub target: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

/// What a case expects; unset fields are not checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Expect {
    /// `allow`, `deny`, `needs_review`, or (HTTP only) `not_gated`.
    pub decision: String,
    pub reason: Option<String>,
    /// The messages of the rules that hit, in rule order.
    pub rules: Option<Vec<String>>,
    /// Audit mode: what the decision would have been.
    pub would_decide: Option<String>,
    /// HTTP only: the route the request reaches.
    pub route: Option<String>,
}

/// A problem with a file, `file:line:col: message` when displayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.col, self.message
        )
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    #[serde(default)]
    case: Vec<FileCase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileCase {
    name: Spanned<String>,
    authorize: Option<Spanned<toml::Value>>,
    http: Option<Spanned<FileHttp>>,
    expect: Option<Spanned<FileExpect>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileHttp {
    method: Spanned<String>,
    path: Spanned<String>,
    #[serde(default)]
    headers: BTreeMap<Spanned<String>, Spanned<String>>,
    body: Option<Spanned<String>>,
    json: Option<Spanned<toml::Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileExpect {
    decision: Spanned<String>,
    reason: Option<Spanned<String>>,
    rules: Option<Vec<String>>,
    would_decide: Option<Spanned<String>>,
    route: Option<Spanned<String>>,
}

/// Errors of one file, at byte offsets.
struct Cx<'a> {
    file: &'a str,
    text: &'a str,
    errors: Vec<FileError>,
}

impl Cx<'_> {
    fn err(&mut self, byte: usize, message: impl Into<String>) {
        let (line, col) = line_col(self.text, byte);
        self.errors.push(FileError {
            file: self.file.to_string(),
            line,
            col,
            message: message.into(),
        });
    }
}

/// Reads one test file: its cases, or every problem found in it.
pub fn parse(file: &str, file_name: &str, text: &str) -> Result<Vec<Case>, Vec<FileError>> {
    let mut cx = Cx {
        file,
        text,
        errors: Vec::new(),
    };
    let doc = match toml::from_str::<FileDoc>(text) {
        Ok(doc) => doc,
        Err(e) => {
            let message = e
                .message()
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(": ");
            cx.err(e.span().map_or(0, |s| s.start), message);
            return Err(cx.errors);
        }
    };
    if doc.case.is_empty() {
        cx.err(0, "no [[case]] in this file");
    }
    let mut cases = Vec::new();
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for fc in doc.case {
        let at = fc.name.span().start;
        let name = fc.name.get_ref().trim().to_string();
        if name.is_empty() {
            cx.err(at, "case name must not be empty");
        } else if let Some(first) = names.get(&name) {
            cx.err(
                at,
                format!("duplicate case name {name:?} (first at line {first})"),
            );
        } else {
            names.insert(name.clone(), line_col(text, at).0);
        }
        let request = match (&fc.authorize, &fc.http) {
            (Some(a), None) => authorize(&mut cx, a),
            (None, Some(h)) => http(&mut cx, h),
            (Some(_), Some(h)) => {
                cx.err(
                    h.span().start,
                    "a case sends either authorize or http, not both",
                );
                None
            }
            (None, None) => {
                cx.err(
                    at,
                    "a case needs a request: authorize = {...} or http = {...}",
                );
                None
            }
        };
        let is_http = fc.http.is_some();
        let expect = fc.expect.as_ref().and_then(|e| expect(&mut cx, e, is_http));
        let (line, col) = line_col(text, at);
        if let Some(request) = request {
            cases.push(Case {
                file: file.to_string(),
                file_name: file_name.to_string(),
                name,
                line,
                col,
                request,
                expect,
            });
        }
    }
    if cx.errors.is_empty() {
        Ok(cases)
    } else {
        Err(cx.errors)
    }
}

/// An authorize body, read with the API's own reader.
fn authorize(cx: &mut Cx<'_>, a: &Spanned<toml::Value>) -> Option<Request> {
    let at = a.span().start;
    let body = toml_to_json(a.get_ref());
    if !body.is_object() {
        cx.err(at, "authorize: must be a table (the /v2/authorize body)");
        return None;
    }
    let typed: AuthorizeRequest = match crate::http::typed(&body) {
        Ok(t) => t,
        Err(e) => {
            cx.err(at, format!("authorize: {e}"));
            return None;
        }
    };
    match typed.into_input() {
        Ok((_, input)) => Some(Request::Authorize { input, body }),
        Err(e) => {
            cx.err(at, format!("authorize: {e}"));
            None
        }
    }
}

/// An HTTP request, checked for shape (the proxy's reader runs later).
fn http(cx: &mut Cx<'_>, h: &Spanned<FileHttp>) -> Option<Request> {
    let h = h.get_ref();
    let before = cx.errors.len();
    let method = h.method.get_ref().to_ascii_uppercase();
    if Method::from_bytes(method.as_bytes()).is_err() {
        cx.err(
            h.method.span().start,
            format!(
                "http.method: {:?} is not an HTTP method",
                h.method.get_ref()
            ),
        );
    }
    let target = h.path.get_ref().clone();
    if !target.starts_with('/') || target.parse::<http::Uri>().is_err() {
        cx.err(
            h.path.span().start,
            format!("http.path: {target:?} is not a request target like /api/orders/1?x=y"),
        );
    }
    let mut headers = HeaderMap::new();
    for (k, v) in &h.headers {
        let Ok(name) = HeaderName::from_bytes(k.get_ref().as_bytes()) else {
            cx.err(
                k.span().start,
                format!("http.headers: {:?} is not a header name", k.get_ref()),
            );
            continue;
        };
        let Ok(value) = HeaderValue::from_str(v.get_ref()) else {
            cx.err(
                v.span().start,
                format!("http.headers.{}: not a valid header value", k.get_ref()),
            );
            continue;
        };
        if headers.contains_key(&name) {
            cx.err(
                k.span().start,
                format!("http.headers: {:?} is given twice", k.get_ref()),
            );
        }
        headers.append(name, value);
    }
    let body = match (&h.body, &h.json) {
        (Some(_), Some(j)) => {
            cx.err(
                j.span().start,
                "http: give body (raw text) or json, not both",
            );
            Vec::new()
        }
        (Some(b), None) => b.get_ref().as_bytes().to_vec(),
        (None, Some(j)) => {
            // A json table is sent as JSON, with that media type unless
            // the case says otherwise.
            if !headers.contains_key(http::header::CONTENT_TYPE) {
                headers.insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
            }
            toml_to_json(j.get_ref()).to_string().into_bytes()
        }
        (None, None) => Vec::new(),
    };
    (cx.errors.len() == before).then_some(Request::Http(HttpRequest {
        method,
        target,
        headers,
        body,
    }))
}

fn expect(cx: &mut Cx<'_>, e: &Spanned<FileExpect>, is_http: bool) -> Option<Expect> {
    let e = e.get_ref();
    let before = cx.errors.len();
    let decisions: &[&str] = if is_http {
        &["allow", "deny", "needs_review", "not_gated"]
    } else {
        &["allow", "deny", "needs_review"]
    };
    let one_of = |cx: &mut Cx<'_>, key: &str, v: &Spanned<String>, allowed: &[&str]| {
        if !allowed.contains(&v.get_ref().as_str()) {
            cx.err(
                v.span().start,
                format!(
                    "expect.{key}: unknown value {:?} ({})",
                    v.get_ref(),
                    allowed.join(", ")
                ),
            );
        }
    };
    one_of(cx, "decision", &e.decision, decisions);
    if let Some(w) = &e.would_decide {
        one_of(cx, "would_decide", w, &["allow", "deny", "needs_review"]);
    }
    if let Some(r) = &e.reason {
        let mut reasons: Vec<&str> = DecisionReason::ALL.iter().map(|r| r.as_str()).collect();
        if is_http {
            reasons.push(UNMATCHED_ROUTE);
        }
        one_of(cx, "reason", r, &reasons);
    }
    if let (Some(r), false) = (&e.route, is_http) {
        cx.err(
            r.span().start,
            "expect.route: only an http case reaches a route",
        );
    }
    (cx.errors.len() == before).then(|| Expect {
        decision: e.decision.get_ref().clone(),
        reason: e.reason.as_ref().map(|r| r.get_ref().clone()),
        rules: e.rules.clone(),
        would_decide: e.would_decide.as_ref().map(|w| w.get_ref().clone()),
        route: e.route.as_ref().map(|r| r.get_ref().clone()),
    })
}

/// Reads an authorize body from JSON text (`verdict explain FILE.json`);
/// errors name the line and column.
pub fn authorize_json(file: &str, text: &str) -> Result<Case, Vec<FileError>> {
    let at = |line: usize, col: usize, message: String| {
        vec![FileError {
            file: file.to_string(),
            line: line.max(1),
            col: col.max(1),
            message,
        }]
    };
    let body: Value =
        serde_json::from_str(text).map_err(|e| at(e.line(), e.column(), e.to_string()))?;
    let typed: AuthorizeRequest = crate::http::typed(&body).map_err(|e| at(1, 1, e.to_string()))?;
    let (_, input) = typed.into_input().map_err(|e| at(1, 1, e.to_string()))?;
    let file_name = std::path::Path::new(file)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(file)
        .to_string();
    Ok(Case {
        file: file.to_string(),
        file_name,
        name: "authorize request".into(),
        line: 1,
        col: 1,
        request: Request::Authorize { input, body },
        expect: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<String> {
        match parse("t.test.toml", "t.test.toml", text) {
            Ok(c) => panic!("expected errors, got {} cases", c.len()),
            Err(e) => e.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn a_case_of_each_kind_reads() {
        let cases = parse(
            "t.test.toml",
            "t.test.toml",
            r#"
[[case]]
name = "api"
authorize = { action = { type = "refund.create", params = { amount = 100 } }, claims = ["x"] }
expect = { decision = "allow", rules = [] }

[[case]]
name = "proxy"
http = { method = "post", path = "/a/1?x=y", headers = { X-Customer-Id = "C-1" }, json = { amount = 5 } }
expect = { decision = "not_gated" }
"#,
        )
        .expect("valid");
        assert_eq!(cases.len(), 2);
        assert_eq!((cases[0].line, cases[0].col), (3, 8));
        let Request::Authorize { input, .. } = &cases[0].request else {
            panic!("authorize");
        };
        assert_eq!(input.action_type, "refund.create");
        assert_eq!(input.params["amount"], 100);
        let Request::Http(h) = &cases[1].request else {
            panic!("http");
        };
        assert_eq!(h.method, "POST");
        assert_eq!(h.headers["content-type"], "application/json");
        assert_eq!(h.headers["x-customer-id"], "C-1");
        assert_eq!(h.body, br#"{"amount":5}"#);
        assert_eq!(
            cases[1].expect.as_ref().map(|e| e.decision.as_str()),
            Some("not_gated")
        );
    }

    #[test]
    fn problems_name_their_line_and_column() {
        let e = errors(
            "[[case]]\nname = \"a\"\nauthorize = { action = { type = \"x\" } }\nexpect = { decision = \"allw\" }\n",
        );
        assert_eq!(
            e,
            ["t.test.toml:4:23: expect.decision: unknown value \"allw\" (allow, deny, needs_review)"]
        );
        let e = errors("[[case]]\nname = \"a\"\nauthorize = { actoin = { type = \"x\" } }\n");
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("t.test.toml:3:13: authorize: "), "{e:?}");
        let e = errors("[[case]]\nname = \"a\"\nexpekt = 1\n");
        assert!(
            e[0].starts_with("t.test.toml:3:1: unknown field `expekt`"),
            "{e:?}"
        );
        let e = errors(
            "[[case]]\nname = \"a\"\nhttp = { method = \"GET\", path = \"x\" }\n[[case]]\nname = \"a\"\n",
        );
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(e[0].starts_with("t.test.toml:3:"), "{e:?}");
        assert!(e[1].contains("duplicate case name"), "{e:?}");
        assert!(e[2].contains("needs a request"), "{e:?}");
        let e = errors(
            "[[case]]\nname = \"a\"\nauthorize = { action = { type = \"x\" }, requirements = { min_coverage = 2.0 } }\n",
        );
        assert!(e[0].contains("outside 0.0..=1.0"), "{e:?}");
        let e = errors(
            "[[case]]\nname = \"a\"\nauthorize = { action = { type = \"x\" } }\nexpect = { decision = \"not_gated\" }\n",
        );
        assert!(e[0].contains("unknown value \"not_gated\""), "{e:?}");
    }
}
