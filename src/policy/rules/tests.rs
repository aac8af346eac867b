//! Unit tests of the parent module, kept in their own file so that the
//! module itself reads as code.

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

fn policy(rules: Vec<Rule>) -> ActionPolicy {
    ActionPolicy {
        type_: "refund.create".into(),
        defined_at: String::new(),
        requirements: Requirements::default(),
        options: Options::default(),
        require_claims: true,
        min_claims: 1,
        approvals: None,
        redact: vec![],
        rules,
        param_types: BTreeMap::new(),
        bind: vec![],
        provenance: Provenance::default(),
        sources_from: vec![],
    }
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

/// What a rule says about one value.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    Match,
    NoMatch,
    /// The value cannot be compared the way the rule compares.
    Mismatch,
}

#[test]
fn every_op_on_present_absent_and_wrong_types() {
    use Want::{Match, Mismatch, NoMatch};
    let re = |p: &str| Op::Matches(Regex::new(p).unwrap());
    // (param, op, expected)
    let mut cases: Vec<(&str, Op, Want)> = vec![
        ("amount", Op::Eq(Scalar::Number(600.0)), Match),
        // A numeric string is not a number: pydantic and Number() read
        // "6_000" or "0x1770" as 6000, Rust does not, so neither may we.
        ("amount_str", Op::Eq(Scalar::Number(600.0)), Mismatch),
        ("amount", Op::Eq(s("600")), Mismatch),
        ("currency", Op::Eq(s("EUR")), Match),
        ("currency", Op::Eq(s("eur")), NoMatch),
        ("flag", Op::Eq(Scalar::Bool(true)), Match),
        ("flag_str", Op::Eq(Scalar::Bool(true)), Mismatch),
        ("missing", Op::Eq(s("x")), NoMatch),
        ("currency", Op::Ne(s("USD")), Match),
        ("currency", Op::Ne(s("EUR")), NoMatch),
        ("missing", Op::Ne(s("USD")), NoMatch),
        ("nothing", Op::Ne(s("USD")), NoMatch),
        ("amount", Op::Gt(500.0), Match),
        ("amount", Op::Gt(600.0), NoMatch),
        ("missing", Op::Gt(-1.0), NoMatch),
        ("amount", Op::Ge(600.0), Match),
        ("amount", Op::Ge(600.5), NoMatch),
        ("amount", Op::Lt(600.5), Match),
        ("amount", Op::Lt(600.0), NoMatch),
        ("amount", Op::Le(600.0), Match),
        ("amount", Op::Le(599.0), NoMatch),
        ("missing", Op::Le(1e9), NoMatch),
        ("currency", Op::In(vec![s("USD"), s("EUR")]), Match),
        ("currency", Op::In(vec![s("USD")]), NoMatch),
        ("amount", Op::In(vec![Scalar::Number(600.0)]), Match),
        ("amount", Op::In(vec![s("600")]), Mismatch),
        ("amount", Op::In(vec![s("x"), Scalar::Number(1.0)]), NoMatch),
        ("missing", Op::In(vec![s("USD")]), NoMatch),
        ("currency", Op::NotIn(vec![s("USD")]), Match),
        ("currency", Op::NotIn(vec![s("EUR")]), NoMatch),
        ("flag", Op::NotIn(vec![s("EUR")]), Mismatch),
        ("missing", Op::NotIn(vec![s("EUR")]), NoMatch),
        ("currency", Op::Present, Match),
        ("missing", Op::Present, NoMatch),
        ("nothing", Op::Present, NoMatch),
        ("currency", Op::Absent, NoMatch),
        ("missing", Op::Absent, Match),
        ("nothing", Op::Absent, Match),
        ("currency", re("^[A-Z]{3}$"), Match),
        ("currency", re("^usd$"), NoMatch),
        ("amount", re("^6\\d\\d$"), Mismatch),
        ("customer", re(".*"), Mismatch),
        ("missing", re(".*"), NoMatch),
        ("customer.tier", Op::Eq(s("gold")), Match),
        ("customer.tags.1", Op::Eq(s("b")), Match),
        ("customer.tags.9", Op::Present, NoMatch),
        ("customer.tier.x", Op::Absent, Match),
        ("dotted.key", Op::Eq(s("exact")), Match),
    ];
    // A numeric comparison reads only numbers: a numeric string, a
    // string, an object and an array are each a mismatch.
    for param in ["amount_str", "currency", "customer", "customer.tags"] {
        cases.push((param, Op::Gt(500.0), Mismatch));
    }
    let p = params();
    for (i, (param, op, want)) in cases.into_iter().enumerate() {
        let desc = op.describe();
        let r = rule(param, op);
        let got = match r.evaluate(p.get(param), None) {
            Ok(true) => Match,
            Ok(false) => NoMatch,
            Err(_) => Mismatch,
        };
        assert_eq!(got, want, "case {i}: {param} {desc}");
        assert_eq!(r.matches(p.get(param)), want == Match, "case {i}");
    }
}

#[test]
fn declared_types_read_and_refuse_spellings() {
    use Want::{Match, Mismatch, NoMatch};
    // The spellings an outside tester fed `amount gt 500`: each is read
    // as 6000 by some upstream parser, so each must deny, never pass.
    let spellings = [
        json!("6_000"),
        json!("0x1770"),
        json!([6000]),
        json!("\u{ff16}\u{ff10}\u{ff10}\u{ff10}"),
        json!("$6000"),
        json!("Infinity"),
        json!("6e3"),
        json!(" 6000"),
        json!("6,000"),
        json!("+6000"),
        json!("06000"),
        json!(true),
        json!({"value": 6000}),
    ];
    for declared in [
        None,
        Some(ParamType::Number),
        Some(ParamType::Integer),
        Some(ParamType::DecimalString),
    ] {
        for v in &spellings {
            let value = ParamValue::from(v);
            let got = rule("amount", Op::Gt(500.0)).evaluate(Some(&value), declared);
            assert!(got.is_err(), "{declared:?} {v}: {got:?}");
        }
    }
    let cases: Vec<(serde_json::Value, Option<ParamType>, Want)> = vec![
        (json!(6000), None, Match),
        (json!(6000), Some(ParamType::Number), Match),
        (json!(6000.5), Some(ParamType::Integer), Mismatch),
        (json!(6000.0), Some(ParamType::Integer), Match),
        (json!("6000"), Some(ParamType::DecimalString), Match),
        (json!("-1.50"), Some(ParamType::DecimalString), NoMatch),
        (json!(6000), Some(ParamType::DecimalString), Match),
        (json!("6000"), Some(ParamType::String), Mismatch),
        (json!("6000"), Some(ParamType::Number), Mismatch),
    ];
    for (v, declared, want) in cases {
        let value = ParamValue::from(&v);
        let got = match rule("amount", Op::Gt(500.0)).evaluate(Some(&value), declared) {
            Ok(true) => Match,
            Ok(false) => NoMatch,
            Err(_) => Mismatch,
        };
        assert_eq!(got, want, "{declared:?} {v}");
    }
    for (text, want) in [
        ("0", Some(0.0)),
        ("12", Some(12.0)),
        ("-12.50", Some(-12.5)),
        ("012", None),
        ("1.", None),
        (".5", None),
        ("1e3", None),
        ("-", None),
        ("", None),
        ("1_0", None),
        ("\u{0661}", None),
    ] {
        assert_eq!(parse_decimal(text), want, "{text:?}");
    }
}

#[test]
fn evaluate_reports_declared_and_rule_mismatches_once() {
    let policy = ActionPolicy {
        param_types: [("order_id".to_string(), ParamType::String)]
            .into_iter()
            .collect(),
        rules: vec![
            rule("amount", Op::Gt(500.0)),
            rule("amount", Op::Lt(0.0)),
            rule("currency", Op::In(vec![s("USD")])),
        ],
        ..policy(vec![])
    };
    let p = ParamLookup::from(
        json!({"amount": "6000", "order_id": 7, "currency": "USD"})
            .as_object()
            .unwrap(),
    );
    let e = policy.evaluate(&p);
    assert_eq!(e.hits.len(), 1, "{e:?}");
    let params: Vec<&str> = e.mismatches.iter().map(|m| m.param.as_str()).collect();
    assert_eq!(params, ["order_id", "amount"], "{e:?}");
    assert!(e.mismatches[1].message.contains("string \"6000\""), "{e:?}");
}

#[test]
fn the_trace_has_one_result_per_rule_and_agrees_with_evaluate() {
    let policy = policy(vec![
        rule("amount", Op::Gt(500.0)),
        rule("amount", Op::Gt(5000.0)),
        rule("currency", Op::Gt(1.0)),
        rule("reason", Op::Absent),
    ]);
    let (e, trace) = policy.evaluate_traced(&params());
    assert_eq!(e, policy.evaluate(&params()));
    assert_eq!(trace.len(), 4);
    assert_eq!(trace[0], RuleResult::Hit);
    assert_eq!(trace[1], RuleResult::Miss);
    assert!(
        matches!(&trace[2], RuleResult::Mismatch(m) if m.starts_with("currency: gt compares numbers")),
        "{trace:?}"
    );
    assert_eq!(trace[3], RuleResult::Hit);
    let hit_rules: Vec<usize> = e.hits.iter().map(|h| h.rule).collect();
    assert_eq!(hit_rules, [0, 3]);
}

#[test]
fn evaluate_rules_reports_hits_in_order() {
    let policy = policy(vec![
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
    ]);
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
