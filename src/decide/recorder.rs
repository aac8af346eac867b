//! Where a decision's audit record goes: the durable log, or nowhere.
//!
//! A server decides only with its durable log: every door it runs that
//! decides (the API, the proxy) gets its handles from
//! `runtime::App::decide_handles`, which always records to
//! [`Recorder::Durable`], and a decision is not returned before its record is
//! durable (an append that fails is a `DecideError::Unavailable`, and the
//! gated action does not happen). `verdict test` and `verdict explain`
//! decide offline, on a test case: nothing is enforced, so nothing needs a
//! record, and a developer's laptop has no log to write to. They use
//! [`Recorder::Discard`], which builds and canonicalizes the record exactly
//! as the log would (so a record the log would refuse fails the same way)
//! and then drops it. `scripts/check-layers.sh` refuses `Recorder::Discard`
//! anywhere but here and in the offline door (`src/offline`).

use crate::audit::record::{hash_string, record_hash};
use crate::audit::{AuditError, AuditLog, AuditRecord, CapturedInput, Receipt};

/// The `key_id` of a receipt for a record that was not stored: it proves
/// nothing.
pub const UNRECORDED: &str = "unrecorded";

/// Where [`super::authorize()`] and [`super::refuse`] put the record of a
/// decision before they return it.
#[derive(Clone, Copy)]
pub enum Recorder<'a> {
    /// The server's tamper-evident log: the decision is returned only once
    /// its record is durable and covered by a signed checkpoint.
    Durable(&'a AuditLog),
    /// Offline decisions (`verdict test`, `verdict explain`): the record is
    /// built and canonicalized, then dropped; the receipt proves nothing
    /// (`key_id` [`UNRECORDED`], an empty tree).
    Discard,
}

impl Recorder<'_> {
    /// Records `record`, with the decision's captured input if there is one
    /// (dropped with the record by [`Recorder::Discard`]), and returns its
    /// receipt.
    pub async fn append(
        &self,
        record: AuditRecord,
        input: Option<CapturedInput>,
    ) -> Result<Receipt, AuditError> {
        match self {
            Recorder::Durable(log) => log.append_with_input(record, input).await,
            Recorder::Discard => {
                let canonical = record
                    .canonical()
                    .map_err(|e| AuditError::InvalidRecord(e.to_string()))?;
                Ok(Receipt {
                    record_id: record.record_id,
                    record_hash: hash_string(&record_hash(&canonical)),
                    key_id: UNRECORDED.to_string(),
                    merkle_root: String::new(),
                    leaf_index: 0,
                    tree_size: 0,
                    proof: Vec::new(),
                })
            }
        }
    }

    /// Whether records are kept: `true` for every server door.
    pub fn is_durable(&self) -> bool {
        matches!(self, Recorder::Durable(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::RecordKind;

    #[tokio::test]
    async fn discard_checks_the_record_as_the_log_would() {
        let mut record = AuditRecord::new(RecordKind::Decision);
        let receipt = Recorder::Discard.append(record.clone(), None).await;
        let receipt = receipt.expect("a valid record is accepted");
        assert_eq!(receipt.key_id, UNRECORDED);
        assert_eq!(receipt.record_id, record.record_id);
        assert!(receipt.proof.is_empty() && receipt.tree_size == 0);
        record.coverage_score = Some(f64::NAN);
        let refused = Recorder::Discard.append(record, None).await;
        assert!(
            matches!(refused, Err(AuditError::InvalidRecord(_))),
            "{refused:?}"
        );
        assert!(!Recorder::Discard.is_durable());
    }
}
