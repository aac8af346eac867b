//! Policy files: `policies/*.toml` → one validated, immutable [`PolicySet`].
//!
//! Platform teams say in these files which actions need which evidence
//! (floors the requests may tighten but never loosen), which param rules send
//! an action to review or deny it, and which HTTP routes the proxy
//! intercepts. This module is the only place that knows the file format:
//! `file` is the serde shape, `validate` turns it into domain types while
//! collecting *every* error as `file:line:col: message`, and the rest of the
//! crate only sees [`PolicySet`]. A set is built whole or not at all, which is
//! what lets [`live::PolicyStore`] swap it in atomically on hot reload and keep
//! the last good one when an edit is broken.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

mod file;
mod near_miss;
mod validate;

pub mod extract;
pub mod live;
pub mod route;
pub mod rules;
pub mod watch;

pub use extract::{Extracted, Extractor, RequestParts};
pub use live::{PolicyStore, ReloadOutcome, ReloadStatus};
pub use route::{FailureMode, OnReview, PathParams, Route, RouteMatch};
pub use rules::{
    parse_decimal, provenance_origin, ActionPolicy, Citations, DecisionMode, Effect, Evaluation,
    Op, Options, ParamLookup, ParamMismatch, ParamType, ParamValue, Provenance, Requirements, Rule,
    RuleHit, RuleResult, Scalar,
};
pub use validate::{DEFAULT_CONTENT_TYPE, DEFAULT_HOLD_TIMEOUT};
pub use watch::{spawn_watcher, watch_path, Change, WatchError, WatchHandle, DEFAULT_DEBOUNCE};

/// Something wrong with the policy directory or a file in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The directory or a file could not be read.
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    /// A file is malformed or invalid; `line` and `col` are 1-based.
    #[error("{file}:{line}:{col}: {message}")]
    Invalid {
        file: String,
        line: usize,
        col: usize,
        message: String,
    },
}

/// Every action policy and route of one policy directory, validated.
/// Immutable: a reload builds a new one.
#[derive(Debug, Clone)]
pub struct PolicySet {
    /// `sha256:<hex>` over every file's name and bytes in name order. Goes
    /// into every audit record as `policy_revision`.
    pub revision: String,
    /// The file names that were loaded, sorted.
    pub files: Vec<String>,
    /// Action type → policy.
    pub actions: BTreeMap<String, ActionPolicy>,
    /// In file order, then order within the file.
    pub routes: Vec<Route>,
    table: route::RouteTable,
    /// `[set] allow_empty = true`: this set may gate nothing.
    pub allow_empty: bool,
    /// `[set] removed_routes`: route names whose removal this set
    /// acknowledges.
    pub removed_routes: Vec<String>,
}

// === impl PolicyError ===

impl PolicyError {
    fn sort_key(&self) -> (&str, usize, usize) {
        match self {
            PolicyError::Io { path, .. } => (path, 0, 0),
            PolicyError::Invalid {
                file, line, col, ..
            } => (file, *line, *col),
        }
    }
}

// === impl PolicySet ===

impl PolicySet {
    /// Builds a set from in-memory files `(file name, contents)`; errors name
    /// the files as given. For tests and for callers that read files
    /// themselves.
    pub fn from_sources(files: &[(&str, &str)]) -> Result<PolicySet, Vec<PolicyError>> {
        validate::build(
            files
                .iter()
                .map(|(name, text)| validate::Source {
                    name: name.to_string(),
                    display: name.to_string(),
                    bytes: text.as_bytes().to_vec(),
                })
                .collect(),
        )
    }

    /// A set with no actions and no routes (what an empty directory gives).
    pub fn empty() -> PolicySet {
        // INVARIANT: an empty source list has nothing that can fail.
        validate::build(Vec::new()).unwrap_or_else(|_| PolicySet {
            revision: String::new(),
            files: Vec::new(),
            actions: BTreeMap::new(),
            routes: Vec::new(),
            table: route::RouteTable::default(),
            allow_empty: false,
            removed_routes: Vec::new(),
        })
    }

    /// The policy for an action type.
    pub fn action(&self, type_: &str) -> Option<&ActionPolicy> {
        self.actions.get(type_)
    }

    /// The declared action type that an undeclared `type_` reads as,
    /// misspelt (`refund.crate`, `Refund_Create`, `create.refund` for
    /// `refund.create`); see `near_miss::near_miss`.
    pub fn near_miss(&self, type_: &str) -> Option<&str> {
        if self.actions.contains_key(type_) {
            return None;
        }
        near_miss::near_miss(type_, self.actions.keys().map(String::as_str))
    }

    /// The most specific route for a request. `path` is the request target;
    /// a query string is ignored. Captured path params are percent-decoded.
    /// Only the strict reading counts here; see [`PolicySet::classify`].
    pub fn match_route(&self, method: &str, path: &str) -> Option<(&Route, PathParams)> {
        match self.table.find(&self.routes, method, path) {
            RouteMatch::Matched(r, p) => Some((r, p)),
            _ => None,
        }
    }

    /// The route a request reaches, read strictly, or the route only a
    /// lenient reading reaches (the proxy refuses those).
    pub fn classify(&self, method: &str, path: &str) -> RouteMatch<'_> {
        self.table.find(&self.routes, method, path)
    }

    /// A route that some method's reading (strict or lenient) of `path`
    /// reaches, if any: what a request could hit once a method override or
    /// a forgiving upstream router has had its say.
    pub fn reach_any_method(&self, path: &str) -> Option<&Route> {
        let mut methods: Vec<&str> = self.routes.iter().map(|r| r.method.as_str()).collect();
        methods.sort_unstable();
        methods.dedup();
        methods
            .into_iter()
            .find_map(|m| match self.classify(m, path) {
                RouteMatch::Matched(r, _) | RouteMatch::Ambiguous(r) => Some(r),
                RouteMatch::Unmatched => None,
            })
    }

    /// Things that are valid but probably not what the author meant: a set
    /// that gates nothing, a rule or `bind` on a param that no route of its
    /// action extracts (it can only come from `/v2/authorize` callers, so
    /// through the proxy the rule never sees it), and two routes whose
    /// patterns share some paths (see [`PolicySet::route_conflicts`]), and
    /// an action that binds a number (an amount) to its claims without
    /// saying where the evidence must come from: the caller can then write
    /// the invoice its claims rest on.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.gates_anything() {
            out.push("the policy set gates nothing: no actions and no routes".to_string());
        }
        for (type_, policy) in &self.actions {
            let numeric = |p: &String| {
                matches!(
                    policy.param_types.get(p),
                    Some(ParamType::Number | ParamType::Integer | ParamType::DecimalString)
                )
            };
            if !policy.provenance.declared && policy.bind.iter().any(numeric) {
                out.push(format!(
                    "{}: action {type_:?} binds a number ({}) to its claims but does not say where its evidence comes from: a caller can send the document its claims rest on; add evidence = {{ from = \"referenced\", origins = [...] }}, or evidence = {{ from = \"any\" }} to accept that",
                    policy.defined_at,
                    policy.bind.iter().filter(|p| numeric(p)).cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
        for (type_, policy) in &self.actions {
            let routes: Vec<&Route> = self.routes.iter().filter(|r| &r.action == type_).collect();
            if routes.is_empty() {
                continue;
            }
            let extracted = |param: &str| {
                let top = param.split('.').next().unwrap_or(param);
                routes
                    .iter()
                    .all(|r| r.params.iter().any(|(n, _)| n == top))
            };
            let params = policy
                .rules
                .iter()
                .map(|r| r.param.as_str())
                .chain(policy.bind.iter().map(String::as_str));
            let mut seen = Vec::new();
            for p in params {
                if !extracted(p) && !seen.contains(&p) {
                    seen.push(p);
                    out.push(format!(
                        "{}: action {type_:?}: a rule or bind reads param {p:?}, which not every route of the action extracts ({}); through the proxy it is absent",
                        policy.defined_at,
                        routes.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        }
        out.extend(self.route_conflicts().1);
        out
    }

    /// What `verdict check` refuses in a set that loads: a route that holds
    /// a call longer than `review_ttl` (`ttl_from` says where that value
    /// came from), and a route `suffixes` entry that another route shadows
    /// (see [`PolicySet::route_conflicts`]). Each starts with the route's
    /// `file:line:col`.
    pub fn errors_against(&self, review_ttl: Duration, ttl_from: &str) -> Vec<String> {
        let mut out = Vec::new();
        for r in &self.routes {
            if r.on_review == OnReview::Hold && r.hold_timeout > review_ttl {
                out.push(format!(
                    "{}: route {:?} holds a call for up to hold_timeout {}, longer than review.ttl {} ({ttl_from}): the review would expire, and count as rejected, while the caller still waits",
                    r.defined_at,
                    r.name,
                    crate::config::format_duration(r.hold_timeout),
                    crate::config::format_duration(review_ttl),
                ));
            }
        }
        out.extend(self.route_conflicts().0);
        out
    }

    /// Routes of one method that compete for the same paths: the errors and
    /// the warnings.
    ///
    /// The matcher (see [`route`]) has no wildcards, so only patterns with
    /// as many segments can share a path. A path goes to the most specific
    /// route that matches it as written (literal beats `{param}`, left to
    /// right), and only when none does is a `suffixes` entry stripped from
    /// the last segment. So:
    /// - two patterns that match exactly the same paths are refused when the
    ///   set loads (one of them could never be reached);
    /// - a pattern whose paths are a subset of another's is the more
    ///   specific one: it wins those paths and the other keeps the rest, so
    ///   both are reachable. That, and any other partial overlap (`/{a}/x`
    ///   and `/y/{b}` share `/y/x`), is a warning naming the route that
    ///   wins the shared paths;
    /// - a `suffixes` entry whose paths (`/a/b.json` for `/a/b` with
    ///   `.json`) another route matches as written never reaches its route:
    ///   an error when another route matches all of them, a warning when it
    ///   matches some.
    pub fn route_conflicts(&self) -> (Vec<String>, Vec<String>) {
        let (mut errors, mut warnings) = (Vec::new(), Vec::new());
        let describe = |r: &Route| format!("{:?} ({} {})", r.name, r.method, r.path);
        let describe_at =
            |r: &Route| format!("{:?} ({} {}, {})", r.name, r.method, r.path, r.defined_at);
        for (j, b) in self.routes.iter().enumerate() {
            for a in &self.routes[..j] {
                if a.method != b.method || !a.pattern.overlaps(&b.pattern) {
                    continue;
                }
                let winner = if b.pattern.specificity() > a.pattern.specificity() {
                    b
                } else {
                    a
                };
                warnings.push(format!(
                    "{}: route {} and route {} both match paths such as {}; the more specific {:?} gets them",
                    b.defined_at,
                    describe(b),
                    describe_at(a),
                    a.pattern.shared_example(&b.pattern),
                    winner.name,
                ));
            }
        }
        for b in &self.routes {
            for suffix in &b.suffixes {
                let Some(with) = b.pattern.with_suffix(suffix) else {
                    continue;
                };
                for a in &self.routes {
                    if std::ptr::eq(a, b) || a.method != b.method {
                        continue;
                    }
                    if a.pattern.covers(&with) {
                        errors.push(format!(
                            "{}: route {} lists suffix {suffix:?}, but route {} matches every path it adds, such as {}, as written and takes it first: the suffix never reaches {:?}",
                            b.defined_at,
                            describe(b),
                            describe_at(a),
                            a.pattern.shared_example(&with),
                            b.name,
                        ));
                    } else if a.pattern.overlaps(&with) {
                        warnings.push(format!(
                            "{}: route {} lists suffix {suffix:?}, but route {} matches some paths it adds, such as {}, as written and takes them first",
                            b.defined_at,
                            describe(b),
                            describe_at(a),
                            a.pattern.shared_example(&with),
                        ));
                    }
                }
            }
        }
        (errors, warnings)
    }

    /// Whether the set gates anything at all: an action policy or a route.
    pub fn gates_anything(&self) -> bool {
        !self.actions.is_empty() || !self.routes.is_empty()
    }
}

/// Loads and validates every `*.toml` file in `dir` (not recursive).
/// Dotfiles, editor leftovers (`~`, `.swp`) and policy test files
/// (`*.test.toml`) are skipped. A missing directory is an error; an empty
/// one is a valid empty set.
pub fn load_dir(dir: &Path) -> Result<PolicySet, Vec<PolicyError>> {
    let io = |path: &Path, e: std::io::Error| {
        vec![PolicyError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        }]
    };
    let entries = std::fs::read_dir(dir).map_err(|e| io(dir, e))?;
    let mut sources = Vec::new();
    let mut errors = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io(dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if !is_policy_file(&name) {
            continue;
        }
        let path = entry.path();
        // `metadata` follows symlinks, so a symlinked file (as Kubernetes
        // ConfigMaps mount them) counts and a symlinked directory does not.
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => continue,
            Err(e) => {
                errors.extend(io(&path, e));
                continue;
            }
        }
        match std::fs::read(&path) {
            Ok(bytes) => sources.push(validate::Source {
                name,
                display: path.display().to_string(),
                bytes,
            }),
            Err(e) => errors.extend(io(&path, e)),
        }
    }
    match validate::build(sources) {
        Ok(set) if errors.is_empty() => Ok(set),
        Ok(_) => Err(errors),
        Err(more) => {
            errors.extend(more);
            errors.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
            Err(errors)
        }
    }
}

/// Whether a directory entry name is a policy file. Policy test files
/// (`*.test.toml`, see [`is_test_file`]) are not: they sit beside the
/// policies and are read only by `verdict test`.
pub fn is_policy_file(name: &str) -> bool {
    name.ends_with(".toml")
        && !name.starts_with('.')
        && !name.starts_with('#')
        && !is_test_file(name)
}

/// Whether a directory entry name is a policy test file (`*.test.toml`).
pub fn is_test_file(name: &str) -> bool {
    name.ends_with(TEST_FILE_SUFFIX) && !name.starts_with('.') && !name.starts_with('#')
}

/// The suffix of policy test files.
pub const TEST_FILE_SUFFIX: &str = ".test.toml";

/// What `verdict check` holds the policies against besides their own files.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Warnings fail the check like errors (`--strict`).
    pub strict: bool,
    /// `review.ttl`: a route that holds a call longer than this is an error.
    pub review_ttl: Duration,
    /// The config file `review_ttl` was read from; `None` when it is the
    /// default.
    pub config: Option<String>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            strict: false,
            review_ttl: crate::config::DEFAULT_REVIEW_TTL,
            config: None,
        }
    }
}

/// `verdict check`: the exit code and the text to print (stdout on success,
/// stderr on failure).
pub fn check_dir(dir: &Path) -> (i32, String) {
    check(dir, &CheckOptions::default())
}

/// [`check_dir`], with `strict` making warnings errors.
pub fn check_dir_with(dir: &Path, strict: bool) -> (i32, String) {
    check(
        dir,
        &CheckOptions {
            strict,
            ..CheckOptions::default()
        },
    )
}

/// Validates every file in `dir`, then holds the set against `opts`: the
/// errors of [`PolicySet::errors_against`] fail the check, the
/// [`PolicySet::warnings`] are printed and fail it only with `strict`.
pub fn check(dir: &Path, opts: &CheckOptions) -> (i32, String) {
    let mut out = String::new();
    let set = match load_dir(dir) {
        Ok(set) => set,
        Err(errors) => {
            for e in &errors {
                let _ = writeln!(out, "{e}");
            }
            return (1, out);
        }
    };
    let ttl_from = match &opts.config {
        Some(file) => format!("from {file}"),
        None => "the default; --config FILE checks against a config's".to_string(),
    };
    let errors = set.errors_against(opts.review_ttl, &ttl_from);
    let warnings = set.warnings();
    for e in &errors {
        let _ = writeln!(out, "{e}");
    }
    for w in &warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    if !errors.is_empty() {
        return (1, out);
    }
    if opts.strict && !warnings.is_empty() {
        let _ = writeln!(
            out,
            "{} warning(s), and --strict makes them errors",
            warnings.len()
        );
        return (1, out);
    }
    let _ = writeln!(
        out,
        "ok: {} files, {} actions, {} routes, revision {}",
        set.files.len(),
        set.actions.len(),
        set.routes.len(),
        set.revision
    );
    let _ = writeln!(
        out,
        "hold_timeout checked against review.ttl {} ({ttl_from})",
        crate::config::format_duration(opts.review_ttl)
    );
    (0, out)
}

#[cfg(test)]
mod tests;
