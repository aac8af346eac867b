//! `verdict replay`: what a draft policy set would have decided on the
//! traffic a running sidecar already decided.
//!
//! It reads the data dir's audit log read-only (beside a running server),
//! takes every decision record in the window that names a captured input
//! (`input_hash`), checks the stored input against that hash (a mismatch
//! stops the run: the input is not the one that was decided), and decides
//! it twice, offline, on the one decision path: with the baseline set (the
//! policies the server runs), which must reproduce every decision recorded
//! under the baseline's revision, and with the draft. The report is the
//! flips (recorded decision → draft decision, with example record ids), the
//! decisions the draft makes the same for another reason (a change, as the
//! shadow set counts one, grouped apart from the flips: `decide::shadow::
//! change`), the decisions the draft would newly send to review, the decisions the
//! baseline did not reproduce, and the inputs retention already deleted
//! (missing, never counted as flips).
//!
//! Rows stream from a reader thread through a bounded channel, and the
//! decisions run on every core, so a window of any size runs in bounded
//! memory; progress goes to stderr every two seconds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::run::Env;
use super::{load_set, Output, EXIT_FAILED, EXIT_OK};
use crate::audit::inputs::{self, Row};
use crate::audit::{AuditRecord, RecordKind};
use crate::config::Config;
use crate::decide::{self, capture};

/// How many decisions are in flight at once.
const IN_FLIGHT: usize = 64;
/// Rows the reader thread may run ahead of the deciders.
const READ_AHEAD: usize = 4096;
/// How far before `--since` the window's first leaf is searched: group
/// commits append records a few milliseconds out of stamp order.
const SEARCH_SLACK: Duration = Duration::from_secs(5);
/// Example record ids kept per flip.
const EXAMPLES: usize = 3;

/// What `verdict replay` is asked.
#[derive(Debug, Clone)]
pub struct Args {
    /// The draft policy set.
    pub draft: PathBuf,
    /// The set the server runs: it must reproduce the recorded decisions.
    pub baseline: PathBuf,
    /// The server's data dir (its `verdict.db` is read, never written).
    pub data_dir: PathBuf,
    /// Only decisions stamped within this long before now.
    pub since: Duration,
    /// Only decisions of this proxy route.
    pub route: Option<String>,
    pub json: bool,
}

/// One flip kind: recorded `from`, draft `to`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Flip {
    pub from: String,
    pub to: String,
    pub count: u64,
    pub examples: Vec<String>,
}

/// One reason-only change: the same `decision`, recorded for reason
/// `from`, by the draft for `to`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReasonChange {
    pub decision: String,
    pub from: String,
    pub to: String,
    pub count: u64,
    pub examples: Vec<String>,
}

/// A decision the baseline did not reproduce.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Unreproduced {
    pub record_id: String,
    pub recorded: String,
    pub replayed: String,
}

/// The whole report (`--json` prints it, with `ok`, `draft` and `baseline`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    /// RFC 3339: the window starts here.
    pub since: String,
    /// Decision records in the window (and route): replayed + missing +
    /// not captured.
    pub decisions: u64,
    /// Of those, records that name a captured input that is still stored.
    pub replayed: u64,
    /// Records that name an input retention has deleted.
    pub missing: u64,
    /// Decision records with no captured input (refusals, capture off).
    pub not_captured: u64,
    pub baseline_revision: String,
    /// Replayed decisions recorded under the baseline's revision.
    pub baseline_compared: u64,
    pub baseline_reproduced: u64,
    /// Replayed decisions recorded under another revision (not compared).
    pub other_revisions: u64,
    pub unreproduced: Vec<Unreproduced>,
    pub draft_revision: String,
    pub flips: Vec<Flip>,
    /// Decisions the draft makes the same for another reason.
    #[serde(default)]
    pub reason_changes: Vec<ReasonChange>,
    /// Replayed decisions the draft decides as they were recorded, for the
    /// same reason.
    pub unchanged: u64,
    /// Flips into `needs_review`.
    pub newly_review: u64,
}

/// One captured decision to replay.
struct Job {
    record_id: String,
    recorded: String,
    recorded_reason: String,
    under_baseline: bool,
    request_id: String,
    request_hash: String,
    route: Option<String>,
    input: decide::Input,
}

/// What the reader thread sends.
enum Read {
    Job(Box<Job>),
    Missing,
    NotCaptured,
    /// The stored input does not match its record, or cannot be read.
    Refused(String),
    Failed(String),
}

/// `verdict replay`.
pub fn replay(args: &Args, config: Config) -> Output {
    let draft = match load_set(&args.draft) {
        Ok(s) => s,
        Err(lines) => return Output::unusable(&lines, args.json),
    };
    let baseline = match load_set(&args.baseline) {
        Ok(s) => s,
        Err(lines) => return Output::unusable(&lines, args.json),
    };
    let db = args.data_dir.join("verdict.db");
    let conn = match crate::audit::sqlite::open_reader(&db) {
        Ok(c) => c,
        Err(e) => return Output::unusable(&[format!("{}: {e}", db.display())], args.json),
    };
    let now = time::OffsetDateTime::now_utc();
    // A window longer than the calendar holds means everything.
    let since_at = time::Duration::try_from(args.since)
        .ok()
        .and_then(|d| now.checked_sub(d))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let since = crate::audit::record::format_at(since_at);
    let search_from = crate::audit::record::format_at(
        since_at
            .checked_sub(time::Duration::try_from(SEARCH_SLACK).unwrap_or(time::Duration::ZERO))
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH),
    );
    let (first, total) = match inputs::first_leaf_since(&conn, &search_from)
        .and_then(|f| Ok((f, crate::audit::sqlite::record_count(&conn)?)))
    {
        Ok(v) => v,
        Err(e) => return Output::unusable(&[format!("{}: {e}", db.display())], args.json),
    };
    let mut report = Report {
        since: since.clone(),
        baseline_revision: baseline.revision.clone(),
        draft_revision: draft.revision.clone(),
        ..Report::default()
    };

    let (tx, rx) = tokio::sync::mpsc::channel::<Read>(READ_AHEAD);
    let baseline_revision = baseline.revision.clone();
    let route = args.route.clone();
    let reader = std::thread::spawn(move || {
        let result = inputs::for_each_from(&conn, first, |row| {
            match read_row(&row, &since, route.as_deref(), &baseline_revision) {
                Some(r) => {
                    let stop = matches!(r, Read::Refused(_));
                    tx.blocking_send(r).is_ok() && !stop
                }
                None => true,
            }
        });
        if let Err(e) = result {
            let _ = tx.blocking_send(Read::Failed(e.to_string()));
        }
    });

    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return Output::unusable(&[format!("cannot start the runtime: {e}")], args.json),
    };
    let draft_env = Arc::new(Env::new(draft, config.clone()));
    let baseline_env = Arc::new(Env::new(baseline, config));
    let pending = total.saturating_sub(first);
    let outcome = rt.block_on(decide_all(
        rx,
        draft_env,
        baseline_env,
        &mut report,
        pending,
    ));
    let read = reader.join();
    if let Err(message) = outcome {
        return Output::unusable(&[message], args.json);
    }
    if read.is_err() {
        return Output::unusable(
            &["the log reader failed; the window was not read to its end".to_string()],
            args.json,
        );
    }
    let code = if report.unreproduced.is_empty() {
        EXIT_OK
    } else {
        EXIT_FAILED
    };
    let stdout = if args.json {
        let mut v = serde_json::to_value(&report).unwrap_or_default();
        v["ok"] = serde_json::Value::Bool(code == EXIT_OK);
        v["draft"] = serde_json::json!(args.draft.display().to_string());
        v["baseline"] = serde_json::json!(args.baseline.display().to_string());
        format!("{v}\n")
    } else {
        text(&report, &args.draft, &args.baseline)
    };
    Output {
        code,
        stdout,
        stderr: String::new(),
    }
}

/// What one stored row means for the replay; `None` for rows outside it.
fn read_row(row: &Row, since: &str, route: Option<&str>, baseline: &str) -> Option<Read> {
    let record: AuditRecord = match serde_json::from_str(&row.canonical) {
        Ok(r) => r,
        Err(e) => return Some(Read::Failed(format!("leaf {}: {e}", row.leaf))),
    };
    if record.kind != RecordKind::Decision || record.at.as_str() < since {
        return None;
    }
    if route.is_some() && record.route.as_deref() != route {
        return None;
    }
    let Some(input_hash) = &record.input_hash else {
        return Some(Read::NotCaptured);
    };
    let Some(stored) = &row.input else {
        return Some(Read::Missing);
    };
    let actual = capture::hash(stored);
    if &actual != input_hash {
        return Some(Read::Refused(format!(
            "record {}: the stored input hashes to {actual}, but the record states input_hash {input_hash}; it is not the input that was decided, so nothing was replayed (check the log with verdict audit verify)",
            record.record_id
        )));
    }
    let input = match capture::decode(stored) {
        Ok(i) => i,
        Err(e) => {
            return Some(Read::Refused(format!(
                "record {}: the captured input cannot be read: {e}",
                record.record_id
            )))
        }
    };
    Some(Read::Job(Box::new(Job {
        record_id: record.record_id.to_string(),
        recorded: record.decision.unwrap_or_default(),
        recorded_reason: record.reason.unwrap_or_default(),
        under_baseline: record.policy_revision.as_deref() == Some(baseline),
        request_id: record.request_id.unwrap_or_default(),
        request_hash: record.request_hash.unwrap_or_default(),
        route: record.route,
        input,
    })))
}

/// A decision's outcome and reason as strings, or `error` and why.
async fn decide_one(env: &Env, job: &Job) -> (String, String) {
    let ctx = decide::Ctx {
        // The door is a label of metrics; replay keeps no records.
        source: if job.route.is_some() {
            decide::Source::Proxy
        } else {
            decide::Source::Api
        },
        principal: "replay",
        request_id: &job.request_id,
        request_hash: &job.request_hash,
        route: job.route.as_deref(),
    };
    match decide::authorize(&env.handles(), &env.set, job.input.clone(), &ctx).await {
        Ok(d) => (
            d.decision.outcome.as_str().to_string(),
            d.decision.reason.as_str().to_string(),
        ),
        Err(e) => ("error".to_string(), e.to_string()),
    }
}

/// What one replayed decision came to.
struct Replayed {
    job: Box<Job>,
    /// The draft's outcome and reason.
    draft: (String, String),
    baseline: Option<(String, String)>,
}

async fn decide_all(
    mut rx: tokio::sync::mpsc::Receiver<Read>,
    draft: Arc<Env>,
    baseline: Arc<Env>,
    report: &mut Report,
    pending: u64,
) -> Result<(), String> {
    let mut flips = Tallies::default();
    let mut set = tokio::task::JoinSet::new();
    let started = Instant::now();
    let mut shown = started;
    let mut done = 0u64;
    let mut read_done = false;
    let mut failure = None;
    loop {
        while !read_done && set.len() < IN_FLIGHT {
            match rx.recv().await {
                None => read_done = true,
                Some(Read::Job(job)) => {
                    report.replayed += 1;
                    let (d, b) = (draft.clone(), baseline.clone());
                    set.spawn(async move {
                        let to = decide_one(&d, &job).await;
                        let base = if job.under_baseline {
                            Some(decide_one(&b, &job).await)
                        } else {
                            None
                        };
                        Replayed {
                            job,
                            draft: to,
                            baseline: base,
                        }
                    });
                }
                Some(Read::Missing) => report.missing += 1,
                Some(Read::NotCaptured) => report.not_captured += 1,
                Some(Read::Refused(m)) | Some(Read::Failed(m)) => {
                    failure = Some(m);
                    read_done = true;
                }
            }
        }
        let Some(joined) = set.join_next().await else {
            break;
        };
        let r = joined.map_err(|e| format!("a replay task failed: {e}"))?;
        tally(report, &mut flips, r);
        done += 1;
        if shown.elapsed() >= Duration::from_secs(2) {
            shown = Instant::now();
            eprintln!(
                "replay: {done} of at most {pending} records decided ({:.0}/s)",
                done as f64 / started.elapsed().as_secs_f64().max(1e-9)
            );
        }
    }
    if let Some(m) = failure {
        return Err(m);
    }
    report.decisions = report.replayed + report.missing + report.not_captured;
    report.flips = flips.decisions.into_values().collect();
    report.flips.sort_by_key(|f| std::cmp::Reverse(f.count));
    report.reason_changes = flips.reasons.into_values().collect();
    report
        .reason_changes
        .sort_by_key(|f| std::cmp::Reverse(f.count));
    Ok(())
}

/// Flips and reason-only changes as they are counted.
#[derive(Default)]
struct Tallies {
    decisions: BTreeMap<(String, String), Flip>,
    reasons: BTreeMap<(String, String, String), ReasonChange>,
}

fn tally(report: &mut Report, flips: &mut Tallies, r: Replayed) {
    let job = r.job;
    match r.baseline {
        Some((outcome, reason)) => {
            report.baseline_compared += 1;
            if outcome == job.recorded && reason == job.recorded_reason {
                report.baseline_reproduced += 1;
            } else if report.unreproduced.len() < 100 {
                report.unreproduced.push(Unreproduced {
                    record_id: job.record_id.clone(),
                    recorded: format!("{} ({})", job.recorded, job.recorded_reason),
                    replayed: format!("{outcome} ({reason})"),
                });
            }
        }
        None => report.other_revisions += 1,
    }
    let (to, to_reason) = r.draft;
    let recorded = (job.recorded.as_str(), job.recorded_reason.as_str());
    match decide::shadow::change(recorded, (&to, &to_reason)) {
        decide::shadow::Change::None => {
            report.unchanged += 1;
            return;
        }
        decide::shadow::Change::Reason => {
            let key = (job.recorded.clone(), job.recorded_reason.clone(), to_reason);
            let change = flips
                .reasons
                .entry(key)
                .or_insert_with_key(|k| ReasonChange {
                    decision: k.0.clone(),
                    from: k.1.clone(),
                    to: k.2.clone(),
                    count: 0,
                    examples: Vec::new(),
                });
            change.count += 1;
            if change.examples.len() < EXAMPLES {
                change.examples.push(job.record_id);
            }
            return;
        }
        decide::shadow::Change::Decision => {}
    }
    if to == "needs_review" {
        report.newly_review += 1;
    }
    let flip = flips
        .decisions
        .entry((job.recorded.clone(), to.clone()))
        .or_insert_with(|| Flip {
            from: job.recorded.clone(),
            to,
            count: 0,
            examples: Vec::new(),
        });
    flip.count += 1;
    if flip.examples.len() < EXAMPLES {
        flip.examples.push(job.record_id);
    }
}

fn text(r: &Report, draft: &Path, baseline: &Path) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "replay: {} decision{} since {}: {} replayed, {} missing (inputs deleted by retention), {} not captured",
        r.decisions,
        if r.decisions == 1 { "" } else { "s" },
        r.since,
        r.replayed,
        r.missing,
        r.not_captured
    );
    let _ = writeln!(
        out,
        "baseline {} ({}): reproduced {} of {} decided under it; {} decided under other revisions (not compared)",
        baseline.display(),
        r.baseline_revision,
        r.baseline_reproduced,
        r.baseline_compared,
        r.other_revisions
    );
    for u in &r.unreproduced {
        let _ = writeln!(
            out,
            "  NOT REPRODUCED {}: recorded {}, replayed {}",
            u.record_id, u.recorded, u.replayed
        );
    }
    let flipped: u64 = r.flips.iter().map(|f| f.count).sum();
    let reasons: u64 = r.reason_changes.iter().map(|f| f.count).sum();
    let _ = writeln!(
        out,
        "draft {} ({}): {} unchanged, {} flipped, {} same decision for another reason, {} newly sent to review",
        draft.display(),
        r.draft_revision,
        r.unchanged,
        flipped,
        reasons,
        r.newly_review
    );
    if !r.flips.is_empty() {
        let rows = r.flips.iter().map(|f| {
            let labels = [f.from.as_str(), &f.to];
            (labels, f.count, &f.examples)
        });
        changes_table(&mut out, [("from", 14), ("to", 14)], rows);
    }
    if !r.reason_changes.is_empty() {
        let _ = writeln!(out, "  same decision, another reason:");
        let rows = r.reason_changes.iter().map(|c| {
            let labels = [c.decision.as_str(), &c.from, &c.to];
            (labels, c.count, &c.examples)
        });
        let columns = [("decision", 14), ("from", 22), ("to", 22)];
        changes_table(&mut out, columns, rows);
    }
    out
}

/// A table of changes, indented two spaces: the label columns, each padded
/// to its width, then the count and the example record ids.
fn changes_table<'a, const N: usize>(
    out: &mut String,
    columns: [(&str, usize); N],
    rows: impl Iterator<Item = ([&'a str; N], u64, &'a Vec<String>)>,
) {
    use std::fmt::Write as _;
    let mut line = |labels: [&str; N], count: &dyn std::fmt::Display, examples: &str| {
        out.push(' ');
        for (label, (_, width)) in labels.iter().zip(columns) {
            let _ = write!(out, " {label:<width$}");
        }
        let _ = writeln!(out, " {count:>8}  {examples}");
    };
    line(columns.map(|(head, _)| head), &"count", "examples");
    for (labels, count, examples) in rows {
        line(labels, &count, &examples.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changes_table_pads_its_labels_and_right_aligns_the_count() {
        let mut out = String::new();
        let examples = vec!["r1".to_string(), "r2".to_string()];
        let rows = [(["allow", "deny"], 12, &examples)].into_iter();
        changes_table(&mut out, [("from", 6), ("to", 4)], rows);
        assert_eq!(
            out,
            "  from   to      count  examples\n  allow  deny       12  r1, r2\n"
        );
    }
}
