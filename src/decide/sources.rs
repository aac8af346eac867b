//! The sources a decision reads: the caller's inline ones, the records a
//! policy names by param, and those fetched inside the evidence fences; and
//! the params a policy binds to supported claims.

use super::*;

/// Adds the records the action's `sources_from` names for these params.
/// A caller source under one of their ids, or a param that names no
/// record, is invalid: the service reads those documents, not the caller.
pub(super) fn named_sources(
    policy: &ActionPolicy,
    params: &serde_json::Map<String, serde_json::Value>,
    sources: &mut Vec<SourceIn>,
) -> Result<(), DecideError> {
    for t in &policy.sources_from {
        if sources.iter().any(|s| s.is_named(&t.id)) {
            return Err(DecideError::Invalid(format!(
                "sources: {:?} is read by the service from the system of record; do not send it",
                t.id
            )));
        }
        let uri = t.fill(params).map_err(|e| {
            DecideError::Invalid(format!(
                "action.params: the policy reads source {:?} by uri, and {e}",
                t.id
            ))
        })?;
        sources.push(SourceIn::by_uri(&t.id, uri));
    }
    Ok(())
}

/// Reads the request's sources, except those the action's provenance
/// refuses (`evidence.from = "referenced"`): inline text, a uri on another
/// origin, a source without a checksum where one is required. Those are
/// never read; they come back in request order beside the others, as the
/// caller sent them (inline text as text, a uri as unavailable, so that a
/// replay screens them again), and are listed with why.
pub(super) async fn read_sources(
    resolver: &Resolver,
    provenance: Option<&crate::policy::Provenance>,
    refs: Vec<SourceRef>,
) -> (Vec<Resolved>, Vec<(String, String)>) {
    let Some(p) = provenance.filter(|p| p.referenced) else {
        return (resolver.resolve(&refs).await, Vec::new());
    };
    let refusals: Vec<Option<String>> = refs
        .iter()
        .map(|s| {
            // A captured source that was unavailable and named no uri was
            // refused or failed before; it stays as it was.
            if let Content::Captured {
                uri: None,
                text: Err(_),
            } = &s.content
            {
                return None;
            }
            p.refuses(s.content.uri(), s.checksum.is_some())
        })
        .collect();
    let to_read: Vec<SourceRef> = refs
        .iter()
        .zip(&refusals)
        .filter(|(_, r)| r.is_none())
        .map(|(s, _)| s.clone())
        .collect();
    let mut read = resolver.resolve(&to_read).await.into_iter();
    let mut untrusted = Vec::new();
    let mut out = Vec::with_capacity(refs.len());
    for (s, refusal) in refs.into_iter().zip(refusals) {
        match refusal {
            None => out.extend(read.next()),
            Some(why) => {
                untrusted.push((s.id.clone(), why.clone()));
                let uri = s.content.uri().map(str::to_string);
                let text = match s.content {
                    Content::Inline(t) | Content::Captured { text: Ok(t), .. } => Ok(t),
                    Content::Uri(_) | Content::Captured { text: Err(_), .. } => Err(why),
                };
                out.push(Resolved {
                    id: s.id,
                    text,
                    uri,
                    checksum: s.checksum,
                });
            }
        }
    }
    (out, untrusted)
}
/// The `bind` params of `policy` that no counted supported claim states
/// (`counts` says which supported claims count).
pub(super) fn unbound(
    policy: Option<&ActionPolicy>,
    lookup: &ParamLookup,
    checks: &[Check],
    counts: impl Fn(&Check) -> bool,
) -> Vec<String> {
    let Some(p) = policy else {
        return Vec::new();
    };
    let counted: Vec<&Check> = checks
        .iter()
        .filter(|c| c.status == engine::ClaimStatus::Supported && counts(c))
        .collect();
    p.bind
        .iter()
        .filter(|name| {
            let Some(value) = lookup.get(name).and_then(bind_value) else {
                return true;
            };
            !counted
                .iter()
                .any(|c| engine::bind::states(&c.claim_text, &value))
        })
        .cloned()
        .collect()
}

/// How binding reads a param: numbers and strings bind; anything else
/// (an array, an object, a boolean) cannot be stated by a claim.
fn bind_value(v: &ParamValue) -> Option<BindValue> {
    match v {
        ParamValue::Number(n) => Some(BindValue::number(*n)),
        ParamValue::String(s) => Some(BindValue::text(s)),
        _ => None,
    }
}
