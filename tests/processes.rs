//! Tests that run several real processes on one store, or kill them: two
//! replicas on one PostgreSQL database, the shared-store test support, crash
//! safety of the audit log and of batch jobs, and the job store on its own.
//!
//! One test binary of a few (see Cargo.toml): each module is one file of
//! tests/, named as before, so `cargo test --test processes -- MODULE::` runs one.

// Tests may panic on setup failures, and a test reads as one scenario, top
// to bottom: the unwrap and 100-line limits are for src/.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

mod support;

mod audit_crash;
mod batch_kill;
mod jobs_store;
mod postgres_support;
mod replicas;
