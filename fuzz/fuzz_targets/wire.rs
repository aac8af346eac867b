//! Request bodies: arbitrary bytes through the same parsing and validation
//! that `/v2/verify`, `/v2/authorize` and `/v1/verify-claims-batch` run
//! before any IO: JSON parse and request hash, typed shape with field paths,
//! then value checks. Any outcome is fine except a panic; errors must map to
//! a 4xx, never a 500.
#![no_main]

use libfuzzer_sys::fuzz_target;
use verdict::api::authorize::AuthorizeRequest;
use verdict::api::fuzzing::{prepare_verify, validate_batch, VerifyRequest};
use verdict::decide::input::{engine_claims, source_refs};
use verdict::http::error::ApiError;
use verdict::http::{parse_json, typed};

fn client_error(e: ApiError) {
    let status = e.status();
    assert!(status.is_client_error(), "{status} for {e}");
}

fuzz_target!(|data: &[u8]| {
    // Three bodies in one: the same parsed value is tried as each request.
    let body = match parse_json(data) {
        Ok(b) => b,
        Err(e) => return client_error(e),
    };
    match typed::<VerifyRequest>(&body.value) {
        Ok(req) => {
            if let Err(e) = prepare_verify(req, "") {
                client_error(e);
            }
        }
        Err(e) => client_error(e),
    }
    match typed::<AuthorizeRequest>(&body.value) {
        Ok(mut req) => {
            let claims = req.claims.take();
            let sources = std::mem::take(&mut req.sources);
            // The response mode and the requirements and options asked for.
            let _ = req.into_input().map_err(client_error);
            if let Some(c) = claims {
                let _ = engine_claims("claims", c.0).map_err(|e| client_error(e.into()));
            }
            let _ = source_refs("sources", sources).map_err(|e| client_error(e.into()));
        }
        Err(e) => client_error(e),
    }
    let body = match parse_json(data) {
        Ok(b) => b,
        Err(e) => return client_error(e),
    };
    if let Err(e) = validate_batch(body, 100) {
        client_error(e);
    }
});
