//! Action policies and their param rules, evaluated as a pure function.
//!
//! A rule is checked against the action's params before any evidence is
//! fetched, so it must be cheap, total and impossible to crash: every
//! comparison is defined for every input, and a value of the wrong shape
//! simply does not match. The params arrive as a small typed tree
//! ([`ParamValue`]) rather than `serde_json::Value`, so the engine never has to
//! know about JSON.

use std::collections::BTreeMap;

use regex::Regex;

/// How strictly the engine treats a decision (§5). Ordered loosest first so
/// that `max` picks the tighter of two modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DecisionMode {
    Audit,
    Balanced,
    Strict,
}

/// Whether every claim must cite a source. Ordered loosest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Citations {
    Optional,
    Required,
}

/// What a matching rule asks for. Ordered weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Effect {
    Review,
    Deny,
}

/// The `requirements` floor of an action policy. `None` means the policy sets
/// no floor for that field and the default or the request decides.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Requirements {
    pub decision_mode: Option<DecisionMode>,
    pub min_coverage: Option<f64>,
    pub citations: Option<Citations>,
}

/// The `options` floor of an action policy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    pub deny_if_any_unsupported: Option<bool>,
    pub evidence_limit: Option<u32>,
    /// Always equal to `requirements.min_coverage` when both are set: the
    /// loader rejects a policy where they differ.
    pub min_coverage: Option<f64>,
}

/// One `[[action]]` table: the floors and rules for one action type.
#[derive(Debug, Clone)]
pub struct ActionPolicy {
    pub type_: String,
    pub requirements: Requirements,
    pub options: Options,
    /// `true` (the default) fails closed when a request carries no claims.
    pub require_claims: bool,
    /// Param paths such as `params.card_number` that the audit log stores as
    /// their sha256 instead of their value.
    pub redact: Vec<String>,
    /// In file order; [`RuleHit::rule`] indexes this list.
    pub rules: Vec<Rule>,
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

/// A rule that matched.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleHit {
    pub effect: Effect,
    /// Index into [`ActionPolicy::rules`].
    pub rule: usize,
    pub param: String,
    pub message: String,
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
    /// Every rule that matches `params`, in rule order. Pure and total.
    pub fn evaluate_rules(&self, params: &ParamLookup) -> Vec<RuleHit> {
        self.rules
            .iter()
            .enumerate()
            .filter(|(_, r)| r.matches(params.get(&r.param)))
            .map(|(i, r)| RuleHit {
                effect: r.effect,
                rule: i,
                param: r.param.clone(),
                message: r.message.clone(),
            })
            .collect()
    }
}

// === impl Rule ===

impl Rule {
    /// Whether the rule matches a param value (`None` when the param is
    /// absent). An absent or null param is only ever matched by `absent`.
    pub fn matches(&self, value: Option<&ParamValue>) -> bool {
        let value = match value {
            Some(ParamValue::Null) | None => return matches!(self.op, Op::Absent),
            Some(v) => v,
        };
        match &self.op {
            Op::Present => true,
            Op::Absent => false,
            Op::Eq(s) => value.equals(s),
            Op::Ne(s) => !value.equals(s),
            Op::Gt(n) => value.as_number().is_some_and(|v| v > *n),
            Op::Ge(n) => value.as_number().is_some_and(|v| v >= *n),
            Op::Lt(n) => value.as_number().is_some_and(|v| v < *n),
            Op::Le(n) => value.as_number().is_some_and(|v| v <= *n),
            Op::In(list) => list.iter().any(|s| value.equals(s)),
            Op::NotIn(list) => !list.iter().any(|s| value.equals(s)),
            Op::Matches(re) => value.as_text().is_some_and(|t| re.is_match(&t)),
        }
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
    /// The value as a number. Numeric strings count, because path, query and
    /// header params always arrive as strings.
    pub fn as_number(&self) -> Option<f64> {
        match self {
            ParamValue::Number(n) => Some(*n),
            ParamValue::String(s) => s.trim().parse::<f64>().ok().filter(|n| n.is_finite()),
            _ => None,
        }
    }

    /// The value as text for `matches`: strings, numbers and booleans.
    fn as_text(&self) -> Option<std::borrow::Cow<'_, str>> {
        match self {
            ParamValue::String(s) => Some(s.as_str().into()),
            ParamValue::Number(n) => Some(n.to_string().into()),
            ParamValue::Bool(b) => Some(b.to_string().into()),
            _ => None,
        }
    }

    /// Equality with a rule operand. A number operand compares numerically
    /// (numeric strings count); a boolean operand also accepts the strings
    /// `true` and `false`; a string operand needs a string.
    fn equals(&self, s: &Scalar) -> bool {
        match (self, s) {
            (_, Scalar::Number(n)) => self.as_number() == Some(*n),
            (ParamValue::Bool(a), Scalar::Bool(b)) => a == b,
            (ParamValue::String(a), Scalar::Bool(b)) => a.parse::<bool>().ok() == Some(*b),
            (ParamValue::String(a), Scalar::String(b)) => a == b,
            _ => false,
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
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(param: &str, op: Op) -> Rule {
        Rule {
            param: param.into(),
            message: format!("{param} {}", op.describe()),
            op,
            effect: Effect::Review,
        }
    }

    fn s(v: &str) -> Scalar {
        Scalar::String(v.into())
    }

    fn params() -> ParamLookup {
        ParamLookup::from(
            json!({
                "amount": 600,
                "amount_str": "600",
                "currency": "EUR",
                "flag": true,
                "flag_str": "true",
                "nothing": null,
                "customer": {"tier": "gold", "tags": ["a", "b"]},
                "dotted.key": "exact",
            })
            .as_object()
            .unwrap(),
        )
    }

    #[test]
    fn every_op_on_present_absent_and_wrong_types() {
        let re = |p: &str| Op::Matches(Regex::new(p).unwrap());
        // (param, op, expected)
        let cases: Vec<(&str, Op, bool)> = vec![
            ("amount", Op::Eq(Scalar::Number(600.0)), true),
            ("amount_str", Op::Eq(Scalar::Number(600.0)), true),
            ("amount", Op::Eq(s("600")), false),
            ("currency", Op::Eq(s("EUR")), true),
            ("currency", Op::Eq(s("eur")), false),
            ("flag", Op::Eq(Scalar::Bool(true)), true),
            ("flag_str", Op::Eq(Scalar::Bool(true)), true),
            ("missing", Op::Eq(s("x")), false),
            ("currency", Op::Ne(s("USD")), true),
            ("currency", Op::Ne(s("EUR")), false),
            ("missing", Op::Ne(s("USD")), false),
            ("nothing", Op::Ne(s("USD")), false),
            ("amount", Op::Gt(500.0), true),
            ("amount", Op::Gt(600.0), false),
            ("amount_str", Op::Gt(500.0), true),
            ("currency", Op::Gt(500.0), false),
            ("missing", Op::Gt(-1.0), false),
            ("amount", Op::Ge(600.0), true),
            ("amount", Op::Ge(600.5), false),
            ("amount", Op::Lt(600.5), true),
            ("amount", Op::Lt(600.0), false),
            ("amount", Op::Le(600.0), true),
            ("amount", Op::Le(599.0), false),
            ("missing", Op::Le(1e9), false),
            ("currency", Op::In(vec![s("USD"), s("EUR")]), true),
            ("currency", Op::In(vec![s("USD")]), false),
            ("amount", Op::In(vec![Scalar::Number(600.0)]), true),
            ("missing", Op::In(vec![s("USD")]), false),
            ("currency", Op::NotIn(vec![s("USD")]), true),
            ("currency", Op::NotIn(vec![s("EUR")]), false),
            ("missing", Op::NotIn(vec![s("EUR")]), false),
            ("currency", Op::Present, true),
            ("missing", Op::Present, false),
            ("nothing", Op::Present, false),
            ("currency", Op::Absent, false),
            ("missing", Op::Absent, true),
            ("nothing", Op::Absent, true),
            ("currency", re("^[A-Z]{3}$"), true),
            ("currency", re("^usd$"), false),
            ("amount", re("^6\\d\\d$"), true),
            ("customer", re(".*"), false),
            ("missing", re(".*"), false),
            ("customer.tier", Op::Eq(s("gold")), true),
            ("customer.tags.1", Op::Eq(s("b")), true),
            ("customer.tags.9", Op::Present, false),
            ("customer.tier.x", Op::Absent, true),
            ("dotted.key", Op::Eq(s("exact")), true),
        ];
        let p = params();
        for (i, (param, op, want)) in cases.into_iter().enumerate() {
            let desc = op.describe();
            let r = rule(param, op);
            assert_eq!(r.matches(p.get(param)), want, "case {i}: {param} {desc}");
        }
    }

    #[test]
    fn evaluate_rules_reports_hits_in_order() {
        let policy = ActionPolicy {
            type_: "refund.create".into(),
            requirements: Requirements::default(),
            options: Options::default(),
            require_claims: true,
            redact: vec![],
            rules: vec![
                Rule {
                    effect: Effect::Review,
                    ..rule("amount", Op::Gt(500.0))
                },
                Rule {
                    effect: Effect::Deny,
                    ..rule("amount", Op::Gt(5000.0))
                },
                Rule {
                    effect: Effect::Deny,
                    ..rule("currency", Op::NotIn(vec![s("EUR")]))
                },
                Rule {
                    effect: Effect::Deny,
                    ..rule("reason", Op::Absent)
                },
            ],
        };
        let hits = policy.evaluate_rules(&params());
        assert_eq!(
            hits,
            vec![
                RuleHit {
                    effect: Effect::Review,
                    rule: 0,
                    param: "amount".into(),
                    message: "amount gt 500".into()
                },
                RuleHit {
                    effect: Effect::Deny,
                    rule: 3,
                    param: "reason".into(),
                    message: "reason absent".into()
                },
            ]
        );
        assert!(policy.evaluate_rules(&ParamLookup::new()).len() == 1);
    }

    #[test]
    fn param_value_from_json() {
        let v = ParamValue::from(&json!({"a": [1, "x", null, false]}));
        let mut want = BTreeMap::new();
        want.insert(
            "a".to_string(),
            ParamValue::Array(vec![
                ParamValue::Number(1.0),
                ParamValue::String("x".into()),
                ParamValue::Null,
                ParamValue::Bool(false),
            ]),
        );
        assert_eq!(v, ParamValue::Object(want));
    }

    #[test]
    fn floors_order_loosest_first() {
        assert!(DecisionMode::Strict > DecisionMode::Balanced);
        assert!(DecisionMode::Balanced > DecisionMode::Audit);
        assert!(Citations::Required > Citations::Optional);
        assert!(Effect::Deny > Effect::Review);
    }
}
