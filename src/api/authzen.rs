//! The OpenID AuthZEN Authorization API 1.0 door: `POST
//! /access/v1/evaluation`, `POST /access/v1/evaluations` and `GET
//! /.well-known/authzen-configuration`, so that gateways and identity
//! products that speak AuthZEN (as a policy enforcement point) can ask
//! verdict without learning `/v2/authorize`.
//!
//! An evaluation is read here into the same decision input as
//! `/v2/authorize` and decided by [`crate::decide`], with the same keys,
//! scopes, audit record and request hash (of the evaluation as decided,
//! defaults applied). The mapping, documented in docs/authzen.md:
//! `action.name` is the action type; `action.properties` are the params;
//! `subject`, `resource` and `context` are the params of those names (so a
//! rule reads `resource.id` or `subject.properties.department`), except
//! that `context.claims` and `context.sources` are the claims and the
//! evidence. `decision` is true only for allow; the context says what
//! verdict decided, why, and which audit record holds it.
//!
//! A `needs_review` answers `false` at once (an AuthZEN caller cannot wait
//! for a person) and stores a record-only review of the evaluation, which a
//! reviewer approves or rejects like a held call but whose approval
//! forwards nothing; the context names the review and the caller's
//! `result_url`, where it reads the outcome. A review that cannot be stored
//! fails the call (503), so a `needs_review` is never answered without one.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use http::{Request, Response, StatusCode};

use super::{Api, Call};
use crate::decide::input::{Claims, SourceIn};
use crate::decide::{Decided, Input};
use crate::engine::decide::Requested;
use crate::http::error::ApiError;
use crate::http::{json_response, RespBody};
use crate::server::ReqBody;

/// The params an evaluation's own entities take; an action property of the
/// same name would be ambiguous and is refused.
const RESERVED: [&str; 3] = ["subject", "resource", "context"];

/// `subject` or `resource`: `type` and `id` (required strings) and
/// optional `properties`.
#[derive(Debug, Clone, Deserialize)]
struct Entity {
    #[serde(rename = "type")]
    kind: String,
    id: String,
    properties: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Deserialize)]
struct Action {
    name: String,
    properties: Option<Map<String, Value>>,
}

/// One evaluation as sent: any part may be missing when the batch's
/// top level gives it. Unknown members are ignored, as the spec asks.
#[derive(Debug, Clone, Default, Deserialize)]
struct Partial {
    subject: Option<Entity>,
    resource: Option<Entity>,
    action: Option<Action>,
    context: Option<Map<String, Value>>,
}

/// The body of `POST /access/v1/evaluations`.
#[derive(Debug, Deserialize)]
struct Batch {
    #[serde(flatten)]
    defaults: Partial,
    #[serde(default)]
    evaluations: Vec<Partial>,
    options: Option<Map<String, Value>>,
}

/// How a batch combines its evaluations (`options.evaluations_semantic`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Semantic {
    ExecuteAll,
    /// Stops after the first evaluation that is not permitted.
    DenyOnFirstDeny,
    /// Stops after the first permitted evaluation.
    PermitOnFirstPermit,
}

impl Semantic {
    /// Whether a batch under this semantic stops after a decision.
    pub fn stops_after(self, permitted: bool) -> bool {
        match self {
            Semantic::ExecuteAll => false,
            Semantic::DenyOnFirstDeny => !permitted,
            Semantic::PermitOnFirstPermit => permitted,
        }
    }

    /// The context a short-circuiting semantic adds to the decision it
    /// stopped on.
    pub fn stop_reason(self) -> &'static str {
        match self {
            Semantic::ExecuteAll => "execute_all",
            Semantic::DenyOnFirstDeny => "deny_on_first_deny",
            Semantic::PermitOnFirstPermit => "permit_on_first_permit",
        }
    }
}

/// A complete evaluation, ready to decide.
#[derive(Debug)]
pub struct Evaluation {
    pub input: Input,
    /// `sha256:<hex>` of the canonical evaluation (defaults applied): the
    /// decision record's `request_hash`.
    pub hash: String,
    /// The evaluation as hashed (defaults applied): its canonical JSON is
    /// the body of its review, should it need one.
    pub evaluation: Value,
}

fn bad(e: impl std::fmt::Display) -> ApiError {
    ApiError::BadRequest(e.to_string())
}

/// A batch as read: each evaluation, or why it alone cannot be decided,
/// the semantic, and whether the body was a batch at all (with no
/// `evaluations` it is one evaluation, answered with a single decision).
pub type Read = (Vec<Result<Evaluation, ApiError>>, Semantic, bool);

/// Reads `POST /access/v1/evaluation`; 400 when a required part is missing
/// or a part cannot be read.
pub fn single(body: &Value) -> Result<Evaluation, ApiError> {
    let p: Partial = serde_path_to_error::deserialize(body).map_err(bad)?;
    input(required(p, "")?, "")
}

/// Reads `POST /access/v1/evaluations`: each evaluation with the top-level
/// defaults applied, and the semantic. A missing subject, resource or
/// action fails the whole request (400, as the spec asks); claims or
/// sources that cannot be read fail only their evaluation.
pub fn batch(body: &Value) -> Result<Read, ApiError> {
    let b: Batch = serde_path_to_error::deserialize(body).map_err(bad)?;
    let semantic = match b
        .options
        .as_ref()
        .and_then(|o| o.get("evaluations_semantic"))
    {
        None => Semantic::ExecuteAll,
        Some(Value::String(s)) if s == "execute_all" => Semantic::ExecuteAll,
        Some(Value::String(s)) if s == "deny_on_first_deny" => Semantic::DenyOnFirstDeny,
        Some(Value::String(s)) if s == "permit_on_first_permit" => Semantic::PermitOnFirstPermit,
        Some(other) => {
            return Err(bad(format!(
                "options.evaluations_semantic: {other} is not one of execute_all, \
                 deny_on_first_deny, permit_on_first_permit"
            )))
        }
    };
    if b.evaluations.is_empty() {
        let one = input(required(b.defaults, "")?, "");
        return Ok((vec![one], semantic, false));
    }
    let complete = b
        .evaluations
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let merged = Partial {
                subject: p.subject.or_else(|| b.defaults.subject.clone()),
                resource: p.resource.or_else(|| b.defaults.resource.clone()),
                action: p.action.or_else(|| b.defaults.action.clone()),
                context: p.context.or_else(|| b.defaults.context.clone()),
            };
            required(merged, &format!("evaluations[{i}]."))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let evaluations = complete
        .into_iter()
        .enumerate()
        .map(|(i, c)| input(c, &format!("evaluations[{i}].")))
        .collect();
    Ok((evaluations, semantic, true))
}

/// An evaluation with its required parts.
struct Complete {
    subject: Entity,
    resource: Entity,
    action: Action,
    context: Map<String, Value>,
}

/// 400 naming the first missing part (`at` prefixes its path in a batch).
fn required(p: Partial, at: &str) -> Result<Complete, ApiError> {
    let missing = |what: &str| bad(format!("{at}{what} is required"));
    Ok(Complete {
        subject: p.subject.ok_or_else(|| missing("subject"))?,
        resource: p.resource.ok_or_else(|| missing("resource"))?,
        action: p.action.ok_or_else(|| missing("action"))?,
        context: p.context.unwrap_or_default(),
    })
}

/// The decision input of a complete evaluation, and its request hash.
fn input(c: Complete, at: &str) -> Result<Evaluation, ApiError> {
    let Complete {
        subject,
        resource,
        action,
        mut context,
    } = c;
    let entity = |e: Entity| {
        let mut m = Map::new();
        m.insert("type".into(), Value::String(e.kind));
        m.insert("id".into(), Value::String(e.id));
        if let Some(props) = e.properties {
            m.insert("properties".into(), Value::Object(props));
        }
        m
    };
    // The evaluation as decided, for its request hash: as a caller would
    // send it whole (a part it left out stays out).
    let mut act = Map::new();
    act.insert("name".into(), Value::String(action.name.clone()));
    if let Some(props) = &action.properties {
        act.insert("properties".into(), Value::Object(props.clone()));
    }
    let mut canonical = json!({
        "subject": entity(subject.clone()),
        "resource": entity(resource.clone()),
        "action": act,
    });
    if !context.is_empty() {
        canonical["context"] = Value::Object(context.clone());
    }
    let hash = crate::http::canonical_hash(&canonical)?;
    let claims = match context.remove("claims") {
        None => None,
        Some(v) => Some(
            serde_path_to_error::deserialize::<_, Claims>(v)
                .map_err(|e| bad(format!("{at}context.claims: {e}")))?
                .0,
        ),
    };
    let sources = match context.remove("sources") {
        None => Vec::new(),
        Some(v) => serde_path_to_error::deserialize::<_, Vec<SourceIn>>(v)
            .map_err(|e| bad(format!("{at}context.sources: {e}")))?,
    };
    let mut params = action.properties.unwrap_or_default();
    if let Some(k) = RESERVED.iter().find(|k| params.contains_key(**k)) {
        return Err(bad(format!(
            "{at}action.properties.{k}: the name is taken by the evaluation's own {k}"
        )));
    }
    params.insert("subject".into(), Value::Object(entity(subject)));
    params.insert("resource".into(), Value::Object(entity(resource)));
    params.insert("context".into(), Value::Object(context));
    Ok(Evaluation {
        input: Input {
            action_type: action.name,
            params,
            claims,
            answer: None,
            sources,
            requested: Requested::default(),
        },
        hash,
        evaluation: canonical,
    })
}

/// The Decision of one evaluation: `decision` true only for allow; the
/// context names verdict's decision, its reason and its audit record.
pub fn decision(o: &Decided) -> Value {
    json!({
        "decision": o.decision.outcome == crate::engine::decide::Outcome::Allow,
        "context": {
            "verdict_decision": o.decision.outcome.as_str(),
            "reason": o.decision.reason.as_str(),
            "record_id": o.receipt.record_id.to_string(),
            "policy_revision": o.policy_revision,
        }
    })
}

/// An evaluation of a batch that could not be decided: closed, with the
/// error in its context (the spec's per-evaluation errors).
pub fn failed(e: &ApiError) -> Value {
    json!({
        "decision": false,
        "context": {"error": {"status": e.status().as_u16(), "message": e.to_string()}}
    })
}

/// `GET /.well-known/authzen-configuration`, for a PDP reached at `base`
/// (scheme and authority, no trailing slash).
pub fn configuration(base: &str) -> Value {
    json!({
        "policy_decision_point": base,
        "access_evaluation_endpoint": format!("{base}/access/v1/evaluation"),
        "access_evaluations_endpoint": format!("{base}/access/v1/evaluations"),
    })
}

/// The review route of every AuthZEN review: what the Review API and the
/// console show (and filter by) as its route.
pub const REVIEW_ROUTE: &str = "authzen";

/// The record-only review of an evaluation decided `needs_review` at
/// `path` by the key `caller`: its owner (the tenant) and only requester
/// (four eyes), with what the reviewer is shown of the decision as the
/// proxy's hold stores it, and the evaluation (`body`: its canonical JSON,
/// whose hash is the decision record's `request_hash`) as the request,
/// `POST` to the endpoint with no headers.
pub fn review_of(
    o: &Decided,
    action: &str,
    caller: &str,
    path: &str,
    body: Bytes,
) -> crate::review::NewReview {
    let request = crate::review::HeldRequest {
        method: "POST".into(),
        path: path.into(),
        headers: Vec::new(),
        body,
    };
    crate::review::NewReview {
        forwards: false,
        review_id: None,
        owner: caller.into(),
        route: REVIEW_ROUTE.into(),
        action: action.into(),
        reason: o.decision.reason.as_str().to_string(),
        rules: o.rule_hits.iter().map(|h| h.message.clone()).collect(),
        record_id: Some(o.receipt.record_id.to_string()),
        requesters: vec![caller.into()],
        join_key: request.join_key(|_| false),
        credential_headers: Vec::new(),
        approvals_required: o.approvals,
        detail: Some(crate::decide::detail::review_detail(o)),
        request,
    }
}

/// The handlers: each evaluation goes through [`crate::decide::authorize`],
/// as `/v2/authorize` does.
impl Api {
    /// One AuthZEN evaluation sent to `path`, decided as `/v2/authorize`
    /// decides; a `needs_review` also stores its record-only review and
    /// names it in the context.
    async fn authzen_decide(
        &self,
        e: Evaluation,
        path: &str,
        ctx: &Call,
    ) -> Result<serde_json::Value, ApiError> {
        let set = self.app.policies.load_full();
        let decide_ctx = crate::decide::Ctx {
            source: crate::decide::Source::Api,
            principal: &ctx.principal.name,
            request_id: &ctx.request_id,
            request_hash: &e.hash,
            route: None,
        };
        let action = e.input.action_type.clone();
        let outcome =
            crate::decide::authorize(&self.app.decide_handles(), &set, e.input, &decide_ctx)
                .await?;
        let mut d = decision(&outcome);
        if outcome.decision.outcome == crate::engine::decide::Outcome::NeedsReview {
            let body = Bytes::from(crate::http::canonical_json(&e.evaluation)?);
            let new = review_of(&outcome, &action, &ctx.principal.name, path, body);
            let (review_id, result_url) = self.authzen_review(new).await?;
            d["context"]["review_id"] = review_id.into();
            d["context"]["result_url"] = result_url.into();
        }
        Ok(d)
    }

    /// Stores (or, for a retried evaluation still pending, joins) a
    /// record-only review; its id and the caller's result link. Any store
    /// failure is a 503: the `needs_review` is not answered without its
    /// review.
    async fn authzen_review(
        &self,
        new: crate::review::NewReview,
    ) -> Result<(String, String), ApiError> {
        let reviews = &self.app.reviews;
        let record_id = new.record_id.clone().unwrap_or_default();
        // The waiter is dropped: nobody holds this call, and a record-only
        // review's approval is nobody's to forward.
        let (view, joined, _waiter) = reviews.hold(new).await.map_err(|e| {
            // Fail closed; the cause is for the log, not the client.
            tracing::error!(error = %e, record_id = %record_id, "cannot store the review of an AuthZEN evaluation");
            ApiError::Unavailable("cannot store the review of this evaluation; retry later".into())
        })?;
        let id = view.review_id;
        if joined {
            tracing::info!(review_id = %id, record_id = %record_id, "retried AuthZEN evaluation joined its pending review");
        }
        let url = format!("/v2/reviews/{id}/result/{}", reviews.result_token(&id));
        Ok((id, url))
    }

    pub(super) async fn authzen_evaluation(
        &self,
        req: Request<ReqBody>,
        ctx: &Call,
    ) -> Result<Response<RespBody>, ApiError> {
        let body = self.body(req).await?;
        let e = single(&body.value)?;
        let d = self.authzen_decide(e, "/access/v1/evaluation", ctx).await?;
        json_response(StatusCode::OK, &d)
    }

    /// A batch: each evaluation decided in order; one that cannot be
    /// decided is closed with its error, and a short-circuiting semantic
    /// stops after the decision it names.
    pub(super) async fn authzen_evaluations(
        &self,
        req: Request<ReqBody>,
        ctx: &Call,
    ) -> Result<Response<RespBody>, ApiError> {
        let path = "/access/v1/evaluations";
        let body = self.body(req).await?;
        let (evaluations, semantic, boxcar) = batch(&body.value)?;
        if !boxcar {
            let e = evaluations.into_iter().next();
            let e = e.ok_or_else(|| ApiError::BadRequest("no evaluation".into()))??;
            return json_response(StatusCode::OK, &self.authzen_decide(e, path, ctx).await?);
        }
        let mut out = Vec::with_capacity(evaluations.len());
        for e in evaluations {
            let decided = match e {
                Ok(e) => self.authzen_decide(e, path, ctx).await,
                Err(e) => Err(e),
            };
            let mut d = match decided {
                Ok(d) => d,
                // The log, the gate or the review store cannot do its
                // job: the whole call fails closed, as `/v2/authorize`
                // would.
                Err(e) if e.status().is_server_error() => return Err(e),
                Err(e) => failed(&e),
            };
            let permitted = d["decision"] == serde_json::Value::Bool(true);
            let stop = semantic.stops_after(permitted);
            if stop {
                d["context"]["semantic"] = semantic.stop_reason().into();
            }
            out.push(d);
            if stop {
                break;
            }
        }
        json_response(StatusCode::OK, &serde_json::json!({ "evaluations": out }))
    }

    /// The PDP metadata, naming this server as the caller reached it.
    pub(super) fn authzen_configuration(
        &self,
        req: &Request<ReqBody>,
    ) -> Result<Response<RespBody>, ApiError> {
        let scheme = if self.app.config.api.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let host = req
            .headers()
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .filter(|h| h.parse::<http::uri::Authority>().is_ok())
            .map_or_else(|| self.app.config.api.listen.to_string(), str::to_string);
        let base = format!("{scheme}://{host}");
        json_response(StatusCode::OK, &configuration(&base))
    }
}
