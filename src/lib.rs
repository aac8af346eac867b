//! verdict: a sidecar that gates actions with evidence.
//!
//! # Layout
//! - [`config`]: the TOML file, defaults and flags merged into one [`config::Config`].
//! - [`audit`]: the tamper-evident audit log (Merkle tree, signed checkpoints, SQLite).
pub mod audit;
pub mod config;
