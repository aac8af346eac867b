//! The on-disk TOML format of `policies/*.toml`, exactly as written.
//!
//! These types exist only to be deserialized: they keep the byte spans of the
//! values that later checks may complain about, so that every error can say
//! `file:line:col`. Unknown keys are rejected here, because a misspelt
//! `min_coverag` that silently falls back to a default is a hole in a gate.
//! Nothing outside `policy` sees these types; [`super::validate`] turns them
//! into the domain types.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// One policy file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileDoc {
    pub set: Option<FileSetOptions>,
    #[serde(default)]
    pub action: Vec<FileAction>,
    #[serde(default)]
    pub route: Vec<FileRoute>,
}

/// `[set]`: statements about the whole policy set, such as "this set may
/// gate nothing".
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSetOptions {
    /// A reload may leave no action or route that gates traffic.
    #[serde(default)]
    pub allow_empty: bool,
    /// Route names whose removal this reload acknowledges.
    #[serde(default)]
    pub removed_routes: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileAction {
    #[serde(rename = "type")]
    pub type_: Spanned<String>,
    #[serde(default)]
    pub requirements: FileRequirements,
    #[serde(default)]
    pub options: FileOptions,
    pub require_claims: Option<bool>,
    /// Separate claims a request must carry (default 1).
    pub min_claims: Option<Spanned<u32>>,
    /// Distinct reviewers a held call of this action needs (default: the
    /// server's `review.approvals`).
    pub approvals: Option<Spanned<u32>>,
    #[serde(default)]
    pub redact: Vec<Spanned<String>>,
    #[serde(default)]
    pub rule: Vec<FileRule>,
    /// Param name → declared type (`number`, `integer`, `string`,
    /// `decimal_string`).
    #[serde(default)]
    pub param_types: BTreeMap<String, Spanned<String>>,
    /// Params the supported claims must state.
    #[serde(default)]
    pub bind: Vec<Spanned<String>>,
    /// Where the action's evidence must come from.
    pub evidence: Option<FileEvidence>,
    /// Sources the service reads for every decision of the action, from
    /// uri templates over its params.
    #[serde(default)]
    pub sources_from: Vec<FileSourceFrom>,
}

/// `evidence = { from = "referenced", origins = [...], require_checksum = true }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileEvidence {
    pub from: Spanned<String>,
    #[serde(default)]
    pub origins: Vec<Spanned<String>>,
    #[serde(default)]
    pub require_checksum: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileRequirements {
    pub decision_mode: Option<FileDecisionMode>,
    pub min_coverage: Option<Spanned<f64>>,
    pub citations: Option<FileCitations>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileOptions {
    pub deny_if_any_unsupported: Option<bool>,
    pub evidence_limit: Option<u32>,
    pub min_coverage: Option<Spanned<f64>>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum FileDecisionMode {
    Strict,
    Balanced,
    Audit,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum FileCitations {
    Required,
    Optional,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileRule {
    pub param: Spanned<String>,
    pub op: Spanned<FileOp>,
    pub value: Option<Spanned<toml::Value>>,
    pub effect: FileEffect,
    pub message: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum FileOp {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    In,
    NotIn,
    Present,
    Absent,
    Matches,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum FileEffect {
    Review,
    Deny,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileRoute {
    pub name: Spanned<String>,
    pub method: Spanned<String>,
    pub path: Spanned<String>,
    pub action: Spanned<String>,
    #[serde(default)]
    pub params: BTreeMap<String, Spanned<toml::Value>>,
    pub claims: Option<Spanned<toml::Value>>,
    pub sources: Option<Spanned<toml::Value>>,
    pub answer: Option<Spanned<toml::Value>>,
    pub on_review: Option<FileOnReview>,
    pub hold_timeout: Option<Spanned<String>>,
    pub failure_mode: Option<FileFailureMode>,
    /// The media type the route gates (default `application/json`).
    pub content_type: Option<Spanned<String>>,
    /// Extensions an upstream ignores, such as `.json`: the route matches
    /// `/a/b.json` as `/a/b`.
    #[serde(default)]
    pub suffixes: Vec<Spanned<String>>,
    /// A reload that would remove this route is refused.
    #[serde(default)]
    pub pinned: bool,
    /// Headers that carry the caller's credential besides `Authorization`,
    /// `Cookie` and `Proxy-Authorization` (e.g. `X-Api-Key`).
    #[serde(default)]
    pub credential_headers: Vec<Spanned<String>>,
    /// Per-try headers a retry may change and still join its pending review.
    #[serde(default)]
    pub join_ignore_headers: Vec<Spanned<String>>,
    /// Sources the gate reads for the call, from uri templates over the
    /// route's params.
    #[serde(default)]
    pub sources_from: Vec<FileSourceFrom>,
}

/// `{ id = "invoice", uri = "https://billing.internal/orders/{order_id}/invoice" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSourceFrom {
    pub id: Spanned<String>,
    pub uri: Spanned<String>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum FileOnReview {
    Hold,
    Deny,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum FileFailureMode {
    Closed,
    Open,
}

impl FileOp {
    pub fn name(self) -> &'static str {
        match self {
            FileOp::Eq => "eq",
            FileOp::Ne => "ne",
            FileOp::Gt => "gt",
            FileOp::Ge => "ge",
            FileOp::Lt => "lt",
            FileOp::Le => "le",
            FileOp::In => "in",
            FileOp::NotIn => "not_in",
            FileOp::Present => "present",
            FileOp::Absent => "absent",
            FileOp::Matches => "matches",
        }
    }
}

/// One file, as far as it could be read.
pub(super) struct Parsed {
    /// `None` after a syntax error. When `errors` is not empty, the tables
    /// that had errors are missing from it.
    pub doc: Option<FileDoc>,
    /// `(byte offset, message)` in the order found.
    pub errors: Vec<(usize, String)>,
}

/// Where a table header starts, and whether it is a top-level table
/// (`[[action]]`) or nested in one (`[[action.rule]]`).
#[derive(Debug, Clone, Copy)]
struct Header {
    start: usize,
    top: bool,
}

/// Parses one file, reporting as many errors as it can.
///
/// serde stops at the first error, but a file with a typo in two different
/// tables should show both. So after a shape error (unknown key, bad type)
/// the offending table is blanked out (every byte but newlines becomes a
/// space, so offsets and line numbers stay true) and the file is parsed
/// again, until it parses or nothing more can be learnt. A TOML syntax
/// error stops the file: nothing after it can be trusted.
pub(super) fn parse(text: &str) -> Parsed {
    let first = match toml::from_str::<FileDoc>(text) {
        Ok(doc) => {
            return Parsed {
                doc: Some(doc),
                errors: Vec::new(),
            }
        }
        Err(e) => error_of(&e),
    };
    let mut errors = vec![first];
    let Ok(doc) = toml_edit::ImDocument::parse(text) else {
        return Parsed { doc: None, errors };
    };
    let mut headers = Vec::new();
    collect_headers(doc.as_table(), true, &mut headers);
    headers.sort_by_key(|h| h.start);

    let mut buf = text.as_bytes().to_vec();
    // Each round blanks at least one more table or line, so this bounds it.
    for _ in 0..=headers.len() + text.lines().count() {
        let Some(&(at, _)) = errors.last() else { break };
        for b in &mut buf[region(&headers, text, at)] {
            if *b != b'\n' && *b != b'\r' {
                *b = b' ';
            }
        }
        // INVARIANT: regions start and end on ASCII bytes (`[` or a line
        // break), so the blanked text is still UTF-8.
        let Ok(blanked) = std::str::from_utf8(&buf) else {
            break;
        };
        match toml::from_str::<FileDoc>(blanked) {
            Ok(doc) => {
                return Parsed {
                    doc: Some(doc),
                    errors,
                }
            }
            Err(e) => {
                let next = error_of(&e);
                if errors.contains(&next) {
                    break;
                }
                errors.push(next);
            }
        }
    }
    Parsed { doc: None, errors }
}

fn error_of(e: &toml::de::Error) -> (usize, String) {
    (e.span().map_or(0, |s| s.start), one_line(e.message()))
}

fn collect_headers(table: &toml_edit::Table, top: bool, out: &mut Vec<Header>) {
    let add = |t: &toml_edit::Table, out: &mut Vec<Header>| {
        if let Some(span) = t.span() {
            out.push(Header {
                start: span.start,
                top,
            });
        }
        collect_headers(t, false, out);
    };
    for (_, item) in table.iter() {
        match item {
            toml_edit::Item::Table(t) => add(t, out),
            toml_edit::Item::ArrayOfTables(a) => a.iter().for_each(|t| add(t, out)),
            _ => {}
        }
    }
}

/// The bytes to blank for an error at `at`: the nested table that holds it
/// (one `[[action.rule]]`), else the whole top-level table with its nested
/// ones, else (before any header) the line.
fn region(headers: &[Header], text: &str, at: usize) -> std::ops::Range<usize> {
    let at = at.min(text.len());
    match headers.iter().rposition(|h| h.start <= at) {
        Some(i) => {
            let h = headers[i];
            let end = headers[i + 1..]
                .iter()
                .find(|n| !h.top || n.top)
                .map_or(text.len(), |n| n.start);
            h.start..end
        }
        None => {
            let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
            let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
            start..end
        }
    }
}

/// TOML syntax messages span several lines (`invalid table header` then
/// `expected ...`); `verdict check` prints one error per line.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(": ")
}
