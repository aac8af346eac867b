//! `POST /v2/verify`: check claims against evidence and report the truth,
//! with no permission attached.
//!
//! Verify applies no citation requirement (that is authorize's job): it
//! resolves the sources, runs the engine, and answers compact or verbose as
//! docs/openapi.yaml describes.

use serde::{Deserialize, Serialize};

use super::wire::{
    self, CheckOut, Claims, MetricsOut, Mode, OptionsIn, RequirementsIn, ResponseIn, SourceIn,
};
use crate::engine;
use crate::evidence::Resolver;
use crate::http::error::ApiError;
use crate::http::JsonBody;

#[derive(Debug, Deserialize)]
pub struct VerifyRequest {
    pub claims: Claims,
    #[serde(default)]
    pub sources: Vec<SourceIn>,
    pub response: Option<ResponseIn>,
    pub requirements: Option<RequirementsIn>,
    pub options: Option<OptionsIn>,
}

#[derive(Debug, Serialize)]
pub struct VerifyResponse {
    pub request_id: String,
    pub request_hash: String,
    pub verdict: &'static str,
    pub coverage_score: f64,
    pub checks: Vec<CheckOut>,
    pub metrics: MetricsOut,
}

/// A validated verify request, ready for the engine.
pub struct Prepared {
    pub claims: Vec<engine::Claim>,
    pub sources: Vec<crate::evidence::SourceRef>,
    pub params: engine::Params,
    pub mode: Mode,
}

/// Validates a verify body (also used for each batch item).
pub fn prepare(req: VerifyRequest, field_prefix: &str) -> Result<Prepared, ApiError> {
    let mode = wire::response_mode(req.response.as_ref())?;
    // Verify has no use for a decision mode or a citation policy, but a value
    // the schema does not allow is refused here as authorize refuses it.
    if let Some(r) = req.requirements.as_ref() {
        if let Some(m) = r.decision_mode.as_deref() {
            super::authorize::parse_mode(m)?;
        }
        if let Some(c) = r.citations.as_deref() {
            super::authorize::parse_citations(c)?;
        }
    }
    let mut params = engine::Params::default();
    if let Some(m) = wire::min_coverage(req.requirements.as_ref(), req.options.as_ref())? {
        params.min_coverage = m;
    }
    if let Some(n) = wire::evidence_limit(req.options.as_ref())? {
        params.evidence_limit = n;
    }
    let claims = wire::engine_claims(&format!("{field_prefix}claims"), req.claims.0)?;
    let sources = wire::source_refs(&format!("{field_prefix}sources"), req.sources)?;
    Ok(Prepared {
        claims,
        sources,
        params,
        mode,
    })
}

/// Resolves, verifies and shapes the response.
pub async fn run(
    prepared: Prepared,
    resolver: &Resolver,
    request_id: &str,
    request_hash: String,
    started: std::time::Instant,
) -> Result<VerifyResponse, ApiError> {
    let Prepared {
        claims,
        sources,
        mut params,
        mode,
    } = prepared;
    params.date_order = resolver.date_order();
    let resolved = resolver.resolve(&sources).await;
    let engine_sources = wire::engine_sources(&resolved);
    let sources_total = engine_sources.len();
    let work: usize = engine_sources
        .iter()
        .map(|s| s.text.as_ref().map_or(0, String::len))
        .sum::<usize>()
        + claims.iter().map(|c| c.text.len()).sum::<usize>();
    let (checks, verdict, score) = wire::run_engine(work, move || {
        let checks = engine::verify(&claims, &engine_sources, &params);
        let (verdict, score) = engine::summarize(&checks, !engine_sources.is_empty());
        (checks, verdict, score)
    })
    .await?;
    Ok(VerifyResponse {
        request_id: request_id.to_string(),
        request_hash,
        verdict: verdict.as_str(),
        coverage_score: score,
        metrics: MetricsOut::new(started, &checks, sources_total),
        checks: checks.iter().map(|c| wire::check_out(c, mode)).collect(),
    })
}

/// The handler body for `POST /v2/verify`.
pub async fn handle(
    body: JsonBody,
    resolver: &Resolver,
    request_id: &str,
    started: std::time::Instant,
) -> Result<VerifyResponse, ApiError> {
    let req: VerifyRequest = crate::http::typed(&body.value)?;
    let prepared = prepare(req, "")?;
    run(prepared, resolver, request_id, body.hash, started).await
}
