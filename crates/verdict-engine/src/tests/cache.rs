//! Output oracle for the parse cache (`verify::cache`): over the
//! repository's test cases (tests/data/*.jsonl and tests/data/blind/*.jsonl),
//! every `verify` output, its summary and its decision are the same bytes
//! with the cache off, cold, warm, and in a shuffled order with repeats and
//! each text read in more than one date order.

use super::*;
use crate::verify::cache_hooks as hooks;

const FILES: [&str; 9] = [
    include_str!("../../../../tests/data/adversarial.jsonl"),
    include_str!("../../../../tests/data/blind/b1.jsonl"),
    include_str!("../../../../tests/data/blind/b2.jsonl"),
    include_str!("../../../../tests/data/blind/b3.jsonl"),
    include_str!("../../../../tests/data/blind/b4.jsonl"),
    include_str!("../../../../tests/data/blind/b5.jsonl"),
    include_str!("../../../../tests/data/blind/b6.jsonl"),
    include_str!("../../../../tests/data/blind/b7.jsonl"),
    include_str!("../../../../tests/data/blind/b8.jsonl"),
];

/// The part of JSON the case files use.
enum Json {
    Str(String),
    List(Vec<Json>),
    Obj(Vec<(String, Json)>),
    Other,
}

/// A reader of one JSON value, enough for the case files.
struct Reader<'a> {
    s: &'a [u8],
    i: usize,
}

impl Reader<'_> {
    fn peek(&mut self) -> Option<u8> {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
        self.s.get(self.i).copied()
    }

    fn value(&mut self) -> Json {
        match self.peek() {
            Some(b'"') => Json::Str(self.string()),
            Some(b'[') => {
                self.i += 1;
                let mut out = Vec::new();
                while self.peek() != Some(b']') {
                    out.push(self.value());
                    if self.peek() == Some(b',') {
                        self.i += 1;
                    }
                }
                self.i += 1;
                Json::List(out)
            }
            Some(b'{') => {
                self.i += 1;
                let mut out = Vec::new();
                while self.peek() != Some(b'}') {
                    let key = self.string();
                    assert_eq!(self.peek(), Some(b':'));
                    self.i += 1;
                    out.push((key, self.value()));
                    if self.peek() == Some(b',') {
                        self.i += 1;
                    }
                }
                self.i += 1;
                Json::Obj(out)
            }
            _ => {
                while !matches!(self.s.get(self.i), None | Some(b',' | b']' | b'}')) {
                    self.i += 1;
                }
                Json::Other
            }
        }
    }

    fn hex4(&mut self) -> u32 {
        let h = std::str::from_utf8(&self.s[self.i..self.i + 4]).expect("hex digits");
        self.i += 4;
        u32::from_str_radix(h, 16).expect("hex digits")
    }

    fn string(&mut self) -> String {
        assert_eq!(self.peek(), Some(b'"'));
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let b = self.s[self.i];
            self.i += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let e = self.s[self.i];
                    self.i += 1;
                    let c = match e {
                        b'n' => '\n',
                        b't' => '\t',
                        b'r' => '\r',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'u' => {
                            let mut u = self.hex4();
                            if (0xD800..0xDC00).contains(&u) {
                                self.i += 2; // the low surrogate's `\u`
                                u = 0x10000 + ((u - 0xD800) << 10) + (self.hex4() - 0xDC00);
                            }
                            char::from_u32(u).expect("a scalar value")
                        }
                        other => char::from(other),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                other => out.push(other),
            }
        }
        String::from_utf8(out).expect("UTF-8")
    }
}

/// Every case: (claim, evidence texts).
fn cases() -> Vec<Vec<(String, Vec<String>)>> {
    FILES
        .iter()
        .map(|file| {
            file.lines()
                .filter(|l| !l.trim().is_empty())
                .map(|line| {
                    let Json::Obj(fields) = (Reader {
                        s: line.as_bytes(),
                        i: 0,
                    })
                    .value() else {
                        panic!("a case is an object: {line}");
                    };
                    let mut claim = String::new();
                    let mut evidence = Vec::new();
                    for (key, value) in fields {
                        match (key.as_str(), value) {
                            ("claim", Json::Str(s)) => claim = s,
                            ("evidence", Json::Str(s)) => evidence.push(s),
                            ("evidence", Json::List(items)) => {
                                evidence.extend(items.into_iter().filter_map(|j| match j {
                                    Json::Str(s) => Some(s),
                                    _ => None,
                                }));
                            }
                            _ => {}
                        }
                    }
                    (claim, evidence)
                })
                .collect()
        })
        .collect()
}

/// One `verify` call.
struct Call {
    claims: Vec<Claim>,
    sources: Vec<Source>,
    params: Params,
}

const ORDERS: [DateOrder; 3] = [DateOrder::Ambiguous, DateOrder::Mdy, DateOrder::Dmy];

/// One call per case, and per run of six cases of a file one call with all
/// their claims and sources (one of them twice, under another id, and one
/// source unavailable), in two date orders.
fn calls() -> Vec<Call> {
    let mut out = Vec::new();
    for (f, file) in cases().iter().enumerate() {
        for (i, (c, ev)) in file.iter().enumerate() {
            let sources = ev
                .iter()
                .enumerate()
                .map(|(j, t)| src(&format!("s{j}"), t))
                .collect();
            out.push(Call {
                claims: vec![claim("c1", c)],
                sources,
                params: Params {
                    date_order: ORDERS[(f + i) % 3],
                    ..Params::default()
                },
            });
        }
        for (g, group) in file.chunks(6).enumerate() {
            let claims: Vec<Claim> = (0..)
                .zip(group)
                .map(|(k, (c, _))| claim(&format!("c{k}"), c))
                .collect();
            let mut sources: Vec<Source> = (0..)
                .zip(group)
                .flat_map(|(k, (_, ev))| {
                    ev.iter()
                        .enumerate()
                        .map(move |(j, t)| src(&format!("g{k}-s{j}"), t))
                })
                .collect();
            if let Some(first) = sources.first().cloned() {
                sources.push(Source {
                    id: "z-again".into(),
                    ..first
                });
            }
            sources.push(Source {
                id: "down".into(),
                text: None,
            });
            for order in [ORDERS[g % 3], ORDERS[(g + 1) % 3]] {
                out.push(Call {
                    claims: claims.clone(),
                    sources: sources.clone(),
                    params: Params {
                        date_order: order,
                        ..Params::default()
                    },
                });
            }
        }
    }
    out
}

/// Everything a call gives out, as text: the checks, their summary and
/// the decision under the default requirements.
fn output(call: &Call) -> String {
    let checks = verify(&call.claims, &call.sources, &call.params);
    let summary = summarize(&checks, !call.sources.is_empty());
    let requirements = decide::effective(None, &decide::Requested::default());
    let decision = decide::decide(&decide::Facts {
        requirements: &requirements,
        rule_hits: &[],
        checks: &checks,
        claims_without_citations: call.claims.len(),
        unavailable_sources: 0,
        untrusted_sources: 0,
        param_mismatches: 0,
        unbound_params: 0,
        unknown_action: None,
    });
    format!("{checks:?}\n{summary:?}\n{decision:?}")
}

/// A permutation of `0..n` from a fixed seed (a linear congruential
/// generator driving Fisher-Yates).
fn shuffled(n: usize, mut seed: u64) -> Vec<usize> {
    let mut out: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let j = usize::try_from(seed >> 33).expect("31 bits fit") % (i + 1);
        out.swap(i, j);
    }
    out
}

#[test]
fn outputs_are_the_same_with_the_cache_off_cold_warm_and_shuffled() {
    let calls = calls();
    assert!(calls.len() > 1000, "{} calls", calls.len());
    hooks::clear();
    hooks::DISABLED.with(|d| d.set(true));
    let expected: Vec<String> = calls.iter().map(output).collect();
    hooks::DISABLED.with(|d| d.set(false));
    let hits = hooks::hits();
    let check = |k: usize, run: &str| {
        assert!(
            output(&calls[k]) == expected[k],
            "call {k} differs ({run} cache)"
        );
    };
    for k in 0..calls.len() {
        check(k, "cold");
    }
    let cold_hits = hooks::hits() - hits;
    for k in 0..calls.len() {
        check(k, "warm");
    }
    // Each call, then one a few places back, which the cache still holds.
    let order = shuffled(calls.len(), 0x5eed);
    for (i, &k) in order.iter().enumerate() {
        check(k, "shuffled");
        if let Some(&back) = i.checked_sub(3).and_then(|j| order.get(j)) {
            check(back, "shuffled, repeated");
        }
    }
    let all_hits = hooks::hits() - hits;
    // Cases share texts (the batches repeat every case's sources), so even
    // the cold run hits; the repeats in the shuffled run all do.
    assert!(cold_hits > calls.len() / 2, "{cold_hits} hits cold");
    assert!(all_hits > cold_hits + calls.len(), "{all_hits} hits in all");
    hooks::clear();
}
