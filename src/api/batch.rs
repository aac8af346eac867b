//! Batch verification: `POST /v1/verify-claims-batch` and `GET /v2/jobs/{id}`.
//!
//! A submission is validated item by item exactly like a `/v2/verify` body
//! (an invalid item rejects the whole batch with a 422 naming it), then handed
//! to [`crate::jobs`], which stores it durably and runs it on worker threads
//! off the request path. Each item's result is the verify response the item
//! would have got on its own.

use std::sync::Arc;

use serde::Deserialize;

use super::verify::{self, VerifyRequest};
use crate::evidence::Resolver;
use crate::http::error::ApiError;
use crate::http::JsonBody;
use crate::jobs::{ItemFn, JobsError, Page, Submitted};

/// The longest `Idempotency-Key` accepted.
const MAX_IDEMPOTENCY_KEY: usize = 200;
/// Results per page when the caller does not say.
pub const DEFAULT_PAGE: usize = 1000;
/// The largest page a caller may ask for.
pub const MAX_PAGE: usize = 10_000;

#[derive(Debug, Deserialize)]
struct BatchRequest {
    jobs: Vec<VerifyRequest>,
}

/// A validated submission: the raw items to store and the request hash.
pub struct Batch {
    pub items: Vec<serde_json::Value>,
    pub hash: String,
}

/// Validates a batch body: shape (400 with `jobs[i]...` paths), item count
/// (422 over `max_items`), and each item's values (422 naming the item).
pub fn validate(body: JsonBody, max_items: usize) -> Result<Batch, ApiError> {
    let typed: BatchRequest = crate::http::typed(&body.value)?;
    if typed.jobs.is_empty() {
        return Err(ApiError::Unprocessable("jobs: must not be empty".into()));
    }
    if typed.jobs.len() > max_items {
        return Err(ApiError::Unprocessable(format!(
            "jobs: {} items is more than the limit of {max_items}",
            typed.jobs.len()
        )));
    }
    for (i, item) in typed.jobs.into_iter().enumerate() {
        verify::prepare(item, &format!("jobs[{i}]."))?;
    }
    let items = match body.value {
        serde_json::Value::Object(mut o) => match o.remove("jobs") {
            Some(serde_json::Value::Array(items)) => items,
            _ => return Err(ApiError::BadRequest("jobs: expected an array".into())),
        },
        _ => return Err(ApiError::BadRequest("expected an object".into())),
    };
    Ok(Batch {
        items,
        hash: body.hash,
    })
}

/// Reads and checks the `Idempotency-Key` header.
pub fn idempotency_key(headers: &http::HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let s = v
        .to_str()
        .ok()
        .filter(|s| {
            (1..=MAX_IDEMPOTENCY_KEY).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic())
        })
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "Idempotency-Key: must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"
            ))
        })?;
    Ok(Some(s.to_string()))
}

/// Maps a submit outcome to (status, body).
pub fn submitted(
    outcome: Result<Submitted, JobsError>,
) -> Result<(http::StatusCode, serde_json::Value), ApiError> {
    match outcome {
        Ok(Submitted::Created(s)) => Ok((http::StatusCode::ACCEPTED, to_value(&s)?)),
        Ok(Submitted::Existing(s)) => Ok((http::StatusCode::OK, to_value(&s)?)),
        Err(e) => Err(e.into()),
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Result<serde_json::Value, ApiError> {
    serde_json::to_value(v).map_err(|e| ApiError::Internal(format!("serialise job: {e}")))
}

#[derive(Debug, Default, Deserialize)]
struct PageQuery {
    offset: Option<usize>,
    limit: Option<usize>,
}

/// `?offset=&limit=` for job results.
pub fn page(query: Option<&str>) -> Result<Page, ApiError> {
    let mut q = PageQuery::default();
    for (k, v) in crate::http::query_params(query)? {
        let n = || {
            v.parse::<usize>()
                .map_err(|_| ApiError::BadRequest(format!("{k}: expected a non-negative integer")))
        };
        match k.as_str() {
            "offset" => q.offset = Some(n()?),
            "limit" => q.limit = Some(n()?),
            _ => {}
        }
    }
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::Unprocessable(format!(
            "limit: must be 1 to {MAX_PAGE}"
        )));
    }
    Ok(Page {
        offset: q.offset.unwrap_or(0),
        limit,
    })
}

/// The work of one item: the `/v2/verify` response for it, as JSON. Runs on
/// a batch worker thread; `uri` sources are read through the runtime.
pub fn item_fn(resolver: Resolver, rt: tokio::runtime::Handle) -> ItemFn {
    Arc::new(move |index: usize, item: &serde_json::Value| {
        let started = std::time::Instant::now();
        let result = (|| {
            let hash = crate::http::canonical_hash(item)?;
            let req: VerifyRequest = crate::http::typed(item)?;
            let prepared = verify::prepare(req, "")?;
            let request_id = format!("item-{index}");
            rt.block_on(verify::run(prepared, &resolver, &request_id, hash, started))
        })();
        match result.and_then(|r| to_value(&r)) {
            Ok(v) => v,
            Err(e) => e.item_value(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages() {
        let p = page(None).unwrap();
        assert_eq!((p.offset, p.limit), (0, DEFAULT_PAGE));
        let p = page(Some("offset=5&limit=10&x=y")).unwrap();
        assert_eq!((p.offset, p.limit), (5, 10));
        assert!(page(Some("limit=0")).is_err());
        assert!(page(Some("limit=-1")).is_err());
        assert!(page(Some("offset=abc")).is_err());
    }

    #[test]
    fn items_are_validated_with_their_index() {
        let body = crate::http::parse_json(
            br#"{"jobs":[{"claims":["a"],"sources":[]},{"claims":[],"sources":[]}]}"#,
        )
        .unwrap();
        let err = validate(body, 10).err().unwrap();
        assert!(err.to_string().starts_with("jobs[1].claims"), "{err}");
        let body =
            crate::http::parse_json(br#"{"jobs":[{"claims":["a"]},{"claims":[{"id":"x"}]}]}"#)
                .unwrap();
        let err = validate(body, 10).err().unwrap();
        assert!(err.to_string().starts_with("jobs[1].claims[0]"), "{err}");
        let body =
            crate::http::parse_json(br#"{"jobs":[{"claims":["a"]},{"claims":["b"]}]}"#).unwrap();
        assert!(matches!(validate(body, 1), Err(ApiError::Unprocessable(_))));
    }
}
