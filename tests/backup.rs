//! `verdict backup` while the server runs: the copy verifies, holds every
//! decision acknowledged before it started, and a server starts on it.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use support::{TestServer, APP_KEY};

#[tokio::test]
async fn a_backup_taken_while_serving_verifies_and_serves() {
    let bin = env!("CARGO_BIN_EXE_verdict");
    let s = TestServer::start().await;
    let before = support::decisions(&s, 20).await;
    let data = s.path("data");
    let out = s.path("backup");

    // Decisions keep coming while the backup runs.
    let writer = {
        let s = &s;
        async move { support::decisions(s, 20).await }
    };
    let data2 = data.clone();
    let out2 = out.clone();
    let backup = tokio::task::spawn_blocking(move || {
        support::cli(
            bin,
            &["backup", "--data-dir", data2.to_str().unwrap(), "--to"],
            &out2,
        )
    });
    let (_, out_cli) = tokio::join!(writer, backup);
    let out_cli = out_cli.unwrap();
    support::assert_exit(&out_cli, 0);
    let stdout = String::from_utf8_lossy(&out_cli.stdout);
    assert!(stdout.contains("audit log ok"), "{stdout}");

    // The copy verifies on its own and has no lock file.
    let verify = support::cli(bin, &["audit", "verify", "--data-dir"], &out);
    support::assert_exit(&verify, 0);
    assert!(!out.join("verdict.lock").exists());
    assert!(out.join("redaction.key").exists());

    // A second backup into the same directory is refused (exit 2).
    let again = support::cli(
        bin,
        &["backup", "--data-dir", data.to_str().unwrap(), "--to"],
        &out,
    );
    support::assert_exit(&again, 2);

    // A server started on the copy serves every record acknowledged before
    // the backup began.
    let _keep = s.shutdown().await; // holds `out`
    let dir = tempfile::tempdir().unwrap();
    let mut config = support::test_config(&dir);
    config.data_dir = out.clone();
    let restored = TestServer::attach(verdict::app::start(config).await.unwrap(), dir);
    for id in &before {
        let r = restored
            .get(&format!("/v2/audit/{id}"), Some(APP_KEY))
            .await;
        assert_eq!(r.status, 200, "{id}: {}", r.text());
    }
}
