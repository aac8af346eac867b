//! Request bodies: arbitrary bytes through the same parsing and validation
//! that `/v2/verify`, `/v2/authorize` and `/v1/verify-claims-batch` run
//! before any IO: JSON parse and request hash, typed shape with field paths,
//! then value checks. Any outcome is fine except a panic; errors must map to
//! a 4xx, never a 500.
#![no_main]

use libfuzzer_sys::fuzz_target;
use verdict::api::fuzzing::{prepare_verify, validate_batch, VerifyRequest};
use verdict::api::wire;
use verdict::http::error::ApiError;
use verdict::gate::{self, AuthorizeRequest};
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
        Ok(req) => {
            let _ = wire::response_mode(req.response.as_ref()).map_err(client_error);
            let _ = gate::requested(&req).map_err(client_error);
            if let Some(c) = req.claims {
                let _ = wire::engine_claims("claims", c.0).map_err(client_error);
            }
            let _ = wire::source_refs("sources", req.sources).map_err(client_error);
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
