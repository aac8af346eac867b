//! The review console: the web page on which a person resolves held calls.
//!
//! `hold` exists for people who approve refunds, not for people who write
//! `curl`, so the API listener also serves `/console/`: server-rendered
//! pages with plain forms (no JavaScript), behind a sign-in with an API key
//! that has the `review` scope. It is a second door onto the same review
//! path as the Review API: the same single-use resolution, audited before it
//! takes effect (`super::reviews::resolve`), and the same refusal without a
//! keys file. Every response carries a strict Content-Security-Policy and
//! `no-store`; every form carries a CSRF token; held bodies are hostile input
//! and are only ever rendered as escaped text.

mod pages;
mod session;

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crate::server::ReqBody;
use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, LOCATION, SET_COOKIE};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use maud::Markup;

use crate::http::auth::{AuthMode, Principal, Scope};
use crate::http::error::ApiError;
use crate::http::{full, RespBody};
use crate::review::{ReviewStatus, Viewer};
use crate::runtime::App;
use pages::{Filter, Flash, Nav, QueueRow, Tab};
use session::{Session, Sessions, COOKIE, SIGNIN_COOKIE};

/// The largest form body the console reads.
const MAX_FORM_BYTES: usize = 64 * 1024;
/// The most reviews one queue page lists.
const QUEUE_LIMIT: usize = 200;
/// How long the sign-in form's double-submit cookie lives.
const SIGNIN_FORM_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

const CSS: &str = include_str!("console/console.css");

/// The security headers of every console response.
const SECURITY_HEADERS: [(&str, &str); 6] = [
    (
        "content-security-policy",
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
    ("x-content-type-options", "nosniff"),
    ("cross-origin-opener-policy", "same-origin"),
];

/// The console of one API listener.
pub struct Console {
    app: Arc<App>,
    sessions: Sessions,
    /// Whether the listener has TLS (cookies are then `Secure`).
    secure: bool,
}

/// A signed-in request.
struct SignedIn {
    id: String,
    session: Session,
    principal: Principal,
}

impl SignedIn {
    fn nav(&self) -> Nav<'_> {
        Nav {
            csrf: &self.session.csrf,
            key_name: &self.principal.name,
        }
    }
}

impl Console {
    pub fn new(app: Arc<App>) -> Console {
        let secure = app.config.api.tls.is_some();
        let sessions = Sessions::new(app.config.console_session_ttl);
        Console {
            app,
            sessions,
            secure,
        }
    }

    /// Whether a path belongs to the console.
    pub fn owns(path: &str) -> bool {
        path == "/console" || path.starts_with("/console/")
    }

    /// Serves one console request; never fails (errors are pages).
    pub async fn handle(&self, req: Request<ReqBody>, request_id: &str) -> Response<RespBody> {
        let mut resp = self.route(req, request_id).await;
        let headers = resp.headers_mut();
        for (name, value) in SECURITY_HEADERS {
            headers.insert(name, HeaderValue::from_static(value));
        }
        resp
    }

    async fn route(&self, req: Request<ReqBody>, request_id: &str) -> Response<RespBody> {
        if self.app.keys.mode() == AuthMode::Open {
            let e = ApiError::ReviewsNeedKeys;
            return page(
                e.status(),
                pages::message(
                    "The console is off",
                    "The review console needs a keys file: without one every caller on this \
                     host, the gated app included, would be an anonymous reviewer. Start verdict \
                     with --keys (see `verdict keys new --scopes review`).",
                    None,
                ),
            );
        }
        let path = req.uri().path().to_string();
        let method = req.method().clone();
        match (&method, path.as_str()) {
            (&Method::GET, "/console" | "/console/") => return redirect("/console/reviews"),
            (&Method::GET, "/console/console.css") => return css(),
            (&Method::GET, "/console/signin") => return self.signin_form(None, StatusCode::OK),
            (&Method::POST, "/console/signin") => return self.signin(req, request_id).await,
            _ => {}
        }
        let Some(me) = self.signed_in(req.headers()) else {
            return redirect("/console/signin");
        };
        let segments: Vec<&str> = path.trim_start_matches("/console/").split('/').collect();
        let result = match (&method, segments.as_slice()) {
            (&Method::POST, ["signout"]) => self.signout(req, &me).await,
            (&Method::GET, ["reviews"]) => self.queue(req.uri().query(), &me).await,
            (&Method::GET, ["reviews", id]) => self.detail(id, req.uri().query(), &me).await,
            (&Method::POST, ["reviews", id, "resolve"]) => {
                self.resolve(req, id, &me, request_id).await
            }
            (&Method::GET, ["audit", id]) => self.audit(id, &me).await,
            _ => Err(ApiError::NotFound(format!("no console page {path}"))),
        };
        result.unwrap_or_else(|e| error_page(&e, request_id, Some(&me.nav())))
    }

    /// The session of the request, if its cookie names a live one whose key
    /// still has the `review` scope.
    fn signed_in(&self, headers: &HeaderMap) -> Option<SignedIn> {
        let id = session::cookie(headers, COOKIE)?;
        let session = self.sessions.get(id, Instant::now())?;
        let bearer = format!("Bearer {}", session.key);
        match self
            .app
            .keys
            .authenticate(Some(&bearer), Some(Scope::Review))
        {
            Ok(principal) => Some(SignedIn {
                id: id.to_string(),
                session,
                principal,
            }),
            Err(_) => {
                // The key was removed or lost the scope: the session ends.
                self.sessions.end(id);
                None
            }
        }
    }

    fn signin_form(&self, message: Option<&str>, status: StatusCode) -> Response<RespBody> {
        let Some(token) = self.sessions.token() else {
            return error_page(&ApiError::Internal("no randomness".into()), "", None);
        };
        let mut resp = page(status, pages::signin(&token, message));
        set_cookie(
            &mut resp,
            &session::set_cookie(SIGNIN_COOKIE, &token, SIGNIN_FORM_TTL, self.secure),
        );
        resp
    }

    async fn signin(&self, req: Request<ReqBody>, request_id: &str) -> Response<RespBody> {
        let expected = session::cookie(req.headers(), SIGNIN_COOKIE)
            .unwrap_or_default()
            .to_string();
        let form = match read_form(req).await {
            Ok(f) => f,
            Err(e) => return error_page(&e, request_id, None),
        };
        if !session::tokens_match(&expected, form.get("csrf")) {
            return csrf_refused(None);
        }
        let key = form.get("key").unwrap_or_default().trim().to_string();
        let bearer = format!("Bearer {key}");
        match self
            .app
            .keys
            .authenticate(Some(&bearer), Some(Scope::Review))
        {
            Ok(principal) => {
                let Some(id) = self.sessions.start(key, Instant::now()) else {
                    return error_page(
                        &ApiError::Internal("no randomness".into()),
                        request_id,
                        None,
                    );
                };
                tracing::info!(key = %principal.name, "console sign-in");
                let mut resp = redirect("/console/reviews");
                set_cookie(
                    &mut resp,
                    &session::set_cookie(COOKIE, &id, self.sessions.ttl(), self.secure),
                );
                set_cookie(
                    &mut resp,
                    &session::set_cookie(SIGNIN_COOKIE, "", std::time::Duration::ZERO, self.secure),
                );
                resp
            }
            Err(crate::http::auth::AuthFailure::MissingScope(_)) => self.signin_form(
                Some("This key does not have the review scope."),
                StatusCode::FORBIDDEN,
            ),
            Err(crate::http::auth::AuthFailure::Unauthenticated) => {
                self.signin_form(Some("Unknown key."), StatusCode::UNAUTHORIZED)
            }
        }
    }

    async fn signout(
        &self,
        req: Request<ReqBody>,
        me: &SignedIn,
    ) -> Result<Response<RespBody>, ApiError> {
        let form = read_form(req).await?;
        if !session::tokens_match(&me.session.csrf, form.get("csrf")) {
            return Ok(csrf_refused(Some(&me.nav())));
        }
        self.sessions.end(&me.id);
        let mut resp = redirect("/console/signin");
        set_cookie(
            &mut resp,
            &session::set_cookie(COOKIE, "", std::time::Duration::ZERO, self.secure),
        );
        Ok(resp)
    }

    fn viewer(me: &SignedIn) -> Viewer {
        super::reviews::viewer(&me.principal)
    }

    async fn queue(
        &self,
        query: Option<&str>,
        me: &SignedIn,
    ) -> Result<Response<RespBody>, ApiError> {
        let q = Query::parse(query);
        let tab = if q.get("tab") == Some("resolved") {
            Tab::Resolved
        } else {
            Tab::Pending
        };
        let filter = Filter {
            route: q.get("route").filter(|s| !s.is_empty()).map(str::to_string),
            action: q
                .get("action")
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        };
        let viewer = Self::viewer(me);
        // Each state asked for by name: a list of every state would fill
        // its limit with pending reviews and leave the resolved tab empty.
        let states: &[ReviewStatus] = match tab {
            Tab::Pending => &[ReviewStatus::Pending],
            Tab::Resolved => &[
                ReviewStatus::Approved,
                ReviewStatus::Rejected,
                ReviewStatus::Expired,
            ],
        };
        let mut all = Vec::new();
        for status in states {
            all.extend(
                self.app
                    .reviews
                    .list(Some(*status), &viewer, QUEUE_LIMIT)
                    .await?,
            );
        }
        if tab == Tab::Resolved {
            // Newest resolution first, across the three states.
            all.sort_by_key(|v| std::cmp::Reverse(v.resolved_at));
            all.truncate(QUEUE_LIMIT);
        }
        let mut routes: Vec<String> = all.iter().map(|v| v.route.clone()).collect();
        let mut actions: Vec<String> = all.iter().map(|v| v.action.clone()).collect();
        for list in [&mut routes, &mut actions] {
            list.sort();
            list.dedup();
        }
        let shown: Vec<_> = all
            .into_iter()
            .filter(|v| {
                filter.route.as_ref().is_none_or(|r| *r == v.route)
                    && filter.action.as_ref().is_none_or(|a| *a == v.action)
            })
            .collect();
        let mut details = self.app.reviews.details(&shown).await?;
        let rows: Vec<QueueRow> = shown
            .into_iter()
            .map(|view| {
                let params = details
                    .remove(&view.review_id)
                    .and_then(|mut d| d.get_mut("params").map(serde_json::Value::take));
                QueueRow { view, params }
            })
            .collect();
        let html = pages::queue(
            &me.nav(),
            tab,
            &rows,
            (&routes, &actions),
            &filter,
            SystemTime::now(),
        );
        Ok(page(StatusCode::OK, html))
    }

    async fn detail(
        &self,
        id: &str,
        query: Option<&str>,
        me: &SignedIn,
    ) -> Result<Response<RespBody>, ApiError> {
        let flash = match Query::parse(query).get("resolved") {
            Some("approved") => Some(Flash::Resolved("approved")),
            Some("rejected") => Some(Flash::Resolved("rejected")),
            Some("approval_recorded") => Some(Flash::Recorded),
            _ => None,
        };
        self.review_page(id, me, flash, StatusCode::OK).await
    }

    /// A review's page, with a flash line and under a status.
    async fn review_page(
        &self,
        id: &str,
        me: &SignedIn,
        flash: Option<Flash<'_>>,
        status: StatusCode,
    ) -> Result<Response<RespBody>, ApiError> {
        let inspection = self
            .app
            .reviews
            .inspect(id, &Self::viewer(me))
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("no review {id}")))?;
        let pending = inspection.view.status == ReviewStatus::Pending;
        let html = pages::detail(&me.nav(), &inspection, flash, pending, SystemTime::now());
        Ok(page(status, html))
    }

    async fn resolve(
        &self,
        req: Request<ReqBody>,
        id: &str,
        me: &SignedIn,
        request_id: &str,
    ) -> Result<Response<RespBody>, ApiError> {
        let form = read_form(req).await?;
        if !session::tokens_match(&me.session.csrf, form.get("csrf")) {
            return Ok(csrf_refused(Some(&me.nav())));
        }
        let approve = match form.get("decision") {
            Some("approve") => true,
            Some("reject") => false,
            _ => return Err(ApiError::BadRequest("decision: approve or reject".into())),
        };
        let note = form.get("note").unwrap_or_default().trim().to_string();
        if note.is_empty() || note.len() > super::reviews::MAX_NOTE_BYTES {
            let why = "A note is required (at most 4096 bytes).";
            return self
                .review_page(
                    id,
                    me,
                    Some(Flash::Refused(why)),
                    StatusCode::UNPROCESSABLE_ENTITY,
                )
                .await;
        }
        let request_hash = crate::http::canonical_hash(&serde_json::json!({
            "decision": if approve { "approve" } else { "reject" },
            "note": note,
            "review_id": id,
        }))?;
        let r = super::reviews::Resolve {
            id,
            approve,
            reviewer: &me.principal.name,
            note: Some(note),
            request_hash,
        };
        match super::reviews::resolve(
            &self.app.reviews,
            &self.app.audit,
            &me.principal,
            request_id,
            r,
        )
        .await
        {
            Ok(view) => redirect_ok(&format!(
                "/console/reviews/{id}?resolved={}",
                match (approve, view.status) {
                    (true, ReviewStatus::Pending) => "approval_recorded",
                    (true, _) => "approved",
                    (false, _) => "rejected",
                }
            )),
            Err(e @ (ApiError::Refused(_) | ApiError::Conflict(_))) => {
                let why = match &e {
                    ApiError::Conflict(why) => {
                        format!("Not resolved: {why}. Someone (or another tab) got there first.")
                    }
                    other => format!("Not resolved: {other}."),
                };
                self.review_page(id, me, Some(Flash::Refused(&why)), e.status())
                    .await
            }
            Err(e) => Err(e),
        }
    }

    /// An audit record and its inclusion proof, for a key that also has the
    /// `audit` scope.
    async fn audit(&self, id: &str, me: &SignedIn) -> Result<Response<RespBody>, ApiError> {
        if !me.principal.has(Scope::Audit) {
            return Err(ApiError::Forbidden(Scope::Audit.as_str()));
        }
        let not_found = || ApiError::NotFound(format!("no audit record {id}"));
        let uuid = uuid::Uuid::parse_str(id).map_err(|_| not_found())?;
        let record = self.app.audit.record(uuid).await?.ok_or_else(not_found)?;
        let proof = self.app.audit.proof(uuid).await?.ok_or_else(not_found)?;
        let pretty = |s: &str| {
            serde_json::from_str::<serde_json::Value>(s)
                .ok()
                .and_then(|v| serde_json::to_string_pretty(&v).ok())
                .unwrap_or_else(|| s.to_string())
        };
        let html = pages::layout(
            "Audit record",
            Some(&me.nav()),
            None,
            maud::html! {
                h1 { "Audit record " code { (id) } }
                p { "The record as stored (canonical JSON) and its inclusion proof in the signed \
                     log. Verify it offline with " code { "verdict audit verify-proof" } "." }
                h2 { "Record" }
                pre.body { (pretty(&record.canonical)) }
                h2 { "Inclusion proof" }
                pre.body { (pretty(&proof.to_json())) }
            },
        );
        Ok(page(StatusCode::OK, html))
    }
}

/// A query string or form body, decoded; the first value of a name wins.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(query: Option<&str>) -> Query {
        Query::from_bytes(query.unwrap_or("").as_bytes())
    }

    fn from_bytes(bytes: &[u8]) -> Query {
        Query(
            form_urlencoded::parse(bytes)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads an `application/x-www-form-urlencoded` body (415 otherwise, 413
/// over [`MAX_FORM_BYTES`]).
async fn read_form(req: Request<ReqBody>) -> Result<Query, ApiError> {
    let (parts, body) = req.into_parts();
    let form = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| {
            v.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    if !form {
        return Err(ApiError::UnsupportedMediaType);
    }
    let bytes: Bytes = crate::http::read_body(&parts.headers, body, MAX_FORM_BYTES).await?;
    Ok(Query::from_bytes(&bytes))
}

fn page(status: StatusCode, html: Markup) -> Response<RespBody> {
    let mut resp = Response::new(full(html.into_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    resp
}

fn error_page(e: &ApiError, request_id: &str, nav: Option<&Nav<'_>>) -> Response<RespBody> {
    let status = e.status();
    let title = status.canonical_reason().unwrap_or("Error");
    page(
        status,
        pages::message(title, &e.public_message(request_id), nav),
    )
}

fn csrf_refused(nav: Option<&Nav<'_>>) -> Response<RespBody> {
    page(
        StatusCode::FORBIDDEN,
        pages::message(
            "Form expired",
            "This form's security token is missing or stale. Go back, reload the page and try again.",
            nav,
        ),
    )
}

/// `303 See Other` to a console path.
fn redirect(to: &'static str) -> Response<RespBody> {
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = StatusCode::SEE_OTHER;
    resp.headers_mut()
        .insert(LOCATION, HeaderValue::from_static(to));
    resp
}

fn redirect_ok(to: &str) -> Result<Response<RespBody>, ApiError> {
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = StatusCode::SEE_OTHER;
    let v = HeaderValue::from_str(to)
        .map_err(|_| ApiError::BadRequest("review id: not a valid path segment".into()))?;
    resp.headers_mut().insert(LOCATION, v);
    Ok(resp)
}

fn css() -> Response<RespBody> {
    let mut resp = Response::new(full(CSS));
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/css; charset=utf-8"),
    );
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn set_cookie(resp: &mut Response<RespBody>, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().append(SET_COOKIE, v);
    }
}
