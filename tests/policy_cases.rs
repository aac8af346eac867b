//! `verdict test` and `verdict explain`, run as the real binary: the shipped
//! policies' tests pass, a wrong expectation fails with a diff, a malformed
//! test file is `file:line:col` and exit 2, `--json` parses, and `verdict
//! check` does not read test files as policies.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_verdict");
const POLICIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/policies");

fn verdict(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// A temp policies dir holding the shipped policies (without their tests)
/// and `tests` as `(file name, text)`.
fn dir_with(tests: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(POLICIES).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name.ends_with(".toml") && !name.ends_with(".test.toml") {
            std::fs::copy(&path, dir.path().join(name)).unwrap();
        }
    }
    for (name, text) in tests {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

fn p(dir: &Path) -> &str {
    dir.to_str().unwrap()
}

const OVER_500: &str = r#"
action = { type = "refund.create", params = { order_id = "1002", amount = 750 } }
claims = [{ text = "Order 1002 was charged $750.00.", citations = [{ source_id = "inv" }] }]
sources = [{ source_id = "inv", text = "Invoice INV-1002 for order 1002: amount charged $750.00." }]
"#;

fn wrong_expectation() -> String {
    format!(
        "[[case]]\nname = \"right\"\n[case.authorize]{OVER_500}[case.expect]\ndecision = \"needs_review\"\n\n\
         [[case]]\nname = \"a refund above 500 is allowed (it is not)\"\n[case.authorize]{OVER_500}\
         [case.expect]\ndecision = \"allow\"\nreason = \"coverage_sufficient\"\nrules = []\n"
    )
}

#[test]
fn the_shipped_policies_pass_their_tests() {
    let out = verdict(&["test", "--policies", POLICIES]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("from 3 files"), "{text}");
    for file in [
        "refunds.test.toml",
        "account_access.test.toml",
        "llm_replies.test.toml",
    ] {
        assert!(text.contains(&format!("test {file}::")), "{file}: {text}");
    }
    assert!(!text.contains("FAILED"), "{text}");
    let summary = text.lines().last().unwrap();
    assert!(summary.starts_with("test result: ok. "), "{summary}");
    assert!(summary.ends_with("passed; 0 failed"), "{summary}");

    let out = verdict(&["test", "--policies", POLICIES, "--json"]);
    assert_eq!(code(&out), 0);
    let j: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(j["ok"], true);
    assert_eq!(j["failed"], 0);
    let cases = j["cases"].as_array().unwrap();
    assert!(cases.len() >= 20, "{}", cases.len());
    assert_eq!(j["passed"], cases.len());
    // Real cases: every decision and route kind is exercised.
    let seen = |k: &str, v: &str| cases.iter().any(|c| c["actual"][k] == v);
    for d in ["allow", "deny", "needs_review", "not_gated"] {
        assert!(seen("decision", d), "no case decides {d}");
    }
    for r in [
        "policy_violation",
        "review_required",
        "unsupported_claims",
        "ambiguous_body",
    ] {
        assert!(seen("reason", r), "no case has reason {r}");
    }
    assert!(seen("route", "create-refund") && seen("route", "send-llm-reply"));
}

#[test]
fn a_wrong_expectation_fails_with_a_diff() {
    let dir = dir_with(&[("wrong.test.toml", &wrong_expectation())]);
    let out = verdict(&["test", "--policies", p(dir.path())]);
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("test wrong.test.toml::right ... ok"),
        "{text}"
    );
    assert!(
        text.contains("test wrong.test.toml::a refund above 500 is allowed (it is not) ... FAILED"),
        "{text}"
    );
    for want in [
        "decision:\n  expected: allow\n    actual: needs_review\n",
        "reason:\n  expected: coverage_sufficient\n    actual: review_required\n",
        "rules:\n  + refunds above 500 need a second pair of eyes   (hit, not expected)\n",
        "test result: FAILED. 1 passed; 1 failed",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    // The failure names where the case is written.
    let file = dir.path().join("wrong.test.toml");
    assert!(text.contains(&format!("({}:", file.display())), "{text}");

    let out = verdict(&["test", "--policies", p(dir.path()), "--json"]);
    assert_eq!(code(&out), 1);
    let j: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (j["ok"].as_bool(), j["failed"].as_u64()),
        (Some(false), Some(1))
    );
    let failed = &j["cases"][1];
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["actual"]["decision"], "needs_review");
    let fields: Vec<&str> = failed["diffs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["decision", "reason", "rules"]);
}

#[test]
fn a_malformed_test_file_is_file_line_col_and_exit_2() {
    let bad = "[[case]]\nname = \"typo\"\n[case.authorize]\naction = { type = \"refund.create\" }\n[case.expect]\ndecision = \"alow\"\n";
    let dir = dir_with(&[
        ("bad.test.toml", bad),
        ("good.test.toml", &wrong_expectation()),
    ]);
    let out = verdict(&["test", "--policies", p(dir.path())]);
    assert_eq!(code(&out), 2, "{}{}", stdout(&out), stderr(&out));
    let file = dir.path().join("bad.test.toml");
    assert_eq!(
        stderr(&out),
        format!(
            "{}:6:12: expect.decision: unknown value \"alow\" (allow, deny, needs_review)\n",
            file.display()
        )
    );
    // Nothing ran.
    assert_eq!(stdout(&out), "");
    let out = verdict(&["test", "--policies", p(dir.path()), "--json"]);
    assert_eq!(code(&out), 2);
    let j: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(j["ok"], false);
    assert!(j["errors"][0].as_str().unwrap().contains(":6:12: "), "{j}");

    // TOML syntax errors and requests the API would refuse are errors of
    // the file too.
    let dir = dir_with(&[(
        "syntax.test.toml",
        "[[case]]\nname = \"x\"\nauthorize = { action = { type = \"refund.create\" }, options = { evidence_limit = 500 } }\n[case.expect\n",
    )]);
    let out = verdict(&["test", "--policies", p(dir.path())]);
    assert_eq!(code(&out), 2);
    let err = stderr(&out);
    assert!(err.contains("syntax.test.toml:4:"), "{err}");
    let dir = dir_with(&[(
        "refused.test.toml",
        "[[case]]\nname = \"x\"\nauthorize = { action = { type = \"refund.create\" }, options = { evidence_limit = 500 } }\nexpect = { decision = \"deny\" }\n",
    )]);
    let out = verdict(&["test", "--policies", p(dir.path())]);
    assert_eq!(code(&out), 2);
    let err = stderr(&out);
    assert!(
        err.contains(
            "refused.test.toml:3:13: authorize: options.evidence_limit: 500 is above the maximum"
        ),
        "{err}"
    );
}

#[test]
fn unusable_directories_exit_2() {
    // No test files at all: a CI step that tests nothing must not pass.
    let dir = dir_with(&[]);
    let out = verdict(&["test", "--policies", p(dir.path())]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("no test files (*.test.toml)"),
        "{}",
        stderr(&out)
    );
    // Policies that do not load: their errors, and no case runs.
    let dir = dir_with(&[("t.test.toml", &wrong_expectation())]);
    std::fs::write(dir.path().join("broken.toml"), "[[action]]\ntyp = 1\n").unwrap();
    let out = verdict(&["test", "--policies", p(dir.path())]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("broken.toml:2:1: "),
        "{}",
        stderr(&out)
    );
    assert_eq!(stdout(&out), "");
}

#[test]
fn verdict_check_skips_test_files() {
    // A test file that is no valid policy (nor a valid test) beside the
    // policies: check and the loader do not read it.
    let dir = dir_with(&[("junk.test.toml", "[[case]]\nthis is not toml")]);
    let out = verdict(&["check", "--policies", p(dir.path()), "--strict"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("ok: 3 files"), "{}", stdout(&out));
}

#[test]
fn explain_prints_the_trace_of_one_case() {
    let out = verdict(&[
        "explain",
        &format!("{POLICIES}/refunds.test.toml"),
        "--policies",
        POLICIES,
        "--case",
        "proxy: a refund above 500 is held for review",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    for want in [
        "request   POST /api/orders/1002/refunds",
        "decision  needs_review (review_required)",
        "route     create-refund: POST /api/orders/{order_id}/refunds (refunds.toml), on_review = hold",
        "path params: order_id = \"1002\"",
        "action    refund.create: its action policy applies",
        "decision_mode            strict     floor (the request says nothing)",
        "#0 HIT      amount gt 500 -> review",
        "#1 miss     amount gt 5000 -> deny",
        "c1 supported",
        "row       a review rule hit",
        "outcomes  strict needs_review, balanced needs_review, audit allow (would needs_review)",
        "expect    ok (decision needs_review)",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }

    // A test file with several cases needs --case.
    let out = verdict(&[
        "explain",
        &format!("{POLICIES}/refunds.test.toml"),
        "--policies",
        POLICIES,
    ]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("pick one with --case NAME"),
        "{}",
        stderr(&out)
    );
}

/// `verdict explain` exits as `verdict test` would for the one case: 1
/// when its `expect` does not hold, 0 when it holds.
#[test]
fn explain_exits_one_when_the_expect_fails() {
    let case = |decision: &str| {
        format!(
            "[[case]]\nname = \"c\"\n[case.authorize]\n\
             action = {{ type = \"refund.create\", params = {{ order_id = \"7781\", amount = 100 }} }}\n\
             claims = [{{ text = \"A refund of $100 was approved for order 7781.\", citations = [{{ source_id = \"t\" }}] }}]\n\
             sources = [{{ source_id = \"t\", text = \"On 2024-03-03 the store manager approved a refund of $100 for order 7781.\" }}]\n\
             [case.expect]\ndecision = \"{decision}\"\n"
        )
    };
    let dir = dir_with(&[
        ("wrong.test.toml", &case("deny")),
        ("right.test.toml", &case("allow")),
    ]);
    for (file, want) in [("wrong.test.toml", 1), ("right.test.toml", 0)] {
        for json in [false, true] {
            let path = dir.path().join(file);
            let mut args = vec![
                "explain",
                path.to_str().unwrap(),
                "--policies",
                p(dir.path()),
            ];
            if json {
                args.push("--json");
            }
            let out = verdict(&args);
            assert_eq!(code(&out), want, "{file} json={json}: {}", stdout(&out));
        }
    }
}

#[test]
fn explain_reads_an_authorize_body_and_prints_json() {
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("req.json");
    std::fs::write(
        &body,
        r#"{"action": {"type": "refund.create", "params": {"order_id": "7781", "amount": 400}},
            "claims": [{"text": "A refund of $400 was approved for order 7781.", "citations": [{"source_id": "t"}]}],
            "sources": [{"source_id": "t", "text": "On 2024-03-03 the store manager approved a refund of $100 for order 7781."}],
            "requirements": {"decision_mode": "audit"}}"#,
    )
    .unwrap();
    let out = verdict(&[
        "explain",
        body.to_str().unwrap(),
        "--policies",
        POLICIES,
        "--json",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let j: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(j["result"]["decision"], "deny");
    let e = &j["explain"];
    let mode = e["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["field"] == "decision_mode")
        .unwrap();
    assert_eq!(mode["won"], "floor_over_request", "{mode}");
    assert_eq!(e["claims"][0]["status"], "unsupported");
    assert_eq!(e["claims"][0]["reasons"][0], "amount_mismatch");
    assert_eq!(
        e["decision_table"]["condition"],
        "a claim is unsupported and deny_if_any_unsupported is set"
    );

    // A body that is not JSON names its line and column.
    std::fs::write(&body, "{\n  \"action\": \n}").unwrap();
    let out = verdict(&["explain", body.to_str().unwrap(), "--policies", POLICIES]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).starts_with(&format!("{}:3:1: ", body.display())),
        "{}",
        stderr(&out)
    );
}
