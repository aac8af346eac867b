//! Decisions: effective requirements (defaults, then the action policy as a
//! floor, then the request), and the decision table (the first matching row
//! wins; see [`decide`]).
//!
//! Pure like the rest of the engine: it takes the checks the verifier made and
//! the rule hits the policy produced, and returns one [`Decision`] with its
//! reason. The table lives in [`decide`] as one ordered `if` chain so that it
//! can be read against the design row by row.

use super::model::{Citations, DecisionMode, Effect, Floor, RuleHit};

use super::{Check, ClaimStatus};

/// Defaults when neither policy nor request says otherwise.
pub const DEFAULT_MODE: DecisionMode = DecisionMode::Strict;
pub const DEFAULT_MIN_COVERAGE: f64 = 0.85;
pub const DEFAULT_CITATIONS: Citations = Citations::Required;
pub const DEFAULT_EVIDENCE_LIMIT: usize = 5;

/// What the request asked for; `None` where it said nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Requested {
    pub decision_mode: Option<DecisionMode>,
    pub min_coverage: Option<f64>,
    pub citations: Option<Citations>,
    pub deny_if_any_unsupported: Option<bool>,
    pub evidence_limit: Option<usize>,
}

/// A request value that tried to loosen the action policy's floor.
#[derive(Debug, Clone, PartialEq)]
pub struct FloorApplied {
    pub field: &'static str,
    pub requested: String,
    pub floor: String,
}

/// The requirements a decision is made under.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    pub decision_mode: DecisionMode,
    pub min_coverage: f64,
    pub citations: Citations,
    pub deny_if_any_unsupported: bool,
    pub evidence_limit: usize,
    pub require_claims: bool,
    /// With `require_claims`: the separate claims a request must carry.
    pub min_claims: usize,
    pub floors_applied: Vec<FloorApplied>,
}

pub fn mode_str(m: DecisionMode) -> &'static str {
    match m {
        DecisionMode::Strict => "strict",
        DecisionMode::Balanced => "balanced",
        DecisionMode::Audit => "audit",
    }
}

pub fn citations_str(c: Citations) -> &'static str {
    match c {
        Citations::Required => "required",
        Citations::Optional => "optional",
    }
}

/// The mode [`mode_str`] names.
pub fn mode_from(s: &str) -> Option<DecisionMode> {
    [
        DecisionMode::Strict,
        DecisionMode::Balanced,
        DecisionMode::Audit,
    ]
    .into_iter()
    .find(|m| mode_str(*m) == s)
}

/// The value [`citations_str`] names.
pub fn citations_from(s: &str) -> Option<Citations> {
    [Citations::Required, Citations::Optional]
        .into_iter()
        .find(|c| citations_str(*c) == s)
}

/// Which side set one effective requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Won {
    /// Neither the policy nor the request said anything: the built-in default.
    Default,
    /// The policy's floor, the request being silent.
    Floor,
    /// The request, at or above the floor (or with no floor to meet).
    Request,
    /// The floor, over a request that tried to loosen it.
    FloorOverRequest,
}

impl Won {
    pub fn as_str(self) -> &'static str {
        match self {
            Won::Default => "default",
            Won::Floor => "floor",
            Won::Request => "request",
            Won::FloorOverRequest => "floor_over_request",
        }
    }
}

/// Which side set each effective requirement: what an explanation shows
/// beside the values of [`Effective`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origins {
    pub decision_mode: Won,
    pub min_coverage: Won,
    pub citations: Won,
    pub deny_if_any_unsupported: Won,
    /// A processing limit, not a floor: the request's value wins.
    pub evidence_limit: Won,
    /// Set by the policy only.
    pub require_claims: Won,
}

/// Takes the tighter of a floor and a request, noting when the floor won.
fn tighten<T: PartialOrd + Copy>(
    field: &'static str,
    floor: Option<T>,
    requested: Option<T>,
    default: T,
    show: impl Fn(T) -> String,
    applied: &mut Vec<FloorApplied>,
) -> (T, Won) {
    match (floor, requested) {
        (Some(f), Some(r)) if r < f => {
            applied.push(FloorApplied {
                field,
                requested: show(r),
                floor: show(f),
            });
            (f, Won::FloorOverRequest)
        }
        (_, Some(r)) => (r, Won::Request),
        (Some(f), None) => (f, Won::Floor),
        (None, None) => (default, Won::Default),
    }
}

/// Defaults, then the policy (a floor), then the request, which may tighten
/// the floor but never loosen it.
pub fn effective(floor: Option<Floor<'_>>, req: &Requested) -> Effective {
    effective_traced(floor, req).0
}

/// [`effective`], and which side set each field.
pub fn effective_traced(floor: Option<Floor<'_>>, req: &Requested) -> (Effective, Origins) {
    let mut applied = Vec::new();
    let (reqs, opts, require_claims, min_claims) = match floor {
        Some(f) => (
            Some(f.requirements),
            Some(f.options),
            f.require_claims,
            f.min_claims.max(1),
        ),
        None => (None, None, true, 1),
    };
    let floor_cov = reqs
        .and_then(|r| r.min_coverage)
        .or_else(|| opts.and_then(|o| o.min_coverage));
    let (decision_mode, mode_won) = tighten(
        "decision_mode",
        reqs.and_then(|r| r.decision_mode),
        req.decision_mode,
        DEFAULT_MODE,
        |m| mode_str(m).to_string(),
        &mut applied,
    );
    let (min_coverage, coverage_won) = tighten(
        "min_coverage",
        floor_cov,
        req.min_coverage,
        DEFAULT_MIN_COVERAGE,
        |v| v.to_string(),
        &mut applied,
    );
    let (citations, citations_won) = tighten(
        "citations",
        reqs.and_then(|r| r.citations),
        req.citations,
        DEFAULT_CITATIONS,
        |c| citations_str(c).to_string(),
        &mut applied,
    );
    let (deny_if_any_unsupported, deny_won) = tighten(
        "deny_if_any_unsupported",
        opts.and_then(|o| o.deny_if_any_unsupported),
        req.deny_if_any_unsupported,
        false,
        |b| b.to_string(),
        &mut applied,
    );
    // A processing limit, not a floor: the request's value wins.
    let policy_limit = opts.and_then(|o| o.evidence_limit).map(|n| n as usize);
    let (evidence_limit, limit_won) = match (req.evidence_limit, policy_limit) {
        (Some(n), _) => (n, Won::Request),
        (None, Some(n)) => (n, Won::Floor),
        (None, None) => (DEFAULT_EVIDENCE_LIMIT, Won::Default),
    };
    let effective = Effective {
        decision_mode,
        min_coverage,
        citations,
        deny_if_any_unsupported,
        evidence_limit,
        require_claims,
        min_claims,
        floors_applied: applied,
    };
    let origins = Origins {
        decision_mode: mode_won,
        min_coverage: coverage_won,
        citations: citations_won,
        deny_if_any_unsupported: deny_won,
        evidence_limit: limit_won,
        require_claims: if floor.is_some() {
            Won::Floor
        } else {
            Won::Default
        },
    };
    (effective, origins)
}

/// The three decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Allow,
    Deny,
    NeedsReview,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allow => "allow",
            Outcome::Deny => "deny",
            Outcome::NeedsReview => "needs_review",
        }
    }
}

/// Stable reason codes: the decision table's, and the refusals of the
/// proxy's guard and of typed and bound params.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionReason {
    CoverageSufficient,
    UnsupportedClaims,
    AmbiguousClaims,
    MissingCitations,
    FetchFailed,
    /// A source is not from where the action's `evidence` says its
    /// evidence must come from (inline text, another origin, no checksum).
    UntrustedSource,
    PolicyViolation,
    ReviewRequired,
    NoClaims,
    /// A param's value is not of the type its declaration or a rule reads.
    ParamTypeMismatch,
    /// A `bind` param is not stated by any supported claim.
    UnboundParam,
    /// The action type has no policy and `[authorize] unknown_action` says so.
    UnknownAction,
    /// Proxy: the body is not of the media type the route gates.
    UnsupportedContentType,
    /// Proxy: the body has duplicate keys (exact, or differing in case) on the
    /// path of an extracted field.
    AmbiguousBody,
    /// Proxy: only a lenient reading of the path reaches the route.
    AmbiguousPath,
    /// Proxy: the request asks for another method (`X-HTTP-Method-Override`,
    /// `_method`).
    MethodOverride,
    /// Proxy: the request carries two of one credential header (two
    /// `Authorization`, say), which a server and the gate could read as
    /// two different callers.
    AmbiguousCredentials,
}

impl DecisionReason {
    /// Every reason code, in declaration order.
    pub const ALL: [DecisionReason; 17] = [
        DecisionReason::CoverageSufficient,
        DecisionReason::UnsupportedClaims,
        DecisionReason::AmbiguousClaims,
        DecisionReason::MissingCitations,
        DecisionReason::FetchFailed,
        DecisionReason::UntrustedSource,
        DecisionReason::PolicyViolation,
        DecisionReason::ReviewRequired,
        DecisionReason::NoClaims,
        DecisionReason::ParamTypeMismatch,
        DecisionReason::UnboundParam,
        DecisionReason::UnknownAction,
        DecisionReason::UnsupportedContentType,
        DecisionReason::AmbiguousBody,
        DecisionReason::AmbiguousPath,
        DecisionReason::MethodOverride,
        DecisionReason::AmbiguousCredentials,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DecisionReason::CoverageSufficient => "coverage_sufficient",
            DecisionReason::UnsupportedClaims => "unsupported_claims",
            DecisionReason::AmbiguousClaims => "ambiguous_claims",
            DecisionReason::MissingCitations => "missing_citations",
            DecisionReason::FetchFailed => "fetch_failed",
            DecisionReason::UntrustedSource => "untrusted_source",
            DecisionReason::PolicyViolation => "policy_violation",
            DecisionReason::ReviewRequired => "review_required",
            DecisionReason::NoClaims => "no_claims",
            DecisionReason::ParamTypeMismatch => "param_type_mismatch",
            DecisionReason::UnboundParam => "unbound_param",
            DecisionReason::UnknownAction => "unknown_action",
            DecisionReason::UnsupportedContentType => "unsupported_content_type",
            DecisionReason::AmbiguousBody => "ambiguous_body",
            DecisionReason::AmbiguousPath => "ambiguous_path",
            DecisionReason::MethodOverride => "method_override",
            DecisionReason::AmbiguousCredentials => "ambiguous_credentials",
        }
    }
}

/// Everything the table looks at.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub requirements: &'a Effective,
    pub rule_hits: &'a [RuleHit],
    pub checks: &'a [Check],
    /// Claims the request sent with no citation at all.
    pub claims_without_citations: usize,
    /// Sources that could not be read or failed their checksum.
    pub unavailable_sources: usize,
    /// Sources the action's provenance refuses (`evidence.from =
    /// "referenced"`): never read, never evidence.
    pub untrusted_sources: usize,
    /// Params whose value is not of the type the policy reads.
    pub param_mismatches: usize,
    /// `bind` params that no supported claim states.
    pub unbound_params: usize,
    /// For an action type with no policy: what `[authorize] unknown_action`
    /// says, when it is not `allow`. Enforced in every mode.
    pub unknown_action: Option<Outcome>,
}

/// One decision, and what it would have been when audit mode does not
/// enforce it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub outcome: Outcome,
    pub reason: DecisionReason,
    /// `false` in audit mode: the outcome is always `allow` there.
    pub enforced: bool,
    /// In audit mode, what strict/balanced logic would have decided.
    pub would_decide: Option<Outcome>,
}

/// The row of the decision table that decided: its condition, its reason
/// and its outcome in each mode. What an explanation shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// The row's condition, as the table reads it.
    pub condition: &'static str,
    pub reason: DecisionReason,
    pub strict: Outcome,
    pub balanced: Outcome,
    /// Audit mode allows; this is what it would have decided. For the
    /// `unknown_action` row, which every mode enforces, the outcome itself.
    pub audit_would: Outcome,
    /// `false` for the one row audit mode enforces too (`unknown_action`).
    pub audit_allows: bool,
}

/// The decision table; the first matching row wins.
pub fn decide(f: &Facts<'_>) -> Decision {
    decide_traced(f).0
}

/// [`decide`], and the row that decided.
pub fn decide_traced(f: &Facts<'_>) -> (Decision, Row) {
    use DecisionMode::{Audit, Balanced, Strict};
    use DecisionReason as R;
    use Outcome::{Allow, Deny, NeedsReview};
    let mode = f.requirements.decision_mode;
    let any = |s: ClaimStatus| f.checks.iter().any(|c| c.status == s);
    let rule = |e: Effect| f.rule_hits.iter().any(|h| h.effect == e);
    if let Some(outcome @ (Deny | NeedsReview)) = f.unknown_action {
        // No policy to apply, and the operator said what that means; a
        // caller's `decision_mode = "audit"` cannot turn it into an allow.
        let row = Row {
            condition: "no policy names the action type, and [authorize] unknown_action refuses it",
            reason: R::UnknownAction,
            strict: outcome,
            balanced: outcome,
            audit_would: outcome,
            audit_allows: false,
        };
        let decision = Decision {
            outcome,
            reason: R::UnknownAction,
            enforced: true,
            would_decide: None,
        };
        return (decision, row);
    }
    // (strict, balanced, reason, condition) for each row; audit always allows.
    let row = if f.param_mismatches > 0 {
        (
            Deny,
            Deny,
            R::ParamTypeMismatch,
            "a param is not of the type the policy reads",
        )
    } else if rule(Effect::Deny) {
        (Deny, Deny, R::PolicyViolation, "a deny rule hit")
    } else if f.untrusted_sources > 0 {
        (
            Deny,
            NeedsReview,
            R::UntrustedSource,
            "a source is not from where the action's evidence must come from",
        )
    } else if f.unavailable_sources > 0 {
        (
            Deny,
            NeedsReview,
            R::FetchFailed,
            "a source could not be read",
        )
    } else if f.requirements.citations == Citations::Required && f.claims_without_citations > 0 {
        (
            Deny,
            NeedsReview,
            R::MissingCitations,
            "citations are required and a claim has none",
        )
    } else if any(ClaimStatus::Unsupported) && f.requirements.deny_if_any_unsupported {
        (
            Deny,
            Deny,
            R::UnsupportedClaims,
            "a claim is unsupported and deny_if_any_unsupported is set",
        )
    } else if any(ClaimStatus::Unsupported) {
        (
            Deny,
            NeedsReview,
            R::UnsupportedClaims,
            "a claim is unsupported",
        )
    } else if any(ClaimStatus::Ambiguous) {
        // Strict treats an ambiguous claim as unsupported.
        let strict_reason = if mode == Strict {
            R::UnsupportedClaims
        } else {
            R::AmbiguousClaims
        };
        (Deny, NeedsReview, strict_reason, "a claim is ambiguous")
    } else if f.unbound_params > 0 {
        (
            Deny,
            NeedsReview,
            R::UnboundParam,
            "a bind param is stated by no supported claim",
        )
    } else if rule(Effect::Review) {
        (
            NeedsReview,
            NeedsReview,
            R::ReviewRequired,
            "a review rule hit",
        )
    } else if f.requirements.require_claims
        && separate_claims(f.checks) < f.requirements.min_claims.max(1)
    {
        (
            Deny,
            NeedsReview,
            R::NoClaims,
            "fewer separate claims than the policy requires (none, or under min_claims)",
        )
    } else {
        (
            Allow,
            Allow,
            R::CoverageSufficient,
            "otherwise: every claim supported, no rule hit",
        )
    };
    let (strict, balanced, reason, condition) = row;
    // The audit column: "allow (would deny)", except a review rule, which
    // "would review".
    let audit_would = match reason {
        R::CoverageSufficient => Allow,
        R::ReviewRequired => NeedsReview,
        _ => Deny,
    };
    let row = Row {
        condition,
        reason,
        strict,
        balanced,
        audit_would,
        audit_allows: true,
    };
    let decision = match mode {
        Strict => Decision {
            outcome: strict,
            reason,
            enforced: true,
            would_decide: None,
        },
        Balanced => Decision {
            outcome: balanced,
            reason,
            enforced: true,
            would_decide: None,
        },
        Audit => Decision {
            outcome: Allow,
            reason,
            enforced: false,
            would_decide: Some(audit_would),
        },
    };
    (decision, row)
}

/// How many of `checks` are separate claims: claims whose words differ
/// once case, punctuation and spacing are set aside, so that sending one
/// claim twice does not meet `min_claims = 2`. A duplicate check, not a
/// judgement of meaning: a paraphrase counts as another claim.
fn separate_claims(checks: &[Check]) -> usize {
    let mut texts: Vec<String> = checks
        .iter()
        .map(|c| {
            c.claim_text
                .split(|ch: char| !ch.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
                .to_lowercase()
        })
        .collect();
    texts.sort_unstable();
    texts.dedup();
    texts.len()
}

#[cfg(test)]
mod tests {
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
        use ClaimStatus::{Ambiguous, Supported, Unsupported};
        struct Row {
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
        let base = || Row {
            name: "",
            hits: vec![],
            checks: vec![check(Supported, 1.0)],
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
        };
        let rows = vec![
            Row {
                name: "0 param type mismatch",
                hits: vec![hit(Effect::Deny)],
                mismatches: 1,
                unbound: 1,
                strict: (Deny, R::ParamTypeMismatch),
                balanced: (Deny, R::ParamTypeMismatch),
                audit_would: Deny,
                ..base()
            },
            Row {
                name: "1 deny rule",
                hits: vec![hit(Effect::Review), hit(Effect::Deny)],
                unavailable: 1,
                strict: (Deny, R::PolicyViolation),
                balanced: (Deny, R::PolicyViolation),
                audit_would: Deny,
                ..base()
            },
            Row {
                name: "2 untrusted source",
                untrusted: 1,
                unavailable: 1,
                uncited: 1,
                strict: (Deny, R::UntrustedSource),
                balanced: (NeedsReview, R::UntrustedSource),
                audit_would: Deny,
                ..base()
            },
            Row {
                name: "2 fetch failed",
                unavailable: 1,
                uncited: 1,
                strict: (Deny, R::FetchFailed),
                balanced: (NeedsReview, R::FetchFailed),
                audit_would: Deny,
                ..base()
            },
            Row {
                name: "3 missing citations",
                uncited: 1,
                checks: vec![check(Unsupported, 0.0)],
                strict: (Deny, R::MissingCitations),
                balanced: (NeedsReview, R::MissingCitations),
                audit_would: Deny,
                ..base()
            },
            Row {
                name: "3 optional citations skip the row",
                uncited: 1,
                citations: Citations::Optional,
                ..base()
            },
            Row {
                name: "4 unsupported + deny_if_any_unsupported",
                checks: vec![check(Supported, 1.0), check(Unsupported, 0.2)],
                deny_any: true,
                strict: (Deny, R::UnsupportedClaims),
                balanced: (Deny, R::UnsupportedClaims),
                audit_would: Deny,
                ..base()
            },
            Row {
                name: "5 unsupported",
                checks: vec![check(Unsupported, 0.2), check(Ambiguous, 0.6)],
                hits: vec![hit(Effect::Review)],
                strict: (Deny, R::UnsupportedClaims),
                balanced: (NeedsReview, R::UnsupportedClaims),
                audit_would: Deny,
                ..base()
            },
            Row {
                name: "6 ambiguous",
                checks: vec![check(Ambiguous, 0.6)],
                strict: (Deny, R::UnsupportedClaims),
                balanced: (NeedsReview, R::AmbiguousClaims),
                audit_would: Deny,
                ..base()
            },
            Row {
                name: "6b unbound param",
                unbound: 1,
                hits: vec![hit(Effect::Review)],
                strict: (Deny, R::UnboundParam),
                balanced: (NeedsReview, R::UnboundParam),
                audit_would: Deny,
                ..base()
            },
            Row {
                name: "7 review rule",
                hits: vec![hit(Effect::Review)],
                strict: (NeedsReview, R::ReviewRequired),
                balanced: (NeedsReview, R::ReviewRequired),
                audit_would: NeedsReview,
                ..base()
            },
            Row {
                name: "8 no claims",
                checks: vec![],
                strict: (Deny, R::NoClaims),
                balanced: (NeedsReview, R::NoClaims),
                audit_would: Deny,
                ..base()
            },
            Row {
                name: "8 one claim where min_claims asks for two",
                min_claims: 2,
                strict: (Deny, R::NoClaims),
                balanced: (NeedsReview, R::NoClaims),
                audit_would: Deny,
                ..base()
            },
            Row {
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
                ..base()
            },
            Row {
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
                ..base()
            },
            Row {
                name: "8 require_claims = false lets rules decide",
                checks: vec![],
                require_claims: false,
                ..base()
            },
            Row {
                name: "9 otherwise",
                ..base()
            },
        ];
        for row in rows {
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
}
