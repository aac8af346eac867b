//! The engine's vocabulary for decisions: modes, citation policy, rule
//! effects and hits, and the floors an action policy sets.
//!
//! It lives here, not in the sidecar's policy loader, so that the pure core
//! depends on nothing outside this crate: the loader maps its file format
//! onto these types, and the decision table reads only them.

/// How strictly the engine treats a decision. Ordered loosest first so
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

/// A rule that matched.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleHit {
    pub effect: Effect,
    /// Index into the action policy's rules, in file order.
    pub rule: usize,
    pub param: String,
    pub message: String,
}

/// The floors of one action type, as the decision reads them: a borrowed
/// view of an action policy (or of the `[defaults]` floors).
#[derive(Debug, Clone, Copy)]
pub struct Floor<'a> {
    pub requirements: &'a Requirements,
    pub options: &'a Options,
    /// `true` fails closed when a request carries no claims.
    pub require_claims: bool,
    /// With `require_claims`: the separate claims (distinct texts) a
    /// request must carry; 1 unless the policy says more.
    pub min_claims: usize,
}
