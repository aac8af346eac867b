//! Batch jobs through the public API only: a 100 000-item job is stored and
//! processed, with timings printed (`cargo test --test jobs_store -- --nocapture`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use verdict::config::JobsConfig;
use verdict::jobs::{ItemFn, JobStatus, Jobs, Page, Submitted};

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

    let deadline = Duration::from_secs(600);
    let view = loop {
        let v = jobs
            .get(
                &s.job_id,
                "app",
                false,
                Page {
                    offset: 0,
                    limit: 0,
                },
            )
            .await
            .unwrap()
            .unwrap();
        if matches!(v.status, JobStatus::Succeeded | JobStatus::Failed) {
            break v;
        }
        assert!(t0.elapsed() < deadline, "too slow: {v:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
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
