//! Batch jobs through the public API only: a 100 000-item job is stored and
//! processed, with timings printed (`cargo test --test processes -- jobs_store:: --nocapture`),
//! and a job survives a `kill -9` of the process that runs it.

use crate::support;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use verdict::config::JobsConfig;
use verdict::jobs::{ItemFn, JobStatus, JobView, Jobs, Page, Submitted};

/// Polls the job every `every` until it has finished (up to `within`), and
/// returns it with the results in `page`.
async fn finished(jobs: &Jobs, id: &str, page: Page, within: Duration, every: Duration) -> JobView {
    support::eventually_every("the job to finish", within, every, || async {
        let v = jobs
            .get(id, "app", false, page)
            .await
            .expect("read")
            .expect("the job");
        if matches!(v.status, JobStatus::Succeeded | JobStatus::Failed) {
            Ok(v)
        } else {
            Err(format!("{v:?}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100k_item_job_is_stored_and_processed() {
    const N: usize = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("verdict.db");
    let cfg = JobsConfig {
        retention: Duration::from_secs(3600),
        workers: 1,
    };
    let work: ItemFn = Arc::new(|i, _| json!({"verdict": "supported", "i": i}));
    let jobs = Jobs::open(&db, &cfg, work).unwrap();
    let items: Vec<_> = (0..N)
        .map(|i| json!({"claims": [{"text": format!("claim {i}")}], "sources": [{"source_id": "s", "text": "evidence"}]}))
        .collect();

    let t0 = Instant::now();
    let s = jobs.submit("app", None, "sha256:x", items).await.unwrap();
    let stored = t0.elapsed();
    let Submitted::Created(s) = s else {
        panic!("new job expected")
    };
    assert_eq!(s.items_total, N as u64);

    let page = Page {
        offset: 0,
        limit: 0,
    };
    let view = finished(
        &jobs,
        &s.job_id,
        page,
        Duration::from_secs(600),
        Duration::from_millis(50),
    )
    .await;
    let processed = t0.elapsed() - stored;
    assert_eq!(view.status, JobStatus::Succeeded);
    assert_eq!(view.progress.done, N as u64);

    let t1 = Instant::now();
    let all = jobs
        .get(&s.job_id, "app", false, Page::ALL)
        .await
        .unwrap()
        .unwrap();
    let read = t1.elapsed();
    let results = all.results.unwrap();
    assert_eq!(results.len(), N);
    assert!(results.iter().enumerate().all(|(n, (i, _))| n == *i));
    println!(
        "100k items: store {stored:?}, process {processed:?} ({:.0} items/s), read all {read:?}",
        N as f64 / processed.as_secs_f64()
    );
    jobs.shutdown().await;
}

/// Where the child process of the kill test keeps its database.
const CRASH_DB: &str = "VERDICT_JOBS_CRASH_DB";
const CRASH_ITEMS: usize = 3000;

fn one_worker() -> JobsConfig {
    JobsConfig {
        retention: Duration::from_secs(3600),
        workers: 1,
    }
}

/// The child half of `a_killed_process_resumes_without_duplicates`: submits a
/// slow job, prints its id and runs until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run as a child process by a_killed_process_resumes_without_duplicates"]
async fn crash_child() {
    let Ok(db) = std::env::var(CRASH_DB) else {
        return;
    };
    let work: ItemFn = Arc::new(|i, _| {
        std::thread::sleep(Duration::from_millis(1));
        json!({"i": i})
    });
    let jobs = Jobs::open(Path::new(&db), &one_worker(), work).unwrap();
    let items = (0..CRASH_ITEMS).map(|i| json!({"n": i})).collect();
    let s = jobs.submit("app", None, "sha256:k", items).await.unwrap();
    println!("JOB_ID={}", s.summary().job_id);
    tokio::time::sleep(Duration::from_secs(120)).await;
}

/// Kills the child if the test fails before it does.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn stored_results(conn: &rusqlite::Connection) -> i64 {
    conn.query_row("SELECT COUNT(*) FROM jobs_results", [], |r| r.get(0))
        .expect("results table is readable")
}

#[test]
fn a_killed_process_resumes_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("verdict.db");
    // The child test's name in this binary: its module path without the
    // crate's name.
    let child_test = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::crash_child"),
        None => "crash_child".to_string(),
    };
    let child = Command::new(std::env::current_exe().unwrap())
        .args([child_test.as_str(), "--exact", "--ignored", "--nocapture"])
        .env(CRASH_DB, &db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let job_id = loop {
        let line = lines.next().expect("child exited early").unwrap();
        if let Some(id) = line.strip_prefix("JOB_ID=") {
            break id.to_string();
        }
    };

    // Let it store some results, then SIGKILL it mid-job.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    support::eventually_blocking(
        "the child to store 300 results",
        Duration::from_secs(60),
        Duration::from_millis(10),
        || match stored_results(&conn) {
            n if n >= 300 => Ok(()),
            n => Err(format!("{n} stored")),
        },
    );
    // SIGKILL on Unix: no destructor, no flush, no shutdown.
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let before = stored_results(&conn) as usize;
    assert!(before < CRASH_ITEMS, "killed too late to test");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let work: ItemFn = Arc::new(move |i, _| {
            counted.fetch_add(1, Ordering::SeqCst);
            json!({"i": i})
        });
        let jobs = Jobs::open(&db, &one_worker(), work).unwrap();
        let within = Duration::from_secs(60);
        let view = finished(&jobs, &job_id, Page::ALL, within, Duration::from_millis(10)).await;
        assert_eq!(view.status, JobStatus::Succeeded);
        assert_eq!(view.progress.done, CRASH_ITEMS as u64);
        let results = view.results.unwrap();
        assert_eq!(results.len(), CRASH_ITEMS);
        let unique: HashSet<usize> = results.iter().map(|(i, _)| *i).collect();
        assert_eq!(unique.len(), CRASH_ITEMS);
        for (i, r) in &results {
            assert_eq!(r, &json!({"i": i}));
        }
        // Only the items without a stored result ran again.
        assert_eq!(calls.load(Ordering::SeqCst), CRASH_ITEMS - before);
        jobs.shutdown().await;
    });
    assert_eq!(stored_results(&conn) as usize, CRASH_ITEMS);
}
