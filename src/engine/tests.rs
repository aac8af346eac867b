//! Table-driven tests of the public engine API.

use super::*;

fn src(id: &str, text: &str) -> Source {
    Source {
        id: id.to_string(),
        text: Some(text.to_string()),
    }
}

fn claim(text: &str) -> Claim {
    Claim {
        id: "c1".to_string(),
        text: text.to_string(),
        citations: Vec::new(),
    }
}

fn check(text: &str, evidence: &str) -> Check {
    let mut v = verify(&[claim(text)], &[src("s1", evidence)], &Params::default());
    v.remove(0)
}

#[test]
fn smoke() {
    let c = check("The refund was $100.", "The refund was $100.");
    assert_eq!(c.status, ClaimStatus::Supported, "{c:?}");
    let c = check("The refund was $120.", "The refund was $100.");
    assert_eq!(c.status, ClaimStatus::Unsupported, "{c:?}");
}
