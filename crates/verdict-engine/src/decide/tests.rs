//! Unit tests of the parent module, kept in their own file so that the
//! module itself reads as code.

use super::*;
use crate::model::{Options, Requirements};
use crate::tests::bare_check as check;
use DecisionMode::{Audit, Balanced, Strict};
use DecisionReason as R;
use Outcome::{Allow, Deny, NeedsReview};

fn hit(effect: Effect) -> RuleHit {
    RuleHit {
        effect,
        rule: 0,
        param: "amount".into(),
        message: "m".into(),
    }
}

/// Facts with no sources missing, no param problems and a known action.
fn facts<'a>(
    requirements: &'a Effective,
    rule_hits: &'a [RuleHit],
    checks: &'a [Check],
    claims_without_citations: usize,
) -> Facts<'a> {
    Facts {
        requirements,
        rule_hits,
        checks,
        claims_without_citations,
        unavailable_sources: 0,
        untrusted_sources: 0,
        param_mismatches: 0,
        unbound_params: 0,
        unknown_action: None,
    }
}

fn reqs(mode: DecisionMode, citations: Citations, deny_any: bool) -> Effective {
    Effective {
        decision_mode: mode,
        min_coverage: 0.85,
        citations,
        deny_if_any_unsupported: deny_any,
        evidence_limit: 5,
        require_claims: true,
        min_claims: 1,
        floors_applied: vec![],
    }
}

/// One situation per row of the decision table, with the expected
/// (strict, balanced, audit-would) outcome and reason.
#[test]
fn every_row_in_every_mode() {
    let rows = param_rule_and_source_cases()
        .into_iter()
        .chain(claim_status_cases())
        .chain(claim_count_cases());
    for row in rows {
        assert_in_every_mode(&row);
    }
}

/// One situation for the decision table and the outcomes it expects per mode.
struct Case {
    name: &'static str,
    hits: Vec<RuleHit>,
    checks: Vec<Check>,
    uncited: usize,
    unavailable: usize,
    untrusted: usize,
    mismatches: usize,
    unbound: usize,
    citations: Citations,
    deny_any: bool,
    require_claims: bool,
    min_claims: usize,
    strict: (Outcome, R),
    balanced: (Outcome, R),
    audit_would: Outcome,
}

/// The situation every case starts from: one supported claim and nothing else wrong.
fn base_case() -> Case {
    Case {
        name: "",
        hits: vec![],
        checks: vec![check(ClaimStatus::Supported, 1.0)],
        uncited: 0,
        unavailable: 0,
        untrusted: 0,
        mismatches: 0,
        unbound: 0,
        citations: Citations::Required,
        deny_any: false,
        require_claims: true,
        min_claims: 1,
        strict: (Allow, R::CoverageSufficient),
        balanced: (Allow, R::CoverageSufficient),
        audit_would: Allow,
    }
}

/// Cases for rows 0 to 3: param types, deny rules, sources and citations.
fn param_rule_and_source_cases() -> Vec<Case> {
    use ClaimStatus::Unsupported;
    vec![
        Case {
            name: "0 param type mismatch",
            hits: vec![hit(Effect::Deny)],
            mismatches: 1,
            unbound: 1,
            strict: (Deny, R::ParamTypeMismatch),
            balanced: (Deny, R::ParamTypeMismatch),
            audit_would: Deny,
            ..base_case()
        },
        Case {
            name: "1 deny rule",
            hits: vec![hit(Effect::Review), hit(Effect::Deny)],
            unavailable: 1,
            strict: (Deny, R::PolicyViolation),
            balanced: (Deny, R::PolicyViolation),
            audit_would: Deny,
            ..base_case()
        },
        Case {
            name: "2 untrusted source",
            untrusted: 1,
            unavailable: 1,
            uncited: 1,
            strict: (Deny, R::UntrustedSource),
            balanced: (NeedsReview, R::UntrustedSource),
            audit_would: Deny,
            ..base_case()
        },
        Case {
            name: "2 fetch failed",
            unavailable: 1,
            uncited: 1,
            strict: (Deny, R::FetchFailed),
            balanced: (NeedsReview, R::FetchFailed),
            audit_would: Deny,
            ..base_case()
        },
        Case {
            name: "3 missing citations",
            uncited: 1,
            checks: vec![check(Unsupported, 0.0)],
            strict: (Deny, R::MissingCitations),
            balanced: (NeedsReview, R::MissingCitations),
            audit_would: Deny,
            ..base_case()
        },
        Case {
            name: "3 optional citations skip the row",
            uncited: 1,
            citations: Citations::Optional,
            ..base_case()
        },
    ]
}

/// Cases for rows 4 to 7: unsupported and ambiguous claims, bind params and review rules.
fn claim_status_cases() -> Vec<Case> {
    use ClaimStatus::{Ambiguous, Supported, Unsupported};
    vec![
        Case {
            name: "4 unsupported + deny_if_any_unsupported",
            checks: vec![check(Supported, 1.0), check(Unsupported, 0.2)],
            deny_any: true,
            strict: (Deny, R::UnsupportedClaims),
            balanced: (Deny, R::UnsupportedClaims),
            audit_would: Deny,
            ..base_case()
        },
        Case {
            name: "5 unsupported",
            checks: vec![check(Unsupported, 0.2), check(Ambiguous, 0.6)],
            hits: vec![hit(Effect::Review)],
            strict: (Deny, R::UnsupportedClaims),
            balanced: (NeedsReview, R::UnsupportedClaims),
            audit_would: Deny,
            ..base_case()
        },
        Case {
            name: "6 ambiguous",
            checks: vec![check(Ambiguous, 0.6)],
            strict: (Deny, R::UnsupportedClaims),
            balanced: (NeedsReview, R::AmbiguousClaims),
            audit_would: Deny,
            ..base_case()
        },
        Case {
            name: "6b unbound param",
            unbound: 1,
            hits: vec![hit(Effect::Review)],
            strict: (Deny, R::UnboundParam),
            balanced: (NeedsReview, R::UnboundParam),
            audit_would: Deny,
            ..base_case()
        },
        Case {
            name: "7 review rule",
            hits: vec![hit(Effect::Review)],
            strict: (NeedsReview, R::ReviewRequired),
            balanced: (NeedsReview, R::ReviewRequired),
            audit_would: NeedsReview,
            ..base_case()
        },
    ]
}

/// Cases for rows 8 and 9: how many separate claims there are, and the final allow.
fn claim_count_cases() -> Vec<Case> {
    use ClaimStatus::Supported;
    vec![
        Case {
            name: "8 no claims",
            checks: vec![],
            strict: (Deny, R::NoClaims),
            balanced: (NeedsReview, R::NoClaims),
            audit_would: Deny,
            ..base_case()
        },
        Case {
            name: "8 one claim where min_claims asks for two",
            min_claims: 2,
            strict: (Deny, R::NoClaims),
            balanced: (NeedsReview, R::NoClaims),
            audit_would: Deny,
            ..base_case()
        },
        Case {
            name: "8 the same claim twice is one claim",
            checks: vec![
                Check {
                    claim_text: "Order 1001  was paid.".into(),
                    ..check(Supported, 1.0)
                },
                Check {
                    claim_id: "c2".into(),
                    claim_text: "order 1001 was PAID".into(),
                    ..check(Supported, 1.0)
                },
            ],
            min_claims: 2,
            strict: (Deny, R::NoClaims),
            balanced: (NeedsReview, R::NoClaims),
            audit_would: Deny,
            ..base_case()
        },
        Case {
            name: "9 two separate claims meet min_claims = 2",
            checks: vec![
                Check {
                    claim_text: "Order 1001 was paid.".into(),
                    ..check(Supported, 1.0)
                },
                Check {
                    claim_id: "c2".into(),
                    claim_text: "Order 1001 was delivered.".into(),
                    ..check(Supported, 1.0)
                },
            ],
            min_claims: 2,
            ..base_case()
        },
        Case {
            name: "8 require_claims = false lets rules decide",
            checks: vec![],
            require_claims: false,
            ..base_case()
        },
        Case {
            name: "9 otherwise",
            ..base_case()
        },
    ]
}

/// Asserts what `row` expects in strict, balanced and audit mode.
fn assert_in_every_mode(row: &Case) {
    for mode in [Strict, Balanced, Audit] {
        let mut r = reqs(mode, row.citations, row.deny_any);
        r.require_claims = row.require_claims;
        r.min_claims = row.min_claims;
        let d = decide(&Facts {
            unavailable_sources: row.unavailable,
            untrusted_sources: row.untrusted,
            param_mismatches: row.mismatches,
            unbound_params: row.unbound,
            ..facts(&r, &row.hits, &row.checks, row.uncited)
        });
        match mode {
            Strict => {
                assert_eq!((d.outcome, d.reason), row.strict, "{} strict", row.name);
                assert!(d.enforced && d.would_decide.is_none());
            }
            Balanced => {
                assert_eq!((d.outcome, d.reason), row.balanced, "{} balanced", row.name)
            }
            Audit => {
                assert_eq!(d.outcome, Allow, "{} audit", row.name);
                assert!(!d.enforced, "{}", row.name);
                assert_eq!(d.would_decide, Some(row.audit_would), "{} audit", row.name);
            }
        }
    }
}

/// An action policy's floors: requirements and options.
fn policy(
    mode: Option<DecisionMode>,
    cov: Option<f64>,
    cit: Option<Citations>,
) -> (Requirements, Options) {
    (
        Requirements {
            decision_mode: mode,
            min_coverage: cov,
            citations: cit,
        },
        Options::default(),
    )
}

fn floor(p: &(Requirements, Options)) -> Option<Floor<'_>> {
    Some(Floor {
        requirements: &p.0,
        options: &p.1,
        require_claims: true,
        min_claims: 1,
    })
}

#[test]
fn defaults_without_policy_or_request() {
    let e = effective(None, &Requested::default());
    assert_eq!(e.decision_mode, Strict);
    assert_eq!(e.min_coverage, 0.85);
    assert_eq!(e.citations, Citations::Required);
    assert!(!e.deny_if_any_unsupported);
    assert_eq!(e.evidence_limit, 5);
    assert!(e.floors_applied.is_empty());
}

#[test]
fn requests_may_loosen_defaults_but_not_floors() {
    let loose = Requested {
        decision_mode: Some(Audit),
        min_coverage: Some(0.1),
        citations: Some(Citations::Optional),
        ..Default::default()
    };
    // No policy: defaults are not floors.
    let e = effective(None, &loose);
    assert_eq!(
        (e.decision_mode, e.min_coverage, e.citations),
        (Audit, 0.1, Citations::Optional)
    );
    // A strict policy is a floor.
    let p = policy(Some(Strict), Some(0.9), Some(Citations::Required));
    let e = effective(floor(&p), &loose);
    assert_eq!(
        (e.decision_mode, e.min_coverage, e.citations),
        (Strict, 0.9, Citations::Required)
    );
    let fields: Vec<_> = e.floors_applied.iter().map(|f| f.field).collect();
    assert_eq!(fields, vec!["decision_mode", "min_coverage", "citations"]);
    // Tightening is always allowed.
    let p = policy(Some(Balanced), Some(0.7), Some(Citations::Optional));
    let tight = Requested {
        decision_mode: Some(Strict),
        min_coverage: Some(0.95),
        citations: Some(Citations::Required),
        deny_if_any_unsupported: Some(true),
        evidence_limit: Some(2),
    };
    let e = effective(floor(&p), &tight);
    assert_eq!(
        (e.decision_mode, e.min_coverage, e.citations),
        (Strict, 0.95, Citations::Required)
    );
    assert!(e.deny_if_any_unsupported);
    assert_eq!(e.evidence_limit, 2);
    assert!(e.floors_applied.is_empty());
    // Policy values apply when the request is silent.
    let e = effective(floor(&p), &Requested::default());
    assert_eq!(
        (e.decision_mode, e.min_coverage, e.citations),
        (Balanced, 0.7, Citations::Optional)
    );
}

/// The four cases the interface's first examples show, at the decision
/// level.
#[test]
fn spec_cases() {
    use ClaimStatus::{Ambiguous, Supported, Unsupported};
    // (request, checks, uncited claims) -> (decision, reason)
    let cases = [
        // strict, one claim, no sources: deny.
        (
            Requested {
                decision_mode: Some(Strict),
                ..Default::default()
            },
            check(Unsupported, 0.0),
            1,
            (Deny, R::MissingCitations),
        ),
        // strict + deny_if_any_unsupported: deny.
        (
            Requested {
                deny_if_any_unsupported: Some(true),
                citations: Some(Citations::Optional),
                ..Default::default()
            },
            check(Unsupported, 0.0),
            1,
            (Deny, R::UnsupportedClaims),
        ),
        // balanced, partial coverage: needs_review.
        (
            Requested {
                decision_mode: Some(Balanced),
                citations: Some(Citations::Optional),
                ..Default::default()
            },
            check(Ambiguous, 0.5),
            1,
            (NeedsReview, R::AmbiguousClaims),
        ),
        // audit, one supported claim: allow.
        (
            Requested {
                decision_mode: Some(Audit),
                ..Default::default()
            },
            check(Supported, 1.0),
            0,
            (Allow, R::CoverageSufficient),
        ),
    ];
    for (requested, c, uncited, want) in cases {
        let r = effective(None, &requested);
        let checks = [c];
        let d = decide(&facts(&r, &[], &checks, uncited));
        assert_eq!((d.outcome, d.reason), want, "{requested:?}");
    }
}

/// The row an explanation shows is the row that decided: its outcome
/// in each mode is what `decide` returns in that mode.
#[test]
fn the_traced_row_is_the_one_that_decided() {
    use ClaimStatus::{Ambiguous, Supported, Unsupported};
    // (rule hits, checks, claims without citations, unknown_action)
    type Situation = (Vec<RuleHit>, Vec<Check>, usize, Option<Outcome>);
    let situations: Vec<Situation> = vec![
        (vec![], vec![check(Supported, 1.0)], 0, None),
        (
            vec![hit(Effect::Review)],
            vec![check(Supported, 1.0)],
            0,
            None,
        ),
        (
            vec![hit(Effect::Deny)],
            vec![check(Supported, 1.0)],
            0,
            None,
        ),
        (vec![], vec![check(Unsupported, 0.1)], 0, None),
        (vec![], vec![check(Ambiguous, 0.6)], 0, None),
        (vec![], vec![], 0, None),
        (vec![], vec![check(Supported, 1.0)], 1, None),
        (vec![], vec![check(Supported, 1.0)], 0, Some(NeedsReview)),
    ];
    for (hits, checks, uncited, unknown) in situations {
        let mut rows = Vec::new();
        for mode in [Strict, Balanced, Audit] {
            let r = reqs(mode, Citations::Required, false);
            let f = Facts {
                unknown_action: unknown,
                ..facts(&r, &hits, &checks, uncited)
            };
            let (d, row) = decide_traced(&f);
            assert_eq!(d, decide(&f));
            assert_eq!(d.reason, row.reason);
            match mode {
                Strict => assert_eq!(d.outcome, row.strict),
                Balanced => assert_eq!(d.outcome, row.balanced),
                Audit if row.audit_allows => {
                    assert_eq!(d.outcome, Allow);
                    assert_eq!(d.would_decide, Some(row.audit_would));
                }
                Audit => assert_eq!(d.outcome, row.audit_would),
            }
            rows.push((row.condition, row.strict, row.balanced, row.audit_would));
        }
        // The same facts pick the same row in every mode (only strict's
        // reason for an ambiguous claim differs, not the row).
        assert!(rows.windows(2).all(|w| w[0].0 == w[1].0), "{rows:?}");
    }
}

#[test]
fn origins_say_which_side_set_each_field() {
    let p = policy(Some(Balanced), Some(0.8), None);
    let req = Requested {
        decision_mode: Some(Audit),
        min_coverage: Some(0.9),
        evidence_limit: Some(2),
        ..Default::default()
    };
    let (e, o) = effective_traced(floor(&p), &req);
    assert_eq!(e, effective(floor(&p), &req));
    assert_eq!(o.decision_mode, Won::FloorOverRequest);
    assert_eq!(o.min_coverage, Won::Request);
    assert_eq!(o.citations, Won::Default);
    assert_eq!(o.deny_if_any_unsupported, Won::Default);
    assert_eq!(o.evidence_limit, Won::Request);
    assert_eq!(o.require_claims, Won::Floor);
    let (_, o) = effective_traced(floor(&p), &Requested::default());
    assert_eq!((o.decision_mode, o.min_coverage), (Won::Floor, Won::Floor));
    let (_, o) = effective_traced(None, &req);
    assert_eq!(o.decision_mode, Won::Request);
    assert_eq!(o.require_claims, Won::Default);
}

#[test]
fn an_unknown_action_is_refused_in_every_mode() {
    let checks = [check(ClaimStatus::Supported, 1.0)];
    let decide_unknown = |mode, unknown| {
        let r = reqs(mode, Citations::Optional, false);
        decide(&Facts {
            unknown_action: Some(unknown),
            ..facts(&r, &[], &checks, 0)
        })
    };
    for mode in [Strict, Balanced, Audit] {
        for outcome in [Deny, NeedsReview] {
            let d = decide_unknown(mode, outcome);
            assert_eq!((d.outcome, d.reason), (outcome, R::UnknownAction));
            assert!(d.enforced && d.would_decide.is_none(), "{mode:?}");
        }
        let d = decide_unknown(mode, Allow);
        assert_eq!(d.reason, R::CoverageSufficient, "{mode:?}");
    }
}

/// Sets what makes the row of `reason` hold (balanced mode), on top of
/// whatever the case already has.
fn trigger(case: &mut Case, reason: R) -> Option<Outcome> {
    match reason {
        R::UnknownAction => return Some(Deny),
        R::ParamTypeMismatch => case.mismatches = 1,
        R::PolicyViolation => case.hits.push(hit(Effect::Deny)),
        R::UntrustedSource => case.untrusted = 1,
        R::FetchFailed => case.unavailable = 1,
        R::MissingCitations => case.uncited = 1,
        R::UnsupportedClaims => case.checks.push(check(ClaimStatus::Unsupported, 0.2)),
        R::AmbiguousClaims => case.checks.push(check(ClaimStatus::Ambiguous, 0.6)),
        R::UnboundParam => case.unbound = 1,
        R::ReviewRequired => case.hits.push(hit(Effect::Review)),
        R::NoClaims => case.min_claims = 99,
        R::CoverageSufficient => {}
        other => panic!("{other:?} is not a row of the table"),
    }
    None
}

/// The reason balanced mode gives a case, with `unknown` as the action's
/// `[authorize] unknown_action` outcome.
fn balanced_reason(case: &Case, unknown: Option<Outcome>) -> R {
    let r = Effective {
        min_claims: case.min_claims,
        ..reqs(Balanced, case.citations, case.deny_any)
    };
    let mut f = facts(&r, &case.hits, &case.checks, case.uncited);
    f.unavailable_sources = case.unavailable;
    f.untrusted_sources = case.untrusted;
    f.param_mismatches = case.mismatches;
    f.unbound_params = case.unbound;
    f.unknown_action = unknown;
    decide(&f).reason
}

/// `TABLE_ORDER` is the table's order: each row's situation alone gives
/// its reason, and with any row below it as well, still its own.
#[test]
fn the_table_order_is_the_order_rows_are_tried() {
    let order = DecisionReason::TABLE_ORDER;
    for (i, &upper) in order.iter().enumerate() {
        let mut alone = base_case();
        let unknown = trigger(&mut alone, upper);
        assert_eq!(balanced_reason(&alone, unknown), upper, "{upper:?} alone");
        for &lower in &order[i + 1..] {
            let mut both = base_case();
            let mut unknown = trigger(&mut both, lower);
            unknown = trigger(&mut both, upper).or(unknown);
            assert_eq!(
                balanced_reason(&both, unknown),
                upper,
                "{upper:?} with {lower:?}: the upper row must decide"
            );
        }
    }
}
