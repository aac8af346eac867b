//! The review console over real HTTP: sign-in and sessions, CSRF, the
//! security headers, the queue and detail pages of a held call, resolving
//! it (once), held bodies rendered inert, and a record-only review approved
//! with nothing to forward.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::time::Duration;

use http::Method;
use support::{MockUpstream, Resp, TestServer, APP_KEY, REVIEW_KEY, VERIFY_ONLY_KEY};

const SECURITY_HEADERS: [&str; 4] = [
    "content-security-policy",
    "x-frame-options",
    "referrer-policy",
    "cache-control",
];

/// A browser in miniature: keeps cookies, posts forms.
struct Browser<'a> {
    s: &'a TestServer,
    cookies: Vec<(String, String)>,
}

impl<'a> Browser<'a> {
    fn new(s: &'a TestServer) -> Browser<'a> {
        Browser {
            s,
            cookies: Vec::new(),
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn absorb(&mut self, r: &Resp) {
        for v in r.headers.get_all("set-cookie") {
            let v = v.to_str().unwrap();
            let (pair, _) = v.split_once(';').unwrap_or((v, ""));
            let (k, val) = pair.split_once('=').unwrap();
            self.cookies.retain(|(n, _)| n != k);
            if !val.is_empty() && !v.contains("Max-Age=0") {
                self.cookies.push((k.to_string(), val.to_string()));
            }
        }
    }

    async fn get(&mut self, path: &str) -> Resp {
        let cookie = self.cookie_header();
        let r = self
            .s
            .send(Method::GET, path, &[("cookie", cookie.as_str())], "")
            .await;
        assert_security_headers(&r, path);
        self.absorb(&r);
        r
    }

    async fn post(&mut self, path: &str, fields: &[(&str, &str)]) -> Resp {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let cookie = self.cookie_header();
        let r = self
            .s
            .send(
                Method::POST,
                path,
                &[
                    ("cookie", cookie.as_str()),
                    ("content-type", "application/x-www-form-urlencoded"),
                ],
                body,
            )
            .await;
        assert_security_headers(&r, path);
        self.absorb(&r);
        r
    }

    async fn sign_in(&mut self, key: &str) -> Resp {
        let form = self.get("/console/signin").await;
        assert_eq!(form.status, 200);
        let csrf = csrf(&form.text());
        self.post("/console/signin", &[("csrf", &csrf), ("key", key)])
            .await
    }
}

fn assert_security_headers(r: &Resp, path: &str) {
    for h in SECURITY_HEADERS {
        assert!(r.header(h).is_some(), "{path}: no {h}");
    }
    let csp = r.header("content-security-policy").unwrap();
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
}

/// The CSRF token of the first form on a page.
fn csrf(html: &str) -> String {
    let at = html.find(r#"name="csrf" value=""#).expect("a csrf field");
    let rest = &html[at + r#"name="csrf" value=""#.len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

async fn server(upstream: &MockUpstream) -> TestServer {
    let url = upstream.url();
    TestServer::start_with(|c| {
        // Balanced mode: a contradicted claim is held for review, not
        // denied, so the console has a conflict to show.
        let policy = support::RefundPolicy::new("balanced").hold("100ms").build();
        std::fs::write(c.policies_dir.join("refunds.toml"), policy).unwrap();
        c.proxy.upstream = Some(url);
        c.limits.max_body_bytes = 8 << 20;
    })
    .await
}

/// Sends a refund through the proxy; it is held (202) and its review id
/// returned.
async fn held_refund(s: &TestServer, claim: &str, extra: &str) -> String {
    let proxy = format!("http://{}", s.running.as_ref().unwrap().proxy_addr.unwrap());
    held_refund_at(proxy, claim.to_string(), extra.to_string()).await
}

/// [`held_refund`] through the proxy at `proxy`, for spawned tasks.
async fn held_refund_at(proxy: String, claim: String, extra: String) -> String {
    let body = serde_json::json!({
        "amount": 120,
        "claims": [claim],
        "evidence": [{"source_id": "ticket", "text": "The refund was approved by the manager on 3 March."}],
        "extra": extra,
    })
    .to_string();
    let r = support::call(
        &proxy,
        Method::POST,
        "/api/orders/77/refunds",
        &[("content-type", "application/json")],
        body,
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.text());
    r.json()["review_id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn every_page_needs_a_session_and_only_a_review_key_gets_one() {
    let up = MockUpstream::start().await;
    let s = server(&up).await;
    let mut b = Browser::new(&s);
    for path in [
        "/console/",
        "/console/reviews",
        "/console/reviews?tab=resolved",
        "/console/reviews/0b8d6e0e-0000-4000-8000-000000000000",
        "/console/audit/0b8d6e0e-0000-4000-8000-000000000000",
    ] {
        let r = b.get(path).await;
        assert_eq!(r.status, 303, "{path}");
        let to = r.header("location").unwrap();
        assert!(
            to == "/console/signin" || to == "/console/reviews",
            "{path} -> {to}"
        );
    }
    let r = b
        .post("/console/reviews/x/resolve", &[("decision", "approve")])
        .await;
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("/console/signin"))
    );

    // The sign-in form itself carries a token: without it, 403.
    let r = b.post("/console/signin", &[("key", REVIEW_KEY)]).await;
    assert_eq!(r.status, 403, "{}", r.text());
    // Keys without the review scope, and unknown keys, get no session.
    let r = b.sign_in(VERIFY_ONLY_KEY).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("does not have the review scope"));
    assert!(r
        .headers
        .get_all("set-cookie")
        .iter()
        .all(|c| !c.to_str().unwrap().starts_with("verdict_console=")));
    assert_eq!(b.sign_in(APP_KEY).await.status, 403);
    assert_eq!(b.sign_in("not-a-key").await.status, 401);
    assert_eq!(b.get("/console/reviews").await.status, 303);

    let r = b.sign_in(REVIEW_KEY).await;
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("/console/reviews"))
    );
    let cookie = r
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|c| c.to_str().unwrap().to_string())
        .find(|c| c.starts_with("verdict_console="))
        .unwrap();
    for attr in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=28800",
    ] {
        assert!(cookie.contains(attr), "{cookie}");
    }
    assert!(
        !cookie.contains("Secure"),
        "no TLS on this listener: {cookie}"
    );
    let q = b.get("/console/reviews").await;
    assert_eq!(q.status, 200);
    assert!(q.text().contains("signed in as <strong>reviewer</strong>"));
    let css = b.get("/console/console.css").await;
    assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));

    // Sign-out needs the token too, then ends the session.
    let token = csrf(&q.text());
    assert_eq!(b.post("/console/signout", &[]).await.status, 403);
    assert_eq!(b.get("/console/reviews").await.status, 200);
    let r = b.post("/console/signout", &[("csrf", &token)]).await;
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("/console/signin"))
    );
    assert_eq!(b.get("/console/reviews").await.status, 303);
}

#[tokio::test]
async fn a_reviewer_sees_the_conflict_resolves_once_and_sees_the_upstream_answer() {
    let up = MockUpstream::start().await;
    let s = server(&up).await;
    let id = held_refund(&s, "The refund was denied.", "").await;
    let mut b = Browser::new(&s);
    b.sign_in(REVIEW_KEY).await;

    let q = b.get("/console/reviews").await.text();
    assert!(q.contains(&format!("/console/reviews/{id}")), "{q}");
    assert!(q.contains("create-refund") && q.contains("refund.create"));
    assert!(q.contains("amount</code>=120"), "the key params: {q}");
    assert!(
        q.contains(r#"http-equiv="refresh""#),
        "the pending queue refreshes itself"
    );
    // Filters.
    let none = b.get("/console/reviews?route=other").await.text();
    assert!(!none.contains(&format!("/console/reviews/{id}")));
    assert!(b
        .get("/console/reviews?tab=resolved")
        .await
        .text()
        .contains("Nothing here."));

    let d = b.get(&format!("/console/reviews/{id}")).await;
    assert_eq!(d.status, 200);
    let d = d.text();
    assert!(
        d.contains(r#"<mark class="conflict">denied</mark>"#),
        "claim span: {d}"
    );
    assert!(
        d.contains(r#"<mark class="conflict">approved</mark>"#),
        "evidence span: {d}"
    );
    assert!(d.contains("status_conflict"));
    assert!(d.contains("POST /api/orders/77/refunds"));
    let token = csrf(&d);

    // No token: 403, nothing resolved. No note: refused, still pending.
    let resolve = format!("/console/reviews/{id}/resolve");
    let r = b
        .post(&resolve, &[("decision", "approve"), ("note", "ok")])
        .await;
    assert_eq!(r.status, 403);
    let r = b
        .post(
            &resolve,
            &[("csrf", &token), ("decision", "approve"), ("note", " ")],
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(up.count(), 0);

    let r = b
        .post(
            &resolve,
            &[
                ("csrf", &token),
                ("decision", "approve"),
                ("note", "checked the ticket"),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.text());
    let back = r.header("location").unwrap().to_string();
    assert_eq!(back, format!("/console/reviews/{id}?resolved=approved"));
    let page = {
        // The browser's cookie jar needs `&mut`; each look borrows it in turn.
        let browser = tokio::sync::Mutex::new(&mut b);
        support::eventually(
            "the approved call's upstream status on the page",
            Duration::from_secs(5),
            || async {
                let page = browser.lock().await.get(&back).await.text();
                if page.contains("upstream-status") {
                    Ok(page)
                } else {
                    Err("no upstream status yet")
                }
            },
        )
        .await
    };
    assert!(page.contains("You approved this review."), "{page}");
    assert!(
        page.contains(r#"<strong class="upstream-status">200</strong>"#),
        "{page}"
    );
    assert_eq!(up.count(), 1);

    // A second tab's approve of the same review: refused, clearly, once.
    let r = b
        .post(
            &resolve,
            &[("csrf", &token), ("decision", "approve"), ("note", "again")],
        )
        .await;
    assert_eq!(r.status, 409);
    assert!(r.text().contains("already approved"), "{}", r.text());
    assert_eq!(up.count(), 1);

    // The resolved tab names who resolved it, and the note.
    let resolved = b.get("/console/reviews?tab=resolved").await.text();
    assert!(resolved.contains("reviewer") && resolved.contains("checked the ticket"));
    assert!(resolved.contains("upstream answered 200"));
    // The review API agrees: the console's key name is the reviewer.
    let v = s
        .get(&format!("/v2/reviews/{id}"), Some(REVIEW_KEY))
        .await
        .json();
    assert_eq!(
        (&v["status"], &v["reviewer"]),
        (
            &serde_json::json!("approved"),
            &serde_json::json!("reviewer")
        )
    );

    // The audit record behind it, for a key with the audit scope.
    let rec = v["record_id"].as_str().unwrap();
    let a = b.get(&format!("/console/audit/{rec}")).await;
    assert_eq!(a.status, 200);
    assert!(a.text().contains("Inclusion proof"));
}

#[tokio::test]
async fn a_hostile_held_body_renders_as_inert_text() {
    let up = MockUpstream::start().await;
    let s = server(&up).await;
    let evil = r#"<script>alert(1)</script>"><img src=x onerror=alert(2)>"#;
    let huge = format!("{evil}{}", "A".repeat(5 << 20));
    let id = held_refund(&s, &format!("The refund was denied {evil}."), &huge).await;
    let mut b = Browser::new(&s);
    b.sign_in(REVIEW_KEY).await;
    let detail = b.get(&format!("/console/reviews/{id}")).await.text();
    let queue = b.get("/console/reviews").await.text();
    for page in [&detail, &queue] {
        assert!(!page.contains("<script"), "{page}");
        assert!(!page.contains("<img"), "{page}");
    }
    assert!(detail.contains("&lt;script&gt;alert(1)"));
    assert!(
        detail.contains("more bytes not shown"),
        "the 5 MB body is cut"
    );
    assert!(detail.len() < 1 << 20, "page is {} bytes", detail.len());
}

#[tokio::test]
async fn the_console_is_off_without_a_keys_file() {
    let s = TestServer::start_with(|c| c.keys_file = None).await;
    let r = s.get("/console/", None).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("needs a keys file"));
    assert_security_headers(&r, "/console/");
}

/// The resolved tab lists resolved reviews even when more pending ones than
/// a page holds are newer than them.
#[tokio::test]
async fn the_resolved_tab_is_not_crowded_out_by_pending_reviews() {
    let up = MockUpstream::start().await;
    let s = server(&up).await;
    let rejected = held_refund(&s, "The refund was denied.", "first").await;
    let r = s
        .post_json(
            &format!("/v2/reviews/{rejected}/reject"),
            r#"{"reviewer":"ops","note":"no"}"#,
            Some(REVIEW_KEY),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let proxy = format!("http://{}", s.running.as_ref().unwrap().proxy_addr.unwrap());
    let mut holds = tokio::task::JoinSet::new();
    for i in 0..205 {
        let proxy = proxy.clone();
        holds.spawn(held_refund_at(
            proxy,
            "The refund was denied.".into(),
            i.to_string(),
        ));
    }
    while let Some(h) = holds.join_next().await {
        h.unwrap();
    }
    let mut b = Browser::new(&s);
    b.sign_in(REVIEW_KEY).await;
    let resolved = b.get("/console/reviews?tab=resolved").await.text();
    assert!(
        resolved.contains(&format!("/console/reviews/{rejected}")),
        "{resolved}"
    );
    let pending = b.get("/console/reviews").await.text();
    assert!(!pending.contains(&format!("/console/reviews/{rejected}")));
}

/// A record-only review (an AuthZEN `needs_review`): the console shows it
/// has no forward, its button does not promise one, and approving it
/// forwards nothing.
#[tokio::test]
async fn a_record_only_review_is_approved_with_nothing_to_forward() {
    const DELETES: &str = r#"
[[action]]
type = "delete"
require_claims = false
  [[action.rule]]
  param = "resource.id"
  op = "eq"
  value = "prod"
  effect = "review"
  message = "deleting prod needs a second pair of eyes"
"#;
    let up = MockUpstream::start().await;
    let url = up.url();
    let s = TestServer::with_policies(&[("deletes.toml", DELETES)], |c| {
        c.proxy.upstream = Some(url);
    })
    .await;
    let evaluation = serde_json::json!({
        "subject": {"type": "user", "id": "alice"},
        "action": {"name": "delete"},
        "resource": {"type": "env", "id": "prod"},
    });
    let r = s
        .post_json(
            "/access/v1/evaluation",
            &evaluation.to_string(),
            Some(APP_KEY),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.json()["context"]["review_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut b = Browser::new(&s);
    b.sign_in(REVIEW_KEY).await;
    let q = b.get("/console/reviews").await.text();
    assert!(q.contains(&format!("/console/reviews/{id}")), "{q}");
    assert!(q.contains("authzen"), "the route: {q}");

    let d = b.get(&format!("/console/reviews/{id}")).await.text();
    assert!(d.contains("POST /access/v1/evaluation"), "{d}");
    assert!(
        d.contains("none (record only: the call was answered elsewhere)"),
        "{d}"
    );
    assert!(d.contains(r#"value="approve">Approve</button>"#), "{d}");
    assert!(!d.contains("Approve and forward"), "{d}");
    let token = csrf(&d);
    let r = b
        .post(
            &format!("/console/reviews/{id}/resolve"),
            &[("csrf", &token), ("decision", "approve"), ("note", "fine")],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.text());
    let back = r.header("location").unwrap().to_string();
    let page = b.get(&back).await.text();
    assert!(page.contains("You approved this review."), "{page}");
    assert!(
        !page.contains(r#"http-equiv="refresh""#),
        "nothing to wait for: {page}"
    );
    assert!(!page.contains("Forwarding to the upstream"), "{page}");
    let resolved = b.get("/console/reviews?tab=resolved").await.text();
    assert!(
        resolved.contains("none (record only: the call was answered elsewhere)"),
        "{resolved}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.count(), 0, "an approval forwarded something");
}
