//! The console's HTML, as maud templates: every value is escaped by the
//! template engine, so a held body carrying `<script>` renders as text.
//!
//! Pages are plain documents with forms: they work with JavaScript off, and
//! the Content-Security-Policy the console sends forbids any script at all.
//! The pending queue and a forward that is still running refresh themselves
//! with `<meta http-equiv="refresh">`.

use std::time::{Duration, SystemTime};

use maud::{html, Markup, DOCTYPE};
use serde_json::Value;

use crate::review::{Inspection, ReviewStatus, ReviewView, UpstreamResponse, NO_FORWARD};

/// The most characters of a held body or upstream answer a page shows.
pub const MAX_BODY_SHOWN: usize = 64 * 1024;

/// The most characters of one header value a page shows.
const MAX_HEADER_SHOWN: usize = 512;

/// What every signed-in page needs.
pub struct Nav<'a> {
    pub csrf: &'a str,
    pub key_name: &'a str,
}

/// A whole page.
pub fn layout(title: &str, nav: Option<&Nav<'_>>, refresh: Option<u32>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(s) = refresh {
                    meta http-equiv="refresh" content=(s);
                }
                title { (title) " · verdict review" }
                link rel="stylesheet" href="/console/console.css";
            }
            body {
                header {
                    a.brand href="/console/reviews" { "verdict review" }
                    @if let Some(nav) = nav {
                        nav {
                            a href="/console/reviews?tab=pending" { "Pending" }
                            a href="/console/reviews?tab=resolved" { "Resolved" }
                            span.who { "signed in as " strong { (nav.key_name) } }
                            form method="post" action="/console/signout" {
                                input type="hidden" name="csrf" value=(nav.csrf);
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The sign-in form.
pub fn signin(csrf: &str, message: Option<&str>) -> Markup {
    layout(
        "Sign in",
        None,
        None,
        html! {
            h1 { "Sign in" }
            @if let Some(m) = message {
                p.error role="alert" { (m) }
            }
            p { "Sign in with an API key that has the " code { "review" } " scope." }
            form.signin method="post" action="/console/signin" {
                input type="hidden" name="csrf" value=(csrf);
                label for="key" { "API key" }
                input #key type="password" name="key" autocomplete="current-password" required;
                button type="submit" { "Sign in" }
            }
        },
    )
}

/// A page that only says something (403, 404, 409, ...).
pub fn message(title: &str, text: &str, nav: Option<&Nav<'_>>) -> Markup {
    layout(
        title,
        nav,
        None,
        html! {
            h1 { (title) }
            p.message role="alert" { (text) }
            p { a href="/console/reviews" { "Back to the queue" } }
        },
    )
}

/// One row of the queue.
pub struct QueueRow {
    pub view: ReviewView,
    /// The action params as the decision's record holds them (redacted).
    pub params: Option<Value>,
}

/// Which part of the queue a page shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Pending,
    Resolved,
}

/// The queue's filters, as the query string gave them.
#[derive(Debug, Default)]
pub struct Filter {
    pub route: Option<String>,
    pub action: Option<String>,
}

/// The queue: pending reviews oldest first, or resolved ones newest first.
pub fn queue(
    nav: &Nav<'_>,
    tab: Tab,
    rows: &[QueueRow],
    choices: (&[String], &[String]),
    filter: &Filter,
    now: SystemTime,
) -> Markup {
    let (routes, actions) = choices;
    let tab_name = match tab {
        Tab::Pending => "pending",
        Tab::Resolved => "resolved",
    };
    let body = html! {
        h1 { @if tab == Tab::Pending { "Pending reviews" } @else { "Resolved reviews" } }
        form.filters method="get" action="/console/reviews" {
            input type="hidden" name="tab" value=(tab_name);
            label { "Route "
                select name="route" {
                    option value="" { "any" }
                    @for r in routes {
                        option value=(r) selected[filter.route.as_deref() == Some(r.as_str())] { (r) }
                    }
                }
            }
            label { "Action "
                select name="action" {
                    option value="" { "any" }
                    @for a in actions {
                        option value=(a) selected[filter.action.as_deref() == Some(a.as_str())] { (a) }
                    }
                }
            }
            button type="submit" { "Filter" }
        }
        @if rows.is_empty() {
            p.empty { "Nothing here." }
        } @else {
            table.queue {
                thead { tr {
                    th { "Review" } th { "Route" } th { "Action" } th { "Params" } th { "Why" }
                    @if tab == Tab::Pending { th { "Age" } th { "Expires in" } }
                    @else { th { "Outcome" } th { "Resolved by" } th { "When" } th { "Note" } th { "Forward" } }
                } }
                tbody {
                    @for row in rows {
                        @let v = &row.view;
                        tr {
                            td { a href={ "/console/reviews/" (v.review_id) } { (short_id(&v.review_id)) } }
                            td { (v.route) }
                            td { code { (v.action) } }
                            td { (params_line(row.params.as_ref())) }
                            td { (reasons(v)) }
                            @if tab == Tab::Pending {
                                td { (age(v.created_at, now)) }
                                td { (left(v.expires_at, now)) }
                            } @else {
                                td { span class={ "status " (v.status.as_str()) } { (v.status.as_str()) } }
                                td { (v.reviewer.as_deref().unwrap_or("—")) }
                                td { (v.resolved_at.map(crate::support::time::rfc3339).unwrap_or_default()) }
                                td.note { (v.note.as_deref().unwrap_or("")) }
                                td { (forward_text(v)) }
                            }
                        }
                    }
                }
            }
        }
    };
    layout(
        if tab == Tab::Pending {
            "Pending"
        } else {
            "Resolved"
        },
        Some(nav),
        (tab == Tab::Pending).then_some(15),
        body,
    )
}

/// A flash line on the detail page, from the resolve that redirected here.
pub enum Flash<'a> {
    Resolved(&'a str),
    /// An approval counted, and more reviewers must approve.
    Recorded,
    Refused(&'a str),
}

/// One review in full.
pub fn detail(
    nav: &Nav<'_>,
    i: &Inspection,
    flash: Option<Flash<'_>>,
    can_resolve: bool,
    now: SystemTime,
) -> Markup {
    let v = &i.view;
    let d = i.detail.as_ref();
    let forwarding =
        v.status == ReviewStatus::Approved && matches!(v.forward.state, "not_started" | "started");
    // A record-only review: the call was answered elsewhere, so an
    // approval records a decision and forwards nothing.
    let record_only = v.forward.state == NO_FORWARD;
    let body = html! {
        p { a href="/console/reviews" { "← Queue" } }
        h1 { "Review " code { (v.review_id) } }
        @match flash {
            Some(Flash::Resolved(what)) => p.flash role="status" { "You " (what) " this review." },
            Some(Flash::Recorded) => p.flash role="status" {
                "Your approval is recorded. " (v.approvals_required as usize - v.approvals.len().min(v.approvals_required as usize))
                @if record_only { " more reviewer(s) must approve before the review is approved." }
                @else { " more reviewer(s) must approve before the call is forwarded." }
            },
            Some(Flash::Refused(why)) => p.error role="alert" { (why) },
            None => {},
        }
        dl.summary {
            dt { "Status" } dd { span class={ "status " (v.status.as_str()) } { (v.status.as_str()) } }
            dt { "Route" } dd { (v.route) }
            dt { "Action" } dd { code { (v.action) } }
            dt { "Why held" } dd { (reasons(v)) }
            dt { "Held at" } dd { (crate::support::time::rfc3339(v.created_at)) " (" (age(v.created_at, now)) " ago)" }
            @if v.status == ReviewStatus::Pending {
                dt { "Expires" } dd { (crate::support::time::rfc3339(v.expires_at)) " (in " (left(v.expires_at, now)) ")" }
            }
            @if let Some(r) = &v.reviewer {
                dt { "Resolved by" } dd { (r) " at " (v.resolved_at.map(crate::support::time::rfc3339).unwrap_or_default()) }
                dt { "Note" } dd.note { (v.note.as_deref().unwrap_or("")) }
            }
            @if v.approvals_required > 1 || !v.approvals.is_empty() {
                dt { "Approvals" } dd {
                    (v.approvals.len()) " of " (v.approvals_required)
                    @for a in &v.approvals {
                        br; (a.by) " (" (a.reviewer) ") at " (crate::support::time::rfc3339(a.at))
                        @if let Some(n) = &a.note { ": " (n) }
                    }
                }
            }
            dt { "Forward" } dd #forward { (forward_text(v)) }
            @if let Some(rec) = &v.record_id {
                dt { "Audit record" } dd { a href={ "/console/audit/" (rec) } { code { (rec) } } }
            }
            @if let Some(rev) = d.and_then(|d| d.get("policy_revision")).and_then(Value::as_str) {
                dt { "Policy revision" } dd { code { (rev) } }
            }
            dt { "Request hash" } dd { code { (v.request.hash) } }
        }
        @if let Some(up) = &i.upstream {
            section #upstream {
                h2 { "Upstream answer" }
                p { "Status " strong.upstream-status { (up.status) } }
                (upstream_body(up))
            }
        } @else if forwarding {
            p.waiting { "Forwarding to the upstream; this page refreshes until it answers." }
        }
        @if can_resolve {
            section.resolve {
                h2 { "Resolve" }
                form method="post" action={ "/console/reviews/" (v.review_id) "/resolve" } {
                    input type="hidden" name="csrf" value=(nav.csrf);
                    label for="note" { "Note (required)" }
                    textarea #note name="note" required maxlength="4096" rows="3" {}
                    div.buttons {
                        button.approve type="submit" name="decision" value="approve" {
                            @if record_only { "Approve" } @else { "Approve and forward" }
                        }
                        button.reject type="submit" name="decision" value="reject" { "Reject" }
                    }
                }
            }
        }
        // Why it was held comes before what was held: the reviewer reads
        // the conflict first, the raw request when they need it.
        @if let Some(d) = d { (decision_section(d)) }
        @else { p { "No decision snapshot was stored with this review." } }
        (request_section(i))
    };
    layout("Review", Some(nav), forwarding.then_some(2), body)
}

fn request_section(i: &Inspection) -> Markup {
    let v = &i.view;
    let content_type = i
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| String::from_utf8_lossy(v).to_string());
    html! {
        section.request {
            h2 { "Held request" }
            p { code { (v.request.method) " " (i.path) } }
            table.headers {
                @for (name, value) in &i.headers {
                    tr { th { (name) } td { (cut(&String::from_utf8_lossy(value), MAX_HEADER_SHOWN)) } }
                }
            }
            h3 { "Body (" (i.body.len()) " bytes)" }
            pre.body { (body_text(&i.body, content_type.as_deref())) }
        }
    }
}

fn decision_section(d: &Value) -> Markup {
    let claims = d
        .get("claims")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let sources = d
        .get("sources")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let req = d.get("requirements");
    let field = |k: &str| req.and_then(|r| r.get(k)).map(display).unwrap_or_default();
    html! {
        section.decision {
            h2 { "Decision" }
            p {
                "Reason " code { (d.get("reason").map(display).unwrap_or_default()) }
                ", coverage " (d.get("coverage_score").map(display).unwrap_or_default())
            }
            h3 { "Requirements" }
            dl.summary {
                dt { "Mode" } dd { (field("decision_mode")) }
                dt { "Min coverage" } dd { (field("min_coverage")) }
                dt { "Citations" } dd { (field("citations")) }
                dt { "Deny if any unsupported" } dd { (field("deny_if_any_unsupported")) }
            }
            @if let Some(floors) = req.and_then(|r| r.get("floors_applied")).and_then(Value::as_array).filter(|f| !f.is_empty()) {
                p { "Floors that won over the request: "
                    @for f in floors {
                        code { (f.get("field").map(display).unwrap_or_default()) } " (asked "
                        (f.get("requested").map(display).unwrap_or_default()) ", floor "
                        (f.get("floor").map(display).unwrap_or_default()) ") "
                    }
                }
            }
            @if let Some(rules) = d.get("rules").and_then(Value::as_array).filter(|r| !r.is_empty()) {
                h3 { "Rules that fired" }
                ul { @for r in rules {
                    li { code { (r.get("effect").map(display).unwrap_or_default()) } " on "
                        code { (r.get("param").map(display).unwrap_or_default()) } ": "
                        (r.get("message").map(display).unwrap_or_default()) }
                } }
            }
            @if let Some(p) = d.get("params").filter(|p| p.as_object().is_some_and(|o| !o.is_empty())) {
                h3 { "Params" }
                pre.params { (serde_json::to_string_pretty(p).unwrap_or_default()) }
            }
            h3 { "Claims" }
            @if claims.is_empty() { p { "No claims." } }
            table.claims {
                thead { tr { th { "Claim" } th { "Status" } th { "Coverage" } th { "Reasons" } } }
                tbody { @for c in &claims {
                    @let text = c.get("text").and_then(Value::as_str).unwrap_or("");
                    @let marks = claim_marks(c);
                    tr {
                        td { (highlight(text, &marks)) }
                        td { span class={ "status " (c.get("status").map(display).unwrap_or_default()) } { (c.get("status").map(display).unwrap_or_default()) } }
                        td { (c.get("coverage").map(display).unwrap_or_default()) }
                        td { (list(c.get("reasons"))) }
                    }
                    @for x in c.get("conflicts").and_then(Value::as_array).into_iter().flatten() {
                        tr.conflict-line { td colspan="4" {
                            "Claim says " mark.conflict { (x.get("claim_quote").map(display).unwrap_or_default()) }
                            ", source " code { (x.get("source_id").map(display).unwrap_or_default()) } " says "
                            mark.conflict { (x.get("evidence_quote").map(display).unwrap_or_default()) }
                            " (" (x.get("reason").map(display).unwrap_or_default()) ")"
                        } }
                    }
                } }
            }
            h3 { "Evidence" }
            p.legend { mark.cited { "cited" } " " mark.conflict { "conflicting" } }
            @for s in &sources {
                @let id = s.get("source_id").and_then(Value::as_str).unwrap_or("");
                @let text = s.get("text").and_then(Value::as_str).unwrap_or("");
                article.source {
                    h4 { code { (id) } @if s.get("truncated") == Some(&Value::Bool(true)) { " (cut)" } }
                    p.source-text { (highlight(text, &source_marks(&claims, id))) }
                }
            }
            @for u in d.get("unavailable").and_then(Value::as_array).into_iter().flatten() {
                p.error { "Source " code { (u.get("source_id").map(display).unwrap_or_default()) } " was unavailable: "
                    (u.get("detail").map(display).unwrap_or_default()) }
            }
        }
    }
}

/// A span to mark, in code points, end exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub start: usize,
    pub end: usize,
    /// Conflicts win over citations where they overlap.
    pub conflict: bool,
}

fn offset(v: &Value, k: &str) -> Option<usize> {
    v.get(k)
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
}

fn claim_marks(c: &Value) -> Vec<Mark> {
    c.get("conflicts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|x| {
            Some(Mark {
                start: offset(x, "claim_start")?,
                end: offset(x, "claim_end")?,
                conflict: true,
            })
        })
        .collect()
}

fn source_marks(claims: &[Value], source_id: &str) -> Vec<Mark> {
    // (list, start key, end key, conflict): citations, then conflicts.
    const KINDS: [(&str, &str, &str, bool); 2] = [
        ("citations", "start", "end", false),
        ("conflicts", "evidence_start", "evidence_end", true),
    ];
    let mut marks = Vec::new();
    for c in claims {
        for (list, start, end, conflict) in KINDS {
            let spans = c.get(list).and_then(Value::as_array).into_iter().flatten();
            for x in spans.filter(|x| x.get("source_id").and_then(Value::as_str) == Some(source_id))
            {
                if let (Some(start), Some(end)) = (offset(x, start), offset(x, end)) {
                    marks.push(Mark {
                        start,
                        end,
                        conflict,
                    });
                }
            }
        }
    }
    marks
}

/// `text` with the marked spans wrapped in `<mark>`; spans out of range are
/// cut to the text.
pub fn highlight(text: &str, marks: &[Mark]) -> Markup {
    html! {
        @for (piece, class) in segments(text, marks) {
            @match class {
                Some(c) => mark class=(c) { (piece) },
                None => (piece),
            }
        }
    }
}

/// `text` cut at every mark boundary, each piece with the class of the
/// marks that cover it (`conflict` over `cited`).
fn segments(text: &str, marks: &[Mark]) -> Vec<(String, Option<&'static str>)> {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    let mut cuts: Vec<usize> = vec![0, n];
    for m in marks {
        cuts.push(m.start.min(n));
        cuts.push(m.end.min(n));
    }
    cuts.sort_unstable();
    cuts.dedup();
    cuts.windows(2)
        .map(|w| {
            let (a, b) = (w[0], w[1]);
            let covering = marks.iter().filter(|m| m.start <= a && b <= m.end);
            let class = covering.fold(None, |class, m| match (class, m.conflict) {
                (_, true) | (Some("conflict"), _) => Some("conflict"),
                _ => Some("cited"),
            });
            (chars[a..b].iter().collect(), class)
        })
        .collect()
}

fn reasons(v: &ReviewView) -> Markup {
    html! {
        code { (v.reason) }
        @for r in &v.rules { br; (r) }
    }
}

fn params_line(p: Option<&Value>) -> Markup {
    let Some(obj) = p.and_then(Value::as_object) else {
        return html! { "—" };
    };
    html! {
        @for (k, v) in obj {
            span.param { code { (k) } "=" (cut(&display(v), 80)) } " "
        }
    }
}

fn list(v: Option<&Value>) -> Markup {
    html! {
        @for r in v.and_then(Value::as_array).into_iter().flatten() {
            code { (display(r)) } " "
        }
    }
}

/// A JSON value as a reviewer reads it: strings without quotes.
fn display(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn forward_text(v: &ReviewView) -> String {
    match (v.forward.state, v.forward.upstream_status) {
        ("done", Some(s)) => format!("upstream answered {s}"),
        ("outcome_unknown", _) => "outcome_unknown (the forward failed; check the upstream)".into(),
        ("started", _) => "in flight".into(),
        (NO_FORWARD, _) => "none (record only: the call was answered elsewhere)".into(),
        _ if v.status == ReviewStatus::Approved => "waiting to be sent".into(),
        _ => "not sent".into(),
    }
}

fn upstream_body(up: &UpstreamResponse) -> Markup {
    html! {
        @if let Some(ct) = &up.content_type { p { "Content-Type " code { (ct) } } }
        pre.body { (body_text(&up.body, up.content_type.as_deref())) }
    }
}

/// A body as text: JSON pretty-printed, anything else as (lossy) UTF-8, cut
/// at [`MAX_BODY_SHOWN`] characters.
pub fn body_text(body: &[u8], content_type: Option<&str>) -> String {
    let json_like = content_type.is_some_and(|c| c.to_ascii_lowercase().contains("json"));
    let text = if json_like && body.len() <= 4 * MAX_BODY_SHOWN {
        serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
    } else {
        None
    };
    let text = text.unwrap_or_else(|| {
        let end = body.len().min(4 * MAX_BODY_SHOWN);
        String::from_utf8_lossy(&body[..end]).into_owned()
    });
    cut(&text, MAX_BODY_SHOWN)
}

/// At most `max` characters of `s`, saying how much was left out.
pub fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((i, _)) => format!("{}… ({} more bytes not shown)", &s[..i], s.len() - i),
    }
}

fn short_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

fn age(t: SystemTime, now: SystemTime) -> String {
    span(now.duration_since(t).unwrap_or_default())
}

fn left(t: SystemTime, now: SystemTime) -> String {
    match t.duration_since(now) {
        Ok(d) => span(d),
        Err(_) => "due".into(),
    }
}

/// `45s`, `12m 5s`, `3h 20m`, `2d 4h`.
pub fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highlight_marks_code_points_and_escapes() {
        let text = "refund <b>denied</b> é ok";
        let start = text[..text.find("denied").unwrap()].chars().count();
        let html = highlight(
            text,
            &[
                Mark {
                    start,
                    end: start + 6,
                    conflict: true,
                },
                Mark {
                    start: 0,
                    end: 6,
                    conflict: false,
                },
                Mark {
                    start: 100,
                    end: 200,
                    conflict: false,
                },
            ],
        )
        .into_string();
        assert_eq!(
            html,
            "<mark class=\"cited\">refund</mark> &lt;b&gt;<mark class=\"conflict\">denied</mark>&lt;/b&gt; é ok"
        );
        // A conflict inside a citation wins where they overlap.
        let html = highlight(
            "abcdef",
            &[
                Mark {
                    start: 0,
                    end: 6,
                    conflict: false,
                },
                Mark {
                    start: 2,
                    end: 4,
                    conflict: true,
                },
            ],
        )
        .into_string();
        assert_eq!(html, "<mark class=\"cited\">ab</mark><mark class=\"conflict\">cd</mark><mark class=\"cited\">ef</mark>");
    }

    #[test]
    fn bodies_are_pretty_cut_and_inert() {
        assert_eq!(
            body_text(br#"{"a":1}"#, Some("application/json")),
            "{\n  \"a\": 1\n}"
        );
        let big = "x".repeat(MAX_BODY_SHOWN + 10);
        let shown = body_text(big.as_bytes(), Some("text/plain"));
        assert!(
            shown.ends_with("… (10 more bytes not shown)"),
            "{}",
            &shown[shown.len() - 40..]
        );
        assert_eq!(body_text(&[0xff, b'a'], None), "\u{fffd}a");
        let page = message("t", "<script>alert(1)</script>", None).into_string();
        assert!(!page.contains("<script>"));
        assert!(page.contains("&lt;script&gt;"));
    }

    #[test]
    fn spans() {
        assert_eq!(span(Duration::from_secs(45)), "45s");
        assert_eq!(span(Duration::from_secs(725)), "12m 5s");
        assert_eq!(span(Duration::from_secs(3 * 3600 + 1200)), "3h 20m");
        assert_eq!(span(Duration::from_secs(2 * 86_400 + 4 * 3600)), "2d 4h");
    }
}
