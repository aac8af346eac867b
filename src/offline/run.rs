//! Runs one case through the doors' own readers and the one decision path,
//! offline, and compares what it decided with what the case expects.
//!
//! An authorize case is decided as `POST /v2/authorize` decides it; an HTTP
//! case is read by the proxy's reader (`proxy::read`: the refusals before
//! routing, the route, the body checks, the extractors) and then decided
//! with the route's name, as the proxy decides it. A request the proxy
//! refuses before deciding is a `deny` with the reason it would be recorded
//! under. Decisions go through `decide::authorize` with
//! [`Recorder::Discard`]: no log, nothing enforced.

use std::time::SystemTime;

use serde::Serialize;
use serde_json::{Map, Value};

use super::file::{Case, Expect, HttpRequest, Request, UNMATCHED_ROUTE};
use crate::audit::RedactionKey;
use crate::config::{Config, Unmatched};
use crate::decide::explain::{self, Explanation, RouteOut};
use crate::decide::{self, DecideError, DecisionMetrics, Handles, Input, Recorder};
use crate::evidence::Resolver;
use crate::policy::{OnReview, PathParams, PolicySet, Route};
use crate::proxy::read::{self, RefuseWith, Routed};

/// The principal offline decisions are made under.
pub const PRINCIPAL: &str = "verdict-test";

/// What decides cases: one policy set and the config's settings that a
/// decision reads (`[defaults]`, `[authorize]`, `[evidence]`, `[proxy]`).
pub struct Env {
    pub set: PolicySet,
    pub config: Config,
    resolver: Resolver,
    redaction: RedactionKey,
    metrics: DecisionMetrics,
}

impl Env {
    pub fn new(set: PolicySet, config: Config) -> Env {
        Env {
            resolver: Resolver::new(&config.evidence),
            // Redaction only shapes the record, which is dropped.
            redaction: RedactionKey::from_bytes(&[0; crate::audit::redaction::KEY_LEN]),
            metrics: DecisionMetrics::default(),
            set,
            config,
        }
    }

    pub(super) fn handles(&self) -> Handles<'_> {
        Handles {
            shadow: None,
            resolver: &self.resolver,
            audit: Recorder::Discard,
            redaction: &self.redaction,
            defaults: &self.config.defaults,
            unknown_action: self.config.authorize.unknown_action,
            metrics: &self.metrics,
            clock: SystemTime::now,
            capture: false,
        }
    }
}

/// What a case decided.
#[derive(Debug, Clone, Serialize)]
pub struct Actual {
    /// `allow`, `deny`, `needs_review`, `not_gated` (an HTTP request no
    /// route gates, which the proxy forwards), or `error` (no decision).
    pub decision: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The messages of the rules that hit, in rule order.
    pub rules: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_decide: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// Why the proxy refused the request before deciding.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Why no decision was made (a request the door answers with an error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The decision's trace (only when asked for).
    #[serde(skip)]
    pub explanation: Option<Explanation>,
}

impl Actual {
    fn outcome(decision: &str) -> Actual {
        Actual {
            decision: decision.to_string(),
            reason: None,
            rules: Vec::new(),
            would_decide: None,
            route: None,
            refused: None,
            error: None,
            explanation: None,
        }
    }

    fn refused(r: RefuseWith<'_>) -> Actual {
        Actual {
            reason: Some(r.reason.as_str().to_string()),
            route: r.route.map(|r| r.name.clone()),
            refused: Some(r.message),
            ..Actual::outcome("deny")
        }
    }

    fn error(message: String) -> Actual {
        Actual {
            error: Some(message),
            ..Actual::outcome("error")
        }
    }
}

/// One difference between what a case expects and what it decided.
#[derive(Debug, Clone, Serialize)]
pub struct Diff {
    pub field: &'static str,
    pub expected: Value,
    pub actual: Value,
}

/// Decides `case`; with `explain`, keeps the decision's trace.
pub async fn run(env: &Env, case: &Case, explain: bool) -> Actual {
    let request_id = format!("{}::{}", case.file_name, case.name);
    match &case.request {
        Request::Authorize { input, body } => {
            let hash = match crate::http::canonical_hash(body) {
                Ok(h) => h,
                Err(e) => return Actual::error(e.to_string()),
            };
            let ctx = decide::Ctx {
                source: decide::Source::Api,
                principal: PRINCIPAL,
                request_id: &request_id,
                request_hash: &hash,
                route: None,
            };
            match decide::authorize(&env.handles(), &env.set, input.clone(), &ctx).await {
                Ok(d) => decided(env, &d, input, None, explain),
                Err(e) => Actual::error(format!(
                    "the API would answer {}: {e}",
                    crate::http::error::ApiError::from(e.clone()).status()
                )),
            }
        }
        Request::Http(h) => http(env, h, &request_id, explain).await,
    }
}

async fn http(env: &Env, h: &HttpRequest, request_id: &str, explain: bool) -> Actual {
    let (path, query) = match h.target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (h.target.as_str(), None),
    };
    let routed = read::route(
        &env.set,
        &env.config.proxy,
        &h.method,
        path,
        query,
        &h.headers,
        !h.body.is_empty(),
    );
    let (route, path_params) = match routed {
        Routed::Refused(r) => return Actual::refused(r),
        Routed::Unmatched { .. } if env.config.proxy.unmatched == Unmatched::Deny => {
            return Actual {
                reason: Some(UNMATCHED_ROUTE.to_string()),
                refused: Some("no policy route matches this request".into()),
                ..Actual::outcome("deny")
            };
        }
        Routed::Unmatched { gated_elsewhere } => {
            return match gated_elsewhere
                .and_then(|r| read::unmatched_body_refusal(r, &h.headers, &h.body))
            {
                Some(r) => Actual::refused(r),
                None => Actual::outcome("not_gated"),
            };
        }
        Routed::Gated { route, path_params } => (route, path_params),
    };
    let input = match read::gated_input(route, &h.headers, query, &h.body, &path_params) {
        Ok(input) => input,
        Err(r) => return Actual::refused(r),
    };
    // The proxy hashes the request it would forward; any stable name does
    // here, since the record is dropped.
    let hash = format!("sha256:{}", hex::encode(sha2_of(h)));
    let ctx = decide::Ctx {
        source: decide::Source::Proxy,
        principal: PRINCIPAL,
        request_id,
        request_hash: &hash,
        route: Some(&route.name),
    };
    match decide::authorize(&env.handles(), &env.set, input.clone(), &ctx).await {
        Ok(d) => {
            let out = explain.then(|| route_out(route, &path_params));
            let mut actual = decided(env, &d, &input, out, explain);
            actual.route = Some(route.name.clone());
            actual
        }
        // A justification the decision cannot use is a recorded refusal,
        // as in the proxy.
        Err(e @ (DecideError::Malformed(_) | DecideError::Invalid(_))) => {
            Actual::refused(RefuseWith {
                route: Some(route),
                reason: crate::engine::decide::DecisionReason::PolicyViolation,
                status: crate::http::error::ApiError::from(e.clone()).status(),
                message: e.to_string(),
            })
        }
        Err(e) => Actual::error(e.to_string()),
    }
}

fn sha2_of(h: &HttpRequest) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut d = Sha256::new();
    d.update(h.method.as_bytes());
    d.update(b" ");
    d.update(h.target.as_bytes());
    d.update(b"\n");
    d.update(&h.body);
    d.finalize().into()
}

fn route_out(route: &Route, path_params: &PathParams) -> RouteOut {
    RouteOut {
        name: route.name.clone(),
        method: route.method.clone(),
        path: route.path.clone(),
        file: route.file.clone(),
        path_params: path_params
            .iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect::<Map<String, Value>>(),
        on_review: match route.on_review {
            OnReview::Hold => "hold",
            OnReview::Deny => "deny",
        },
    }
}

fn decided(
    env: &Env,
    d: &decide::Decided,
    input: &Input,
    route: Option<RouteOut>,
    explain: bool,
) -> Actual {
    Actual {
        reason: Some(d.decision.reason.as_str().to_string()),
        rules: d.rule_hits.iter().map(|h| h.message.clone()).collect(),
        would_decide: d.decision.would_decide.map(|w| w.as_str().to_string()),
        explanation: explain
            .then(|| explain::explain(d, &env.set, &input.action_type, &input.params, route)),
        ..Actual::outcome(d.decision.outcome.as_str())
    }
}

/// Every field where `actual` is not what `expect` says.
pub fn compare(expect: &Expect, actual: &Actual) -> Vec<Diff> {
    let mut diffs = Vec::new();
    if expect.decision != actual.decision {
        diffs.push(Diff {
            field: "decision",
            expected: Value::String(expect.decision.clone()),
            actual: Value::String(actual.decision.clone()),
        });
    }
    diffs.extend(text_diff("reason", &expect.reason, &actual.reason));
    if let Some(rules) = &expect.rules {
        if rules != &actual.rules {
            diffs.push(Diff {
                field: "rules",
                expected: rules.clone().into(),
                actual: actual.rules.clone().into(),
            });
        }
    }
    diffs.extend(text_diff(
        "would_decide",
        &expect.would_decide,
        &actual.would_decide,
    ));
    diffs.extend(text_diff("route", &expect.route, &actual.route));
    diffs
}

/// The difference in an optional text field: none when the case does not
/// expect one or the actual value is the expected one.
fn text_diff(
    field: &'static str,
    expect: &Option<String>,
    actual: &Option<String>,
) -> Option<Diff> {
    let want = expect.as_ref()?;
    (actual.as_ref() != Some(want)).then(|| Diff {
        field,
        expected: Value::String(want.clone()),
        actual: actual
            .as_ref()
            .map_or(Value::Null, |s| Value::String(s.clone())),
    })
}
