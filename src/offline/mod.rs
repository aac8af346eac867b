//! Policy test cases: `verdict test` and `verdict explain`; and
//! `verdict replay`, which decides recorded traffic the same way.
//!
//! A policy change is a change to a gate, and `verdict check` only says the
//! files are well formed, not that refunds above 500 still go to review. So
//! policies ship with test files (`*.test.toml` beside them; the loader and
//! `verdict check` skip those), each a list of cases: a request, as the API
//! or the proxy would get it, and the decision it must get. `verdict test`
//! decides every case exactly as a running sidecar would: an authorize case
//! is read by the API's own reader (`api::authorize::AuthorizeRequest`), an
//! HTTP case by the proxy's (`proxy::read`: the refusals, the route, the
//! body checks, the extractors), and both are decided by the one decision
//! path, [`crate::decide::authorize()`], on the policy set loaded from the
//! directory. It decides offline: the handles it passes record to
//! [`crate::decide::Recorder::Discard`], since nothing is enforced and
//! there is no log to write; a server never gets those handles (see
//! [`crate::decide::recorder`]). `verdict explain` runs one case and prints
//! the decision's trace ([`crate::decide::explain`]).
//!
//! This is a door like the API and the proxy: it reads requests with their
//! readers and decides with `decide`, and it never calls their handlers or
//! touches a running server's state (`scripts/check-layers.sh`).
//!
//! - [`file`](mod@file): the test file format and its `file:line:col` errors.
//! - [`run`]: one case, decided, and compared with what it expects.
//! - [`report`]: the text and JSON reports, and explanations.
//! - [`replay`]: `verdict replay`, a draft set decided on captured traffic.

pub mod file;
pub mod replay;
pub mod report;
pub mod run;

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::policy::{is_test_file, load_dir, PolicySet, TEST_FILE_SUFFIX};
use file::{Case, FileError};
use report::Ran;
use run::Env;

/// Exit code: every case passed (or the explained case holds its `expect`,
/// or has none).
pub const EXIT_OK: u8 = 0;
/// Exit code: a case did not decide what it expects.
pub const EXIT_FAILED: u8 = 1;
/// Exit code: unusable input (policies that do not load, a malformed test
/// file, no test files).
pub const EXIT_UNUSABLE: u8 = 2;

/// What a command prints and its exit code.
#[derive(Debug, Clone, Default)]
pub struct Output {
    pub code: u8,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    fn unusable(errors: &[String], json: bool) -> Output {
        let mut stderr = String::new();
        for e in errors {
            stderr.push_str(e);
            stderr.push('\n');
        }
        Output {
            code: EXIT_UNUSABLE,
            stdout: if json {
                format!("{}\n", serde_json::json!({"ok": false, "errors": errors}))
            } else {
                String::new()
            },
            stderr,
        }
    }
}

/// The policy test files in `dir`, sorted by name.
pub fn test_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(is_test_file))
        .map(|e| e.path())
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
        .collect();
    files.sort();
    Ok(files)
}

/// Loads the policy set, or its errors as lines.
fn load_set(dir: &Path) -> Result<PolicySet, Vec<String>> {
    load_dir(dir).map_err(|errors| {
        let mut lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        lines.push(format!(
            "the policies in {} do not load (see verdict check); no case was run",
            dir.display()
        ));
        lines
    })
}

fn read_cases(path: &Path) -> Result<Vec<Case>, Vec<FileError>> {
    let shown = path.display().to_string();
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(&shown)
        .to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![FileError {
            file: shown.clone(),
            line: 1,
            col: 1,
            message: e.to_string(),
        }]
    })?;
    file::parse(&shown, &name, &text)
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// `verdict test`: runs every case of every test file in `dir` against the
/// policies in `dir`.
pub fn test_dir(dir: &Path, config: Config, json: bool) -> Output {
    let set = match load_set(dir) {
        Ok(s) => s,
        Err(lines) => return Output::unusable(&lines, json),
    };
    let paths = match test_files(dir) {
        Ok(p) if p.is_empty() => {
            return Output::unusable(
                &[format!(
                    "{}: no test files (*{TEST_FILE_SUFFIX}) to run",
                    dir.display()
                )],
                json,
            )
        }
        Ok(p) => p,
        Err(e) => return Output::unusable(&[e], json),
    };
    let mut cases = Vec::new();
    let mut errors = Vec::new();
    for p in &paths {
        match read_cases(p) {
            Ok(c) => cases.extend(c),
            Err(e) => errors.extend(e),
        }
    }
    for c in cases.iter().filter(|c| c.expect.is_none()) {
        errors.push(FileError {
            file: c.file.clone(),
            line: c.line,
            col: c.col,
            message: format!(
                "case {:?} has no expect = {{ decision = ... }}: verdict test needs what each case must decide",
                c.name
            ),
        });
    }
    if !errors.is_empty() {
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        return Output::unusable(&lines, json);
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return Output::unusable(&[e], json),
    };
    let revision = set.revision.clone();
    let env = Env::new(set, config);
    let ran: Vec<Ran<'_>> = rt.block_on(async {
        let mut out = Vec::with_capacity(cases.len());
        for case in &cases {
            let actual = run::run(&env, case, false).await;
            let diffs = case
                .expect
                .as_ref()
                .map(|e| run::compare(e, &actual))
                .unwrap_or_default();
            out.push(Ran {
                case,
                actual,
                diffs,
            });
        }
        out
    });
    let failed = ran.iter().any(|r| !r.diffs.is_empty());
    let stdout = if json {
        let files: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        format!(
            "{}\n",
            report::json(&ran, &files, &dir.display().to_string(), &revision)
        )
    } else {
        report::text(&ran, paths.len(), &revision)
    };
    Output {
        code: if failed { EXIT_FAILED } else { EXIT_OK },
        stdout,
        stderr: String::new(),
    }
}

/// `verdict explain FILE`: one case (a test file's only case, or the one
/// named `case`), or an authorize body (`*.json`), decided against the
/// policies in `dir`, with its trace.
pub fn explain_file(
    path: &Path,
    case_name: Option<&str>,
    dir: &Path,
    config: Config,
    json: bool,
) -> Output {
    let set = match load_set(dir) {
        Ok(s) => s,
        Err(lines) => return Output::unusable(&lines, json),
    };
    let shown = path.display().to_string();
    let is_json = path.extension().is_some_and(|e| e == "json");
    let cases = if is_json {
        match std::fs::read_to_string(path) {
            Ok(text) => file::authorize_json(&shown, &text).map(|c| vec![c]),
            Err(e) => Err(vec![FileError {
                file: shown.clone(),
                line: 1,
                col: 1,
                message: e.to_string(),
            }]),
        }
    } else {
        read_cases(path)
    };
    let cases = match cases {
        Ok(c) => c,
        Err(errors) => {
            let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return Output::unusable(&lines, json);
        }
    };
    let case = match (case_name, cases.len()) {
        (Some(name), _) => match cases.iter().find(|c| c.name == name) {
            Some(c) => c,
            None => {
                let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
                return Output::unusable(
                    &[format!("{shown}: no case {name:?} (cases: {names:?})")],
                    json,
                );
            }
        },
        (None, 1) => &cases[0],
        (None, n) => {
            let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
            return Output::unusable(
                &[format!(
                    "{shown}: {n} cases; pick one with --case NAME (cases: {names:?})"
                )],
                json,
            );
        }
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return Output::unusable(&[e], json),
    };
    let env = Env::new(set, config);
    let actual = rt.block_on(run::run(&env, case, true));
    let diffs = case.expect.as_ref().map(|e| run::compare(e, &actual));
    let stdout = if json {
        let v = serde_json::json!({
            "case": {"file": case.file, "name": case.name, "line": case.line},
            "policy_revision": env.set.revision,
            "result": actual,
            "explain": actual.explanation,
            "expect_ok": diffs.as_ref().map(Vec::is_empty),
            "diffs": diffs,
        });
        format!("{v}\n")
    } else {
        report::explain_text(case, &actual, diffs.as_deref())
    };
    // As `verdict test`: a case whose `expect` does not hold fails.
    let failed = diffs.as_ref().is_some_and(|d| !d.is_empty());
    Output {
        code: if failed { EXIT_FAILED } else { EXIT_OK },
        stdout,
        stderr: String::new(),
    }
}
