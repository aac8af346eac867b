//! What `verdict test` and `verdict explain` print: a `cargo test`-like
//! report with a readable diff per failure, its JSON form, and an
//! explanation laid out for a person.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::file::Case;
use super::run::{Actual, Diff};
use crate::decide::explain::{Explanation, FieldOut, RouteOut, RuleOut, TableOut};

/// One case's result.
pub struct Ran<'a> {
    pub case: &'a Case,
    pub actual: Actual,
    pub diffs: Vec<Diff>,
}

impl Ran<'_> {
    fn id(&self) -> String {
        format!("{}::{}", self.case.file_name, self.case.name)
    }

    fn passed(&self) -> bool {
        self.diffs.is_empty()
    }
}

/// The text report: one line per case, then each failure's diff, then the
/// summary line.
pub fn text(ran: &[Ran<'_>], files: usize, revision: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "running {} case{} from {files} file{} (policy revision {revision})",
        ran.len(),
        if ran.len() == 1 { "" } else { "s" },
        if files == 1 { "" } else { "s" },
    );
    for r in ran {
        let _ = writeln!(
            out,
            "test {} ... {}",
            r.id(),
            if r.passed() { "ok" } else { "FAILED" }
        );
    }
    let failed: Vec<&Ran<'_>> = ran.iter().filter(|r| !r.passed()).collect();
    if !failed.is_empty() {
        let _ = writeln!(out, "\nfailures:");
        for r in &failed {
            let _ = writeln!(
                out,
                "\n---- {} ({}:{}:{}) ----",
                r.id(),
                r.case.file,
                r.case.line,
                r.case.col
            );
            for d in &r.diffs {
                diff(&mut out, d);
            }
            if let Some(m) = &r.actual.refused {
                let _ = writeln!(out, "refused before deciding: {m}");
            }
            if let Some(m) = &r.actual.error {
                let _ = writeln!(out, "no decision: {m}");
            }
        }
        let _ = writeln!(out, "\nfailures:");
        for r in &failed {
            let _ = writeln!(out, "    {}", r.id());
        }
    }
    let passed = ran.len() - failed.len();
    let _ = writeln!(
        out,
        "\ntest result: {}. {passed} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len()
    );
    out
}

fn diff(out: &mut String, d: &Diff) {
    let show = |v: &Value| match v {
        Value::Null => "(none)".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let (Value::Array(want), Value::Array(got)) = (&d.expected, &d.actual) {
        let _ = writeln!(out, "{}:", d.field);
        for w in want.iter().filter(|w| !got.contains(w)) {
            let _ = writeln!(out, "  - {}   (expected, did not hit)", show(w));
        }
        for g in got.iter().filter(|g| !want.contains(g)) {
            let _ = writeln!(out, "  + {}   (hit, not expected)", show(g));
        }
        if want.iter().all(|w| got.contains(w)) && got.iter().all(|g| want.contains(g)) {
            let _ = writeln!(out, "  expected order: {}", show(&d.expected));
            let _ = writeln!(out, "    actual order: {}", show(&d.actual));
        }
        return;
    }
    let _ = writeln!(out, "{}:", d.field);
    let _ = writeln!(out, "  expected: {}", show(&d.expected));
    let _ = writeln!(out, "    actual: {}", show(&d.actual));
}

/// The JSON report.
pub fn json(ran: &[Ran<'_>], files: &[String], dir: &str, revision: &str) -> Value {
    let failed = ran.iter().filter(|r| !r.passed()).count();
    json!({
        "policies": dir,
        "revision": revision,
        "files": files,
        "ok": failed == 0,
        "passed": ran.len() - failed,
        "failed": failed,
        "cases": ran.iter().map(|r| json!({
            "id": r.id(),
            "file": r.case.file,
            "name": r.case.name,
            "line": r.case.line,
            "status": if r.passed() { "ok" } else { "failed" },
            "expected": r.case.expect.as_ref().map(|e| json!({
                "decision": e.decision,
                "reason": e.reason,
                "rules": e.rules,
                "would_decide": e.would_decide,
                "route": e.route,
            })),
            "actual": r.actual,
            "diffs": r.diffs,
        })).collect::<Vec<_>>(),
    })
}

/// A case's explanation for a person.
pub fn explain_text(case: &Case, actual: &Actual, diffs: Option<&[Diff]>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "case      {} ({}:{}:{})",
        case.name, case.file, case.line, case.col
    );
    if let super::file::Request::Http(h) = &case.request {
        let _ = writeln!(out, "request   {} {}", h.method, h.target);
    }
    let _ = write!(out, "decision  {}", actual.decision);
    if let Some(r) = &actual.reason {
        let _ = write!(out, " ({r})");
    }
    if let Some(w) = &actual.would_decide {
        let _ = write!(out, ", not enforced: would {w}");
    }
    let _ = writeln!(out);
    if let Some(m) = &actual.refused {
        let route = actual
            .route
            .as_deref()
            .map_or(String::new(), |r| format!(" (route {r})"));
        let _ = writeln!(
            out,
            "refused   before deciding{route}: {m}\n          the proxy records this as a deny; no rule or claim was read"
        );
    }
    if let Some(m) = &actual.error {
        let _ = writeln!(out, "error     {m}");
    }
    if actual.decision == "not_gated" {
        let _ = writeln!(
            out,
            "route     none: no route gates this method and path; the proxy forwards it undecided"
        );
    }
    if let Some(e) = &actual.explanation {
        explanation(&mut out, e);
    }
    if let (Some(expect), Some(diffs)) = (&case.expect, diffs) {
        let _ = writeln!(out);
        if diffs.is_empty() {
            let _ = writeln!(out, "expect    ok (decision {})", expect.decision);
        } else {
            let _ = writeln!(out, "expect    FAILED");
            for d in diffs {
                diff(&mut out, d);
            }
        }
    }
    out
}

/// An explanation for a person, one section after another.
fn explanation(out: &mut String, e: &Explanation) {
    route_section(out, e.route.as_ref());
    action_section(out, e);
    requirements_section(out, &e.requirements);
    rules_section(out, &e.rules);
    param_checks_section(out, e);
    claims_section(out, e);
    table_section(out, &e.decision_table);
}

/// The route the request matched, with its path params, or that there is none.
fn route_section(out: &mut String, route: Option<&RouteOut>) {
    match route {
        Some(r) => {
            let _ = writeln!(
                out,
                "route     {}: {} {} ({}), on_review = {}",
                r.name, r.method, r.path, r.file, r.on_review
            );
            if !r.path_params.is_empty() {
                let params: Vec<String> = r
                    .path_params
                    .iter()
                    .map(|(k, v)| format!("{k} = {v}"))
                    .collect();
                let _ = writeln!(out, "          path params: {}", params.join(", "));
            }
        }
        None => {
            let _ = writeln!(out, "route     none (an authorize request)");
        }
    }
}

/// The action type and which policy applied to it, then the params the rules read.
fn action_section(out: &mut String, e: &Explanation) {
    let a = &e.action;
    let _ = match a.policy {
        "declared" => writeln!(out, "action    {}: its action policy applies", a.type_),
        "defaults" => writeln!(
            out,
            "action    {}: no policy names it; the [defaults] floors apply",
            a.type_
        ),
        _ => writeln!(
            out,
            "action    {}: no policy names it, and [authorize] unknown_action refuses it ({}){}",
            a.type_,
            a.unknown_action.unwrap_or("deny"),
            a.near_miss
                .as_deref()
                .map_or(String::new(), |n| format!("; it reads as {n:?} misspelt"))
        ),
    };
    if e.params.is_empty() {
        let _ = writeln!(out, "params    (none)");
    } else {
        let params: Vec<String> = e.params.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        let _ = writeln!(out, "params    {}", params.join(", "));
    }
}

/// Each effective requirement, its value and which side set it.
fn requirements_section(out: &mut String, requirements: &[FieldOut]) {
    let _ = writeln!(
        out,
        "\nrequirements (the default, then the policy's floor, then the request: a request may tighten a floor, never loosen it)"
    );
    for f in requirements {
        let _ = writeln!(
            out,
            "  {:<24} {:<10} {}",
            f.field,
            plain(&f.value),
            origin(f)
        );
    }
}

/// Each rule with the value it read and whether it hit.
fn rules_section(out: &mut String, rules: &[RuleOut]) {
    let _ = writeln!(out, "\nrules");
    if rules.is_empty() {
        let _ = writeln!(out, "  (none)");
    }
    for r in rules {
        let value = r
            .value
            .as_deref()
            .map_or(format!("{} is absent", r.param), |v| {
                format!("{} = {v}", r.param)
            });
        let result = match r.result {
            "hit" => "HIT",
            "miss" => "miss",
            _ => "MISMATCH",
        };
        let rule = format!("{} {} -> {}", r.param, r.op, r.effect);
        let _ = writeln!(
            out,
            "  #{} {result:<8} {rule:<28} [{value}]   {:?}",
            r.index, r.message
        );
        if let Some(m) = &r.mismatch {
            let _ = writeln!(out, "          {m}");
        }
    }
}

/// The params whose type did not match, and whether each bound param was stated.
fn param_checks_section(out: &mut String, e: &Explanation) {
    if !e.param_mismatches.is_empty() {
        let _ = writeln!(out, "\nparam type mismatches");
        for m in &e.param_mismatches {
            let _ = writeln!(out, "  {}", m.message);
        }
    }
    if !e.bind.is_empty() {
        let _ = writeln!(out, "\nbind (a counted supported claim must state each)");
        for b in &e.bind {
            let _ = writeln!(
                out,
                "  {:<16} {}",
                b.param,
                if b.stated { "stated" } else { "NOT stated" }
            );
        }
    }
}

/// Each claim as the verifier judged it, then the sources that could not be read.
fn claims_section(out: &mut String, e: &Explanation) {
    let _ = writeln!(out, "\nclaims (coverage score {})", e.coverage_score);
    if e.claims.is_empty() {
        let _ = writeln!(out, "  (none)");
    }
    for c in &e.claims {
        let _ = writeln!(
            out,
            "  {} {:<11} coverage {:<6} {}{}  {:?}",
            c.claim_id,
            c.status,
            c.coverage,
            if c.cited { "cited" } else { "uncited" },
            if c.counted { ", counted" } else { "" },
            c.text
        );
        if !c.reasons.is_empty() {
            let _ = writeln!(out, "      reasons   {}", c.reasons.join(", "));
        }
        for x in &c.citations {
            let _ = writeln!(
                out,
                "      citation  {}[{}..{}] {}",
                plain(&x["source_id"]),
                x["start"],
                x["end"],
                x["quote"]
            );
        }
        for x in &c.conflicts {
            let _ = writeln!(
                out,
                "      conflict  {}: claim[{}..{}] {} vs {}[{}..{}] {}",
                plain(&x["reason"]),
                x["claim"]["start"],
                x["claim"]["end"],
                x["claim"]["text"],
                plain(&x["evidence"]["source_id"]),
                x["evidence"]["start"],
                x["evidence"]["end"],
                x["evidence"]["text"],
            );
        }
    }
    if !e.unavailable_sources.is_empty() {
        let _ = writeln!(out, "\nunavailable sources");
        for s in &e.unavailable_sources {
            let _ = writeln!(out, "  {}: {}", s.source_id, s.detail);
        }
    }
}

/// The decision table's row that decided and what the mode made of it.
fn table_section(out: &mut String, t: &TableOut) {
    let _ = writeln!(out, "\ndecision table (the first row that matches decides)");
    let _ = writeln!(out, "  row       {}", t.condition);
    let _ = writeln!(out, "  reason    {}", t.reason);
    let audit = match t.audit_would_decide {
        Some(w) => format!("{} (would {w})", t.outcomes.audit),
        None => t.outcomes.audit.to_string(),
    };
    let _ = writeln!(
        out,
        "  outcomes  strict {}, balanced {}, audit {audit}",
        t.outcomes.strict, t.outcomes.balanced
    );
    let _ = writeln!(
        out,
        "  mode      {} -> {}{}",
        t.mode,
        t.outcome,
        if t.enforced { "" } else { " (not enforced)" }
    );
}

/// A JSON value without quotes around strings.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Which side set a requirement, in words.
fn origin(f: &FieldOut) -> String {
    let floor = if f.field == "evidence_limit" || f.field == "require_claims" {
        "policy"
    } else {
        "floor"
    };
    if f.field == "require_claims" {
        // Only a policy sets it; a request cannot.
        return if f.won == "default" {
            "default"
        } else {
            "policy"
        }
        .to_string();
    }
    match f.won {
        "default" => "default".to_string(),
        "floor" => format!("{floor} (the request says nothing)"),
        "floor_over_request" => format!(
            "{floor}: the request asked for {}, looser, and the floor held",
            plain(&f.requested)
        ),
        _ if f.floor.is_null() => "request (no floor)".to_string(),
        _ if f.field == "evidence_limit" => format!(
            "request (a limit, not a floor: the policy's {} gives way)",
            plain(&f.floor)
        ),
        _ => format!("request (at or above the {floor} {})", plain(&f.floor)),
    }
}
