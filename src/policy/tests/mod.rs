//! Loader, validation, matching and extraction tests over whole policy files.

use super::*;

use http::HeaderMap;

use serde_json::json;

use std::time::Duration;

const REFUND_EXAMPLE: &str = r#"
[[action]]
type = "refund.create"
requirements = { decision_mode = "strict", min_coverage = 0.9, citations = "required" }
options = { deny_if_any_unsupported = true, evidence_limit = 3 }
require_claims = true
redact = ["params.card_number"]

  [[action.rule]]
  param = "amount"
  op = "gt"
  value = 500
  effect = "review"
  message = "refunds above 500 need a second pair of eyes"

[[route]]
name = "create-refund"
method = "POST"
path = "/api/orders/{order_id}/refunds"
action = "refund.create"
params = { order_id = "path:order_id", amount = "body:/amount", customer = "header:x-customer-id" }
claims = "body:/justification/claims"
sources = "body:/justification/evidence"
on_review = "hold"
hold_timeout = "30s"
"#;

fn errors_of(files: &[(&str, &str)]) -> Vec<String> {
    match PolicySet::from_sources(files) {
        Ok(_) => vec![],
        Err(es) => es.iter().map(ToString::to_string).collect(),
    }
}

/// Wraps a rule body in an action so error positions are easy to read:
/// line 3 is `param`, line 4 `op`, line 5 `value` (when present).
fn rule_file(op: &str, value: Option<&str>) -> String {
    let mut s =
        format!("[[action]]\ntype = \"x\"\n[[action.rule]]\nparam = \"p\"\nop = \"{op}\"\n");
    if let Some(v) = value {
        s.push_str(&format!("value = {v}\n"));
    }
    s.push_str("effect = \"deny\"\n");
    s
}

fn routes_set() -> PolicySet {
    let r = |name: &str, method: &str, path: &str| {
        format!("[[route]]\nname = \"{name}\"\nmethod = \"{method}\"\npath = \"{path}\"\naction = \"x\"\n")
    };
    let text = [
        "[[action]]\ntype = \"x\"\n".to_string(),
        r("param-param", "GET", "/{a}/{b}"),
        r("lit-param", "GET", "/users/{id}"),
        r("lit-lit", "GET", "/users/me"),
        r("param-lit", "GET", "/{a}/settings"),
        r("longer", "GET", "/users/{id}/orders"),
        r("root", "GET", "/"),
        r("post", "POST", "/users/{id}"),
        r("encoded", "GET", "/files/a b"),
    ]
    .concat();
    PolicySet::from_sources(&[("r.toml", &text)]).unwrap()
}

// The tests, by what they cover (after the helpers: a macro is seen only
// below its definition).
mod errors;
mod reading;
mod routing;
