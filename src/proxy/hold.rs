//! Holding a call for a reviewer: store it, wait up to the route's
//! `hold_timeout`, then forward an approved call exactly once (from the
//! waiting connection or, when it is gone, from the background forwarder).

use std::sync::Arc;

use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Limited};
use serde_json::json;

use super::{blocked, strip_hop_by_hop, Proxy, UpstreamClient, PROXY_PRINCIPAL};
use crate::decide::Decided;
use crate::http::error::ApiError;
use crate::http::{full, RespBody};
use crate::policy::Route;
use crate::review::{ForwardOutcome, HeldRequest, NewReview, Resolution, Viewer};
use crate::runtime::App;

/// The largest upstream answer buffered for a held request's reply.
pub(super) const MAX_HELD_RESPONSE: usize = 16 << 20;

/// The runtime [`Proxy::new`] ran on (the main one) and a client whose pool
/// lives there: held forwards run on it, so that they outlive the proxy
/// thread that released them.
#[derive(Clone)]
pub(super) struct HeldSender {
    pub(super) runtime: tokio::runtime::Handle,
    pub(super) client: UpstreamClient,
}

/// Claims the forward of an approved review and sends it, exactly once.
/// Returns the upstream answer (buffered, so it can also be stored), or
/// `None` when another task owns the forward or the claim failed.
pub async fn forward_held(app: &App, proxy: &Proxy, review_id: &str) -> Option<Response<RespBody>> {
    let reviews = app.reviews.clone();
    let held = match reviews.claim_forward(review_id).await {
        Ok(Some(h)) => h,
        Ok(None) => return None,
        Err(e) => {
            tracing::error!(review_id, error = %e, "cannot claim the forward of an approved review");
            return None;
        }
    };
    let mut headers = HeaderMap::new();
    for (k, v) in &held.headers {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_bytes(v),
        ) {
            headers.append(k, v);
        }
    }
    headers.insert("x-verdict-decision", HeaderValue::from_static("allow"));
    if let Ok(v) = HeaderValue::from_str(review_id) {
        headers.insert("x-verdict-review-id", v);
    }
    // The upstream learns which decision record the approval released, as
    // for any allowed call. It is added here, not held, so the held request
    // hashes as it did when it was decided.
    if !headers.contains_key("x-verdict-record-id") {
        let admin = Viewer {
            name: PROXY_PRINCIPAL.to_string(),
            sees_all: true,
        };
        if let Ok(Some(view)) = reviews.get(review_id, &admin).await {
            if let Some(v) = view
                .record_id
                .as_deref()
                .and_then(|id| HeaderValue::from_str(id).ok())
            {
                headers.insert("x-verdict-record-id", v);
            }
        }
    }
    let method = http::Method::from_bytes(held.method.as_bytes()).unwrap_or(http::Method::POST);
    let uri: Uri = held.path.parse().unwrap_or_else(|_| Uri::from_static("/"));
    let mut req = Request::new(full(held.body.clone()));
    *req.method_mut() = method;
    *req.uri_mut() = proxy.target(&uri);
    *req.headers_mut() = headers;
    // The send runs in its own task so that a client hanging up cannot leave
    // the forward stuck at `started`.
    let client = proxy.held.client.clone();
    let timeout = proxy.cfg.response_timeout;
    let stats = proxy.stats.clone();
    let id = review_id.to_string();
    let task = proxy.held.runtime.spawn(async move {
        let outcome = match tokio::time::timeout(timeout, client.request(req)).await {
            Err(_) => Err("the upstream timed out".to_string()),
            Ok(Err(e)) => Err(format!("the upstream could not be reached: {e}")),
            Ok(Ok(resp)) => {
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                match Limited::new(body, MAX_HELD_RESPONSE).collect().await {
                    Ok(c) => Ok((parts, c.to_bytes())),
                    Err(e) => Err(format!("reading the upstream answer failed: {e}")),
                }
            }
        };
        match outcome {
            Ok((parts, body)) => {
                stats.upstream(Ok(()));
                let ct = parts
                    .headers
                    .get(CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                let done = ForwardOutcome::Done {
                    status: parts.status.as_u16(),
                    body: body.clone(),
                    content_type: ct,
                };
                if let Err(e) = reviews.finish_forward(&id, done).await {
                    tracing::error!(review_id = %id, error = %e, "cannot store the forward outcome");
                }
                tracing::info!(review_id = %id, status = parts.status.as_u16(), "held request forwarded");
                Some(Response::from_parts(parts, full(body)))
            }
            Err(error) => {
                stats.upstream(Err("held_forward"));
                tracing::error!(review_id = %id, %error, "forwarding a held request failed");
                if let Err(e) = reviews
                    .finish_forward(&id, ForwardOutcome::Failed { error })
                    .await
                {
                    tracing::error!(review_id = %id, error = %e, "cannot store the forward outcome");
                }
                None
            }
        }
    });
    task.await.ok().flatten()
}

/// Forwards approvals that no live connection is waiting for: the ones left
/// from before a restart, then each new one as it arrives.
pub async fn run_background_forwarder(
    app: Arc<App>,
    proxy: Arc<Proxy>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let Some(mut rx) = app.reviews.take_unattended_approvals() else {
        return;
    };
    match app.reviews.approved_unforwarded().await {
        Ok(ids) => {
            for id in ids {
                forward_held(&app, &proxy, &id).await;
            }
        }
        Err(e) => tracing::error!(error = %e, "cannot list approved reviews to forward"),
    }
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => break,
            id = rx.recv() => match id {
                Some(id) => {
                    let (app, proxy) = (app.clone(), proxy.clone());
                    tokio::spawn(async move { forward_held(&app, &proxy, &id).await; });
                }
                None => break,
            },
        }
    }
}

/// `202` for a hold that outlived its timeout. `result_url` is the held
/// caller's own link to its outcome (no key needed: the token in it is the
/// capability); `poll` is the Review API's, for reviewers.
pub(super) fn pending(review_id: &str, result_token: &str, request_id: &str) -> Response<RespBody> {
    let body = json!({
        "review_id": review_id,
        "status": "pending",
        "poll": format!("/v2/reviews/{review_id}"),
        "result_url": format!("/v2/reviews/{review_id}/result/{result_token}"),
        "request_id": request_id,
    });
    let mut resp = Response::new(full(body.to_string()));
    *resp.status_mut() = StatusCode::ACCEPTED;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.headers_mut().insert(
        "x-verdict-decision",
        HeaderValue::from_static("needs_review"),
    );
    resp
}

impl Proxy {
    /// The API keys behind a held call: every verdict key found in any of
    /// the route's credential headers (`Authorization`, `Cookie`,
    /// `Proxy-Authorization` and its `credential_headers`). None of them may
    /// resolve the review (four eyes).
    fn requesters(&self, route: &Route, held: &HeldRequest) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for (name, value) in &held.headers {
            if !route.is_credential(&name.to_ascii_lowercase()) {
                continue;
            }
            let Ok(text) = std::str::from_utf8(value) else {
                continue;
            };
            for key in self.app.keys.keys_in(text) {
                if !names.contains(&key) {
                    names.push(key);
                }
            }
        }
        names
    }

    /// Stores the call for a reviewer and waits up to the route's hold timeout.
    pub(super) async fn hold(
        &self,
        route: &Route,
        held: HeldRequest,
        decided: &Decided,
        request_id: &str,
    ) -> Result<Response<RespBody>, ApiError> {
        let reviews = &self.app.reviews;
        let record_id = decided.receipt.record_id.to_string();
        let record_id = record_id.as_str();
        let (view, joined, waiter) = reviews
            .hold(NewReview {
                forwards: true,
                review_id: None,
                owner: PROXY_PRINCIPAL.to_string(),
                route: route.name.clone(),
                action: route.action.clone(),
                reason: decided.decision.reason.as_str().to_string(),
                rules: decided
                    .rule_hits
                    .iter()
                    .map(|h| h.message.clone())
                    .collect(),
                record_id: Some(record_id.to_string()),
                requesters: self.requesters(route, &held),
                join_key: held.join_key(|name| route.join_skips(name)),
                credential_headers: route.credential_headers.clone(),
                approvals_required: decided.approvals,
                request: held,
                detail: Some(crate::decide::detail::review_detail(decided)),
            })
            .await
            .map_err(|e| {
                // Fail closed; the cause is for the log, not the client.
                tracing::error!(error = %e, route = %route.name, "cannot hold the request for review");
                ApiError::Unavailable("cannot hold the request for review; retry later".into())
            })?;
        let id = view.review_id.clone();
        if joined {
            tracing::info!(review_id = %id, route = %route.name, record_id = %record_id, "retried call joined its pending review");
        } else {
            tracing::info!(review_id = %id, route = %route.name, "request held for review");
        }
        let drain = self.app.health.until_draining();
        match reviews.wait_on(waiter, route.hold_timeout, drain).await {
            Ok(Some(Resolution::Approved)) => match forward_held(&self.app, self, &id).await {
                Some(mut resp) => {
                    // The caller learns it was decided, like any forward.
                    let h = resp.headers_mut();
                    h.insert("x-verdict-decision", HeaderValue::from_static("allow"));
                    if let Ok(v) = HeaderValue::from_str(&id) {
                        h.insert("x-verdict-review-id", v);
                    }
                    if let Ok(v) = HeaderValue::from_str(record_id) {
                        h.insert("x-verdict-record-id", v);
                    }
                    Ok(resp)
                }
                None => Ok(pending(&id, &reviews.result_token(&id), request_id)),
            },
            Ok(Some(Resolution::Rejected | Resolution::Expired)) => Ok(blocked(
                request_id,
                "deny",
                "review_rejected",
                Some(record_id),
                "a reviewer rejected this call",
            )),
            Ok(None) => Ok(pending(&id, &reviews.result_token(&id), request_id)),
            Err(e) => {
                tracing::error!(error = %e, review_id = %id, "review store failed while holding");
                Err(ApiError::Unavailable(
                    "the review store failed while holding the request; retry later".into(),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// The proxy's credential headers and the ones the review store seals
    /// by name are one list, kept in two layers.
    #[test]
    fn credential_headers_are_the_sealed_headers() {
        assert_eq!(
            crate::policy::route::CREDENTIAL_HEADERS,
            crate::review::SEALED_HEADERS
        );
    }
}
