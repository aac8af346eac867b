//! Tests that run several real processes on one store, or kill them: two
//! replicas on one PostgreSQL database, the shared-store test support, crash
//! safety of the audit log and of batch jobs, and the job store on its own.
//!
//! One test binary of a few (see Cargo.toml): each module is one file of
//! tests/, named as before, so `cargo test --test processes -- MODULE::` runs one.

#![allow(clippy::unwrap_used)] // tests may panic on setup failures
// A test reads as one scenario, top to bottom; the 100-line limit is for src/.
#![allow(clippy::too_many_lines)]

mod support;

mod audit_crash;
mod batch_kill;
mod jobs_store;
mod postgres_support;
mod replicas;
