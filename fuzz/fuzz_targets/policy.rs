//! Policy files: arbitrary bytes as one or two policy files, through the TOML
//! parser and the validator. A valid set is then asked to match routes with
//! paths taken from the input. Must never panic; errors must carry 1-based
//! line and column numbers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use verdict::policy::{PolicyError, PolicySet};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // A NUL splits the input into two files, so cross-file checks (duplicate
    // actions, overlapping routes) get exercised too.
    let files: Vec<(&str, &str)> = match text.split_once('\0') {
        Some((a, b)) => vec![("a.toml", a), ("b.toml", b)],
        None => vec![("a.toml", text)],
    };
    match PolicySet::from_sources(&files) {
        Ok(set) => {
            for line in text.lines().take(8) {
                for method in ["GET", "POST", "DELETE"] {
                    let _ = set.match_route(method, line);
                }
            }
            for route in &set.routes {
                let _ = set.match_route("POST", &route.name);
            }
        }
        Err(errors) => {
            assert!(!errors.is_empty(), "an error result with no errors");
            for e in errors {
                if let PolicyError::Invalid { line, col, .. } = &e {
                    assert!(*line >= 1 && *col >= 1, "0-based position in {e}");
                }
                let _ = e.to_string();
            }
        }
    }
});
