//! Action policies and their param rules, evaluated as a pure function.
//!
//! A rule is checked against the action's params before any evidence is
//! fetched, so it must be cheap, total and impossible to crash: every
//! comparison is defined for every input, and a value of the wrong shape
//! never matches by accident: a value whose type the comparison cannot read
//! (a string `"6_000"` for `amount gt 500`, an array, full-width digits) is a
//! [`ParamMismatch`], which denies, instead of a rule that silently does not
//! match while the upstream's parser reads 6 000. The params arrive as a small
//! typed tree ([`ParamValue`]) rather than `serde_json::Value`, so the engine
//! never has to know about JSON.

use std::collections::BTreeMap;

use regex::Regex;

pub use crate::engine::model::{
    Citations, DecisionMode, Effect, Floor, Options, Requirements, RuleHit,
};
pub use crate::engine::numbers::parse_decimal;

/// One `[[action]]` table: the floors and rules for one action type.
#[derive(Debug, Clone)]
pub struct ActionPolicy {
    pub type_: String,
    /// `file:line:col` of its `type`, for `verdict check`'s warnings.
    pub defined_at: String,
    pub requirements: Requirements,
    pub options: Options,
    /// `true` (the default) fails closed when a request carries no claims.
    pub require_claims: bool,
    /// Separate claims a request must carry when `require_claims` (1 by
    /// default; `min_claims = 2` asks for two).
    pub min_claims: u32,
    /// Distinct reviewers a held call of this action needs (`approvals`);
    /// `None`: the server's `review.approvals`.
    pub approvals: Option<u32>,
    /// Param paths such as `params.card_number` that the audit log stores as
    /// `hmac-sha256:<hex>` under the data dir's redaction key instead of
    /// their value.
    pub redact: Vec<String>,
    /// In file order; [`RuleHit::rule`] indexes this list.
    pub rules: Vec<Rule>,
    /// Declared param types; a present value of another type is a mismatch.
    pub param_types: BTreeMap<String, ParamType>,
    /// Params that a supported claim must state (`bind = [...]`).
    pub bind: Vec<String>,
    /// Where the evidence for this action must come from (`evidence = {...}`).
    pub provenance: Provenance,
    /// Records the service reads for every decision of this action
    /// (`sources_from`), named by templates over `action.params`.
    pub sources_from: Vec<super::route::SourceTemplate>,
}

/// An action's `evidence` table: which sources may support its claims.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Provenance {
    /// The table is written (even as `from = "any"`): the author chose.
    pub declared: bool,
    /// `from = "referenced"`: only sources read by `uri` from `origins`
    /// count; a caller's inline text supports nothing.
    pub referenced: bool,
    /// `scheme://host:port` (default port explicit, lower case) of each
    /// allowed http(s) origin, and `file://` for files under
    /// `evidence.roots`.
    pub origins: Vec<String>,
    /// A source must also carry a `sha256:` checksum of its content.
    pub require_checksum: bool,
}

impl Provenance {
    /// Why a source the caller named may not support this action's claims,
    /// or `None` when it may. `uri` is the source's uri (`None` for inline
    /// text); its origin is compared as `evidence.allow_origins` compares
    /// it ([`crate::config::normalize_origin`]).
    pub fn refuses(&self, uri: Option<&str>, checksum: bool) -> Option<String> {
        if !self.referenced {
            return None;
        }
        let allowed = self.origins.join(", ");
        let Some(uri) = uri else {
            return Some(format!(
                "inline text: this action takes evidence only by uri from {allowed}"
            ));
        };
        let origin = crate::config::normalize_origin(uri);
        let origin = origin.as_deref();
        let from_file = uri.starts_with("file://") && self.origins.iter().any(|o| o == "file://");
        let from_origin = origin.is_some_and(|o| self.origins.iter().any(|a| a == o));
        if !(from_file || from_origin) {
            return Some(format!(
                "{}: not an origin this action takes evidence from ({allowed})",
                origin.unwrap_or("this uri")
            ));
        }
        if self.require_checksum && !checksum {
            return Some(
                "no checksum: this action requires a sha256 checksum on every source".into(),
            );
        }
        None
    }
}

/// The origin an `origins` entry names, normalised as [`Provenance::origins`]
/// holds it (as `evidence.allow_origins` and fetched uris are, by
/// [`crate::config::normalize_origin`]): `None` when it is not `file://`
/// or a bare http(s) origin.
pub fn provenance_origin(s: &str) -> Option<String> {
    if s.trim() == "file://" {
        return Some("file://".to_string());
    }
    crate::config::bare_origin(s)
}

/// A declared param type (`param_types = { amount = "number" }`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    /// A JSON number.
    Number,
    /// A JSON number with no fractional part.
    Integer,
    /// A JSON string.
    String,
    /// A JSON number, or a string in plain decimal notation (`-12.50`, no
    /// signs other than a leading `-`, no exponent, separators or spaces),
    /// for params that arrive as text (path, query, header).
    DecimalString,
}

/// A param whose value the policy cannot read the way it is declared or
/// compared: the request is denied (`param_type_mismatch`).
#[derive(Debug, Clone, PartialEq)]
pub struct ParamMismatch {
    pub param: String,
    pub message: String,
}

/// The rule hits and type mismatches of one request's params.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evaluation {
    pub hits: Vec<RuleHit>,
    pub mismatches: Vec<ParamMismatch>,
}

/// What one rule made of one request's params.
#[derive(Debug, Clone, PartialEq)]
pub enum RuleResult {
    /// The rule matched: its effect applies.
    Hit,
    /// The rule did not match (an absent param matches only `absent`).
    Miss,
    /// The value cannot be read the way the rule compares (or its declared
    /// type says): a [`ParamMismatch`], which denies.
    Mismatch(String),
}

/// One `[[action.rule]]`.
#[derive(Debug, Clone)]
pub struct Rule {
    /// A param name, or a dotted path such as `customer.tier`.
    pub param: String,
    pub op: Op,
    pub effect: Effect,
    /// The text shown to the caller and the reviewer. When the file gives
    /// none, it is generated from the rule (`amount gt 500`).
    pub message: String,
}

/// A scalar operand of a rule, from the file.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Number(f64),
    String(String),
}

/// A rule operator with its operand, checked for shape at load time so that
/// evaluation cannot fail.
#[derive(Debug, Clone)]
pub enum Op {
    Eq(Scalar),
    Ne(Scalar),
    Gt(f64),
    Ge(f64),
    Lt(f64),
    Le(f64),
    In(Vec<Scalar>),
    NotIn(Vec<Scalar>),
    Present,
    Absent,
    Matches(Regex),
}

/// A param value: the JSON data model without the JSON.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<ParamValue>),
    Object(BTreeMap<String, ParamValue>),
}

/// The params of one request, looked up by name or dotted path.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParamLookup {
    root: BTreeMap<String, ParamValue>,
}

// === impl ActionPolicy ===

impl ActionPolicy {
    /// The floors the decision reads: `requirements`, `options` and
    /// `require_claims`, in the engine's terms.
    pub fn floor(&self) -> Floor<'_> {
        Floor {
            requirements: &self.requirements,
            options: &self.options,
            require_claims: self.require_claims,
            min_claims: self.min_claims as usize,
        }
    }

    /// Every rule that matches `params`, in rule order, and every param whose
    /// type a declaration or a rule cannot read. Pure and total.
    pub fn evaluate(&self, params: &ParamLookup) -> Evaluation {
        self.evaluate_traced(params).0
    }

    /// [`ActionPolicy::evaluate`], and what each rule made of the params
    /// (one [`RuleResult`] per rule, in rule order), misses included: what
    /// an explanation shows.
    pub fn evaluate_traced(&self, params: &ParamLookup) -> (Evaluation, Vec<RuleResult>) {
        let mut out = Evaluation::default();
        let mut mismatch = |param: &str, message: String| {
            if !out.mismatches.iter().any(|m| m.param == param) {
                out.mismatches.push(ParamMismatch {
                    param: param.to_string(),
                    message,
                });
            }
        };
        for (name, ty) in &self.param_types {
            if let Some(v) = params.get(name) {
                if let Err(m) = view(v, Some(*ty)) {
                    mismatch(name, format!("{name}: {m}"));
                }
            }
        }
        let mut hits = Vec::new();
        let mut results = Vec::with_capacity(self.rules.len());
        for (i, r) in self.rules.iter().enumerate() {
            let declared = self.param_types.get(&r.param).copied();
            match r.evaluate(params.get(&r.param), declared) {
                Ok(true) => {
                    hits.push(RuleHit {
                        effect: r.effect,
                        rule: i,
                        param: r.param.clone(),
                        message: r.message.clone(),
                    });
                    results.push(RuleResult::Hit);
                }
                Ok(false) => results.push(RuleResult::Miss),
                Err(m) => {
                    let message = format!("{}: {m}", r.param);
                    mismatch(&r.param, message.clone());
                    results.push(RuleResult::Mismatch(message));
                }
            }
        }
        out.hits = hits;
        (out, results)
    }

    /// The rules that match `params`, in rule order (type mismatches left
    /// out; see [`ActionPolicy::evaluate`]).
    pub fn evaluate_rules(&self, params: &ParamLookup) -> Vec<RuleHit> {
        self.evaluate(params).hits
    }
}

/// A present value as a comparison reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum View<'a> {
    Num(f64),
    Str(&'a str),
    Bool(bool),
    /// An array or object: no comparison reads it.
    Composite,
}

/// How a declared type reads a value, or why it cannot.
fn view(v: &ParamValue, declared: Option<ParamType>) -> Result<View<'_>, String> {
    let got = || format!("got {}", v.describe());
    match (declared, v) {
        (None, ParamValue::Number(n)) => Ok(View::Num(*n)),
        (None, ParamValue::String(s)) => Ok(View::Str(s)),
        (None, ParamValue::Bool(b)) => Ok(View::Bool(*b)),
        (None, _) => Ok(View::Composite),
        (Some(ParamType::Number | ParamType::DecimalString), ParamValue::Number(n)) => {
            Ok(View::Num(*n))
        }
        (Some(ParamType::Number), _) => Err(format!("declared number, {}", got())),
        (Some(ParamType::Integer), ParamValue::Number(n)) if n.fract() == 0.0 => Ok(View::Num(*n)),
        (Some(ParamType::Integer), _) => Err(format!("declared integer, {}", got())),
        (Some(ParamType::String), ParamValue::String(s)) => Ok(View::Str(s)),
        (Some(ParamType::String), _) => Err(format!("declared string, {}", got())),
        (Some(ParamType::DecimalString), ParamValue::String(s)) => parse_decimal(s)
            .map(View::Num)
            .ok_or_else(|| format!("declared decimal_string, {}", got())),
        (Some(ParamType::DecimalString), _) => Err(format!("declared decimal_string, {}", got())),
    }
}

// === impl Rule ===

impl Rule {
    /// Whether the rule matches a param value (`None` when the param is
    /// absent), read as `declared`, or why the value cannot be compared. An
    /// absent or null param is only ever matched by `absent` and is never a
    /// mismatch.
    pub fn evaluate(
        &self,
        value: Option<&ParamValue>,
        declared: Option<ParamType>,
    ) -> Result<bool, String> {
        let value = match value {
            Some(ParamValue::Null) | None => return Ok(matches!(self.op, Op::Absent)),
            Some(v) => v,
        };
        let raw = value;
        let value = view(value, declared)?;
        let number = || match value {
            View::Num(n) => Ok(n),
            _ => Err(format!(
                "{} compares numbers, got {}",
                self.op.name(),
                raw.describe()
            )),
        };
        let equals = |s: &Scalar| -> Result<bool, String> {
            match (value, s) {
                (View::Num(a), Scalar::Number(b)) => Ok(a == *b),
                (View::Str(a), Scalar::String(b)) => Ok(a == b),
                (View::Bool(a), Scalar::Bool(b)) => Ok(a == *b),
                _ => Err(format!(
                    "{} compares with {s}, got {}",
                    self.op.name(),
                    raw.describe()
                )),
            }
        };
        let any_equal = |list: &[Scalar]| -> Result<bool, String> {
            let mut readable = false;
            for s in list {
                if let Ok(eq) = equals(s) {
                    readable = true;
                    if eq {
                        return Ok(true);
                    }
                }
            }
            if readable || list.is_empty() {
                Ok(false)
            } else {
                Err(format!(
                    "{} compares with {}, got {}",
                    self.op.name(),
                    self.op.describe(),
                    raw.describe()
                ))
            }
        };
        match &self.op {
            Op::Present => Ok(true),
            Op::Absent => Ok(false),
            Op::Eq(s) => equals(s),
            Op::Ne(s) => equals(s).map(|eq| !eq),
            Op::Gt(n) => Ok(number()? > *n),
            Op::Ge(n) => Ok(number()? >= *n),
            Op::Lt(n) => Ok(number()? < *n),
            Op::Le(n) => Ok(number()? <= *n),
            Op::In(list) => any_equal(list),
            Op::NotIn(list) => any_equal(list).map(|eq| !eq),
            Op::Matches(re) => match raw {
                ParamValue::String(t) => Ok(re.is_match(t)),
                _ => Err(format!("matches reads strings, got {}", raw.describe())),
            },
        }
    }

    /// Whether the rule matches an undeclared param value; a value it cannot
    /// compare does not match (see [`Rule::evaluate`] for the mismatch).
    pub fn matches(&self, value: Option<&ParamValue>) -> bool {
        self.evaluate(value, None).unwrap_or(false)
    }
}

// === impl Op ===

impl Op {
    /// The operator's name as written in policy files.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Eq(_) => "eq",
            Op::Ne(_) => "ne",
            Op::Gt(_) => "gt",
            Op::Ge(_) => "ge",
            Op::Lt(_) => "lt",
            Op::Le(_) => "le",
            Op::In(_) => "in",
            Op::NotIn(_) => "not_in",
            Op::Present => "present",
            Op::Absent => "absent",
            Op::Matches(_) => "matches",
        }
    }

    /// `op value` as a human would write it, for generated messages.
    pub fn describe(&self) -> String {
        let list = |l: &[Scalar]| {
            let items: Vec<String> = l.iter().map(Scalar::to_string).collect();
            format!("[{}]", items.join(", "))
        };
        match self {
            Op::Eq(s) | Op::Ne(s) => format!("{} {s}", self.name()),
            Op::Gt(n) | Op::Ge(n) | Op::Lt(n) | Op::Le(n) => format!("{} {n}", self.name()),
            Op::In(l) | Op::NotIn(l) => format!("{} {}", self.name(), list(l)),
            Op::Present | Op::Absent => self.name().to_string(),
            Op::Matches(re) => format!("matches {:?}", re.as_str()),
        }
    }
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Number(n) => write!(f, "{n}"),
            Scalar::String(s) => write!(f, "{s:?}"),
        }
    }
}

// === impl ParamValue ===

impl ParamValue {
    /// A short description for messages: the type and, for scalars, the
    /// value (strings cut at 40 characters).
    pub fn describe(&self) -> String {
        match self {
            ParamValue::Null => "null".into(),
            ParamValue::Bool(b) => format!("boolean {b}"),
            ParamValue::Number(n) => format!("number {n}"),
            ParamValue::String(s) => {
                let cut: String = s.chars().take(40).collect();
                let more = if cut.len() < s.len() { "..." } else { "" };
                format!("string {cut:?}{more}")
            }
            ParamValue::Array(_) => "an array".into(),
            ParamValue::Object(_) => "an object".into(),
        }
    }
}

impl From<&serde_json::Value> for ParamValue {
    fn from(v: &serde_json::Value) -> Self {
        use serde_json::Value;
        match v {
            Value::Null => ParamValue::Null,
            Value::Bool(b) => ParamValue::Bool(*b),
            // INVARIANT: serde_json numbers are finite; `as_f64` is only
            // `None` for arbitrary-precision numbers, which we do not enable.
            Value::Number(n) => n.as_f64().map_or(ParamValue::Null, ParamValue::Number),
            Value::String(s) => ParamValue::String(s.clone()),
            Value::Array(a) => ParamValue::Array(a.iter().map(ParamValue::from).collect()),
            Value::Object(o) => ParamValue::Object(
                o.iter()
                    .map(|(k, v)| (k.clone(), ParamValue::from(v)))
                    .collect(),
            ),
        }
    }
}

// === impl ParamLookup ===

impl ParamLookup {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, name: impl Into<String>, value: ParamValue) {
        self.root.insert(name.into(), value);
    }

    /// Looks up `path`. An exact top-level name wins; otherwise the path is
    /// split on `.` and walks objects (and arrays, by decimal index).
    pub fn get(&self, path: &str) -> Option<&ParamValue> {
        if let Some(v) = self.root.get(path) {
            return Some(v);
        }
        let mut parts = path.split('.');
        let mut cur = self.root.get(parts.next()?)?;
        for part in parts {
            cur = match cur {
                ParamValue::Object(o) => o.get(part)?,
                ParamValue::Array(a) => a.get(part.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(cur)
    }
}

impl From<&serde_json::Map<String, serde_json::Value>> for ParamLookup {
    fn from(m: &serde_json::Map<String, serde_json::Value>) -> Self {
        ParamLookup {
            root: m
                .iter()
                .map(|(k, v)| (k.clone(), ParamValue::from(v)))
                .collect(),
        }
    }
}

impl FromIterator<(String, ParamValue)> for ParamLookup {
    fn from_iter<I: IntoIterator<Item = (String, ParamValue)>>(iter: I) -> Self {
        ParamLookup {
            root: iter.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests;
