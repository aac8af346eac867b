//! The PostgreSQL test support itself (tests/support/postgres.rs): each
//! fresh database is a separate, reachable database of the shared
//! throwaway cluster.

use crate::support;

use support::postgres::{fresh_database, psql, with_database};

#[test]
fn fresh_databases_are_separate_and_reachable() {
    let (Some(a), Some(b)) = (fresh_database(), fresh_database()) else {
        return; // VERDICT_SKIP_POSTGRES is set; support::postgres said so
    };
    assert_ne!(a, b);
    for url in [&a, &b] {
        assert_eq!(psql(url, "select 1").expect("select 1"), "1", "{url}");
    }
    psql(&a, "create table only_in_a (x int)").expect("create table");
    let tables = "select count(*) from pg_tables where tablename = 'only_in_a'";
    assert_eq!(psql(&a, tables).expect("count in a"), "1");
    assert_eq!(psql(&b, tables).expect("count in b"), "0");
}

#[test]
fn with_database_replaces_only_the_path() {
    assert_eq!(
        with_database("postgres://u:p@127.0.0.1:5/verdict", "t_1"),
        "postgres://u:p@127.0.0.1:5/t_1"
    );
    assert_eq!(
        with_database("postgresql://u@h/db?sslmode=disable", "t_1"),
        "postgresql://u@h/t_1?sslmode=disable"
    );
    assert_eq!(with_database("postgres://h:5", "t_1"), "postgres://h:5/t_1");
    assert_eq!(
        with_database("postgres://h?sslmode=disable", "t_1"),
        "postgres://h/t_1?sslmode=disable"
    );
}

/// `scripts/postgres.sh start` with `PG_STOP_WHEN_UNUSED=1` (what the test
/// support uses) stops its cluster once no process holds a shared lock on
/// `DIR/users`, so that `cargo test` leaves no server running; while one
/// does, the cluster stays.
#[test]
fn an_unused_test_cluster_stops_by_itself() {
    use std::process::Command;
    use std::time::Duration;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/postgres.sh");
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("pg");
    let out = Command::new("bash")
        .args([script, "start"])
        .arg(&dir)
        .env("PG_FAST", "1")
        .env("PG_STOP_WHEN_UNUSED", "1")
        .env("PG_UNUSED_GRACE", "1")
        .env("PG_UNUSED_SECONDS", "2")
        .output()
        .unwrap();
    if !out.status.success() {
        // No PostgreSQL here; the tests that need it say so loudly.
        assert!(
            std::env::var_os(support::postgres::ENV_SKIP).is_some(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let running = || {
        Command::new("bash")
            .args([script, "url"])
            .arg(&dir)
            .output()
            .unwrap()
            .status
            .success()
    };
    let user = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("users"))
        .unwrap();
    user.lock_shared().unwrap();
    std::thread::sleep(Duration::from_secs(5));
    assert!(running(), "stopped while a process used it");
    drop(user);
    // Stopped, and its directory removed (the stop's last step).
    support::eventually_blocking(
        "the server to stop after its last user left",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || match (running(), dir.exists()) {
            (false, false) => Ok(()),
            (up, there) => Err(format!("running: {up}, directory there: {there}")),
        },
    );
}
