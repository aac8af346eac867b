//! Writes a 64-record audit log's consistency proofs as JSON, for the
//! independent checker `scripts/check-consistency.py` (which `.ci/run`
//! runs): the record hashes, the signed checkpoint of every size 0..=64,
//! the log's public key, and `GET /v2/audit/consistency`'s answer for every
//! pair of sizes `1 <= first <= second <= 64`.
//!
//! `cargo run --example audit_vectors > target/audit-vectors.json`
//!
//! The log is a real one (SQLite store, writer thread, signed checkpoints)
//! in a temp dir; each record is appended alone, so each size has its own
//! checkpoint.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use verdict::audit::{AuditLog, AuditRecord, ConsistencyDocument, RecordKind};
use verdict::config::AuditConfig;

const SIZE: u64 = 64;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let cfg = AuditConfig {
        origin: Some("verdict.test/vectors".into()),
        max_wait: std::time::Duration::ZERO,
        max_batch: 512,
        witnesses: Vec::new(),
        capture_inputs: true,
        input_retention: std::time::Duration::from_secs(7 * 86_400),
        export: None,
    };
    let log = AuditLog::open(&dir.path().join("verdict.db"), dir.path(), &cfg)?;
    let mut leaves = Vec::new();
    for i in 0..SIZE {
        let mut r = AuditRecord::new(RecordKind::Decision);
        r.request_id = Some(format!("vector-{i}"));
        r.decision = Some("allow".into());
        let receipt = log.append(r).await?;
        leaves.push(receipt.record_hash);
    }
    let mut checkpoints = serde_json::Map::new();
    for size in 0..=SIZE {
        let note = log
            .checkpoint_at(size)
            .await?
            .ok_or_else(|| format!("no checkpoint of size {size}"))?;
        checkpoints.insert(size.to_string(), note.into());
    }
    let mut proofs = Vec::new();
    for first in 1..=SIZE {
        for second in first..=SIZE {
            let proof = log
                .consistency(first, second)
                .await?
                .ok_or_else(|| format!("no proof {first}..{second}"))?;
            proofs.push(ConsistencyDocument::new(first, second, &proof));
        }
    }
    let docs = verdict::audit::keys::load_docs(dir.path())?;
    let key = docs.first().ok_or("no key")?.public_key()?;
    log.shutdown().await;
    let out = serde_json::json!({
        "origin": "verdict.test/vectors",
        "public_key": B64.encode(key),
        "leaves": leaves,
        "checkpoints": checkpoints,
        "proofs": proofs,
    });
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}
