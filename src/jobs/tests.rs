//! Batch jobs end to end against a real store: submit, poll, idempotency,
//! tenancy, paging, panics, restart, retention, shutdown. One set of
//! tests, two backends: a SQLite file in a temp dir, or, with
//! `VERDICT_TEST_STORE=postgres`, a fresh PostgreSQL database (`.ci/run`
//! runs this module both ways). Tests of SQLite's own files, chunked
//! staging and restarts by path say so and return early on PostgreSQL,
//! whose restarts are other replicas (tests/replicas.rs).

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::*;

const DEADLINE: Duration = Duration::from_secs(30);

fn cfg(workers: usize, retention: Duration) -> JobsConfig {
    JobsConfig { retention, workers }
}

fn day() -> Duration {
    Duration::from_secs(86_400)
}

fn echo() -> ItemFn {
    Arc::new(|i, item| json!({"i": i, "echo": item}))
}

fn items(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"claims": [format!("c{i}")]}))
        .collect()
}

async fn wait_until(
    jobs: &Jobs,
    id: &str,
    owner: &str,
    done: impl Fn(&JobView) -> bool,
) -> JobView {
    let start = Instant::now();
    loop {
        let v = jobs
            .get(id, owner, false, Page::ALL)
            .await
            .unwrap()
            .expect("job exists");
        if done(&v) {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "timed out, last view {v:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn wait_finished(jobs: &Jobs, id: &str, owner: &str) -> JobView {
    wait_until(jobs, id, owner, |v| {
        matches!(v.status, JobStatus::Succeeded | JobStatus::Failed)
    })
    .await
}

fn created(s: Submitted) -> JobSummary {
    match s {
        Submitted::Created(s) => s,
        other => panic!("expected a new job, got {other:?}"),
    }
}

/// Submits a job that must be new.
async fn submit_new(
    jobs: &Jobs,
    owner: &str,
    key: Option<&str>,
    request_hash: &str,
    input: Vec<Value>,
) -> JobSummary {
    created(jobs.submit(owner, key, request_hash, input).await.unwrap())
}

/// Submits a new job of `n` items for each `n` in `sizes`, in that order,
/// and returns their ids.
async fn submit_sized(jobs: &Jobs, sizes: &[usize]) -> Vec<String> {
    let mut ids = Vec::new();
    for (k, n) in sizes.iter().enumerate() {
        let hash = format!("sha256:{k}");
        ids.push(submit_new(jobs, "app", None, &hash, items(*n)).await.job_id);
    }
    ids
}

/// The job as its owner "app" sees it; it must exist.
async fn app_view(jobs: &Jobs, id: &str) -> JobView {
    jobs.get(id, "app", false, Page::ALL)
        .await
        .unwrap()
        .expect("job exists")
}

/// Jobs over a database in a fresh temp dir, which lives as long as the
/// returned guard.
async fn open_temp(
    workers: usize,
    retention: Duration,
    work: ItemFn,
) -> (tempfile::TempDir, std::path::PathBuf, Jobs) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("verdict.db");
    let config = cfg(workers, retention);
    let jobs = if on_postgres() {
        let shared = crate::store::postgres::testing::connect(
            &crate::store::postgres::testing::fresh_database(),
        )
        .await;
        Jobs::open_shared(shared, &config, work).unwrap()
    } else {
        Jobs::open(&db, &config, work).unwrap()
    };
    (dir, db, jobs)
}

use crate::store::postgres::testing::on_postgres;

/// Returns early (the test passes trivially) on PostgreSQL: for tests of
/// SQLite's own files, chunked staging and restarts by path.
macro_rules! sqlite_only {
    () => {
        if on_postgres() {
            eprintln!("SQLite only: not run against PostgreSQL");
            return;
        }
    };
}

/// Jobs on one worker with one finished echo job of `n` items from "app".
async fn one_finished_job(n: usize) -> (tempfile::TempDir, Jobs, JobSummary) {
    let (dir, _, jobs) = open_temp(1, day(), echo()).await;
    let s = submit_new(&jobs, "app", None, "sha256:a", items(n)).await;
    wait_finished(&jobs, &s.job_id, "app").await;
    (dir, jobs, s)
}

fn count_rows(db: &Path, table: &str) -> i64 {
    let c = rusqlite::Connection::open(db).unwrap();
    c.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn submit_then_poll_gives_results_in_order() {
    let (_dir, _, jobs) = open_temp(2, day(), echo()).await;
    let input = items(5);
    let s = submit_new(&jobs, "app", None, "sha256:a", input.clone()).await;
    assert_eq!(s.status, JobStatus::Queued);
    assert_eq!(s.items_total, 5);

    let v = wait_finished(&jobs, &s.job_id, "app").await;
    assert_eq!(v.status, JobStatus::Succeeded, "{v:?}");
    assert_eq!(v.progress, Progress { total: 5, done: 5 });
    assert!(v.started_at.is_some() && v.finished_at.is_some());
    assert!(v.error.is_none());
    let results = v.results.clone().unwrap();
    assert_eq!(results.len(), 5);
    for (n, (i, r)) in results.iter().enumerate() {
        assert_eq!(*i, n);
        assert_eq!(r, &json!({"i": n, "echo": input[n]}));
    }

    // The wire shape of `GET /v2/jobs/{id}` (docs/openapi.yaml).
    let wire = serde_json::to_value(&v).unwrap();
    assert_eq!(wire["job_id"], json!(s.job_id));
    assert_eq!(wire["status"], json!("succeeded"));
    assert_eq!(wire["progress"], json!({"total": 5, "done": 5}));
    assert_eq!(wire["results"][2]["index"], json!(2));
    assert_eq!(wire["results"][2]["echo"], input[2]);
    assert!(wire.get("error").is_none());
    let created_at = wire["created_at"].as_str().unwrap();
    assert!(
        created_at.ends_with('Z') && created_at.len() == 24,
        "{created_at}"
    );
    jobs.shutdown().await;
}

#[tokio::test]
async fn queued_view_omits_optional_fields() {
    let v = JobView {
        job_id: "j".into(),
        status: JobStatus::Queued,
        created_at: rfc3339_millis(0),
        started_at: None,
        finished_at: None,
        progress: Progress { total: 2, done: 0 },
        results: None,
        error: None,
    };
    assert_eq!(
        serde_json::to_value(&v).unwrap(),
        json!({"job_id": "j", "status": "queued", "created_at": "1970-01-01T00:00:00.000Z",
               "progress": {"total": 2, "done": 0}})
    );
    let v = JobView {
        results: Some(vec![(0, json!(7)), (1, json!({"index": 99, "a": 1}))]),
        ..v
    };
    assert_eq!(
        serde_json::to_value(&v).unwrap()["results"],
        json!([{"index": 0, "result": 7}, {"index": 1, "a": 1}])
    );
}

#[tokio::test]
async fn idempotency_is_per_owner_and_per_body() {
    let (_dir, _, jobs) = open_temp(1, day(), echo()).await;
    let first = submit_new(&jobs, "app", Some("k1"), "sha256:a", items(3)).await;
    match jobs
        .submit("app", Some("k1"), "sha256:a", items(3))
        .await
        .unwrap()
    {
        Submitted::Existing(s) => {
            assert_eq!(s.job_id, first.job_id);
            assert_eq!(s.items_total, 3);
        }
        other => panic!("expected the existing job, got {other:?}"),
    }
    assert!(matches!(
        jobs.submit("app", Some("k1"), "sha256:b", items(3)).await,
        Err(JobsError::Conflict)
    ));
    let other = submit_new(&jobs, "other", Some("k1"), "sha256:b", items(1)).await;
    assert_ne!(other.job_id, first.job_id);
    let a = submit_new(&jobs, "app", None, "sha256:a", items(1)).await;
    let b = submit_new(&jobs, "app", None, "sha256:a", items(1)).await;
    assert_ne!(a.job_id, b.job_id);
    jobs.shutdown().await;
}

#[tokio::test]
async fn other_owners_jobs_are_invisible_but_admin_sees_them() {
    let (_dir, jobs, s) = one_finished_job(2).await;
    assert!(jobs
        .get(&s.job_id, "intruder", false, Page::ALL)
        .await
        .unwrap()
        .is_none());
    let admin = jobs
        .get(&s.job_id, "auditor", true, Page::ALL)
        .await
        .unwrap()
        .expect("admin sees every job");
    assert_eq!(admin.results.unwrap().len(), 2);
    assert!(jobs
        .get("no-such-job", "app", true, Page::ALL)
        .await
        .unwrap()
        .is_none());
    jobs.shutdown().await;
}

#[tokio::test]
async fn results_are_paged_in_index_order() {
    let (_dir, jobs, s) = one_finished_job(10).await;
    let page = |offset, limit| {
        let jobs = jobs.clone();
        let id = s.job_id.clone();
        async move {
            jobs.get(&id, "app", false, Page { offset, limit })
                .await
                .unwrap()
                .unwrap()
                .results
                .unwrap()
                .into_iter()
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(page(3, 4).await, vec![3, 4, 5, 6]);
    assert_eq!(page(8, 100).await, vec![8, 9]);
    assert_eq!(page(10, 5).await, Vec::<usize>::new());
    assert_eq!(page(0, 0).await, Vec::<usize>::new());
    jobs.shutdown().await;
}

#[tokio::test]
async fn a_panicking_item_fails_its_job_and_the_worker_survives() {
    let work: ItemFn = Arc::new(|i, item| {
        if item.get("panic").is_some() {
            panic!("boom at {i}");
        }
        json!({"ok": i})
    });
    // One worker: the second job can only succeed if it survived.
    let (_dir, _, jobs) = open_temp(1, day(), work).await;
    let panics_at_1 = vec![json!({}), json!({"panic": true}), json!({})];
    let bad = submit_new(&jobs, "app", None, "sha256:a", panics_at_1).await;
    let good = submit_new(&jobs, "app", None, "sha256:b", items(3)).await;
    let v = wait_finished(&jobs, &bad.job_id, "app").await;
    assert_eq!(v.status, JobStatus::Failed);
    assert_eq!(v.progress, Progress { total: 3, done: 1 });
    assert!(v.results.is_none());
    let msg = v.error.unwrap();
    assert!(msg.contains("item 1"), "{msg}");
    assert!(!msg.contains("boom"), "panic text must not leak: {msg}");
    assert!(v.finished_at.is_some());
    let v = wait_finished(&jobs, &good.job_id, "app").await;
    assert_eq!(v.status, JobStatus::Succeeded);
    jobs.shutdown().await;
}

#[tokio::test]
async fn an_empty_job_succeeds() {
    let (_dir, _, jobs) = open_temp(1, day(), echo()).await;
    let s = submit_new(&jobs, "app", None, "sha256:a", vec![]).await;
    let v = wait_finished(&jobs, &s.job_id, "app").await;
    assert_eq!(v.status, JobStatus::Succeeded);
    assert_eq!(v.results, Some(vec![]));
    jobs.shutdown().await;
}

/// Work that takes a while per item, with counters of the items it
/// finished and of the items under way.
struct Slow {
    work: ItemFn,
    calls: Arc<AtomicUsize>,
    in_flight: Arc<AtomicUsize>,
}

/// Jobs as [`open_temp`] makes them, over [`Slow`] work taking `each` per
/// item.
async fn open_slow(
    workers: usize,
    retention: Duration,
    each: Duration,
) -> (tempfile::TempDir, std::path::PathBuf, Jobs, Slow) {
    let calls = Arc::new(AtomicUsize::new(0));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let work: ItemFn = {
        let (calls, in_flight) = (calls.clone(), in_flight.clone());
        Arc::new(move |i, _| {
            in_flight.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(each);
            calls.fetch_add(1, Ordering::SeqCst);
            in_flight.fetch_sub(1, Ordering::SeqCst);
            json!({"i": i})
        })
    };
    let (dir, db, jobs) = open_temp(workers, retention, work.clone()).await;
    let slow = Slow {
        work,
        calls,
        in_flight,
    };
    (dir, db, jobs, slow)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_interrupted_by_shutdown_resumes_after_reopen() {
    sqlite_only!();
    const N: usize = 400;
    let (_dir, db, jobs, slow) = open_slow(1, day(), Duration::from_millis(1)).await;
    let s = submit_new(&jobs, "app", None, "sha256:a", items(N)).await;
    let mid = wait_until(&jobs, &s.job_id, "app", |v| v.progress.done >= 70).await;
    assert_eq!(mid.status, JobStatus::Running);
    jobs.shutdown().await;
    let paused = app_view(&jobs, &s.job_id).await;
    assert_eq!(paused.status, JobStatus::Running);
    assert!(
        paused.progress.done < N as u64,
        "shut down too late to test"
    );
    // Every finished item's result was written before shutdown returned.
    assert_eq!(
        paused.progress.done,
        slow.calls.load(Ordering::SeqCst) as u64
    );
    drop(jobs);

    let jobs = Jobs::open(&db, &cfg(1, day()), slow.work.clone()).unwrap();
    let v = wait_finished(&jobs, &s.job_id, "app").await;
    assert_eq!(v.status, JobStatus::Succeeded, "{v:?}");
    assert_eq!(v.started_at, paused.started_at, "started_at is kept");
    let results = v.results.unwrap();
    assert_eq!(results.len(), N);
    let unique: HashSet<usize> = results.iter().map(|(i, _)| *i).collect();
    assert_eq!(unique.len(), N);
    assert!(results.iter().enumerate().all(|(n, (i, _))| n == *i));
    // A graceful stop re-runs nothing: each item ran exactly once.
    assert_eq!(slow.calls.load(Ordering::SeqCst), N);
    assert_eq!(count_rows(&db, "jobs_results"), N as i64);
    assert_eq!(count_rows(&db, "jobs_items"), 0, "items go when a job ends");
    jobs.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_between_items_and_keeps_every_result() {
    sqlite_only!();
    let (_dir, db, jobs, slow) = open_slow(1, day(), Duration::from_millis(20)).await;
    let ids = submit_sized(&jobs, &[200, 5]).await;
    let (first, second) = (&ids[0], &ids[1]);

    wait_until(&jobs, first, "app", |v| v.progress.done >= 3).await;
    let h = jobs.health();
    assert_eq!((h.queued, h.running), (1, 1), "{h:?}");
    assert!(h.oldest_queued_age_s.is_some());

    jobs.shutdown().await;
    assert_eq!(
        slow.in_flight.load(Ordering::SeqCst),
        0,
        "an item was abandoned"
    );
    let done = slow.calls.load(Ordering::SeqCst);
    let v = app_view(&jobs, first).await;
    assert_eq!(v.progress.done, done as u64, "a finished result was lost");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        slow.calls.load(Ordering::SeqCst),
        done,
        "work ran after shutdown"
    );
    let untouched = app_view(&jobs, second).await;
    assert_eq!(untouched.status, JobStatus::Queued);
    assert!(matches!(
        jobs.submit("app", None, "sha256:c", items(1)).await,
        Err(JobsError::ShuttingDown)
    ));
    drop(jobs);

    // Both the paused running job and the never-started queued one resume.
    let jobs = Jobs::open(&db, &cfg(2, day()), echo()).unwrap();
    for id in [first, second] {
        let v = wait_finished(&jobs, id, "app").await;
        assert_eq!(v.status, JobStatus::Succeeded);
    }
    jobs.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_runs_jobs_in_submit_order() {
    let (_dir, _, jobs, _) = open_slow(1, day(), Duration::from_millis(2)).await;
    let ids = submit_sized(&jobs, &[5; 4]).await;
    let mut views = Vec::new();
    for id in &ids {
        views.push(wait_finished(&jobs, id, "app").await);
    }
    for w in views.windows(2) {
        // Millisecond strings in one format sort like the times they name.
        assert!(w[0].finished_at <= w[1].started_at, "{w:?}");
    }
    jobs.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_run_two_jobs_at_once() {
    sqlite_only!();
    let (_dir, _, jobs, slow) = open_slow(2, day(), Duration::from_millis(20)).await;
    let ids = submit_sized(&jobs, &[50, 50]).await;
    let start = Instant::now();
    while slow.in_flight.load(Ordering::SeqCst) < 2 {
        assert!(start.elapsed() < DEADLINE, "never two items at once");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(jobs.health().running, 2);
    jobs.shutdown().await;
    for id in &ids {
        let v = app_view(&jobs, id).await;
        assert_eq!(v.status, JobStatus::Running);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_and_their_keys_expire_after_retention() {
    let (_dir, db, jobs) = open_temp(1, Duration::from_millis(300), echo()).await;
    let s = submit_new(&jobs, "app", Some("k"), "sha256:a", items(3)).await;
    wait_finished(&jobs, &s.job_id, "app").await;
    let start = Instant::now();
    while jobs
        .get(&s.job_id, "app", false, Page::ALL)
        .await
        .unwrap()
        .is_some()
    {
        assert!(start.elapsed() < DEADLINE, "job never swept");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        start.elapsed() >= Duration::from_millis(100),
        "swept too early"
    );
    if !on_postgres() {
        assert_eq!(count_rows(&db, "jobs_results"), 0);
        assert_eq!(count_rows(&db, "jobs_items"), 0);
    }
    // The key is forgotten with its job: the same key (even with another
    // body) makes a new job.
    let again = submit_new(&jobs, "app", Some("k"), "sha256:b", items(1)).await;
    assert_ne!(again.job_id, s.job_id);
    jobs.shutdown().await;
}

#[tokio::test]
async fn unfinished_jobs_are_never_swept() {
    let (_dir, _, jobs, _) = open_slow(1, Duration::ZERO, Duration::from_millis(5)).await;
    let s = submit_new(&jobs, "app", None, "sha256:a", items(50)).await;
    wait_until(&jobs, &s.job_id, "app", |v| v.progress.done >= 1).await;
    assert_eq!(jobs.sweep().await.unwrap(), 0);
    let v = jobs
        .get(&s.job_id, "app", false, Page::ALL)
        .await
        .unwrap()
        .expect("a running job is kept");
    assert_eq!(v.status, JobStatus::Running);
    jobs.shutdown().await;
}

#[tokio::test]
async fn metrics_are_registered() {
    let (_dir, _, jobs) = open_temp(1, day(), echo()).await;
    let mut registry = prometheus_client::registry::Registry::default();
    jobs.register_metrics(&mut registry);
    let s = submit_new(&jobs, "app", None, "sha256:a", items(4)).await;
    wait_finished(&jobs, &s.job_id, "app").await;
    let lines = [
        "verdict_jobs_queue_depth 0",
        "verdict_jobs_items_processed_total 4",
        "verdict_jobs_item_duration_seconds_count 4",
    ];
    // On the shared store the gauges are recounted just after the job's
    // last commit, so a reader may see them a moment behind.
    let start = Instant::now();
    while start.elapsed() < DEADLINE {
        let text = crate::telemetry::metrics::encode(&registry).unwrap();
        if lines.iter().all(|l| text.contains(l)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    crate::telemetry::metrics::assert_encodes(&registry, &lines);
    let report = Component::report(&jobs);
    assert_eq!(report.status, Status::Ok);
    jobs.shutdown().await;
}

#[tokio::test]
async fn a_large_job_is_stored_in_chunks_and_runs_in_order() {
    let (_dir, _, jobs) = open_temp(1, day(), echo()).await;
    let n = sqlite::ITEM_CHUNK * 2 + 7;
    let input = items(n);
    let s = submit_new(&jobs, "app", Some("k"), "sha256:big", input.clone()).await;
    assert_eq!((s.status, s.items_total), (JobStatus::Queued, n as u64));
    let v = wait_finished(&jobs, &s.job_id, "app").await;
    assert_eq!(v.status, JobStatus::Succeeded, "{v:?}");
    let results = v.results.unwrap();
    assert_eq!(results.len(), n);
    for (k, (i, r)) in results.iter().enumerate() {
        assert_eq!((*i, r), (k, &json!({"i": k, "echo": input[k]})));
    }
    // A replay after it was stored is the same job.
    let again = jobs
        .submit("app", Some("k"), "sha256:big", input)
        .await
        .unwrap();
    assert!(
        matches!(again, Submitted::Existing(ref e) if e.job_id == s.job_id),
        "{again:?}"
    );
    jobs.shutdown().await;
}

/// A job row left `staging` with some of its items, as a crash mid-submit
/// leaves it.
fn leave_staging(db: &Path, key: &str) {
    let c = rusqlite::Connection::open(db).unwrap();
    c.execute(
        "INSERT INTO jobs_jobs (job_id, owner, status, items_total, created_at_ms, \
         idempotency_key, request_hash) VALUES ('half', 'app', 'staging', 600, 0, ?1, 'sha256:h')",
        [key],
    )
    .unwrap();
    let seq = c.last_insert_rowid();
    for i in 0..3 {
        c.execute(
            "INSERT INTO jobs_items (job_seq, idx, item) VALUES (?1, ?2, '{}')",
            rusqlite::params![seq, i],
        )
        .unwrap();
    }
}

#[tokio::test]
async fn a_staging_job_is_invisible_blocks_its_key_and_is_dropped_at_open() {
    sqlite_only!();
    let (_dir, db, jobs) = open_temp(1, day(), echo()).await;
    leave_staging(&db, "k");
    // Nobody sees it, and a replay of its key waits for it instead of
    // creating a second job.
    assert!(jobs
        .get("half", "app", true, Page::ALL)
        .await
        .unwrap()
        .is_none());
    let replay = jobs.submit("app", Some("k"), "sha256:h", items(1)).await;
    assert!(matches!(replay, Err(JobsError::InProgress)), "{replay:?}");
    jobs.shutdown().await;
    assert_eq!(count_rows(&db, "jobs_jobs"), 1);

    // Reopening (a restart after the crash) drops the row and its items, and
    // the key is free again.
    let jobs = Jobs::open(&db, &cfg(1, day()), echo()).unwrap();
    assert_eq!(count_rows(&db, "jobs_jobs"), 0);
    assert_eq!(count_rows(&db, "jobs_items"), 0);
    let s = submit_new(&jobs, "app", Some("k"), "sha256:h", items(1)).await;
    assert_eq!(
        wait_finished(&jobs, &s.job_id, "app").await.status,
        JobStatus::Succeeded
    );
    jobs.shutdown().await;
}

#[test]
fn another_writer_gets_the_lock_between_the_chunks_of_a_submit() {
    sqlite_only!();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("verdict.db");
    let store = sqlite::Store::open(&db).unwrap();
    let other = rusqlite::Connection::open(&db).unwrap();
    other
        .execute_batch("CREATE TABLE other_writes (saw_staging INTEGER NOT NULL)")
        .unwrap();
    // Polls for the lock as the audit log's writer does.
    other
        .busy_handler(Some(crate::store::sqlite::busy_decision_path))
        .unwrap();
    let items: Vec<String> = (0..sqlite::ITEM_CHUNK * 24)
        .map(|i| format!("{{\"claims\":[\"claim {i} {}\"]}}", "x".repeat(400)))
        .collect();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            while !done.load(Ordering::Acquire) && n < 100_000 {
                other
                    .execute_batch(
                        "BEGIN IMMEDIATE; INSERT INTO other_writes SELECT COUNT(*) FROM jobs_jobs \
                         WHERE status = 'staging'; COMMIT;",
                    )
                    .unwrap();
                n += 1;
                // A group's worth of work between two commits.
                std::thread::sleep(Duration::from_micros(300));
            }
        })
    };
    let inserted = store
        .with_conn(|c| sqlite::insert_job(c, "app", None, "sha256:x", &items, 0))
        .unwrap();
    done.store(true, Ordering::Release);
    writer.join().unwrap();
    assert!(matches!(inserted, backend::Inserted::New(ref j) if j.status == JobStatus::Queued));
    // The other writer committed while the job was still staging, which one
    // transaction for the whole submit would not allow.
    let c = rusqlite::Connection::open(&db).unwrap();
    let during: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM other_writes WHERE saw_staging > 0",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(during > 0, "no other write got in during the submit");
    assert_eq!(count_rows(&db, "jobs_items"), items.len() as i64);
}

/// Job store connections write no temporary files: `temp_store` is MEMORY.
#[test]
fn job_connections_keep_temp_data_in_memory() {
    sqlite_only!();
    let dir = tempfile::tempdir().unwrap();
    let s = sqlite::Store::open(&dir.path().join("verdict.db")).unwrap();
    for d in [sqlite::Durability::Full, sqlite::Durability::Normal] {
        let conn = s.connect(d).unwrap();
        let mode: i64 = conn
            .query_row("PRAGMA temp_store", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, 2);
    }
}
