//! docs/openapi.yaml and the router agree: every served route is documented
//! and every documented route is served.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use std::collections::BTreeSet;

/// Reads `(METHOD, path)` pairs from the `paths:` section. The document keeps
/// paths at two spaces of indent and methods at four, which this relies on.
fn documented() -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.yaml"))
        .expect("docs/openapi.yaml is readable");
    let mut out = BTreeSet::new();
    let mut in_paths = false;
    let mut current: Option<String> = None;
    for line in text.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            in_paths = line.trim_end() == "paths:";
            continue;
        }
        if !in_paths {
            continue;
        }
        if let Some(p) = line.strip_prefix("  /") {
            current = Some(format!("/{}", p.trim_end().trim_end_matches(':')));
        } else if let Some(m) = line.strip_prefix("    ") {
            let m = m.trim_end().trim_end_matches(':');
            if ["get", "post", "put", "delete", "patch"].contains(&m) {
                let path = current.clone().expect("a method under a path");
                out.insert((m.to_uppercase(), path));
            }
        }
    }
    out
}

#[test]
fn every_route_is_documented_and_the_reverse() {
    let served: BTreeSet<(String, String)> = verdict::api::route_table()
        .into_iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    let documented = documented();
    assert!(!served.is_empty());
    let missing: Vec<_> = served.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "served but not in docs/openapi.yaml: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "in docs/openapi.yaml but not served: {extra:?}"
    );
}
