//! The engine on arbitrary text: the sentence splitter, claim extraction from
//! an answer, and verification of claims against sources.
//!
//! Invariants checked, beyond "no panic":
//! - sentence ranges are in order, in bounds and on char boundaries;
//! - every citation's `start..end` (code points) reproduces its quote exactly;
//! - one check per claim, coverage in 0..=1, and the same input gives the
//!   same output.
//!
//! Input layout, split on NUL: claim / answer text, source `s1`, source `s2`,
//! then an optional quote the claim cites from `s1`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use verdict::engine::{self, text, CallerCitation, Claim, Params, Source};

fn code_points(s: &str, start: usize, end: usize) -> String {
    s.chars()
        .skip(start)
        .take(end.saturating_sub(start))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = input.split('\0');
    let claim_text = parts.next().unwrap_or("");
    let s1 = parts.next().unwrap_or("");
    let s2 = parts.next();
    let quote = parts.next();

    for newline_breaks in [false, true] {
        let mut last = 0;
        for (start, end) in text::split_sentences(claim_text, newline_breaks) {
            assert!(
                start <= end && end <= claim_text.len(),
                "range out of bounds"
            );
            assert!(start >= last, "ranges out of order");
            assert!(
                claim_text.get(start..end).is_some(),
                "not on char boundaries"
            );
            last = end;
        }
    }

    let mut sources = vec![Source {
        id: "s1".into(),
        text: Some(s1.to_string()),
    }];
    if let Some(s2) = s2 {
        sources.push(Source {
            id: "s2".into(),
            text: Some(s2.to_string()),
        });
    }
    sources.push(Source {
        id: "gone".into(),
        text: None,
    });

    let mut claims = engine::extract_claims(claim_text, &sources);
    let mut ids: Vec<&str> = claims.iter().map(|c| c.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), claims.len(), "duplicate extracted claim ids");
    claims.push(Claim {
        id: "whole".into(),
        text: claim_text.to_string(),
        citations: Vec::new(),
    });
    if let Some(q) = quote {
        claims.push(Claim {
            id: "quoted".into(),
            text: claim_text.to_string(),
            citations: vec![CallerCitation {
                source_id: "s1".into(),
                quote: Some(q.to_string()),
            }],
        });
    }

    let params = Params {
        evidence_limit: 3,
        ..Params::default()
    };
    let checks = engine::verify(&claims, &sources, &params);
    assert_eq!(checks.len(), claims.len(), "one check per claim");
    for check in &checks {
        assert!(
            (0.0..=1.0).contains(&check.coverage),
            "coverage {} out of range",
            check.coverage
        );
        assert!(check.evidence.len() <= params.evidence_limit);
        for c in &check.citations {
            let src = sources
                .iter()
                .find(|s| s.id == c.source_id)
                .and_then(|s| s.text.as_deref())
                .expect("a citation names an available source");
            assert_eq!(
                code_points(src, c.start, c.end),
                c.quote,
                "citation offsets {}..{} do not reproduce the quote",
                c.start,
                c.end
            );
        }
    }
    let again = engine::verify(&claims, &sources, &params);
    assert_eq!(checks, again, "verify is not deterministic");
    let _ = engine::summarize(&checks, true);
});
