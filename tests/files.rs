//! Tests that read files and run the engine or the offline door, with no
//! server: the docs against the code, the examples, the OpenAPI file, the
//! engine and policy case corpora, the blind batches, the adversarial corpus,
//! metamorphic properties and the proof-checking script.
//!
//! One test binary of a few (see Cargo.toml): each module is one file of
//! tests/, named as before, so `cargo test --test files -- MODULE::` runs one.

// Tests may panic on setup failures, and a test reads as one scenario, top
// to bottom: the unwrap and 100-line limits are for src/.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

mod support;

mod adversarial;
mod api_doc;
mod blind_batches;
mod docs;
mod engine_cases;
mod examples;
mod metamorphic;
mod openapi;
mod policy_cases;
mod verify_proof_script;
