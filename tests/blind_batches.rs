//! Blind batches (`tests/data/blind/b*.jsonl`): verification cases written
//! by authors who saw only the API's description of `/v2/verify` and a
//! brief, never the engine, its word tables or an earlier batch. Each batch
//! was run on the engine before it joined the repository; docs/accuracy.md
//! records what it found then.
//!
//! Here they are a ratchet, like the adversarial corpus: every case runs
//! through `verdict::engine::verify` at `Params::default()` against its one
//! evidence text. A case is right when a `supported` case comes out
//! `supported` and a `contradicted` or `partial` one does not. The cases the
//! engine still gets wrong are listed in `data/blind/known_wrong.txt`; the
//! test fails when another case goes wrong, and when a listed case comes
//! out right (shrink the list). Run with `-- --nocapture` for the table.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use verdict::engine::{verify, Claim, ClaimStatus, Params, Source};

const BATCHES: &[(&str, &str)] = &[
    ("b1", include_str!("data/blind/b1.jsonl")),
    ("b2", include_str!("data/blind/b2.jsonl")),
    ("b3", include_str!("data/blind/b3.jsonl")),
    ("b4", include_str!("data/blind/b4.jsonl")),
    ("b5", include_str!("data/blind/b5.jsonl")),
    ("b6", include_str!("data/blind/b6.jsonl")),
    ("b7", include_str!("data/blind/b7.jsonl")),
    ("b8", include_str!("data/blind/b8.jsonl")),
    ("b9", include_str!("data/blind/b9.jsonl")),
    ("b10", include_str!("data/blind/b10.jsonl")),
    ("b11", include_str!("data/blind/b11.jsonl")),
    ("b12", include_str!("data/blind/b12.jsonl")),
    ("b13", include_str!("data/blind/b13.jsonl")),
    ("b14", include_str!("data/blind/b14.jsonl")),
    ("b15", include_str!("data/blind/b15.jsonl")),
    ("b16", include_str!("data/blind/b16.jsonl")),
];
const KNOWN_WRONG: &str = include_str!("data/blind/known_wrong.txt");

/// Cases a batch must hold (the brief asks for 60 or more).
const MIN_CASES: usize = 60;

#[derive(Deserialize)]
struct Case {
    id: String,
    claim: String,
    evidence: String,
    label: String,
}

#[test]
fn blind_batches_hold_their_ratchet() {
    let known: BTreeSet<&str> = KNOWN_WRONG
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let mut seen = BTreeSet::new();
    let mut table: BTreeMap<(&str, String), [usize; 3]> = BTreeMap::new();
    let mut regressions = Vec::new();
    let mut fixed = Vec::new();
    for (batch, text) in BATCHES {
        let cases: Vec<Case> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(cases.len() >= MIN_CASES, "{batch}: {} cases", cases.len());
        for c in cases {
            assert!(
                ["supported", "contradicted", "partial"].contains(&c.label.as_str()),
                "{}: label {:?}",
                c.id,
                c.label
            );
            assert!(seen.insert(c.id.clone()), "{}: duplicate id", c.id);
            let claims = [Claim {
                id: "c1".into(),
                text: c.claim.clone(),
                citations: vec![],
            }];
            let sources = [Source {
                id: "evidence".into(),
                text: Some(c.evidence.clone()),
            }];
            let check = verify(&claims, &sources, &Params::default())
                .into_iter()
                .next()
                .unwrap();
            let slot = match check.status {
                ClaimStatus::Supported => 0,
                ClaimStatus::Ambiguous => 1,
                ClaimStatus::Unsupported => 2,
            };
            table.entry((batch, c.label.clone())).or_default()[slot] += 1;
            let right = (c.label == "supported") == (check.status == ClaimStatus::Supported);
            let listed = known.contains(c.id.as_str());
            let line = format!(
                "{} [{}] {} cov {} {:?}: {}",
                c.id,
                c.label,
                check.status.as_str(),
                check.coverage,
                check.reasons.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
                c.claim
            );
            match (right, listed) {
                (false, false) => regressions.push(line),
                (true, true) => fixed.push(line),
                _ => {}
            }
        }
    }
    let stale: Vec<&&str> = known.iter().filter(|id| !seen.contains(**id)).collect();
    assert!(
        stale.is_empty(),
        "known_wrong.txt names unknown ids: {stale:?}"
    );
    println!("batch label         supported ambiguous unsupported");
    for ((batch, label), [s, a, u]) in &table {
        println!("{batch:<5} {label:<13} {s:>9} {a:>9} {u:>11}");
    }
    assert!(
        regressions.is_empty(),
        "cases that went wrong (not in known_wrong.txt):\n{}",
        regressions.join("\n")
    );
    assert!(
        fixed.is_empty(),
        "cases now right: remove them from known_wrong.txt:\n{}",
        fixed.join("\n")
    );
}
