//! A simple witness over the shared store: every replica publishes its
//! signed audit checkpoints to the `verdict_checkpoints` table, and
//! `verdict audit verify-remote --store URL` checks that each replica's
//! checkpoints only grow and stay consistent.
//!
//! The audit log itself stays per replica: each replica signs its own log
//! with its own key, and a decision's record is written to a local file
//! before the decision is returned. Sharing the log would put a network
//! round trip and one writer for every replica on every decision. What the
//! replicas share instead is the evidence that no log was rewritten: each
//! published checkpoint carries the key that signed it and the RFC 6962
//! consistency proof from the replica's previous published checkpoint, so
//! anyone with read access to the store can check every chain without
//! trusting the replicas that wrote it (beyond the keys they published).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::audit::keys::parse_key_json;
use crate::audit::note::{self, Checkpoint};
use crate::audit::{self, AuditLog, ConsistencyDocument, PublishedCheckpoint};
use crate::store::postgres::{error_text, SharedStore};

/// How often a replica publishes its newest checkpoint (when it grew).
pub const PUBLISH_EVERY: Duration = Duration::from_secs(5);

/// Publishes this replica's newest checkpoint every [`PUBLISH_EVERY`]
/// until shutdown, and once more then; a failure is logged and retried
/// next time.
pub async fn publish_until(
    audit: AuditLog,
    shared: SharedStore,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(PUBLISH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stopping = tokio::select! {
            _ = tick.tick() => false,
            _ = shutdown.wait_for(|s| *s) => true,
        };
        match publish_once(&audit, &shared).await {
            Ok(Some(size)) => tracing::debug!(tree_size = size, "audit checkpoint published"),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "cannot publish the audit checkpoint"),
        }
        if stopping {
            return;
        }
    }
}

/// Refuses a log that is behind what the store already holds for its
/// origin: a replica whose data dir was lost or replaced starts a new log
/// under an origin whose checkpoints it (or another replica) published, and
/// every later checkpoint would then fork that chain. Called at start.
pub async fn check_not_behind(audit: &AuditLog, shared: &SharedStore) -> Result<(), String> {
    // The origin its checkpoints are published under; for a log with none
    // yet, the one its signing key names.
    let (origin, local) = match audit.checkpoint().await.map_err(|e| e.to_string())? {
        Some(text) => {
            let note = note::parse(&text).map_err(|e| e.to_string())?;
            let c = Checkpoint::parse(note.text).map_err(|e| e.to_string())?;
            (c.origin.to_string(), c.size)
        }
        None => {
            let keys = audit.keys();
            match keys.iter().find_map(|k| k.note_name()) {
                Some(o) => (o.to_string(), 0),
                None => return Ok(()),
            }
        }
    };
    let client = shared.client().await.map_err(|e| e.to_string())?;
    let stored: Option<i64> = client
        .query_one(
            "SELECT MAX(tree_size) FROM verdict_checkpoints WHERE origin = $1",
            &[&origin],
        )
        .await
        .map_err(|e| error_text(&e))?
        .try_get(0)
        .map_err(|e| error_text(&e))?;
    match stored.and_then(|s| u64::try_from(s).ok()) {
        Some(published) if published > local => Err(format!(
            "the shared store holds checkpoints of audit origin {origin:?} up to tree size \
             {published}, but this log has {local} records: it is another log under the same \
             origin, or this one rolled back. Restore this replica's data dir, or give its log \
             its own [audit] origin"
        )),
        _ => Ok(()),
    }
}

/// Publishes the newest checkpoint if the store has none of this size yet;
/// returns its size when it did.
pub async fn publish_once(audit: &AuditLog, shared: &SharedStore) -> Result<Option<u64>, String> {
    let Some(note_text) = audit.checkpoint().await.map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let note = note::parse(&note_text).map_err(|e| e.to_string())?;
    let checkpoint = Checkpoint::parse(note.text).map_err(|e| e.to_string())?;
    // The empty tree proves nothing and has no consistency proof to the
    // next: the chain starts at the first record.
    if checkpoint.size == 0 {
        return Ok(None);
    }
    // The key that signed it, among the log's published keys.
    let key = audit
        .keys()
        .into_iter()
        .find(|k| {
            parse_key_json(&serde_json::to_string(k).unwrap_or_default()).is_ok_and(|(pk, _)| {
                matches!(note.verified_by(&checkpoint.origin, &pk), Ok(Some(_)))
            })
        })
        .ok_or("the newest checkpoint is signed by no published key")?;
    let key_json = serde_json::to_string(&key).map_err(|e| e.to_string())?;
    let client = shared.client().await.map_err(|e| e.to_string())?;
    let previous: Option<i64> = client
        .query_one(
            "SELECT MAX(tree_size) FROM verdict_checkpoints WHERE origin = $1",
            &[&checkpoint.origin],
        )
        .await
        .map_err(|e| error_text(&e))?
        .try_get(0)
        .map_err(|e| error_text(&e))?;
    let size = i64::try_from(checkpoint.size).map_err(|_| "tree size out of range")?;
    let proof_json = match previous {
        Some(p) if p >= size => return Ok(None),
        Some(p) => {
            let first = u64::try_from(p).map_err(|_| "stored tree size out of range")?;
            let proof = audit
                .consistency(first, checkpoint.size)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| {
                    format!("no consistency proof from size {first}: the log is smaller")
                })?;
            Some(
                serde_json::to_string(&ConsistencyDocument::new(first, checkpoint.size, &proof))
                    .map_err(|e| e.to_string())?,
            )
        }
        None => None,
    };
    let inserted = client
        .execute(
            "INSERT INTO verdict_checkpoints (origin, tree_size, note, key_json, proof_json, replica) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (origin, tree_size) DO NOTHING",
            &[
                &checkpoint.origin,
                &size,
                &note_text,
                &key_json,
                &proof_json,
                &shared.replica(),
            ],
        )
        .await
        .map_err(|e| error_text(&e))?;
    Ok((inserted == 1).then_some(checkpoint.size))
}

/// What `verify-remote` found for one log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub origin: String,
    /// The chain's summary, or why it fails.
    pub result: Result<audit::ChainSummary, String>,
}

/// Reads every published checkpoint and checks each log's chain.
pub async fn verify_remote(client: &tokio_postgres::Client) -> Result<Vec<Verdict>, String> {
    let rows = client
        .query(
            "SELECT origin, note, key_json, proof_json FROM verdict_checkpoints \
             ORDER BY origin, tree_size",
            &[],
        )
        .await
        .map_err(|e| error_text(&e))?;
    let mut chains: BTreeMap<String, Vec<PublishedCheckpoint>> = BTreeMap::new();
    for r in rows {
        let origin: String = r.try_get(0).map_err(|e| error_text(&e))?;
        chains.entry(origin).or_default().push(PublishedCheckpoint {
            note: r.try_get(1).map_err(|e| error_text(&e))?,
            key_json: r.try_get(2).map_err(|e| error_text(&e))?,
            proof_json: r.try_get(3).map_err(|e| error_text(&e))?,
        });
    }
    Ok(chains
        .into_iter()
        .map(|(origin, chain)| Verdict {
            result: audit::verify_published_chain(&chain),
            origin,
        })
        .collect())
}
