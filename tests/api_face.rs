//! Tests of the native API, the review console and the command line against
//! real servers on 127.0.0.1:0: verify, authorize, explain, batch jobs, audit
//! records and proofs, witnesses, backups, reviews and their notifications,
//! replay and shadow policies, keys and scopes.
//!
//! One test binary of a few (see Cargo.toml): each module is one file of
//! tests/, named as before, so `cargo test --test api_face -- MODULE::` runs one.

// Tests may panic on setup failures, and a test reads as one scenario, top
// to bottom: the unwrap and 100-line limits are for src/.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

mod held;
mod support;

mod api_errors;
mod audit_api;
mod audit_http;
mod audit_search;
mod authorize;
mod authzen;
mod backup;
mod batch;
mod console;
mod console_browser;
mod decision_log;
mod explain_api;
mod foundation;
mod replay;
mod review_access;
mod review_cli;
mod review_notify;
mod security;
mod shadow;
mod verify;
mod witness;
