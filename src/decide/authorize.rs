//! One authorize decision in its steps: what the policy says of the action
//! ([`read_policy`]), the evidence ([`gather`]), the claims checked
//! ([`check_claims`]), the decision table and the shadow set ([`evaluate`],
//! pure), and the durable audit record ([`record`], the only step that
//! writes). [`authorize()`] runs them in that order on one policy snapshot.

use std::time::Instant;

use tracing::Instrument as _;

use super::*;

/// Decides one authorize request on one policy snapshot.
pub async fn authorize(
    h: &Handles<'_>,
    set: &PolicySet,
    input: Input,
    ctx: &Ctx<'_>,
) -> Result<Decided, DecideError> {
    let started = Instant::now();
    if input.claims.is_some() && input.answer.is_some() {
        return Err(DecideError::Invalid(
            "send either claims (actions mode) or answer (output mode), not both".into(),
        ));
    }
    if input.action_type.trim().is_empty() {
        return Err(DecideError::Invalid(
            "action.type: must not be empty".into(),
        ));
    }
    let Input {
        action_type,
        params,
        claims,
        answer,
        sources,
        requested,
    } = input;
    let span = tracing::info_span!(
        target: crate::telemetry::trace::TARGET,
        "decide",
        request_id = ctx.request_id,
        action = %action_type,
        decision = tracing::field::Empty,
        reason = tracing::field::Empty,
        record_id = tracing::field::Empty,
    );
    let decided = async {
        let read = read_policy(h, set, action_type, params, requested);
        let (evidence, sources) =
            gather(h, &read, sources, claims.as_deref(), answer.as_ref()).await?;
        let engine = tracing::info_span!(target: crate::telemetry::trace::TARGET, "engine");
        let checking = Instant::now();
        let checked = check_claims(h, &read, claims, answer, sources)
            .instrument(engine.clone())
            .await?;
        h.metrics
            .stage(ctx.source.as_str(), "engine", checking.elapsed());
        let evaluated = engine.in_scope(|| evaluate(h, &read, &evidence, checked));
        record(h, set, ctx, read, evidence, evaluated, started).await
    }
    .instrument(span.clone())
    .await?;
    span.record("decision", decided.decision.outcome.as_str());
    span.record("reason", decided.decision.reason.as_str());
    span.record(
        "record_id",
        tracing::field::display(&decided.receipt.record_id),
    );
    Ok(decided)
}

/// What the policy snapshot says of the action, before any evidence.
struct PolicyRead<'s> {
    policy: Option<&'s ActionPolicy>,
    action_type: String,
    requested: Requested,
    /// The params as sent, and as the rules and `bind` read them.
    params: serde_json::Map<String, serde_json::Value>,
    lookup: ParamLookup,
    /// The params as the audit record holds them (`redact` applied).
    audited_params: serde_json::Value,
    effective: Effective,
    origins: decide::Origins,
    unknown_action: Option<Outcome>,
    near_miss: Option<String>,
    rule_hits: Vec<RuleHit>,
    mismatches: Vec<ParamMismatch>,
    rule_results: Vec<crate::policy::RuleResult>,
    floor_requirements: Requirements,
    floor_options: Options,
}

/// Effective requirements (an action type no policy names gets the
/// `[defaults]` floors, and what `[authorize] unknown_action` says), the
/// params redacted for the record, and the param rules.
fn read_policy<'s>(
    h: &Handles<'_>,
    set: &'s PolicySet,
    action_type: String,
    params: serde_json::Map<String, serde_json::Value>,
    requested: Requested,
) -> PolicyRead<'s> {
    let policy = set.action(&action_type);
    let mut audited_params = serde_json::Value::Object(params.clone());
    if let Some(p) = policy {
        crate::audit::redact(&mut audited_params, &p.redact, h.redaction);
    }
    let defaults = policy
        .is_none()
        .then(|| defaults_policy(h.defaults, &action_type));
    let applied = policy.or(defaults.as_ref());
    let (effective, origins) =
        decide::effective_traced(applied.map(ActionPolicy::floor), &requested);
    let unknown = policy
        .is_none()
        .then(|| unknown_outcome(set, h.unknown_action, &action_type))
        .flatten();
    let near_miss = unknown.and_then(|(_, declared)| declared).map(|declared| {
        tracing::warn!(
            action_type = %action_type,
            declared,
            "undeclared action type reads as a declared one misspelt: refused"
        );
        declared.to_string()
    });
    let lookup = ParamLookup::from(&params);
    let (evaluation, rule_results) = policy
        .map(|p| p.evaluate_traced(&lookup))
        .unwrap_or_default();
    PolicyRead {
        policy,
        requested,
        params,
        lookup,
        audited_params,
        effective,
        origins,
        unknown_action: unknown.map(|(outcome, _)| outcome),
        near_miss,
        rule_hits: evaluation.hits,
        mismatches: evaluation.mismatches,
        rule_results,
        floor_requirements: applied.map(|p| p.requirements.clone()).unwrap_or_default(),
        floor_options: applied.map(|p| p.options.clone()).unwrap_or_default(),
        action_type,
    }
}

/// The sources as read: every one, the ones the provenance refused and the
/// ones that could not be read, how many the engine sees, and the captured
/// input.
struct Evidence {
    resolved: Vec<Resolved>,
    untrusted: Vec<(String, String)>,
    unavailable: Vec<(String, String)>,
    sources_total: usize,
    captured: Option<String>,
}

/// Reads the sources the request and the policy name, within the action's
/// provenance, and captures the input as decided when the log keeps inputs.
/// Returns them beside the sources as the engine sees them.
async fn gather(
    h: &Handles<'_>,
    read: &PolicyRead<'_>,
    mut sources_in: Vec<SourceIn>,
    claims: Option<&[ClaimIn]>,
    answer: Option<&AnswerIn>,
) -> Result<(Evidence, Vec<engine::Source>), DecideError> {
    if let Some(p) = read.policy {
        named_sources(p, &read.params, &mut sources_in)?;
    }
    let source_refs = input::source_refs("sources", sources_in)?;
    let provenance = read.policy.map(|p| &p.provenance);
    let (resolved, untrusted) = read_sources(h.resolver, provenance, source_refs).await;
    let refused = |id: &str| untrusted.iter().any(|(u, _)| u == id);
    let unavailable: Vec<(String, String)> = resolved
        .iter()
        .filter(|r| !refused(&r.id))
        .filter_map(|r| r.text.as_ref().err().map(|e| (r.id.clone(), e.clone())))
        .collect();
    // A refused source is never evidence: the engine sees it as unavailable.
    let sources: Vec<engine::Source> = input::engine_sources(&resolved)
        .into_iter()
        .map(|mut s| {
            if refused(&s.id) {
                s.text = None;
            }
            s
        })
        .collect();
    // The input as decided, kept beside the record that names its hash.
    let captured = if h.capture && h.audit.is_durable() {
        capture::encode(&capture::Parts {
            action_type: &read.action_type,
            params: &read.audited_params,
            claims,
            answer,
            sources: &resolved,
            requested: &read.requested,
        })?
    } else {
        None
    };
    let evidence = Evidence {
        resolved,
        untrusted,
        unavailable,
        sources_total: sources.len(),
        captured,
    };
    Ok((evidence, sources))
}

/// The engine's checks, the coverage score, and the claims sent without a
/// citation.
struct Checked {
    checks: Vec<Check>,
    coverage_score: f64,
    uncited: Vec<String>,
}

/// Verifies the claims (explicit, or extracted from an answer, which then
/// lends them its citations) against the sources, off the async threads
/// when the work is large.
async fn check_claims(
    h: &Handles<'_>,
    read: &PolicyRead<'_>,
    claims: Option<Vec<ClaimIn>>,
    answer: Option<AnswerIn>,
    sources: Vec<engine::Source>,
) -> Result<Checked, DecideError> {
    let explicit = match claims {
        Some(c) if !c.is_empty() => Some(input::engine_claims("claims", c)?),
        _ => None,
    };
    let params = engine::Params {
        min_coverage: read.effective.min_coverage,
        evidence_limit: read.effective.evidence_limit,
        date_order: h.resolver.date_order(),
        ..engine::Params::default()
    };
    let work = sources
        .iter()
        .map(|s| s.text.as_ref().map_or(0, String::len))
        .sum::<usize>()
        + answer.as_ref().map_or(0, |a| a.text.len())
        + explicit
            .as_ref()
            .map_or(0, |c| c.iter().map(|c| c.text.len()).sum());
    input::run_engine(work, move || {
        let claims = match (explicit, answer) {
            (Some(c), _) => c,
            (None, Some(a)) => answer_claims(&a, &sources),
            (None, None) => Vec::new(),
        };
        let uncited: Vec<String> = claims
            .iter()
            .filter(|c| c.citations.is_empty())
            .map(|c| c.id.clone())
            .collect();
        let checks = engine::verify(&claims, &sources, &params);
        let (_, coverage_score) = engine::summarize(&checks, !sources.is_empty());
        Checked {
            checks,
            coverage_score,
            uncited,
        }
    })
    .await
}

/// The claims of an answer; the answer's citations go to each claim that
/// has none of its own.
fn answer_claims(a: &AnswerIn, sources: &[engine::Source]) -> Vec<engine::Claim> {
    let mut claims = engine::extract_claims(&a.text, sources);
    if !a.citations.is_empty() {
        for c in claims.iter_mut().filter(|c| c.citations.is_empty()) {
            c.citations = a
                .citations
                .iter()
                .map(|x| engine::CallerCitation {
                    source_id: x.source_id.clone(),
                    quote: x.quote.clone(),
                })
                .collect();
        }
    }
    claims
}

/// The decision and what it rests on; no IO.
struct Evaluated {
    checked: Checked,
    decision: Decision,
    row: decide::Row,
    unbound: Vec<String>,
    claims_supported: usize,
    /// The shadow set's decision and revision, when it disagrees.
    shadow: Option<(Decision, String)>,
}

/// The decision table over what was found, and the shadow set's decision
/// beside it (which never changes this one).
fn evaluate(
    h: &Handles<'_>,
    read: &PolicyRead<'_>,
    evidence: &Evidence,
    checked: Checked,
) -> Evaluated {
    let effective = &read.effective;
    let uncited = &checked.uncited;
    // A claim that needed a citation and had none supports nothing, whatever
    // its coverage: it is neither counted nor used to bind params.
    let cited_enough =
        |c: &Check| !(effective.citations == Citations::Required && uncited.contains(&c.claim_id));
    let claims_supported = checked
        .checks
        .iter()
        .filter(|c| c.status == engine::ClaimStatus::Supported && cited_enough(c))
        .count();
    let lookup = &read.lookup;
    let unbound = unbound(read.policy, lookup, &checked.checks, cited_enough);
    let (decision, row) = decide::decide_traced(&decide::Facts {
        requirements: effective,
        rule_hits: &read.rule_hits,
        checks: &checked.checks,
        claims_without_citations: uncited.len(),
        unavailable_sources: evidence.unavailable.len(),
        untrusted_sources: evidence.untrusted.len(),
        param_mismatches: read.mismatches.len(),
        unbound_params: unbound.len(),
        unknown_action: read.unknown_action,
    });
    let shadow = h
        .shadow
        .map(crate::policy::PolicyStore::load_full)
        .and_then(|shadow_set| {
            let shared = shadow::SameRequest {
                action_type: &read.action_type,
                requested: &read.requested,
                lookup,
                defaults: h.defaults,
                unknown_action: h.unknown_action,
                checks: &checked.checks,
                uncited,
                unavailable: evidence.unavailable.len(),
                untrusted: evidence.untrusted.len(),
                effective,
            };
            let theirs = shadow::decide(&shadow_set, &shared);
            shadow::disagrees(&decision, &theirs).then(|| (theirs, shadow_set.revision.clone()))
        });
    Evaluated {
        checked,
        decision,
        row,
        unbound,
        claims_supported,
        shadow,
    }
}

/// The audit record of a decision, as the log keeps it.
fn audit_record(
    set: &PolicySet,
    ctx: &Ctx<'_>,
    read: &PolicyRead<'_>,
    evidence: &Evidence,
    e: &Evaluated,
) -> AuditRecord {
    let mut record = AuditRecord::new(RecordKind::Decision);
    record.request_id = Some(ctx.request_id.to_string());
    record.request_hash = Some(ctx.request_hash.to_string());
    record.principal = Some(ctx.principal.to_string());
    record.action =
        Some(serde_json::json!({"type": read.action_type, "params": read.audited_params.clone()}));
    record.input_hash = evidence.captured.as_deref().map(capture::hash);
    record.decision = Some(e.decision.outcome.as_str().to_string());
    record.reason = Some(e.decision.reason.as_str().to_string());
    record.enforced = Some(e.decision.enforced);
    record.would_decide = e.decision.would_decide.map(|d| d.as_str().to_string());
    record.coverage_score = Some(e.checked.coverage_score);
    record.claims_total = Some(e.checked.checks.len() as u64);
    record.claims_supported = Some(e.claims_supported as u64);
    record.policy_revision = Some(set.revision.clone());
    record.route = ctx.route.map(str::to_string);
    record.source = ctx.source.recorded();
    record.detail = decision_detail(
        &read.rule_hits,
        &read.mismatches,
        &e.unbound,
        &evidence.resolved,
    );
    if let Some((theirs, revision)) = &e.shadow {
        let detail = record
            .detail
            .get_or_insert_with(|| serde_json::Value::Object(Default::default()));
        if let Some(d) = detail.as_object_mut() {
            d.insert(
                "shadow".into(),
                serde_json::json!({
                    "decision": theirs.outcome.as_str(),
                    "reason": theirs.reason.as_str(),
                    "revision": revision,
                }),
            );
        }
    }
    record
}

/// Appends the decision's record (the decision is never returned before its
/// record is durable), counts and logs it, and returns everything it
/// produced.
async fn record(
    h: &Handles<'_>,
    set: &PolicySet,
    ctx: &Ctx<'_>,
    read: PolicyRead<'_>,
    mut evidence: Evidence,
    e: Evaluated,
    started: Instant,
) -> Result<Decided, DecideError> {
    let evaluated_at = crate::support::time::rfc3339((h.clock)());
    let record = audit_record(set, ctx, &read, &evidence, &e);
    // The captured input (the whole request, sources included) moves into
    // the log's queue; it is never copied.
    let captured = evidence
        .captured
        .take()
        .map(|canonical| crate::audit::CapturedInput { canonical });
    let source = ctx.source.as_str();
    let evaluated = Instant::now();
    h.metrics.stage(source, "evaluate", evaluated - started);
    let receipt = h
        .audit
        .append(record, captured)
        .instrument(tracing::info_span!(
            target: crate::telemetry::trace::TARGET,
            "audit.commit"
        ))
        .await?;
    h.metrics.stage(source, "record", evaluated.elapsed());
    let decision = e.decision;
    h.metrics
        .observe(source, decision.outcome.as_str(), decision.reason.as_str());
    tracing::info!(
        request_id = ctx.request_id,
        principal = %ctx.principal,
        action = %read.action_type,
        record_id = %receipt.record_id,
        decision = decision.outcome.as_str(),
        reason = decision.reason.as_str(),
        "authorize decided"
    );
    if let Some((theirs, revision)) = &e.shadow {
        h.metrics
            .shadow_disagreement(ctx.route, decision.outcome, theirs.outcome);
        tracing::info!(
            request_id = ctx.request_id,
            record_id = %receipt.record_id,
            action = %read.action_type,
            decision = decision.outcome.as_str(),
            shadow_decision = theirs.outcome.as_str(),
            shadow_reason = theirs.reason.as_str(),
            shadow_revision = %revision,
            "shadow policy set disagrees"
        );
    }
    let sources_total = evidence.sources_total;
    let untrusted = evidence.untrusted;
    let sources = evidence
        .resolved
        .into_iter()
        .filter(|r| !untrusted.iter().any(|(u, _)| *u == r.id))
        .filter_map(|r| r.text.ok().map(|t| (r.id, t)))
        .collect();
    Ok(Decided {
        decision,
        effective: read.effective,
        checks: e.checked.checks,
        coverage_score: e.checked.coverage_score,
        rule_hits: read.rule_hits,
        mismatches: read.mismatches,
        unbound: e.unbound,
        claims_supported: e.claims_supported,
        sources_total,
        sources,
        unavailable: evidence.unavailable,
        untrusted,
        policy_revision: set.revision.clone(),
        approvals: read.policy.and_then(|p| p.approvals),
        evaluated_at,
        receipt,
        params: read.audited_params,
        trace: explain::Trace {
            policy: match (read.policy, read.unknown_action) {
                (Some(_), _) => explain::PolicyUsed::Declared,
                (None, None) => explain::PolicyUsed::Defaults,
                (None, Some(outcome)) => explain::PolicyUsed::Refused {
                    outcome,
                    near_miss: read.near_miss,
                },
            },
            floor_requirements: read.floor_requirements,
            floor_options: read.floor_options,
            requested: read.requested,
            origins: read.origins,
            rules: read.rule_results,
            row: e.row,
            uncited: e.checked.uncited,
        },
    })
}
