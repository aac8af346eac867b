//! Extractors and JSON pointers: a route whose extractors come from the input
//! is loaded through the real validator, then run against a request whose
//! path, query, headers and JSON body also come from the input. The same
//! strings are also used as unchecked extractors, which must not panic either.
//!
//! Input layout, split on `\n`: line 1 is an extractor string, line 2 a
//! request path, line 3 a query string, line 4 a header value, the rest the
//! JSON body.
#![no_main]

use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use verdict::policy::{Extractor, PathParams, PolicySet, RequestParts};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.splitn(5, '\n');
    let ex = parts.next().unwrap_or("");
    let path = parts.next().unwrap_or("");
    let query = parts.next();
    let header = parts.next().unwrap_or("");
    let body = parts.next().unwrap_or("");

    // serde_json's string escapes are all valid TOML basic-string escapes.
    let quoted = serde_json::to_string(ex).unwrap_or_default();
    let policy = format!(
        "[[route]]\nname = \"r\"\nmethod = \"POST\"\npath = \"/o/{{id}}/x/{{rest}}\"\n\
         action = \"a\"\nparams = {{ p = {quoted}, id = \"path:id\" }}\nclaims = {quoted}\n\
         sources = {quoted}\n"
    );
    let body: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(header.as_bytes()) {
        headers.insert("x-fuzz", v);
    }
    let empty = PathParams::default();
    let set = PolicySet::from_sources(&[("f.toml", &policy)]).ok();
    let matched = set.as_ref().and_then(|s| s.match_route("POST", path));
    let params = matched.as_ref().map_or(&empty, |(_, p)| p);
    let req = RequestParts {
        path_params: params,
        query,
        headers: &headers,
        body: body.as_ref(),
    };
    if let Some((route, _)) = &matched {
        let _ = route.extract(&req);
    }
    for unchecked in [
        Extractor::Body(ex.to_string()),
        Extractor::Query(ex.to_string()),
        Extractor::Header(ex.to_ascii_lowercase()),
        Extractor::Path(ex.to_string()),
    ] {
        let _ = unchecked.extract(&req);
    }
});
