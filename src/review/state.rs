//! The review state machine, as pure functions: no IO, no clock, no storage.
//!
//! Every change the store makes to a review goes through one of these
//! functions first, so the rules of the hold workflow live in one screen and
//! are tested as plain tables: a resolution is single-use, a pending review
//! past its deadline is expired (and counts as rejected), and only an approved
//! review may claim its forward, exactly once (a record-only review, which
//! holds no call, never). The clock is an argument (`now`), never read here.

use std::time::SystemTime;

use serde::Serialize;

/// Where a review stands. `Expired` counts as rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewStatus {
    Pending,
    Approved,
    Rejected,
    Expired,
}

/// Where the exactly-once forward of an approved review stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ForwardState {
    /// Nobody has claimed the forward yet.
    NotStarted,
    /// Claimed: a forward is (or was) in flight. Never goes back.
    Started,
    /// The upstream answered with this status.
    Done { status: u16 },
    /// The forward was claimed but its result is unknown: it failed on the
    /// way, or the process restarted while it was in flight. Never retried.
    OutcomeUnknown,
}

/// A reviewer's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Approve,
    Reject,
}

/// Why a resolution was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolveRefusal {
    /// The review was resolved before (approved, rejected or expired).
    AlreadyResolved(ReviewStatus),
    /// The review was pending but its deadline has passed: it is expired now.
    Expired,
    /// This approver approved it before; another person must.
    AlreadyApprovedBy,
}

/// What an approval does to a review that needs `required` distinct
/// approvers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approval {
    /// Recorded; the review stays pending until `required` people approved.
    Partial { approvals: u32 },
    /// This was the last approval needed: the review is approved.
    Complete,
}

/// Counts approval `by` against the approvers so far: each person counts
/// once, and the `required`-th distinct one completes the review.
pub fn approve(so_far: &[&str], by: &str, required: u32) -> Result<Approval, ResolveRefusal> {
    if so_far.contains(&by) {
        return Err(ResolveRefusal::AlreadyApprovedBy);
    }
    let approvals = u32::try_from(so_far.len())
        .unwrap_or(u32::MAX)
        .saturating_add(1);
    Ok(if approvals >= required {
        Approval::Complete
    } else {
        Approval::Partial { approvals }
    })
}

/// Why a forward claim was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimRefusal {
    /// Only an approved review may be forwarded.
    NotApproved(ReviewStatus),
    /// The forward was claimed before.
    AlreadyClaimed(ForwardState),
    /// A record-only review: verdict holds no call, so there is nothing to
    /// forward, approved or not.
    RecordOnly,
}

/// How a claimed forward ended, without its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardEnd {
    /// The upstream answered with this status.
    Done { status: u16 },
    /// The forward failed; whether the upstream saw it is unknown.
    Failed,
}

/// Why finishing a forward was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinishRefusal(pub ForwardState);

// === impl ReviewStatus ===

impl ReviewStatus {
    pub const ALL: [ReviewStatus; 4] = [
        ReviewStatus::Pending,
        ReviewStatus::Approved,
        ReviewStatus::Rejected,
        ReviewStatus::Expired,
    ];

    /// The name used on the wire and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewStatus::Pending => "pending",
            ReviewStatus::Approved => "approved",
            ReviewStatus::Rejected => "rejected",
            ReviewStatus::Expired => "expired",
        }
    }

    /// Parses a wire or database name, e.g. the `?status=` of the Review API.
    pub fn parse(s: &str) -> Option<ReviewStatus> {
        ReviewStatus::ALL.into_iter().find(|st| st.as_str() == s)
    }

    pub fn is_resolved(self) -> bool {
        self != ReviewStatus::Pending
    }
}

impl std::fmt::Display for ReviewStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl ForwardState ===

impl ForwardState {
    /// The name used on the wire and in the database (without the status).
    pub fn as_str(self) -> &'static str {
        match self {
            ForwardState::NotStarted => "not_started",
            ForwardState::Started => "started",
            ForwardState::Done { .. } => "done",
            ForwardState::OutcomeUnknown => "outcome_unknown",
        }
    }

    /// Rebuilds a state from its database name and the stored upstream status.
    pub fn parse(name: &str, upstream_status: Option<u16>) -> Option<ForwardState> {
        match (name, upstream_status) {
            ("not_started", _) => Some(ForwardState::NotStarted),
            ("started", _) => Some(ForwardState::Started),
            ("done", Some(status)) => Some(ForwardState::Done { status }),
            ("outcome_unknown", _) => Some(ForwardState::OutcomeUnknown),
            _ => None,
        }
    }
}

// === transitions ===

/// The status a reader sees at `now`: a pending review at or past its
/// deadline is expired even before the sweeper has written it down.
pub fn effective_status(
    status: ReviewStatus,
    expires_at: SystemTime,
    now: SystemTime,
) -> ReviewStatus {
    match status {
        ReviewStatus::Pending if now >= expires_at => ReviewStatus::Expired,
        other => other,
    }
}

/// A reviewer resolves a review: pending → approved | rejected. Single use.
pub fn resolve(
    status: ReviewStatus,
    expires_at: SystemTime,
    now: SystemTime,
    verdict: Verdict,
) -> Result<ReviewStatus, ResolveRefusal> {
    match effective_status(status, expires_at, now) {
        ReviewStatus::Pending => Ok(match verdict {
            Verdict::Approve => ReviewStatus::Approved,
            Verdict::Reject => ReviewStatus::Rejected,
        }),
        // INVARIANT: an expired review answers "expired", whether the sweeper
        // wrote it down already or the deadline passed just now.
        ReviewStatus::Expired => Err(ResolveRefusal::Expired),
        resolved => Err(ResolveRefusal::AlreadyResolved(resolved)),
    }
}

/// The sweeper (or a reader) expires a review: `Some(Expired)` when a pending
/// review is at or past its deadline, `None` when nothing changes.
pub fn expire(
    status: ReviewStatus,
    expires_at: SystemTime,
    now: SystemTime,
) -> Option<ReviewStatus> {
    (status == ReviewStatus::Pending && now >= expires_at).then_some(ReviewStatus::Expired)
}

/// Claims the forward: approved + not_started → started. Exactly once, and
/// never for a review that does not `forwards` (a record-only one).
pub fn claim(
    status: ReviewStatus,
    forward: ForwardState,
    forwards: bool,
) -> Result<ForwardState, ClaimRefusal> {
    match (status, forward) {
        _ if !forwards => Err(ClaimRefusal::RecordOnly),
        (ReviewStatus::Approved, ForwardState::NotStarted) => Ok(ForwardState::Started),
        (ReviewStatus::Approved, other) => Err(ClaimRefusal::AlreadyClaimed(other)),
        (other, _) => Err(ClaimRefusal::NotApproved(other)),
    }
}

/// Records how a claimed forward ended: started → done | outcome_unknown.
pub fn finish(forward: ForwardState, end: ForwardEnd) -> Result<ForwardState, FinishRefusal> {
    match forward {
        ForwardState::Started => Ok(match end {
            ForwardEnd::Done { status } => ForwardState::Done { status },
            ForwardEnd::Failed => ForwardState::OutcomeUnknown,
        }),
        other => Err(FinishRefusal(other)),
    }
}

/// After a restart: a forward left `started` may or may not have reached the
/// upstream, so it becomes `outcome_unknown` and is never retried.
pub fn recover(forward: ForwardState) -> ForwardState {
    match forward {
        ForwardState::Started => ForwardState::OutcomeUnknown,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use ForwardState as F;
    use ReviewStatus as S;

    /// A finished forward; its status is the upstream's.
    const DONE: ForwardState = F::Done { status: 502 };

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn approvals_count_distinct_people() {
        assert_eq!(approve(&[], "a", 1), Ok(Approval::Complete));
        assert_eq!(approve(&[], "a", 2), Ok(Approval::Partial { approvals: 1 }));
        assert_eq!(approve(&["a"], "b", 2), Ok(Approval::Complete));
        assert_eq!(
            approve(&["a"], "a", 2),
            Err(ResolveRefusal::AlreadyApprovedBy)
        );
        assert_eq!(
            approve(&["a", "b"], "c", 4),
            Ok(Approval::Partial { approvals: 3 })
        );
    }

    #[test]
    fn resolve_table() {
        use ResolveRefusal as R;
        use Verdict::{Approve, Reject};
        let exp = t(100);
        let resolved = |s| Err(R::AlreadyResolved(s));
        let cases = [
            // (status, now, verdict, expected)
            (S::Pending, t(99), Approve, Ok(S::Approved)),
            (S::Pending, t(99), Reject, Ok(S::Rejected)),
            (S::Pending, t(100), Approve, Err(R::Expired)),
            (S::Pending, t(500), Reject, Err(R::Expired)),
            (S::Approved, t(99), Approve, resolved(S::Approved)),
            (S::Approved, t(99), Reject, resolved(S::Approved)),
            (S::Rejected, t(99), Approve, resolved(S::Rejected)),
            (S::Rejected, t(500), Reject, resolved(S::Rejected)),
            (S::Expired, t(99), Approve, Err(R::Expired)),
            (S::Expired, t(500), Reject, Err(R::Expired)),
        ];
        for (status, now, verdict, want) in cases {
            assert_eq!(
                resolve(status, exp, now, verdict),
                want,
                "{status:?} at {now:?} {verdict:?}"
            );
        }
    }

    #[test]
    fn expire_and_effective_status_table() {
        let exp = t(100);
        let cases = [
            // (status, now, expire(), effective_status())
            (S::Pending, t(99), None, S::Pending),
            (S::Pending, t(100), Some(S::Expired), S::Expired),
            (S::Pending, t(101), Some(S::Expired), S::Expired),
            (S::Approved, t(101), None, S::Approved),
            (S::Rejected, t(101), None, S::Rejected),
            (S::Expired, t(101), None, S::Expired),
            (S::Expired, t(1), None, S::Expired),
        ];
        for (status, now, want_expire, want_effective) in cases {
            assert_eq!(
                expire(status, exp, now),
                want_expire,
                "{status:?} at {now:?}"
            );
            assert_eq!(
                effective_status(status, exp, now),
                want_effective,
                "{status:?} at {now:?}"
            );
        }
    }

    #[test]
    fn claim_table() {
        use ClaimRefusal as C;
        let cases = [
            (S::Approved, F::NotStarted, Ok(F::Started)),
            (S::Approved, F::Started, Err(C::AlreadyClaimed(F::Started))),
            (S::Approved, DONE, Err(C::AlreadyClaimed(DONE))),
            (
                S::Approved,
                F::OutcomeUnknown,
                Err(C::AlreadyClaimed(F::OutcomeUnknown)),
            ),
            (S::Pending, F::NotStarted, Err(C::NotApproved(S::Pending))),
            (S::Rejected, F::NotStarted, Err(C::NotApproved(S::Rejected))),
            (S::Expired, F::NotStarted, Err(C::NotApproved(S::Expired))),
        ];
        for (status, forward, want) in cases {
            assert_eq!(claim(status, forward, true), want, "{status:?} {forward:?}");
            // INVARIANT: a record-only review is never claimed, whatever
            // its status.
            assert_eq!(
                claim(status, forward, false),
                Err(C::RecordOnly),
                "record-only {status:?} {forward:?}"
            );
        }
    }

    #[test]
    fn finish_table() {
        let cases = [
            (F::Started, ForwardEnd::Done { status: 502 }, Ok(DONE)),
            (F::Started, ForwardEnd::Failed, Ok(F::OutcomeUnknown)),
            // INVARIANT: nothing ever leads back to not_started or started.
            (
                F::NotStarted,
                ForwardEnd::Failed,
                Err(FinishRefusal(F::NotStarted)),
            ),
            (
                DONE,
                ForwardEnd::Done { status: 200 },
                Err(FinishRefusal(DONE)),
            ),
            (
                F::OutcomeUnknown,
                ForwardEnd::Done { status: 200 },
                Err(FinishRefusal(F::OutcomeUnknown)),
            ),
        ];
        for (forward, end, want) in cases {
            assert_eq!(finish(forward, end), want, "{forward:?} {end:?}");
        }
    }

    #[test]
    fn recover_table() {
        let cases = [
            (F::NotStarted, F::NotStarted),
            (F::Started, F::OutcomeUnknown),
            (DONE, DONE),
            (F::OutcomeUnknown, F::OutcomeUnknown),
        ];
        for (from, want) in cases {
            assert_eq!(recover(from), want, "{from:?}");
        }
    }

    #[test]
    fn names_round_trip() {
        for s in ReviewStatus::ALL {
            assert_eq!(ReviewStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(ReviewStatus::parse("Pending"), None);
        for f in [
            F::NotStarted,
            F::Started,
            F::Done { status: 204 },
            F::OutcomeUnknown,
        ] {
            let status = match f {
                F::Done { status } => Some(status),
                _ => None,
            };
            assert_eq!(ForwardState::parse(f.as_str(), status), Some(f));
        }
        assert_eq!(ForwardState::parse("done", None), None);
        assert_eq!(ForwardState::parse("bogus", Some(1)), None);
    }
}
