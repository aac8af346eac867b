//! Unit tests of the parent module, kept in their own file so that the
//! module itself reads as code.

use super::*;

#[test]
fn templates_match_segments() {
    assert_eq!(match_template("/health", "/health"), Some(vec![]));
    assert_eq!(
        match_template("/v2/jobs/{id}", "/v2/jobs/abc"),
        Some(vec!["abc"])
    );
    assert_eq!(match_template("/v2/jobs/{id}", "/v2/jobs/"), None);
    assert_eq!(match_template("/v2/jobs/{id}", "/v2/jobs/a/b"), None);
    assert_eq!(match_template("/health", "/health/"), None);
}

#[test]
fn unknown_is_404_and_wrong_method_is_405() {
    assert!(matches!(
        resolve(&Method::GET, "/nope"),
        Err((None, ApiError::NotFound(_)))
    ));
    match resolve(&Method::POST, "/health") {
        Err((Some("/health"), ApiError::MethodNotAllowed(m))) => {
            assert_eq!(m, vec![Method::GET])
        }
        _ => panic!("expected 405"),
    }
    assert!(resolve(&Method::HEAD, "/health").is_ok());
}
