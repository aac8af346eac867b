//! One spelling of a web origin, `scheme://host:port`, for every place that
//! compares them: the fetch allowlist (`evidence.allow_origins`), the
//! origins an action takes evidence from (`evidence.origins` in a policy),
//! and the origin of a uri about to be read. Two spellings of one origin
//! (`https://Billing.Internal/`, `https://billing.internal:443`) must
//! compare equal in all three, so they are normalised by one function.

use http::Uri;

/// `scheme://host:port` of a uri, lower case, the default port of http and
/// https made explicit; `None` without a scheme, a host, or a port to use.
pub fn uri_origin(uri: &Uri) -> Option<String> {
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let host = uri.host()?.to_ascii_lowercase();
    let port = uri.port_u16().or(match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    })?;
    Some(format!("{scheme}://{host}:{port}"))
}

/// [`uri_origin`] of a written origin or uri (a trailing `/` is allowed).
pub fn normalize_origin(s: &str) -> Option<String> {
    uri_origin(&s.trim_end_matches('/').parse::<Uri>().ok()?)
}

/// [`normalize_origin`] of a string that must be an origin only: no path
/// (but `/`), query, fragment or user info. `None` otherwise.
pub fn bare_origin(s: &str) -> Option<String> {
    let uri: Uri = s.trim().parse().ok()?;
    let bare = matches!(uri.path(), "" | "/")
        && uri.query().is_none()
        && !s.contains(['#', '@'])
        && matches!(uri.scheme_str(), Some("http" | "https"));
    bare.then(|| uri_origin(&uri)).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_normalise_default_ports() {
        assert_eq!(
            normalize_origin("https://Docs.Internal").as_deref(),
            Some("https://docs.internal:443")
        );
        assert_eq!(
            normalize_origin("http://127.0.0.1:8080/").as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert_eq!(normalize_origin("nope"), None);
    }

    #[test]
    fn a_bare_origin_has_no_path_query_or_user() {
        assert_eq!(
            bare_origin("HTTPS://Billing.Internal/").as_deref(),
            Some("https://billing.internal:443")
        );
        assert_eq!(
            bare_origin("http://[::1]:8080").as_deref(),
            normalize_origin("http://[::1]:8080/x").as_deref()
        );
        for not in [
            "https://billing.internal/orders",
            "https://billing.internal/?x=1",
            "https://billing.internal#f",
            "https://u@billing.internal",
            "ftp://billing.internal",
            "billing.internal",
        ] {
            assert_eq!(bare_origin(not), None, "{not}");
        }
    }
}
