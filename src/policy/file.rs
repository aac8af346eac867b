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
    #[serde(default)]
    pub action: Vec<FileAction>,
    #[serde(default)]
    pub route: Vec<FileRoute>,
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
    #[serde(default)]
    pub redact: Vec<Spanned<String>>,
    #[serde(default)]
    pub rule: Vec<FileRule>,
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

/// Parses one file. A TOML syntax or shape error stops this file (the TOML
/// parser cannot continue past it) but not the others.
pub(super) fn parse(text: &str) -> Result<FileDoc, (usize, String)> {
    toml::from_str::<FileDoc>(text)
        .map_err(|e| (e.span().map_or(0, |s| s.start), one_line(e.message())))
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
