//! Turns parsed files into one validated [`PolicySet`], collecting every error.
//!
//! A platform engineer fixing a broken policy directory should see all of
//! its problems in one `verdict check` run, not one per run, so nothing here
//! stops at the first error: each file, action, rule and route is checked and
//! every complaint is kept with its `file:line:col`. Only a fully clean set is
//! returned, which is what makes hot reload all-or-nothing.
mod route;
use route::{route, sources_from};

use std::collections::BTreeMap;
use std::time::Duration;

use regex::Regex;
use sha2::{Digest, Sha256};

use super::extract::Extractor;
use super::file::{self, FileAction, FileOp, FileRoute, FileRule};
use super::route::{FailureMode, OnReview, Pattern, Route, RouteTable, SourceTemplate};
use super::rules::{
    provenance_origin, ActionPolicy, Citations, DecisionMode, Effect, Op, Options, ParamType,
    Provenance, Requirements, Rule, Scalar,
};
use super::{PolicyError, PolicySet};
use crate::config::{line_col, parse_duration};

/// The default `hold_timeout` of a route.
pub const DEFAULT_HOLD_TIMEOUT: Duration = Duration::from_secs(30);

/// The media type a route gates when it does not say.
pub const DEFAULT_CONTENT_TYPE: &str = "application/json";

/// The most separate claims an action's `min_claims` may ask for.
pub const MAX_MIN_CLAIMS: u32 = 32;

/// One policy file's contents.
pub(super) struct Source {
    /// The bare file name (`refunds.toml`); it goes into the revision.
    pub name: String,
    /// How errors name the file (`policies/refunds.toml`).
    pub display: String,
    pub bytes: Vec<u8>,
}

/// Error collector for one file.
struct FileCtx<'a> {
    display: &'a str,
    text: &'a str,
    errors: &'a mut Vec<PolicyError>,
}

impl<'a> FileCtx<'a> {
    fn new(display: &'a str, text: &'a str, errors: &'a mut Vec<PolicyError>) -> Self {
        FileCtx {
            display,
            text,
            errors,
        }
    }

    fn at(&self, byte: usize) -> String {
        let (line, col) = line_col(self.text, byte);
        format!("{}:{line}:{col}", self.display)
    }

    fn err(&mut self, byte: usize, message: impl Into<String>) {
        let (line, col) = line_col(self.text, byte);
        self.errors.push(PolicyError::Invalid {
            file: self.display.to_string(),
            line,
            col,
            message: message.into(),
        });
    }
}

/// A policy file's text, or why the file as a whole is refused.
fn whole_text(bytes: &[u8]) -> Result<&str, &'static str> {
    // An editor that truncates a file and then writes it leaves a moment
    // where the file is empty; applying that as "no policy" would open
    // the gate. A file that means to be empty says so with a comment.
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err("file is empty (a truncated write?); a policy file that means to hold nothing says so with a comment");
    }
    std::str::from_utf8(bytes).map_err(|_| "file is not valid UTF-8")
}

/// Validates `sources` (in any order) into a set, or returns every error
/// sorted by file and position.
pub(super) fn build(mut sources: Vec<Source>) -> Result<PolicySet, Vec<PolicyError>> {
    sources.sort_by(|a, b| a.name.cmp(&b.name));
    let revision = revision(&sources);
    let mut errors = Vec::new();
    let parsed = parse_files(&sources, &mut errors);
    let set = set_tables(&parsed.files);
    let actions = actions(&parsed.files, &mut errors);
    let routes = routes(&parsed, &actions, &mut errors);
    if !errors.is_empty() {
        errors.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
        return Err(errors);
    }
    let table = RouteTable::build(&routes);
    Ok(PolicySet {
        revision,
        files: sources.iter().map(|s| s.name.clone()).collect(),
        actions: actions.policies,
        routes,
        table,
        allow_empty: set.allow_empty,
        removed_routes: set.removed_routes,
    })
}

/// A file that parsed, with its source and text.
type ParsedFile<'a> = (&'a Source, &'a str, file::FileDoc);

/// The files that parsed.
struct ParsedFiles<'a> {
    files: Vec<ParsedFile<'a>>,
    /// Some table could not be read, so an action may be missing.
    incomplete: bool,
}

/// Parses every file, keeping going past broken ones and collecting their
/// errors.
fn parse_files<'a>(sources: &'a [Source], errors: &mut Vec<PolicyError>) -> ParsedFiles<'a> {
    let mut files = Vec::new();
    let mut incomplete = false;
    for src in sources {
        let display = src.display.as_str();
        let text = match whole_text(&src.bytes) {
            Ok(text) => text,
            Err(message) => {
                errors.push(PolicyError::Invalid {
                    file: display.to_string(),
                    line: 1,
                    col: 1,
                    message: message.into(),
                });
                incomplete = true;
                continue;
            }
        };
        let file::Parsed {
            doc,
            errors: file_errors,
        } = file::parse(text);
        if !file_errors.is_empty() {
            incomplete = true;
            let mut cx = FileCtx::new(display, text, errors);
            for (byte, message) in file_errors {
                cx.err(byte, message);
            }
        }
        if let Some(doc) = doc {
            files.push((src, text, doc));
        }
    }
    ParsedFiles { files, incomplete }
}

/// What the `[set]` tables say, merged across files.
struct SetTables {
    allow_empty: bool,
    removed_routes: Vec<String>,
}

/// Merges `[set]`, in any file.
fn set_tables(files: &[ParsedFile<'_>]) -> SetTables {
    let mut allow_empty = false;
    let mut removed_routes = Vec::new();
    for (_, _, doc) in files {
        if let Some(set) = &doc.set {
            allow_empty |= set.allow_empty;
            removed_routes.extend(set.removed_routes.iter().map(|r| r.get_ref().clone()));
        }
    }
    SetTables {
        allow_empty,
        removed_routes,
    }
}

/// The valid action policies, and where each type was first defined.
struct Actions {
    policies: BTreeMap<String, ActionPolicy>,
    /// Every type defined, valid or not: type → `file:line:col`.
    defined_at: BTreeMap<String, String>,
}

/// Validates the actions across all files, refusing a type defined twice.
fn actions(files: &[ParsedFile<'_>], errors: &mut Vec<PolicyError>) -> Actions {
    let mut policies: BTreeMap<String, ActionPolicy> = BTreeMap::new();
    let mut defined_at: BTreeMap<String, String> = BTreeMap::new();
    for (src, text, doc) in files {
        let mut cx = FileCtx::new(&src.display, text, errors);
        for fa in &doc.action {
            let type_ = fa.type_.get_ref();
            let start = fa.type_.span().start;
            if let Some(first) = defined_at.get(type_) {
                cx.err(
                    start,
                    format!("duplicate action type {type_:?} (first defined at {first})"),
                );
                continue;
            }
            defined_at.insert(type_.clone(), cx.at(start));
            if let Some(policy) = action(&mut cx, fa) {
                policies.insert(type_.clone(), policy);
            }
        }
    }
    Actions {
        policies,
        defined_at,
    }
}

/// Validates the routes across all files: each against its action, and
/// against the routes accepted before it.
fn routes(
    parsed: &ParsedFiles<'_>,
    actions: &Actions,
    errors: &mut Vec<PolicyError>,
) -> Vec<Route> {
    let mut accepted = AcceptedRoutes::default();
    for (src, text, doc) in &parsed.files {
        let mut cx = FileCtx::new(&src.display, text, errors);
        for fr in &doc.route {
            // A table that could not be read may define the action; do not
            // pile a misleading "unknown action" on top of its real error.
            let action = fr.action.get_ref();
            if !parsed.incomplete && !actions.defined_at.contains_key(action) {
                cx.err(
                    fr.action.span().start,
                    format!(
                        "route {:?} references unknown action {action:?}",
                        fr.name.get_ref()
                    ),
                );
            }
            let Some(r) = route(&mut cx, fr, &src.name) else {
                continue;
            };
            if let Some(a) = actions.policies.get(&r.action) {
                shared_source_ids(&mut cx, fr, &r, a);
            }
            accepted.admit(&mut cx, fr, r);
        }
    }
    accepted.routes
}

/// A source id the route and its action both read would be two documents
/// under one name: one error per such id.
fn shared_source_ids(cx: &mut FileCtx<'_>, fr: &FileRoute, r: &Route, a: &ActionPolicy) {
    for t in r
        .sources_from
        .iter()
        .filter(|t| a.sources_from.iter().any(|u| u.id == t.id))
    {
        cx.err(
            fr.name.span().start,
            format!(
                "route {:?}: sources_from id {:?} is also read by its action {:?}",
                r.name, t.id, r.action
            ),
        );
    }
}

/// The routes accepted so far, in file order.
#[derive(Default)]
struct AcceptedRoutes {
    routes: Vec<Route>,
    /// Where each accepted route's name and path were written.
    route_at: Vec<(String, String)>,
}

impl AcceptedRoutes {
    /// Accepts `r` unless its name is taken or it matches exactly the paths
    /// of a route accepted before it.
    fn admit(&mut self, cx: &mut FileCtx<'_>, fr: &FileRoute, r: Route) {
        let (routes, route_at) = (&self.routes, &self.route_at);
        let name_start = fr.name.span().start;
        let path_start = fr.path.span().start;
        if let Some(i) = routes.iter().position(|o| o.name == r.name) {
            cx.err(
                name_start,
                format!(
                    "duplicate route name {:?} (first defined at {})",
                    r.name, route_at[i].0
                ),
            );
            return;
        }
        // Equal specificity and an overlap mean the same literals in
        // the same places: both patterns match exactly the same paths,
        // and nothing could say which route a request gets.
        if let Some(i) = routes.iter().position(|o| {
            o.method == r.method
                && o.pattern.specificity() == r.pattern.specificity()
                && o.pattern.overlaps(&r.pattern)
        }) {
            cx.err(
                path_start,
                format!(
                    "route {:?} ({} {}) matches exactly the paths of route {:?} ({} {}, {}): one of them could never be reached",
                    r.name, r.method, r.path, routes[i].name, routes[i].method, routes[i].path, route_at[i].1
                ),
            );
            return;
        }
        self.route_at.push((cx.at(name_start), cx.at(path_start)));
        self.routes.push(r);
    }
}

/// `sha256:<hex>` over every file's name and bytes in name order, each
/// length-prefixed (u64 big-endian) so no two different sets collide by
/// concatenation.
fn revision(sorted: &[Source]) -> String {
    let mut h = Sha256::new();
    for s in sorted {
        h.update((s.name.len() as u64).to_be_bytes());
        h.update(s.name.as_bytes());
        h.update((s.bytes.len() as u64).to_be_bytes());
        h.update(&s.bytes);
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

// === actions ===

/// Validates one action table into a policy, or `None` after reporting
/// each of its errors.
fn action(cx: &mut FileCtx<'_>, fa: &FileAction) -> Option<ActionPolicy> {
    let before = cx.errors.len();
    if fa.type_.get_ref().trim().is_empty() {
        cx.err(fa.type_.span().start, "action type must not be empty");
    }
    let (req_cov, opt_cov) = min_coverages(cx, fa);
    for r in &fa.redact {
        if r.get_ref().trim().is_empty() {
            cx.err(r.span().start, "redact entries must not be empty");
        }
    }
    let rules: Vec<Rule> = fa.rule.iter().filter_map(|fr| rule(cx, fr)).collect();
    let param_types = param_types(cx, fa);
    for b in &fa.bind {
        let name = b.get_ref();
        if name.trim().is_empty() || name.split('.').any(str::is_empty) {
            cx.err(b.span().start, format!("invalid bind param {name:?}"));
        }
    }
    let min_claims = min_claims(cx, fa);
    let approvals = approvals(cx, fa);
    let provenance = fa
        .evidence
        .as_ref()
        .map(|e| provenance(cx, e))
        .unwrap_or_default();
    // A placeholder names a declared param: its type says what the value
    // may be.
    let declared = |n: &str| fa.param_types.contains_key(n);
    let sources_from = sources_from(
        cx,
        &fa.sources_from,
        &declared,
        "a param declared in param_types",
    );
    if cx.errors.len() != before {
        return None;
    }
    Some(ActionPolicy {
        type_: fa.type_.get_ref().clone(),
        defined_at: cx.at(fa.type_.span().start),
        requirements: Requirements {
            decision_mode: fa.requirements.decision_mode.map(|m| match m {
                file::FileDecisionMode::Strict => DecisionMode::Strict,
                file::FileDecisionMode::Balanced => DecisionMode::Balanced,
                file::FileDecisionMode::Audit => DecisionMode::Audit,
            }),
            min_coverage: req_cov,
            citations: fa.requirements.citations.map(|c| match c {
                file::FileCitations::Required => Citations::Required,
                file::FileCitations::Optional => Citations::Optional,
            }),
        },
        options: Options {
            deny_if_any_unsupported: fa.options.deny_if_any_unsupported,
            evidence_limit: fa.options.evidence_limit,
            // Equal to the requirements value when both are set (checked above).
            min_coverage: opt_cov,
        },
        require_claims: fa.require_claims.unwrap_or(true),
        min_claims,
        approvals,
        redact: fa.redact.iter().map(|r| r.get_ref().clone()).collect(),
        rules,
        param_types,
        bind: fa.bind.iter().map(|b| b.get_ref().clone()).collect(),
        provenance,
        sources_from,
    })
}

/// The `min_coverage` of `requirements` and of `options`, each in range;
/// when both are set they must agree.
fn min_coverages(cx: &mut FileCtx<'_>, fa: &FileAction) -> (Option<f64>, Option<f64>) {
    let req_cov = coverage(
        cx,
        "requirements.min_coverage",
        fa.requirements.min_coverage.as_ref(),
    );
    let opt_cov = coverage(cx, "options.min_coverage", fa.options.min_coverage.as_ref());
    if let (Some(r), Some(o), Some(span)) = (req_cov, opt_cov, fa.options.min_coverage.as_ref()) {
        if r != o {
            cx.err(
                span.span().start,
                format!(
                    "options.min_coverage {o} conflicts with requirements.min_coverage {r}; set it once"
                ),
            );
        }
    }
    (req_cov, opt_cov)
}

/// The action's `param_types`, each a known type name.
fn param_types(cx: &mut FileCtx<'_>, fa: &FileAction) -> BTreeMap<String, ParamType> {
    let mut param_types = BTreeMap::new();
    for (name, ty) in &fa.param_types {
        let parsed = match ty.get_ref().as_str() {
            "number" => ParamType::Number,
            "integer" => ParamType::Integer,
            "string" => ParamType::String,
            "decimal_string" => ParamType::DecimalString,
            other => {
                cx.err(
                    ty.span().start,
                    format!(
                        "param_types.{name}: unknown type {other:?} (number, integer, string, decimal_string)"
                    ),
                );
                continue;
            }
        };
        param_types.insert(name.clone(), parsed);
    }
    param_types
}

/// The action's `min_claims` (1 when unset): in range, and above 1 only
/// when claims are required.
fn min_claims(cx: &mut FileCtx<'_>, fa: &FileAction) -> u32 {
    match &fa.min_claims {
        None => 1,
        Some(n) => {
            let v = *n.get_ref();
            if !(1..=MAX_MIN_CLAIMS).contains(&v) {
                cx.err(
                    n.span().start,
                    format!("min_claims: must be 1 to {MAX_MIN_CLAIMS}, got {v}"),
                );
            } else if v > 1 && fa.require_claims == Some(false) {
                cx.err(
                    n.span().start,
                    format!("min_claims = {v} needs require_claims = true (the default)"),
                );
            }
            v
        }
    }
}

/// The action's `approvals`, when set: distinct reviewers per held call, in
/// range.
fn approvals(cx: &mut FileCtx<'_>, fa: &FileAction) -> Option<u32> {
    fa.approvals.as_ref().map(|n| {
        let v = *n.get_ref();
        if !(1..=crate::config::MAX_REVIEW_APPROVALS).contains(&v) {
            cx.err(
                n.span().start,
                format!(
                    "approvals: must be 1 to {} (distinct reviewers per held call), got {v}",
                    crate::config::MAX_REVIEW_APPROVALS
                ),
            );
        }
        v
    })
}

/// An action's `evidence` table.
fn provenance(cx: &mut FileCtx<'_>, e: &file::FileEvidence) -> Provenance {
    let referenced = match e.from.get_ref().as_str() {
        "any" => false,
        "referenced" => true,
        other => {
            cx.err(
                e.from.span().start,
                format!("evidence.from: unknown value {other:?} (any, referenced)"),
            );
            false
        }
    };
    let mut origins = Vec::new();
    for o in &e.origins {
        match provenance_origin(o.get_ref()) {
            Some(n) => origins.push(n),
            None => cx.err(
                o.span().start,
                format!(
                    "evidence.origins: {:?} is not an origin (scheme://host[:port] with http or https, or file://)",
                    o.get_ref()
                ),
            ),
        }
    }
    if referenced && e.origins.is_empty() {
        cx.err(
            e.from.span().start,
            "evidence.from = \"referenced\" needs origins: the uri origins (or file://) its evidence may come from",
        );
    }
    if !referenced && (!e.origins.is_empty() || e.require_checksum) {
        cx.err(
            e.from.span().start,
            "evidence.origins and require_checksum apply only with from = \"referenced\"",
        );
    }
    Provenance {
        declared: true,
        referenced,
        origins,
        require_checksum: e.require_checksum,
    }
}

fn coverage(cx: &mut FileCtx<'_>, key: &str, v: Option<&toml::Spanned<f64>>) -> Option<f64> {
    let v = v?;
    let n = *v.get_ref();
    if (0.0..=1.0).contains(&n) {
        Some(n)
    } else {
        cx.err(
            v.span().start,
            format!("{key} must be between 0 and 1, got {n}"),
        );
        None
    }
}

fn rule(cx: &mut FileCtx<'_>, fr: &FileRule) -> Option<Rule> {
    let param = fr.param.get_ref();
    let mut ok = true;
    if param.trim().is_empty() || param.split('.').any(str::is_empty) {
        cx.err(
            fr.param.span().start,
            format!("invalid rule param {param:?}"),
        );
        ok = false;
    }
    let file_op = *fr.op.get_ref();
    let name = file_op.name();
    // Where to point when the value is wrong: the value, or the op if the
    // value is missing.
    let (value, at) = match &fr.value {
        Some(v) => (Some(v.get_ref()), v.span().start),
        None => (None, fr.op.span().start),
    };
    let op = match file_op {
        FileOp::Present | FileOp::Absent => match value {
            None if file_op == FileOp::Present => Ok(Op::Present),
            None => Ok(Op::Absent),
            Some(_) => Err(format!("op {name:?} takes no value")),
        },
        FileOp::Eq | FileOp::Ne => value
            .and_then(scalar)
            .map(if file_op == FileOp::Eq {
                Op::Eq
            } else {
                Op::Ne
            })
            .ok_or_else(|| format!("op {name:?} needs a string, number or boolean value")),
        FileOp::Gt | FileOp::Ge | FileOp::Lt | FileOp::Le => value
            .and_then(number)
            .map(match file_op {
                FileOp::Gt => Op::Gt,
                FileOp::Ge => Op::Ge,
                FileOp::Lt => Op::Lt,
                _ => Op::Le,
            })
            .ok_or_else(|| format!("op {name:?} needs a number value")),
        FileOp::In | FileOp::NotIn => value
            .and_then(|v| match v {
                toml::Value::Array(a) => a.iter().map(scalar).collect::<Option<Vec<_>>>(),
                _ => None,
            })
            .map(if file_op == FileOp::In {
                Op::In
            } else {
                Op::NotIn
            })
            .ok_or_else(|| format!("op {name:?} needs an array of strings, numbers or booleans")),
        FileOp::Matches => match value {
            Some(toml::Value::String(p)) => Regex::new(p)
                .map(Op::Matches)
                .map_err(|e| format!("invalid regex {p:?}: {}", regex_message(&e))),
            _ => Err(format!("op {name:?} needs a string value (a regex)")),
        },
    };
    let op = match op {
        Ok(op) => op,
        Err(m) => {
            cx.err(at, m);
            return None;
        }
    };
    if !ok {
        return None;
    }
    let message = fr
        .message
        .clone()
        .unwrap_or_else(|| format!("{param} {}", op.describe()));
    Some(Rule {
        param: param.clone(),
        op,
        effect: match fr.effect {
            file::FileEffect::Review => Effect::Review,
            file::FileEffect::Deny => Effect::Deny,
        },
        message,
    })
}

fn scalar(v: &toml::Value) -> Option<Scalar> {
    match v {
        toml::Value::String(s) => Some(Scalar::String(s.clone())),
        toml::Value::Boolean(b) => Some(Scalar::Bool(*b)),
        _ => number(v).map(Scalar::Number),
    }
}

fn number(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) if f.is_finite() => Some(*f),
        _ => None,
    }
}

/// The one-line reason from a regex error (its `Display` is a multi-line
/// diagram, which would break `file:line:col: message` lines).
fn regex_message(e: &regex::Error) -> String {
    let text = e.to_string();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .map(str::to_string)
        .unwrap_or_else(|| text.lines().last().unwrap_or("").trim().to_string())
}
