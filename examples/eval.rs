//! Measures the engine on labelled public data (see docs/accuracy.md).
//!
//! ```text
//! cargo run --release --example eval -- wice PATH [--min-coverage X] [--review-floor Y]
//! cargo run --release --example eval -- ragtruth PATH --ids even|odd|all [--min-coverage X]
//! cargo run --release --example eval -- blind PATH [PATH ...]
//! ```
//!
//! WiCE: each claim is checked against one source whose text is the evidence
//! sentences joined by newlines; cited offsets are mapped back to sentence
//! indices to score citation recall against `supporting_sentences`.
//! RAGTruth QA: a response is flagged when any claim extracted from it is not
//! supported by the passages; scored against "has any hallucination label".
//! Blind batches (`tests/data/blind/*.jsonl`, cases written by authors who
//! never saw the code): each claim against its one evidence text, counted by
//! label (`supported`, `contradicted`, `partial`) and status.
//! Thresholds are chosen on WiCE dev and RAGTruth even ids only.

// A harness reads as one run, top to bottom; the 100-line limit is for src/.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::Value;
use verdict::engine::{extract_claims, verify, Claim, ClaimStatus, Params, Source};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: eval wice|ragtruth PATH [--ids even|odd|all] [--min-coverage X] [--review-floor Y] [--sweep]");
        std::process::exit(2);
    }
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let mut params = Params::default();
    if let Some(v) = flag("--min-coverage").and_then(|v| v.parse().ok()) {
        params.min_coverage = v;
    }
    if let Some(v) = flag("--review-floor").and_then(|v| v.parse().ok()) {
        params.review_floor = v;
    }
    let sweep = args.iter().any(|a| a == "--sweep");
    if args[0] == "blind" {
        let paths: Vec<&String> = args[1..].iter().filter(|a| !a.starts_with("--")).collect();
        for path in paths {
            blind(path, &params);
        }
        return;
    }
    let text = match std::fs::read_to_string(&args[1]) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot read {}: {e}", args[1]);
            std::process::exit(2);
        }
    };
    let rows: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    match args[0].as_str() {
        "wice" => wice(&rows, params, sweep),
        "ragtruth" => ragtruth(
            &rows,
            params,
            flag("--ids").as_deref().unwrap_or("all"),
            sweep,
        ),
        other => {
            eprintln!("unknown dataset {other}");
            std::process::exit(2);
        }
    }
}

/// One blind batch: for each label, how many claims came out with each
/// status; with `EVAL_DUMP=1`, every case whose status disagrees with its
/// label.
fn blind(path: &str, params: &Params) {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot read {path}: {e}");
            std::process::exit(2);
        }
    };
    let dump = std::env::var("EVAL_DUMP").is_ok();
    let mut counts: BTreeMap<(String, &'static str), usize> = BTreeMap::new();
    let mut total: BTreeMap<String, usize> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(row) = serde_json::from_str::<Value>(line) else {
            eprintln!("{path}: a line that is not JSON");
            std::process::exit(2);
        };
        // The adversarial corpus has the same shape but for `expect` (with
        // `not_supported` for a silent source) and a list of evidence texts,
        // one source each.
        let label = match row["label"].as_str().or(row["expect"].as_str()) {
            Some("not_supported") => "partial",
            other => other.unwrap_or(""),
        }
        .to_string();
        let claims = [Claim {
            id: "c1".into(),
            text: row["claim"].as_str().unwrap_or("").to_string(),
            citations: vec![],
        }];
        let sources: Vec<Source> = match &row["evidence"] {
            Value::Array(texts) => texts
                .iter()
                .enumerate()
                .map(|(i, t)| Source {
                    id: format!("e{}", i + 1),
                    text: Some(t.as_str().unwrap_or("").to_string()),
                })
                .collect(),
            other => vec![Source {
                id: "evidence".into(),
                text: Some(other.as_str().unwrap_or("").to_string()),
            }],
        };
        let Some(check) = verify(&claims, &sources, params).into_iter().next() else {
            continue;
        };
        let status = check.status.as_str();
        *counts.entry((label.clone(), status)).or_default() += 1;
        *total.entry(label.clone()).or_default() += 1;
        let wrong = match label.as_str() {
            "supported" => status != "supported",
            _ => status == "supported",
        };
        if dump && (wrong || std::env::var("EVAL_DUMP").as_deref() == Ok("all")) {
            println!(
                "--- {} [{label}] {status} cov {} {:?}\n  claim: {}\n  evidence: {}",
                row["id"].as_str().unwrap_or("?"),
                check.coverage,
                check.reasons.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
                check.claim_text,
                row["evidence"]
            );
            for c in &check.conflicts {
                println!(
                    "  conflict {}: claim {:?} vs evidence {:?}",
                    c.reason.as_str(),
                    c.claim_quote,
                    c.evidence_quote
                );
            }
            if !check.unaligned.is_empty() {
                let words: Vec<&str> = check.unaligned.iter().map(|s| s.text.as_str()).collect();
                println!("  unaligned: {words:?}");
            }
        }
    }
    let get = |l: &str, s: &'static str| counts.get(&(l.to_string(), s)).copied().unwrap_or(0);
    println!("{path}: {} cases", total.values().sum::<usize>());
    for label in ["contradicted", "partial", "supported"] {
        println!(
            "  {label:<13} {:>3}: supported {:>3}, ambiguous {:>3}, unsupported {:>3}",
            total.get(label).copied().unwrap_or(0),
            get(label, "supported"),
            get(label, "ambiguous"),
            get(label, "unsupported"),
        );
    }
}

struct WiceItem {
    gold: String,
    coverage: f64,
    status: ClaimStatus,
    cited: Vec<usize>,
    contradiction: bool,
    reasons: Vec<&'static str>,
    gold_sets: Vec<Vec<usize>>,
}

fn wice(rows: &[Value], params: Params, sweep: bool) {
    let start = Instant::now();
    let mut items = Vec::new();
    for row in rows {
        let gold = row["label"].as_str().unwrap_or("").to_string();
        let claim = row["claim"].as_str().unwrap_or("").to_string();
        let sentences: Vec<&str> = row["evidence"]
            .as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap_or("")).collect())
            .unwrap_or_default();
        // One source: sentences joined by '\n'; line starts in code points.
        let mut joined = String::new();
        let mut line_starts = Vec::new();
        let mut cp = 0usize;
        for s in &sentences {
            line_starts.push(cp);
            let s = s.replace('\n', " ");
            cp += s.chars().count() + 1;
            joined.push_str(&s);
            joined.push('\n');
        }
        let gold_sets: Vec<Vec<usize>> = row["supporting_sentences"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|set| {
                        set.as_array()
                            .map(|s| {
                                s.iter()
                                    .filter_map(|x| x.as_u64())
                                    .map(|x| x as usize)
                                    .collect()
                            })
                            .unwrap_or_default()
                    })
                    .collect()
            })
            .unwrap_or_default();
        let sources = [Source {
            id: "evidence".into(),
            text: Some(joined),
        }];
        let claims = [Claim {
            id: "c1".into(),
            text: claim,
            citations: vec![],
        }];
        let checks = verify(&claims, &sources, &params);
        let Some(check) = checks.into_iter().next() else {
            continue;
        };
        let mut cited = Vec::new();
        for c in &check.citations {
            let first = line_starts
                .partition_point(|&s| s <= c.start)
                .saturating_sub(1);
            let last = line_starts
                .partition_point(|&s| s < c.end)
                .saturating_sub(1);
            cited.extend(first..=last);
        }
        if std::env::var("EVAL_DUMP").is_ok_and(|v| v == gold || v == "all") {
            println!(
                "--- [{gold}] {} cov {} {:?}\n  claim: {}",
                check.status.as_str(),
                check.coverage,
                check.reasons.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
                check.claim_text
            );
            for c in &check.citations {
                println!("  cite: {}", c.quote.chars().take(300).collect::<String>());
            }
            if check.citations.is_empty() {
                if let Some(e) = check.evidence.first() {
                    println!("  ev: {}", e.snippet.chars().take(300).collect::<String>());
                }
            }
        }
        let contradiction = check.reasons.iter().any(|r| r.is_contradiction());
        let reasons = check.reasons.iter().map(|r| r.as_str()).collect();
        items.push(WiceItem {
            gold,
            coverage: check.coverage,
            status: check.status,
            cited,
            contradiction,
            reasons,
            gold_sets,
        });
    }
    let elapsed = start.elapsed();
    report_wice(&items, params);
    println!(
        "time: {:.1} ms total, {:.1} µs per claim",
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() * 1e6 / items.len().max(1) as f64
    );
    if sweep {
        let mut rc: BTreeMap<(String, &str), usize> = BTreeMap::new();
        for it in &items {
            for r in &it.reasons {
                *rc.entry((it.gold.clone(), r)).or_default() += 1;
            }
        }
        for ((g, r), n) in &rc {
            println!("  reason {g:<20} {r:<20} {n}");
        }
        println!("\nsweep of min_coverage (binary BAcc, statuses recomputed from coverage; contradictions stay unsupported):");
        for k in 50..=100 {
            let t = f64::from(k) / 100.0;
            let (mut tp, mut fn_, mut tn, mut fp) = (0, 0, 0, 0);
            for it in &items {
                let pred = !it.contradiction && it.coverage >= t;
                match (it.gold == "supported", pred) {
                    (true, true) => tp += 1,
                    (true, false) => fn_ += 1,
                    (false, false) => tn += 1,
                    (false, true) => fp += 1,
                }
            }
            let bacc =
                0.5 * (tp as f64 / (tp + fn_).max(1) as f64 + tn as f64 / (tn + fp).max(1) as f64);
            let tpr = tp as f64 / (tp + fn_).max(1) as f64;
            let fpr = fp as f64 / (tn + fp).max(1) as f64;
            println!("  {t:.2}: bacc {bacc:.4}  tpr {tpr:.3}  fpr {fpr:.3}");
        }
    }
}

fn report_wice(items: &[WiceItem], params: Params) {
    let (mut tp, mut fn_, mut tn, mut fp) = (0, 0, 0, 0);
    let mut confusion: BTreeMap<(String, &str), usize> = BTreeMap::new();
    let mut recall_sum = 0.0;
    let mut recall_n = 0;
    for it in items {
        let pred = it.status == ClaimStatus::Supported;
        let gold = it.gold == "supported";
        match (gold, pred) {
            (true, true) => tp += 1,
            (true, false) => fn_ += 1,
            (false, false) => tn += 1,
            (false, true) => fp += 1,
        }
        *confusion
            .entry((it.gold.clone(), it.status.as_str()))
            .or_default() += 1;
        if gold {
            recall_n += 1;
            let best = it
                .gold_sets
                .iter()
                .filter(|s| !s.is_empty())
                .map(|s| s.iter().filter(|i| it.cited.contains(i)).count() as f64 / s.len() as f64)
                .fold(0.0, f64::max);
            recall_sum += best;
        }
    }
    let tpr = tp as f64 / (tp + fn_).max(1) as f64;
    let tnr = tn as f64 / (tn + fp).max(1) as f64;
    println!(
        "WiCE claims: {} (min_coverage {}, review_floor {})",
        items.len(),
        params.min_coverage,
        params.review_floor
    );
    println!("binary (supported vs not): balanced accuracy {:.4} (TPR {:.4}, TNR {:.4}; tp {tp} fn {fn_} tn {tn} fp {fp})", 0.5 * (tpr + tnr), tpr, tnr);
    println!("3-way confusion (rows gold, columns engine):");
    println!(
        "  {:<22} {:>10} {:>10} {:>12}",
        "", "supported", "ambiguous", "unsupported"
    );
    for g in ["supported", "partially_supported", "not_supported"] {
        let c = |s: &str| confusion.get(&(g.to_string(), s)).copied().unwrap_or(0);
        println!(
            "  {:<22} {:>10} {:>10} {:>12}",
            g,
            c("supported"),
            c("ambiguous"),
            c("unsupported")
        );
    }
    println!(
        "citation recall (gold-supported claims, best gold set, cited sentences): {:.4} over {recall_n} claims",
        recall_sum / recall_n.max(1) as f64
    );
}

fn ragtruth(rows: &[Value], params: Params, ids: &str, sweep: bool) {
    let start = Instant::now();
    let mut results: Vec<(bool, f64, bool)> = Vec::new(); // (gold hallucinated, min coverage, flagged)
    let mut n_claims = 0usize;
    for row in rows {
        let sid = row["source_id"]
            .as_u64()
            .or_else(|| row["source_id"].as_str().and_then(|s| s.parse().ok()))
            .unwrap_or(0);
        let keep = match ids {
            "even" => sid % 2 == 0,
            "odd" => sid % 2 == 1,
            _ => true,
        };
        if !keep {
            continue;
        }
        let passages = row["source"]["passages"].as_str().unwrap_or("").to_string();
        let sources = [Source {
            id: "passages".into(),
            text: Some(passages),
        }];
        for resp in row["responses"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            let answer = resp["response"].as_str().unwrap_or("");
            let gold = resp["labels"].as_array().is_some_and(|l| !l.is_empty());
            let claims = extract_claims(answer, &sources);
            n_claims += claims.len();
            let checks = verify(&claims, &sources, &params);
            let flagged = checks.iter().any(|c| c.status != ClaimStatus::Supported);
            if let Ok(v) = std::env::var("EVAL_DUMP") {
                if flagged && (v == "fp" && !gold || v == "fn" && gold || v == "all") {
                    println!("=== gold {gold} labels {}", resp["labels"]);
                    for c in checks
                        .iter()
                        .filter(|c| c.status != ClaimStatus::Supported || v == "fn")
                    {
                        println!(
                            "  [{} {} {:?}] {}",
                            c.status.as_str(),
                            c.coverage,
                            c.reasons.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
                            c.claim_text
                        );
                        for k in &c.conflicts {
                            println!(
                                "     conflict: claim '{}' / evidence '{}'",
                                k.claim_quote, k.evidence_quote
                            );
                        }
                        if let Some(e) = c.evidence.first() {
                            println!(
                                "     ev: {}",
                                e.snippet.chars().take(250).collect::<String>()
                            );
                        }
                    }
                }
            }
            let hard = checks
                .iter()
                .any(|c| c.reasons.iter().any(|r| r.is_contradiction()));
            let minc = checks
                .iter()
                .map(|c| {
                    if c.reasons.iter().any(|r| r.is_contradiction()) {
                        0.0
                    } else {
                        c.coverage
                    }
                })
                .fold(1.0, f64::min);
            let _ = hard;
            results.push((gold, minc, flagged));
        }
    }
    let elapsed = start.elapsed();
    let prf = |flags: &dyn Fn(&(bool, f64, bool)) -> bool| {
        let (mut tp, mut fp, mut fn_) = (0, 0, 0);
        for r in &results {
            match (r.0, flags(r)) {
                (true, true) => tp += 1,
                (false, true) => fp += 1,
                (true, false) => fn_ += 1,
                _ => {}
            }
        }
        let p = tp as f64 / (tp + fp).max(1) as f64;
        let r = tp as f64 / (tp + fn_).max(1) as f64;
        let f = if p + r > 0.0 {
            2.0 * p * r / (p + r)
        } else {
            0.0
        };
        (p, r, f, tp, fp, fn_)
    };
    let gold_pos = results.iter().filter(|r| r.0).count();
    println!("RAGTruth QA ({ids} source ids): {} responses, {gold_pos} with a hallucination label, {n_claims} claims (min_coverage {})", results.len(), params.min_coverage);
    let (p, r, f, tp, fp, fn_) = prf(&|x| x.2);
    println!("flag = any claim not supported: precision {p:.4} recall {r:.4} F1 {f:.4} (tp {tp} fp {fp} fn {fn_})");
    println!("time: {:.1} ms total", elapsed.as_secs_f64() * 1e3);
    if sweep {
        for k in 30..=100 {
            let t = f64::from(k) / 100.0;
            let (p, r, f, ..) = prf(&|x| x.1 < t);
            println!("  {t:.2}: P {p:.4} R {r:.4} F1 {f:.4}");
        }
    }
}
