//! The offline verifier in docs/audit.md (`scripts/verify-proof.py`, Python
//! with `cryptography`, no code shared with verdict) accepts the proofs a
//! real server serves, with their records, and rejects a tampered proof, a
//! tampered record and a wrong key.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use support::{TestServer, APP_KEY};

/// A Python that can import `cryptography`: python3 itself, or a venv
/// under the target dir made for it (as scripts/check-consistency.sh does).
fn python() -> PathBuf {
    let ok = |py: &Path| {
        Command::new(py)
            .args(["-c", "import cryptography"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let system = PathBuf::from("python3");
    if ok(&system) {
        return system;
    }
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("verify-proof-venv");
    let py = venv.join("bin/python");
    if !ok(&py) {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status();
        assert!(made.is_ok_and(|s| s.success()), "python3 -m venv failed: this test needs python3 (with venv) to run the offline verifier");
        let pip = Command::new(&py)
            .args(["-m", "pip", "install", "--quiet", "cryptography"])
            .status();
        assert!(
            pip.is_ok_and(|s| s.success()),
            "pip install cryptography failed: the offline verifier needs it"
        );
    }
    py
}

fn run(py: &Path, files: &[&Path]) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/verify-proof.py");
    let out = Command::new(py).arg(script).args(files).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && text.trim() == "ok", text)
}

/// docs/audit.md shows the script whole, as the repository holds it.
#[test]
fn the_doc_shows_the_script_that_is_tested() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = std::fs::read_to_string(root.join("scripts/verify-proof.py")).unwrap();
    let doc = std::fs::read_to_string(root.join("docs/audit.md")).unwrap();
    assert!(
        doc.contains(&format!("```python\n{script}```")),
        "docs/audit.md must show scripts/verify-proof.py verbatim"
    );
    assert!(
        script.lines().count() <= 40,
        "the offline check stays short"
    );
}

#[tokio::test]
async fn the_documented_script_verifies_served_proofs() {
    let s = TestServer::start().await;
    let ids = support::decisions(&s, 7).await;
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    for (n, id) in ids.iter().enumerate() {
        let proof = s.get(&format!("/v2/audit/{id}/proof"), Some(APP_KEY)).await;
        assert_eq!(proof.status, 200, "{}", proof.text());
        let kid = proof.json()["key_id"].as_str().unwrap().to_string();
        let key = s.get(&format!("/v2/audit/keys/{kid}"), None).await;
        let record = s.get(&format!("/v2/audit/{id}"), Some(APP_KEY)).await;
        let (p, k, r) = (
            dir.path().join(format!("proof{n}.json")),
            dir.path().join("key.json"),
            dir.path().join(format!("record{n}.json")),
        );
        std::fs::write(&p, &proof.body).unwrap();
        std::fs::write(&k, &key.body).unwrap();
        std::fs::write(&r, &record.body).unwrap();
        let (ok, out) = run(&py, &[&p, &k, &r]);
        assert!(ok, "{id}: {out}");

        if n == 0 {
            // A flipped sibling hash, a changed record, another key: refused.
            let mut bad: Value = proof.json();
            if let Some(step) = bad["proof"].get_mut(0) {
                let h = step["hash"].as_str().unwrap().to_string();
                let last = if h.ends_with('0') { "1" } else { "0" };
                step["hash"] = json!(format!("{}{last}", &h[..h.len() - 1]));
                let bp = dir.path().join("bad-proof.json");
                std::fs::write(&bp, bad.to_string()).unwrap();
                assert!(!run(&py, &[&bp, &k]).0, "a tampered path must fail");
            }
            let br = dir.path().join("bad-record.json");
            let text = String::from_utf8_lossy(&record.body).replace("note.add", "note.adx");
            std::fs::write(&br, text).unwrap();
            assert!(!run(&py, &[&p, &k, &br]).0, "a tampered record must fail");
            let mut other: Value = key.json();
            other["x"] = json!("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo");
            let bk = dir.path().join("bad-key.json");
            std::fs::write(&bk, other.to_string()).unwrap();
            assert!(!run(&py, &[&p, &bk]).0, "another key must fail");
        }
    }
}
