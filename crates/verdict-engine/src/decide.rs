//! Decisions: effective requirements (defaults, then the action policy as a
//! floor, then the request), and the decision table (the first matching row
//! wins; see [`decide`]).
//!
//! Pure like the rest of the engine: it takes the checks the verifier made and
//! the rule hits the policy produced, and returns one [`Decision`] with its
//! reason. The table lives behind [`decide`], in `table_row`, as one ordered
//! `if` chain so that it can be read against the design row by row.

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

    /// The decision table's rows in the order they are tried (the first
    /// that holds decides), by reason: an unknown action is refused before
    /// the table, and `coverage_sufficient` is the row when none other
    /// holds. Consecutive rows with one reason are listed once. The engine's
    /// tests check the table against it; docs read it from here.
    pub const TABLE_ORDER: [DecisionReason; 12] = [
        DecisionReason::UnknownAction,
        DecisionReason::ParamTypeMismatch,
        DecisionReason::PolicyViolation,
        DecisionReason::UntrustedSource,
        DecisionReason::FetchFailed,
        DecisionReason::MissingCitations,
        DecisionReason::UnsupportedClaims,
        DecisionReason::AmbiguousClaims,
        DecisionReason::UnboundParam,
        DecisionReason::ReviewRequired,
        DecisionReason::NoClaims,
        DecisionReason::CoverageSufficient,
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
    if let Some(outcome @ (Outcome::Deny | Outcome::NeedsReview)) = f.unknown_action {
        return refuse_unknown_action(outcome);
    }
    let (strict, balanced, reason, condition) = table_row(f);
    let row = Row {
        condition,
        reason,
        strict,
        balanced,
        audit_would: audit_would(reason),
        audit_allows: true,
    };
    (decision_in_mode(f.requirements.decision_mode, &row), row)
}

/// The decision and row when `[authorize] unknown_action` refuses an action no policy names.
fn refuse_unknown_action(outcome: Outcome) -> (Decision, Row) {
    // No policy to apply, and the operator said what that means; a
    // caller's `decision_mode = "audit"` cannot turn it into an allow.
    let row = Row {
        condition: "no policy names the action type, and [authorize] unknown_action refuses it",
        reason: DecisionReason::UnknownAction,
        strict: outcome,
        balanced: outcome,
        audit_would: outcome,
        audit_allows: false,
    };
    let decision = Decision {
        outcome,
        reason: DecisionReason::UnknownAction,
        enforced: true,
        would_decide: None,
    };
    (decision, row)
}

/// The first matching row of the table, as (strict, balanced, reason, condition).
fn table_row(f: &Facts<'_>) -> (Outcome, Outcome, DecisionReason, &'static str) {
    use DecisionReason as R;
    use Outcome::{Allow, Deny, NeedsReview};
    let any = |s: ClaimStatus| f.checks.iter().any(|c| c.status == s);
    let rule = |e: Effect| f.rule_hits.iter().any(|h| h.effect == e);
    if f.param_mismatches > 0 {
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
        let strict_reason = if f.requirements.decision_mode == DecisionMode::Strict {
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
    }
}

/// The audit column: "allow (would deny)", except a review rule's "would review".
fn audit_would(reason: DecisionReason) -> Outcome {
    match reason {
        DecisionReason::CoverageSufficient => Outcome::Allow,
        DecisionReason::ReviewRequired => Outcome::NeedsReview,
        _ => Outcome::Deny,
    }
}

/// What `row` decides in `mode`; audit allows and records what it would have decided.
fn decision_in_mode(mode: DecisionMode, row: &Row) -> Decision {
    match mode {
        DecisionMode::Strict => Decision {
            outcome: row.strict,
            reason: row.reason,
            enforced: true,
            would_decide: None,
        },
        DecisionMode::Balanced => Decision {
            outcome: row.balanced,
            reason: row.reason,
            enforced: true,
            would_decide: None,
        },
        DecisionMode::Audit => Decision {
            outcome: Outcome::Allow,
            reason: row.reason,
            enforced: false,
            would_decide: Some(row.audit_would),
        },
    }
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
mod tests;
