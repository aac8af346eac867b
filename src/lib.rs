//! verdict: a sidecar that gates actions with evidence.
//!
//! # Layout
//! - [`config`]: the TOML file, defaults and flags merged into one [`config::Config`].
//! - [`engine`]: PURE claim verification: claims + sources → checks, and LLM answers → claims.
pub mod config;
pub mod engine;
